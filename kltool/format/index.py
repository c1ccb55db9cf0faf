"""Codecs for ``N.index``, ``N.timeindex`` and ``N.txnindex`` (Kafka's ``OffsetIndex``, ``TimeIndex``, ``TransactionIndex``).

Pure functions over bytes-like objects. Offsets handed in and out are absolute
(``base_offset + relative``), like Kafka's ``OffsetIndex``/``TimeIndex`` APIs.

* Offset index entry (8 bytes):  relativeOffset int32, position int32.
* Time index entry (12 bytes):   timestamp int64, relativeOffset int32.
* Txn index entry (34 bytes):    version int16, producerId, firstOffset, lastOffset, lastStableOffset (int64).

Kafka treats every whole entry of an existing index file as valid (``entries = length // entrySize``),
so an untrimmed (preallocated, zero-filled) file has a tail of ``(base_offset, 0)`` / ``(0, base_offset)``
entries. ``*_entries(..., stop_at_zero_tail=True)`` drop that tail the way ``DumpLogSegments`` does.

Every function here takes the bytes of a file, or a :class:`ZeroPadded` (what
:func:`kltool.storage.fs.read_index_file` returns for a file that ends in zeros: its bytes before the
zeros, and how many zeros follow): the answers are the same, and a preallocated 1 GiB file costs no more
memory than its entries. A :class:`ByteSource` (storage's view of a file too big to hold, whose bytes are
read when sliced), alone or as a ZeroPadded's head, is read a chunk at a time: the entry functions then
return :class:`IndexEntries`, a sequence that decodes its entries on demand, so whatever the file holds
(1 GiB of garbage included) memory stays bounded.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import repeat
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

# Entries of one index listed as bad at most: past that the index is garbage (it is rebuilt whole either way),
# the rest of its entries are not checked, and a note says how many were not (:func:`unchecked_note`). A huge
# file of garbage then costs a bounded time and output, not a finding per entry. (The one home of the rule:
# the index checks of storage and ``dump`` use it.)
MAX_LISTED = 1000

_OFFSET = struct.Struct(">ii")
_TIME = struct.Struct(">qi")
_TXN = struct.Struct(">hqqqq")
_ZERO_TIME_ENTRY = bytes(TIME_ENTRY)
_ZERO_REL = bytes(4)
_LITTLE = sys.byteorder == "little"

__all__ = [
    "OFFSET_ENTRY", "TIME_ENTRY", "TXN_ENTRY", "TXN_INDEX_VERSION", "NO_TIMESTAMP", "AbortedTxn", "ZeroPadded",
    "ByteSource", "IndexEntries", "prefix", "trailing_bytes", "entry_count",
    "parse_offset_index", "offset_index_entries", "offset_index_zero_tail",
    "parse_time_index", "time_index_entries", "time_index_zero_tail",
    "parse_txn_index", "iter_txn_index", "txn_index_chunks", "ZERO_TXN", "MAX_LISTED", "unchecked_note",
    "encode_offset_entry", "encode_time_entry", "encode_aborted_txn",
    "encode_offset_index", "encode_time_index", "encode_txn_index",
    "lookup_offset", "lookup_time",
    "check_offset_index", "check_time_index", "check_txn_index", "txn_index_check",
]


class ByteSource:
    """Bytes read on demand (storage's view of a file too big to hold): ``len()``, slices ``[a:b]`` (step 1)
    as bytes, and :meth:`prefix`. Never read whole here: the functions of this module take it a chunk at a
    time."""

    __slots__ = ("size",)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key) -> bytes:
        if not isinstance(key, slice):
            raise TypeError(f"{type(self).__name__} takes slices only")
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise ValueError(f"{type(self).__name__} slices take no step")
        return self._read(start, stop) if stop > start else b""

    def _read(self, start: int, stop: int) -> bytes:
        """Bytes [start, stop) (0 <= start < stop <= size), all of them."""
        raise NotImplementedError

    def prefix(self, n: int) -> ByteSource:
        """The first ``n`` bytes, still read on demand."""
        raise NotImplementedError

    def hole_end(self, pos: int) -> int:
        """Where the run of zeros known to start at ``pos`` ends (a sparse file's hole: known without reading
        it); ``pos`` when none is known there."""
        return pos

    def __eq__(self, other) -> bool:
        """Compared by content, as bytes are (lengths first, then a chunk at a time: never read whole)."""
        if self is other:
            return True
        try:
            n = len(other)
        except TypeError:
            return NotImplemented
        if n != self.size:
            return False
        step = 1 << 20
        return all(self[i: i + step] == other[i: i + step] for i in range(0, n, step))

    __hash__ = None  # (compared by content)


class ZeroPadded:
    """Bytes that end in zeros, without holding the zeros: ``head`` followed by ``zeros`` zero bytes. Its
    length, slices (as bytes), indexing and comparison with bytes are those of the whole content. The head
    is bytes, or a :class:`ByteSource` (kept as it is: read when sliced)."""

    __slots__ = ("head", "zeros")

    def __init__(self, head, zeros: int):
        if zeros < 0:
            raise ValueError(f"negative zero count {zeros}")
        self.head = head if isinstance(head, ByteSource) else bytes(head)
        self.zeros = zeros

    def __len__(self) -> int:
        return len(self.head) + self.zeros

    def __getitem__(self, key):
        n = len(self)
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                raise ValueError("ZeroPadded slices take no step")
            stop = max(start, stop)
            part = self.head[start:stop]
            return part + bytes(stop - start - len(part))
        i = key + n if key < 0 else key
        if not 0 <= i < n:
            raise IndexError("index out of range")
        return self.head[i] if i < len(self.head) else 0

    def __eq__(self, other) -> bool:
        try:
            if len(other) != len(self):  # (a file of any size against a small rebuilt one: not read)
                return False
        except TypeError:
            return NotImplemented
        if isinstance(self.head, ByteSource):  # (compared as the bytes it holds)
            return ZeroPadded(self.head[:], self.zeros) == other
        if isinstance(other, ZeroPadded):
            a, b = (self, other) if len(self.head) >= len(other.head) else (other, self)
            return len(a) == len(b) and a.head == b[: len(a.head)]
        try:
            mv = _view(other)
        except TypeError:
            return NotImplemented
        h = len(self.head)
        return len(mv) == len(self) and mv[:h] == self.head and not mv[h:].tobytes().strip(b"\0")

    __hash__ = None  # (like bytearray: compared by content)

    def __repr__(self) -> str:
        return f"ZeroPadded({len(self.head)} bytes + {self.zeros} zeros)"


def _view(data) -> memoryview:
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _bytes(data):
    """``data`` as something ``len``, slices and ``struct.unpack`` take: a ZeroPadded or ByteSource as it is."""
    return data if isinstance(data, (ZeroPadded, ByteSource)) else _view(data)


def _lazy(data) -> bool:
    """Whether ``data`` is (or has as head) a ByteSource: read a chunk at a time, never whole."""
    return isinstance(data, ByteSource) or (isinstance(data, ZeroPadded) and isinstance(data.head, ByteSource))


def prefix(data, n: int):
    """The first ``n`` bytes of ``data`` (``n`` <= its length), a ByteSource or ZeroPadded kept as one (not
    read)."""
    if isinstance(data, ZeroPadded) and isinstance(data.head, ByteSource):
        h = len(data.head)
        return data.head.prefix(n) if n <= h else ZeroPadded(data.head, n - h)
    if isinstance(data, ByteSource):
        return data.prefix(n)
    return data[:n]


# entries decoded at a time from a ByteSource (a multiple of 8 and 12: chunks of both kinds are 384 KiB or less)
CHUNK_ENTRIES = 1 << 15


def _chunks(data, entry_size: int, start: int, stop: int, chunk: int = CHUNK_ENTRIES):
    """``(first entry, bytes)`` of the whole entries ``[start, stop)`` of ``data``, ``chunk`` entries at a
    time."""
    i = start
    while i < stop:
        j = min(stop, i + chunk)
        yield i, data[i * entry_size: j * entry_size]
        i = j


def _stop_limit(data, entry_size: int) -> int:
    """Entries to look at for the start of the zero tail: all whole entries, or of a ZeroPadded its head's and
    two of its zeros (see :func:`_head`)."""
    n = len(data) // entry_size
    if isinstance(data, ZeroPadded):
        return min(n, -(-len(data.head) // entry_size) + 2)
    return n


def _offset_stop_lazy(data) -> int:
    """:func:`_offset_stop` of a ByteSource's entries, a chunk at a time (a relative offset of 0 is four zero
    bytes in either byte order: found with ``bytes.find``, keeping the hits on an entry boundary)."""
    limit = _stop_limit(data, OFFSET_ENTRY)
    for i, raw in _chunks(data, OFFSET_ENTRY, 0, limit):
        arr = array("i")
        arr.frombytes(raw)
        rels = arr[0::2].tobytes()
        pos = rels.find(_ZERO_REL, 4 if i == 0 else 0)
        while pos != -1:
            if pos % 4 == 0:
                return i + pos // 4
            pos = rels.find(_ZERO_REL, pos + 4 - pos % 4)
    return limit


def _time_stop_lazy(data) -> int:
    """:func:`_time_stop` of a ByteSource's entries, a chunk at a time (chunks start on entry boundaries)."""
    limit = _stop_limit(data, TIME_ENTRY)
    if limit <= 1:
        return limit
    for i, raw in _chunks(data, TIME_ENTRY, 0, limit):
        pos = raw.find(_ZERO_TIME_ENTRY, TIME_ENTRY if i == 0 else 0)
        while pos != -1:
            if pos % TIME_ENTRY == 0:
                return i + pos // TIME_ENTRY
            pos = raw.find(_ZERO_TIME_ENTRY, pos + TIME_ENTRY - pos % TIME_ENTRY)
    return limit


def _decode_offsets(raw: bytes, base: int) -> list[tuple[int, int]]:
    arr = array("i")
    arr.frombytes(raw)
    if _LITTLE:
        arr.byteswap()
    return list(zip((base + r for r in arr[0::2]), arr[1::2], strict=True))


def _decode_times(raw: bytes, base: int) -> list[tuple[int, int]]:
    return [(ts, base + rel) for ts, rel in _TIME.iter_unpack(raw)]


class IndexEntries(Sequence):
    """The first ``count`` entries of an index held as a ByteSource (or a ZeroPadded of one), decoded on
    demand: a read-only sequence of the tuples the list would hold. Iteration and walking forward by index
    decode :data:`CHUNK_ENTRIES` at a time (one chunk kept); any other single entry is read alone, so a binary
    search reads a few entries. Slices are views. Memory stays a chunk whatever the file's size."""

    __slots__ = ("_src", "_base", "_size", "_start", "_count", "_decode", "_at", "_cache")

    def __init__(self, src, base: int, entry_size: int, count: int, start: int = 0):
        self._src, self._base, self._size = src, base, entry_size
        self._start, self._count = start, max(0, count)
        self._decode = _decode_offsets if entry_size == OFFSET_ENTRY else _decode_times
        self._at = start  # the first entry (of the source) that _cache holds: reading entry 0 decodes a chunk
        self._cache: list = []

    def __len__(self) -> int:
        return self._count

    def _read(self, a: int, b: int) -> list:
        """Entries ``[a, b)`` of the source, decoded."""
        return self._decode(self._src[a * self._size: b * self._size], self._base)

    def __getitem__(self, key):
        n = self._count
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                raise ValueError("IndexEntries slices take no step")
            return IndexEntries(self._src, self._base, self._size, max(0, stop - start), self._start + start)
        i = key + n if key < 0 else key
        if not 0 <= i < n:
            raise IndexError("index out of range")
        i += self._start
        c = i - self._at
        if 0 <= c < len(self._cache):
            return self._cache[c]
        if c == len(self._cache):  # walking forward: the next chunk
            self._at = i
            self._cache = self._read(i, min(self._start + n, i + CHUNK_ENTRIES))
            return self._cache[0]
        return self._read(i, i + 1)[0]

    def __iter__(self):
        for _i, raw in _chunks(self._src, self._size, self._start, self._start + self._count):
            yield from self._decode(raw, self._base)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None

    def __repr__(self) -> str:
        return f"IndexEntries({self._count} entries of {self._size} bytes)"


def _head(data, entry_size: int) -> tuple[memoryview, int]:
    """(the whole entries that decide where the zero tail starts, the number of whole entries). Of a
    ZeroPadded that is its head and two entries of its zeros (one whole zero entry after entry 0 at least,
    where the file is that long): the zero tail starts there or before."""
    if isinstance(data, ZeroPadded):
        n = len(data) // entry_size
        k = min(n, -(-len(data.head) // entry_size) + 2)
        return memoryview(data[: k * entry_size]), n
    mv = _view(data)
    return mv, len(mv) // entry_size


def _whole(data):
    """All of ``data`` as a memoryview (a ZeroPadded's zeros made: only for the callers who ask for every
    entry, zero tail included)."""
    return memoryview(data[:]) if isinstance(data, ZeroPadded) else _view(data)


def trailing_bytes(data, entry_size: int) -> int:
    """Bytes after the last whole entry (Kafka ignores them when reading)."""
    return len(_bytes(data)) % entry_size


def entry_count(data, entry_size: int) -> int:
    """Number of whole entries, as Kafka counts them (``length // entrySize``)."""
    return len(_bytes(data)) // entry_size


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
    after entry 0 whose relative offset is 0 (a zero-filled preallocated tail), like DumpLogSegments. Of a
    ByteSource: an :class:`IndexEntries` (the same entries, read on demand)."""
    if _lazy(data):
        n = _offset_stop_lazy(data) if stop_at_zero_tail else len(data) // OFFSET_ENTRY
        return IndexEntries(data, base_offset, OFFSET_ENTRY, n)
    arr = _offset_ints(_head(data, OFFSET_ENTRY)[0] if stop_at_zero_tail else _whole(data))
    rels = arr[0::2]
    stop = _offset_stop(rels) if stop_at_zero_tail else len(rels)
    return list(zip((base_offset + r for r in rels[:stop]), arr[1 : 2 * stop : 2], strict=True))


def offset_index_zero_tail(data) -> int:
    """How many whole entries ``offset_index_entries`` drops as the zero tail."""
    if _lazy(data):
        return len(data) // OFFSET_ENTRY - _offset_stop_lazy(data)
    mv, n = _head(data, OFFSET_ENTRY)
    return n - _offset_stop(_offset_ints(mv)[0::2])


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
    after entry 0 with timestamp 0 and relative offset 0 (a zero-filled preallocated tail). Of a ByteSource:
    an :class:`IndexEntries`."""
    if _lazy(data):
        n = _time_stop_lazy(data) if stop_at_zero_tail else len(data) // TIME_ENTRY
        return IndexEntries(data, base_offset, TIME_ENTRY, n)
    mv = _head(data, TIME_ENTRY)[0] if stop_at_zero_tail else _whole(data)
    stop = _time_stop(mv) if stop_at_zero_tail else len(mv) // TIME_ENTRY
    return [(ts, base_offset + rel) for ts, rel in _TIME.iter_unpack(mv[: stop * TIME_ENTRY])]


def time_index_zero_tail(data) -> int:
    """How many whole entries ``time_index_entries`` drops as the zero tail."""
    if _lazy(data):
        return len(data) // TIME_ENTRY - _time_stop_lazy(data)
    mv, n = _head(data, TIME_ENTRY)
    return n - _time_stop(mv)


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


def _decode_txns(raw) -> list[AbortedTxn]:
    out = []
    for i, (_v16, pid, first, last, lso) in enumerate(_TXN.iter_unpack(raw)):
        b = raw[i * TXN_ENTRY]
        out.append(AbortedTxn(b - 256 if b > 127 else b, pid, first, last, lso))
    return out


# txn entries decoded at a time from a ByteSource (a chunk of 1.1 MiB)
TXN_CHUNK_ENTRIES = 1 << 15


ZERO_TXN = AbortedTxn(0, 0, 0, 0, 0)  # the entry of a run of zero bytes (a hole)


def txn_index_chunks(data):
    """``(first entry, count, entries)`` of the whole 34-byte entries of ``data`` (bytes, a ZeroPadded or a
    ByteSource), :data:`TXN_CHUNK_ENTRIES` at a time, ``entries`` None when they are all zero (a hole of a
    sparse file: the callers judge such a run at once, not entry by entry). Memory stays a chunk whatever the
    file's size."""
    n = len(data) // TXN_ENTRY
    if not isinstance(data, (ZeroPadded, ByteSource)):
        mv = _view(data)
        if n:
            yield 0, n, _decode_txns(mv[: n * TXN_ENTRY])
        return
    src = data.head if isinstance(data, ZeroPadded) else data
    h = len(src)
    i = 0
    while i < n:
        pos = i * TXN_ENTRY
        end = len(data) if pos >= h else src.hole_end(pos) if isinstance(src, ByteSource) else pos
        m = min(n - i, (end - pos) // TXN_ENTRY)  # whole entries in a hole (or in a ZeroPadded's zeros): not read
        if m:
            yield i, m, None
            i += m
            continue
        j = min(n, i + TXN_CHUNK_ENTRIES)
        raw = data[pos: j * TXN_ENTRY]
        yield i, j - i, None if not raw.rstrip(b"\0") else _decode_txns(memoryview(raw))
        i = j


def iter_txn_index(data):
    """The whole 34-byte entries of ``data`` (bytes, a ZeroPadded or a ByteSource), one at a time, decoded a
    chunk at a time (:func:`txn_index_chunks`). A trailing partial entry is ignored (see ``trailing_bytes``)."""
    for _i, m, entries in txn_index_chunks(data):
        yield from repeat(ZERO_TXN, m) if entries is None else entries


def parse_txn_index(data) -> list[AbortedTxn]:
    """All whole 34-byte entries; a trailing partial entry is ignored (see ``trailing_bytes``). A list of
    them all: of a file that may be garbage of any size, :func:`iter_txn_index` takes one at a time."""
    return list(iter_txn_index(data))


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


def _size_problem(what: str, path: str, size: int, entry: int) -> list[str]:
    """The sanityCheck both index kinds share: a size that is not a whole number of entries."""
    if size % entry:
        return [f"{what} {path} is corrupt, found {size} bytes which is neither positive nor a multiple of {entry}"]
    return []


def check_offset_index(data, base_offset: int, *, path: str = "") -> list[str]:
    """``OffsetIndex.sanityCheck`` over all whole entries (zero tail included); messages as Kafka's."""
    mv = _bytes(data)
    problems = []
    n = len(mv) // OFFSET_ENTRY
    if n:
        last = base_offset + _OFFSET.unpack(mv[(n - 1) * OFFSET_ENTRY: n * OFFSET_ENTRY])[0]
        if last < base_offset:
            problems.append(f"Corrupt index found, index file {path} has non-zero size but the last offset "
                            f"is {last} which is less than the base offset {base_offset}")
    problems += _size_problem("Index file", path, len(mv), OFFSET_ENTRY)
    return problems


def check_time_index(data, base_offset: int, *, path: str = "") -> list[str]:
    """``TimeIndex.sanityCheck`` over all whole entries (an untrimmed zero tail fails the first check,
    as it does in Kafka); messages as Kafka's."""
    mv = _bytes(data)
    problems = []
    n = len(mv) // TIME_ENTRY
    if n:
        first_ts = _TIME.unpack(mv[:TIME_ENTRY])[0]
        last_ts, last_rel = _TIME.unpack(mv[(n - 1) * TIME_ENTRY: n * TIME_ENTRY])
        if last_ts < first_ts:
            problems.append(f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                            f"timestamp is {last_ts} which is less than the first timestamp {first_ts}")
        if base_offset + last_rel < base_offset:
            problems.append(f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                            f"offset is {base_offset + last_rel} which is less than the first offset {base_offset}")
    problems += _size_problem("Time index file", path, len(mv), TIME_ENTRY)
    return problems


def txn_index_check(data, base_offset: int, *, path: str = "", limit: int | None = MAX_LISTED
                    ) -> tuple[list[str], tuple[int, int] | None]:
    """``TransactionIndex.sanityCheck`` (every lastOffset >= base offset) plus the version check the
    reader does while iterating, one message per bad entry, the entries read a chunk at a time: (the
    messages, None), or, once ``limit`` bad entries are listed (garbage: a bounded time and output whatever
    the file's size), (those messages, (entries checked, entries)): the rest is not checked."""
    problems: list[str] = []
    n = len(data) // TXN_ENTRY
    for i, m, entries in txn_index_chunks(data):
        if entries is None:  # all zero entries: version 0, last offset 0
            if base_offset <= 0:
                continue
            entries = repeat(ZERO_TXN, m)
        for k, txn in enumerate(entries, i):
            if txn.version > TXN_INDEX_VERSION:
                problems.append(f"Unexpected aborted transaction version {txn.version} in transaction index "
                                f"{path}, current version is {TXN_INDEX_VERSION}")
            elif txn.last_offset < base_offset:
                problems.append(f"Last offset of aborted transaction {txn} in index {path} is less than start "
                                f"offset {base_offset}")
            else:
                continue
            if limit is not None and len(problems) >= limit and k + 1 < n:
                return problems, (k + 1, n)
    return problems, None


def check_txn_index(data, base_offset: int, *, path: str = "", limit: int | None = MAX_LISTED) -> list[str]:
    """The messages of :func:`txn_index_check` (at most ``limit`` of them)."""
    return txn_index_check(data, base_offset, path=path, limit=limit)[0]


def unchecked_note(listed: int, done: int, n: int, what: str = "do not match the log", not_done: str = "checked"
                   ) -> str:
    """The one text of the note that the rest of an index of garbage is not checked (``listed`` entries
    ``what``, ``done`` of ``n`` entries looked at)."""
    return f"{listed} entries {what}: the other {n - done} entries, from entry {done} of {n}, are not {not_done}"
