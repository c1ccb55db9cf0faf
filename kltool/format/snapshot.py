"""Producer-state snapshot ``N.snapshot`` (``ProducerStateManager.readSnapshot/writeSnapshot``).

Layout (big-endian): version int16 (= 1), crc uint32 = CRC-32C of bytes [6, end), entry count int32,
then 46-byte entries: producerId int64, epoch int16, lastSequence int32, lastOffset int64,
offsetDelta int32, timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64.

``parse_snapshot`` follows Kafka's order: schema (structure) errors first, then the version, then the CRC.
Structure and version errors raise ``CorruptDataError`` with Kafka's ``CorruptSnapshotException`` text;
a CRC mismatch is reported in ``Snapshot.crc_valid`` (or raised with ``strict=True``).

A snapshot has no size limit (46 bytes a producer: a busy idempotent cluster's can pass 64 MiB), so the
codec also works in pieces, for storage to feed a file of any size a chunk at a time: :func:`snapshot_layout`
judges the structure and version from the first 10 bytes and the size, :func:`snapshot_crc` continues over
chunks (``value``), :class:`EntryDecoder` turns chunks cut anywhere into entries.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import CorruptDataError
from .speedups import crc32c

SNAPSHOT_VERSION = 1  # ProducerStateManager.PRODUCER_SNAPSHOT_VERSION
CRC_OFFSET = 2
ENTRIES_OFFSET = 6  # PRODUCER_ENTRIES_OFFSET: the CRC covers [6, end)
HEADER_SIZE = 10
ENTRY_SIZE = 46
INT32_MAX = 2**31 - 1

_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
assert _ENTRY.size == ENTRY_SIZE and _HEADER.size == HEADER_SIZE

# (field name in Kafka's schema, size) in entry order, to name the field a truncated entry stops in.
_ENTRY_FIELDS = (("producer_id", 8), ("epoch", 2), ("last_sequence", 4), ("last_offset", 8),
                 ("offset_delta", 4), ("timestamp", 8), ("coordinator_epoch", 4),
                 ("current_txn_first_offset", 8))
_UNDERFLOW = "java.nio.BufferUnderflowException"

__all__ = ["SNAPSHOT_VERSION", "ENTRY_SIZE", "HEADER_SIZE", "ENTRIES_OFFSET", "ProducerEntry", "Snapshot",
           "SnapshotLayout", "parse_snapshot", "snapshot_layout", "EntryDecoder", "encode_snapshot", "snapshot_crc"]


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int  # last data offset, -1 if none
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1 if no open transaction

    @property
    def has_batch_metadata(self) -> bool:
        """Kafka keeps batch metadata (sequence/offset) only when lastOffset >= 0."""
        return self.last_offset >= 0

    @property
    def first_sequence(self) -> int:
        """``BatchMetadata.firstSeq``: lastSequence - offsetDelta, wrapping like ``decrementSequence``."""
        if self.last_sequence < self.offset_delta:
            return INT32_MAX - (self.offset_delta - self.last_sequence) + 1
        return self.last_sequence - self.offset_delta


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    crc: int  # stored, unsigned
    crc_valid: bool
    computed_crc: int
    entries: list[ProducerEntry]
    trailing_bytes: int = 0  # bytes after the last entry (Kafka ignores them, but they break the CRC)


def snapshot_crc(data, value: int = 0, *, start: int = ENTRIES_OFFSET) -> int:
    """CRC-32C of bytes [6, end): what the crc field must hold. With ``value`` (the CRC so far) and ``start``
    0, continued over the next chunk of those bytes."""
    return crc32c(memoryview(data)[start:], value)


def _schema_error(detail: str, position: int) -> CorruptDataError:
    return CorruptDataError(f"Snapshot failed schema validation: {detail}", position=position)


@dataclass(frozen=True, slots=True)
class SnapshotLayout:
    version: int
    crc: int  # stored, unsigned
    count: int  # entries
    end: int  # where the entries end (bytes after it are trailing)


def snapshot_layout(head, size: int) -> SnapshotLayout:
    """The structure of a snapshot of ``size`` bytes from its first bytes ``head`` (10, or all of a shorter
    one), judged in Kafka's order: schema (structure) errors, then the version. Raises ``CorruptDataError``."""
    mv = memoryview(head)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    if size < 2:
        raise _schema_error(f"Error reading field 'version': {_UNDERFLOW}", 0)
    if size < 6:
        raise _schema_error(f"Error reading field 'crc': {_UNDERFLOW}", 2)
    if size < HEADER_SIZE:
        raise _schema_error(f"Error reading field 'producer_entries': {_UNDERFLOW}", 6)
    version, crc, count = _HEADER.unpack_from(mv, 0)
    remaining = size - HEADER_SIZE
    if count < 0:
        raise _schema_error(f"Error reading field 'producer_entries': Array size {count} cannot be negative", 6)
    if count > remaining:
        raise _schema_error(f"Error reading field 'producer_entries': Error reading array of size {count}, "
                            f"only {remaining} bytes available", 6)
    end = HEADER_SIZE + count * ENTRY_SIZE
    if end > size:
        index, rest = divmod(remaining, ENTRY_SIZE)
        pos = HEADER_SIZE + index * ENTRY_SIZE
        name = _ENTRY_FIELDS[-1][0]
        for field, width in _ENTRY_FIELDS:
            if rest < width:
                name = field
                break
            rest -= width
            pos += width
        raise _schema_error(f"Error reading field 'producer_entries': Error reading field '{name}': "
                            f"{_UNDERFLOW}", pos)
    if version != SNAPSHOT_VERSION:
        raise CorruptDataError(f"Snapshot contained an unknown file version {version}", position=0)
    return SnapshotLayout(version, crc, count, end)


def crc_error(crc: int, computed: int) -> CorruptDataError:
    return CorruptDataError(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. "
                            f"Computed crc: {computed}", position=CRC_OFFSET)


class EntryDecoder:
    """Entries from the bytes after the header fed in chunks cut anywhere (:meth:`feed` returns the entries
    the chunk completes; a partial entry waits for the next chunk)."""

    __slots__ = ("_rest",)

    def __init__(self):
        self._rest = b""

    def feed(self, chunk) -> list[ProducerEntry]:
        data = self._rest + bytes(chunk) if self._rest else chunk
        n = len(data) - len(data) % ENTRY_SIZE
        self._rest = bytes(memoryview(data)[n:])
        return [ProducerEntry(*t) for t in _ENTRY.iter_unpack(memoryview(data)[:n])]


def parse_snapshot(data, *, strict: bool = False) -> Snapshot:
    """Decode a producer snapshot. Raises ``CorruptDataError`` for short data, a bad entry count or
    an unknown version; with ``strict`` also for a CRC mismatch (Kafka deletes such snapshots)."""
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    size = len(mv)
    lay = snapshot_layout(mv[:HEADER_SIZE], size)
    computed = snapshot_crc(mv)
    if strict and computed != lay.crc:
        raise crc_error(lay.crc, computed)
    entries = [ProducerEntry(*t) for t in _ENTRY.iter_unpack(mv[HEADER_SIZE:lay.end])]
    return Snapshot(lay.version, lay.crc, computed == lay.crc, computed, entries, size - lay.end)


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    """Snapshot bytes (version 1, CRC filled in) for ``entries`` in the given order."""
    body = [_ENTRY.pack(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta,
                        e.timestamp, e.coordinator_epoch, e.current_txn_first_offset) for e in entries]
    tail = struct.pack(">i", len(body)) + b"".join(body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(tail)) + tail
