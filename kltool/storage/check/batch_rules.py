"""The batch-level rules: one home for what makes a readable batch wrong, its kind, severity and message.

``verify`` reports from these rules (:mod:`kltool.storage.check.verify`), ``verify --repair`` cuts on the
ones whose severity is error (:mod:`kltool.storage.change.segscan`), and the C walker's fast path
(``walk_v2`` in ``kltool/format/_speedups.c``, through :func:`kltool.storage.scan.walk`) puts a v2 batch in
a :class:`~kltool.storage.scan.BatchRun` only when none of them fires (tests/test_batch_rules.py runs the
same damaged inputs through both and compares).

The rules follow Kafka's recovery (``LogSegment.recover``, ``LogLoader``, ``DefaultRecordBatch.ensureValid``):

* ``crc_mismatch`` (error): the stored CRC is not the CRC of the batch's bytes; recovery truncates there.
* ``invalid_batch`` (error): a v2 batch with a negative lastOffsetDelta or record count (``ensureValid``);
  one that holds more records than the offsets it spans (``recordsCount > lastOffsetDelta + 1``: no writer
  makes one, ``LogValidator`` refuses it on a client's append, Kafka's reader finds records past the batch's
  last offset or hits "premature EOF"); and one whose range runs past the next batch's first offset while its
  own records end before it (:func:`range_violation`: its lastOffsetDelta, covered by the CRC, lies; a fetch
  inside that range would be served this batch and skip the intact batches it swallows).
* ``offset_order`` (error), two rules: a batch whose offsets are not above the previous batch's last
  offset, or below its segment's base offset. (The offset field is not covered by the CRC.)
* ``offset_overflow`` (warning): a last offset more than 2^31-1 past the segment's base offset. Kafka's
  ``ensureOffsetInRange`` raises ``LogSegmentOffsetOverflowException`` and the loader *splits* the
  segment (``LocalLog.splitOverflowedSegment``, KAFKA-6264): no data is lost and nothing is cut, so it is a
  warning for verify and for repair alike.
* ``invalid_control`` (error), two rules: a transactional control batch whose marker record cannot be read
  (recovery truncates there), or holds a type other than COMMIT/ABORT (the broker's load fails).

Framing damage (torn tails, zero runs, impossible lengths, bad magic, garbage) is found by the walker
itself (:class:`~kltool.storage.scan.Damage`: kind and message are its own); :func:`damage_rule` gives its
severity.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from operator import attrgetter

from ...errors import CorruptDataError
from ...format.records import BatchHeader
from ...format.speedups import crc32c
from ...plain import FrozenPlain
from ..scan import FileSpan, records_of, walk

__all__ = ["Rule", "Violation", "RULES", "CRC_MISMATCH", "NEGATIVE_DELTA", "NEGATIVE_COUNT", "NOT_FOLLOWING",
           "BELOW_BASE", "OFFSET_OVERFLOW", "UNREADABLE_MARKER", "BAD_MARKER", "COUNT_PAST_RANGE",
           "RANGE_PAST_RECORDS", "INT32_MAX", "header_violations", "control_violation", "crc_violation",
           "computed_crc", "damage_rule", "range_violation", "records_end", "first_after",
           "fits_between", "wrapper_first", "BLAME_THIS", "BLAME_NEXT", "BLAME_EITHER", "overlap_blame",
           "either_note"]

INT32_MAX = 2**31 - 1


class Rule(FrozenPlain):
    """One batch rule: ``name`` (unique), ``kind`` (what a finding or a cut says), ``message``, a format string
    over the fields :meth:`text` is given, and ``severity`` (error, the rule: the batch cannot stay; warning: the
    broker copes with it)."""

    __slots__ = _fields = ("name", "kind", "severity", "message")

    def __init__(self, name: str, kind: str, message: str, severity: str = "error"):
        self.name = name
        self.kind = kind
        self.severity = severity
        self.message = message

    def text(self, **fields) -> str:
        return self.message.format(**fields)

    @property
    def cuts(self) -> bool:
        """Does a repair cut a batch that breaks this rule?"""
        return self.severity == "error"


class Violation(FrozenPlain):
    """A batch breaking a rule: the ``rule``, the finished ``message`` and the ``offset`` it concerns."""

    __slots__ = _fields = ("rule", "message", "offset")

    def __init__(self, rule: Rule, message: str, offset: int | None):
        self.rule = rule
        self.message = message
        self.offset = offset

    kind = property(attrgetter("rule.kind"), doc="The rule's kind (what a finding or a cut says).")
    severity = property(attrgetter("rule.severity"), doc="The rule's severity.")


CRC_MISMATCH = Rule("crc_mismatch", "crc_mismatch",
                    "Record is corrupt (stored crc = {stored}, computed crc = {computed}) in batch {base}..{last}")
NEGATIVE_DELTA = Rule("negative_delta", "invalid_batch", "negative last offset delta ({delta})")
NEGATIVE_COUNT = Rule("negative_count", "invalid_batch", "Found invalid record count {count}")
NOT_FOLLOWING = Rule("not_following", "offset_order",
                     "batch offsets {base}..{last} do not follow the previous batch's last offset {prev} (the offset "
                     "field is not covered by the CRC: when the batches after it follow on, only this field is "
                     "damaged)")
BELOW_BASE = Rule("below_base", "offset_order",
                  "batch offset {base} is below the segment's base offset {seg_base}")
OFFSET_OVERFLOW = Rule("offset_overflow", "offset_overflow",
                       "offset {last} is more than 2^31-1 past the segment's base offset {seg_base}: the broker "
                       "splits this segment when it loads it (LogSegmentOffsetOverflowException) if the segment's "
                       "last batch overflows too; if a later batch is back in range, Kafka 4.4 refuses to start "
                       "(verify --repair --like-broker says so)", "warning")
UNREADABLE_MARKER = Rule("unreadable_marker", "invalid_control",
                         "transactional control batch {base}: unreadable transaction marker: {error}")
BAD_MARKER = Rule("bad_marker", "invalid_control",
                  "transactional control batch {base} holds a {ctype} record, not COMMIT/ABORT: the broker's log "
                  "load fails on it")

COUNT_PAST_RANGE = Rule("count_past_range", "invalid_batch",
                        "batch {base}..{last} declares {count} records, more than the offsets it spans (its "
                        "lastOffsetDelta or its recordsCount, both covered by the CRC, is false): Kafka's reader "
                        "serves records past its last offset or fails on it")
RANGE_PAST_RECORDS = Rule("range_past_records", "invalid_batch",
                          "batch {base}..{last} claims offsets up to {last} (lastOffsetDelta {delta}), past where "
                          "the log goes on at {next}, but its records end at {end}: its lastOffsetDelta (covered "
                          "by the CRC, so written with it) is false, and a fetch inside that range would be served "
                          "this batch and skip the batches after it; cut (backed up), the batches after it kept")

RULES = (CRC_MISMATCH, NEGATIVE_DELTA, NEGATIVE_COUNT, NOT_FOLLOWING, BELOW_BASE, OFFSET_OVERFLOW,
         UNREADABLE_MARKER, BAD_MARKER, COUNT_PAST_RANGE, RANGE_PAST_RECORDS)

_DAMAGE_KINDS = ("torn_tail", "zero_run", "invalid_size", "bad_magic", "garbage")


def damage_rule(kind: str) -> str:
    """The severity of a walker's :class:`~kltool.storage.scan.Damage` of ``kind``: unreadable bytes are an
    error (recovery truncates there) unless a live broker may be writing them (the caller's call)."""
    if kind not in _DAMAGE_KINDS:
        raise ValueError(f"not a damage kind: {kind}")
    return "error"


def computed_crc(path, h: BatchHeader) -> int:
    """The CRC the batch's bytes give (from ``h.data`` when the walker held it, else read from ``path`` in
    steps): what a crc_mismatch message names beside the stored one."""
    func, skip = (crc32c, 21) if h.magic >= 2 else (zlib.crc32, 16)
    if h.data is not None:
        return func(memoryview(h.data)[skip:h.size])
    value = 0
    with open(path, "rb") as f:
        span = FileSpan(f.fileno(), h.position + skip, h.position + h.size)
        while data := span.read(4 << 20):
            value = func(data, value)
    return value


def crc_violation(h: BatchHeader, computed: int) -> Violation:
    return Violation(CRC_MISMATCH, CRC_MISMATCH.text(stored=h.crc, computed=computed, base=h.base_offset,
                                                     last=h.last_offset), h.base_offset)


def first_offset(h: BatchHeader) -> int:
    """The offset a batch starts at as the order rules see it: a v2 batch's baseOffset, a v0/v1 message's
    (or wrapper's) own offset, which is its last."""
    return h.base_offset if h.magic == 2 else h.last_offset


def order_violation(h: BatchHeader, prev_last: int | None, seg_base: int | None) -> Violation | None:
    """The offset rules of a CRC-valid batch: follows ``prev_last`` (the last offset before it, None: no
    batch before), not below ``seg_base`` (the segment's base offset, None: a file of no segment), and
    within 2^31-1 of it."""
    if prev_last is not None and first_offset(h) <= prev_last:
        return Violation(NOT_FOLLOWING, NOT_FOLLOWING.text(base=h.base_offset, last=h.last_offset, prev=prev_last),
                         h.base_offset)
    if seg_base is None:
        return None
    if h.last_offset < seg_base or (h.magic == 2 and h.base_offset < seg_base):
        return Violation(BELOW_BASE, BELOW_BASE.text(base=h.base_offset, seg_base=seg_base), h.base_offset)
    if h.last_offset - seg_base > INT32_MAX:
        return Violation(OFFSET_OVERFLOW, OFFSET_OVERFLOW.text(last=h.last_offset, seg_base=seg_base),
                         h.last_offset)
    return None


def field_violations(h: BatchHeader) -> list[Violation]:
    """The v2 header fields ``ensureValid`` and the record iterator reject: a negative lastOffsetDelta or
    record count; and more records than the offsets the batch spans (``LogValidator``'s "Inconsistent batch
    offset range", which only a client's append checks: fewer is what compaction leaves)."""
    out = []
    if h.magic == 2 and h.last_offset < h.base_offset:
        out.append(Violation(NEGATIVE_DELTA, NEGATIVE_DELTA.text(delta=h.last_offset - h.base_offset),
                             h.base_offset))
    if h.magic == 2 and h.count is not None and h.count < 0:
        out.append(Violation(NEGATIVE_COUNT, NEGATIVE_COUNT.text(count=h.count), h.base_offset))
    elif h.magic == 2 and h.count is not None and h.last_offset >= h.base_offset and \
            h.count > h.last_offset - h.base_offset + 1:
        out.append(Violation(COUNT_PAST_RANGE, COUNT_PAST_RANGE.text(base=h.base_offset, last=h.last_offset,
                                                                     count=h.count), h.base_offset))
    return out


def records_end(path, h: BatchHeader) -> int | None:
    """The highest offset among the records of v2 batch ``h`` (read from ``path``; None: it holds none), or its
    last offset when they cannot be read (then they tell nothing against it)."""
    end = None
    try:
        for cols in records_of(h, path):
            if len(cols):
                top = max(cols.offsets)
                end = top if end is None or top > end else end
    except CorruptDataError:
        return h.last_offset
    return end


def first_after(path, pos: int, next_base: int | None) -> int | None:
    """The first offset of the CRC-valid batch at byte ``pos`` of ``path``; ``next_base`` (the next segment's
    base offset, None: none) when the file ends there; None when damage starts there."""
    item = next(iter(walk(path, start=pos)), None)
    if item is None:
        return next_base
    if isinstance(item, BatchHeader) and item.crc_valid and item.position == pos:
        return first_offset(item)
    return None


def range_violation(h: BatchHeader, low: int, nxt: int | None, end: Callable[[], int | None],
                    moved_next: Callable[[], bool] | None = None) -> Violation | None:
    """A CRC-valid v2 batch that starts in order (at or after ``low``, the first offset the log may go on at)
    but whose range runs past ``nxt`` (the first offset of the batch to trust after it, or the next segment's
    base) while its records (``end()``: :func:`records_end`) end before ``nxt``: its lastOffsetDelta lies, and
    the batches after it, not it, hold those offsets. Not so when a field no CRC covers explains the overlap as
    well, which repair restores instead: the gap from ``low`` up to ``nxt`` fits this batch's span exactly at
    another first offset (its baseOffset moved), or the next batch fits exactly between this one's last offset
    and the batch after it (``moved_next()``: its baseOffset moved, into the tail of a compacted batch)."""
    if h.magic != 2 or not h.crc_valid or nxt is None or not (low <= h.base_offset < nxt <= h.last_offset):
        return None
    delta = h.last_offset - h.base_offset
    if nxt - low == delta + 1 and h.base_offset != low:
        return None
    if moved_next is not None and moved_next():
        return None
    last = end()
    if last is not None and last >= nxt:
        return None
    return Violation(RANGE_PAST_RECORDS, RANGE_PAST_RECORDS.text(
        base=h.base_offset, last=h.last_offset, delta=delta, next=nxt,
        end="nowhere (it holds none)" if last is None else last), h.base_offset)


def header_violations(h: BatchHeader, prev_last: int | None, seg_base: int | None) -> list[Violation]:
    """Every rule a CRC-valid batch's header breaks (the order rule first, then the fields)."""
    v = order_violation(h, prev_last, seg_base)
    out = [] if v is None else [v]
    out.extend(field_violations(h))
    return out


def control_violation(h: BatchHeader, ctype: str | None, error: str | None = None) -> Violation | None:
    """A transactional control batch (producer id >= 0) whose marker record is unreadable (``error``) or of a
    type (``ctype``) other than COMMIT/ABORT (None: no record read)."""
    if not (h.magic == 2 and h.is_control and h.producer_id >= 0):
        return None
    if error is not None:
        return Violation(UNREADABLE_MARKER, UNREADABLE_MARKER.text(base=h.base_offset, error=error), h.base_offset)
    if ctype is not None and ctype not in ("COMMIT", "ABORT"):
        return Violation(BAD_MARKER, BAD_MARKER.text(base=h.base_offset, ctype=ctype), h.base_offset)
    return None


def fits_between(nb: BatchHeader, last: int, after: int | None) -> bool:
    """Does batch ``nb`` (its CRC-covered span) fit exactly between offset ``last`` and ``after`` (the first offset
    of the batch after it)?"""
    if after is None or (nb.magic != 2 and nb.compression != 0):
        return False
    return last + 1 + (nb.last_offset - first_offset(nb)) + 1 == after


def wrapper_first(path, h: BatchHeader) -> int | None:
    """The first inner offset of a compressed v0/v1 wrapper ``h`` (its header names only its last), read from
    ``path``; None when its records cannot be read."""
    try:
        for cols in records_of(h, path):
            if len(cols):
                return min(cols.offsets)
    except CorruptDataError:
        return None
    return None


# -- two overlapping neighbours: whose offset field is the damaged one (verify reports it, repair cuts it) -------

BLAME_THIS, BLAME_NEXT, BLAME_EITHER = "this", "next", "either"


def _one_bit_fits(value: int, low: int, high: int | None, delta: int) -> list[int]:
    """The values a one-bit change of offset field ``value`` gives that fit a batch spanning ``delta`` more
    offsets at or after ``low`` and before ``high`` (None: no bound)."""
    return [x for k in range(63) if low <= (x := value ^ (1 << k)) and (high is None or x + delta < high)]


def _after_first(path, nxt: BatchHeader, next_base: int | None) -> int | None:
    """What bounds ``nxt`` from above: the base offset of the batch header after it in ``path`` (None when that
    one is damaged or not v2), or ``next_base`` (the next segment's name) when the file ends after it."""
    after = next((i for i in walk(path, start=nxt.end) if isinstance(i, BatchHeader)), None)
    if after is None:
        return next_base
    return after.base_offset if after.crc_valid and after.magic == 2 else None


def overlap_blame(path, h: BatchHeader, nxt: BatchHeader | None, low: int, nlo: int, *, index_offset: int | None,
                  seg_start: int | None, next_base: int | None) -> str:
    """Batch ``h`` starts in order (at or after ``low``, the first offset the log may go on at) and the next batch
    to trust, ``nxt`` (None: none that is CRC-valid), starts inside it at ``nlo``, with no lastOffsetDelta lying
    (:func:`range_violation` said nothing): either one's offset field (not covered by the CRC) may be the damaged
    one. :data:`BLAME_THIS`: ``h``'s field, when the gap from ``low`` up to ``nlo`` fits its span exactly at
    another first offset, or its .index entry (``index_offset``, the last offset the index gives at its position)
    says another, or a one-bit change of it fits it between its neighbours while none of ``nxt``'s fits that one
    after it (a flipped bit is the common damage), or both do and ``h`` is the partition's first batch whose
    change gives its segment's name (``seg_start``: the segment's base offset when nothing comes before ``h``), or
    both do and ``nxt`` holds more records (the cut loses fewer). Else ``h`` is kept and ``nxt`` is the one out of
    line: :data:`BLAME_EITHER` when a one-bit change of either fits, with as many records (:func:`either_note`
    says so), :data:`BLAME_NEXT` otherwise. (``path`` and ``next_base``: what bounds ``nxt`` from above.)"""
    lo = first_offset(h)
    delta = h.last_offset - lo if h.magic == 2 or h.compression == 0 else None  # (a wrapper: no span to move)
    if delta is None:
        return BLAME_NEXT
    if nlo - low == delta + 1 and low != lo:
        return BLAME_THIS
    if index_offset is not None and index_offset - delta != h.base_offset:
        return BLAME_THIS
    if nxt is None or not nxt.crc_valid or nxt.magic != 2:
        return BLAME_NEXT
    mine = _one_bit_fits(h.base_offset, low, nlo, delta)
    if not mine:
        return BLAME_NEXT
    theirs = _one_bit_fits(nxt.base_offset, h.last_offset + 1, _after_first(path, nxt, next_base),
                           nxt.last_offset - nxt.base_offset)
    if not theirs or (seg_start is not None and seg_start in mine) or (nxt.count or 0) > (h.count or 0):
        return BLAME_THIS
    return BLAME_EITHER


def either_note(at: int, lo: int, hi: int) -> str:
    """What the finding and the cut of the next batch add when :func:`overlap_blame` says :data:`BLAME_EITHER`:
    the batch kept before it is at byte ``at`` with offsets ``lo``..``hi``."""
    return (f"; ambiguous: the batch before it (at byte {at}, offsets {lo}..{hi}) overlaps it and a one-bit change "
            f"of either's offset field fits, with as many records: that one is kept, this one is cut (in the backup)")
