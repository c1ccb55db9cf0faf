"""Two damages side by side (issue 23): a field the CRC does not cover (v2: baseOffset, batchLength,
partitionLeaderEpoch, magic; v0/v1: offset, size) damaged in one batch, and the batch right after it damaged
too (a payload byte, so its CRC fails; or one of its own uncovered fields). The witness for the first batch's
offset must skip the damaged neighbour: ``verify --repair`` loses no intact batch (compared with the undamaged
original), a second ``verify`` is clean, and Kafka's own reader accepts the result.

(The first batch's baseOffset XOR 2^31 next to a batch whose CRC fails used to keep the wrong offset and cut
every later batch of every later segment as offset_order.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kltool.storage.change.repair import repair
from kltool.storage.logdir import open_path

from .test_uncovered_fields import SOURCES, _batches, _clean, _copy, _logs, _offsets

UNCOVERED = {2: [("baseOffset", 0, 8), ("batchLength", 8, 4), ("partitionLeaderEpoch", 12, 4), ("magic", 16, 1)],
             1: [("offset", 0, 8), ("size", 8, 4)]}


def _damage_uncovered(b: bytearray, h, name: str, at: int, bit: int) -> None:
    if name == "magic":
        b[h.position + 16] = 0x80 | (1 << (bit % 7)) if bit % 2 else 3 + bit % 100
    else:
        b[h.position + at + bit // 8] ^= 1 << (bit % 8)


def _repair_and_check(part: Path, before: set, damaged: set, tmp_path: Path):
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    lost = before - _offsets(part)
    assert lost <= damaged, (sorted(lost), damaged, [a.describe() for a in result.plan.actions])
    assert _clean(part), [a.describe() for a in result.plan.actions]
    return result


def _pair_case(tmp_path, src, data):
    part = _copy(tmp_path, src)
    before = _offsets(part)
    logs = _logs(part)
    cands = [log for log in logs if len(_batches(log)) >= 2]
    log = cands[data.draw(st.integers(0, len(cands) - 1), label="segment")]
    hs = _batches(log)
    i = data.draw(st.integers(0, len(hs) - 2), label="batch")
    h, n = hs[i], hs[i + 1]
    fields = UNCOVERED[2 if h.magic == 2 else 1]
    name, at, size = fields[data.draw(st.integers(0, len(fields) - 1), label="field")]
    bit = data.draw(st.integers(0, size * 8 - 1), label="bit")
    b = bytearray(log.read_bytes())
    _damage_uncovered(b, h, name, at, bit)
    second = data.draw(st.sampled_from(["payload", "uncovered"]), label="next")
    if second == "payload":
        b[n.position + n.size - 1 - data.draw(st.integers(0, 40), label="from end")] ^= 0x5A
    else:
        nfields = UNCOVERED[2 if n.magic == 2 else 1]
        nname, nat, nsize = nfields[data.draw(st.integers(0, len(nfields) - 1), label="next field")]
        _damage_uncovered(b, n, nname, nat, data.draw(st.integers(0, nsize * 8 - 1), label="next bit"))
    log.write_bytes(bytes(b))
    return part, before, {(h.base_offset, h.last_offset), (n.base_offset, n.last_offset)}


def _pair_property(tmp_path_factory, src: str, data) -> None:
    """One example of the property (data draws the places): _pair_case repaired and checked."""
    tmp_path = tmp_path_factory.mktemp("pair")
    part, before, damaged = _pair_case(tmp_path, src, data)
    _repair_and_check(part, before, damaged, tmp_path)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(src=st.sampled_from(SOURCES), data=st.data())
def test_two_damages_side_by_side_cost_at_most_those_batches(tmp_path_factory, src, data):
    _pair_property(tmp_path_factory, src, data)


@pytest.mark.slow
@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(src=st.sampled_from(SOURCES), data=st.data())
def test_two_damages_side_by_side_many_times(tmp_path_factory, src, data):
    _pair_property(tmp_path_factory, src, data)


@pytest.mark.parametrize("second", ["payload", "magic", "baseOffset"])
def test_a_flipped_base_offset_beside_a_damaged_batch_is_restored(kl, tmp_path, kafka_oracle, second):
    """The issue's case: batch 3's baseOffset XOR 2^31, batch 4 damaged. Only batch 4's bytes may go (its
    CRC fails); batch 3's offset is told by the next batch to trust and restored; nothing later is cut."""
    part = _copy(tmp_path, "java-oracle/v2-multi-segment-0")
    before = _offsets(part)
    log = _logs(part)[0]
    hs = _batches(log)
    h, n = hs[3], hs[4]
    b = bytearray(log.read_bytes())
    b[h.position + 4] ^= 0x80  # baseOffset XOR 2^31
    if second == "payload":
        b[n.position + n.size - 1] ^= 0x5A
    elif second == "magic":
        b[n.position + 16] = 7
    else:
        b[n.position + 4] ^= 0x40
    log.write_bytes(bytes(b))
    r = kl("--json", "verify", "--repair", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 0, r
    lost = before - _offsets(part)
    assert lost == ({(n.base_offset, n.last_offset)} if second == "payload" else set()), r
    assert kl("verify", part).code == 0
    assert kafka_oracle(_logs(part))[0] == 0



@pytest.mark.parametrize("seg,first,damaged", [(0, 0, 1), (0, 1, 1), (1, 0, 2)])
def test_an_offset_out_of_line_beside_a_damaged_batch_is_told_by_the_batch_after(tmp_path, seg, first, damaged):
    """Hypothesis found it (v2-multi-segment-0, segment 0, batch 0, baseOffset bit 60 of the 64 = the value's
    bit 4, next batch's payload): batch 0 read as 16..25 beside a batch whose CRC fails; the next batch to
    trust starts at 20. The damaged neighbour is no witness, the batch after it is: the overlap blames the
    flipped batch (restored, or cut alone), not the intact 20..29 (was cut as offset_order). Batch 1 (10..19
    read as 26..35): the same in mid-segment. Segment 400's first batch read as 384 with two damaged batches
    after it: 400 and 416 are both one bit away and fit; the segment's name says 400."""
    part = _copy(tmp_path, "java-oracle/v2-multi-segment-0")
    before = _offsets(part)
    log = sorted(_logs(part))[seg]
    hs = _batches(log)
    h, ns = hs[first], hs[first + 1:first + 1 + damaged]
    b = bytearray(log.read_bytes())
    b[h.position + 7] ^= 1 << 4
    for n in ns:
        b[n.position + n.size - 1] ^= 0x5A
    log.write_bytes(bytes(b))
    lost_ok = {(n.base_offset, n.last_offset) for n in ns}
    result = _repair_and_check(part, before, lost_ok | {(h.base_offset, h.last_offset)}, tmp_path)
    if first == 0:  # batch 0's offset is told (the batch after the damage; the name): only the damaged go
        assert before - _offsets(part) == lost_ok, [a.describe() for a in result.plan.actions]

@pytest.mark.parametrize("src,batch,byte,bit", [
    ("java-oracle/v2-multi-segment-0", 0, 7, 3),  # 0..9 read as 8..17 before a damaged 10..19
    ("java-oracle/v2-multi-segment-0", 5, 7, 2),  # 50..59 read as 54..63 before a damaged 60..69
    ("java-oracle/v2-zstd-headers-0", 0, 0, 0),  # 0..4 read as 2^56.., the damaged 5..9 the last batch
    ("java-oracle/v2-none-0", 1, 2, 0),  # 3..4 read as 2^40 + 3.. before the damaged last batch
])
def test_an_offset_in_order_beside_a_damaged_batch_is_not_kept_at_wrong_offsets(kl, tmp_path, kafka_oracle, src,
                                                                                 batch, byte, bit):
    """A baseOffset flipped to a value still in order (above the log kept so far, below the next batch to trust,
    or with nothing after it), beside a batch whose CRC fails: it used to be kept at the wrong offsets (8..17,
    the damaged 10..19 cut, 0..7 a gap), since nothing after it is trusted. Its other witness tells: the
    damaged batch's header (its CRC fails on a payload byte: it starts at 10, inside 8..17, and one bit of
    this batch's field fits it exactly before). The field is restored; only the damaged batch goes; no batch
    is kept at offsets it did not have."""
    part = _copy(tmp_path, src)
    before = _offsets(part)
    log = _logs(part)[0]
    hs = _batches(log)
    h, n = hs[batch], hs[batch + 1]
    b = bytearray(log.read_bytes())
    b[h.position + byte] ^= 1 << bit
    b[n.position + n.size - 1] ^= 0x5A  # its CRC fails, its header stays as written
    log.write_bytes(bytes(b))
    r = kl("--json", "verify", "--repair", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 0, r
    after = _offsets(part)
    assert after - before == set(), sorted(after - before)  # nothing kept at offsets it did not have
    assert before - after == {(n.base_offset, n.last_offset)}
    again = repair(open_path(part), dry_run=True)
    assert again.plan.actions == [], [a.describe() for a in again.plan.actions]
    assert kafka_oracle(_logs(part))[0] == 0


# (source, index of the first batch, [(field, byte in the batch, bit)] for it and the two batches after it)
THREE = [("real/william0423-indexed-zk/__consumer_offsets-28", 6447, [(11, 0), (12, 5), (7, 5)]),
         ("real/william0423-indexed-zk/__consumer_offsets-28", 7480, [(13, 4), (7, 4), (11, 6)]),
         ("java-oracle/v2-compacted-0", 1, [(2, 1), (12, 0), (11, 4)]),
         ("java-oracle/v2-compacted-0", 0, [(11, 1), (12, 0), (7, 5)])]


@pytest.mark.parametrize("src,first,flips", THREE)
def test_three_faults_one_repair(kl, tmp_path, kafka_oracle, src, first, flips):
    """An offset field, a leader epoch and a length side by side (in each order): one repair is enough (the
    epoch's witness is the batch a length fix mends, or the one after a batch whose own offset is out of
    line), a second verify is clean, and no intact batch is lost."""
    part = _copy(tmp_path, src)
    before = _offsets(part)
    log = [x for x in _logs(part) if len(_batches(x)) > 3][0]
    hs = _batches(log)
    i = next(k for k, h in enumerate(hs) if h.base_offset == first) if first > 3 else first
    assert i + 3 <= len(hs)
    b = bytearray(log.read_bytes())
    for k, (at, bit) in enumerate(flips):
        b[hs[i + k].position + at] ^= 1 << bit
    log.write_bytes(bytes(b))
    damaged = {(hs[i + k].base_offset, hs[i + k].last_offset) for k in range(3)}
    r = kl("--json", "verify", "--repair", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 0, r
    assert before - _offsets(part) <= damaged
    assert kl("verify", part).code == 0, kl("verify", part)
    assert kafka_oracle(_logs(part))[0] == 0


def test_three_faults_an_epoch_before_an_offset_field_at_a_segment_end(kl, tmp_path, kafka_oracle):
    """The case the property found (v2-multi-segment-0, batches 37, 38, 39: a length (byte 10 bit 0), an epoch
    (byte 12 bit 0: 0 read as 16777216) and an offset field (byte 0 bit 7: 390 read as 390 - 2^63) in that
    order, batch 39 the segment's last, the next segment starting in epoch 1). The epoch's witness is the
    batch after it as the repair leaves it (390..399, epoch 0), not the next segment's first batch (epoch 1):
    the repair used to leave the epoch for a second plan. One repair restores all three fields, keeps every
    batch byte for byte, and a second plan is empty."""
    part = _copy(tmp_path, "java-oracle/v2-multi-segment-0")
    original = {p.name: p.read_bytes() for p in _logs(part)}
    log = _logs(part)[0]
    hs = _batches(log)
    assert len(hs) == 40 and (hs[37].base_offset, hs[39].last_offset) == (370, 399)
    b = bytearray(log.read_bytes())
    for k, (at, bit) in enumerate([(10, 0), (12, 0), (0, 7)]):
        b[hs[37 + k].position + at] ^= 1 << bit
    log.write_bytes(bytes(b))
    r = kl("--json", "verify", "--repair", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 0, r
    assert [o["op"] for o in r.json() if o["type"] == "action" and o["op"] != "rebuild_index"] == ["fix_field"] * 3
    assert {p.name: p.read_bytes() for p in _logs(part)} == original
    again = repair(open_path(part), dry_run=True)
    assert again.plan.actions == [], [a.describe() for a in again.plan.actions]  # one repair is enough
    assert kl("verify", part).code == 0
    assert kafka_oracle(_logs(part))[0] == 0


def test_an_offset_into_a_batch_that_a_length_fix_mends_is_judged_by_it_mended(tmp_path):
    """Found by the three-fault draw with a random seed (v2-compacted-0: batch 0..5's baseOffset byte 7 bit 3,
    read 8..13; batch 10..14's length byte 11 bit 2, so its CRC fails as read; batch 20..24's epoch). Batch 0
    overlaps the next; the judgement of which of the two is out of line looked at the next batch as read
    (damaged) and kept batch 0 at 8..13, then moved the intact 10..14 to 14..18 by one bit. The next batch is
    judged as its length fix mends it: batch 0 is the one out of line (the segment's name and one bit say 0),
    all three fields are restored, the file is byte for byte what it was."""
    part = _copy(tmp_path, "java-oracle/v2-compacted-0")
    original = {p.name: p.read_bytes() for p in _logs(part)}
    log = _logs(part)[0]
    hs = _batches(log)
    b = bytearray(log.read_bytes())
    for k, (at, bit) in enumerate([(7, 3), (11, 2), (12, 5)]):
        b[hs[k].position + at] ^= 1 << bit
    log.write_bytes(bytes(b))
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    assert {p.name: p.read_bytes() for p in _logs(part)} == original, [a.describe() for a in result.plan.actions]
    assert repair(open_path(part), dry_run=True).plan.actions == []


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(src=st.sampled_from(["java-oracle/v2-compacted-0", "java-oracle/v2-multi-segment-0",
                            "real/william0423-indexed-zk/__consumer_offsets-28"]), data=st.data())
def test_three_faults_side_by_side_many_times(tmp_path_factory, src, data):
    tmp_path = tmp_path_factory.mktemp("three")
    part = _copy(tmp_path, src)
    before = _offsets(part)
    log = [x for x in _logs(part) if len(_batches(x)) > 3][0]
    hs = _batches(log)
    i = data.draw(st.integers(0, len(hs) - 3), label="batch")
    b = bytearray(log.read_bytes())
    for k, what in enumerate(data.draw(st.permutations(["offset", "epoch", "length"]), label="order")):
        at = {"offset": (0, 8), "epoch": (12, 16), "length": (10, 12)}[what]
        b[hs[i + k].position + data.draw(st.integers(*at).filter(lambda x, e=at[1]: x < e), label="byte")] ^= \
            1 << data.draw(st.integers(0, 7), label="bit")
    log.write_bytes(bytes(b))
    _repair_and_check(part, before, {(hs[i + k].base_offset, hs[i + k].last_offset) for k in range(3)}, tmp_path)
