"""Message format v0 and v1 (magic 0/1): CRC-32, compressed wrapper messages (Kafka's ``LegacyRecord`` and ``AbstractLegacyRecordBatch``)."""

from __future__ import annotations

import struct
import zlib

from ..errors import CorruptDataError
from .compression import NONE, ZSTD, compress, decompress
from .records import LOG_OVERHEAD, BatchHeader, RecordColumns

LEGACY_HEADER = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes (18 bytes)
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_ENTRY = struct.Struct(">qi")
RECORD_OVERHEAD = {0: 14, 1: 22}  # message bytes after the size field, without key and value
TIMESTAMP_TYPE_BIT = 0x08


def legacy_crc(buf, position: int, size: int) -> int:
    return zlib.crc32(memoryview(buf)[position + 16:position + size])


def parse_legacy_header(buf, position: int = 0, *, check_crc: bool = True) -> BatchHeader:
    """Decode the shallow message at ``position`` (whole entry must be in ``buf`` for the CRC)."""
    offset, msize, crc, magic, attrs = LEGACY_HEADER.unpack_from(buf, position)
    size = msize + LOG_OVERHEAD
    if magic >= 1 and msize >= RECORD_OVERHEAD[1]:
        (ts,) = _Q.unpack_from(buf, position + 18)
        ts_type = "log_append" if attrs & TIMESTAMP_TYPE_BIT else "create"
    else:
        ts = -1
        ts_type = "none" if magic == 0 else "create"
    codec = attrs & 0x07
    crc_valid = legacy_crc(buf, position, size) == crc if check_crc else None
    return BatchHeader(position, size, magic, offset, offset, None, crc, crc_valid, attrs, codec, ts_type,
                       ts, ts, base_offset_exact=codec == NONE)


def _message_fields(buf, start: int, end: int, magic: int):
    """Key/value spans of the message whose magic byte is at ``start`` and which ends at ``end``."""
    p = start + 2 + (8 if magic >= 1 else 0)
    # key then value, inlined: a shared helper for the two costs ~15% of legacy decoding (measured 2026-11-26)
    (kl,) = _I.unpack_from(buf, p)
    p += 4
    if kl < 0:
        ks = ke = -1
    else:
        ks, ke = p, p + kl
        p = ke
    (vl,) = _I.unpack_from(buf, p)
    p += 4
    if vl < 0:
        vs = ve = -1
    else:
        vs, ve = p, p + vl
        p = ve
    if p != end:
        raise CorruptDataError(f"Record is corrupt: key and value sizes ({kl}, {vl}) do not match the message size")
    return ks, ke, vs, ve


def decode_legacy_records(h: BatchHeader, entry) -> RecordColumns:
    """Decode the record(s) of the shallow message ``entry`` (exactly its bytes).

    An uncompressed message is one record; a compressed wrapper yields its inner messages with
    Kafka's offset rules (v1: relative inner offsets against the wrapper's last offset).
    Sets ``h.base_offset`` to the first record's offset.
    """
    buf = bytes(entry)
    try:
        ks, ke, vs, ve = _message_fields(buf, 16, len(buf), h.magic)
    except struct.error:
        raise CorruptDataError("Record is corrupt: the message is shorter than its header",
                               position=h.position) from None
    except CorruptDataError as e:
        raise e.at(position=h.position) from None
    if h.compression == NONE:
        cols = RecordColumns(buf, [h.last_offset], [h.max_timestamp], [ks], [ke], [vs], [ve], [None], [h.size])
        return cols
    if h.compression == ZSTD:
        raise CorruptDataError("Invalid wrapper compressionType found in legacy deep record iterator: zstd",
                               position=h.position)
    if vs < 0:
        raise CorruptDataError("Found invalid compressed record set with null value", position=h.position)
    try:
        data = decompress(h.compression, buf[vs:ve], h.magic)
    except CorruptDataError as e:
        raise CorruptDataError(e.message, position=h.position) from None
    try:
        cols, torn = _inner_messages(h, data)
    except struct.error:
        raise CorruptDataError("Found an inner message shorter than its header", position=h.position) from None
    except CorruptDataError as e:
        raise CorruptDataError(e.message, position=h.position) from None
    if not cols.offsets:
        raise CorruptDataError("Found invalid compressed record set with no inner records", position=h.position)
    if h.magic >= 1:
        cols.offsets = _absolute_v1_offsets(h, cols.offsets)
    h.base_offset = cols.offsets[0]
    h.base_offset_exact = True
    if torn is not None:
        # Kafka's reader serves the whole inner messages before a partial one and stops there without a
        # word; kltool has the same records (``partial``, for a reader that shows them) and names the damage.
        err = CorruptDataError(torn, position=h.position)
        err.partial = cols
        raise err
    return cols


def message_crcs(cols: RecordColumns) -> list[tuple[bool, int]]:
    """For each message of a decoded v0/v1 group (:func:`decode_legacy_records`' columns: the shallow
    message itself, or a wrapper's inner messages laid end to end): whether its CRC-32 matches and the
    stored CRC, as kafka-dump-log prints them (``isValid: ... crc: ...``)."""
    buf = cols.buffer
    out = []
    p = 0
    for size in cols.sizes:
        stored = struct.unpack_from(">I", buf, p + 12)[0]
        out.append((legacy_crc(buf, p, size) == stored, stored))
        p += size
    return out


def _inner_messages(h: BatchHeader, data: bytes) -> tuple[RecordColumns, str | None]:
    """The inner messages of a decompressed wrapper, with their offsets as stored, and what is wrong with a
    partial entry after them (None: nothing, or fewer than 12 bytes, which Kafka's iterator ignores too)."""
    cols = RecordColumns(data)
    n = len(data)
    p = 0
    lat = h.magic >= 1 and h.timestamp_type == "log_append"
    while p + LOG_OVERHEAD <= n:  # (a partial trailing entry is ignored, like Kafka's iterator)
        off, msize = _ENTRY.unpack_from(data, p)
        if msize < RECORD_OVERHEAD[0]:
            raise CorruptDataError(f"Found invalid inner message of size {msize}")
        if p + LOG_OVERHEAD + msize > n:  # Kafka's iterator: the end of the inner messages
            return cols, (f"Found an inner message of size {msize} at byte {p} of the {n} decompressed bytes, "
                          f"past their end (the {len(cols.offsets)} inner messages before it are read)")
        magic = data[p + 16]
        if data[p + 17] & 0x07:
            raise CorruptDataError("Inner messages must not be compressed")
        ts = _Q.unpack_from(data, p + 18)[0] if magic >= 1 else -1
        iks, ike, ivs, ive = _message_fields(data, p + 16, p + LOG_OVERHEAD + msize, magic)
        cols.offsets.append(off)
        cols.timestamps.append(h.max_timestamp if lat else ts)
        cols.key_starts.append(iks)
        cols.key_ends.append(ike)
        cols.value_starts.append(ivs)
        cols.value_ends.append(ive)
        cols.headers.append(None)
        cols.sizes.append(LOG_OVERHEAD + msize)
        p += LOG_OVERHEAD + msize
    return cols, None


def _absolute_v1_offsets(h: BatchHeader, inner: list[int]) -> list[int]:
    """v1 inner offsets are relative: the last one is the wrapper's offset (a wrapper offset of 0: as stored)."""
    wrapper = h.last_offset
    if wrapper == 0:
        return inner
    last_inner = inner[-1]
    if wrapper < last_inner:
        raise CorruptDataError(
            f"Found invalid wrapper offset in compressed v1 message set, wrapper offset '{wrapper}' is less "
            f"than the last inner message offset '{last_inner}' and it is not zero.", position=h.position)
    base = wrapper - last_inner
    return [base + o for o in inner]


# ---------------------------------------------------------------------------------------------
# Builder

def encode_legacy_message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
                          value: bytes | None) -> bytes:
    """One log entry: offset, size, crc, magic, attributes, [timestamp], key, value."""
    parts = [bytes((magic, attributes))]
    if magic >= 1:
        parts.append(_Q.pack(timestamp))
    parts.append(_I.pack(-1) if key is None else _I.pack(len(key)) + key)
    parts.append(_I.pack(-1) if value is None else _I.pack(len(value)) + value)
    body = b"".join(parts)
    crc = zlib.crc32(body)
    return _ENTRY.pack(offset, len(body) + 4) + struct.pack(">I", crc) + body


def build_legacy_batch(records, *, base_offset: int, magic: int, compression: int = NONE,
                       level: int | None = None, log_append_time: int | None = None) -> bytes:
    """Messages for ``records`` = ``(offset_delta, timestamp, key, value)``.

    Uncompressed: one message per record. Compressed: one wrapper whose offset is the last
    inner offset; v1 inner offsets are relative, v0 inner offsets absolute (MemoryRecordsBuilder).
    """
    if magic not in (0, 1):
        raise ValueError("legacy magic must be 0 or 1")
    if compression == ZSTD:
        raise ValueError("zstd needs magic 2")
    ts_attr = TIMESTAMP_TYPE_BIT if (magic == 1 and log_append_time is not None) else 0

    def ts_of(ts):
        if magic == 0:
            return -1
        return log_append_time if log_append_time is not None else ts

    if compression == NONE:
        return b"".join(encode_legacy_message(base_offset + od, magic, ts_attr, ts_of(ts), k, v)
                        for od, ts, k, v, *_ in records)
    inner = b"".join(encode_legacy_message(od if magic == 1 else base_offset + od, magic, ts_attr, ts_of(ts), k, v)
                     for od, ts, k, v, *_ in records)
    last = base_offset + records[-1][0]
    wrapper_ts = ts_of(max(r[1] for r in records))
    return encode_legacy_message(last, magic, compression | ts_attr, wrapper_ts, None,
                                 compress(compression, inner, level, magic))
