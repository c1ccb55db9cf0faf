"""The batch walker: framing, CRC, damage reports and resynchronisation (property tests)."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kltool.errors import CorruptDataError
from kltool.format import build_batch, decode_records
from kltool.format.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from kltool.storage.scan import Damage, walk


def make_segment(path, n_batches=20, magic=2, codec=NONE, seed=0):
    import random

    rnd = random.Random(seed)
    off = 0
    positions = []
    data = bytearray()
    for _b in range(n_batches):
        k = rnd.randint(1, 5)
        recs = [(i, 1_700_000_000_000 + off + i, f"k{off + i}".encode(), os.urandom(rnd.randint(0, 80)),
                 [("h", b"v")] if magic == 2 and i % 2 else ()) for i in range(k)]
        b = build_batch(recs, base_offset=off, magic=magic, compression=codec)
        positions.append((len(data), len(b), off, off + k - 1))
        data += b
        off += k
    path.write_bytes(bytes(data))
    return positions


def test_clean_segment_all_codecs(tmp_path):
    for magic, codecs in ((0, (NONE, GZIP, SNAPPY, LZ4)), (1, (NONE, GZIP, SNAPPY, LZ4)),
                          (2, (NONE, GZIP, SNAPPY, LZ4, ZSTD))):
        for codec in codecs:
            p = tmp_path / f"{magic}-{codec}.log"
            positions = make_segment(p, magic=magic, codec=codec)
            items = list(walk(p, with_data=True))
            assert not any(isinstance(i, Damage) for i in items)
            if magic == 2 or codec != NONE:
                assert [i.position for i in items] == [pos for pos, *_ in positions]
            for h in items:
                assert h.crc_valid
                decode_records(h)


def test_small_chunks_give_same_result(tmp_path):
    p = tmp_path / "a.log"
    make_segment(p, 50)
    a = [(h.position, h.size) for h in walk(p)]
    b = [(h.position, h.size) for h in walk(p, chunk_size=100)]
    assert a == b


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(data=st.data())
def test_damage_in_the_middle_loses_only_damaged_batches(tmp_path, data):
    p = tmp_path / "seg.log"
    positions = make_segment(p, 30, seed=data.draw(st.integers(0, 10)))
    raw = bytearray(p.read_bytes())
    start = data.draw(st.integers(0, len(raw) - 1))
    length = data.draw(st.integers(1, min(600, len(raw) - start)))
    fill = data.draw(st.sampled_from(["zero", "random", "ff"]))
    if fill == "zero":
        raw[start:start + length] = bytes(length)
    elif fill == "ff":
        raw[start:start + length] = b"\xff" * length
    else:
        # random bytes Hypothesis can replay (os.urandom made a rare failing draw unrepeatable: see the next test)
        raw[start:start + length] = random.Random(data.draw(st.integers(0, 2**32 - 1))).randbytes(length)
    p.write_bytes(bytes(raw))
    items = list(walk(p))
    got = {(i.position, i.size) for i in items if not isinstance(i, Damage) and i.crc_valid}
    # Every batch that does not touch the damaged range must be found, at its position.
    for pos, size, _lo, _hi in positions:
        if pos + size <= start or pos >= start + length:
            assert (pos, size) in got, (pos, size, start, length, fill)
    # Damage and batches tile the file without overlap, in order.
    cursor = 0
    for i in items:
        assert i.position >= cursor
        cursor = i.position + (i.length if isinstance(i, Damage) else i.size)
    assert cursor <= len(raw)


def test_a_damaged_length_swallowing_the_next_batch_is_restored_by_repair(tmp_path):
    """The once-failing draw of test_damage_in_the_middle_loses_only_damaged_batches (seed 0, one random byte
    at 575): 575 is the low byte of the batch at 564's batchLength (not covered by the CRC). walk() trusts a
    length as the broker's reader does, so the batch at 564 claims 288+ bytes, fails its CRC and swallows the
    intact batch at 844; the property's random fill (os.urandom) hits this only for such values. Repair
    restores the length field (its CRC checks up to where the next batch starts) and keeps all 30 batches."""
    from kltool.storage.change.repair import repair
    from kltool.storage.logdir import open_path

    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    p = part / "00000000000000000000.log"
    positions = make_segment(p, 30, seed=0)
    assert (564, 280) in {(pos, size) for pos, size, _lo, _hi in positions}
    raw = bytearray(p.read_bytes())
    raw[575] = 20  # 280 -> 288
    p.write_bytes(bytes(raw))
    got = {(i.position, i.size) for i in walk(p) if not isinstance(i, Damage) and i.crc_valid}
    assert (844, 152) not in got  # the raw walk: swallowed
    res = repair(open_path(part), backup_dir=tmp_path / "bk")
    assert "fix_field" in {a.op for a in res.plan.actions}
    got = {(i.position, i.size) for i in walk(p) if not isinstance(i, Damage) and i.crc_valid}
    assert got == {(pos, size) for pos, size, _lo, _hi in positions}


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 4000), flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(1, 255)), max_size=5))
def test_mutations_and_truncations_never_raise(tmp_path, cut, flips):
    p = tmp_path / "m.log"
    make_segment(p, 15, codec=GZIP, seed=3)
    raw = bytearray(p.read_bytes())
    for at, x in flips:
        if at < len(raw):
            raw[at] ^= x
    raw = raw[: min(cut, len(raw))]
    p.write_bytes(bytes(raw))
    for item in walk(p, with_data=True):
        if isinstance(item, Damage):
            continue
        try:
            decode_records(item)
        except CorruptDataError:
            pass  # reported cleanly: the contract is "no other exception"


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=400))
def test_random_bytes_never_raise(tmp_path_factory, blob):
    p = tmp_path_factory.mktemp("r") / "r.log"
    p.write_bytes(blob)
    total = 0
    for item in walk(p, with_data=True):
        total += item.length if isinstance(item, Damage) else item.size
        if not isinstance(item, Damage):
            try:
                decode_records(item)
            except CorruptDataError:
                pass
    assert total <= len(blob)


def test_zero_tail_and_torn_tail(tmp_path):
    p = tmp_path / "z.log"
    positions = make_segment(p, 5)
    end = positions[-1][0] + positions[-1][1]
    with open(p, "ab") as f:
        f.write(bytes(4096))
    items = list(walk(p))
    assert isinstance(items[-1], Damage) and items[-1].kind == "zero_run" and items[-1].position == end
    p.write_bytes(p.read_bytes()[: end - 7])
    items = list(walk(p))
    assert isinstance(items[-1], Damage) and items[-1].kind == "torn_tail"
    assert items[-1].position == positions[-1][0]


def test_hole_of_zeros_is_skipped_fast(tmp_path):
    p = tmp_path / "hole.log"
    positions = make_segment(p, 10)
    raw = p.read_bytes()
    mid = positions[5][0]
    p.write_bytes(raw[:mid] + bytes(8 << 20) + raw[mid:])
    items = list(walk(p))
    dmg = [i for i in items if isinstance(i, Damage)]
    assert len(dmg) == 1 and dmg[0].kind == "zero_run" and dmg[0].length == 8 << 20
    assert dmg[0].resumed_at == mid + (8 << 20)
    assert sum(1 for i in items if not isinstance(i, Damage)) == 10


@pytest.mark.parametrize("start", [0, 11])
def test_a_zero_run_into_the_next_batchs_offset_field_does_not_move_that_batch(tmp_path, start):
    """Found by the damage-in-the-middle draw run through repair with random seeds (segment seed 5, zeros over
    bytes 0..330 or 11..330): the zeros end 8 bytes into the second batch (5..6), exactly over its baseOffset
    field (not covered by the CRC), which then reads 0; the walk resumes at that batch (its CRC checks). It
    used to be kept at 0..1, offsets it never had. A field reading 0 right after cut damage that ends in zeros
    cannot be told from the damage: the neighbours must fix its value, and here they cannot (0..6 before the
    batch at 7), so that batch alone is cut. Nothing is kept at other offsets; one repair is enough."""
    from kltool.storage.change.repair import repair
    from kltool.storage.logdir import open_path

    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    p = part / "00000000000000000000.log"
    positions = make_segment(p, 30, seed=5)
    assert positions[1][:2] == (323, 109)
    raw = bytearray(p.read_bytes())
    raw[start:331] = bytes(331 - start)
    p.write_bytes(bytes(raw))
    repair(open_path(part), backup_dir=tmp_path / "bk")
    before = {(lo, hi) for _p, _s, lo, hi in positions}
    after = {(i.base_offset, i.last_offset) for i in walk(p) if not isinstance(i, Damage) and i.crc_valid}
    assert after <= before, sorted(after - before)
    assert before - after == {(0, 4), (5, 6)}
    assert repair(open_path(part), dry_run=True).plan.actions == []


def test_a_batch_at_zero_after_an_intact_batch_cut_for_its_offsets_is_kept(tmp_path):
    """Found by the adversary campaign (seed 101, kafkajs v4_response_gzip with its two batches swapped): a
    segment 0 holding 3..5 then 0..2, both CRC-valid. verify blames the first batch's offset field alone ("cuts
    only that batch"); repair cut both, because the batch at 0..2 read 0 right after a cut ending in a zero byte
    (the zero-run rule above). That rule is for damage whose bytes may run into the field; a whole CRC-valid batch
    cut for its offsets has its own length, so the batch after it is read as it stands and kept."""
    from kltool.storage.change.repair import repair
    from kltool.storage.logdir import open_path

    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    p = part / "00000000000000000000.log"
    recs = [[(i, 1_700_000_000_000 + i, f"k{i}".encode(), b"v", ()) for i in range(lo, lo + 3)] for lo in (0, 3)]
    a = build_batch([(r[0] - 0, *r[1:]) for r in recs[0]], base_offset=0)
    b = build_batch([(r[0] - 3, *r[1:]) for r in recs[1]], base_offset=3)
    assert a[-1] == 0 and b[-1] == 0  # the last record's header count: the cut before the batch at 0 ends in a zero
    p.write_bytes(b + a)
    res = repair(open_path(part), backup_dir=tmp_path / "bk")
    cut = [(c.start, c.end) for act in res.plan.actions if act.op in ("truncate", "excise") for c in act.ranges]
    assert cut == []  # (was [(0, len(b))]: now the two runs swapped are reordered, check/reorder.py, both kept)
    assert [(i.base_offset, i.last_offset) for f in sorted(part.glob("*.log")) for i in walk(f)] == [(0, 2), (3, 5)]
    assert repair(open_path(part), dry_run=True).plan.actions == []


def test_a_batch_out_of_place_is_not_restored_to_offsets_a_later_batch_holds(tmp_path):
    """Found by the adversary's split campaign (seed 7, run 2: java-oracle v2-mixed-codecs-0 with its batches in
    the order 12..14, 3..5, 6..8, 9..11, 0..2). The first batch fills the gap before 3..5 exactly, so repair
    restored its offset field to 0 and then cut the real 0..2 at the end: the records of 12..14 were served at
    offsets 0..2. A restore is refused when an intact batch further on holds exactly the offsets it would give:
    that batch is out of place, not damaged. No batch is kept at offsets it never had."""
    import struct as st

    from kltool.storage.change.repair import repair
    from kltool.storage.logdir import open_path

    from .conftest import ORACLE

    src = (ORACLE / "v2-mixed-codecs-0" / "00000000000000000000.log").read_bytes()
    bs, pos = [], 0
    while pos + 12 <= len(src):
        n = st.unpack_from(">i", src, pos + 8)[0]
        bs.append(src[pos:pos + 12 + n])
        pos += 12 + n
    assert [st.unpack_from(">q", b)[0] for b in bs] == [0, 3, 6, 9, 12]
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    p = part / "00000000000000000000.log"
    p.write_bytes(bs[4] + bs[1] + bs[2] + bs[3] + bs[0])
    true = {b[21:]: st.unpack_from(">q", b)[0] for b in bs}  # the CRC-covered bytes -> the batch's own first offset
    repair(open_path(part), backup_dir=tmp_path / "bk")
    kept = [(h.base_offset, p.read_bytes()[h.position + 21:h.end]) for h in walk(p)]
    assert kept and all(true[body] == base for base, body in kept), [(b, true[x]) for b, x in kept]
    assert repair(open_path(part), dry_run=True).plan.actions == []
