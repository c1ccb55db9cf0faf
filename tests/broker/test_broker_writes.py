"""Issue 19, scenario a: what a real Kafka 4.x broker wrote, read by kltool.

Topics with every codec, keyed and keyless records, null values, headers, plain, idempotent and
transactional (committed and aborted) producers, several partitions and segments (segment.ms, waves of
produce), a small index.interval.bytes. The broker's answers (a read_uncommitted consumer, ListOffsets) are
taken while it runs; then it is stopped cleanly and kltool reads the log dir. Last, a kill -9 run.
"""

from __future__ import annotations

import base64
import random
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from ..conftest import run_kltool

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTS = 2
TOPIC_CONFIG = {"segment.ms": "1000", "index.interval.bytes": "256", "segment.bytes": str(1 << 20)}
WAVES = 3


def _records(rng: random.Random, n: int, tag: str):
    for i in range(n):
        key = None if i % 4 == 0 else f"{tag}-k{i % 7}".encode()
        if i % 9 == 0 and key is not None:  # kafka-python refuses a record with neither
            value = None
        elif i % 3 == 0:
            value = rng.randbytes(rng.randrange(0, 400))
        else:
            value = (f"{tag}-v{i}-" * rng.randrange(1, 20)).encode()
        headers = [] if i % 2 else [("h1", f"x{i}".encode()), ("bin", rng.randbytes(5)), ("h1", b"")]
        yield key, value, headers


def _produce_waves(producers: list[tuple[KafkaProducer, str, int]], rng: random.Random, waves: int = WAVES):
    """WAVES waves of records, each (producer, topic, records per wave and partition) one batch of sends per wave:
    the topics share the pauses between waves."""
    for w in range(waves):
        for producer, topic, per_wave in producers:
            for p in range(PARTS):
                for key, value, headers in _records(rng, per_wave, f"{topic}-{w}"):
                    producer.send(topic, key=key, value=value, headers=headers, partition=p)
        for producer, _topic, _n in producers:
            producer.flush()
        if w + 1 < waves:
            time.sleep(1.2)  # past segment.ms: the next wave starts a new segment


def _b64(b):
    return None if b is None else base64.b64encode(b).decode()


def _consumed(broker, topic, partition, isolation_level="read_uncommitted"):
    return [
        {"offset": r.offset, "timestamp": r.timestamp, "key": _b64(r.key), "value": _b64(r.value),
         "headers": [{"key": k, "value": _b64(v)} for k, v in r.headers]}
        for r in broker.consume_all(topic, partition, isolation_level)
    ]


def _kltool_records(pdir, *args):
    res = run_kltool("--json", "dump", "--records", "--encoding", "base64", pdir, *args)
    assert res.code == 0, res
    out, control = [], False
    for row in res.json():
        if row["type"] == "batch":
            control = row["is_control"]
        elif row["type"] == "record" and not control:
            out.append({
                "offset": row["offset"], "timestamp": row["timestamp"],
                "key": None if row["key"] is None else row["key"]["base64"],
                "value": None if row["value"] is None else row["value"]["base64"],
                "headers": [{"key": h["key"], "value": None if h["value"] is None else h["value"]["base64"]}
                            for h in row["headers"]],
            })
    return out


def _answers(broker, topics) -> dict:
    """The running broker's answers for every partition of TOPICS: what consumers read (read_committed too for
    txn), offsets for times, the earliest, latest and max-timestamp offsets."""
    expected = {}
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTS)]
    for tp in tps:
        expected[tp] = {"records": _consumed(broker, tp.topic, tp.partition)}
        if tp.topic == "txn":
            expected[tp]["committed"] = _consumed(broker, tp.topic, tp.partition, "read_committed")
    c = KafkaConsumer(**broker.kafka_python_args())
    try:
        begin, end = c.beginning_offsets(tps), c.end_offsets(tps)
        probes = {}
        for tp in tps:
            recs = expected[tp]["records"]
            ts = sorted({r["timestamp"] for r in recs})
            probes[tp] = [0, ts[0] - 1, ts[0], ts[len(ts) // 2], ts[len(ts) // 2] + 1, ts[-1], ts[-1] + 1]
        for i in range(7):
            found = c.offsets_for_times({tp: probes[tp][i] for tp in tps})
            for tp in tps:
                o = found[tp]
                expected[tp].setdefault("by_time", []).append(
                    (probes[tp][i], None if o is None else o.offset, None if o is None else o.timestamp))
    finally:
        c.close()
    for tp in tps:
        expected[tp]["earliest"] = begin[tp]
        expected[tp]["latest"] = end[tp]
    maxts = broker.list_offsets_all("-3")
    for tp in tps:
        expected[tp]["max_timestamp_offset"] = maxts[(tp.topic, tp.partition)]
    return expected


@pytest.fixture(scope="module")
def written(broker):
    """Produce everything, take the broker's answers, stop it cleanly. Returns the expectations."""
    rng = random.Random(19)
    waves = []
    for codec in CODECS:
        t = f"codec-{codec}"
        broker.create_topic(t, PARTS, TOPIC_CONFIG)
        waves.append((KafkaProducer(**broker.kafka_python_args(), compression_type=None if codec == "none" else codec,
                                    enable_idempotence=False, acks=1, linger_ms=20, batch_size=1024), t, 60))
    broker.create_topic("idempotent", PARTS, TOPIC_CONFIG)
    waves.append((KafkaProducer(**broker.kafka_python_args(), enable_idempotence=True, compression_type="lz4",
                                batch_size=2048, linger_ms=20), "idempotent", 50))
    _produce_waves(waves, rng)
    for prod, _t, _n in waves:
        prod.close()
    topics = [t for _p, t, _n in waves]

    broker.create_topic("txn", PARTS, TOPIC_CONFIG)
    prod = KafkaProducer(**broker.kafka_python_args(), transactional_id="kltool-broker-test",
                         compression_type="zstd", linger_ms=5)
    prod.init_transactions()
    for n, outcome in enumerate(["commit", "abort", "commit", "abort", "commit"]):
        prod.begin_transaction()
        for p in range(PARTS):
            for key, value, headers in _records(rng, 15, f"txn{n}"):
                prod.send("txn", key=key, value=value, headers=headers, partition=p)
        prod.flush()
        prod.commit_transaction() if outcome == "commit" else prod.abort_transaction()
    prod.close()
    topics.append("txn")
    # a transaction left open at the end: a read_committed consumer stops at its first offset (the LSO)
    opened = KafkaProducer(**broker.kafka_python_args(), transactional_id="kltool-open", linger_ms=5)
    opened.init_transactions()
    opened.begin_transaction()
    for p in range(PARTS):
        for key, value, headers in _records(rng, 6, "open"):
            opened.send("txn", key=key, value=value, headers=headers, partition=p)
    opened.flush()
    opened.close(timeout=5)
    prod = KafkaProducer(**broker.kafka_python_args(), linger_ms=5)  # and plain records after it
    for p in range(PARTS):
        for key, value, headers in _records(rng, 4, "late"):
            prod.send("txn", key=key, value=value, headers=headers, partition=p)
    prod.close()

    expected = _answers(broker, topics)
    broker.stop()
    assert broker.clean_shutdown_marker().exists()
    return expected


def test_segments_rolled_and_indexed(broker, written):
    for tp in written:
        pdir = broker.partition_dir(tp.topic, tp.partition)
        logs = sorted(pdir.glob("*.log"))
        assert len(logs) >= 2 if tp.topic != "txn" else len(logs) >= 1, (tp, logs)
    big = broker.partition_dir("codec-none", 0)
    assert any(f.stat().st_size > 0 for f in big.glob("*.index")), "index.interval.bytes=256 gave no entries"


def test_verify_user_topics_clean(broker, written):
    res = run_kltool("--json", "verify", "--deep", "--strict", "--topic", "[!_]*", broker.logdir)
    assert res.code == 0, res


def test_verify_whole_logdir_clean(broker, written):
    """After SIGTERM Kafka 4.4 leaves the KRaft metadata log's active .index/.timeindex preallocated (zeros): it
    opens that log with lastShutdownClean=false at every start and rebuilds them, so kltool only notes them."""
    res = run_kltool("--json", "verify", broker.logdir)
    assert res.code == 0, res
    assert [r for r in res.json() if r["type"] == "finding"] == []
    notes = [r for r in res.json() if r["type"] == "note" and r["kind"] == "index_preallocated"]
    assert {r["file"].split("/data/")[-1].split("/")[0] for r in notes} <= {"__cluster_metadata-0"}, notes


def test_dump_records_equal_consumer(broker, written):
    for tp, exp in written.items():
        got = _kltool_records(broker.partition_dir(tp.topic, tp.partition))
        assert len(got) == len(exp["records"]), tp
        for g, e in zip(got, exp["records"], strict=True):
            assert g == e, (tp, g, e)


def test_dump_isolation_levels_equal_consumers(broker, written):
    """Scenario h: `dump --records --isolation-level` against Kafka's consumers at both levels (committed and
    aborted transactions, one left open with plain records after it: read_committed ends at its first offset)."""
    for tp, exp in written.items():
        if tp.topic != "txn":
            continue
        pdir = broker.partition_dir(tp.topic, tp.partition)
        assert len(exp["committed"]) < len(exp["records"])
        assert _kltool_records(pdir, "--isolation-level", "read_uncommitted") == exp["records"]
        assert _kltool_records(pdir, "--isolation-level", "read_committed") == exp["committed"]


def _kl_offsets(logdir, *args):
    res = run_kltool("--json", "offsets", "--topic", "[!_]*", logdir, *args)
    assert res.code == 0, res
    return {(r["topic"], r["partition"]): r for r in res.json() if r["type"] == "offsets"}


def test_offsets_earliest_latest(broker, written):
    got = _kl_offsets(broker.logdir, "--earliest", "--latest")
    for tp, exp in written.items():
        row = got[(tp.topic, tp.partition)]
        assert (row["log_start_offset"], row["log_end_offset"]) == (exp["earliest"], exp["latest"]), tp


def test_offsets_max_timestamp(broker, written):
    got = _kl_offsets(broker.logdir, "--max-timestamp")
    for tp, exp in written.items():
        row = got[(tp.topic, tp.partition)]
        assert row["max_timestamp_offset"] == exp["max_timestamp_offset"], (tp, row, exp["max_timestamp_offset"])


def test_offsets_by_time(broker, written):
    for tp, exp in written.items():
        for t, offset, ts in exp["by_time"]:
            res = run_kltool("--json", "offsets", "--time", str(t), broker.partition_dir(tp.topic, tp.partition))
            assert res.code == 0, res
            row = [r for r in res.json() if r["type"] == "offsets"][0]
            assert (row["offset"], row["timestamp"]) == (offset, ts), (tp, t, row)


@pytest.fixture(scope="module")
def killed(broker, written):
    """Start, produce more, SIGKILL; kltool verify on that; start again and keep what recovery logged."""
    broker.start()
    prod = KafkaProducer(**broker.kafka_python_args(), compression_type="gzip", linger_ms=5)
    rng = random.Random(9)
    for p in range(PARTS):
        for key, value, headers in _records(rng, 200, "after"):
            prod.send("codec-gzip", key=key, value=value, headers=headers, partition=p)
    prod.flush()
    prod.close()
    broker.kill()
    assert not broker.clean_shutdown_marker().exists()
    res = run_kltool("--json", "verify", "--topic", "[!_]*", broker.logdir)
    active = {max(d.glob("*.log")).with_suffix(".timeindex") for d in broker.logdir.iterdir()
              if d.is_dir() and not d.name.startswith("_")}
    broker.start()
    return res, active, broker.log_text(since_start=True)


def test_kill9_broker_recovery_finds_no_damage(killed):
    res, active, log = killed
    damage = [ln for ln in log.splitlines() if "Found invalid messages" in ln or "runcat" in ln
              or "orrupt" in ln or "deleting and rebuilding index" in ln]
    assert damage == [], damage
    assert "Recovering unflushed segment" in log
    # kltool sees no damage either: it only notes the active segments' preallocated indexes
    notes = [r for r in res.json() if r["type"] == "note"]
    assert {f["kind"] for f in notes} == {"index_preallocated"}, notes
    assert {Path(f["file"]).with_suffix(".timeindex") for f in notes} <= active, notes


def test_kill9_verify_reports_only_what_recovery_finds(killed):
    """Every active segment's .timeindex is preallocated after kill -9 (zeros after the real entries); the
    broker's recovery rebuilds it silently, so kltool notes it (severity info) instead of an error."""
    res, _, _ = killed
    errors = [(f["kind"], f["file"].split("/data/")[-1]) for f in res.json()
              if f["type"] == "finding" and f["severity"] == "error"]
    assert errors == [], errors
    assert res.code == 0
