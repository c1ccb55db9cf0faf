"""storage.read: the one read API (records(...) with exact offset/time/key filters, RecordFilter),
against a brute-force decode of every batch, on Kafka-written and real broker data."""

from __future__ import annotations

import random

import pytest

from kltool.errors import CorruptDataError
from kltool.format import decode_records
from kltool.storage import open_partition
from kltool.storage.read import RecordFilter, records
from kltool.storage.scan import Damage

from .conftest import ORACLE, REAL

WILLIAM = REAL / "william0423-indexed-zk" / "__consumer_offsets-28"
DIRS = [ORACLE / n for n in ("v2-multi-segment-0", "v2-txn-0", "v2-mixed-magic-0", "v1-logappend-0",
                             "v2-compacted-0", "damaged-v2-crc-0", "damaged-v2-torn-payload-0")] + [WILLIAM]


def brute(pdir, *, include_control=False):
    """Every decodable record of every CRC-valid batch, in file order: (offset, ts, key, value, magic)."""
    out = []
    for seg in open_partition(pdir).segments:
        for h in seg.walk(with_data=True):
            if isinstance(h, Damage) or not h.crc_valid or (h.is_control and not include_control):
                continue
            try:
                cols = decode_records(h, h.data)
            except CorruptDataError:
                continue
            out += [(r.offset, r.timestamp, r.key, r.value, h.magic) for r in cols]
    return out


def expected(all_recs, lo=None, hi=None, t0=None, t1=None, key=None):
    out = []
    for off, ts, k, v, magic in all_recs:
        if t1 is not None and magic > 0 and ts > t1 and (lo is None or off >= lo):
            break  # the read ends at the first record stamped after to_time
        if ((lo is None or off >= lo) and (hi is None or off <= hi) and (t0 is None or ts >= t0)
                and (t1 is None or ts <= t1) and (key is None or k == key)):
            out.append((off, ts, k, v))
    return out


@pytest.mark.parametrize("pdir", DIRS, ids=lambda p: p.name)
def test_records_equal_a_brute_force_filter(pdir):
    p = open_partition(pdir)
    everything = brute(pdir)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records(p)] == expected(everything)
    rnd = random.Random(pdir.name)
    offs = [r[0] for r in everything]
    tss = sorted({r[1] for r in everything})
    keys = [r[2] for r in everything if r[2] is not None]
    for _ in range(25):
        lo = rnd.choice([None, *offs]) if offs else None
        hi = rnd.choice([None, *offs]) if offs else None
        t0 = rnd.choice([None, *tss]) if tss else None
        t1 = rnd.choice([None, None, *tss]) if tss else None
        key = rnd.choice([None, None, *keys[:50]]) if keys else None
        got = [(r.offset, r.timestamp, r.key, r.value)
               for r in records(p, from_offset=lo, to_offset=hi, from_time=t0, to_time=t1, key=key)]
        assert got == expected(everything, lo, hi, t0, t1, key), (lo, hi, t0, t1, key)


def test_control_records_only_when_asked():
    p = open_partition(ORACLE / "v2-txn-0")
    plain = list(records(p))
    every = list(records(p, include_control=True))
    markers = [r for r in every if r.control is not None]
    assert markers and all(r.control["type"] in ("COMMIT", "ABORT") for r in markers)
    assert [r.offset for r in every if r.control is None] == [r.offset for r in plain]
    assert all(r.topic == "v2-txn" and r.partition == 0 and r.segment.log_path.exists() for r in every)


def test_damage_is_skipped_and_reported_when_asked():
    p = open_partition(ORACLE / "damaged-v2-crc-0")
    errors = []
    got = [r.offset for r in records(p, errors=errors)]
    assert errors and got == [r[0] for r in brute(ORACLE / "damaged-v2-crc-0")]


def test_filter_indices_of_a_batch():
    p = open_partition(ORACLE / "v2-none-0")
    h = next(p.segments[0].batches(with_data=True))
    cols = decode_records(h, h.data)
    assert len(cols) > 2
    first, last = cols.offsets[0], cols.offsets[-1]
    assert RecordFilter().indices(cols) == range(len(cols))
    assert list(RecordFilter(from_offset=first + 1, to_offset=last - 1).indices(cols)) == list(range(1, len(cols) - 1))
    assert RecordFilter(from_offset=last + 1).indices(cols) == []
    assert list(RecordFilter(key=cols.key(0)).indices(cols)) == [i for i in range(len(cols)) if cols.key(i) == cols.key(0)]
