"""Pure byte codecs for Kafka's on-disk formats. Nothing in this package does file I/O."""

from __future__ import annotations

from ..errors import CorruptDataError
from .batch import build_v2_batch, decode_v2_records, parse_v2_header
from .legacy import build_legacy_batch, decode_legacy_records, parse_legacy_header
from .records import BatchHeader, Record, RecordColumns

__all__ = [
    "BatchHeader", "Record", "RecordColumns", "parse_header", "decode_records", "build_batch",
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


def build_batch(records, *, base_offset: int, magic: int = 2, **kw) -> bytes:
    """Build a batch of ``records`` = ``(offset_delta, timestamp, key, value, headers)``."""
    if magic == 2:
        return build_v2_batch(records, base_offset=base_offset, **kw)
    kw = {k: v for k, v in kw.items() if k in ("compression", "level", "log_append_time")}
    return build_legacy_batch(records, base_offset=base_offset, magic=magic, **kw)
