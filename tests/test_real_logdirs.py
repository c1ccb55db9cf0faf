"""Real broker log dirs (fixtures/real): kltool agrees with Kafka's own reader on every file, the
log dirs verify clean, real indexes pass, and kafka-python (an independent reader) decodes the same
records."""

from __future__ import annotations

import json

import pytest
from kafka.record import MemoryRecords

from kltool.format import decode_records
from kltool.storage.scan import Damage, walk

from .conftest import REAL

SUMMARY = [json.loads(line) for line in (REAL / "ORACLE-SUMMARY.jsonl").read_text().splitlines()]
LOG_DIRS = ["connect-spooldir-2019-zk", "kafka2.7.1-compacted-zk", "william0423-indexed-zk",
            "biggerbrain-gzip-headers"]


@pytest.mark.parametrize("entry", SUMMARY, ids=[s["path"] for s in SUMMARY])
def test_file_agrees_with_kafka(entry):
    path = REAL / entry["path"]
    items = list(walk(path, with_data=True))
    problems = [i.position for i in items if isinstance(i, Damage) or not i.crc_valid]
    if entry["validBytes"] == entry["fileSize"]:
        assert problems == []
    else:
        assert problems and problems[0] == entry["validBytes"]
    # Kafka's iterator gives every batch up to the first framing problem (CRC-invalid ones too);
    # its record counts cover the valid prefix only.
    given = []
    for i in items:
        if isinstance(i, Damage):
            break
        given.append(i)
    assert len(given) == entry["batches"]
    valid = []
    for i in given:
        if not i.crc_valid:
            break
        valid.append(i)
    records = [r for h in valid for r in decode_records(h)]
    assert len(records) == entry["records"]
    if records:
        assert records[0].offset == entry["firstOffset"]
        assert records[-1].offset == entry["lastOffset"]


@pytest.mark.parametrize("logdir", LOG_DIRS)
def test_real_log_dir_verifies_clean(kl, logdir):
    r = kl("--json", "verify", "--deep", REAL / logdir)
    assert r.code == 0, r
    findings = [f for f in r.json() if f["type"] == "finding"]
    assert not [f for f in findings if f["severity"] == "error"]
    summary = r.json()[-1]
    assert summary["type"] == "summary" and summary["errors"] == 0 and summary["batches"] > 0


def test_real_indexes_checked(kl):
    """william0423's broker-written .index (254 entries) and .timeindex (258) pass every check, and
    breaking one entry is caught."""
    r = kl("--json", "verify", REAL / "william0423-indexed-zk" / "__consumer_offsets-28")
    assert r.code == 0


def test_broken_real_index_is_caught(kl, copy_fixture):
    d = copy_fixture("real/william0423-indexed-zk/__consumer_offsets-28")
    idx = d / "00000000000000000000.index"
    raw = bytearray(idx.read_bytes())
    raw[8 * 10 + 7] ^= 0x01  # entry 10's position is now off by one byte
    idx.write_bytes(bytes(raw))
    r = kl("--json", "verify", d)
    assert r.code == 1
    kinds = {f["kind"] for f in r.json() if f["type"] == "finding"}
    assert "index_mismatch" in kinds
    ti = d / "00000000000000000000.timeindex"
    raw = bytearray(ti.read_bytes())
    raw[12 * 5:12 * 5 + 8] = (0).to_bytes(8, "big")
    ti.write_bytes(bytes(raw))
    kinds = {f["kind"] for f in kl("--json", "verify", d).json() if f["type"] == "finding"}
    assert "time_index_order" in kinds or "index_corrupt" in kinds


@pytest.mark.parametrize("entry", [s for s in SUMMARY if s["validBytes"] == s["fileSize"] and s["records"]],
                         ids=lambda s: s["path"])
def test_kafka_python_reads_the_same_records(kl, entry):
    path = REAL / entry["path"]
    theirs = []
    mr = MemoryRecords(path.read_bytes())
    while True:
        b = mr.next_batch()
        if b is None:
            break
        for rec in b:
            ts = -1 if rec.timestamp is None else rec.timestamp  # v0 has no timestamp
            theirs.append((rec.offset, ts, rec.key, rec.value,
                           [(k, v) for k, v in getattr(rec, "headers", [])]))
    ours = []
    for h in walk(path, with_data=True):
        for r in decode_records(h):
            ours.append((r.offset, r.timestamp, r.key, r.value, [(k.decode(), v) for k, v in r.headers]))
    assert ours == theirs
