"""The one home of the mends: a batch whose only damage is a byte its CRC does not cover (the magic byte of a
v2 batch, whose CRC starts after it; the length field of any batch) is restored in place, not cut: its CRC over
the restored bytes proves the rest intact. Repair's batch walk (:mod:`kltool.storage.change.segscan`) and the
split of a segment whose batches lie below its base (:class:`kltool.storage.check.segment_name.SplitRule`,
which verify reports by too) use the same probes. Each probe returns (the batch as mended, the byte fixes
``(position, old, new)``, why; ``why`` None for a magic fix) or None."""

from __future__ import annotations

import os
import re
import struct

from ...errors import CorruptDataError
from ...format import parse_header
from ...format.batch import V2_OVERHEAD
from ...format.legacy import RECORD_OVERHEAD
from ...format.records import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MIN_BATCH_SIZE_FIELD, BatchHeader
from ..scan import data_ranges, walk

__all__ = ["MAGIC_AT", "magic_probe", "size_probe", "magic_why"]

MAGIC_AT = HEADER_SIZE_UP_TO_MAGIC - 1  # the magic byte's position in a batch
MAX_FIX_BATCH = 64 << 20  # a fix is tried for batches up to this size (bigger ones are not plausible)
_MAGIC_AT_16 = re.compile(rb"(?=.{16}[\x00-\x02])", re.S)
_HEADER_CANDIDATES = 64  # plausible batch starts a length fix tries as a damaged batch's end
_V2_FIELDS = struct.Struct(">hi")  # attributes, lastOffsetDelta (bytes 21..27)


def magic_why(pos: int, magic: int) -> str:
    """What the plan says of a magic fix of the batch at byte ``pos``."""
    return f"the batch at byte {pos} is valid (its CRC checks) with magic {magic}: only its magic byte was damaged"


def _plausible_header(data: bytes, i: int) -> bool:
    """Does a batch header plausibly start at ``data[i]``, whatever its length field says? (The fields the
    walker's resync checks before a CRC: magic, attributes; v2 also lastOffsetDelta.)"""
    if int.from_bytes(data[i + 8:i + 12], "big", signed=True) < MIN_BATCH_SIZE_FIELD:
        return False  # (its offset, not covered by a v2 CRC, may be damaged as well: not looked at)
    magic = data[i + 16]
    if magic < 2:
        attrs = data[i + 17] if i + 17 < len(data) else 0
        return attrs & 0x07 <= 3 and not attrs & (0xF0 if magic == 1 else 0xF8)
    if i + 61 > len(data):
        return False
    attrs, lod = _V2_FIELDS.unpack_from(data, i + 21)
    return attrs & 0x07 <= 4 and not attrs & ~0x7F and lod >= 0


def magic_probe(fd: int, pos: int, limit: int):
    """(the batch, the byte fixes, None) when the batch at ``pos`` (up to byte ``limit``) is valid with another
    magic byte."""
    head = os.pread(fd, HEADER_SIZE_UP_TO_MAGIC, pos)
    if len(head) < HEADER_SIZE_UP_TO_MAGIC:
        return None
    size_field = int.from_bytes(head[8:12], "big", signed=True)
    total = size_field + LOG_OVERHEAD
    if size_field < MIN_BATCH_SIZE_FIELD or pos + total > limit or total > MAX_FIX_BATCH:
        return None
    cur = head[MAGIC_AT]
    data = bytearray(os.pread(fd, total, pos))
    if len(data) != total:
        return None
    for m in (2, 1, 0):
        if m == cur or (m == 2 and total < V2_OVERHEAD) or (m < 2 and size_field < RECORD_OVERHEAD[m]):
            continue
        data[MAGIC_AT] = m
        try:
            h = parse_header(data, 0)
        except (CorruptDataError, ValueError, struct.error):
            continue
        if h.crc_valid and h.size == total:
            h.position = pos
            return h, [(pos + MAGIC_AT, cur, m)], None  # the magic byte's position
    return None


def header_starts(fd: int, size: int, pos: int, limit: int, magic: int) -> list[int]:
    """Positions in (pos, limit) of a file of ``size`` bytes where a plausible batch header of format ``magic``
    starts (:func:`_plausible_header`): at most _HEADER_CANDIDATES, in order."""
    out: list[int] = []
    first = pos + LOG_OVERHEAD + RECORD_OVERHEAD[0]
    if min(limit, size) <= first:
        return out
    stop = min(limit, size)
    for a, b in data_ranges(fd, first, stop):  # (a sparse file's holes: a length field there is 0)
        lo = max(first, a - 11)
        data = os.pread(fd, stop - lo + V2_OVERHEAD if b >= stop else b - lo + V2_OVERHEAD, lo)
        for m in _MAGIC_AT_16.finditer(data):
            i = m.start()
            if lo + i >= min(b, limit):
                break
            if data[i + 16] == magic and _plausible_header(data, i):  # (its length may be damaged too)
                out.append(lo + i)
                if len(out) == _HEADER_CANDIDATES:
                    return out
    return out


def size_probe(fd: int, log, size: int, pos: int):
    """(the batch, the byte fixes, why) when the batch at ``pos`` of ``log`` (open as ``fd``, ``size`` bytes)
    is valid with another length field: the next whole, CRC-valid batch after ``pos`` (or the end of the file,
    or a plausible header before that batch) marks where it really ends, and its CRC over exactly that span
    proves the rest of it intact."""
    head = os.pread(fd, HEADER_SIZE_UP_TO_MAGIC, pos)
    if len(head) < HEADER_SIZE_UP_TO_MAGIC or head[MAGIC_AT] > 2:
        return None
    ends = []
    for item in walk(log, start=pos + 1):
        if isinstance(item, BatchHeader) and item.crc_valid:
            ends.append(item.position)
            break
    ends.append(size)
    # the next batch may be damaged too (its CRC fails): a plausible batch header before the next valid
    # batch is where this one may end
    ends += header_starts(fd, size, pos, min(ends[0], pos + MAX_FIX_BATCH), head[MAGIC_AT])
    for end in ends:
        total = end - pos
        if total > MAX_FIX_BATCH or total < LOG_OVERHEAD + RECORD_OVERHEAD[0]:
            continue
        data = bytearray(os.pread(fd, total, pos))
        old = bytes(data[8:12])
        data[8:12] = (total - LOG_OVERHEAD).to_bytes(4, "big", signed=True)
        if bytes(data[8:12]) == old:
            continue
        try:
            h = parse_header(data, 0)
        except (CorruptDataError, ValueError, struct.error):
            continue
        if not h.crc_valid or h.size != total:
            continue
        h.position = pos
        fixes = [(pos + 8 + i, old[i], data[8 + i]) for i in range(4) if old[i] != data[8 + i]]
        why = (f"the batch at byte {pos} is valid (its CRC checks over {total} bytes, up to where the next batch "
               f"starts) but its length field (not covered by the CRC) says "
               f"{int.from_bytes(old, 'big', signed=True)}: restored to {total - LOG_OVERHEAD}")
        return h, fixes, why
    return None


def valid_within(log, h: BatchHeader) -> int | None:
    """Where the first CRC-valid batch inside batch ``h``'s span starts (``h``'s CRC fails: its length may be
    the damaged field), or None."""
    for item in walk(log, start=h.position + 1):
        if item.position >= h.end:
            return None
        if isinstance(item, BatchHeader) and item.crc_valid:
            return item.position
    return None
