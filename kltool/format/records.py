"""The format-independent model: a batch header and the decoded records of a batch, as columns.

Every magic (0, 1, 2) is described by the same :class:`BatchHeader`; record decoding returns
:class:`RecordColumns` (parallel lists, with key/value *spans* into one buffer), so that a faster
decoder can replace the pure-Python one without touching callers.
"""

from __future__ import annotations

from ..plain import Plain

LOG_OVERHEAD = 12  # offset (8) + size (4)
HEADER_SIZE_UP_TO_MAGIC = 17
MIN_BATCH_SIZE_FIELD = 14  # Kafka's "minimum record overhead" for the size field

TIMESTAMP_TYPES = ("create", "log_append", "none")

# Control record types (ControlRecordType)
CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}
CONTROL_IDS = {v: k for k, v in CONTROL_TYPES.items()}

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def _i32(n: int) -> int:
    """``n`` as a Java int (wrapped to 32 bits)."""
    return ((n + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def java_long(n: int) -> int:
    """``n`` as Kafka shows it (display only): an offset Kafka computes in a Java long (a batch's
    baseOffset + lastOffsetDelta, a record's baseOffset + offsetDelta, a log end offset) wraps past
    2^63-1 to negative (DumpLogSegments prints lastOffset -9223372036854775806 for 2^63-3 + 5). The model
    keeps the unbounded value (verify names the overflow); what is printed is this."""
    if _LONG_MIN <= n <= _LONG_MAX:
        return n
    return ((n - _LONG_MIN) & 0xFFFFFFFFFFFFFFFF) + _LONG_MIN


class BatchHeader:
    """One batch (v2) or one shallow message (v0/v1) at ``position`` in its file.

    ``size`` includes the 12-byte log overhead. For a legacy compressed wrapper, ``base_offset``
    is the wrapper's offset (= last inner offset) until the records are decoded
    (``base_offset_exact`` is False then).
    """

    __slots__ = (
        "position", "size", "magic", "base_offset", "last_offset", "count", "crc", "crc_valid",
        "attributes", "compression", "timestamp_type", "first_timestamp", "max_timestamp",
        "producer_id", "producer_epoch", "base_sequence", "partition_leader_epoch",
        "is_transactional", "is_control", "has_delete_horizon", "base_offset_exact", "data", "source",
    )

    def __init__(self, position, size, magic, base_offset, last_offset, count, crc, crc_valid,
                 attributes, compression, timestamp_type, first_timestamp, max_timestamp,
                 producer_id=-1, producer_epoch=-1, base_sequence=-1, partition_leader_epoch=-1,
                 is_transactional=False, is_control=False, has_delete_horizon=False,
                 base_offset_exact=True):
        self.position = position
        self.size = size
        self.magic = magic
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.count = count
        self.crc = crc
        self.crc_valid = crc_valid
        self.attributes = attributes
        self.compression = compression
        self.timestamp_type = timestamp_type
        self.first_timestamp = first_timestamp
        self.max_timestamp = max_timestamp
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.has_delete_horizon = has_delete_horizon
        self.base_offset_exact = base_offset_exact
        self.data = None  # the batch's bytes, when the reader was asked to keep them
        self.source = None  # the file it was read from, when it was too large to keep (data is None then)

    @property
    def end(self) -> int:
        return self.position + self.size

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        """DefaultRecordBatch.lastSequence: -1 (NO_SEQUENCE) for a baseSequence of -1 (and below magic 2), else
        incrementSequence(baseSequence, lastOffsetDelta) in Java ints: past 2^31-1 it goes on from 0, and a
        damaged header's negative lastOffsetDelta wraps too (baseSequence 5, delta -10: 2147483643; baseSequence
        -5, delta 1: -4), as the broker's producer state and DumpLogSegments have it."""
        seq = self.base_sequence
        if self.magic < 2 or seq == -1:
            return -1
        inc = self.last_offset - self.base_offset  # (lastOffsetDelta, an int32)
        if seq > _i32(0x7FFFFFFF - inc):
            return _i32(inc - _i32(0x7FFFFFFF - seq) - 1)
        return _i32(seq + inc)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.first_timestamp if self.has_delete_horizon else None

    @property
    def compression_name(self) -> str:
        from .compression import CODEC_NAMES

        return CODEC_NAMES.get(self.compression, f"unknown({self.compression})")

    def __repr__(self) -> str:
        return (f"BatchHeader(position={self.position}, size={self.size}, magic={self.magic}, "
                f"offsets={self.base_offset}..{self.last_offset}, crc_valid={self.crc_valid})")


class Record(Plain):
    __slots__ = _fields = ("offset", "timestamp", "key", "value", "headers", "sequence", "size", "control")

    def __init__(self, offset: int, timestamp: int, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str | bytes, bytes | None]], sequence: int = -1, size: int = 0,
                 control: dict | None = None):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers
        self.sequence = sequence
        self.size = size
        self.control = control


class RecordColumns(Plain):
    """Decoded records of one batch. Spans index into ``buffer``; a start of -1 means null.

    ``headers`` holds per record None (no headers) or a list of (key_start, key_end, value_start,
    value_end); ``ordered`` is True/False when the decoder checked that offsets strictly increase, None
    when it did not."""

    __slots__ = _fields = ("buffer", "offsets", "timestamps", "key_starts", "key_ends", "value_starts", "value_ends",
                           "headers", "sizes", "sequences", "controls", "ordered")

    def __init__(self, buffer: bytes, offsets: list[int] | None = None, timestamps: list[int] | None = None,
                 key_starts: list[int] | None = None, key_ends: list[int] | None = None,
                 value_starts: list[int] | None = None, value_ends: list[int] | None = None,
                 headers: list[list[tuple[int, int, int, int]] | None] | None = None, sizes: list[int] | None = None,
                 sequences: list[int] | None = None, controls: list[dict | None] | None = None,
                 ordered: bool | None = None):
        self.buffer = buffer
        self.offsets = [] if offsets is None else offsets
        self.timestamps = [] if timestamps is None else timestamps
        self.key_starts = [] if key_starts is None else key_starts
        self.key_ends = [] if key_ends is None else key_ends
        self.value_starts = [] if value_starts is None else value_starts
        self.value_ends = [] if value_ends is None else value_ends
        self.headers = [] if headers is None else headers
        self.sizes = [] if sizes is None else sizes
        self.sequences = sequences
        self.controls = controls
        self.ordered = ordered

    def __len__(self) -> int:
        return len(self.offsets)

    def key(self, i: int) -> bytes | None:
        s = self.key_starts[i]
        return None if s < 0 else self.buffer[s:self.key_ends[i]]

    def value(self, i: int) -> bytes | None:
        s = self.value_starts[i]
        return None if s < 0 else self.buffer[s:self.value_ends[i]]

    def header_list(self, i: int) -> list[tuple[bytes, bytes | None]]:
        hs = self.headers[i]
        if not hs:
            return []
        b = self.buffer
        return [(b[ks:ke], None if vs < 0 else b[vs:ve]) for ks, ke, vs, ve in hs]

    def record(self, i: int) -> Record:
        return Record(
            offset=self.offsets[i],
            timestamp=self.timestamps[i],
            key=self.key(i),
            value=self.value(i),
            headers=self.header_list(i),
            sequence=self.sequences[i] if self.sequences is not None else -1,
            size=self.sizes[i],
            control=self.controls[i] if self.controls is not None else None,
        )

    def __iter__(self):
        for i in range(len(self.offsets)):
            yield self.record(i)
