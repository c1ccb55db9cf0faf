#!/usr/bin/env python3
"""Issue 22 part 2: the same topic read by Spark's own Kafka source through a broker and by kafka-log from
the broker's log dir, in one run, on local[2]; prints seconds (median) and the ratio Kafka / kafka-log.

    make broker-jars && .venv/bin/python bench/bench_spark_kafka.py [--mb 200] [--codec lz4] [--runs 3]

A real broker (tests/broker/harness.py) gets one topic of 2 partitions filled by Kafka's own
ProducerPerformance (100-byte values, 16 KiB batches). Spark's Kafka source (tests/broker/spark-kafka-pom.xml,
spark.jars) reads it while the broker runs; then the broker stops cleanly and kafka-log reads the log dir.
Queries: count(); the pruned count (offset and timestamp only: kafka-log reads a narrower schema, Spark's
Kafka source prunes after fetching); a full-row aggregate; a filtered query (one partition, the last quarter).
Beside each median wall time, the median CPU seconds of the process tree (the Spark JVM, its Python workers
and, while Spark's Kafka source reads, the broker serving it): on a machine shared with other work the wall
time grows with the load, the CPU time much less.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_spark import tree_cpu  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200, help="topic size in MB of values (default 200)")
    ap.add_argument("--codec", default="lz4")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()

    from pyspark.sql import functions as F

    from kltool.spark import session
    from tests.broker import harness
    from tests.broker.test_spark_kafka_parity import spark_kafka_jars

    why = harness.missing()
    if why:
        sys.exit(why)
    jars = spark_kafka_jars()
    n = a.mb * 1_000_000 // 100
    topic, parts = "bench", 2
    b = harness.Broker(Path(tempfile.mkdtemp(prefix="kltool-bench-kafka-")))
    b.start()
    try:
        b.create_topic(topic, parts, {"segment.bytes": str(256 << 20)})
        t0 = time.monotonic()
        harness.run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(n),
                         "--record-size", "100", "--throughput", "-1", "--producer-props",
                         f"bootstrap.servers={b.bootstrap}", f"compression.type={a.codec}", "batch.size=16384",
                         "linger.ms=5", "acks=1", timeout=1800)
        print(f"produced {n:,} records ({a.mb} MB of values, {a.codec}) in {time.monotonic() - t0:.1f} s")
        spark = session("local[2]", "kltool-bench-kafka", conf={"spark.jars": ",".join(jars),
                                                                "spark.sql.shuffle.partitions": "2"})
        lo = n // parts * 3 // 4

        def queries(load):
            return {
                "count": lambda: load().count(),
                "pruned count": lambda: load().select("offset", "timestamp").agg(
                    F.count("*"), F.max("offset")).collect()[0][0],
                "full-row aggregate": lambda: load().agg(
                    F.count("*"), F.sum(F.length("key")), F.sum(F.length("value")), F.max("timestamp"),
                    F.countDistinct("partition")).collect()[0][0],
                "filtered query": lambda: load().where(f"partition = 0 AND offset >= {lo}").count(),
            }

        def kafka_load():
            return (spark.read.format("kafka").option("kafka.bootstrap.servers", b.bootstrap)
                    .option("subscribe", topic).load())

        def timed(qs):
            out = {}
            for name, q in qs.items():
                q()  # warm-up (JIT, Python workers)
                ts, cs, res = [], [], None
                for _ in range(a.runs):
                    t, c = time.perf_counter(), tree_cpu()
                    res = q()
                    ts.append(time.perf_counter() - t)
                    cs.append(tree_cpu() - c)
                out[name] = (statistics.median(ts), res, statistics.median(cs))
                print(f"  {name}: {out[name][0]:.2f} s, CPU {out[name][2]:.2f} s, load {os.getloadavg()[0]:.1f}",
                      flush=True)
            return out

        print(f"load before: {os.getloadavg()}\nSpark's Kafka source:", flush=True)
        kafka = timed(queries(kafka_load))
        b.stop()
        logdir = str(b.logdir)

        def kl_load():
            return spark.read.format("kafka-log").option("path", logdir).option("subscribe", topic).load()

        print("kafka-log:", flush=True)
        kl = timed(queries(kl_load))
        # kafka-log's own pruned count reads only the columns of a narrower schema
        q = {"pruned count (schema)": lambda: spark.read.format("kafka-log").schema("offset LONG, timestamp TIMESTAMP")
             .option("path", logdir).option("subscribe", topic).load().agg(F.count("*"), F.max("offset"))
             .collect()[0][0]}
        kl.update(timed(q))
        kafka["pruned count (schema)"] = kafka["pruned count"]
        spark.stop()
    finally:
        b.stop()
        b.kill()

    print(f"\n{n:,} records, {a.mb} MB of values, {a.codec}, local[2], median of {a.runs}; load after "
          f"{os.getloadavg()}\n")
    print("| query | Spark's Kafka source (s) | kafka-log (s) | ratio | CPU s: Kafka (with the broker) | kafka-log "
          "| CPU ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in kl:
        (ks, kres, kc), (ls, lres, lc) = kafka[name], kl[name]
        assert kres == lres, f"{name}: Kafka gives {kres}, kafka-log {lres}"
        print(f"| {name} | {ks:.2f} | {ls:.2f} | {ks / ls:.1f}x | {kc:.2f} | {lc:.2f} | {kc / lc:.1f}x |")


if __name__ == "__main__":
    main()
