"""Issue 19, scenario a (what the broker's own machinery wrote) and f (retention), on one broker.

a. A compacted topic after the broker's cleaner ran (tombstones kept past cleaning, a delete horizon set),
   __consumer_offsets after a consumer group committed, __transaction_state after a transactional producer,
   and the KRaft metadata log with its snapshots: `kltool verify` is clean, and `kltool dump --records`
   equals what a consumer reads wherever a consumer can read it.
f. Time retention, size retention and DeleteRecords (`org.apache.kafka.tools.DeleteRecordsCommand`) applied by
   the broker, and `kltool retention` given the same limits and clock on a copy taken before: the same log
   start offset, the same segments left, the same log-start-offset-checkpoint entries.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from ..conftest import run_kltool
from . import harness
from .test_broker_writes import _consumed, _kltool_records

DAY = 86_400_000
RT_TOPICS = ("rt-time", "rt-size", "rt-del")
RT_WAVES = 5


@pytest.fixture(scope="module")
def broker(start_broker):
    """This module's broker: a cleaner that looks every half second, retention checked every second,
    segments deleted at once, and KRaft snapshots every few KiB of metadata."""
    return start_broker({
        "log.cleaner.backoff.ms": "500",
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "0",
        "log.initial.task.delay.ms": "1000",  # the retention check starts 30 s after start-up by default
        "metadata.log.max.record.bytes.between.snapshots": "4096",
        "metadata.log.segment.ms": "1000",
    })


def _checkpoint(path):
    rows = {}
    for ln in path.read_text().split("\n")[2:]:
        if ln.strip():
            t, p, o = ln.split()
            rows[(t, int(p))] = int(o)
    return rows


@pytest.fixture(scope="module")
def ran(broker, tmp_path_factory):
    b = broker
    # -- a: a compacted topic the cleaner works on
    b.create_topic("compacted", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                    "segment.ms": "1000", "min.compaction.lag.ms": "0"})
    prod = KafkaProducer(**b.kafka_python_args(), linger_ms=5, compression_type="gzip")
    for wave in range(4):
        for i in range(120):
            k = f"key-{i % 25}".encode()
            value = None if (i + wave) % 11 == 0 else f"w{wave}-{i}".encode() * 3
            prod.send("compacted", key=k, value=value, partition=0)
        prod.flush()
        time.sleep(1.2)
    prod.send("compacted", key=b"last", value=b"rolls the segment before it", partition=0).get(timeout=30)
    # -- f: three topics of RT_WAVES segments, one a day (the roll follows the records' timestamps)
    now = int(time.time() * 1000)
    for t in RT_TOPICS:
        b.create_topic(t, 1, {"retention.ms": "-1", "retention.bytes": "-1", "segment.ms": "3600000"})
        for w in range(RT_WAVES):
            ts = now - (RT_WAVES - 1 - w) * DAY
            for i in range(40):
                prod.send(t, key=f"{w}-{i}".encode(), value=b"r" * (50 + w * 10), partition=0, timestamp_ms=ts + i)
            prod.flush()
    prod.close()
    # -- a: a consumer group commits, a transactional producer writes __transaction_state
    c = KafkaConsumer("compacted", **b.kafka_python_args(), group_id="kltool-group", auto_offset_reset="earliest",
                      enable_auto_commit=False)
    tp = TopicPartition("compacted", 0)
    end = c.end_offsets([tp])[tp]
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:  # to the end (the cleaner may have left only a few dozen records)
        for _recs in c.poll(timeout_ms=500).values():
            c.commit()
        if tp in c.assignment() and c.position(tp) >= end:
            break
    c.close()
    tx = KafkaProducer(**b.kafka_python_args(), transactional_id="kltool-cleans")
    tx.init_transactions()
    for outcome in ("commit", "abort"):
        tx.begin_transaction()
        tx.send("compacted", key=b"tx", value=outcome.encode(), partition=0)
        tx.commit_transaction() if outcome == "commit" else tx.abort_transaction()
    tx.close()
    # wait for the cleaner
    cp = b.logdir / "cleaner-offset-checkpoint"
    t0 = time.monotonic()
    while not cp.exists() or _checkpoint(cp).get(("compacted", 0), 0) == 0:
        assert time.monotonic() - t0 < 60, "the cleaner did not run"
        time.sleep(0.5)
    internal = {t: _consumed(b, t, 0) for t in ("compacted", "__consumer_offsets", "__transaction_state")}
    b.stop()
    copy = tmp_path_factory.mktemp("copy") / "data"
    shutil.copytree(b.logdir, copy)

    # -- f: the broker applies retention
    b.start()
    first_ts = {t: now - (RT_WAVES - 1) * DAY for t in RT_TOPICS}
    sizes = [f.stat().st_size for f in sorted(b.partition_dir("rt-size", 0).glob("*.log"))]
    limits = {"time": int(2.5 * DAY), "size": sum(sizes[-2:]) + 10}
    a = b.admin()
    try:
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "rt-time", configs={"retention.ms": str(limits["time"])}),
                         ConfigResource(ConfigResourceType.TOPIC, "rt-size",
                                        configs={"retention.bytes": str(limits["size"])})])
    finally:
        a.close()
    delete_to = 40 * 2 + 7
    spec = copy.parent / "delete.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "rt-del", "partition": 0, "offset": delete_to}],
                                "version": 1}))
    harness.run_tool("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", b.bootstrap,
                     "--offset-json-file", str(spec))
    clock = int(time.time() * 1000)
    t0 = time.monotonic()
    want = {"rt-time": 3, "rt-size": 3, "rt-del": 3}  # 2.5 days of 5 daily segments; the last two + 10 bytes
    while any(len(list(b.partition_dir(t, 0).glob("*.log"))) > n for t, n in want.items()) or \
            list(b.logdir.glob("rt-*/*.deleted")):
        assert time.monotonic() - t0 < 60, "the broker's retention did not run"
        time.sleep(0.5)
    b.stop()
    return {"internal": internal, "copy": copy, "limits": limits, "clock": clock, "spec": spec,
            "first_ts": first_ts, "delete_to": delete_to}


def test_cleaned_and_internal_topics_verify_clean(broker, ran):
    res = run_kltool("--json", "verify", "--deep", "--strict", broker.logdir, "--topic", "compacted")
    assert res.code == 0, res
    res = run_kltool("--json", "verify", "--deep", ran["copy"])
    assert res.code == 0, res
    assert [r for r in res.json() if r["type"] == "finding"] == []


def test_compacted_topic_was_cleaned(ran):
    d = ran["copy"] / "compacted-0"
    batches = [r for r in run_kltool("--json", "dump", d).json() if r["type"] == "batch"]
    assert any(b["delete_horizon_ms"] for b in batches), "no batch has a delete horizon: the cleaner did not run"
    recs = ran["internal"]["compacted"]
    assert any(r["value"] is None for r in recs), "the cleaner kept no tombstone"
    assert len(recs) < 4 * 120


@pytest.mark.parametrize("topic", ["compacted", "__consumer_offsets", "__transaction_state"])
def test_dump_records_equal_consumer(ran, topic):
    got = _kltool_records(ran["copy"] / f"{topic}-0")
    assert got == ran["internal"][topic]
    assert got


def test_metadata_log_and_snapshots(ran):
    d = ran["copy"] / "__cluster_metadata-0"
    snaps = sorted(d.glob("*.checkpoint"))
    assert snaps, "no KRaft snapshot"
    for f in [*snaps, *sorted(d.glob("*.log"))]:
        res = run_kltool("--json", "dump", "--records", f)
        assert res.code == 0, (f, res)
        assert any(r["type"] == "record" for r in res.json()), f


# -- f ----------------------------------------------------------------------------------------------------------

def _state(logdir, topic):
    """(the segment files, the log start offset as the broker loads it, the checkpoint's entry or None)."""
    d = logdir / f"{topic}-0"
    files = sorted(f.name for f in d.iterdir() if f.suffix in (".log", ".index", ".timeindex"))
    entry = _checkpoint(logdir / "log-start-offset-checkpoint").get((topic, 0))
    first = min(int(f.split(".")[0]) for f in files)
    return files, max(entry or 0, first), entry


HOWS = {"time": "rt-time", "size": "rt-size", "delete-records": "rt-del"}


@pytest.fixture(scope="module")
def kl_retention(ran):
    copy, limits = ran["copy"], ran["limits"]
    args = {"time": ["--retention-ms", str(limits["time"]), "--retention-bytes", "-1", "--now", str(ran["clock"])],
            "size": ["--retention-bytes", str(limits["size"]), "--retention-ms", "-1"],
            "delete-records": ["--offset-json-file", str(ran["spec"])]}
    for how, topic in HOWS.items():
        res = run_kltool("retention", copy, "--topic", topic, *args[how])
        assert res.code == 0, res
    return {how: _state(copy, topic) for how, topic in HOWS.items()}


@pytest.mark.parametrize("how", list(HOWS))
def test_retention_like_the_broker(broker, ran, kl_retention, how):
    """The same segments deleted, the same log start offset."""
    mine, theirs = kl_retention[how], _state(broker.logdir, HOWS[how])
    assert mine[:2] == theirs[:2]
    assert len(mine[0]) == 3 * 3
    if how == "delete-records":
        assert mine[1] == ran["delete_to"]


@pytest.mark.parametrize("how", list(HOWS))
def test_retention_checkpoint_entries_like_the_broker(broker, kl_retention, how):
    """Kafka 4.4 (LogManager.checkpointLogStartOffsetsInDir) writes a log-start-offset-checkpoint entry only
    when the log start offset is above the first segment's base offset; kltool retention does the same."""
    assert kl_retention[how][2] == _state(broker.logdir, HOWS[how])[2]
