"""Pure byte codecs for Kafka's on-disk formats. Nothing in this package does file I/O."""

from __future__ import annotations

from ..errors import CorruptDataError
from . import compression as _compression
from .batch import build_v2_batch, decode_v2_records, parse_v2_header, v2_record_groups
from .legacy import build_legacy_batch, decode_legacy_records, parse_legacy_header
from .records import BatchHeader, Record, RecordColumns

__all__ = [
    "BatchHeader", "Record", "RecordColumns", "parse_header", "decode_records", "record_groups", "build_batch",
]


def parse_header(buf, position: int = 0, *, check_crc: bool = True) -> BatchHeader:
    """Decode the header of the batch (any magic) at ``position``; the whole batch must be in ``buf``
    when ``check_crc``. Magic values above 2 are read as v2, like Kafka does."""
    magic = buf[position + 16]
    if magic >= 2:
        return parse_v2_header(buf, position, check_crc=check_crc)
    return parse_legacy_header(buf, position, check_crc=check_crc)


def decode_records(header: BatchHeader, batch=None) -> RecordColumns:
    """Decode all records of a batch into columns. ``batch`` holds exactly the batch's bytes
    (defaults to ``header.data``). Raises CorruptDataError for anything Kafka's reader rejects."""
    if batch is None:
        batch = header.data
    if header.magic == 2:
        return decode_v2_records(header, batch)
    if header.magic in (0, 1):
        return decode_legacy_records(header, batch)
    raise CorruptDataError(f"Invalid magic found in record: {header.magic}", position=header.position + 16)


def record_groups(header: BatchHeader, batch=None):
    """The records of a batch as consecutive :class:`RecordColumns` groups, with :func:`decode_records`'s
    checks, in memory bounded by a fixed budget plus the largest record: any batch, however large, is read,
    and only one record larger than --max-record-bytes is refused (:class:`~kltool.format.compression.TooLarge`,
    raised before that record is read; the groups before it have been yielded). A usual batch is one group,
    decoded by the call itself (errors may be raised by the call or by the iteration).

    ``batch`` is the batch's bytes (default ``header.data``) or a reader whose ``read(n)`` gives them from
    the batch's first byte (for a batch too large to hold; the storage layer opens it).

    A v0/v1 message is one group: a compressed wrapper's inner messages are held together, as Kafka's
    reader does (v1 inner offsets are relative to the last one), within --max-record-bytes."""
    if batch is None:
        batch = header.data
    if header.magic == 2:
        return v2_record_groups(header, batch)
    if header.magic not in (0, 1):
        raise CorruptDataError(f"Invalid magic found in record: {header.magic}", position=header.position + 16)
    limit = _compression.MAX_DECOMPRESSED
    if header.size - 12 > limit:
        raise _compression.TooLarge(f"message of {header.size - 12} bytes at offset {header.last_offset}, more "
                                    f"than --max-record-bytes ({limit}): not read", position=header.position,
                                    size=header.size - 12, offset=header.last_offset)
    if hasattr(batch, "read"):
        batch = bytes(_compression._read_exact(batch, header.size))
    try:
        return (decode_legacy_records(header, batch),)
    except CorruptDataError as e:
        partial = getattr(e, "partial", None)
        if partial is None:
            raise
        return _then_raise(partial, e)  # (the inner messages Kafka reads, then the damage after them)


def _then_raise(cols: RecordColumns, err: CorruptDataError):
    yield cols
    raise err


def build_batch(records, *, base_offset: int, magic: int = 2, **kw) -> bytes:
    """Build a batch of ``records`` = ``(offset_delta, timestamp, key, value, headers)``."""
    if magic == 2:
        return build_v2_batch(records, base_offset=base_offset, **kw)
    kw = {k: v for k, v in kw.items() if k in ("compression", "level", "log_append_time")}
    return build_legacy_batch(records, base_offset=base_offset, magic=magic, **kw)
