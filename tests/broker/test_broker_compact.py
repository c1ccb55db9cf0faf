"""Issue 20, the judge: the broker's log cleaner and ``kltool compact`` on the same input, compared.

The input is written through the real broker (cleanup.policy=compact, many versions per key, tombstones, headers,
committed and aborted transactions of two transactional producers, an idempotent and a plain producer, gzip on
partition 1 only, segments rolled by segment.ms on the records' timestamps) while the cleaner is held
(min.cleanable.dirty.ratio=1.0: the broker cleans only above the ratio). The broker is stopped and the log dir
copied. Copy 1 is the broker's own: started with min.cleanable.dirty.ratio=0.01, it cleans once and is stopped
again. Copy 2 gets ``kltool compact`` with the same settings (``--config``), the same offset map
(``log.cleaner.threads=1``, ``--dedupe-buffer-size`` = ``log.cleaner.dedupe.buffer.size``) and the broker's clock
(``--now`` = the deleteHorizonMs the broker wrote minus delete.retention.ms). Per partition everything is compared:
segment base offsets, every batch's header (base/last offset, count, producer id/epoch/sequence, attributes with
0x40, deleteHorizonMs, timestamps), every record, markers, ``.txnindex`` bytes, the indexes, the
cleaner-offset-checkpoint, and every file's bytes (gzip batches too: zlib and Java's Deflater give the same
stream). Partition 2 holds lz4 and zstd batches, whose rewritten bytes differ (a deliberate difference, pinned
by an xfail): there the decoded batches and records are compared.

A second pass after the delete horizon (the same new data on both: the broker appends it, kltool's copy takes the
broker's new segments over its own cleaned ones) removes the same tombstones and markers. Then the broker starts on
kltool's result and serves it (read_committed equals the broker's own), and Kafka's DumpLogSegments reads every
segment kltool wrote.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType

from kltool.format import decode_records
from kltool.storage.scan import batches

from ..conftest import run_kltool
from . import harness

TOPIC = "judge"
PARTS = (0, 1, 2)  # 2: lz4 and zstd batches only
DEDUPE = 2 * 1024 * 1024
DELETE_RETENTION = 12_000
CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.0", "segment.ms": "10000",
          "delete.retention.ms": str(DELETE_RETENTION), "min.compaction.lag.ms": "0", "segment.bytes": "1048576",
          "segment.index.bytes": "120"}  # small indexes: more segments, and the cleaner's groups split on them
KLTOOL_SETTINGS = ("cleanup.policy", "segment.ms", "delete.retention.ms", "min.compaction.lag.ms", "segment.bytes",
                   "segment.index.bytes")
KEYS = 60
BYTES_DIFFER = {2}  # lz4 and zstd: the batches the cleaner rewrites are recompressed by other libraries


def _checkpoint(path: Path) -> dict:
    rows = {}
    if not path.exists():
        return rows
    for ln in path.read_text().split("\n")[2:]:
        if ln.strip():
            t, p, o = ln.split()
            rows[(t, int(p))] = int(o)
    return rows


def _set_ratio(b: harness.Broker, ratio: str) -> None:
    """alter_configs replaces the topic's whole config: give all of it."""
    a = b.admin()
    try:
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC,
                                        configs={**CONFIG, "min.cleanable.dirty.ratio": ratio})])
    finally:
        a.close()


def _produce(b: harness.Broker, wave0: int, waves: int, seed: str, after: int = 0) -> int:
    """``waves`` waves of records; each wave's timestamps 11 s after the last (segment.ms 10 s: a roll per wave),
    ahead of the wall clock (the transaction markers carry the wall clock and so never roll a segment) and
    more than segment.ms after ``after`` (the last timestamp written before). Returns the last timestamp."""
    args = b.kafka_python_args()
    plain_idem = KafkaProducer(**args, enable_idempotence=True, linger_ms=5, batch_size=4096)
    plain_gzip = KafkaProducer(**args, enable_idempotence=False, compression_type="gzip", linger_ms=5,
                               batch_size=8192, acks=1)
    tx1 = KafkaProducer(**args, transactional_id=f"judge-tx1-{seed}", linger_ms=5)
    tx2 = KafkaProducer(**args, transactional_id=f"judge-tx2-{seed}", compression_type="gzip", linger_ms=5)
    lz4 = KafkaProducer(**args, enable_idempotence=True, compression_type="lz4", linger_ms=5, batch_size=4096)
    zstd = KafkaProducer(**args, enable_idempotence=False, compression_type="zstd", linger_ms=5, batch_size=4096,
                         acks=1)
    tx1.init_transactions()
    tx2.init_transactions()
    base = max(int(time.time() * 1000) + 5_000, after + 11_000)
    try:
        for w in range(wave0, wave0 + waves):
            ts = base + (w - wave0) * 11_000
            for i in range(120):
                k = f"k{(i * 7 + w) % KEYS}".encode()
                tomb = (i + w) % 13 == 0
                v = None if tomb else (f"{seed}-{w}-{i}-".encode() * (3 + i % 40))
                hdrs = [("h", f"{w}.{i}".encode())] if i % 5 == 0 else []
                plain_idem.send(TOPIC, key=k, value=v, partition=i % 2, timestamp_ms=ts + i, headers=hdrs)
                if i % 3 == 0:
                    plain_gzip.send(TOPIC, key=k, value=None if tomb else v[:50], partition=1, timestamp_ms=ts + i)
                (lz4 if i % 2 else zstd).send(TOPIC, key=k, value=v, partition=2, timestamp_ms=ts + i, headers=hdrs)
            plain_idem.flush()
            plain_gzip.flush()
            lz4.flush()
            zstd.flush()
            for n, tx in enumerate((tx1, tx2)):
                tx.begin_transaction()
                for i in range(8):
                    k = f"k{(i * 11 + w + n) % KEYS}".encode()
                    v = None if i == 3 else f"tx{n}-{seed}-{w}-{i}".encode() * 4
                    tx.send(TOPIC, key=k, value=v, partition=(i + n) % 2, timestamp_ms=ts + 500 + i)
                tx.flush()  # an abort drops what is not sent yet: the aborted records must reach the log
                if (w + n) % 3 == 1:
                    tx.abort_transaction()
                else:
                    tx.commit_transaction()
    finally:
        for p in (plain_idem, plain_gzip, lz4, zstd, tx1, tx2):
            p.close()
    return base + (waves - 1) * 11_000 + 600


def _wait_cleaned(b: harness.Broker, above: dict, timeout: float = 90) -> None:
    cp = b.logdir / "cleaner-offset-checkpoint"
    t0 = time.monotonic()
    while True:
        got = _checkpoint(cp)
        if all(got.get((TOPIC, p), 0) > above.get(p, 0) for p in PARTS):
            return
        assert time.monotonic() - t0 < timeout, f"the broker's cleaner did not run: {got}"
        time.sleep(0.3)


def _horizon(pdir: Path) -> int:
    """The largest deleteHorizonMs of the partition's batches (the last pass's)."""
    hs = [h.delete_horizon_ms for f in sorted(pdir.glob("*.log")) for h in batches(f) if h.has_delete_horizon]
    assert hs, f"{pdir}: no batch has a delete horizon"
    return max(hs)


def _kltool_compact(logdir: Path, part: int, now: int) -> None:
    cfg = [x for k in KLTOOL_SETTINGS for x in ("--config", f"{k}={CONFIG[k]}")]
    res = run_kltool("--json", "compact", logdir, "--topic", TOPIC, "-p", str(part), "--now", now,
                     "--dedupe-buffer-size", DEDUPE, *cfg)
    assert res.code == 0, res


def _segments(pdir: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(pdir.iterdir())
            if f.name.endswith((".log", ".index", ".timeindex", ".txnindex"))}


def _view(pdir: Path) -> dict:
    """Everything compared: per segment its batches (headers) and records, the .txnindex bytes."""
    segs, recs = {}, []
    for f in sorted(pdir.glob("*.log")):
        rows = []
        for h in batches(f, with_data=True):
            rows.append((h.base_offset, h.last_offset, h.count, h.producer_id, h.producer_epoch, h.base_sequence,
                         h.attributes, h.delete_horizon_ms, h.first_timestamp, h.max_timestamp,
                         h.partition_leader_epoch, h.is_control))
            for r in decode_records(h, h.data):
                recs.append((r.offset, "marker", r.control.get("type")) if h.is_control else
                            (r.offset, r.key, r.value, [tuple(x) for x in r.headers]))
        tx = f.with_suffix(".txnindex")
        segs[f.name] = {"batches": rows, "txnindex": tx.read_bytes() if tx.exists() else None}
    return {"segments": segs, "records": recs}


def _counts(view: dict) -> dict:
    recs = view["records"]
    return {"tombstones": sum(1 for r in recs if r[1] != "marker" and r[2] is None),
            "markers": sum(1 for r in recs if r[1] == "marker"),
            "horizons": sum(1 for s in view["segments"].values() for b in s["batches"] if b[7] is not None)}


def _compare(broker_dir: Path, kltool_dir: Path) -> dict:
    """Assert the two log dirs' partitions of TOPIC hold the same; returns the broker's views."""
    views = {}
    for p in PARTS:
        mine, theirs = kltool_dir / f"{TOPIC}-{p}", broker_dir / f"{TOPIC}-{p}"
        vm, vt = _view(mine), _view(theirs)
        assert sorted(vm["segments"]) == sorted(vt["segments"]), p
        for name in vt["segments"]:
            assert vm["segments"][name]["batches"] == vt["segments"][name]["batches"], (p, name)
            assert vm["segments"][name]["txnindex"] == vt["segments"][name]["txnindex"], (p, name)
        assert vm["records"] == vt["records"], p
        sm, st = _segments(mine), _segments(theirs)
        for name in st:  # gzip too: zlib and Java's Deflater give the same stream, the header was made the same
            if p in BYTES_DIFFER and not name.endswith(".txnindex"):
                continue  # test_lz4_zstd_rewritten_batches_bytes
            assert sm[name] == st[name], (p, name)
        views[p] = vt
    cm, ct = _checkpoint(kltool_dir / "cleaner-offset-checkpoint"), _checkpoint(broker_dir / "cleaner-offset-checkpoint")
    assert {k: v for k, v in cm.items() if k[0] == TOPIC} == {k: v for k, v in ct.items() if k[0] == TOPIC}
    return views


@pytest.fixture(scope="module")
def judged(start_broker, tmp_path_factory):
    work = tmp_path_factory.mktemp("judge")
    b = start_broker({
        "log.cleaner.backoff.ms": "300",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(DEDUPE),
        "log.segment.delete.delay.ms": "0",
        "log.initial.task.delay.ms": "1000",
    }, workdir=work / "broker")
    out: dict = {"broker": b}
    # -- the input, the cleaner held
    b.create_topic(TOPIC, len(PARTS), CONFIG)
    last = _produce(b, 0, 10, "a")
    b.stop()
    assert not _checkpoint(b.logdir / "cleaner-offset-checkpoint").get((TOPIC, 0))
    k1 = work / "kltool1"
    shutil.copytree(b.logdir, k1)
    # -- copy 1: the broker cleans
    b.start()
    _set_ratio(b, "0.01")
    _wait_cleaned(b, {})
    _set_ratio(b, "1.0")
    b.stop()
    first = {p: _checkpoint(b.logdir / "cleaner-offset-checkpoint")[(TOPIC, p)] for p in PARTS}
    out["pass1_broker"] = shutil.copytree(b.logdir, work / "broker1", ignore=shutil.ignore_patterns("__*"))
    # -- copy 2: kltool cleans at the broker's clock
    out["now1"] = {}
    for p in PARTS:
        out["now1"][p] = _horizon(b.partition_dir(TOPIC, p)) - DELETE_RETENTION
        _kltool_compact(k1, p, out["now1"][p])
    out["pass1_kltool"] = shutil.copytree(k1, work / "kltool1-result")
    # -- the second pass, after the delete horizon: the same new data on both
    wait = max(out["now1"].values()) + DELETE_RETENTION + 1000 - time.time() * 1000
    if wait > 0:
        time.sleep(wait / 1000)
    b.start()
    _produce(b, 100, 5, "b", after=last)
    b.stop()
    k2 = work / "kltool2"
    shutil.copytree(b.logdir, k2)
    for p in PARTS:  # kltool's cleaned segments in place of the broker's (the same offsets)
        d, mine = k2 / f"{TOPIC}-{p}", k1 / f"{TOPIC}-{p}"
        for f in list(d.iterdir()):
            if f.name.endswith((".log", ".index", ".timeindex", ".txnindex")) and int(f.name.split(".")[0]) < first[p]:
                f.unlink()
        for f in mine.iterdir():
            if f.name.endswith((".log", ".index", ".timeindex", ".txnindex")) and int(f.name.split(".")[0]) < first[p]:
                shutil.copy2(f, d / f.name)
    b.start()
    _set_ratio(b, "0.01")
    _wait_cleaned(b, first)
    out["served_broker"] = {p: b.consume_all(TOPIC, p, "read_committed") for p in PARTS}
    _set_ratio(b, "1.0")
    b.stop()
    out["now2"] = {}
    for p in PARTS:
        out["now2"][p] = _horizon(b.partition_dir(TOPIC, p)) - DELETE_RETENTION
        _kltool_compact(k2, p, out["now2"][p])
    out["pass2_kltool"] = k2
    # -- the broker on kltool's result
    shutil.move(b.logdir, work / "broker2")
    out["pass2_broker"] = work / "broker2"
    shutil.copytree(k2, b.logdir)
    b.start()
    out["served_kltool"] = {p: b.consume_all(TOPIC, p, "read_committed") for p in PARTS}
    b.stop()
    out["served_log"] = b.log_text()
    return out


def test_first_pass_like_the_broker(judged):
    views = _compare(judged["pass1_broker"], judged["pass1_kltool"])
    for p in PARTS:  # the pass did something worth comparing
        c = _counts(views[p])
        assert c["tombstones"] and (c["markers"] or p == 2) and c["horizons"], (p, c)
        assert len(views[p]["segments"]) >= (2 if p == 2 else 3)  # groups split on 0 and 1
        if p != 2:
            assert any(s["txnindex"] for s in views[p]["segments"].values()), p  # aborted transactions kept


def test_second_pass_after_the_horizon_like_the_broker(judged):
    views = _compare(judged["pass2_broker"], judged["pass2_kltool"])
    first = _view(judged["pass1_broker"] / f"{TOPIC}-0")
    old = [r for r in first["records"] if r[1] == "marker" or r[2] is None]
    kept = {r[0] for r in views[0]["records"]}
    # tombstones and markers of the first pass are gone (their horizon passed), the new ones kept
    assert any(r[0] not in kept for r in old)
    assert _counts(views[0])["tombstones"]


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "deliberate difference: a lz4 or zstd batch the cleaner rewrites (records removed, a delete horizon set) is "
    "recompressed by kltool with python-lz4 / libzstd, by the broker with lz4-java / zstd-jni: other compressed "
    "bytes (so other batch sizes, positions and index entries) for the same records, headers and offsets, which "
    "the comparison above checks; untouched batches are copied byte for byte by both"))
def test_lz4_zstd_rewritten_batches_bytes(judged):
    for mine, theirs in ((judged["pass1_kltool"], judged["pass1_broker"]),
                         (judged["pass2_kltool"], judged["pass2_broker"])):
        for p in BYTES_DIFFER:
            assert _segments(mine / f"{TOPIC}-{p}") == _segments(theirs / f"{TOPIC}-{p}"), p


def _plain(records) -> list:
    return [(r.offset, r.key, r.value, [(k, v) for k, v in r.headers]) for r in records]


def test_broker_serves_kltools_result(judged):
    for p in PARTS:
        got, want = _plain(judged["served_kltool"][p]), _plain(judged["served_broker"][p])
        assert got == want and got, p


def test_dump_log_segments_reads_kltools_segments(judged):
    files = sorted(str(f) for p in PARTS for f in (judged["pass2_kltool"] / f"{TOPIC}-{p}").glob("*.log"))
    res = harness.run_tool("org.apache.kafka.tools.DumpLogSegments", "--deep-iteration", "--files", ",".join(files))
    text = res.stdout
    n_batches = len(re.findall(r"^baseOffset: \d+ lastOffset: \d+ count: \d+", text, re.M))
    mine = sum(1 for f in files for _ in batches(Path(f)))
    assert n_batches == mine, text[-3000:]
    assert "error" not in text.lower() and "corrupt" not in text.lower(), text[-3000:]
