"""kltool append end to end: round trips through dump, an independent reader (kafka-python), verify,
the partitioner, input formats, transactions, and the all-or-nothing error handling."""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
from pathlib import Path

import pytest

from kltool.format.partitioner import default_partition
from kltool.storage.index_builder import check_offset_index_invariant
from kltool.storage.partition import Partition

from .test_partitioner import KAFKA_VECTORS

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TS0 = 1700000000000


# ------------------------------------------------------------------------------------------------ helpers


def make_topic(kl, tmp_path, topic="orders", partitions=1, *config, name="logs") -> Path:
    ld = tmp_path / name
    args = []
    for c in config:
        args += ["--config", c]
    r = kl("create", ld, topic, "--partitions", partitions, *args)
    assert r.code == 0, r
    return ld


def jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def dumped_records(kl, path, *extra) -> list[dict]:
    r = kl("--json", "dump", "--records", *extra, path)
    assert r.code == 0, r
    return [o for o in r.json() if o["type"] == "record"]


def kp_read(log_path: Path) -> list[tuple]:
    """Every record of a segment through kafka-python's reader (an independent implementation)."""
    import kafka.codec
    from kafka.record import MemoryRecords

    if kafka.codec.xxhash is None:  # only for magic-0 lz4 (KAFKA-3160 header checksum); package not installed
        kafka.codec.xxhash = _XxhashShim
    mr = MemoryRecords(log_path.read_bytes())
    out = []
    while True:
        b = mr.next_batch()
        if b is None:
            break
        for r in b:
            out.append((r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]))
    return out


class _XxhashShim:
    """The one call kafka-python makes to the ``xxhash`` package: ``xxh32(data).digest()``."""

    def __init__(self, data):
        from kltool.format.compression import xxh32

        self._h = xxh32(bytes(data))

    @classmethod
    def xxh32(cls, data):
        return cls(data)

    def digest(self) -> bytes:
        return self._h.to_bytes(4, "big")


def as_bytes(v):
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode()
    if "base64" in v:
        return base64.b64decode(v["base64"])
    return bytes.fromhex(v["hex"])


def check_indexes(part_dir: Path) -> None:
    """Kafka's lookup rules hold for every segment: each offset-index entry names a batch start whose
    batch ends at or before the entry's offset (and no earlier batch reaches it); time-index
    timestamps strictly increase, offsets never decrease, and each names the batch holding it."""
    p = Partition(part_dir)
    for seg in p.segments:
        batches = list(seg.batches())
        assert check_offset_index_invariant(seg.offset_index(), batches) == [], seg
        ti = seg.time_index()
        for (t1, o1), (t2, o2) in zip(ti, ti[1:], strict=False):
            assert t2 > t1 and o2 >= o1
        by_last = {h.last_offset: h for h in batches}
        for ts, off in ti:
            assert by_last[off].max_timestamp == ts
        assert seg.index_path.stat().st_size % 8 == 0 and seg.timeindex_path.stat().st_size % 12 == 0


def sample_records(n=40, *, headers=True, seed=1):
    rnd = random.Random(seed)
    recs = []
    for i in range(n):
        key = None if i % 5 == 0 else (f"key-{i}" if i % 3 else {"base64": base64.b64encode(rnd.randbytes(9)).decode()})
        if i % 7 == 0:
            value = None
        elif i % 4 == 0:
            value = {"base64": base64.b64encode(bytes([0xFF, 0xFE, 0, 1, 2]) + rnd.randbytes(20)).decode()}
        else:
            value = f"value {i} ünïcødé " + "x" * rnd.randint(0, 300)
        rec = {"key": key, "value": value, "timestamp": TS0 + i * 3 - (5 if i % 6 == 0 else 0)}
        if headers and i % 2:
            rec["headers"] = [{"key": "trace", "value": f"t{i}"}, {"key": "bin", "value": {"base64": "AP8="}},
                              {"key": "nil", "value": None}]
        recs.append(rec)
    return recs


# ------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(("magic", "codec"), [(m, c) for m in (2, 1, 0) for c in CODECS
                                               if not (c == "zstd" and m < 2)])  # zstd exists only in v2
def test_round_trip_every_codec_and_magic(kl, tmp_path, magic, codec):
    ld = make_topic(kl, tmp_path)
    recs = sample_records(headers=magic == 2)
    r = kl("--json", "append", ld, "orders", "--magic", magic, "--compression", codec, "--batch-bytes", "900",
           stdin=jsonl(recs))
    assert r.code == 0, r
    summary = r.json()[-1]
    assert summary["records"] == len(recs) and summary["batches"] >= (3 if magic == 2 or codec != "none" else 40)
    got = dumped_records(kl, ld / "orders-0")
    assert [g["offset"] for g in got] == list(range(len(recs)))
    for g, want in zip(got, recs, strict=True):
        assert as_bytes(g["key"]) == as_bytes(want["key"])
        assert as_bytes(g["value"]) == as_bytes(want["value"])
        assert g["timestamp"] == (-1 if magic == 0 else want["timestamp"])
        want_h = [(h["key"].encode(), as_bytes(h["value"])) for h in want.get("headers", [])]
        assert [(h["key"].encode(), as_bytes(h["value"])) for h in g["headers"]] == want_h
    # an independent reader agrees, record by record
    kp = kp_read(ld / "orders-0" / "00000000000000000000.log")
    assert [(o, k, v) for o, _t, k, v, _h in kp] == [(i, as_bytes(x["key"]), as_bytes(x["value"]))
                                                      for i, x in enumerate(recs)]
    if magic == 2:
        assert [h for *_x, h in kp] == [[(h["key"], as_bytes(h["value"])) for h in x.get("headers", [])]
                                        for x in recs]
    v = kl("verify", "--deep", ld)
    assert v.code == 0 and "0 errors, 0 warnings" in v.out, v
    check_indexes(ld / "orders-0")


def test_dump_output_appends_back_identically(kl, tmp_path):
    a = make_topic(kl, tmp_path, "src", 3, name="a")
    recs = sample_records(60)
    assert kl("append", a, "src", "--compression", "zstd", "--partitioner", "round-robin", stdin=jsonl(recs)).code == 0
    dump = kl("--json", "dump", "--records", a)  # batch lines and record lines, with "partition"
    assert dump.code == 0
    b = make_topic(kl, tmp_path, "src", 3, name="b")
    r = kl("--json", "append", b, "src", stdin=dump.out)
    assert r.code == 0, r
    assert r.json()[-1]["skipped_lines"] > 0  # the batch lines
    strip = ("size", "batch_offset")
    first = [{k: v for k, v in o.items() if k not in strip} for o in dumped_records(kl, a)]
    second = [{k: v for k, v in o.items() if k not in strip} for o in dumped_records(kl, b)]
    assert first == second and len(first) == 60


def test_appending_continues_offsets_and_resumes_indexes(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1, "index.interval.bytes=500")
    recs = [{"key": f"k{i}", "value": "v" * 100, "timestamp": TS0 + i} for i in range(300)]
    assert kl("append", ld, "t", "--batch-records", "3", stdin=jsonl(recs[:150])).code == 0
    seg = ld / "t-0" / "00000000000000000000"
    first_index = Path(f"{seg}.index").read_bytes()
    assert len(first_index) > 0
    assert kl("append", ld, "t", "--batch-records", "3", stdin=jsonl(recs[150:])).code == 0
    second_index = Path(f"{seg}.index").read_bytes()
    assert second_index.startswith(first_index) and len(second_index) > len(first_index)
    got = dumped_records(kl, ld / "t-0")
    assert [g["offset"] for g in got] == list(range(300))
    assert [g["key"] for g in got] == [f"k{i}" for i in range(300)]
    check_indexes(ld / "t-0")
    assert kl("verify", ld).code == 0


# ------------------------------------------------------------------------------------------- partitioner


def test_murmur2_partitions_like_the_java_producer(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "keyed", 7)
    keys = [k for k, _h in KAFKA_VECTORS] + [f"user-{i}".encode() for i in range(50)]
    recs = [{"key": k.decode(), "value": f"v{i}"} for i, k in enumerate(keys)] * 2  # same key twice
    r = kl("--json", "append", ld, "keyed", stdin=jsonl(recs))
    assert r.code == 0, r
    for p in range(7):
        for g in dumped_records(kl, ld / f"keyed-{p}"):
            key = g["key"].encode()
            assert default_partition(key, 7) == p
            # Kafka's own vectors: toPositive(murmur2(key)) % 7
            for vk, h in KAFKA_VECTORS:
                if vk == key:
                    assert (h & 0x7FFFFFFF) % 7 == p
    total = sum(len(dumped_records(kl, ld / f"keyed-{p}")) for p in range(7))
    assert total == len(recs)


def test_partition_count_comes_from_create_even_if_some_dirs_are_elsewhere(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 4)
    shutil.rmtree(ld / "t-3")  # this broker holds only partitions 0-2
    key = next(f"k{i}" for i in range(1000) if default_partition(f"k{i}".encode(), 4) == 3)
    r = kl("append", ld, "t", "--key", key, "--value", "x")
    assert r.code == 2 and "partition 3 of topic t is not in this log dir" in r.err
    key = next(f"k{i}" for i in range(1000) if default_partition(f"k{i}".encode(), 4) == 1)
    assert kl("append", ld, "t", "--key", key, "--value", "x").code == 0
    assert len(dumped_records(kl, ld / "t-1")) == 1


def test_round_robin_and_sticky_for_null_keys(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "rr", 3)
    assert kl("append", ld, "rr", "--partitioner", "round-robin", stdin=jsonl([{"value": str(i)} for i in range(9)])).code == 0
    for p in range(3):
        assert [g["value"] for g in dumped_records(kl, ld / f"rr-{p}")] == [str(i) for i in range(p, 9, 3)]
    ld2 = make_topic(kl, tmp_path, "st", 3, name="logs2")
    r = kl("--json", "append", ld2, "st", "--batch-bytes", "2000", stdin=jsonl([{"value": "x" * 100} for _ in range(600)]))
    assert r.code == 0
    # sticky: each batch is full (about 2000 bytes) and batches spread over the partitions
    used = [a["partition"] for a in r.json() if a["type"] == "action"]
    assert len(used) >= 2
    for p in used:
        hs = [json.loads(x) for x in kl("--json", "dump", ld2 / f"st-{p}").out.splitlines()]
        counts = [h["count"] for h in hs if h["type"] == "batch"]
        assert all(c >= 15 for c in counts[:-1])


def test_explicit_partition_wins_over_input(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 3)
    r = kl("append", ld, "t", "-p", "2", stdin=jsonl([{"key": "a", "value": "1", "partition": 0}]))
    assert r.code == 0
    assert len(dumped_records(kl, ld / "t-2")) == 1
    r = kl("append", ld, "t", stdin=jsonl([{"key": "a", "value": "1", "partition": 1}]))
    assert len(dumped_records(kl, ld / "t-1")) == 1


# ------------------------------------------------------------------------------------------- input forms


def test_text_lines_with_and_without_key_separator(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1)
    assert kl("append", ld, "t", "--format", "text", stdin="hello\nworld\r\n\n").code == 0
    assert kl("append", ld, "t", "--key-separator", ":", stdin="k1:v:1\nk2:\n").code == 0
    got = [(g["key"], g["value"]) for g in dumped_records(kl, ld / "t-0")]
    assert got == [(None, "hello"), (None, "world"), (None, ""), ("k1", "v:1"), ("k2", "")]
    r = kl("append", ld, "t", "--key-separator", ":", stdin="good:1\nno separator\n")
    assert r.code == 2 and "line 2" in r.err and "No key separator" in r.err
    assert len(dumped_records(kl, ld / "t-0")) == 5


def test_text_lines_keep_binary_bytes(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1)
    assert kl("append", ld, "t", "--format", "text", stdin=b"\xff\xfe raw\n").code == 0
    assert kp_read(ld / "t-0" / "00000000000000000000.log")[0][3] == b"\xff\xfe raw"


def test_single_record_options(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1)
    r = kl("append", ld, "t", "--key", "k", "--value", "v", "--header", "a=1", "--header", "b",
           "--timestamp", "2024-01-02T03:04:05Z")
    assert r.code == 0, r
    assert kl("append", ld, "t", "--key", "gone").code == 0  # a tombstone
    got = dumped_records(kl, ld / "t-0")
    assert got[0]["key"] == "k" and got[0]["value"] == "v" and got[0]["timestamp"] == 1704164645000
    assert got[0]["headers"] == [{"key": "a", "value": "1"}, {"key": "b", "value": None}]
    assert got[1]["key"] == "gone" and got[1]["value"] is None


def test_json_values_that_are_not_bytes_are_written_as_json(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1)
    recs = [{"value": {"user": 1, "tags": ["a"]}}, {"value": 42}, {"value": {"hex": "00ff"}}, {"key": {"text": "t"}}]
    assert kl("append", ld, "t", stdin=jsonl(recs)).code == 0
    got = kp_read(ld / "t-0" / "00000000000000000000.log")
    assert [x[3] for x in got] == [b'{"user":1,"tags":["a"]}', b"42", b"\x00\xff", None]
    assert got[3][2] == b"t"


def test_log_append_time(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1, "message.timestamp.type=LogAppendTime")
    r = kl("append", ld, "t", "--append-time", "1710000000000", stdin=jsonl(sample_records(10)))
    assert r.code == 0, r
    got = dumped_records(kl, ld / "t-0")
    assert {g["timestamp"] for g in got} == {1710000000000}
    assert {g["timestamp_type"] for g in got} == {"log_append"}
    ld2 = make_topic(kl, tmp_path, "t", 1, name="logs2")
    assert kl("append", ld2, "t", "--timestamp-type", "log-append", "--magic", "1", "--append-time", "5",
              stdin=jsonl(sample_records(5, headers=False))).code == 0
    assert {g["timestamp"] for g in dumped_records(kl, ld2 / "t-0")} == {5}
    assert kl("verify", ld, ld2).code == 0


def test_timestamps_default_to_now(kl, tmp_path):
    import time

    ld = make_topic(kl, tmp_path, "t", 1)
    t0 = int(time.time() * 1000)
    assert kl("append", ld, "t", stdin=jsonl([{"value": "x"}, {"value": "y", "timestamp": -1}])).code == 0
    got = dumped_records(kl, ld / "t-0")
    assert t0 - 5 <= got[0]["timestamp"] <= int(time.time() * 1000) + 5
    assert got[1]["timestamp"] == -1


# ------------------------------------------------------------------------------------ bad input, safety


def _snapshot_tree(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", "invalid JSON"),
    ('["a list"]', "expected a JSON object"),
    ('{"value": "x", "timestamp": -5}', "invalid timestamp -5"),
    ('{"value": "x", "timestamp": "yesterday"}', "cannot read time"),
    ('{"value": "x", "partition": 9}', "partition 9 does not exist"),
    ('{"value": "x", "partition": "0"}', "partition must be an integer"),
    ('{"value": {"base64": "!!"}}', "value"),
    ('{"value": "x", "headers": "h"}', "headers must be"),
    ('{"value": "x", "headers": [{"key": null, "value": "v"}]}', "header key must not be null"),
    ('{"value": "x"} trailing', "Extra data"),
    ('{"value": "\\ud800"}', "not valid Unicode"),
    ('{"value": "x", "partition": true}', "partition must be an integer"),
])
def test_bad_input_names_the_line_and_writes_nothing(kl, tmp_path, line, message):
    ld = make_topic(kl, tmp_path, "t", 2)
    assert kl("append", ld, "t", "-p", "0", "--value", "before").code == 0
    before = _snapshot_tree(ld)
    good = jsonl([{"key": f"k{i}", "value": "v"} for i in range(5)])
    r = kl("append", ld, "t", stdin=good + line + "\n" + good)
    assert r.code == 2, r
    assert "line 6" in r.err and message in r.err, r.err
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    assert _snapshot_tree(ld) == before


def test_oversized_record_is_refused_with_its_line(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1, "max.message.bytes=2000")
    before = _snapshot_tree(ld)
    recs = [{"value": "x" * 100}] * 3 + [{"value": "y" * 5000}]
    r = kl("append", ld, "t", stdin=jsonl(recs))
    assert r.code == 2 and "line 4" in r.err and "max.message.bytes (2000)" in r.err, r
    assert _snapshot_tree(ld) == before
    # compressible: the batch Kafka checks is small enough
    assert kl("append", ld, "t", "--compression", "gzip", stdin=jsonl(recs)).code == 0
    # many records that together pass the limit go into several batches
    assert kl("append", ld, "t", "--batch-bytes", "100000", stdin=jsonl([{"value": "z" * 300}] * 20)).code == 0
    sizes = [json.loads(x)["size"] for x in kl("--json", "dump", ld / "t-0").out.splitlines()]
    assert max(sizes) <= 2000


def test_bad_last_line_writes_nothing_and_old_memory_limit_is_accepted(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 2)
    before = _snapshot_tree(ld)
    good = jsonl([{"key": f"k{i}", "value": "v" * 1000} for i in range(3000)])  # about 3 MB: over 1 MiB
    r = kl("append", ld, "t", "--memory-limit", "1", stdin=good + "oops\n")
    assert r.code == 2 and "line 3001" in r.err
    assert _snapshot_tree(ld) == before
    assert sorted(os.listdir(ld / "t-0")) == sorted(x.split("/")[-1] for x in before if x.startswith("t-0/"))
    r = kl("--json", "append", ld, "t", "--memory-limit", "1", stdin=good)
    assert r.code == 0 and r.json()[-1]["records"] == 3000
    assert sum(len(dumped_records(kl, ld / f"t-{p}")) for p in range(2)) == 3000
    assert kl("verify", ld).code == 0


def test_unknown_topic_and_magic_conflicts(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1)
    r = kl("append", ld, "nope", "--value", "x")
    assert r.code == 2 and "unknown topic 'nope'" in r.err
    r = kl("append", ld, "t", "--magic", "1", "--compression", "zstd", "--value", "x")
    assert r.code == 2 and "zstd needs magic 2" in r.err
    r = kl("append", ld, "t", "--magic", "1", "--header", "h=1", "--value", "x")
    assert r.code == 2 and "headers need magic 2" in r.err
    r = kl("append", ld, "t", "--transactional", "--value", "x")
    assert r.code == 2 and "producer id" in r.err
    r = kl("append", tmp_path / "missing", "t", "--value", "x")
    assert r.code == 2


def test_refused_while_a_broker_holds_the_lock(kl, tmp_path):
    from tests.test_fs import hold_lock, stop

    ld = make_topic(kl, tmp_path, "t", 1)
    before = _snapshot_tree(ld)
    p = hold_lock(ld / ".lock")
    try:
        r = kl("append", ld, "t", "--value", "x")
        assert r.code == 3 and "a broker or another kltool holds" in r.err
        r = kl("append", ld, "t", "--value", "x", "--dry-run")
        assert r.code == 3 and "a broker or another kltool holds" in r.err
    finally:
        stop(p)
    assert _snapshot_tree(ld) == before


def test_refuses_to_append_after_a_torn_tail(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1)
    assert kl("append", ld, "t", stdin=jsonl(sample_records(10))).code == 0
    log = ld / "t-0" / "00000000000000000000.log"
    data = log.read_bytes()
    log.write_bytes(data[:-7])  # an append interrupted in the middle of its last batch
    v = kl("--json", "verify", ld)
    assert v.code == 1 and any(o.get("kind") == "torn_tail" for o in v.json())
    r = kl("append", ld, "t", "--value", "x")
    assert r.code == 3 and "torn_tail" in r.err and "verify --repair" in r.err
    assert log.read_bytes() == data[:-7]


def test_dry_run_writes_nothing(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1, "segment.bytes=2000")
    before = _snapshot_tree(ld)
    r = kl("--json", "append", ld, "t", "--dry-run", "--batch-records", "5", stdin=jsonl(sample_records(60)))
    assert r.code == 1, r
    s = r.json()[-1]
    assert s["dry_run"] and s["records"] == 60 and s["segments_rolled"] >= 1
    assert _snapshot_tree(ld) == before
    real = kl("--json", "append", ld, "t", "--batch-records", "5", stdin=jsonl(sample_records(60)))
    assert {k: v for k, v in real.json()[-1].items() if k not in ("seconds", "dry_run")} == \
        {k: v for k, v in s.items() if k not in ("seconds", "dry_run")}


# ------------------------------------------------------------------------------- producers, transactions


def test_idempotent_sequences_continue_across_runs(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1)
    assert kl("append", ld, "t", "--producer-id", "42", "--batch-records", "2", stdin=jsonl(sample_records(5))).code == 0
    assert kl("append", ld, "t", "--producer-id", "42", stdin=jsonl(sample_records(3))).code == 0
    got = dumped_records(kl, ld / "t-0")
    assert [g["sequence"] for g in got] == list(range(8))
    assert kl("append", ld, "t", "--producer-id", "42", "--producer-epoch", "1", "--value", "x").code == 0
    assert dumped_records(kl, ld / "t-0")[-1]["sequence"] == 0  # a new epoch starts at 0
    r = kl("append", ld, "t", "--producer-id", "42", "--producer-epoch", "0", "--value", "x")
    assert r.code == 2 and "epochs only grow" in r.err
    # the last record (timestamp now) is more than segment.ms (7 days) after the segment's first batch
    # (2023): the broker rolls, and snapshots the producer state at the new segment's base offset
    snaps = sorted((ld / "t-0").glob("*.snapshot"))
    assert [s.name for s in snaps] == ["00000000000000000008.snapshot", "00000000000000000009.snapshot"]
    d = kl("--json", "dump", snaps[0]).json()
    assert [(e["producer_epoch"], e["last_sequence"], e["last_offset"], e["offset_delta"]) for e in d] == [(0, 7, 7, 2)]
    d = kl("--json", "dump", snaps[1]).json()
    assert d == [{"type": "producer_snapshot_entry", "file": str(snaps[1]), "producer_id": 42, "producer_epoch": 1,
                  "coordinator_epoch": -1, "current_txn_first_offset": -1, "last_timestamp": d[0]["last_timestamp"],
                  "last_sequence": 0, "last_offset": 8, "offset_delta": 0}]


def test_transactions_commit_abort_and_txn_index(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 2)
    recs = [{"key": f"k{i}", "value": f"v{i}", "partition": i % 2} for i in range(6)]
    r = kl("--json", "append", ld, "t", "--producer-id", "7", "--transactional", "--end-transaction", "abort",
           "--coordinator-epoch", "3", stdin=jsonl(recs))
    assert r.code == 0, r
    assert r.json()[-1]["markers"] == 2
    r = kl("append", ld, "t", "--producer-id", "7", "--transactional", "--end-transaction", "commit",
           "--coordinator-epoch", "3", stdin=jsonl(recs))
    assert r.code == 0
    for p in range(2):
        d = ld / f"t-{p}"
        got = dumped_records(kl, d)
        controls = [g["control"] for g in got if "control" in g]
        assert controls == [{"type": "ABORT", "coordinator_epoch": 3}, {"type": "COMMIT", "coordinator_epoch": 3}]
        txn = kl("--json", "dump", d / "00000000000000000000.txnindex").json()
        assert [(t["producer_id"], t["first_offset"], t["last_offset"], t["last_stable_offset"]) for t in txn] == \
            [(7, 0, 3, 4)]
        kp = kp_read(d / "00000000000000000000.log")
        assert len(kp) == 8  # 6 data records + 2 markers
        assert kl("verify", "--deep", d).code == 0
    # an open transaction must be continued or ended
    assert kl("append", ld, "t", "-p", "0", "--producer-id", "9", "--transactional", "--value", "x").code == 0
    r = kl("append", ld, "t", "-p", "0", "--producer-id", "9", "--value", "y")
    assert r.code == 2 and "open transaction" in r.err
    r = kl("append", ld, "t", "--producer-id", "9", "--end-transaction", "abort", stdin="")
    assert r.code == 0 and "1 marker" in r.out


def test_leader_epoch_checkpoint(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 1)
    assert kl("append", ld, "t", "--value", "a").code == 0
    assert (ld / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    assert kl("append", ld, "t", "--value", "b").code == 0
    assert (ld / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    assert kl("append", ld, "t", "--leader-epoch", "4", "--value", "c").code == 0
    assert (ld / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n4 2\n"
    assert kl("append", ld, "t", "--value", "d").code == 0  # default: the latest epoch
    batches = [json.loads(x) for x in kl("--json", "dump", ld / "t-0").out.splitlines()]
    assert [b["partition_leader_epoch"] for b in batches] == [0, 0, 4, 4]
    r = kl("append", ld, "t", "--leader-epoch", "2", "--value", "e")
    assert r.code == 2 and "only grow" in r.err


# ------------------------------------------------------------------------------------- Kafka's own reader


@pytest.mark.oracle
def test_kafkas_own_reader_accepts_every_segment(kl, tmp_path, kafka_oracle):
    ld = make_topic(kl, tmp_path, "t", 1, "segment.bytes=6000")
    expected = 0
    for magic in (2, 1, 0):
        for codec in CODECS:
            if codec == "zstd" and magic < 2:
                continue
            recs = sample_records(30, headers=magic == 2, seed=magic * 10 + len(codec))
            extra = ["--producer-id", "5", "--transactional", "--end-transaction", "commit"] if magic == 2 else []
            r = kl("append", ld, "t", "--magic", magic, "--compression", codec, "--batch-bytes", "1500", *extra,
                   stdin=jsonl(recs))
            assert r.code == 0, r
            expected += len(recs) + (1 if extra else 0)
    logs = sorted((ld / "t-0").glob("*.log"))
    assert len(logs) > 3
    code, lines = kafka_oracle(logs, records=True)
    assert code == 0, [x for x in lines if x["type"] == "summary"]
    records = [x for x in lines if x["type"] == "record"]
    assert len(records) == expected
    assert all(x["validBytes"] == x["fileSize"] and x["error"] is None for x in lines if x["type"] == "summary")
    mine = dumped_records(kl, ld / "t-0")
    assert [(m["offset"], as_bytes(m["key"]), as_bytes(m["value"])) for m in mine] == \
        [(x["offset"], None if x["key"] is None else base64.b64decode(x["key"]),
          None if x["value"] is None else base64.b64decode(x["value"])) for x in records]


def test_end_transaction_reaches_partitions_opened_earlier(kl, tmp_path):
    ld = make_topic(kl, tmp_path, "t", 3)
    assert kl("append", ld, "t", "-p", "1", "--producer-id", "5", "--transactional", "--value", "a").code == 0
    r = kl("--json", "append", ld, "t", "-p", "0", "--producer-id", "5", "--transactional",
           "--end-transaction", "commit", "--value", "b")
    assert r.code == 0, r
    acts = {a["partition"]: a for a in r.json() if a["type"] == "action"}
    assert sorted(acts) == [0, 1] and acts[1]["records"] == 0 and acts[1]["markers"] == 1
    for p in (0, 1):
        assert [g.get("control", {}).get("type") for g in dumped_records(kl, ld / f"t-{p}")] == [None, "COMMIT"]
    assert dumped_records(kl, ld / "t-2") == []


def _dying_writev(monkeypatch, *, crash: bool, at: int = 1) -> list:
    """The writer's ``at``-th os.writev writes half of its block and then the run stops: KeyboardInterrupt,
    or with ``crash`` a process death (nothing after it runs: the writers' undo is switched off).
    Returns the list of .log files that existed when it stopped (filled in then)."""
    import kltool.storage.write.writer as writer

    real = os.writev
    calls = []
    seen = []

    def dying(fd, bufs):
        calls.append(fd)
        if len(calls) < at:
            return real(fd, bufs)
        data = b"".join(bytes(b) for b in bufs)
        real(fd, [data[: len(data) // 2 + 3]])
        seen.extend(sorted(Path(os.readlink(f"/proc/self/fd/{fd}")).parent.glob("*.log")))
        raise KeyboardInterrupt

    monkeypatch.setattr(writer.os, "writev", dying)
    if crash:
        monkeypatch.setattr(writer.PartitionWriter, "abort", lambda self, undo=True: self._release())
    return seen


def test_an_interrupted_append_is_undone(kl, tmp_path, monkeypatch):
    ld = make_topic(kl, tmp_path, "t", 1, "index.interval.bytes=100", "segment.bytes=3000")
    assert kl("append", ld, "t", "--batch-records", "2", stdin=jsonl(sample_records(20))).code == 0
    (ld / ".kafka_cleanshutdown").write_bytes(b"")  # a broker before 3.7 stopped cleanly
    before = _snapshot_tree(ld)
    logs = _dying_writev(monkeypatch, crash=False, at=4)
    r = kl("append", ld, "t", "--batch-records", "2", stdin=jsonl(sample_records(60, seed=2)))
    monkeypatch.undo()
    assert r.code == 130
    assert len(logs) > len([k for k in before if k.endswith(".log")])  # it had rolled new segments
    assert _snapshot_tree(ld) == before  # segments cut back, the rolled ones removed


def test_a_crash_while_appending_leaves_only_a_torn_tail(kl, tmp_path, monkeypatch):
    ld = make_topic(kl, tmp_path, "t", 1, "index.interval.bytes=100")
    assert kl("append", ld, "t", "--batch-records", "2", stdin=jsonl(sample_records(20))).code == 0
    part = ld / "t-0"
    index_before = (part / "00000000000000000000.index").read_bytes()
    size_before = (part / "00000000000000000000.log").stat().st_size
    _dying_writev(monkeypatch, crash=True)
    r = kl("append", ld, "t", "--batch-records", "2", stdin=jsonl(sample_records(20, seed=2)))
    monkeypatch.undo()
    assert r.code == 130
    assert (part / "00000000000000000000.log").stat().st_size > size_before
    assert (part / "00000000000000000000.index").read_bytes() == index_before  # indexes only after the data
    v = kl("--json", "verify", ld)
    kinds = [o["kind"] for o in v.json() if o["type"] == "finding"]
    assert v.code == 1 and kinds == ["torn_tail"], v
    # what Kafka's recovery keeps: everything before the torn batch
    assert [o for o, *_ in kp_read(part / "00000000000000000000.log")][:20] == list(range(20))


def test_bad_line_in_the_middle_undoes_written_and_rolled_segments(kl, tmp_path):
    """Batches go to the segments while the input is read: a bad line after several MiB (written
    blocks, rolled segments, in two partitions) leaves the log dir byte for byte as it was."""
    ld = make_topic(kl, tmp_path, "t", 2, "segment.bytes=1000000")
    assert kl("append", ld, "t", stdin=jsonl(sample_records(50))).code == 0
    marker = b'{"version":0,"brokerEpoch":7}'
    (ld / ".kafka_cleanshutdown").write_bytes(marker)  # a broker stopped cleanly
    before = _snapshot_tree(ld)
    good = [{"key": f"k{i}", "value": "v" * 1000, "timestamp": TS0 + i} for i in range(12000)]  # ~12 MB
    text = jsonl(good[:9000]) + '{"value": "x", "timestamp": "never"}\n' + jsonl(good[9000:])
    r = kl("append", ld, "t", stdin=text)
    assert r.code == 2 and "line 9001" in r.err and r.err.count("\n") == 1, r
    assert _snapshot_tree(ld) == before
    r = kl("--json", "append", ld, "t", stdin=jsonl(good))
    assert r.code == 0 and r.json()[-1]["records"] == 12000 and r.json()[-1]["segments_rolled"] >= 4, r
    assert (ld / ".kafka_cleanshutdown").read_bytes() == marker  # finished: as a clean shutdown leaves it
    assert kl("verify", ld).code == 0
    for p in (0, 1):
        check_indexes(ld / f"t-{p}")


def test_killed_while_appending_keeps_everything_before(kl, tmp_path):
    """A real kill -9 in the middle of an append (input still arriving on a pipe): whole batches after
    the old log end, indexes of the old data untouched, the broker's clean-shutdown marker away (so
    its recovery runs); verify finds no error, and every record that was there before is read back."""
    import signal
    import subprocess
    import sys
    import time

    ld = make_topic(kl, tmp_path, "t", 1, "segment.bytes=3000000")
    assert kl("append", ld, "t", stdin=jsonl(sample_records(40))).code == 0
    part = ld / "t-0"
    old = kp_read(part / "00000000000000000000.log")
    (ld / ".kafka_cleanshutdown").write_bytes(b'{"version":0,"brokerEpoch":3}')
    before = _snapshot_tree(ld)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    p = subprocess.Popen([sys.executable, "-c", "import sys; from kltool.cli import main; sys.exit(main())",
                          "append", str(ld), "t", "-i", "-"], stdin=subprocess.PIPE, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        line = (json.dumps({"key": "k", "value": "v" * 1000, "timestamp": TS0}) + "\n").encode()
        p.stdin.write(line * 12000)  # ~12 MB: more than a write block, and rolls
        p.stdin.flush()
        deadline = time.monotonic() + 60
        while sum(f.stat().st_size for f in part.glob("*.log")) <= len(before["t-0/00000000000000000000.log"]):
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.01)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdin.close()
    after = _snapshot_tree(ld)
    # nothing but .log data changed, and the clean-shutdown marker is gone: the broker will recover
    # the segments written (cut a torn tail, rebuild indexes) rather than trust them
    assert ".kafka_cleanshutdown" not in after
    assert {k: v for k, v in after.items() if not k.endswith(".log")} == \
        {k: v for k, v in before.items() if not k.endswith(".log") and k != ".kafka_cleanshutdown"}
    assert after["t-0/00000000000000000000.log"].startswith(before["t-0/00000000000000000000.log"])
    v = kl("--json", "verify", ld)
    assert v.code in (0, 1) and v.json()[-1]["errors"] == 0, v
    assert kp_read(part / "00000000000000000000.log")[:40] == old
    from .conftest import find_oracle

    exe = find_oracle()
    if exe is not None:  # Kafka's own reader: every .log reads to its end (whole batches), old records first
        logs = sorted(part.glob("*.log"))
        out = subprocess.run([str(exe), "read", "--records", *map(str, logs)], capture_output=True, text=True,
                             timeout=300)
        rows = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
        assert out.returncode == 0 and all(x["error"] is None for x in rows if x["type"] == "summary"), rows[-3:]
        recs = [x for x in rows if x["type"] == "record"]
        assert [x["offset"] for x in recs] == list(range(len(recs))) and len(recs) > 40
        assert [x["value"] and base64.b64decode(x["value"]) for x in recs[:40]] == [v for _o, _t, _k, v, _h in old]
    assert kl("verify", "--repair", ld).code in (0, 1)
    assert kl("verify", ld).code == 0


def test_many_partitions_hold_no_descriptors_and_little_memory(kl, tmp_path):
    """Every partition written while the input is read: a segment file is open only while a block is
    written (100 partitions under a limit of 40 descriptors), and --memory-limit bounds what the
    partitions hold together (1 MiB here: written many times over while reading)."""
    import subprocess
    import sys

    ld = make_topic(kl, tmp_path, "t", 100)
    src = tmp_path / "in.jsonl"
    src.write_text(jsonl([{"value": f"{i}:" + "v" * 1000} for i in range(3000)]))
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40));"
            "from kltool.cli import main; sys.exit(main())")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    p = subprocess.run([sys.executable, "-c", code, "--json", "append", str(ld), "t", "-i", str(src),
                        "--partitioner", "round-robin", "--memory-limit", "1"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.splitlines()[-1])["records"] == 3000
    assert kl("verify", ld).code == 0
    values = sorted(int(as_bytes(r["value"]).split(b":")[0]) for r in dumped_records(kl, ld))
    assert values == list(range(3000))


@pytest.mark.oracle
def test_kafkas_reader_reads_what_was_appended_after_an_undone_append(kl, tmp_path, kafka_oracle):
    ld = make_topic(kl, tmp_path, "t", 1, "segment.bytes=100000")
    assert kl("append", ld, "t", stdin=jsonl(sample_records(50))).code == 0
    before = _snapshot_tree(ld)
    good = [{"key": f"k{i}", "value": f"{i}:" + "v" * 500, "timestamp": TS0 + i} for i in range(1000)]
    r = kl("append", ld, "t", stdin=jsonl(good[:700]) + "{oops\n" + jsonl(good[700:]))
    assert r.code == 2 and "line 701" in r.err, r
    assert _snapshot_tree(ld) == before
    assert kl("append", ld, "t", stdin=jsonl(good)).code == 0
    logs = sorted((ld / "t-0").glob("*.log"))
    assert len(logs) > 3
    code, rows = kafka_oracle(logs, records=True)
    assert code == 0 and all(x["validBytes"] == x["fileSize"] and x["error"] is None
                             for x in rows if x["type"] == "summary"), rows[-3:]
    recs = [x for x in rows if x["type"] == "record"]
    assert [x["offset"] for x in recs] == list(range(1050))
    assert [base64.b64decode(x["value"]).decode() for x in recs[50:]] == [g["value"] for g in good]
