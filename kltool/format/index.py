"""Codecs for ``N.index``, ``N.timeindex`` and ``N.txnindex`` (Kafka's ``OffsetIndex``, ``TimeIndex``, ``TransactionIndex``).

Pure functions over bytes-like objects. Offsets handed in and out are absolute
(``base_offset + relative``), like Kafka's ``OffsetIndex``/``TimeIndex`` APIs.

* Offset index entry (8 bytes):  relativeOffset int32, position int32.
* Time index entry (12 bytes):   timestamp int64, relativeOffset int32.
* Txn index entry (34 bytes):    version int16, producerId, firstOffset, lastOffset, lastStableOffset (int64).

Kafka treats every whole entry of an existing index file as valid (``entries = length // entrySize``),
so an untrimmed (preallocated, zero-filled) file has a tail of ``(base_offset, 0)`` / ``(0, base_offset)``
entries. ``*_entries(..., stop_at_zero_tail=True)`` drop that tail the way ``DumpLogSegments`` does.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from operator import itemgetter

from ..plain import FrozenPlain

OFFSET_ENTRY = 8
TIME_ENTRY = 12
TXN_ENTRY = 34
TXN_INDEX_VERSION = 0  # AbortedTxn.CURRENT_VERSION
NO_TIMESTAMP = -1  # RecordBatch.NO_TIMESTAMP
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

_OFFSET = struct.Struct(">ii")
_TIME = struct.Struct(">qi")
_TXN = struct.Struct(">hqqqq")
_ZERO_TIME_ENTRY = bytes(TIME_ENTRY)
_LITTLE = sys.byteorder == "little"

__all__ = [
    "OFFSET_ENTRY", "TIME_ENTRY", "TXN_ENTRY", "TXN_INDEX_VERSION", "NO_TIMESTAMP", "AbortedTxn",
    "trailing_bytes", "entry_count",
    "parse_offset_index", "offset_index_entries", "offset_index_zero_tail",
    "parse_time_index", "time_index_entries", "time_index_zero_tail",
    "parse_txn_index",
    "encode_offset_entry", "encode_time_entry", "encode_aborted_txn",
    "encode_offset_index", "encode_time_index", "encode_txn_index",
    "lookup_offset", "lookup_time",
    "check_offset_index", "check_time_index", "check_txn_index",
]


def _view(data) -> memoryview:
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def trailing_bytes(data, entry_size: int) -> int:
    """Bytes after the last whole entry (Kafka ignores them when reading)."""
    return len(_view(data)) % entry_size


def entry_count(data, entry_size: int) -> int:
    """Number of whole entries, as Kafka counts them (``length // entrySize``)."""
    return len(_view(data)) // entry_size


# ---------------------------------------------------------------------------------------------- offset index


def _offset_ints(data) -> array:
    """All whole offset-index entries as a flat int32 array [rel0, pos0, rel1, pos1, ...]."""
    mv = _view(data)
    n = len(mv) // OFFSET_ENTRY
    arr = array("i")
    arr.frombytes(mv[: n * OFFSET_ENTRY])
    if _LITTLE:
        arr.byteswap()
    return arr


def _offset_stop(rels: array) -> int:
    """Index of the first entry after entry 0 whose relative offset is 0 (len(rels) if none)."""
    try:
        return rels.index(0, 1) if len(rels) > 1 else len(rels)
    except ValueError:
        return len(rels)


def parse_offset_index(data, base_offset: int) -> list[tuple[int, int]]:
    """Every whole entry as absolute ``(offset, position)``, zero tail included (Kafka's view)."""
    return offset_index_entries(data, base_offset, stop_at_zero_tail=False)


def offset_index_entries(data, base_offset: int, *, stop_at_zero_tail: bool = True) -> list[tuple[int, int]]:
    """Absolute ``(offset, position)`` entries. With ``stop_at_zero_tail`` stop at the first entry
    after entry 0 whose relative offset is 0 (a zero-filled preallocated tail), like DumpLogSegments."""
    arr = _offset_ints(data)
    rels = arr[0::2]
    stop = _offset_stop(rels) if stop_at_zero_tail else len(rels)
    return list(zip((base_offset + r for r in rels[:stop]), arr[1 : 2 * stop : 2], strict=True))


def offset_index_zero_tail(data) -> int:
    """How many whole entries ``offset_index_entries`` drops as the zero tail."""
    rels = _offset_ints(data)[0::2]
    return len(rels) - _offset_stop(rels)


# ------------------------------------------------------------------------------------------------ time index


def _time_stop(mv: memoryview) -> int:
    """Entry index of the first all-zero entry (timestamp 0, relative offset 0) after entry 0."""
    n = len(mv) // TIME_ENTRY
    if n <= 1:
        return n
    # bytes.find is C speed; keep only hits aligned on an entry boundary.
    buf = bytes(mv[: n * TIME_ENTRY])
    pos = buf.find(_ZERO_TIME_ENTRY, TIME_ENTRY)
    while pos != -1:
        if pos % TIME_ENTRY == 0:
            return pos // TIME_ENTRY
        pos = buf.find(_ZERO_TIME_ENTRY, pos + TIME_ENTRY - pos % TIME_ENTRY)
    return n


def parse_time_index(data, base_offset: int) -> list[tuple[int, int]]:
    """Every whole entry as ``(timestamp, absolute offset)``, zero tail included (Kafka's view)."""
    return time_index_entries(data, base_offset, stop_at_zero_tail=False)


def time_index_entries(data, base_offset: int, *, stop_at_zero_tail: bool = True) -> list[tuple[int, int]]:
    """``(timestamp, absolute offset)`` entries. With ``stop_at_zero_tail`` stop at the first entry
    after entry 0 with timestamp 0 and relative offset 0 (a zero-filled preallocated tail)."""
    mv = _view(data)
    n = len(mv) // TIME_ENTRY
    stop = _time_stop(mv) if stop_at_zero_tail else n
    return [(ts, base_offset + rel) for ts, rel in _TIME.iter_unpack(mv[: stop * TIME_ENTRY])]


def time_index_zero_tail(data) -> int:
    """How many whole entries ``time_index_entries`` drops as the zero tail."""
    mv = _view(data)
    return len(mv) // TIME_ENTRY - _time_stop(mv)


# ------------------------------------------------------------------------------------------------- txn index


class AbortedTxn(FrozenPlain):
    """One ``.txnindex`` entry. ``version`` is the first byte only, as ``AbortedTxn.version()`` reads it."""

    __slots__ = _fields = ("version", "producer_id", "first_offset", "last_offset", "last_stable_offset")

    def __init__(self, version: int, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int):
        self.version = version
        self.producer_id = producer_id
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.last_stable_offset = last_stable_offset

    def __str__(self) -> str:  # AbortedTxn.toString
        return (f"AbortedTxn(version={self.version}, producerId={self.producer_id}, "
                f"firstOffset={self.first_offset}, lastOffset={self.last_offset}, "
                f"lastStableOffset={self.last_stable_offset})")


def parse_txn_index(data) -> list[AbortedTxn]:
    """All whole 34-byte entries; a trailing partial entry is ignored (see ``trailing_bytes``)."""
    mv = _view(data)
    n = len(mv) // TXN_ENTRY
    out = []
    for i, (_v16, pid, first, last, lso) in enumerate(_TXN.iter_unpack(mv[: n * TXN_ENTRY])):
        b = mv[i * TXN_ENTRY]
        out.append(AbortedTxn(b - 256 if b > 127 else b, pid, first, last, lso))
    return out


# -------------------------------------------------------------------------------------------------- encoders


def _check(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} out of range [{lo}, {hi}]")


def encode_offset_entry(rel_offset: int, position: int) -> bytes:
    _check("relative offset", rel_offset, 0, INT32_MAX)
    _check("position", position, 0, INT32_MAX)
    return _OFFSET.pack(rel_offset, position)


def encode_time_entry(timestamp: int, rel_offset: int) -> bytes:
    _check("timestamp", timestamp, INT64_MIN, INT64_MAX)
    _check("relative offset", rel_offset, 0, INT32_MAX)
    return _TIME.pack(timestamp, rel_offset)


def encode_aborted_txn(producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int,
                       *, version: int = TXN_INDEX_VERSION) -> bytes:
    _check("version", version, -(2**15), 2**15 - 1)
    for name, v in (("producer id", producer_id), ("first offset", first_offset),
                    ("last offset", last_offset), ("last stable offset", last_stable_offset)):
        _check(name, v, INT64_MIN, INT64_MAX)
    return _TXN.pack(version, producer_id, first_offset, last_offset, last_stable_offset)


def encode_offset_index(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """Absolute ``(offset, position)`` entries → index bytes (no ordering checks: garbage in, garbage out)."""
    return b"".join(encode_offset_entry(off - base_offset, pos) for off, pos in entries)


def encode_time_index(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """``(timestamp, absolute offset)`` entries → time index bytes."""
    return b"".join(encode_time_entry(ts, off - base_offset) for ts, off in entries)


def encode_txn_index(txns: Iterable[AbortedTxn]) -> bytes:
    return b"".join(encode_aborted_txn(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset,
                                       version=t.version) for t in txns)


# --------------------------------------------------------------------------------------------------- lookups

_FIRST = itemgetter(0)


def entry_points_at_batch(head: bytes, entry_offset: int, base_offset: int) -> bool:
    """Can an offset-index entry (``entry_offset`` at some position) be trusted for seeking: do the bytes
    there (``head``: up to a v2 batch header's 61 bytes) start a batch whose last offset lies between the
    segment's base offset and the entry's offset? The one trust test for index seeks (Segment and the
    Spark source both use it)."""
    from ..errors import CorruptDataError
    from . import parse_header
    from .batch import V2_OVERHEAD
    from .legacy import RECORD_OVERHEAD
    from .records import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD

    if len(head) < LOG_OVERHEAD + RECORD_OVERHEAD[0] or head[HEADER_SIZE_UP_TO_MAGIC - 1] > 2:
        return False
    try:
        h = parse_header(bytes(head[:V2_OVERHEAD]) + bytes(max(0, V2_OVERHEAD - len(head))), 0, check_crc=False)
    except (CorruptDataError, ValueError, struct.error):
        return False
    return base_offset <= h.last_offset <= entry_offset


def lookup_offset(entries: Sequence[tuple[int, int]], target: int, base_offset: int) -> tuple[int, int]:
    """``OffsetIndex.lookup``: the largest entry with offset <= target, else ``(base_offset, 0)``."""
    i = bisect_right(entries, target, key=_FIRST) - 1
    return (base_offset, 0) if i < 0 else entries[i]


def lookup_time(entries: Sequence[tuple[int, int]], timestamp: int, base_offset: int) -> tuple[int, int]:
    """``TimeIndex.lookup``: the largest entry with timestamp <= ts, else ``(-1, base_offset)``."""
    i = bisect_right(entries, timestamp, key=_FIRST) - 1
    return (NO_TIMESTAMP, base_offset) if i < 0 else entries[i]


# -------------------------------------------------------------------------------------------- sanity checks


def check_offset_index(data, base_offset: int, *, path: str = "") -> list[str]:
    """``OffsetIndex.sanityCheck`` over all whole entries (zero tail included); messages as Kafka's."""
    mv = _view(data)
    problems = []
    n = len(mv) // OFFSET_ENTRY
    if n:
        last = base_offset + _OFFSET.unpack_from(mv, (n - 1) * OFFSET_ENTRY)[0]
        if last < base_offset:
            problems.append(f"Corrupt index found, index file {path} has non-zero size but the last offset "
                            f"is {last} which is less than the base offset {base_offset}")
    if len(mv) % OFFSET_ENTRY:
        problems.append(f"Index file {path} is corrupt, found {len(mv)} bytes which is neither positive "
                        f"nor a multiple of {OFFSET_ENTRY}")
    return problems


def check_time_index(data, base_offset: int, *, path: str = "") -> list[str]:
    """``TimeIndex.sanityCheck`` over all whole entries (an untrimmed zero tail fails the first check,
    as it does in Kafka); messages as Kafka's."""
    mv = _view(data)
    problems = []
    n = len(mv) // TIME_ENTRY
    if n:
        first_ts = _TIME.unpack_from(mv, 0)[0]
        last_ts, last_rel = _TIME.unpack_from(mv, (n - 1) * TIME_ENTRY)
        if last_ts < first_ts:
            problems.append(f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                            f"timestamp is {last_ts} which is less than the first timestamp {first_ts}")
        if base_offset + last_rel < base_offset:
            problems.append(f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                            f"offset is {base_offset + last_rel} which is less than the first offset {base_offset}")
    if len(mv) % TIME_ENTRY:
        problems.append(f"Time index file {path} is corrupt, found {len(mv)} bytes which is neither positive "
                        f"nor a multiple of {TIME_ENTRY}")
    return problems


def check_txn_index(data, base_offset: int, *, path: str = "") -> list[str]:
    """``TransactionIndex.sanityCheck`` (every lastOffset >= base offset) plus the version check the
    reader does while iterating; one message per bad entry."""
    problems = []
    for txn in parse_txn_index(data):
        if txn.version > TXN_INDEX_VERSION:
            problems.append(f"Unexpected aborted transaction version {txn.version} in transaction index {path}, "
                            f"current version is {TXN_INDEX_VERSION}")
        elif txn.last_offset < base_offset:
            problems.append(f"Last offset of aborted transaction {txn} in index {path} is less than start "
                            f"offset {base_offset}")
    return problems
