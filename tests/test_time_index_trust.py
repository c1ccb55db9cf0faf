"""A damaged ``.timeindex`` never changes the answer of a lookup by time: its entries are checked before
use (the batch holding an entry's offset has the entry's timestamp as its largest), and a segment whose
entries fail falls back to a scan. Checked through the library (Partition.offset_for_time) and the
kafka-log planner (startingTimestamp, which a pushed timestamp filter becomes), against brute force."""

from __future__ import annotations

import json
import random
import struct

import pytest

from kltool.storage import open_path

T0 = 1_700_000_000_000


def make(tmp_path, kl):
    rnd = random.Random(5)
    ld = tmp_path / "ld"
    assert kl("create", ld, "tt", "-p", "1", "--config", "segment.bytes=6000",
              "--config", "index.interval.bytes=400").code == 0
    recs = [{"key": f"k{i}", "value": "x" * 30, "timestamp": T0 + 1000 * i + rnd.randrange(-5_000, 5_000)}
            for i in range(600)]
    stdin = "".join(json.dumps(r) + "\n" for r in recs)
    assert kl("append", ld, "tt", "-p", "0", "--batch-records", "3", stdin=stdin).code == 0
    p = open_path(ld).partitions[0]
    assert len(p.segments) > 3 and all(len(s.time_index()) > 2 for s in p.segments[:-1])
    return ld, [r["timestamp"] for r in recs]


def damage(ld, how: str) -> None:
    rnd = random.Random(7)
    for ti in sorted((ld / "tt-0").glob("*.timeindex")):
        data = ti.read_bytes()
        n = len(data) // 12
        entries = [struct.unpack_from(">qi", data, 12 * i) for i in range(n)]
        if how == "shifted":  # every timestamp an hour early: a valid-looking, ordered index
            out = b"".join(struct.pack(">qi", ts - 3_600_000, rel) for ts, rel in entries)
        elif how == "offsets":  # entries pointing 40 offsets on
            out = b"".join(struct.pack(">qi", ts, rel + 40) for ts, rel in entries)
        else:  # garbage
            out = bytes(rnd.randrange(256) for _ in data)
        ti.write_bytes(out)


def brute(stamps, t):
    return next((o for o, ts in enumerate(stamps) if ts >= t), None)


def planned_offsets(ld, t) -> list[int]:
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from kltool.spark import datasource as ds

    reader = ds.KafkaLogReader(ds.normalize_options({"path": str(ld), "startingTimestamp": str(t),
                                                     "maxPartitionBytes": "0"}))
    return sorted(o for part in reader.partitions() for b in reader.read(part) for o in b.column("offset").to_pylist())


@pytest.mark.parametrize("how", ["intact", "shifted", "offsets", "garbage"])
def test_offset_for_time_is_the_brute_force_answer(tmp_path, kl, how):
    ld, stamps = make(tmp_path, kl)
    if how != "intact":
        damage(ld, how)
    p = open_path(ld).partitions[0]
    for t in (T0 - 10, *sorted(stamps)[::37], max(stamps), max(stamps) + 1):
        hit = p.offset_for_time(t)
        want = brute(stamps, t)
        assert (None if hit is None else hit.offset) == want, (how, t)


@pytest.mark.parametrize("how", ["shifted", "garbage"])
def test_a_starting_timestamp_reads_the_same_rows_over_a_damaged_time_index(tmp_path, kl, how):
    ld, stamps = make(tmp_path, kl)
    times = sorted(stamps)[100::150]
    before = {t: planned_offsets(ld, t) for t in times}
    for t in times:
        assert before[t] == list(range(brute(stamps, t), len(stamps)))
    damage(ld, how)
    assert {t: planned_offsets(ld, t) for t in times} == before
