"""Issue 19, scenarios c, d, g: what kltool writes into a stopped broker's log dir, served by the broker.

c. kltool append into an existing topic, the broker serves it and goes on from there.
d. a topic kltool create makes, unknown to the KRaft metadata: what Kafka 4.x does with it (pinned).
g. indexes deleted from a stopped broker, rebuilt by the broker; kltool rebuild-index gives the same bytes.
"""

from __future__ import annotations

import base64
import json
import shutil
import time

from kafka import KafkaProducer

from ..conftest import run_kltool

RECOVERY_WORDS = ("Found invalid messages", "runcat", "orrupt", "Recovering unflushed segment",
                  "rebuilding index", "recovering segment")


def _lines_about(log: str, name: str) -> list[str]:
    return [ln for ln in log.splitlines() if name in ln]


def test_kltool_append_served_by_broker(live, tmp_path):
    b = live
    b.create_topic("served", 2, {"index.interval.bytes": "128"})
    prod = KafkaProducer(**b.kafka_python_args(), compression_type="snappy", linger_ms=5)
    for i in range(40):
        prod.send("served", key=f"b{i}".encode(), value=f"broker-{i}".encode(), partition=i % 2)
    prod.flush()
    prod.close()
    before = {p: len(b.consume_all("served", p)) for p in range(2)}
    b.stop()

    now = int(time.time() * 1000)
    written = []
    for n, codec in enumerate(["gzip", "zstd", "lz4"]):
        rows = []
        for i in range(30):
            rows.append({"key": f"kl{n}-{i % 5}", "value": {"base64": base64.b64encode(bytes([i, n]) * 40).decode()},
                         "headers": [{"key": "src", "value": "kltool"}, {"key": "n", "value": str(i)}],
                         "timestamp": now + n * 1000 + i})
        rows.append({"key": None, "value": "no key", "partition": 1, "timestamp": now + n * 1000 + 99})
        inp = tmp_path / f"in{n}.jsonl"
        inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        res = run_kltool("append", b.logdir, "served", "--input", inp, "--compression", codec, "--batch-records", "7")
        assert res.code == 0, res
        written.extend(rows)
    assert b.clean_shutdown_marker().exists(), "kltool append left no clean-shutdown marker"

    b.start()
    log = b.log_text(since_start=True)
    assert [ln for ln in _lines_about(log, "served-") if any(w in ln for w in RECOVERY_WORDS)] == []

    got = []
    for p in range(2):
        recs = b.consume_all("served", p)
        assert [r.offset for r in recs] == list(range(len(recs)))
        got.extend(recs[before[p]:])
    assert len(got) == len(written)
    def key(t):  # timestamp, value, key (None-safe)
        return t[3], t[1], t[0] or b""

    exp = (((r["key"].encode() if r["key"] else None),
                  (base64.b64decode(r["value"]["base64"]) if isinstance(r["value"], dict) else r["value"].encode()),
                  [(h["key"], h["value"].encode()) for h in r.get("headers", [])], r["timestamp"]) for r in written)
    act = ((r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp) for r in got)
    assert sorted(exp, key=key) == sorted(act, key=key)

    # a produce afterwards goes on at the log end kltool left
    ends = {p: before[p] + sum(1 for r in got if r.partition == p) for p in range(2)}
    prod = KafkaProducer(**b.kafka_python_args(), linger_ms=0)
    for p in range(2):
        md = prod.send("served", key=b"after", value=b"after", partition=p).get(timeout=30)
        assert md.offset == ends[p], (p, md.offset, ends[p])
    prod.close()
    assert len(b.consume_all("served", 0)) == ends[0] + 1


def test_kltool_created_topic_is_a_stray_to_kraft(live, tmp_path):
    """Pins Kafka 4.x's behaviour: a partition directory the KRaft metadata does not know (kltool create makes
    one, with a random topic id) is found at start-up as a stray log, renamed to
    `<topic>-<partition>.<32 hex>-stray` and kept with its data (not deleted while we watch, nor at the next
    start); the topic is not served. So kltool create refuses a KRaft log dir (exit 3, nothing made) unless
    --force; the workflow it names instead (create through the broker, stop it, kltool append, start) serves
    the records."""
    b = live
    b.create_topic("kflow", 2)  # the documented workflow: the topic is made through the broker
    b.stop()
    res = run_kltool("create", b.logdir, "kcreated", "--partitions", "2")
    assert res.code == 3 and "KRaft" in res.err and "kafka-topics.sh --create" in res.err, res
    assert not [p for p in b.logdir.iterdir() if p.name.startswith("kcreated")]
    res = run_kltool("create", b.logdir, "kcreated", "--partitions", "2", "--force")
    assert res.code == 0, res
    res = run_kltool("append", b.logdir, "kcreated", "-p", "0", "--key", "a", "--value", "kept")
    assert res.code == 0, res
    rows = [{"key": f"k{i}", "value": f"flow-{p}-{i}", "partition": p} for p in range(2) for i in range(3)]
    res = run_kltool("append", b.logdir, "kflow", "--input", _jsonl(tmp_path / "kflow.jsonl", rows))
    assert res.code == 0, res
    b.start()
    for p in range(2):
        assert [(m.offset, m.value) for m in b.consume_all("kflow", p)] == \
            [(i, f"flow-{p}-{i}".encode()) for i in range(3)]
    log = b.log_text(since_start=True)
    assert len([ln for ln in _lines_about(log, "Found stray log dir") if "kcreated" in ln]) == 2
    assert "does not exist in the metadata image" in log
    assert len([ln for ln in log.splitlines() if "marked stray and renamed to" in ln and "kcreated" in ln]) == 2
    assert not (b.logdir / "kcreated-0").exists() and not (b.logdir / "kcreated-1").exists()
    renamed = time.monotonic()
    strays = sorted(p for p in b.logdir.iterdir() if p.name.startswith("kcreated-"))
    assert [p.name.split(".")[0] for p in strays] == ["kcreated-0", "kcreated-1"]
    assert all(p.name.endswith("-stray") and len(p.name.split(".")[1]) == len("x" * 32) + len("-stray")
               for p in strays)
    from kafka import KafkaConsumer

    c = KafkaConsumer(**b.kafka_python_args())
    try:
        assert "kcreated" not in c.topics()
    finally:
        c.close()
    # the data is still there, readable by kltool
    res = run_kltool("--json", "dump", "--records", strays[0])
    assert [r["value"] for r in res.json() if r["type"] == "record"] == ["kept"]
    time.sleep(max(0.0, 5 - (time.monotonic() - renamed)))  # and 5 s later, while the broker runs, still there
    assert sorted(p for p in b.logdir.iterdir() if p.name.startswith("kcreated-")) == strays
    b.stop()
    b.start()
    assert sorted(p for p in b.logdir.iterdir() if p.name.startswith("kcreated-")) == strays


def test_broker_rebuilt_indexes_equal_kltool_rebuild(live, tmp_path):
    b = live
    b.create_topic("reindex", 1, {"index.interval.bytes": "100", "segment.ms": "1000"})
    prod = KafkaProducer(**b.kafka_python_args(), compression_type="lz4", linger_ms=0, batch_size=512)
    for wave in range(3):
        for i in range(150):
            prod.send("reindex", key=f"k{i}".encode(), value=f"w{wave}-v{i}".encode() * 5, partition=0)
        prod.flush()
        time.sleep(1.2)
    prod.close()
    b.stop()
    pdir = b.partition_dir("reindex", 0)
    assert len(list(pdir.glob("*.log"))) >= 3
    for f in list(pdir.glob("*.index")) + list(pdir.glob("*.timeindex")):
        f.unlink()
    b.start()
    log = b.log_text(since_start=True)
    assert _lines_about(log, "reindex-0"), "no broker log lines about reindex-0"
    b.stop()  # a clean stop trims the rebuilt indexes to their entries
    broker_files = {f.name: f.read_bytes() for f in sorted(pdir.iterdir()) if f.suffix in (".index", ".timeindex")}
    assert any(broker_files.values())
    copy = tmp_path / "reindex-0"
    shutil.copytree(pdir, copy)
    # the topic's index.interval.bytes lives in the KRaft metadata, not in the log dir: say it
    res = run_kltool("rebuild-index", "--force", "--index-interval-bytes", "100", copy)
    assert res.code == 0, res
    mine = {f.name: f.read_bytes() for f in sorted(copy.iterdir()) if f.suffix in (".index", ".timeindex")}
    assert mine.keys() == broker_files.keys()
    for name in broker_files:
        assert mine[name] == broker_files[name], name


PID = 10**12  # far above the producer ids a young KRaft controller hands out (blocks of 1000 from 0)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_kltool_keys_transactions_then_idempotent_producer(live, tmp_path):
    """kltool append: keyed records without --partition land where the Java producer's murmur2 partitioner
    (kafka-python's DefaultPartitioner is the same) puts the key; transactions kltool writes with their markers
    are read by read_committed and read_uncommitted consumers as Kafka's own would be; idempotent and
    transactional producers afterwards go on at the log end."""
    b = live
    b.create_topic("keyed", 6)
    b.create_topic("ktxn", 2)
    keys = [f"user-{i}" for i in range(60)] + ["", "\u00fc", "x" * 300]
    prod = KafkaProducer(**b.kafka_python_args(), linger_ms=0)
    placed = {k: prod.send("keyed", key=k.encode(), value=b"producer").get(timeout=30).partition for k in keys}
    prod.close()
    assert len(set(placed.values())) == 6
    b.stop()

    res = run_kltool("append", b.logdir, "keyed", "--input",
                     _jsonl(tmp_path / "keyed.jsonl", [{"key": k, "value": "kltool"} for k in keys]))
    assert res.code == 0, res
    txns = [("commit", "c1"), ("abort", "a1"), ("commit", "c2"), ("abort", "a2")]
    for n, (end, tag) in enumerate(txns):
        rows = [{"key": f"{tag}-{i}", "value": f"{tag}-{i}", "partition": i % 2} for i in range(7 + n)]
        res = run_kltool("append", b.logdir, "ktxn", "--input", _jsonl(tmp_path / f"{tag}.jsonl", rows),
                         "--producer-id", str(PID), "--transactional", "--end-transaction", end,
                         "--compression", "zstd" if n % 2 else "none")
        assert res.code == 0, res
    b.start()
    log = b.log_text(since_start=True)
    assert [ln for ln in log.splitlines() if ("keyed-" in ln or "ktxn-" in ln)
            and any(w in ln for w in RECOVERY_WORDS)] == []

    for p in range(6):
        for r in b.consume_all("keyed", p):
            if r.value == b"kltool":
                assert placed[r.key.decode()] == p, (r.key, p)
    assert sum(r.value == b"kltool" for p in range(6) for r in b.consume_all("keyed", p)) == len(keys)

    def values(level):
        return sorted(r.value.decode() for p in range(2) for r in b.consume_all("ktxn", p, isolation_level=level))

    everything = sorted(f"{tag}-{i}" for n, (_, tag) in enumerate(txns) for i in range(7 + n))
    assert values("read_uncommitted") == everything
    assert values("read_committed") == [v for v in everything if v[0] == "c"]
    for level in ("read_uncommitted", "read_committed"):  # scenario h on kltool's own markers
        for p in range(2):
            res = run_kltool("--json", "dump", "--records", "--isolation-level", level, b.partition_dir("ktxn", p))
            assert res.code == 0, res
            mine = [(r["offset"], r["value"]) for r in res.json() if r["type"] == "record"]
            assert mine == [(r.offset, r.value.decode()) for r in b.consume_all("ktxn", p, isolation_level=level)]

    ends = {p: len(b.consume_all("ktxn", p)) + sum(1 for _ in txns) for p in range(2)}  # + one marker each
    idem = KafkaProducer(**b.kafka_python_args(), enable_idempotence=True, linger_ms=0)
    for p in range(2):
        md = idem.send("ktxn", key=b"idem", value=b"idem", partition=p).get(timeout=30)
        assert md.offset == ends[p], (p, md.offset, ends[p])
    idem.close()
    tx = KafkaProducer(**b.kafka_python_args(), transactional_id="after-kltool", linger_ms=0)
    tx.init_transactions()
    tx.begin_transaction()
    for p in range(2):
        tx.send("ktxn", key=b"tx", value=b"c-after", partition=p)
    tx.commit_transaction()
    tx.close()
    assert values("read_committed") == sorted([v for v in everything if v[0] == "c"] + ["c-after"] * 2 + ["idem"] * 2)
