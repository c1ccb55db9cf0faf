#!/usr/bin/env python3
"""Records/s of the ``kafka-log`` Spark data source against a plain Python loop over the same files.

    .venv/bin/python bench/bench_spark.py                      # 1,000,000 records in 4 segments
    .venv/bin/python bench/bench_spark.py --records 200000 --runs 3 --codec lz4

Writes one partition (``bench/out/spark-<codec>-<records>/t-0/``) of ``--segments`` segments with
``kltool.format.build_batch`` (``--batch`` records per batch, key ``key-<n>``, ``--value-size``-byte
values, one header on every 10th record), then times, median of ``--runs`` after one warm-up run:

  python-loop    walk() + decode_records() per segment, materialising every record's offset,
                 timestamp, key, value and headers as Python objects (what a script would do)
  reader-arrow   the data source's own read path (plan + read_partition_rows -> pyarrow.RecordBatch)
                 in this process, without Spark
  spark          spark.read.format("kafka-log").load() on --master (default local[*]), forced with
                 an aggregate over every column (count, sum of key/value lengths, max offset,
                 headers seen); the session start is timed apart

Every reader must see the same record count, else the run aborts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from kltool.format import build_batch, decode_records  # noqa: E402
from kltool.format.compression import CODEC_IDS  # noqa: E402
from kltool.storage import Damage, open_paths, walk  # noqa: E402

TS_BASE = 1_700_000_000_000


def generate(pdir: Path, n: int, segments: int, batch: int, codec: int, value_size: int) -> None:
    """``segments`` .log files holding offsets 0..n-1; skipped when already there."""
    done = pdir / ".complete"
    if done.exists():
        return
    pdir.mkdir(parents=True, exist_ok=True)
    for f in pdir.glob("*.log"):
        f.unlink()
    per_seg = -(-n // segments)
    pad = (b"0123456789abcdef" * (value_size // 16 + 1))[:max(0, value_size - 12)]
    for s in range(segments):
        lo, hi = s * per_seg, min(n, (s + 1) * per_seg)
        if lo >= hi:
            break
        with open(pdir / f"{lo:020d}.log", "wb") as f:
            for b in range(lo, hi, batch):
                recs = [(i - b, TS_BASE + i, b"key-%d" % i, b"value-%06d" % (i % 1000000) + pad,
                         [("trace", b"t-%d" % i)] if i % 10 == 0 else ())
                        for i in range(b, min(hi, b + batch))]
                f.write(build_batch(recs, base_offset=b, compression=codec))
    done.write_text("ok\n")


def python_loop(pdir: Path) -> int:
    n = 0
    for p in open_paths([str(pdir)]).partitions:
        for seg in p.segments:
            for h in walk(seg.log_path, with_data=True):
                if isinstance(h, Damage) or not h.crc_valid:
                    continue
                cols = decode_records(h)
                offs, tss = cols.offsets, cols.timestamps
                for i in range(len(offs)):
                    _row = (offs[i], tss[i], cols.key(i), cols.value(i), cols.header_list(i) or None)
                    n += 1
    return n


def reader_arrow(pdir: Path) -> int:
    from kltool.spark import datasource as ds

    opts = ds.normalize_options({"path": str(pdir)})
    r = ds.KafkaLogReader(opts)
    return sum(b.num_rows for part in r.partitions() for b in r.read(part))


def spark_read(spark, pdir: Path) -> int:
    from pyspark.sql import functions as F

    df = spark.read.format("kafka-log").option("path", str(pdir)).load()
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("key") + F.length("value")).alias("b"),
                 F.max("offset").alias("o"), F.max("timestamp").alias("t"),
                 F.sum(F.size(F.coalesce("headers", F.array()))).alias("h")).collect()[0]
    return row["n"]


def timed(fn, runs: int, expect: int | None):
    fn()  # warm-up (page cache, imports, Python workers, JIT)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - t0)
        if expect is not None and n != expect:
            raise SystemExit(f"record count mismatch: {n} != {expect}")
    return statistics.median(times), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--segments", type=int, default=4)
    ap.add_argument("--batch", type=int, default=500, help="records per batch")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--codec", default="none", choices=sorted(CODEC_IDS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--skip-spark", action="store_true")
    a = ap.parse_args()

    pdir = HERE / "out" / f"spark-{a.codec}-{a.records}x{a.segments}" / "t-0"
    t0 = time.perf_counter()
    generate(pdir, a.records, a.segments, a.batch, CODEC_IDS[a.codec], a.value_size)
    size = sum(f.stat().st_size for f in pdir.glob("*.log"))
    print(f"data: {pdir} ({a.records:,} records, {a.segments} segments, {size / 2**20:.1f} MiB, codec {a.codec}; "
          f"ready in {time.perf_counter() - t0:.1f}s); cpus {os.cpu_count()}; median of {a.runs} after a warm-up")
    results = []
    secs, n = timed(lambda: python_loop(pdir), a.runs, a.records)
    results.append(("python-loop", secs))
    secs, n = timed(lambda: reader_arrow(pdir), a.runs, a.records)
    results.append(("reader-arrow", secs))
    if not a.skip_spark:
        import tempfile

        from kltool.spark import session

        log = os.path.join(tempfile.gettempdir(), f"kltool-spark-bench-{os.getpid()}.log")
        t0 = time.perf_counter()
        spark = session(a.master, "kltool bench", jvm_log=log)
        start = time.perf_counter() - t0
        try:
            secs, n = timed(lambda: spark_read(spark, pdir), a.runs, a.records)
            results.append((f"spark {a.master}", secs))
        finally:
            spark.stop()
            os.unlink(log)
        print(f"spark session start: {start:.1f}s (not included below)")
    base = results[0][1]
    print(f"{'reader':<22}{'seconds':>10}{'records/s':>14}{'MiB/s':>10}{'vs loop':>10}")
    for name, secs in results:
        print(f"{name:<22}{secs:>10.2f}{a.records / secs:>14,.0f}{size / 2**20 / secs:>10.1f}{base / secs:>9.2f}x")


if __name__ == "__main__":
    main()
