"""A damaged ``.timeindex`` never changes the answer of a lookup by time: its entries are checked before
use (the batch holding an entry's offset has the entry's timestamp as its largest), and a segment whose
entries fail falls back to a scan. Checked through the library (storage.offsets.offset_for_time) and the
kafka-log planner (startingTimestamp, which a pushed timestamp filter becomes), against brute force."""

from __future__ import annotations

import random
import struct

import pytest

from kltool.storage import open_path
from kltool.storage.offsets import offset_for_time

from .test_offsets import append_jittered

T0 = 1_700_000_000_000


def make(tmp_path, kl):
    ld = tmp_path / "ld"
    timestamps = append_jittered(kl, ld, "tt", records=600, jitter=5_000, seed=5, segment_bytes=6000,
                                 index_interval_bytes=400)
    p = open_path(ld).partitions[0]
    assert len(p.segments) > 3 and all(len(s.time_index()) > 2 for s in p.segments[:-1])
    return ld, timestamps


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
        hit = offset_for_time(p, t)
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
