"""A segment whose file name (its base offset, which no CRC covers) is above its first batch's offset (issue 23):
verify names it once (segment_base_offset), and ``verify --repair`` renames the segment back and keeps every
batch, for v2 and v0/v1 segments, a name off by one or by a few. (It used to excise the first, intact batch as
'below the segment's base offset' when only that batch lay below the name, and v0/v1 segments had no rename at
all: every message below the name was cut.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kltool.format import build_batch
from kltool.format import names as fn
from kltool.storage.change.repair import repair
from kltool.storage.check.verify import VerifyStats, verify_selection
from kltool.storage.logdir import open_path

from .conftest import FIXTURES
from .test_uncovered_fields import _batches, _logs, _offsets

# (source, how many segments to cut a one-segment log into)
SOURCES = [("java-oracle/v2-multi-segment-0", 0), ("v1", 3), ("v0", 3), ("java-oracle/v2-none-0", 3),
           ("java-oracle/v2-compacted-0", 2)]


def _segments(tmp_path: Path, src: str, parts: int) -> Path:
    """A copy of ``src`` (its one segment cut into ``parts`` segments, each named after its first batch)."""
    part = tmp_path / "logs" / f"{Path(src).name}-0"
    if src in ("v0", "v1"):  # 30 uncompressed messages of that format, one segment
        part.mkdir(parents=True)
        magic = int(src[1])
        (part / fn.segment_file(0, "log")).write_bytes(b"".join(
            build_batch([(0, 1_700_000_000_000 + o, f"k{o}".encode(), b"v" * 30, [])], base_offset=o, magic=magic)
            for o in range(30)))
    else:
        shutil.copytree(FIXTURES / src, part)
    for p in part.iterdir():
        p.chmod(0o644)
        if p.suffix != ".log":
            p.unlink()
    if parts:
        (log,) = _logs(part)
        data = log.read_bytes()
        hs = _batches(log)
        cuts = [hs[len(hs) * k // parts] for k in range(parts)]
        log.unlink()
        for k, h in enumerate(cuts):
            end = cuts[k + 1].position if k + 1 < len(cuts) else len(data)
            (part / fn.segment_file(h.base_offset, "log")).write_bytes(data[h.position:end])
    return part


def _errors(part: Path) -> list:
    return [f for f in verify_selection(open_path(part), stats=VerifyStats()) if f.severity == "error"]


def _misname_and_repair(tmp_path: Path, src: str, parts: int, which: int, shift: int):
    part = _segments(tmp_path, src, parts)
    logs = _logs(part)
    before = _offsets(part)
    original = {p.name: p.read_bytes() for p in logs}
    seg = logs[which]
    base = int(seg.name.split(".")[0])
    seg.rename(part / fn.segment_file(base + shift, "log"))
    found = _errors(part)
    assert [(f.kind, Path(f.file).name) for f in found] == [("segment_base_offset", fn.segment_file(base + shift,
                                                                                                    "log"))], found
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    assert _offsets(part) == before, [a.describe() for a in result.plan.actions]
    assert {p.name: p.read_bytes() for p in _logs(part)} == original
    assert not _errors(part)
    return part


@pytest.mark.parametrize("shift", [1, 5])
@pytest.mark.parametrize("src,parts", SOURCES)
def test_a_misnamed_segment_is_renamed_and_nothing_is_cut(tmp_path, src, parts, shift):
    part = _segments(tmp_path / "probe", src, parts)
    names = sorted(int(p.name.split(".")[0]) for p in _logs(part))
    if len(names) > 2:  # keep the new name below the next segment's (a short gap takes the largest shift that fits)
        shift = min(shift, names[2] - names[1] - 1)
    assert shift >= 1, names
    _misname_and_repair(tmp_path, src, parts, 1, shift)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(which=st.sampled_from(SOURCES), data=st.data())
def test_misnamed_segments_property(tmp_path_factory, which, data):
    src, parts = which
    tmp_path = tmp_path_factory.mktemp("name")
    part = _segments(tmp_path, src, parts)
    logs = _logs(part)
    i = data.draw(st.integers(0, len(logs) - 1), label="segment")
    hs = _batches(logs[i])
    # a shift that keeps the name below the next segment's
    nxt = int(logs[i + 1].name.split(".")[0]) if i + 1 < len(logs) else hs[-1].last_offset + 1000
    shift = data.draw(st.integers(1, max(1, nxt - 1 - int(logs[i].name.split(".")[0]))), label="shift")
    # Truly ambiguous: the first batch fits exactly between the new name and the second batch, one flipped
    # bit of its offset field explains the difference, and no previous segment ends right before the batch
    # (v2-compacted-0, segment 0, +4: 0 -> 4, the first batch 0..5, the next at 10). Both readings keep every
    # batch; with no witness for the name, kltool takes the offset field as the damaged one
    # (storage/check/segment_name.py): _ambiguous_repair checks that reading.
    base = int(logs[i].name.split(".")[0])
    fits = len(hs) > 1 and base + shift + (hs[0].last_offset - hs[0].base_offset) + 1 == hs[1].base_offset
    prev_last = _batches(logs[i - 1])[-1].last_offset if i else None
    ambiguous = fits and (hs[0].base_offset ^ (base + shift)).bit_count() == 1 and prev_last != hs[0].base_offset - 1
    shutil.rmtree(part.parent)
    if ambiguous:
        _ambiguous_repair(tmp_path, src, parts, i, shift)
    else:
        _misname_and_repair(tmp_path, src, parts, i, shift)


def _ambiguous_repair(tmp_path: Path, src: str, parts: int, which: int, shift: int) -> None:
    """The ambiguous draw: no batch is lost either way. kltool restores the first batch's offset field to the
    name: every batch is kept, byte for byte but those 8 bytes, the first at the name, and one repair is
    enough."""
    part = _segments(tmp_path, src, parts)
    seg = _logs(part)[which]
    base = int(seg.name.split(".")[0])
    original = seg.read_bytes()
    hs = _batches(seg)
    at, delta = hs[0].position, hs[0].last_offset - hs[0].base_offset
    new = part / fn.segment_file(base + shift, "log")
    seg.rename(new)
    assert _errors(part)
    repair(open_path(part), backup_dir=tmp_path / "bk")
    data = new.read_bytes()
    assert data[:at] + data[at + 8:] == original[:at] + original[at + 8:]  # every batch kept, the field aside
    assert [(h.base_offset, h.last_offset) for h in _batches(new)] == \
        [(base + shift, base + shift + delta)] + [(h.base_offset, h.last_offset) for h in hs[1:]]
    assert not _errors(part)
    assert repair(open_path(part), dry_run=True).plan.actions == []


def test_the_ambiguous_first_segment_keeps_every_batch(tmp_path):
    """The draw the property once left out (v2-compacted-0, segment 0 renamed +4): the name or the first batch's
    offset field; no previous segment to tell. Every batch is kept, the field restored to the name."""
    _ambiguous_repair(tmp_path, "java-oracle/v2-compacted-0", 2, 0, 4)


def test_a_misnamed_segment_whose_first_batch_goes_on_from_the_previous_segment_is_renamed(tmp_path):
    """A name one bit off its first batch's offset where that batch fits exactly between the name and the next
    batch (a compacted gap after it) could be either the name or the batch's offset field. The previous
    segment's end is the witness: it ends right before the batch's own offset, so the name is what is wrong
    (segment 10 renamed 14: the batch 10..15, the next at 20, the previous segment ending at 9). It used to
    restore the field to 14 and keep the batch at 14..19, offsets it never had."""
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)

    def batch(base: int, n: int) -> bytes:
        return build_batch([(k, 1_700_000_000_000 + base + k, f"k{base + k}".encode(), b"v" * 20, [])
                            for k in range(n)], base_offset=base, magic=2)

    (part / fn.segment_file(0, "log")).write_bytes(batch(0, 10))
    (part / fn.segment_file(10, "log")).write_bytes(batch(10, 6) + batch(20, 10))
    before = _offsets(part)
    original = {p.name: p.read_bytes() for p in _logs(part)}
    (part / fn.segment_file(10, "log")).rename(part / fn.segment_file(14, "log"))
    found = _errors(part)
    assert [(f.kind, Path(f.file).name) for f in found] == [("segment_base_offset", fn.segment_file(14, "log"))], found
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    assert _offsets(part) == before, [a.describe() for a in result.plan.actions]
    assert {p.name: p.read_bytes() for p in _logs(part)} == original
    assert not _errors(part)
    assert repair(open_path(part), dry_run=True).plan.actions == []


def test_kafka_reads_a_renamed_v1_segment(tmp_path, kafka_oracle):
    part = _misname_and_repair(tmp_path, "v1", 3, 1, 1)
    assert kafka_oracle(_logs(part))[0] == 0


@pytest.mark.parametrize("past", ["next", "last"])
@pytest.mark.parametrize("src,parts", [s for s in SOURCES if s[1] != 2])
def test_a_segment_named_past_later_segments_is_renamed_back(tmp_path, src, parts, past):
    """A name so far off that the segment sorts after later segments (its batches then lie below the previous
    segment's last offset, so the content does not fit between its current neighbours): Kafka's recovery
    treats offsets below a segment's base as an overflow and splits the segment, each new file named after its
    first batch's offset, which puts it back between the segments around it. Repair renames it there and keeps
    every batch (it used to excise the whole segment as out of order)."""
    part = _segments(tmp_path, src, parts)
    logs = _logs(part)
    names = sorted(int(p.name.split(".")[0]) for p in logs)
    assert len(names) >= 3
    before = _offsets(part)
    original = {p.name: p.read_bytes() for p in logs}
    wrong = names[2] + 5 if past == "next" else names[-1] + 10_000
    logs[1].rename(part / fn.segment_file(wrong, "log"))
    assert _errors(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    assert _offsets(part) == before, [a.describe() for a in result.plan.actions]
    assert {p.name: p.read_bytes() for p in _logs(part)} == original
    assert not _errors(part)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(which=st.sampled_from(SOURCES), data=st.data())
def test_misnamed_segments_whose_content_collides_property(tmp_path_factory, which, data):
    """A misnamed segment (+0, +1, +k) that also holds a copy of the previous segment's last batches (the same
    offsets twice): its content does not fit between its neighbours, so repair splits it the broker's way
    (storage/change/split.py). Every intact batch stays in the log once, the segment files come back as they
    were, and the second copy is left in the backup."""
    src, parts = which
    tmp_path = tmp_path_factory.mktemp("collide")
    part = _segments(tmp_path, src, parts)
    logs = _logs(part)
    i = data.draw(st.integers(1, len(logs) - 1), label="segment")
    base = int(logs[i].name.split(".")[0])
    nxt = int(logs[i + 1].name.split(".")[0]) if i + 1 < len(logs) else base + 1000
    shift = data.draw(st.integers(0, max(0, min(nxt - 1 - base, 50))), label="shift")
    prev = _batches(logs[i - 1])
    k = data.draw(st.integers(1, min(3, len(prev))), label="copies")
    before = _offsets(part)
    original = {p.name: p.read_bytes() for p in logs}
    dup = logs[i - 1].read_bytes()[prev[-k].position:]
    body = logs[i].read_bytes()
    logs[i].unlink()
    (part / fn.segment_file(base + shift, "log")).write_bytes(dup + body)
    assert _errors(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    assert _offsets(part) == before, [a.describe() for a in result.plan.actions]
    assert {p.name: p.read_bytes() for p in _logs(part)} == original, [a.describe() for a in result.plan.actions]
    assert not _errors(part)
