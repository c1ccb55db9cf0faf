"""One segment's scan for a repair plan: :class:`SegScan` walks a segment's batches, decides what to cut
(by the batch rules, :mod:`kltool.storage.check.batch_rules`) and what to restore in place (a magic byte, a
length, an offset or leader-epoch field the CRC does not cover), and builds the segment's new indexes on the
way. :class:`Ctx` is what goes on from one segment to the next."""

from __future__ import annotations

import os
import struct
from collections import deque

from ...errors import CorruptDataError, KltoolError
from ...format import decode_records, parse_header
from ...format.batch import V2_OVERHEAD
from ...format.records import BatchHeader
from ..check import batch_rules as rules
from ..check import mend
from ..check.index_check import IndexChecker
from ..check.segment_name import last_out_of_line
from ..epochs import epoch_out_of_line
from ..index_builder import IndexBuilder, TxnIndexBuilder
from ..scan import Damage, open_segment_file, walk
from .plan import Cut
from .view import Seg

__all__ = ["Ctx", "Peek", "SegScan"]

_MAGIC = mend.MAGIC_AT  # the magic byte's position in a batch
_WITNESSES = 4  # CRC-valid batches looked at past damage for the one that bounds a batch's offsets


def _flip64(value: int, bit: int) -> int:
    """``value`` (an int64 field) with one bit flipped, as the field reads then (bit 63 is the sign)."""
    u = (value & 0xFFFFFFFFFFFFFFFF) ^ (1 << bit)
    return u - (1 << 64) if u >> 63 else u


class Ctx:
    """State carried across the segments of a partition, in offset order."""

    def __init__(self, open_txns: dict[int, int] | None = None):
        self.last: int | None = None  # last offset kept so far
        self.pending: list[Cut] = []  # damage cuts waiting for the next kept batch to bound their offsets
        self.epochs: list[tuple[int, int]] = []  # leader epochs of the kept batches (epoch, start offset)
        self.last_epoch: int | None = None  # the partitionLeaderEpoch of the last kept v2 batch
        self.known_epochs: set[int] = set()  # the epochs leader-epoch-checkpoint names
        # (the scan, the kept v2 batch, the epoch before it) when that batch's epoch differs from the one before:
        # the next kept v2 batch is its witness (epochs.epoch_out_of_line), as after the repair
        self.epoch_suspect: tuple[SegScan, BatchHeader, int] | None = None
        self.txn = TxnIndexBuilder(open_txns)
        self.txn_ok = True
        self.txn_error = ""

    def close_pending(self, h: BatchHeader, first: int | None = None) -> None:
        """The next kept batch ``h`` bounds the offsets of the damage cuts waiting for it: at its first offset
        (``first`` when the caller knows it, a compressed v0/v1 wrapper's first inner offset; else a v2 batch's
        base offset or a v0/v1 message's own; a compressed wrapper's, not in its header, bounds nothing)."""
        if not self.pending:
            return
        if first is None and (h.magic == 2 or h.base_offset_exact):
            first = h.base_offset
        for c in self.pending:
            if first is not None and c.first_offset is not None and first - 1 < c.first_offset:
                c.first_offset = None
                c.records = 0  # no offset is missing: the region held no batch the log needed
            elif first is not None:
                c.last_offset = first - 1
        self.pending.clear()

    def settle_epoch(self, k: BatchHeader | None) -> None:
        """The next kept v2 batch ``k`` (None: none comes, or a batch of another format) witnesses the epoch of
        the suspect kept before it: a lone epoch between two of the same, not named by leader-epoch-checkpoint,
        is a damaged field (leader epochs never go down in a log), restored to its neighbours' epoch."""
        suspect, self.epoch_suspect = self.epoch_suspect, None
        if suspect is None or k is None or k.magic != 2:
            return
        scan, h, prev = suspect
        ple = h.partition_leader_epoch
        if not epoch_out_of_line(prev, ple, k.partition_leader_epoch, self.known_epochs,
                                 rules.first_offset(k) > h.last_offset):
            return
        scan._restore_epoch(h, ple, prev)
        if self.epochs and self.epochs[-1] == (ple, h.base_offset):
            self.epochs.pop()
        if self.last_epoch == ple:
            self.last_epoch = prev


class Peek:
    """The walk's items, with a look further ahead: the CRC-valid batches after a batch (the witnesses for
    its offsets, SegScan._witness)."""

    __slots__ = ("it", "ahead")
    LIMIT = 256  # items looked at, at most

    def __init__(self, it):
        self.it = it
        self.ahead: deque = deque()

    def __iter__(self):
        return self

    def __next__(self):
        return self.ahead.popleft() if self.ahead else next(self.it)

    def valid_ahead(self, n: int) -> tuple[list[BatchHeader], bool]:
        """The first ``n`` CRC-valid batches among the items still to come (they stay to come), and whether
        damage (a Damage or a batch failing its CRC) comes before the first of them; fewer when the segment
        ends or LIMIT items are looked at."""
        out: list[BatchHeader] = []
        damaged = False
        for i in range(self.LIMIT):
            if i == len(self.ahead):
                x = next(self.it, None)
                if x is None:
                    break
                self.ahead.append(x)
            x = self.ahead[i]
            if isinstance(x, BatchHeader) and x.crc_valid:
                out.append(x)
                if len(out) == n:
                    break
            elif not out:
                damaged = True
        return out, damaged


class SegScan:
    """Walk one segment: decide what to cut and what to fix, and build its new indexes on the way."""

    def __init__(self, seg: Seg, ctx: Ctx, *, like_broker: bool, interval: int, is_active: bool,
                 progress=None, next_base: int | None = None):
        self.seg = seg
        self.next_base = next_base  # the next segment's base offset (its file name): bounds this one's last batch
        self.field_fixes: dict[int, str] = {}  # position of a restored uncovered byte -> why
        self.ctx = ctx
        self.like_broker = like_broker
        self.size = seg.log.stat().st_size
        self.cuts: list[Cut] = []
        self._intact: set[int] = set()  # start positions of cuts that are whole CRC-valid batches (no damage)
        self.fixes: list[tuple[int, int, int]] = []
        self.shift = 0
        self.builder: IndexBuilder | None = IndexBuilder(seg.base, interval)
        self.builder_error = ""
        self.existing = IndexChecker(seg.base, seg.index, seg.timeindex, log_size=self.size, is_active=is_active)
        self.kept = 0
        self.kept_last: int | None = None
        self.kept_span: tuple[int, int] | None = None  # the last kept batch's first and last offsets
        # the batches kept after an overlap where either one's offset field could be the damaged one: the next
        # batch's position -> (the kept one's position, first and last offset)
        self.ambiguous: dict[int, tuple[int, int, int]] = {}
        self.kept_markers: set[int] = set()
        self.stopped = False  # like-broker: truncated here
        self.overflow: rules.Violation | None = None  # the first batch the broker splits the segment at
        self.txn_entries: list = []
        self.progress = progress
        self.fd = -1

    # -- the walk --------------------------------------------------------------------------------------
    def run(self) -> None:
        self.fd = open_segment_file(self.seg.log)
        try:
            items = self.items = Peek(walk(self.seg.log, progress=self.progress))
            nxt = next(items, None)
            while nxt is not None:
                item, nxt = nxt, next(items, None)
                self.lookahead = nxt
                if self.stopped:
                    self._count_tail(item)
                    continue
                if isinstance(item, Damage):
                    pos, end = item.position, item.end
                    fixed = None if self.like_broker else self._try_fix_size(pos)
                    if fixed is not None and fixed.end <= self.size:
                        self._batch(fixed)
                        items = self.items = Peek(walk(self.seg.log, start=fixed.end, progress=None))
                        nxt = next(items, None)
                        continue
                    h = self._try_fix_magic(pos, end)
                    if h is not None:
                        self._batch(h)
                        pos = h.end
                        if pos >= end or self.stopped:
                            continue
                        self._cut(pos, end, "garbage", "unreadable bytes after a batch whose magic byte was repaired")
                        continue
                    first, last, records = self._hint(item)
                    self._cut(pos, end, item.kind, item.message, first, last, records, damage=True)
                    continue
                h = item
                if not h.crc_valid:
                    fixed = self._try_fix_magic(h.position, h.end)
                    if fixed is not None:
                        self._batch(fixed)
                        continue
                    fixed = None if self.like_broker else self._try_fix_size(h.position)
                    if fixed is not None:  # the walk trusted a damaged length: go on from the batch's true end
                        self._batch(fixed)
                        items = self.items = Peek(walk(self.seg.log, start=fixed.end, progress=None))
                        nxt = next(items, None)
                        continue
                    v = rules.crc_violation(h, rules.computed_crc(self.seg.log, h))
                    inner = None if self.like_broker else self._valid_within(h)
                    if inner is not None:  # its length (not covered by the CRC) swallows a valid batch: keep that
                        self._cut(h.position, inner, v.kind, v.message, h.base_offset, None, None, damage=True)
                        items = self.items = Peek(walk(self.seg.log, start=inner, progress=None))
                        nxt = next(items, None)
                        continue
                    self._cut(h.position, h.end, v.kind, v.message, h.base_offset, h.last_offset, h.count)
                    continue
                self._batch(h)
        finally:
            os.close(self.fd)
        self.existing.finish()
        self.txn_entries = self.ctx.txn.take() if self.ctx.txn_ok else []
        self.txn_ok = self.ctx.txn_ok

    def _count_tail(self, item) -> None:
        c = self.cuts[-1]
        if isinstance(item, BatchHeader) and item.crc_valid:
            if item.count is not None and item.count > 0:
                c.records = (c.records or 0) + item.count
            if c.last_offset is None or item.last_offset > c.last_offset:
                c.last_offset = item.last_offset

    def _hint(self, d: Damage) -> tuple[int | None, int | None, int | None]:
        """Offsets a damaged region probably held: from a readable header at its start (a torn batch), else
        from the neighbours (the next kept batch bounds it later)."""
        first = self.ctx.last + 1 if self.ctx.last is not None else self.seg.base
        if d.kind == "torn_tail" and d.length >= V2_OVERHEAD:
            head = os.pread(self.fd, V2_OVERHEAD, d.position)
            if len(head) == V2_OVERHEAD and head[_MAGIC] == 2:
                try:
                    h = parse_header(head, 0, check_crc=False)
                except (CorruptDataError, ValueError, struct.error):
                    h = None
                if h is not None and h.base_offset >= first and h.last_offset >= h.base_offset \
                        and h.count is not None and 0 <= h.count <= h.last_offset - h.base_offset + 1:
                    return first, h.last_offset, h.count
        return first, None, None

    def _try_fix_magic(self, pos: int, limit: int) -> BatchHeader | None:
        """A batch at ``pos`` that is valid once its magic byte is 2 (or 1, 0): the CRC proves it."""
        return self._record(self._magic_probe(pos, limit))

    def _try_fix_size(self, pos: int) -> BatchHeader | None:
        """A batch at ``pos`` whose length field (not covered by the CRC) is damaged: the next whole, CRC-valid
        batch after ``pos`` (or the end of the file) marks where it really ends, and its CRC over exactly that
        span proves the rest of it intact. Restores the length field in place; returns the batch, or None."""
        return self._record(self._size_probe(pos))

    def _record(self, probe) -> BatchHeader | None:
        if probe is None:
            return None
        h, fixes, why = probe
        self.fixes.extend(fixes)
        if why is not None:
            for at, _old, _new in fixes:
                self.field_fixes[at] = why
        return h

    def _valid_within(self, h: BatchHeader) -> int | None:
        """Where the first CRC-valid batch inside batch ``h``'s span starts (``h``'s CRC fails: its length may
        be the damaged field), or None."""
        return mend.valid_within(self.seg.log, h)

    def _mended(self, item) -> BatchHeader | None:
        """What a damaged item (a Damage, a batch failing its CRC) is once a magic or length fix mends it (as
        the walk will do when it gets there), or None: a witness for the batch before it."""
        pos = item.position
        probe = self._magic_probe(pos, item.end)
        if probe is None and not self.like_broker:
            probe = self._size_probe(pos)
        return None if probe is None else probe[0]

    def _magic_probe(self, pos: int, limit: int):
        """(the batch, the byte fixes, None) when the batch at ``pos`` is valid with another magic byte."""
        return mend.magic_probe(self.fd, pos, limit)

    def _size_probe(self, pos: int):
        """(the batch, the byte fixes, why) when the batch at ``pos`` is valid with another length field."""
        return mend.size_probe(self.fd, self.seg.log, self.size, pos)

    def _restore_epoch(self, h: BatchHeader, ple: int, prev: int) -> None:
        """Restore batch ``h``'s partitionLeaderEpoch field (it reads ``ple``) to ``prev`` in place."""
        old = ple.to_bytes(4, "big", signed=True)
        new = prev.to_bytes(4, "big", signed=True)
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            if a != b:
                self.fixes.append((h.position + 12 + i, a, b))
                self.field_fixes[h.position + 12 + i] = (
                    f"the batch at byte {h.position} is valid (its CRC checks) but its partitionLeaderEpoch field "
                    f"(not covered by the CRC) says {ple} between batches of epoch {prev}, and "
                    f"leader-epoch-checkpoint does not name {ple}: restored to {prev}")
        h.partition_leader_epoch = prev

    def _index_offset_at(self, position: int) -> int | None:
        """The offset the existing .index gives for the batch at ``position`` (its last offset), if any."""
        return self.existing.index_offset_at(position)

    def _witness(self, h: BatchHeader) -> tuple[int | None, list[BatchHeader], bool]:
        """What bounds batch ``h``'s offsets from above: (the first offset of the next batch to trust, the
        CRC-valid batches skipped before it, whether damage was skipped). Damaged neighbours are no witness (a
        repair cuts them; the epoch rule skips them the same way; one that a magic or length fix mends is
        taken as mended), nor is a batch whose own offset field its successor contradicts, when it does not
        follow ``h`` either, or when the batch after that successor agrees with it, or when ``h`` and it fill the
        gap up to that successor exactly (both jumped), nor the segment's last batch when it is out of line with
        the batch before it and the next segment's name (segment_name.last_out_of_line);
        past the segment's last batch, the next segment's name is."""
        la = self.lookahead
        if la is None:
            return self.next_base, [], False
        if not isinstance(la, Damage) and la.crc_valid:
            ahead, damaged = [la, *self.items.valid_ahead(_WITNESSES - 1)[0]], False
        elif (mended := self._mended(la)) is not None:  # what the walk's fix makes of it
            ahead, damaged = [mended, *self.items.valid_ahead(_WITNESSES - 1)[0]], False
        else:  # the lookahead itself is damage (it is no longer among the items valid_ahead looks at)
            ahead, damaged = self.items.valid_ahead(_WITNESSES)[0], True
        skipped: list[BatchHeader] = []
        for i, v in enumerate(ahead):
            if v.magic != 2 and v.compression != 0:  # a compressed v0/v1 wrapper: its first offset is inside it
                first = rules.wrapper_first(self.seg.log, v) if v.last_offset <= h.last_offset else None
                return (first if first is not None and first >= self._low() else None), skipped, damaged
            lo = rules.first_offset(v)
            if lo < self._low() or (v.magic == 2 and v.last_offset - self.seg.base > rules.INT32_MAX):
                # below the log kept so far, or past what a v2 segment can hold (a broker rolls a segment long
                # before; only legacy segments overflow, KAFKA-6264): its own field is out of line
                skipped.append(v)
                continue
            if i + 1 == len(ahead) and v.end == self.size and \
                    last_out_of_line((ahead[i - 1] if i else h).last_offset, v, lo, self.next_base):
                # the segment's last batch, out of line with the batch before it and the next segment's name (the
                # split does not take it either): its own field is the damaged one, the next name the witness
                skipped.append(v)
                return self.next_base, skipped, damaged
            after = ahead[i + 1] if i + 1 < len(ahead) else None
            if after is None or v.last_offset < rules.first_offset(after):
                return lo, skipped, damaged
            after2 = ahead[i + 2] if i + 2 < len(ahead) else None
            agreed = after2 is not None and after.last_offset < rules.first_offset(after2) <= v.last_offset
            if lo > h.last_offset and not agreed and not self._fills([h, *skipped, v], rules.first_offset(after)):
                return lo, skipped, damaged  # it follows h: its successor is the odd one
            skipped.append(v)  # its successor contradicts it: its own field may be damaged
        return (self.next_base if not ahead else None), skipped, damaged

    def _low(self) -> int:
        """The first offset the next kept batch may have."""
        return self.ctx.last + 1 if self.ctx.last is not None else self.seg.base

    def _fills(self, chain: list[BatchHeader], end: int) -> bool:
        """Do the batches of ``chain`` (their CRC-covered offset counts) fill the offsets from the next one
        the log needs up to ``end`` exactly?"""
        return self._low() + sum(x.last_offset - rules.first_offset(x) + 1 for x in chain) == end

    def _offset_candidates(self, h: BatchHeader, low: int, nlo: int | None, delta: int | None,
                           skipped: list[BatchHeader], damaged: bool) -> set[int]:
        """The values the neighbours allow for ``h``'s first offset: the .index entry at its position; the gap
        up to the witness when ``h`` (and the CRC-valid batches skipped before the witness) fill it exactly;
        else a one-bit change of the field that alone fits (a flipped bit is the common damage)."""
        cands = set()
        if delta is None:
            return cands
        idx = self._index_offset_at(h.position)
        if idx is not None:
            cands.add(idx - delta)
        if nlo is not None and not damaged and self._fills([h, *skipped], nlo):
            cands.add(low)
        if not cands and nlo is not None:
            lo = h.base_offset if h.magic == 2 else h.last_offset
            flips = [x for k in range(64) if low <= (x := _flip64(lo, k)) and x + delta < nlo]
            if len(flips) == 1:
                cands.add(flips[0])
            elif h.position == 0 and self.seg.base in flips:
                cands.add(self.seg.base)  # a segment's first batch: its name (the base offset) is the witness
        return cands

    def _uncovered_offset(self, h: BatchHeader) -> BatchHeader | None:
        """A CRC-valid batch whose offset field (not covered by the CRC: v2 baseOffset, v0/v1 offset) its
        neighbours contradict: restore the field in place when the neighbours (previous last offset, the next
        batch to trust or the next segment's base, the .index entry at its position, its own CRC-covered
        lastOffsetDelta) fix the only possible value; otherwise excise this one batch. Returns the batch to
        go on with (corrected), or None when it was cut."""
        prev = self.ctx.last
        low = prev + 1 if prev is not None else self.seg.base
        lo = h.base_offset if h.magic == 2 else h.last_offset
        la = self.lookahead
        if lo == low and type(la) is BatchHeader and la.crc_valid and (la.magic == 2 or la.compression == 0) \
                and h.last_offset < rules.first_offset(la) and not self._zeroed_field(h):
            return h  # right after the log so far, and the next batch follows it (the usual case)
        nlo, skipped, damaged = self._witness(h)
        below = lo < low
        past = nlo is not None and nlo >= low and h.last_offset >= nlo
        delta = self._delta(h)
        if below and nlo is None and delta is not None and self._last_of_log(h, la) and \
                (self.kept_span is None or h.last_offset < self.kept_span[0] or lo < 0) and \
                h.position not in self.ambiguous \
                and not 0 <= h.last_offset - delta < self.seg.base:  # (below the name: the split's, or _reject's)
            # the log's last batch, below the log so far: its field is damaged (Kafka would take the log's end
            # from it and hand out its offsets again; a negative field is damage wherever its last offset
            # lands), unless it copies an earlier batch. The log so far (the
            # previous batch's last offset + 1, or the segment's name) and the .index entry at its position are
            # the witnesses; with no entry, it goes on right after the log so far (an active segment has no gaps)
            idx = self._index_offset_at(h.position)
            new = idx - delta if idx is not None else low
            if new >= low and not self._copies_earlier(h):
                return self._restore_offset(h, new, delta)
        if below and (nlo is None or nlo < low):
            # going back with nothing after it to say the log goes on (a duplicate, say), or the whole rest out
            # of order (not one batch's field): _reject decides as before
            return h
        if h.magic != 2 and h.compression != 0:
            delta = None  # (a wrapper: the rules below take a v0/v1 field as a one-message batch's)
        if not (below or past):
            told = self._in_order_contradicted(h, low, nlo, delta)
            if told is None:
                return h  # in order, and nothing contradicts it
            nlo, damaged = told
        elif past and not below and lo <= nlo:
            # the next batch starts inside this one: either may be the damaged one. This one is, only when
            # the gap to the next fits it exactly at another offset (or its .index entry says so); else keep
            # it, and the next batch is judged in its turn.
            nb = la if type(la) is BatchHeader and la.crc_valid and rules.first_offset(la) == nlo else None
            v = rules.range_violation(h, low, nlo, lambda: rules.records_end(self.seg.log, h), None if nb is None else (
                lambda: rules.fits_between(nb, h.last_offset, rules.first_after(self.seg.log, nb.end, self.next_base))))
            if v is not None:  # its lastOffsetDelta (CRC-covered) runs past its records: cut, the rest kept
                self._cut(h.position, h.end, v.kind, v.message, h.base_offset, nlo - 1, h.count, intact=True)
                return None
            if not (skipped or damaged):  # (else the witness after the next batch is trusted: this one's field)
                nxt = self.lookahead
                if not (isinstance(nxt, BatchHeader) and nxt.crc_valid) and nxt is not None:
                    nxt = self._mended(nxt) or nxt  # one a length or magic fix mends is judged as mended
                nxt = nxt if isinstance(nxt, BatchHeader) and nxt.crc_valid else None
                blame = rules.overlap_blame(self.seg.log, h, nxt, low, nlo,
                                            index_offset=self._index_offset_at(h.position),
                                            seg_start=self.seg.base if self.ctx.last is None else None,
                                            next_base=self.next_base)
                if blame == rules.BLAME_EITHER:
                    self.ambiguous[nxt.position] = (h.position, h.base_offset, h.last_offset)
                if blame != rules.BLAME_THIS:
                    return h  # kept: the next batch is judged in its turn
        cands = self._offset_candidates(h, low, nlo, delta, skipped, damaged)
        fits = [c for c in cands if c >= low and (nlo is None or c + delta < nlo)]
        if len(cands) == 1 and len(fits) == 1 and not self._held_later(h, fits[0], delta):
            return self._restore_offset(h, fits[0], delta)
        field = "baseOffset" if h.magic == 2 else "offset"
        why = (f"the batch at byte {h.position} is valid (its CRC checks) but its {field} field (not covered by "
               f"the CRC) says {lo}, which its neighbours contradict (after {prev}, before {nlo}); its true "
               f"offsets cannot be told, so only this batch is cut{self._either_note(h)}")
        self._cut(h.position, h.end, "offset_field", why, None, None, h.count, intact=True)
        return None

    def _either_note(self, h: BatchHeader) -> str:
        """rules.either_note when ``h`` is cut after an overlap that blames either batch (rules.BLAME_EITHER)."""
        at = self.ambiguous.get(h.position)
        return "" if at is None else rules.either_note(*at)

    def _delta(self, h: BatchHeader) -> int | None:
        """The CRC-covered span of ``h``'s offsets (last - first): a v2 batch's lastOffsetDelta, 0 for a v0/v1
        message, a v1 wrapper's inner relative offsets (its field names its last); None for a v0 wrapper (its
        inner offsets are absolute: the field's own witness) or one whose messages do not read."""
        if h.magic == 2:
            return h.last_offset - h.base_offset
        if h.compression == 0:
            return 0
        if h.magic != 1:
            return None
        first = rules.wrapper_first(self.seg.log, h)
        return None if first is None or first > h.last_offset else h.last_offset - first

    def _last_of_log(self, h: BatchHeader, la) -> bool:
        """Is ``h`` the log's last batch: of the last segment, with nothing CRC-valid after it (damage after
        it is cut), and after a batch kept or at the segment's start (the segment's name is its witness)?"""
        if self.next_base is not None or not (self.ctx.last is not None or h.position == 0):
            return False
        if la is None:
            return True
        return isinstance(la, Damage) and self._mended(la) is None and not self.items.valid_ahead(1)[0]

    def _copies_earlier(self, h: BatchHeader) -> bool:
        """Does an earlier batch of the segment have ``h``'s CRC-covered bytes (its size and CRC): a copy
        written again, not a batch whose field was damaged?"""
        for v in walk(self.seg.log, end=h.position):
            if isinstance(v, BatchHeader) and v.crc_valid and (v.size, v.crc, v.magic) == (h.size, h.crc, h.magic):
                return True
        return False

    def _held_later(self, h: BatchHeader, first: int, delta: int) -> bool:
        """Does an intact batch further on in the segment (as far as the look-ahead goes) hold exactly the offsets
        ``first``..``first + delta`` that a restore would give ``h``? Then ``h`` is not a batch whose field was
        damaged but one out of place (runs of a segment in the wrong order): restoring would serve its records at
        another batch's offsets."""
        return any(v.magic == h.magic and rules.first_offset(v) == first and v.last_offset == first + delta
                   for v in self.items.valid_ahead(Peek.LIMIT)[0])

    def _in_order_contradicted(self, h: BatchHeader, low: int, nlo: int | None,
                               delta: int | None) -> tuple[int, bool] | None:
        """A batch in order with the log kept so far and the next batch to trust, whose offsets another witness
        contradicts: (the offset its next batch really starts at, whether damage lies between), else None.
        The witness: the damaged batch right after it, whose header (its CRC fails) says it starts inside this
        one while fitting between the log so far and the next batch to trust (a payload damage leaves the
        header as written; this batch's own field is the one out of line: 8..17 before a damaged 10..19 after
        0..-1). And a field that reads 0 right after cut damage ending in zeros: its bytes cannot be told from
        the damage's (a zeroed 5..6 reads 0..1 after a zeroed batch 0..4), so its offsets are not known and the
        neighbours must fix them. (A v2 batch more than 2^31 - 1 past its segment's name with nothing after it is
        no such contradiction: the broker keeps it and splits the segment, rules.OFFSET_OVERFLOW.)"""
        if delta is None:
            return None
        if self._zeroed_field(h):
            return nlo, True
        la = self.lookahead
        if type(la) is BatchHeader and not la.crc_valid and la.magic == h.magic and \
                (la.magic == 2 or la.compression == 0):
            dlo = rules.first_offset(la)
            if low <= dlo <= h.last_offset and la.last_offset >= dlo and (nlo is None or la.last_offset < nlo) \
                    and (la.crc, la.size) != (h.crc, h.size) and self._mended(la) is None:  # (not h's damaged copy)
                return dlo, False
        return None

    def _zeroed_field(self, h: BatchHeader) -> bool:
        """Does ``h``'s offset field read 0 right after damage that is cut and ends in a zero byte (zeros over
        the damage's end and the field: the field may be the damage's)? A whole CRC-valid batch cut before it is
        no such damage: its length is its own, so the field after it is not its bytes."""
        return rules.first_offset(h) == 0 and bool(self.cuts) and self.cuts[-1].end == h.position and \
            self.cuts[-1].start not in self._intact and h.position > 0 and \
            os.pread(self.fd, 1, h.position - 1) == b"\0"

    def _restore_offset(self, h: BatchHeader, new: int, delta: int) -> BatchHeader:
        field = "baseOffset" if h.magic == 2 else "offset"
        old_bytes = os.pread(self.fd, 8, h.position)
        new_bytes = new.to_bytes(8, "big", signed=True) if h.magic == 2 else \
            (new + delta).to_bytes(8, "big", signed=True)
        for i, (a, b) in enumerate(zip(old_bytes, new_bytes, strict=True)):
            if a != b:
                self.fixes.append((h.position + i, a, b))
                self.field_fixes[h.position + i] = (
                    f"the batch at byte {h.position} is valid (its CRC checks) but its {field} field (not "
                    f"covered by the CRC) says {h.base_offset if h.magic == 2 else h.last_offset}; its "
                    f"neighbours fix it at {new if h.magic == 2 else new + delta}: restored")
        h.base_offset, h.last_offset = (new, new + delta) if h.magic == 2 else (new + delta, new + delta)
        return h

    def _reject(self, h: BatchHeader) -> tuple[rules.Violation | None, str | None]:
        """(the batch rule that cuts the batch, or None; the marker type of a transaction control batch)."""
        for v in rules.header_violations(h, self.ctx.last, self.seg.base):
            if v.rule.cuts:
                return v, None
            if v.rule is rules.OFFSET_OVERFLOW and self.overflow is None:
                self.overflow = v  # kept: the broker splits the segment
        if h.magic == 2 and h.is_control and h.producer_id >= 0:
            data = os.pread(self.fd, h.size, h.position)
            try:
                cols = decode_records(h, data)
            except CorruptDataError as e:
                return rules.control_violation(h, None, e.message), None
            ctype = (cols.controls[0] or {}).get("type") if len(cols) and cols.controls else None
            return rules.control_violation(h, ctype), ctype
        return None, None

    def _batch(self, h: BatchHeader) -> None:
        if not self.like_broker:
            h = self._uncovered_offset(h)
            if h is None:
                return
        why, ctype = self._reject(h)
        if why is not None:
            if self.fixes and self.fixes[-1][0] == h.position + 16:
                self.fixes.pop()  # the batch goes anyway
            self._cut(h.position, h.end, why.kind, why.message + self._either_note(h), h.base_offset, h.last_offset,
                      h.count, intact=True)
            return
        self._keep(h, ctype)

    def _keep(self, h: BatchHeader, ctype: str | None) -> None:
        ctx = self.ctx
        last = h.last_offset
        if self.builder is not None:
            try:
                self.builder.on_batch(h.position - self.shift, h.size, last, h.max_timestamp)
            except KltoolError as e:
                self.builder = None
                self.builder_error = e.message
        self.existing.batch(h)
        self._keep_epoch(h)
        if h.magic == 2:
            if h.producer_id >= 0:
                if ctx.txn_ok:
                    try:
                        ctx.txn.on_batch(h, ctype if h.is_control else None)
                    except KltoolError as e:
                        ctx.txn_ok = False
                        ctx.txn_error = e.message
                if h.is_control:
                    self.kept_markers.add(h.base_offset)
        ctx.close_pending(h)
        self.kept += 1
        if ctx.last is None or last > ctx.last:
            ctx.last = last
        self.kept_span = (rules.first_offset(h), last)
        if self.kept_last is None or last > self.kept_last:
            self.kept_last = last

    def _keep_epoch(self, h: BatchHeader) -> None:
        """A kept batch's leader epoch: it witnesses the suspect epoch kept before it (Ctx.settle_epoch), and
        is a suspect itself when it differs from the epoch before it."""
        ctx = self.ctx
        if not self.like_broker:
            ctx.settle_epoch(h)  # (the witness for a suspect epoch is the next batch the repair keeps)
        if h.magic != 2:
            return
        ple, prev = h.partition_leader_epoch, ctx.last_epoch
        if not self.like_broker and prev is not None and ple != prev:
            ctx.epoch_suspect = (self, h, prev)
        ctx.last_epoch = ple
        if ple >= 0 and (not ctx.epochs or ple > ctx.epochs[-1][0]):
            ctx.epochs.append((ple, h.base_offset))

    def _cut(self, start: int, end: int, kind: str, reason: str, first=None, last=None, records=None,
             damage: bool = False, intact: bool = False) -> None:
        if intact:
            self._intact.add(start)
        if self.like_broker:
            end = self.size
            c = Cut(start, end, kind, reason, first, last, records if records is not None and records >= 0 else None)
            self.cuts.append(c)
            self.stopped = True
            return
        c = Cut(start, end, kind, reason, first, last, records if records is not None and records >= 0 else None)
        self.cuts.append(c)
        self.shift += end - start
        if damage and last is None:
            self.ctx.pending.append(c)

    @property
    def modified(self) -> bool:
        return bool(self.cuts or self.fixes)

    @property
    def new_size(self) -> int:
        return self.size - sum(c.length for c in self.cuts)

