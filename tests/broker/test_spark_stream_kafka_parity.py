"""Issue 22 part 4: ``readStream.format("kafka-log")`` over a running broker's log dir streams what Spark's own
Kafka source streams through the broker: the same rows, micro-batch for micro-batch, and the same offsets in
the checkpoint.

A real broker writes two topics (lz4 and zstd, small segments that roll); one Spark session runs a
``Trigger.AvailableNow`` query with ``maxOffsetsPerTrigger`` through ``format("kafka")`` and the same through
``format("kafka-log")`` on the broker's log dir while the broker runs (read-only: kltool takes no lock). Then
the broker writes more (and rolls segments) and both queries run again from their checkpoints.
"""

from __future__ import annotations

import json
import time

import pytest

from . import harness
from .conftest import _need_broker
from .test_spark_kafka_parity import _record, spark_kafka_jars

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOPICS = {"stream-lz4": "lz4", "stream-zstd": "zstd"}
PARTS = 2
COLUMNS = ["topic", "partition", "offset", "key", "value", "timestamp", "timestampType"]
OPTIONS = {"subscribePattern": "stream-.*", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "70"}
# minOffsetsPerTrigger: the first micro-batch goes through (Spark's last trigger time starts at 0), later ones
# only with at least 100 new offsets (maxTriggerDelay is far off), each capped at 150
MIN_OPTIONS = {"subscribePattern": "stream-.*", "startingOffsets": "earliest", "minOffsetsPerTrigger": "100",
               "maxOffsetsPerTrigger": "150", "maxTriggerDelay": "1h"}


def _produce(b: harness.Broker, start: int, n: int, waves: int = 2) -> None:
    """``n`` records per partition of each topic, in ``waves`` more than segment.ms apart: each wave
    starts a new segment (the broker rolls on the first append after segment.ms)."""
    from kafka import KafkaProducer

    prods = {t: KafkaProducer(**b.kafka_python_args(), compression_type=c, acks="all", linger_ms=5, batch_size=1024)
             for t, c in TOPICS.items()}
    per = n // waves
    for w in range(waves):
        for topic, prod in prods.items():
            for i in range(start + w * per, start + (w + 1) * per):
                for p in range(PARTS):
                    key, value, headers = _record(i, f"{topic}{p}")
                    prod.send(topic, key=key, value=value, headers=headers, partition=p)
            prod.flush()
        time.sleep(1.2)
    for prod in prods.values():
        prod.close()


def _run(spark, reader, ckpt, options=OPTIONS) -> list[list[tuple]]:
    batches: list[list[tuple]] = []

    def each(df, _id):
        rows = df.select(*COLUMNS).collect()
        batches.append(sorted(tuple(bytes(v) if isinstance(v, (bytearray, memoryview)) else v for v in r)
                              for r in rows))

    q = reader.options(**options).load().writeStream.foreachBatch(each).trigger(availableNow=True) \
        .option("checkpointLocation", str(ckpt)).start()
    if not q.awaitTermination(180):
        q.stop()
        batches.append("(still running after 180 s: stopped)")
    return [b for b in batches if b]


def _offsets(ckpt) -> list[dict]:
    """Every source offset in the checkpoint's offsets log, in batch order."""
    d = ckpt / "offsets"
    files = sorted((f for f in d.iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    return [json.loads(f.read_text().splitlines()[2]) for f in files]


@pytest.fixture(scope="module")
def runs(start_broker, tmp_path_factory):
    _need_broker()
    jars = spark_kafka_jars()
    from kltool.spark import session

    work = tmp_path_factory.mktemp("stream-parity")
    b = start_broker(workdir=work / "broker")
    spark = None
    try:
        for t in TOPICS:
            b.create_topic(t, PARTS, {"segment.ms": "1000", "index.interval.bytes": "256"})
        _produce(b, 0, 120)
        spark = session("local[2]", "kltool-stream-parity", conf={
            "spark.jars": ",".join(jars), "spark.sql.shuffle.partitions": "2"})
        out = {}

        def both(tag, ckpt="ckpt", options=OPTIONS):
            kafka = _run(spark, spark.readStream.format("kafka").option("kafka.bootstrap.servers", b.bootstrap),
                         work / f"{ckpt}-kafka", options)
            files = _run(spark, spark.readStream.format("kafka-log").option("path", str(b.logdir)),
                         work / f"{ckpt}-kafka-log", options)
            out[tag] = (kafka, files)

        both("first")
        _produce(b, 120, 80)
        both("again")
        both("min-offsets", "ckpt-min", MIN_OPTIONS)
        out["min-offsets-offsets"] = (_offsets(work / "ckpt-min-kafka"), _offsets(work / "ckpt-min-kafka-log"))
        out["offsets"] = (_offsets(work / "ckpt-kafka"), _offsets(work / "ckpt-kafka-log"))
        out["segments"] = len(list(b.partition_dir("stream-lz4", 0).glob("*.log")))
        assert b.running, "the broker ran through both streams"
        yield out
    finally:
        if spark is not None:
            spark.stop()


@pytest.mark.parametrize("run", ["first", "again", "min-offsets"])
def test_same_micro_batches(runs, run):
    kafka, files = runs[run]
    assert kafka, "Spark's Kafka source read nothing"
    assert [len(b) for b in files] == [len(b) for b in kafka]
    assert files == kafka


def test_every_record_once(runs):
    rows = [r for run in ("first", "again") for b in runs[run][1] for r in b]
    assert len(rows) == len(set(rows)) == len(TOPICS) * PARTS * 200
    assert runs["segments"] > 2  # segments rolled under the stream


def test_same_offsets_in_the_checkpoint(runs):
    kafka, files = runs["offsets"]
    assert len(kafka) > 2  # maxOffsetsPerTrigger made several micro-batches
    assert files == kafka


def test_min_offsets_per_trigger_as_sparks(runs):
    """minOffsetsPerTrigger with maxOffsetsPerTrigger (and a far maxTriggerDelay) under Trigger.AvailableNow:
    the same micro-batches and checkpoint offsets as Spark's Kafka source."""
    kafka, files = runs["min-offsets-offsets"]
    assert len(kafka) > 1
    assert files == kafka
