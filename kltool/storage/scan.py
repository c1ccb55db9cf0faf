"""THE batch walker. Every command that reads a ``.log`` goes through :func:`walk`.

It reads the file in chunks into one reused buffer, checks each batch's length, magic and CRC,
and keeps going after damage: a damaged region is reported as a :class:`Damage` item and the walk
resynchronises on the next position where a whole, CRC-valid batch starts, so valid data after
a hole is never lost.

Kafka's own reader (FileLogInputStream + LogSegment.recover) stops at the first problem; the
first Damage (or CRC-invalid batch) the walker reports is where Kafka would truncate.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from _thread import allocate_lock
from collections.abc import Callable, Iterator

from ..errors import KltoolError
from ..format import parse_header, speedups
from ..format.batch import V2_OVERHEAD
from ..format.legacy import RECORD_OVERHEAD
from ..format.records import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MIN_BATCH_SIZE_FIELD, BatchHeader
from ..format.speedups import crc32c
from ..plain import Plain

CHUNK = 4 << 20
_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
HOLD = 32 << 20  # walk(hold_limit=HOLD): a larger batch is not held (header.source; records_of reads it)
_OFFSET_SIZE = struct.Struct(">qi")
_I = struct.Struct(">i")
_FIRST = struct.Struct(">q4xi7xi")  # v2: baseOffset, partitionLeaderEpoch (12), lastOffsetDelta (23)
_U = struct.Struct(">I")
_NONZERO = re.compile(rb"[^\x00]")
_LONG_MAX = (1 << 63) - 1
V2_MIN_SIZE_FIELD = V2_OVERHEAD - LOG_OVERHEAD  # 49
LEGACY_MIN_SIZE_FIELD = RECORD_OVERHEAD  # {0: 14, 1: 22}


class Damage(Plain):
    """Bytes [position, position+length) that are not readable as batches. ``kind``: torn_tail, zero_run,
    invalid_size, bad_magic or garbage; ``resumed_at``: where the next valid batch starts (None: the end
    of the file)."""

    __slots__ = _fields = ("kind", "position", "length", "message", "resumed_at")

    def __init__(self, kind: str, position: int, length: int, message: str, resumed_at: int | None = None):
        self.kind = kind
        self.position = position
        self.length = length
        self.message = message
        self.resumed_at = resumed_at

    @property
    def end(self) -> int:
        return self.position + self.length


class BatchRun:
    """Consecutive v2 batches that the C walker checked in one call (``walk(runs=True)``): each is
    whole, CRC-valid, has offsets above the previous batch's (``prev_last``) and within the segment
    (``base_offset``), a last offset delta and record count >= 0, the partitionLeaderEpoch of the run's
    first batch (:meth:`first`), is not a transactional control batch, and (``deep``) is uncompressed
    with records that :func:`decode_records` accepts. Nothing in a run needs a finding of its own, so
    callers only count it.

    ``tail`` is the run's last batch as (position, base offset, the last offset before it: None when none),
    for a caller that judges that batch against the item after the run (verify's odd one out).

    ``cols`` (with ``want_cols``) holds per batch ``(position, base_offset, last_offset,
    max_timestamp)`` as native int64 (``columns()``). :meth:`headers` re-parses the batches from the
    walker's buffer: only valid until the walk resumes.
    """

    __slots__ = ("position", "end", "batches", "records", "last_offset", "cols", "_buf", "_i", "_with_data", "_first",
                 "tail")

    def __init__(self, position, end, batches, records, last_offset, cols, buf, i, with_data, tail=None):
        self.tail = tail  # the run's last batch: (position, base offset, the last offset before it)
        self.position = position
        self.end = end
        self.batches = batches
        self.records = records
        self.last_offset = last_offset
        self.cols = cols
        self._buf = buf
        self._i = i
        self._with_data = with_data
        self._first = None

    @property
    def size(self) -> int:
        return self.end - self.position

    def first(self) -> tuple[int, int, int]:
        """(base offset, last offset, partitionLeaderEpoch) of the run's first batch; every batch of a run
        has that epoch. Only valid until the walk resumes (or after :meth:`detach`)."""
        if self._first is not None:
            return self._first
        base, epoch, lod = _FIRST.unpack_from(self._buf, self._i)
        return base, base + lod, epoch

    def detach(self) -> None:
        """Keep what outlives the walker's buffer (counts, :meth:`first`, :meth:`columns`) and let the
        buffer go: :meth:`window` and :meth:`headers` are no longer available."""
        self._first = self.first()
        self._buf = None

    def columns(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """(positions, base offsets, last offsets, max timestamps), one entry per batch."""
        if self.cols is None:
            return [], [], [], []
        q = memoryview(self.cols).cast("q")
        shift = self.position - self._i  # the C walker gives indexes into its buffer
        return [p + shift for p in q[0::4]], list(q[1::4]), list(q[2::4]), list(q[3::4])

    def window(self) -> tuple[bytearray, int]:
        """The walker's buffer and the index of the run's first batch in it (the run is
        ``buf[i:i + size]``): only valid until the walk resumes."""
        return self._buf, self._i

    def headers(self) -> list[BatchHeader]:
        out = []
        i = self._i
        buf = self._buf
        pos = self.position
        for _ in range(self.batches):
            h = parse_header(buf, i)
            h.position = pos
            if self._with_data:
                h.data = bytes(buf[i:i + h.size])
            out.append(h)
            i += h.size
            pos += h.size
        return out


_POOL: list = []  # reused read buffers (bytearray or mmap, see _take_buffer): allocating (and faulting in) 4 MiB per file is costly


_HUGE = 2 << 20
_POOL_LOCK = allocate_lock()  # walks of the parts of one file run in threads (_split_walk)


def _take_buffer(size: int):
    with _POOL_LOCK:
        for i, b in enumerate(_POOL):
            if len(b) >= size:
                return _POOL.pop(i)
    if size >= _HUGE:
        # Anonymous memory in 2 MiB pages where the kernel allows it (MADV_HUGEPAGE): a fresh 4 MiB
        # bytearray is zeroed and faulted in page by page (~2 ms, as much as reading 8 MiB), this is two
        # faults; and copies into it miss the TLB less. (Any buffer object does: walkers index, slice,
        # search and unpack it; the C walker takes it as a buffer.)
        try:
            import mmap

            m = mmap.mmap(-1, -(-size // _HUGE) * _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            m.madvise(mmap.MADV_HUGEPAGE)
            return m
        except (ImportError, AttributeError, OSError, ValueError):
            pass
    return bytearray(size)


def _give_buffer(b) -> None:
    with _POOL_LOCK:
        if len(_POOL) < 4 and len(b) <= (64 << 20):
            _POOL.append(b)


_SEEK_DATA = getattr(os, "SEEK_DATA", None)
_SEEK_HOLE = getattr(os, "SEEK_HOLE", None)
_ZEROS = memoryview(bytes(1 << 20))


class _Reader:
    """Positioned reads into one reused buffer.

    A sparse file's holes (``log.preallocate``, or a crash that leaves a file extended but not written)
    are never read: ``SEEK_DATA``/``SEEK_HOLE`` tell where they are, their bytes are zeros in the buffer
    (what a read would give), and :meth:`extent` lets a scan jump over them (:func:`find_next_batch`,
    :func:`_region_kind`): the cost of a walk follows the data a file holds, not the size it claims. Where
    the system cannot tell (no ``SEEK_DATA``, or a file system that does not support it), all is data."""

    def __init__(self, fd: int, size: int, chunk: int):
        self.fd = fd
        self.size = size
        self.chunk = chunk
        self.buf = _take_buffer(max(4096, min(chunk, size)))
        self.view = memoryview(self.buf)
        self.start = 0  # file position of buf[0]
        self.stop = 0  # file position just past the valid bytes
        self.bytes_read = 0
        # The extent last asked about: [lo, hi) is a hole (ext_hole) or data. Unknown at first; a file with
        # as many blocks as bytes (the usual case) has no holes and is never asked about.
        self.ext_lo = self.ext_hi = 0
        self.ext_hole = False
        self.sparse = _SEEK_DATA is not None and _may_have_holes(fd, size)

    def close(self) -> None:
        self.view.release()
        _give_buffer(self.buf)
        self.buf = None

    def extent(self, pos: int) -> tuple[bool, int]:
        """(is a hole, where it ends): the hole or the data that ``pos`` lies in, up to where it ends (at most
        the end of the walk)."""
        if not self.sparse or pos >= self.size:
            return False, self.size
        if self.ext_lo <= pos < self.ext_hi:
            return self.ext_hole, self.ext_hi
        import errno

        try:
            data = os.lseek(self.fd, pos, _SEEK_DATA)
            hole = data > pos
            stop = data if hole else os.lseek(self.fd, pos, _SEEK_HOLE)
        except OSError as e:
            if e.errno != errno.ENXIO:  # (EINVAL: the file system cannot tell; all is data)
                self.sparse = False
                return False, self.size
            hole, stop = True, self.size  # no data after pos: the rest is a hole
        stop = min(max(stop, pos + 1), self.size)
        self.ext_lo, self.ext_hi, self.ext_hole = pos, stop, hole
        return hole, stop

    def ensure(self, pos: int, need: int) -> int:
        """Make [pos, pos+need) (clipped to the file) available; return its index in buf."""
        if pos >= self.start and pos + need <= self.stop:
            return pos - self.start
        if need > len(self.buf):
            self.view.release()
            self.buf = bytearray(need)
            self.view = memoryview(self.buf)
        # Read one chunk (or what is asked, when more): a buffer grown for one big batch does not
        # make every later refill big.
        want = min(max(need, self.chunk), len(self.buf), self.size - pos)
        got = 0
        while got < want:
            hole, stop = self.extent(pos + got)
            lim = min(want, stop - pos)
            if hole:
                if got >= need:
                    break  # no read-ahead into a hole: a scan jumps over it (extent)
                lim = min(lim, need)
                while got < lim:  # a hole reads as zeros
                    n = min(lim - got, len(_ZEROS))
                    self.view[got:got + n] = _ZEROS[:n]
                    got += n
                continue
            n = os.preadv(self.fd, [self.view[got:lim]], pos + got)
            if n <= 0:
                break
            got += n
            self.bytes_read += n
        self.start = pos
        self.stop = pos + got
        return 0


def _may_have_holes(fd: int, size: int) -> bool:
    """Fewer blocks than bytes (a sparse file, or a compressing file system): worth asking where data is."""
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    blocks = getattr(st, "st_blocks", None)
    return blocks is not None and blocks * 512 < min(size, st.st_size)


def data_ranges(fd: int, start: int, stop: int) -> list[tuple[int, int]]:
    """The stretches of file bytes [start, stop) that are data, in order: what is between them is a sparse
    file's holes (zeros, not worth reading). [(start, stop)] where the file has no holes or the system cannot
    tell."""
    if start >= stop:
        return []
    r = _Reader.__new__(_Reader)  # (only its extent map: no buffer)
    r.fd, r.size, r.ext_lo, r.ext_hi, r.ext_hole = fd, stop, 0, 0, False
    r.sparse = _SEEK_DATA is not None and _may_have_holes(fd, stop)
    out: list[tuple[int, int]] = []
    p = start
    while p < stop:
        hole, end = r.extent(p)
        if not hole:
            out.append((p, end))
        p = end
    return out


def _plausible(r: _Reader, pos: int, end: int) -> bool:
    """Is there something at ``pos`` that looks like a batch start (or the end of the file)?"""
    if pos >= end:
        return pos == end
    rem = end - pos
    if rem <= HEADER_SIZE_UP_TO_MAGIC:
        return True  # a short tail; reported on its own
    i = r.ensure(pos, HEADER_SIZE_UP_TO_MAGIC)
    _off, size = _OFFSET_SIZE.unpack_from(r.buf, i)
    magic = r.buf[i + 16]
    return size >= MIN_BATCH_SIZE_FIELD and magic <= 2


def _crc_of(r: _Reader, start: int, stop: int, func) -> int:
    """CRC of file bytes [start, stop), chunk by chunk (no buffer larger than one chunk)."""
    value = 0
    p = start
    while p < stop:
        n = min(r.chunk, stop - p)
        i = r.ensure(p, n)
        value = func(r.view[i:i + n], value)
        p += n
    return value


_V2_CHEAP = struct.Struct(">hiqqqhii")  # attributes .. records count (bytes 21..61)


def _valid_at(r: _Reader, pos: int, end: int) -> bool:
    """A whole batch with a plausible header and a correct CRC starts at ``pos``. Cheap header
    checks come first, so that resynchronising through garbage rarely computes a CRC."""
    if end - pos <= HEADER_SIZE_UP_TO_MAGIC:
        return False
    i = r.ensure(pos, 61)
    buf = r.buf
    off, size = _OFFSET_SIZE.unpack_from(buf, i)
    magic = buf[i + 16]
    if off < 0 or magic > 2:
        return False
    total = size + LOG_OVERHEAD
    if total > end - pos:
        return False
    if magic == 2:
        if size < V2_MIN_SIZE_FIELD or r.stop - r.start - i < 61:
            return False
        attrs, lod, _bts, _mts, _pid, _ep, _seq, count = _V2_CHEAP.unpack_from(buf, i + 21)
        if attrs & 0x07 > 4 or attrs & ~0x7F or lod < 0 or count < 0 or count > lod + 1:
            return False
        if attrs & 0x07 == 0 and size - 49 < 7 * count:  # an uncompressed record takes >= 7 bytes
            return False
        (crc,) = _U.unpack_from(buf, i + 17)
        return _crc_of(r, pos + 21, pos + total, crc32c) == crc
    if size < LEGACY_MIN_SIZE_FIELD[magic]:
        return False
    attrs = buf[i + 17]
    if attrs & 0x07 > 3 or attrs & (0xF0 if magic == 1 else 0xF8):
        return False
    (crc,) = _U.unpack_from(buf, i + 12)
    return _crc_of(r, pos + 16, pos + total, zlib.crc32) == crc


_MAGIC_AT_16 = re.compile(rb"(?=.{16}[\x00-\x02])", re.S)


def find_next_batch(r: _Reader, pos: int, end: int) -> int | None:
    """Scan from ``pos`` for the next position where a valid batch starts.

    Candidates are positions whose byte 16 (the magic) is 0, 1 or 2 (found by a regex, in C), whose
    size field is non-zero (zero runs are jumped over) and fits the file; each is checked by
    :func:`_valid_at` (header sanity, then the CRC)."""
    p = pos
    while p < end - HEADER_SIZE_UP_TO_MAGIC:
        n = min(r.chunk, end - p)
        hole, stop = r.extent(p)
        if hole:
            # In a hole, a size field (bytes 8..11) that lies wholly in it is 0: the first candidate is the
            # position whose size field takes the hole's last byte and the data's first (the regex path
            # below jumps zero runs the same way), so the hole's bytes are never looked at.
            if stop - 11 > p:
                p = stop - 11
                continue
        elif stop - p < n:
            n = min(n, max(stop - p + 64, HEADER_SIZE_UP_TO_MAGIC + 1))  # up to the hole (and a little of it)
        i = r.ensure(p, n)
        base = r.start
        buf = r.buf
        wend = i + n
        nxt = None
        while True:
            m = _MAGIC_AT_16.search(buf, i, wend)
            if m is None:
                break
            i = m.start()
            (size,) = _I.unpack_from(buf, i + 8)
            if size == 0:
                z = _NONZERO.search(buf, i + 8, wend)
                if z is None:
                    nxt = max(i + 1, wend - 11)
                    break
                i = max(i + 1, z.start() - 11)
                continue
            if size >= MIN_BATCH_SIZE_FIELD and size + LOG_OVERHEAD <= end - (base + i):
                cand = base + i
                if _valid_at(r, cand, end):
                    return cand
                if r.start != base:  # _valid_at moved the window: go on from the next position
                    nxt = i + 1
                    break
                buf = r.buf
            i += 1
        if nxt is None:
            nxt = max(wend - HEADER_SIZE_UP_TO_MAGIC + 1, i)
        np = base + nxt
        p = np if np > p else p + 1
    return None


def _region_kind(r: _Reader, pos: int, end: int) -> str:
    """zero_run when [pos, end) is all zero bytes, else garbage."""
    p = pos
    while p < end:
        hole, stop = r.extent(p)
        if hole:  # a hole is zeros
            p = stop
            continue
        n = min(CHUNK, end - p, stop - p)
        i = r.ensure(p, n)
        if _NONZERO.search(r.buf, i, i + n) is not None:
            return "garbage"
        p += n
    return "zero_run"


def _frame_problem(size_field: int, magic: int, rem: int) -> tuple[str, str] | None:
    """What is wrong with a batch's framing (its length and magic fields), with ``rem`` bytes left in the file:
    (kind, message), or None."""
    total = size_field + LOG_OVERHEAD
    if size_field < MIN_BATCH_SIZE_FIELD:
        return "invalid_size", f"Found record size {size_field} smaller than minimum record overhead (14)"
    if total > rem:
        return "torn_tail", f"batch of {total} bytes runs past the end of the file ({rem} bytes left)"
    if magic > 2:
        return "bad_magic", f"Invalid magic found in record: {magic}"
    if magic == 2 and size_field < V2_MIN_SIZE_FIELD:
        return "invalid_size", f"Record batch is corrupt (the size {total} is smaller than the minimum allowed overhead 61)"
    if magic < 2 and size_field < LEGACY_MIN_SIZE_FIELD[magic]:
        return "invalid_size", (f"Record is corrupt (the message size {size_field} is smaller than the minimum for "
                                f"magic {magic})")
    return None


def _streamed_header(r: _Reader, pos: int, total: int, magic: int) -> BatchHeader:
    """The header of a batch larger than a chunk, its CRC checked chunk by chunk."""
    h = parse_header(r.buf, r.ensure(pos, 61), check_crc=False)
    if magic == 2:
        h.crc_valid = _crc_of(r, pos + 21, pos + total, crc32c) == h.crc
    else:
        h.crc_valid = _crc_of(r, pos + 16, pos + total, zlib.crc32) == h.crc
    return h


def _damage(r: _Reader, pos: int, stop: int, nxt: int | None, problem: tuple[str, str]) -> Damage:
    """The damaged region [pos, stop) that ``problem`` starts (``nxt``: where valid batches resume, or None)."""
    kind, msg = problem
    if _region_kind(r, pos, stop) == "zero_run":
        kind = "zero_run"
        msg = f"{stop - pos} zero bytes ({msg})"
    elif nxt is None and kind in ("invalid_size", "garbage", "bad_magic"):
        msg = f"{msg}; no valid batch in the {stop - pos} bytes to the end of the file"
    elif nxt is None:
        kind = "torn_tail"
    return Damage(kind, pos, stop - pos, msg, nxt)


def walk(path, *, start: int = 0, end: int | None = None, with_data: bool = False, resync: bool = True,
         chunk_size: int = CHUNK, progress: Callable[[int], None] | None = None, runs: bool = False,
         prev_last: int | None = None, base_offset: int | None = None, deep: bool = False,
         want_cols: bool = False, hold_limit: int | None = None) -> Iterator[BatchHeader | Damage | BatchRun]:
    """Yield every batch (:class:`BatchHeader`, ``crc_valid`` set) and every damaged region
    (:class:`Damage`) of the ``.log`` file ``path`` from byte ``start`` to ``end``.

    ``with_data`` keeps each batch's bytes in ``header.data``; with ``hold_limit``, a batch larger than
    that is not held: its CRC is checked chunk by chunk, ``data`` is None and ``source`` names the file
    (:func:`records_of` reads its records from there, streamed). With ``resync=False`` the walk
    stops at the first damage (Kafka's behaviour).

    ``runs=True`` (verify's fast path) lets the C accelerator, when built, check stretches of plain
    valid v2 batches in one call and yield each stretch as a :class:`BatchRun` instead of its
    headers; everything else is yielded as without it. ``prev_last`` is the last offset before
    ``start`` (e.g. of the previous segment), ``base_offset`` the segment's base offset, ``deep``
    also checks the records (see :class:`BatchRun`), ``want_cols`` asks for per-batch columns.

    Without ``with_data``, a walk with ``runs`` over a large stretch checks its parts in parallel threads
    (:func:`_split_walk`): the same batches and damage in the same order (a run may end at a part's start,
    and the runs of later parts are :meth:`~BatchRun.detach`-ed).
    """
    if runs and not with_data and resync and speedups.C is not None and _CPUS > 1:
        return _split_walk(path, start, end, chunk_size, progress, prev_last, base_offset, deep, want_cols)
    return _walk(path, start, end, with_data, resync, chunk_size, progress, runs, prev_last, base_offset, deep,
                 want_cols, hold_limit)


def open_segment_file(path) -> int:
    """A read-only descriptor of a segment file. Only a regular file is opened for good: a FIFO, socket or
    device named like a segment would block the walk for ever, so it is an OSError (EINVAL, "not a regular
    file"), reported as an ``unreadable`` finding (opened with O_NONBLOCK, so a FIFO does not wait for a writer)."""
    import errno
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _walk(path, start, end, with_data, resync, chunk_size, progress, runs, prev_last, base_offset, deep, want_cols,
          hold_limit):
    c_walk = speedups.C.walk_v2 if runs and speedups.C is not None else None
    # (a base offset from a file name past Long.MAX_VALUE, e.g. 99999999999999999999.log, is no base the C walker
    # can hold, nor can a last offset past it (an offset field near the top): the Python walk takes those)
    seg_base = -1 if base_offset is None or not 0 <= base_offset <= _LONG_MAX else base_offset
    fd = open_segment_file(path)
    r = None
    try:
        size = os.fstat(fd).st_size
        if end is None or end > size:
            end = size
        r = _Reader(fd, end, chunk_size)
        pos = start
        reported = pos
        while pos < end:
            if progress is not None and pos - reported >= (1 << 20):
                progress(pos - reported)
                reported = pos
            rem = end - pos
            if c_walk is not None and rem >= 61 and (prev_last is None or -_LONG_MAX <= prev_last <= _LONG_MAX):
                i = r.ensure(pos, 61)
                j, nb, nrec, last, cols, ti, tbase, before = c_walk(r.buf, i, r.stop - r.start, prev_last, seg_base,
                                                                     deep, want_cols)
                if nb:
                    yield BatchRun(pos, pos + (j - i), nb, nrec, last, cols, r.buf, i, with_data,
                                   (pos + (ti - i), tbase, before))
                    prev_last = last
                    pos += j - i
                    continue
            if rem <= HEADER_SIZE_UP_TO_MAGIC:
                kind = _region_kind(r, pos, end)
                yield Damage("zero_run" if kind == "zero_run" else "torn_tail", pos, rem,
                             f"{rem} bytes at the end of the file are too short for a batch header")
                break
            i = r.ensure(pos, HEADER_SIZE_UP_TO_MAGIC)
            buf = r.buf
            _off, size_field = _OFFSET_SIZE.unpack_from(buf, i)
            magic = buf[i + 16]
            total = size_field + LOG_OVERHEAD
            problem = _frame_problem(size_field, magic, rem)
            if problem is None:
                hold = with_data and (hold_limit is None or total <= hold_limit)
                if total > r.chunk and not hold:
                    h = _streamed_header(r, pos, total, magic)
                else:
                    i = r.ensure(pos, total)
                    h = parse_header(r.buf, i)
                h.position = pos
                if h.crc_valid or _plausible(r, pos + total, end):
                    if hold:
                        i = r.ensure(pos, total)
                        h.data = bytes(r.view[i:i + total])
                    elif with_data:
                        h.source = path
                    if h.crc_valid and (prev_last is None or h.last_offset > prev_last):
                        prev_last = h.last_offset
                    yield h
                    pos += total
                    continue
                problem = ("garbage", f"CRC mismatch (stored {h.crc}) in a {total}-byte batch, and no batch "
                                      f"starts where it ends: the damage spans more than this batch")
            # A damaged region starts at pos: find where valid data resumes.
            nxt = find_next_batch(r, pos + 1, end) if resync else None
            yield _damage(r, pos, end if nxt is None else nxt, nxt, problem)
            if nxt is None:
                break
            pos = nxt
        if progress is not None and end - reported > 0:
            progress(end - reported)
    finally:
        if r is not None:
            r.close()
        os.close(fd)


SPLIT_PART = 8 << 20  # the least bytes a thread of _split_walk takes (a file of 16 MiB is walked in two threads)
SPLIT_THREADS = 4  # at most (and at most one per CPU)
_PART_ITEMS = 1024  # items a part's thread holds before it waits for the walk to reach it: bounded memory, and
# batches the C walker leaves to Python (v0/v1, control batches) take the GIL: little of such work runs at once
_SPLIT_SEEK = 8 << 20  # how far past a part's nominal start the walk looks for a batch to start it at


class _Part:
    """The walk of bytes [lo, hi) of a file in a thread of its own, its items held until the walk of the
    parts before it reaches ``lo``. It holds at most ``_PART_ITEMS`` items; then it pauses and the
    walk goes on with its generator (in the calling thread) once it gets there."""

    def __init__(self, walk_part, lo: int, hi: int):
        self.lo = lo
        self.items: list = []  # items, detached; an int is bytes of progress
        self.live = None  # the progress callback, once the walk has reached this part
        self.gen = walk_part(lo, hi, None, self._progress)
        self.stop = False
        self.error: BaseException | None = None
        self.done = allocate_lock()
        self.done.acquire()
        self.thread = None

    def _progress(self, n: int) -> None:
        if self.live is not None:
            self.live(n)
        else:
            self.items.append(n)

    def run(self) -> None:
        items = self.items
        try:
            for item in self.gen:
                if type(item) is BatchRun:
                    item.detach()
                items.append(item)
                if self.stop or len(items) >= _PART_ITEMS:
                    return  # paused: the generator stays open
            self.gen = None
        except BaseException as e:  # noqa: BLE001 - the walk goes on sequentially from this part's start
            self.error = e
            self.gen = None
        finally:
            self.done.release()

    def finish(self) -> None:
        """Stop the thread (after the item it is on) and close the walk."""
        self.stop = True
        if self.thread is not None:
            self.thread.join()
        if self.gen is not None:
            self.gen.close()
            self.gen = None


def _split_points(path, start: int, end: int, chunk: int) -> list[int]:
    """[start, p1, ..., end]: where the parts of a parallel walk begin, each at a batch (a whole batch
    with a correct CRC) near an equal share of the bytes; fewer parts where none is found."""
    n = min(_CPUS, SPLIT_THREADS, (end - start) // SPLIT_PART)
    points = [start]
    if n < 2:
        return points + [end]
    fd = open_segment_file(path)
    r = _Reader(fd, end, min(chunk, 1 << 18))  # (a batch usually starts in the first few KiB)
    try:
        for k in range(1, n):
            guess = max(start + (end - start) * k // n, points[-1] + 1)
            at = find_next_batch(r, guess, min(end, guess + _SPLIT_SEEK))
            if at is not None and at > points[-1] and r.buf[r.ensure(at, 17) + 16] == 2:
                points.append(at)  # (a v0/v1 message is Python's work: a thread of its own would not help)
    finally:
        r.close()
        os.close(fd)
    return points + [end]


def _split_walk(path, start, end, chunk_size, progress, prev_last, base_offset, deep, want_cols):
    """walk(runs=True) over [start, end) in parts, one thread each; the same batches and damage, in the same
    order.

    Part k's thread walks from a batch found near its share's start (:func:`_split_points`), with no
    previous offset. Its items are the sequential walk's items when the parts before it end exactly at
    its start with no damage (else one of them yields a Damage or a CRC-failing batch at or before it)
    and its first item is a run whose first offset follows the previous part's last (the C walker checks
    each later batch against the one before it, so from there on the two walks agree). At any damage
    or mismatch, the other threads are stopped and the walk goes on sequentially from that item: what a
    damaged file yields is exactly what the sequential walk yields. Both the reads and the C walk
    release the GIL, so the parts are read and checked at once."""
    size = os.stat(path).st_size
    end = size if end is None or end > size else end
    points = _split_points(path, start, end, chunk_size) if end - start >= 2 * SPLIT_PART else [start, end]

    def walk_part(lo, hi, prev, prog):
        return _walk(path, lo, hi, False, True, chunk_size, prog, True, prev, base_offset, deep, want_cols, None)

    if len(points) < 3:
        yield from walk_part(start, end, prev_last, progress)
        return
    import threading

    parts = [_Part(walk_part, lo, hi) for lo, hi in zip(points[1:-1], points[2:], strict=True)]
    reported = [0]
    if progress is not None:
        outer = progress

        def progress(n: int) -> None:
            reported[0] += n
            outer(n)
    first = replay = None
    try:
        for part in parts:
            part.thread = threading.Thread(target=part.run, name="kltool-walk", daemon=True)
            part.thread.start()
        state = [prev_last, None]  # the walk's prev_last; where it goes on sequentially (None: nowhere yet)
        first = walk_part(start, points[1], prev_last, progress)
        yield from _until_damage(first, state)
        first.close()  # (where damage stopped it: its buffer back to the pool now)
        for part in parts:
            if state[1] is not None:
                break
            part.done.acquire()
            head = next((x for x in part.items if type(x) is not int), None)
            if (part.error is not None or type(head) is not BatchRun
                    or (state[0] is not None and head.first()[0] <= state[0])):
                # Its start was not what the walk up to it had, or its state differs; or its thread
                # failed (a read error): the sequential walk meets that error where it lies, if it does.
                state[1] = part.lo
                break
            replay = _replay(part, progress)
            yield from _until_damage(replay, state)
            replay.close()
        prev_last, resume = state
        if resume is not None:
            for part in parts:
                part.finish()
            if progress is not None and resume - start > reported[0]:
                progress(resume - start - reported[0])  # what the walk up to here has not reported
            yield from walk_part(resume, end, prev_last, progress)
    finally:  # (also when the reader stops early: every file closed, every thread ended)
        for gen in (first, replay):
            if gen is not None:
                gen.close()
        for part in parts:
            part.finish()


def _until_damage(items, state: list) -> Iterator:
    """The items of a part's walk up to the first that a part's bounds may have changed (a Damage, a batch
    failing its CRC), whose position goes to ``state[1]``; ``state[0]`` follows the walk's prev_last (the
    highest last offset of a valid batch) over the items yielded."""
    prev_last = state[0]
    for item in items:
        if type(item) is BatchRun:
            prev_last = item.last_offset
        elif type(item) is Damage or not item.crc_valid:
            state[1] = item.position
            return
        elif prev_last is None or item.last_offset > prev_last:
            prev_last = item.last_offset
        state[0] = prev_last
        yield item


def _replay(part: _Part, progress) -> Iterator:
    for x in part.items:
        if type(x) is int:
            if progress is not None:
                progress(x)
        else:
            yield x
    part.items = []
    if part.gen is not None:  # paused: go on with its walk here
        part.live = progress if progress is not None else _no_progress
        yield from part.gen


def _no_progress(_n: int) -> None:
    pass


class FileSpan:
    """``read(n)`` over the bytes [start, stop) of a file (positioned reads; nothing held)."""

    __slots__ = ("fd", "pos", "stop")

    def __init__(self, fd: int, start: int, stop: int):
        self.fd = fd
        self.pos = start
        self.stop = stop

    def read(self, n: int = -1) -> bytes:
        n = self.stop - self.pos if n is None or n < 0 else min(n, self.stop - self.pos)
        data = os.pread(self.fd, n, self.pos) if n > 0 else b""
        self.pos += len(data)
        return data


def records_of(h: BatchHeader, path=None):
    """The records of batch ``h`` as :func:`kltool.format.record_groups` gives them (bounded groups), from
    ``h.data`` when the walker held it, else read from ``h.source`` (or ``path``) in steps: memory is a fixed
    budget plus the largest record, for any batch. Errors (CorruptDataError) may be raised by this call
    or by the iteration."""
    from ..format import record_groups

    if h.data is not None:
        try:
            return record_groups(h, h.data)  # (a usual batch: a 1-tuple, decoded by this call)
        except MemoryError:
            raise _no_memory(h, path) from None
    return _records_from_file(h, h.source if h.source is not None else path)


def _records_from_file(h: BatchHeader, path):
    from ..format import record_groups

    fd = open_segment_file(path)
    try:
        yield from record_groups(h, FileSpan(fd, h.position, h.position + h.size))
    except MemoryError:
        raise _no_memory(h, path) from None
    finally:
        os.close(fd)


def _no_memory(h: BatchHeader, path) -> KltoolError:
    """A record that --max-record-bytes lets through but this process cannot hold (an address-space limit,
    ``ulimit -v``): an error on the input, named by file and position, not a crash."""
    from ..format import compression

    return KltoolError(f"a record of batch {h.base_offset}..{h.last_offset} ({h.size} bytes) does not fit in this "
                       f"process's memory: lower --max-record-bytes (now {compression.MAX_DECOMPRESSED}) to have it "
                       f"reported as record_too_large instead, or allow more memory", path=path, position=h.position)


def batches(path, **kw) -> Iterator[BatchHeader]:  # (never with runs=True)
    """Only the batches of :func:`walk` (damage skipped)."""
    for item in walk(path, **kw):
        if isinstance(item, BatchHeader):
            yield item
