"""kltool dump: filters and seeking, encodings, every file type, damage handling."""

from __future__ import annotations

import json

from kltool.storage import open_partition
from kltool.storage.scan import walk

from .conftest import ORACLE, REAL

WILLIAM = REAL / "william0423-indexed-zk" / "__consumer_offsets-28"


def all_records(path):
    from kltool.format import decode_records

    out = []
    for h in walk(path, with_data=True):
        out.extend(decode_records(h))
    return out


def test_from_to_offset_equals_brute_force(kl):
    recs = all_records(WILLIAM / "00000000000000000000.log")
    r = kl("--json", "dump", "--records", "--from-offset", 4000, "--to-offset", 4020, WILLIAM)
    got = [x["offset"] for x in r.json() if x["type"] == "record"]
    assert got == [x.offset for x in recs if 4000 <= x.offset <= 4020]


def test_from_offset_seeks_through_the_index(kl):
    seg = open_partition(WILLIAM).segments[0]
    pos = seg.position_for_offset(5000)
    assert pos > 0  # the index is used, not a scan from 0
    h = next(seg.batches(start=pos))
    assert h.last_offset <= 5000
    r = kl("--json", "dump", "--from-offset", 5000, "--limit", 1, WILLIAM)
    b = r.json()[0]
    assert b["base_offset"] <= 5000 <= b["last_offset"]


def test_time_filters_equal_brute_force(kl):
    recs = all_records(WILLIAM / "00000000000000000000.log")
    t0 = recs[3000].timestamp
    t1 = recs[3100].timestamp
    r = kl("--json", "dump", "--records", "--from-time", t0, "--to-time", t1, WILLIAM)
    got = [x["offset"] for x in r.json() if x["type"] == "record"]
    assert got == [x.offset for x in recs if t0 <= x.timestamp <= t1]


def test_iso_time_accepted(kl):
    r = kl("--json", "dump", "--records", "--from-time", "2018-08-15T04:46:39Z", "--limit", 1, WILLIAM)
    rec = [x for x in r.json() if x["type"] == "record"][0]
    assert rec["timestamp"] >= 1534308399000


def test_key_filter_and_limit(kl):
    d = ORACLE / "v2-none-0"
    r = kl("--json", "dump", "--records", d)
    keys = [x["key"] for x in r.json() if x["type"] == "record"]
    k = next(k for k in keys if isinstance(k, str) and k)
    r = kl("--json", "dump", "--records", "--key", k, d)
    got = [x for x in r.json() if x["type"] == "record"]
    assert got and all(x["key"] == k for x in got)
    r = kl("--json", "dump", "--records", "--limit", 2, d)
    assert len([x for x in r.json() if x["type"] == "record"]) == 2


def test_encodings(kl):
    d = ORACLE / "v2-none-0"
    text = [x for x in kl("--json", "dump", "--records", d).json() if x["type"] == "record"]
    b64 = [x for x in kl("--json", "dump", "--records", "--encoding", "base64", d).json() if x["type"] == "record"]
    hx = [x for x in kl("--json", "dump", "--records", "--encoding", "hex", d).json() if x["type"] == "record"]
    import base64

    for t, b, h in zip(text, b64, hx, strict=True):
        if t["value"] is None:
            assert b["value"] is None and h["value"] is None
            continue
        raw = base64.b64decode(b["value"]["base64"])
        assert bytes.fromhex(h["value"]["hex"]) == raw
        if isinstance(t["value"], str):
            assert t["value"].encode() == raw
        else:
            assert base64.b64decode(t["value"]["base64"]) == raw


def test_json_lines_are_stable_schema(kl):
    r = kl("--json", "dump", "--records", ORACLE / "v2-txn-0")
    rows = r.json()
    batch_keys = {"type", "file", "position", "size", "base_offset", "last_offset", "count", "magic", "crc",
                  "crc_valid", "compression", "timestamp_type", "first_timestamp", "max_timestamp", "producer_id",
                  "producer_epoch", "base_sequence", "partition_leader_epoch", "is_transactional", "is_control"}
    for row in rows:
        assert "type" in row
        if row["type"] == "batch":
            assert batch_keys <= set(row)
        elif row["type"] == "record":
            assert {"offset", "timestamp", "key", "value", "headers"} <= set(row)
    ctrl = [x for x in rows if x["type"] == "record" and "control" in x]
    assert {c["control"]["type"] for c in ctrl} == {"COMMIT", "ABORT"}


def test_dump_index_timeindex_snapshot_checkpoints(kl):
    r = kl("--json", "dump", WILLIAM / "00000000000000000000.index")
    entries = r.json()
    assert len(entries) == 254 and entries[0]["type"] == "index_entry"
    r = kl("--json", "dump", WILLIAM / "00000000000000000000.timeindex")
    assert len(r.json()) == 258 and r.json()[0]["type"] == "time_index_entry"
    r = kl("--json", "dump", WILLIAM / "00000000000000008202.snapshot")
    assert all(x["type"] == "producer_snapshot_entry" for x in r.json())
    r = kl("--json", "dump", WILLIAM / "leader-epoch-checkpoint")
    assert all(x["type"] == "leader_epoch_entry" for x in r.json())
    r = kl("--json", "dump", REAL / "kafka2.7.1-compacted-zk" / "recovery-point-offset-checkpoint")
    assert r.code == 0 and all(x["type"] == "checkpoint_entry" for x in r.json())
    r = kl("--json", "dump", REAL / "kafka2.7.1-compacted-zk" / "meta.properties")
    assert r.json()[0]["properties"]["version"] == "0"
    text = kl("dump", WILLIAM / "00000000000000000000.index").out
    assert "offset: " in text and "position: " in text


def test_text_dump_resembles_kafka_dump_log(kl):
    out = kl("dump", "--records", ORACLE / "v2-none-0" / "00000000000000000000.log").out.splitlines()
    assert out[0].startswith("Dumping ")
    assert out[1] == "Log starting offset: 0"
    assert out[2].startswith("baseOffset: 0 lastOffset: ")
    assert out[3].startswith("| offset: 0 ")


def test_damage_does_not_stop_the_dump(kl):
    r = kl("--json", "dump", "--records", ORACLE / "damaged-v2-bad-magic-0")
    rows = r.json()
    assert r.code == 1
    kinds = [x["type"] for x in rows]
    i = kinds.index("finding")
    assert "batch" in kinds[i + 1:]  # the batch after the damage is still dumped
    assert json.dumps(rows)  # serialisable


def test_multi_segment_partition_seek(kl):
    d = ORACLE / "v2-multi-segment-0"
    r = kl("--json", "dump", "--records", "--from-offset", 795, "--to-offset", 805, d)
    got = [x["offset"] for x in r.json() if x["type"] == "record"]
    assert got == list(range(795, 806))
    files = {x["file"].rsplit("/", 1)[-1] for x in r.json() if x["type"] == "batch"}
    assert "00000000000000000000.log" not in files  # the first segment is not read


def test_internal_topic_decoder(kl):
    d = REAL / "william0423-indexed-zk" / "__consumer_offsets-28"
    rows = [x for x in kl("--json", "dump", "--records", "--limit", 5, d).json() if x["type"] == "record"]
    assert rows[0]["decoded"]["type"] == "group_metadata"
    assert rows[0]["decoded"]["key"]["data"]["group"] == "debug-consumer-group"
    commit = rows[1]["decoded"]
    assert commit["type"] == "offset_commit" and commit["key"]["data"]["topic"] == "debug_topic"
    none = [x for x in kl("--json", "dump", "--records", "--limit", 2, "--decoder", "none", d).json()
            if x["type"] == "record"]
    assert all("decoded" not in x for x in none)
    # a plain topic is not decoded in auto mode; a forced decoder on it reports errors, not crashes
    plain = REAL / "biggerbrain-gzip-headers" / "lsx1-0"
    assert all("decoded" not in x for x in kl("--json", "dump", "--records", plain).json())
    forced = kl("--json", "dump", "--records", "--decoder", "consumer-offsets", plain)
    assert forced.code == 0
    assert all("decode_error" in x for x in forced.json() if x["type"] == "record")
