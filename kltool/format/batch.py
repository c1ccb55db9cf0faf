"""Record batch v2 (magic 2): header, CRC-32C, records, control records, and a builder (Kafka's ``DefaultRecordBatch``, ``DefaultRecord``, ``ControlRecordType``)."""

from __future__ import annotations

import struct
from operator import itemgetter

from ..errors import CorruptDataError
from . import compression as _compression
from . import speedups as _speedups
from .compression import NONE, UNLIMITED, BytesSource, Inflater, TooLarge, _read_exact, compress
from .records import CONTROL_TYPES, LOG_OVERHEAD, BatchHeader, RecordColumns
from .speedups import crc32c
from .varint import encode_varint, encode_varlong, read_varint, read_varlong

V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_OVERHEAD = V2_HEADER.size  # 61
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

# the optional C accelerator (speedups.py); the pure-Python loop below is the reference
_c_decode_v2 = _speedups.C.decode_v2 if _speedups.C is not None else None

_I16 = struct.Struct(">h")
_CTRL_KEY = struct.Struct(">hh")
_END_TXN = struct.Struct(">hi")
_TS_OF = itemgetter(1)


def batch_crc(buf, position: int, size: int) -> int:
    """CRC-32C of bytes [position+21, position+size): what a v2 batch's crc field must hold."""
    return crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET:position + size])


def parse_v2_header(buf, position: int = 0, *, check_crc: bool = True) -> BatchHeader:
    """Decode the 61-byte header of the v2 batch at ``position`` of ``buf``.

    The caller has checked that the whole batch (``size`` bytes) is in ``buf`` when ``check_crc``.
    """
    (base_offset, length, ple, magic, crc, attrs, lod, base_ts, max_ts, pid, epoch, base_seq,
     count) = V2_HEADER.unpack_from(buf, position)
    size = length + LOG_OVERHEAD
    crc_valid = batch_crc(buf, position, size) == crc if check_crc else None
    return BatchHeader(
        position, size, magic, base_offset, base_offset + lod, count, crc, crc_valid, attrs,
        attrs & COMPRESSION_MASK, "log_append" if attrs & TIMESTAMP_TYPE_BIT else "create",
        base_ts, max_ts, pid, epoch, base_seq, ple,
        bool(attrs & TRANSACTIONAL_BIT), bool(attrs & CONTROL_BIT), bool(attrs & DELETE_HORIZON_BIT),
    )


def _read_unsigned(buf, pos: int, max_bytes: int) -> tuple[int, int]:
    """Raw (not yet zig-zag decoded) varint of at most ``max_bytes`` bytes."""
    raw = 0
    shift = 0
    start = pos
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return raw, pos
        shift += 7
        if pos - start >= max_bytes:
            raise CorruptDataError(f"Varint is too long, the most significant bit in the {max_bytes}th byte is set")


def _bad(msg: str, pos: int) -> CorruptDataError:
    return CorruptDataError(msg, position=pos)


def _within(h: BatchHeader, e: CorruptDataError) -> CorruptDataError:
    """``e`` with a position inside the batch: records that end with the batch where more are declared
    ("premature EOF") are the batch's fault, not that of the batch after it, which starts there."""
    if e.position is not None and e.position >= h.position + h.size:
        e.position = h.position
    return e


def decode_v2_records(h: BatchHeader, batch, limit: int | None = None) -> RecordColumns:
    """Decode the records of a v2 batch (``batch`` holds exactly the batch's bytes), all at once: the
    columns API. A compressed batch whose records decompress to more than ``limit`` bytes (default
    --max-record-bytes) raises :class:`TooLarge`; :func:`v2_record_groups` reads any batch.

    Applies Kafka's reader strictness: each record consumes exactly its length; after
    ``count`` records no bytes remain. Positions in errors are file positions when the batch
    is uncompressed, else the batch's position.
    """
    count = h.count
    if count < 0:
        raise _bad(f"Found invalid record count {count} in magic v2 batch", h.position + 57)
    payload = batch[V2_OVERHEAD:h.size]
    if h.compression == NONE:
        try:
            return _decode_v2_data(h, bytes(payload), count, h.position + V2_OVERHEAD)
        except CorruptDataError as e:
            raise _within(h, e) from None
    # Compressed: decompress only as far as the declared records need, as Kafka's reader does (it reads
    # ``count`` records, then one more byte must not exist): a valid-CRC batch declaring 1 record followed by
    # gigabytes of zeros costs a few steps, not gigabytes; and never more than the limit (TooLarge).
    def more(n: int) -> bytes:
        try:
            return inf.read(n)
        except TooLarge as e:
            raise TooLarge(f"batch {h.base_offset}..{h.last_offset}: {e.message}", position=h.position) from None
        except CorruptDataError as e:
            raise _bad(e.message, h.position) from None

    inf = Inflater(h.compression, payload, 2, limit)
    data = more(min(max(1 << 16, 8 * len(payload)), 4 << 20))  # then doubling: at most twice what is needed
    while True:
        if inf.eof:
            return _decode_v2_data(h, data, count, None)
        try:
            cols = _decode_v2_data(h, data, count, None)
        except CorruptDataError as e:
            if "premature EOF" not in e.message and "expected to read" not in e.message:
                raise
            data += more(len(data))  # the records run on: read as much again
            continue
        if more(1):
            raise _bad("Incorrect declared batch size, records still remaining in file", h.position)
        return cols


# ------------------------------------------------------------------------------------ record groups
# Reading any batch in bounded memory: a batch's records as consecutive groups of columns. A batch whose
# records are few and small (the usual case) is one group, decoded whole (decode_v2_records, the C decoder);
# a larger one is read from the decompression stream (or the file) a group at a time: each group is at most
# GROUP_BYTES of records (or one record larger than that) and GROUP_RECORDS records. Only ONE record larger
# than --max-record-bytes is refused (TooLarge, before it is read): memory is a fixed budget plus the
# largest record.

WHOLE_BYTES = 16 << 20  # records decompressing to at most this (and the limit) are decoded whole
WHOLE_RECORDS = 1 << 17  # ... when the batch declares at most this many
GROUP_BYTES = 4 << 20
GROUP_RECORDS = 1 << 15


def whole_batch_limit() -> int:
    """A batch whose records take at most this many bytes is decoded whole (one group): no record of it
    can exceed --max-record-bytes."""
    return min(WHOLE_BYTES, _compression.MAX_DECOMPRESSED)


def v2_record_groups(h: BatchHeader, batch, *, group_bytes: int = GROUP_BYTES, group_records: int = GROUP_RECORDS,
                     whole: bool = True):
    """The records of the v2 batch ``batch`` (its bytes, or a reader whose ``read(n)`` gives them from the
    batch's first byte) as consecutive :class:`RecordColumns`, with exactly :func:`decode_v2_records`'s
    checks. Errors are raised when met: the groups before them have been yielded (a usual batch, one
    group, is decoded by this call and returned as a 1-tuple: no generator per batch)."""
    count = h.count
    if count < 0:
        raise _bad(f"Found invalid record count {count} in magic v2 batch", h.position + 57)
    if whole and count <= WHOLE_RECORDS and not hasattr(batch, "read"):
        fast = min(WHOLE_BYTES, _compression.MAX_DECOMPRESSED)  # (whole_batch_limit())
        if h.compression == NONE:
            if h.size - V2_OVERHEAD <= fast:
                return (decode_v2_records(h, batch),)
        else:
            try:
                return (decode_v2_records(h, batch, fast),)
            except TooLarge:
                pass  # more than the whole-batch budget: read it again, streamed
    return _stream_v2(h, batch, group_bytes, group_records)


def _records_stream(h: BatchHeader, batch):
    """``(read, where)`` for the records of ``batch`` (bytes, or a reader from its first byte):
    ``read(n, head)`` gives ``head`` plus up to ``n`` more bytes of the (decompressed) records; ``where``
    is the file position of the records' first byte, None when they are compressed."""
    if hasattr(batch, "read"):
        src = batch
        if len(_read_exact(src, V2_OVERHEAD)) < V2_OVERHEAD:
            raise _bad("Incorrect declared batch size, premature EOF reached", h.position)
    else:
        src = BytesSource(memoryview(batch)[V2_OVERHEAD:h.size])
    if h.compression == NONE:
        def read_plain(n: int, head: bytes = b"") -> bytes:
            more = _read_exact(src, n)
            return head + more if head else bytes(more)

        return read_plain, h.position + V2_OVERHEAD
    inf = Inflater(h.compression, src, 2, UNLIMITED)

    def read(n: int, head: bytes = b"") -> bytes:
        try:
            return bytes(inf.read(n, head))
        except TooLarge as e:
            raise TooLarge(f"batch {h.base_offset}..{h.last_offset}: {e.message}", position=h.position,
                           size=e.size) from None
        except CorruptDataError as e:
            raise _bad(e.message, h.position) from None

    return read, None


def _record_too_large(h: BatchHeader, buf: bytes, hdr: int, length: int, limit: int) -> TooLarge:
    """The error for the record at the start of ``buf`` (its header of ``hdr`` bytes read) that declares
    ``length`` bytes, more than ``limit``."""
    off = _offset_delta_at(buf, hdr)
    what = "record" if off is None else f"record at offset {h.base_offset + off}"
    return TooLarge(f"batch {h.base_offset}..{h.last_offset}: {what} declares {length} bytes, more than "
                    f"--max-record-bytes ({limit}): not read", position=h.position, size=length,
                    offset=None if off is None else h.base_offset + off)


def _stream_v2(h: BatchHeader, batch, group_bytes: int, group_records: int):
    limit = _compression.MAX_DECOMPRESSED
    if not h.count:
        return  # (no record is read, so nothing is checked: Kafka's reader neither)
    read, where = _records_stream(h, batch)

    def fill(buf: bytes, need: int) -> bytes:
        return read(need - len(buf), buf)

    consumed = 0  # bytes of the records' stream before buf
    buf = b""
    remaining = h.count
    while remaining:
        k, end = _whole_records(buf, min(remaining, group_records), group_bytes, limit)
        if k:
            try:
                cols = _decode_v2_data(h, buf, k, None if where is None else where + consumed, end)
            except CorruptDataError as e:
                # a record's fields run past its length: with the records after it in reach, the error is
                # the whole-batch decoder's ("expected to read ..."); read on (up to the limit) to say the same
                if ("premature EOF" in e.message or "runs past the end" in e.message) and len(buf) < limit:
                    grown = read(max(len(buf), group_bytes), buf)
                    if len(grown) > len(buf):
                        buf = grown
                        continue
                raise
            yield cols
            buf = buf[end:]
            consumed += end
            remaining -= k
            continue
        length, hdr = _length_at(buf)
        if length is not None and length > limit:
            raise _record_too_large(h, fill(buf, hdr + 16) if len(buf) < hdr + 16 else buf, hdr, length, limit)
        if length is None or length < 0:
            need = len(buf) + (group_bytes if hdr is None else 0)
        else:
            need = max(hdr + length, min(len(buf) + group_bytes, limit))
        grown = fill(buf, need) if need > len(buf) else buf
        if len(grown) == len(buf):  # the stream ends inside the record (or the record is malformed)
            at = h.position if where is None else where + consumed
            if at >= h.position + h.size:
                at = h.position  # (the records end with the batch: the batch is at fault, not the one after it)
            try:
                _decode_v2_data(h, buf, 1, None if where is None else where + consumed)  # raises Kafka's error
            except CorruptDataError as e:
                raise _within(h, e) from None
            raise _bad("Incorrect declared batch size, premature EOF reached", at)
        buf = grown
    if buf or read(1):  # every declared record read: nothing else may follow (Kafka's rule)
        raise _bad("Incorrect declared batch size, records still remaining in file",
                   h.position if where is None else where + consumed)


def _whole_records(buf: bytes, most: int, budget: int, limit: int) -> tuple[int, int]:
    """How many whole records (at most ``most``, at most ``budget`` bytes unless the first is larger) start
    ``buf``, and where they end. Stops at anything malformed (the decoder reports it) and before a record
    longer than ``limit`` (the caller refuses it)."""
    n = len(buf)
    pos = k = 0
    while k < most and pos < n:
        b = buf[pos]
        p = pos + 1
        if b >= 0x80:
            raw = b & 0x7F
            shift = 7
            while True:
                if p >= n or shift > 28:
                    return k, pos
                b = buf[p]
                p += 1
                raw |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            b = raw
        length = (b >> 1) ^ -(b & 1)
        end = p + length
        if length < 0 or length > limit or end > n or (k and end > budget):
            break
        pos = end
        k += 1
    return k, pos


def _length_at(buf: bytes) -> tuple[int | None, int | None]:
    """The declared length of the record starting ``buf`` and the size of its length field; (None, None)
    when the field is not whole yet, (None, 5) when it is too long."""
    raw = shift = 0
    for i in range(min(5, len(buf))):
        b = buf[i]
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), i + 1
        shift += 7
    return (None, 5) if len(buf) >= 5 else (None, None)


def _offset_delta_at(buf: bytes, pos: int) -> int | None:
    """The offset delta of the record whose body (attributes byte first) starts at ``pos``, or None."""
    try:
        _ts, p = read_varlong(buf, pos + 1)
        od, _p = read_varint(buf, p)
        return od
    except (IndexError, CorruptDataError):
        return None


def _decode_v2_data(h: BatchHeader, data: bytes, count: int, where, stop: int | None = None) -> RecordColumns:
    """Decode ``count`` records from ``data`` (the records' bytes; ``where`` their file position when
    uncompressed), which must end at ``stop`` (default: the end of ``data``; record_groups gives the
    bytes after a group too, so that a record whose fields run past its length is told as the whole-batch
    decoder tells it)."""
    cols = RecordColumns(data)
    if count == 0:
        return cols
    if _c_decode_v2 is not None:
        try:
            (cols.offsets, cols.timestamps, cols.key_starts, cols.key_ends, cols.value_starts, cols.value_ends,
             cols.headers, cols.sizes, pos, cols.ordered) = _c_decode_v2(data, count, h.base_offset, h.first_timestamp,
                                                          h.timestamp_type == "log_append", h.max_timestamp)
        except (ValueError, OverflowError):
            # Malformed (or out-of-int64) data: let the reference decoder produce its exact error.
            cols = RecordColumns(data)
        else:
            return _finish_columns(h, cols, pos, len(data) if stop is None else stop, where)
    return _decode_v2_python(h, cols, data, count, where, stop)


# (over the complexity cap on purpose: the varints are read inline, one copy per field, because a call per
# field halves the speed of this reference decoder; see the comment in the loop)
def _decode_v2_python(h: BatchHeader, cols: RecordColumns, data: bytes, count: int, where,  # noqa: C901
                      stop: int | None = None) -> RecordColumns:
    oapp = cols.offsets.append
    tapp = cols.timestamps.append
    ksapp, keapp = cols.key_starts.append, cols.key_ends.append
    vsapp, veapp = cols.value_starts.append, cols.value_ends.append
    happ = cols.headers.append
    sapp = cols.sizes.append
    base_offset = h.base_offset
    base_ts = h.first_timestamp
    lat = h.timestamp_type == "log_append"
    max_ts = h.max_timestamp
    n = len(data)
    pos = 0
    rec_start = 0
    uv = _read_unsigned
    try:
        for _ in range(count):
            rec_start = pos
            if pos >= n:
                raise _bad("Incorrect declared batch size, premature EOF reached", 0)
            # Varints inline: 1- and 2-byte forms cover nearly every field of real records. The
            # repetition below is deliberate (a function call per field halves the speed of this
            # reference decoder); _read_unsigned handles the longer forms.
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    b = (b & 0x7F) | (b2 << 7)
                    pos += 2
                else:
                    b, pos = uv(data, pos, 5)
            length = (b >> 1) ^ -(b & 1)
            end = pos + length
            if length < 0 or end > n:
                raise _bad("Incorrect declared batch size, premature EOF reached"
                           if length >= 0 else f"Invalid record size {length}", 0)
            pos += 1  # record attributes, unused
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    b = (b & 0x7F) | (b2 << 7)
                    pos += 2
                else:
                    b, pos = uv(data, pos, 10)
            tsd = (b >> 1) ^ -(b & 1)
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    b = (b & 0x7F) | (b2 << 7)
                    pos += 2
                else:
                    b, pos = uv(data, pos, 5)
            od = (b >> 1) ^ -(b & 1)
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    b = (b & 0x7F) | (b2 << 7)
                    pos += 2
                else:
                    b, pos = uv(data, pos, 5)
            kl = (b >> 1) ^ -(b & 1)
            if kl < 0:
                ksapp(-1)
                keapp(-1)
            else:
                ksapp(pos)
                pos += kl
                keapp(pos)
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    b = (b & 0x7F) | (b2 << 7)
                    pos += 2
                else:
                    b, pos = uv(data, pos, 5)
            vl = (b >> 1) ^ -(b & 1)
            if vl < 0:
                vsapp(-1)
                veapp(-1)
            else:
                vsapp(pos)
                pos += vl
                veapp(pos)
            b = data[pos]
            if b == 0:
                happ(None)
                pos += 1
            else:
                hc, pos = read_varint(data, pos)
                if hc < 0 or hc > end - pos:
                    raise _bad(f"Found invalid number of record headers {hc}", 0)
                hl = []
                for _h in range(hc):
                    hkl, pos = read_varint(data, pos)
                    if hkl < 0:
                        raise _bad(f"Invalid negative header key size {hkl}", 0)
                    hks = pos
                    pos += hkl
                    hvl, pos = read_varint(data, pos)
                    if hvl < 0:
                        hl.append((hks, hks + hkl, -1, -1))
                    else:
                        hl.append((hks, hks + hkl, pos, pos + hvl))
                        pos += hvl
                happ(hl)
            if pos != end:
                raise _bad(f"Invalid record size: expected to read {length} bytes in record payload, "
                           f"but instead read {pos - (end - length)}", 0)
            oapp(base_offset + od)
            tapp(max_ts if lat else base_ts + tsd)
            sapp(end - rec_start)
    except (IndexError, CorruptDataError) as exc:
        e = exc if isinstance(exc, CorruptDataError) else _bad(
            "Incorrect declared batch size, premature EOF reached", 0)
        e.position = h.position if where is None else where + rec_start
        raise e from None
    return _finish_columns(h, cols, pos, n if stop is None else stop, where)


def _finish_columns(h: BatchHeader, cols: RecordColumns, pos: int, n: int, where) -> RecordColumns:
    offsets = cols.offsets
    base_offset = h.base_offset
    if pos != n:
        raise _bad("Incorrect declared batch size, records still remaining in file",
                   h.position if where is None else where + pos)
    if h.base_sequence >= 0:
        bs = h.base_sequence
        cols.sequences = [s if s <= 0x7FFFFFFF else s - (1 << 31)
                          for s in (bs + o - base_offset for o in offsets)]
    if h.is_control:
        cols.controls = [decode_control(cols.key(i), cols.value(i)) for i in range(len(offsets))]
    return cols


def decode_control(key: bytes | None, value: bytes | None) -> dict:
    """Decode a control record: its type, and for COMMIT/ABORT the coordinator epoch."""
    if key is None or len(key) < 4:
        raise CorruptDataError(f"Invalid value size found for end control record key: {0 if key is None else len(key)}")
    version, ctype = _CTRL_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptDataError(f"Invalid version found for control record: {version}. May indicate data corruption")
    name = CONTROL_TYPES.get(ctype, "UNKNOWN")
    out: dict = {"type": name}
    if ctype not in CONTROL_TYPES:
        out["type_id"] = ctype
    if ctype in (0, 1):
        if value is None or len(value) < 6:
            raise CorruptDataError("Invalid value size found for end transaction marker")
        _v, epoch = _END_TXN.unpack_from(value, 0)
        out["coordinator_epoch"] = epoch
    return out


# ---------------------------------------------------------------------------------------------
# Builder

# Zig-zag varint encodings of -1 .. _VT_MAX-2, built on first use: one list lookup replaces a call for
# the offset deltas, small timestamp deltas, lengths and record sizes of nearly every record.
_VT_MAX = 1 << 14
_VT: list[bytes] = []


def _varint_table() -> list[bytes]:
    if not _VT:
        _VT.extend(encode_varint(n) for n in range(-1, _VT_MAX - 1))
    return _VT


def encode_v2_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                     headers=()) -> bytes:
    t = _VT or _varint_table()
    tsd = t[timestamp_delta + 1] if -1 <= timestamp_delta < _VT_MAX - 1 else encode_varlong(timestamp_delta)
    od = t[offset_delta + 1] if -1 <= offset_delta < _VT_MAX - 1 else encode_varint(offset_delta)
    if key is None:
        kl = b"\x01"
        key = b""
    else:
        n = len(key)
        kl = t[n + 1] if n < _VT_MAX - 1 else encode_varint(n)
    if value is None:
        vl = b"\x01"
        value = b""
    else:
        n = len(value)
        vl = t[n + 1] if n < _VT_MAX - 1 else encode_varint(n)
    if headers:
        parts = [encode_varint(len(headers))]
        for hk, hv in headers:
            if isinstance(hk, str):
                hk = hk.encode()
            parts.append(encode_varint(len(hk)))
            parts.append(hk)
            if hv is None:
                parts.append(b"\x01")
            else:
                parts.append(encode_varint(len(hv)))
                parts.append(hv)
        body = b"\x00%b%b%b%b%b%b%b" % (tsd, od, kl, key, vl, value, b"".join(parts))
    else:
        body = b"\x00%b%b%b%b%b%b\x00" % (tsd, od, kl, key, vl, value)
    n = len(body)
    return (t[n + 1] if n < _VT_MAX - 1 else encode_varint(n)) + body


def _encode_v2_records(records, base_ts: int) -> bytes:
    """The records of a batch, concatenated: :func:`encode_v2_record` inlined for records without
    headers (the hot loop of ``append``; about 3x faster than a call per record)."""
    c = _speedups.C
    if c is not None and type(records) is list:
        body = c.encode_records(records, base_ts)  # the same bytes in one call (None: not plain)
        if body is not None:
            return body
    t = _VT or _varint_table()
    top = _VT_MAX - 1
    parts = []
    ap = parts.append
    for od, ts, k, v, hs in records:
        if hs:
            ap(encode_v2_record(od, ts - base_ts, k, v, hs))
            continue
        d = ts - base_ts
        if k is None:
            kl = b"\x01"
            k = b""
        else:
            n = len(k)
            kl = t[n + 1] if n < top else encode_varint(n)
        if v is None:
            vl = b"\x01"
            v = b""
        else:
            n = len(v)
            vl = t[n + 1] if n < top else encode_varint(n)
        rec = b"\x00%b%b%b%b%b%b\x00" % (t[d + 1] if -1 <= d < top else encode_varlong(d),
                                          t[od + 1] if -1 <= od < top else encode_varint(od), kl, k, vl, v)
        n = len(rec)
        ap(t[n + 1] if n < top else encode_varint(n))
        ap(rec)
    return b"".join(parts)


def encode_control_key(ctype: int) -> bytes:
    return _CTRL_KEY.pack(0, ctype)


def encode_end_txn_value(coordinator_epoch: int) -> bytes:
    return _END_TXN.pack(0, coordinator_epoch)


def build_v2_batch(records, *, base_offset: int, compression: int = NONE, level: int | None = None,
                   log_append_time: int | None = None, producer_id: int = -1, producer_epoch: int = -1,
                   base_sequence: int = -1, partition_leader_epoch: int = -1,
                   is_transactional: bool = False, is_control: bool = False,
                   last_offset_delta: int | None = None, delete_horizon_ms: int | None = None) -> bytes:
    """Build one v2 batch.

    ``records`` is a sequence of ``(offset_delta, timestamp, key, value, headers)``.
    With ``log_append_time`` the batch is LogAppendTime and maxTimestamp is that time.
    """
    if type(records) is not list:
        records = list(records)
    if records:
        first_ts = records[0][1]
        max_ts = max(map(_TS_OF, records))
        lod = records[-1][0] if last_offset_delta is None else last_offset_delta
    else:
        first_ts = -1
        max_ts = -1
        lod = 0 if last_offset_delta is None else last_offset_delta
    base_ts = first_ts if delete_horizon_ms is None else delete_horizon_ms
    body = _encode_v2_records(records, base_ts)
    if compression != NONE and records:
        body = compress(compression, body, level, 2)
    attrs = compression & COMPRESSION_MASK
    if log_append_time is not None:
        attrs |= TIMESTAMP_TYPE_BIT
        max_ts = log_append_time
    if is_transactional:
        attrs |= TRANSACTIONAL_BIT
    if is_control:
        attrs |= CONTROL_BIT
    if delete_horizon_ms is not None:
        attrs |= DELETE_HORIZON_BIT
    length = V2_OVERHEAD - LOG_OVERHEAD + len(body)
    header = bytearray(V2_HEADER.pack(base_offset, length, partition_leader_epoch, 2, 0, attrs, lod, base_ts,
                                      max_ts, producer_id, producer_epoch, base_sequence, len(records)))
    crc = crc32c(body, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    struct.pack_into(">I", header, CRC_OFFSET, crc)
    return bytes(header) + body


def build_end_txn_marker(*, offset: int, commit: bool, producer_id: int, producer_epoch: int,
                         coordinator_epoch: int, timestamp: int, partition_leader_epoch: int = -1) -> bytes:
    """An end-transaction marker batch (78 bytes), as MemoryRecords.withEndTransactionMarker writes it."""
    rec = (0, timestamp, encode_control_key(1 if commit else 0), encode_end_txn_value(coordinator_epoch), ())
    return build_v2_batch([rec], base_offset=offset, producer_id=producer_id, producer_epoch=producer_epoch,
                          partition_leader_epoch=partition_leader_epoch, is_transactional=True, is_control=True)
