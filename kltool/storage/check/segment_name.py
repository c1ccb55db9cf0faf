"""The one rule for a segment whose file name is what is wrong (verify reports it, repair renames the segment).

A segment's base offset lives only in its file name, which no CRC covers. When its first batch starts below
the name, either the name or that batch's offset field (not covered by the CRC either) is damaged. The field
is the one when the batch fits exactly at the name, up to the second batch (its CRC-covered lastOffsetDelta
fills the gap), and one flipped bit turns the name into its value: repair restores the field. Otherwise the name is taken as wrong, as Kafka's recovery takes it:
a batch below a segment's base makes ``ensureOffsetInRange`` raise ``LogSegmentOffsetOverflowException`` and
the loader splits the segment (``LocalLog.splitOverflowedSegment``), the new file named after its first
batch's offset; no data is dropped. kltool renames the segment when its whole content fits between the
neighbouring segments (the same files Kafka's split would leave); when it does not (the segment also holds
offsets another segment holds, or runs of batches in the wrong order), repair splits it the broker's way
(:mod:`kltool.storage.change.split`).
"""

from __future__ import annotations

from collections.abc import Callable

from ...format.records import BatchHeader
from ..scan import walk
from .batch_rules import first_offset

__all__ = ["first_batches", "last_offset_of", "misnamed_base", "below_base", "any_below_base", "runs_below_base",
           "split_by_runs"]


def first_batches(path, n: int = 2, end: int | None = None) -> list[BatchHeader]:
    """The first ``n`` CRC-valid batches of a ``.log`` (up to byte ``end``)."""
    out = []
    for item in walk(path, end=end):
        if isinstance(item, BatchHeader) and item.crc_valid:
            out.append(item)
            if len(out) == n:
                break
    return out


def last_offset_of(path) -> int | None:
    """The highest last offset of a ``.log``'s CRC-valid batches (None: none)."""
    last = None
    for item in walk(path):
        if isinstance(item, BatchHeader) and item.crc_valid:
            last = item.last_offset if last is None else max(last, item.last_offset)
    return last


def _first_offset(h: BatchHeader) -> int | None:
    if h.magic == 2 or h.base_offset_exact:
        return h.base_offset
    return None  # a compressed v0/v1 wrapper: its first inner offset is not in its header


def misnamed_base(firsts: list[BatchHeader], name_base: int, prev_last: int | None, next_base: int | None,
                  last_of: Callable[[], int | None]) -> int | None:
    """The base offset a segment named ``name_base`` should have (its first batch's offset) when its name is
    what is wrong, else None. ``firsts``: its first two CRC-valid batches; ``prev_last``: the previous
    segment's last offset; ``next_base``: the next segment's name; ``last_of``: the segment's last offset
    (read only when needed)."""
    if not firsts:
        return None
    first = firsts[0]
    lo = _first_offset(first)
    if lo is None or not 0 <= lo < name_base or (prev_last is not None and lo <= prev_last):
        return None
    delta = first.last_offset - lo
    if len(firsts) > 1:
        nlo = _first_offset(firsts[1])
        if nlo is None or nlo <= first.last_offset:
            return None
        # the first batch fits exactly between the name and the second batch, and a flipped bit of its own
        # offset field explains it: that field is the damaged one (repair restores it), unless the previous
        # segment's end witnesses the batch's own offset (the content goes on right after it)
        if name_base + delta + 1 == nlo and (lo ^ name_base).bit_count() == 1 and \
                not (prev_last is not None and prev_last + 1 == lo):
            return None
    if next_base is not None:
        last = last_of()
        if last is None or last >= next_base:
            return None
    return lo


def below_base(h: BatchHeader, base: int) -> bool:
    """Does the batch lie below a segment base ``base`` (the order rule's test: a v0/v1 message by its own
    offset, a v2 batch by its base offset)?"""
    return h.last_offset < base or (h.magic == 2 and h.base_offset < base)


def any_below_base(path, base: int) -> bool:
    """Does a CRC-valid batch of the ``.log`` lie below ``base``? (The C walker's runs hold none: only the
    batches outside them are looked at.)"""
    for item in walk(path, runs=True, base_offset=base):
        if isinstance(item, BatchHeader) and item.crc_valid and below_base(item, base):
            return True
    return False


def runs_below_base(batches: list[BatchHeader], base: int) -> list[list[BatchHeader]]:
    """The batches below ``base``, in file order, in runs of ascending offsets."""
    runs: list[list[BatchHeader]] = []
    prev = None
    for h in batches:
        if not below_base(h, base):
            prev = None
            continue
        if prev is not None and first_offset(h) > prev.last_offset:
            runs[-1].append(h)
        else:
            runs.append([h])
        prev = h
    return runs


def split_by_runs(batches: list[BatchHeader], base: int) -> bool:
    """Is a segment (its CRC-valid batches, in file order) one to split as the broker splits an overflowed
    segment? Batches lie below its base, and every run of them holds at least two batches: one batch alone
    below the base, its neighbours in order, is a damaged offset field (the batch walk restores or cuts it),
    not content that belongs elsewhere."""
    runs = runs_below_base(batches, base)
    return bool(runs) and all(len(r) >= 2 for r in runs)
