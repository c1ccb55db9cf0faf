"""The log cleaner's rules for one pass over one partition, as Kafka 4.x's ``Cleaner`` applies them
(``Cleaner.buildOffsetMap``, ``cleanSegments``, ``cleanInto``, ``shouldRetainRecord``,
``groupSegmentsBySize``), with ``CleanedTransactionMetadata`` and the record filter of
``MemoryRecords.filterTo``. :mod:`kltool.storage.change.compact` plans and applies a pass with them.

* :class:`OffsetMap`: key -> latest offset over the dirty range, bounded like ``SkimpyOffsetMap``: its
  memory (``log.cleaner.dedupe.buffer.size``) / 24 bytes per slot, filled to the load factor (0.9).
  When it is full the map ends at the last offset taken and the pass cleans up to there.
* :class:`TxnMeta`: which data batches belong to aborted transactions (from the ``.txnindex`` entries,
  consumed by first offset), which COMMIT/ABORT markers may go, and the aborted transactions whose ABORT
  marker stays (the new ``.txnindex``).
* :func:`filter_batch`: one batch through ``checkBatchRetention`` + ``filterBatch``: removed, copied byte for
  byte, rewritten (header fields kept, ``deleteHorizonMs`` set when it keeps tombstones or the marker of an
  empty transaction), or reduced to an empty header (a producer's last batch, the round's last batch).
* :class:`CleanedSegment`: the ``.cleaned`` files of one group (log, indexes by ``LogSegment.recover``'s
  rule, the aborted transactions kept), or only their sizes for a dry run.
"""

from __future__ import annotations

import heapq
import os
import struct
from hashlib import md5
from pathlib import Path

from ...errors import CorruptDataError
from ...format import decode_records, parse_header, speedups
from ...format import names as fn
from ...format.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
    DELETE_HORIZON_BIT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    V2_HEADER,
    build_v2_batch,
)
from ...format.compression import NONE, compress
from ...format.index import encode_aborted_txn
from ...format.legacy import build_legacy_batch
from ...format.records import BatchHeader
from ...format.speedups import crc32c
from ..index_builder import IndexBuilder
from ..producer_state import control_of
from ..scan import Damage

__all__ = ["OffsetMap", "TxnMeta", "Rules", "CleanStats", "CleanedSegment", "filter_batch", "collect_aborted",
           "group_segments", "DEFAULT_DEDUPE_BUFFER", "LOAD_FACTOR", "BYTES_PER_ENTRY", "INT_MAX", "IO_BUFFER"]

DEFAULT_DEDUPE_BUFFER = 128 << 20  # log.cleaner.dedupe.buffer.size (per cleaner thread: divided by log.cleaner.threads)
LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor
BYTES_PER_ENTRY = 24  # SkimpyOffsetMap: an MD5 hash (16 bytes) and an offset (8)
IO_BUFFER = (512 << 10) // 2  # the cleaner's read buffer: log.cleaner.io.buffer.size / threads / 2
INT_MAX = 2**31 - 1
_HASHED = 16  # keys longer than this are kept as their MD5 digest (the broker hashes every key)


def _damaged(seg, what: str, position: int) -> CorruptDataError:
    return CorruptDataError(f"{what}: the cleaner cannot read past it; run kltool verify --repair first",
                            path=seg.log_path, position=position)


def batches_of(seg, start: int = 0):
    """The batches of ``seg`` from byte ``start``, with their bytes; damage refuses the partition. A ``start``
    that is not a batch's (a stale offset index) falls back to the file's start."""
    first = True
    for item in seg.walk(start=start, with_data=True, resync=False):
        if first and start and (isinstance(item, Damage) or not item.crc_valid):
            yield from batches_of(seg, 0)
            return
        first = False
        if isinstance(item, Damage):
            raise _damaged(seg, f"damaged segment ({item.kind}: {item.message})", item.position)
        if not item.crc_valid:
            raise _damaged(seg, f"damaged segment (CRC mismatch in the batch at offset {item.base_offset})",
                           item.position)
        yield item


# ------------------------------------------------------------------------------------------- the offset map


class OffsetMap:
    """``SkimpyOffsetMap`` as the cleaner uses it: ``slots = memory // 24``, filled to
    ``int(slots * 0.9)`` distinct keys; ``latest`` is the last offset the map covers (-1 when empty).

    With the C accelerator the map is its fixed table (offmap.c): ``slots`` cells of 24 bytes, a 128-bit
    keyed hash (SipHash-2-4, a random key per map) of the key and its offset, so that its memory is the
    dedupe buffer, as the broker's. Without it (the reference) a dict holds keys of up to 16 bytes as they
    are and longer ones as their MD5 digest. Both hold the same keys unless two keys' 128-bit hashes
    collide (the broker takes the same risk with MD5; a keyed hash cannot be aimed at)."""

    def __init__(self, memory: int = DEFAULT_DEDUPE_BUFFER, load_factor: float = LOAD_FACTOR, input_bytes: int = 0):
        self.memory = memory
        self.slots = memory // BYTES_PER_ENTRY
        self.capacity = int(self.slots * load_factor)
        self.entries: dict[bytes, int] = {}
        self.latest = -1
        self.start = 0  # the first offset the map covers (the first dirty offset)
        self.skipped: set[int] = set()  # base offsets of the batches left out as aborted
        self._winners: set[int] | None = None
        c = speedups.C
        # huge pages when the input (``input_bytes``: the dirty range) is larger than the table: then its keys
        # touch most of the table's pages anyway; a small input leaves most of it unmapped instead
        self.table = c.offmap_new(self.slots, os.urandom(16), input_bytes >= memory) \
            if c is not None and self.capacity >= 1 else None

    @property
    def winners(self) -> set[int]:
        """The offsets the map holds: a keyed record mapped by this pass is its key's latest iff its
        offset is one of them (no key to look up)."""
        if self._winners is None:
            self._winners = set(self.entries.values())
        return self._winners

    def __len__(self) -> int:
        if self.table is not None:
            return speedups.C.offmap_len(self.table)
        return len(self.entries)

    def get(self, key: bytes) -> int:
        if self.table is not None:
            return speedups.C.offmap_get(self.table, key)
        if len(key) > _HASHED:
            key = md5(key).digest()
        return self.entries.get(key, -1)

    def put_batch(self, h: BatchHeader, start: int) -> bool:
        """``buildOffsetMapForSegment``'s inner loop over one batch's records: every keyed record at or
        above ``start``; True (and stop) when the map is full before a record."""
        cols = None
        if self.table is not None and h.magic >= 2:
            data, cols = v2_records(h)
            r = speedups.C.offmap_put(self.table, self.capacity, data, h.count, h.base_offset, start)
            if r is not None:
                return r >= 0
        return self.put_records(decode_records(h, h.data) if cols is None else cols, start)

    def put_records(self, cols, start: int) -> bool:
        """:meth:`put_batch` over decoded records (the reference, and v0/v1 messages)."""
        cap = self.capacity
        buf = cols.buffer
        if self.table is not None:
            t, put, size = self.table, speedups.C.offmap_put_key, speedups.C.offmap_len
            for off, ks, ke in zip(cols.offsets, cols.key_starts, cols.key_ends, strict=True):
                if ks < 0 or off < start:
                    continue
                if size(t) >= cap:
                    return True
                put(t, buf[ks:ke], off)
            return False
        d = self.entries
        for off, ks, ke in zip(cols.offsets, cols.key_starts, cols.key_ends, strict=True):
            if ks < 0 or off < start:
                continue
            if len(d) >= cap:
                return True
            k = buf[ks:ke]
            d[k if ke - ks <= _HASHED else md5(k).digest()] = off
        return False

    def update_latest(self, offset: int) -> None:
        if offset > self.latest:
            self.latest = offset


def v2_records(h: BatchHeader) -> tuple:
    """The records' bytes of a v2 batch for the C walks, and their columns when they had to be decoded: an
    uncompressed batch's own bytes (a malformed one is decoded by the caller, for the error), a compressed
    batch's decompressed by :func:`decode_records`."""
    if h.compression == NONE and h.count is not None:
        return memoryview(h.data)[V2_HEADER.size:h.size], None
    cols = decode_records(h, h.data)
    return cols.buffer, cols


# -------------------------------------------------------------------------------------------- transactions


def collect_aborted(txn_lists: list[list], first: int, log_start: int, upper: int) -> list:
    """``LocalLog.collectAbortedTransactions``: from the segment at index ``first`` on, the ``.txnindex``
    entries with ``lastOffset >= log_start`` and ``firstOffset < upper``, until an entry whose last stable
    offset reaches ``upper`` (``TransactionIndex.collectAbortedTxns``)."""
    out = []
    for entries in txn_lists[first:]:
        for t in entries:
            if t.last_offset >= log_start and t.first_offset < upper:
                out.append(t)
            if t.last_stable_offset >= upper:
                return out
    return out


class TxnMeta:
    """``CleanedTransactionMetadata``: state carried across the batches of a pass (one per map build, one
    per group clean). ``kept_aborted`` collects the aborted transactions whose ABORT marker stays."""

    def __init__(self):
        self.committed: set[int] = set()
        self.aborted: dict[int, list] = {}  # producer id -> [AbortedTxn, last batch offset seen or None]
        self._heap: list = []
        self._n = 0
        self.kept_aborted: list | None = None

    def add(self, txns) -> None:
        for t in txns:
            heapq.heappush(self._heap, (t.first_offset, self._n, t))
            self._n += 1

    def _consume(self, offset: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= offset:
            t = heapq.heappop(heap)[2]
            self.aborted.setdefault(t.producer_id, [t, None])

    def on_control(self, h: BatchHeader, ctype: str | None) -> bool:
        """``onControlBatchRead``: True when the marker may be discarded."""
        self._consume(h.last_offset)
        if not h.count:
            return True  # an empty control batch was cleaned before
        if ctype == "ABORT":
            m = self.aborted.pop(h.producer_id, None)
            if m is not None and m[1] is not None:  # data of the transaction was seen: keep the marker
                if self.kept_aborted is not None:
                    self.kept_aborted.append(m[0])
                return False
            return True
        if ctype == "COMMIT":
            if h.producer_id in self.committed:
                self.committed.discard(h.producer_id)
                return False
            return True
        return False

    def on_data(self, h: BatchHeader) -> bool:
        """``onBatchRead``: True when the batch belongs to an aborted transaction."""
        self._consume(h.last_offset)
        if h.is_transactional:
            m = self.aborted.get(h.producer_id)
            if m is not None:
                m[1] = h.last_offset
                return True
            self.committed.add(h.producer_id)
        return False


# ------------------------------------------------------------------------------------------ the filter


class Rules:
    """What one pass decides with: the map, the clock, ``delete.retention.ms``, the last records of the
    active producers ({producer id: (last data offset or None, epoch)}) and the round's end offset."""

    def __init__(self, offset_map: OffsetMap, now: int, delete_retention_ms: int, last_records: dict,
                 upper_round: int):
        self.map = offset_map
        self.now = now
        self.delete_retention_ms = delete_retention_ms
        self.last_records = last_records
        self.upper_round = upper_round

    def last_of_producer(self, h: BatchHeader) -> bool:
        last = self.last_records.get(h.producer_id)
        if last is None:
            return False
        data_offset, epoch = last
        if data_offset is not None:
            return h.last_offset == data_offset
        return h.is_control and h.producer_epoch == epoch


class CleanStats:
    """Counts of one partition's pass (or of one group)."""

    FIELDS = ("records_read", "records_kept", "records_removed", "superseded", "tombstones_kept",
              "tombstones_removed", "keyless", "aborted_records", "markers_kept", "markers_removed",
              "batches_read", "batches_copied", "batches_rewritten", "batches_emptied", "batches_removed",
              "bytes_before", "bytes_after")

    def __init__(self):
        for f in self.FIELDS:
            setattr(self, f, 0)
        self.horizon_set: int | None = None  # deleteHorizonMs this pass wrote into batches
        self.tombstones_until: int | None = None  # the latest horizon of a batch keeping tombstones

    def add(self, o: CleanStats) -> None:
        for f in self.FIELDS:
            setattr(self, f, getattr(self, f) + getattr(o, f))
        for f in ("horizon_set", "tombstones_until"):
            a, b = getattr(self, f), getattr(o, f)
            setattr(self, f, b if a is None else a if b is None else max(a, b))

    def to_json(self) -> dict:
        d = {f: getattr(self, f) for f in self.FIELDS}
        d["horizon_set"] = self.horizon_set
        d["tombstones_kept_until"] = self.tombstones_until
        return d


_CRC = struct.Struct(">I")


def empty_batch(h: BatchHeader) -> bytes:
    """``DefaultRecordBatch.writeEmptyHeader``: the batch's offsets, producer fields, leader epoch, timestamp
    type and max timestamp; no records, no compression, base timestamp -1."""
    attrs = (TIMESTAMP_TYPE_BIT if h.timestamp_type == "log_append" else 0) | \
        (TRANSACTIONAL_BIT if h.is_transactional else 0) | (CONTROL_BIT if h.is_control else 0)
    hdr = bytearray(V2_HEADER.pack(h.base_offset, V2_HEADER.size - 12, h.partition_leader_epoch, 2, 0, attrs,
                                   h.last_offset - h.base_offset, -1, h.max_timestamp, h.producer_id,
                                   h.producer_epoch, h.base_sequence, 0))
    _CRC.pack_into(hdr, CRC_OFFSET, crc32c(memoryview(hdr)[ATTRIBUTES_OFFSET:]))
    return bytes(hdr)


def _rebuild(h: BatchHeader, cols, kept: list[int], horizon: int | None) -> bytes:
    """``buildRetainedRecordsInto``: the kept records in a batch with the original's header fields."""
    lat = h.timestamp_type == "log_append"
    base = h.base_offset
    if h.magic >= 2:
        recs = [(cols.offsets[i] - base, h.max_timestamp if lat else cols.timestamps[i], cols.key(i), cols.value(i),
                 cols.header_list(i)) for i in kept]
        return build_v2_batch(recs, base_offset=base, compression=h.compression,
                              log_append_time=h.max_timestamp if lat else None, producer_id=h.producer_id,
                              producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                              partition_leader_epoch=h.partition_leader_epoch, is_transactional=h.is_transactional,
                              is_control=h.is_control, last_offset_delta=h.last_offset - base,
                              delete_horizon_ms=horizon)
    first = cols.offsets[kept[0]]  # v0/v1: the first kept record's offset is the new base
    recs = [(cols.offsets[i] - first, cols.timestamps[i], cols.key(i), cols.value(i)) for i in kept]
    return build_legacy_batch(recs, base_offset=first, magic=h.magic, compression=h.compression,
                              log_append_time=h.max_timestamp if lat else None)


def _control_type(h: BatchHeader) -> str | None:
    c = control_of(h.data, h)
    return None if c is None else c.get("type")


def filter_batch(h: BatchHeader, rules: Rules, txn: TxnMeta, retain_legacy_deletes: bool,
                 st: CleanStats) -> tuple[bytes, int] | None:
    """One batch of a group being cleaned: the bytes to write for it (the original, a rewritten batch or an
    empty header) and the largest offset they hold for ``FilterResult.maxOffset`` (a rewritten batch: its
    last kept record's), or None when it goes."""
    now = rules.now
    st.batches_read += 1
    st.bytes_before += h.size
    v2 = h.magic >= 2
    if v2 and h.is_control:
        can_discard = txn.on_control(h, _control_type(h))
        discard_records = can_discard and h.has_delete_horizon and h.first_timestamp <= now
    else:
        can_discard = discard_records = txn.on_data(h)
    if v2 and h.producer_id >= 0 and rules.last_of_producer(h):
        retain_empty = True
    else:
        # the round's last batch stays even when empty (its offsets); v0/v1 cannot be empty (Kafka would
        # fail the clean there: such a message is dropped)
        retain_empty = v2 and h.next_offset == rules.upper_round
    marker_for_empty_txn = can_discard and h.is_control
    if discard_records and not retain_empty:
        _count_removed(h, st)
        return None
    recs = _Records(h, rules.map, data_batch=not discard_records and not h.is_control)
    n = len(recs)
    st.records_read += n
    if discard_records:
        keep, kept, tombstones = _NONE_KEPT, 0, 0
    elif h.is_control:
        keep, kept, tombstones = _ALL_KEPT, n, 0
    else:
        retain_deletes = retain_legacy_deletes if not v2 else (not h.has_delete_horizon or now < h.first_timestamp)
        keep, kept, tombstones = _retained(recs.classes(), retain_deletes, st)
    st.records_kept += kept
    st.records_removed += n - kept
    st.tombstones_kept += tombstones
    if discard_records and not h.is_control:
        st.aborted_records += n
    if h.is_control:
        if kept:
            st.markers_kept += 1
        else:
            st.markers_removed += 1
    if kept:
        need_horizon = v2 and (tombstones > 0 or marker_for_empty_txn) and not h.has_delete_horizon
        if kept == n and not need_horizon:
            st.batches_copied += 1
            st.bytes_after += h.size
            horizon = h.first_timestamp if h.has_delete_horizon else None
            if tombstones and horizon is not None:
                st.tombstones_until = horizon if st.tombstones_until is None else max(st.tombstones_until, horizon)
            return h.data, h.last_offset
        if need_horizon:
            horizon = now + rules.delete_retention_ms
            st.horizon_set = horizon
        else:
            horizon = h.first_timestamp if h.has_delete_horizon else None
        if tombstones and horizon is not None:
            st.tombstones_until = horizon if st.tombstones_until is None else max(st.tombstones_until, horizon)
        out = recs.rebuild(keep, horizon)
        st.batches_rewritten += 1
        st.bytes_after += len(out[0])
        return out
    if retain_empty:
        st.batches_emptied += 1
        st.bytes_after += V2_HEADER.size
        return empty_batch(h), h.last_offset
    st.batches_removed += 1
    return None


# What shouldRetainRecord tells apart, one class per record (record_classes; offmap.c's offmap_classes):
KEYLESS = 0  # no key, within the map's range: dropped
SUPERSEDED = 1  # a later offset of its key is in the map: dropped
LATEST = 2  # its key's latest offset (or a key the map does not hold), with a value
LATEST_TOMBSTONE = 3  # ... a tombstone: kept while deletes are retained
BEYOND = 4  # past the map's last offset: kept as it is
BEYOND_TOMBSTONE = 5
_ALL_KEPT = -1  # keep masks: bit c for class c
_NONE_KEPT = 0


def _retained(classes: bytes, retain_deletes: bool, st: CleanStats) -> tuple[int, int, int]:
    """``shouldRetainRecord`` over a data batch's record classes: (the classes kept as a bit mask, records
    kept, tombstones among them)."""
    count = classes.count
    keep = 1 << LATEST | 1 << BEYOND | 1 << BEYOND_TOMBSTONE
    st.keyless += count(KEYLESS)
    st.superseded += count(SUPERSEDED)
    tombstones = count(BEYOND_TOMBSTONE)
    latest_tombstones = count(LATEST_TOMBSTONE)
    if retain_deletes:
        keep |= 1 << LATEST_TOMBSTONE
        tombstones += latest_tombstones
    else:
        st.tombstones_removed += latest_tombstones
    return keep, count(LATEST) + count(BEYOND) + tombstones, tombstones


def record_classes(cols, m: OffsetMap, h: BatchHeader) -> bytes:
    """Each record's class against the map (the reference of offmap.c's ``offmap_classes``)."""
    offs = cols.offsets
    vss = cols.value_starts
    if m.table is None and offs and offs[0] >= m.start and h.last_offset <= m.latest and h.base_offset not in m.skipped:
        # every keyed record of this batch went into the map: it is its key's latest iff the map holds its offset
        w = m.winners
        return bytes(KEYLESS if ks < 0 else SUPERSEDED if o not in w else LATEST if vs >= 0 else LATEST_TOMBSTONE
                     for o, ks, vs in zip(offs, cols.key_starts, vss, strict=True))
    out = bytearray()
    latest = m.latest
    get = m.get
    buf = cols.buffer
    for off, ks, ke, vs in zip(offs, cols.key_starts, cols.key_ends, vss, strict=True):
        if off > latest:  # past the map: kept as it is
            out.append(BEYOND if vs >= 0 else BEYOND_TOMBSTONE)
        elif ks < 0:
            out.append(KEYLESS)
        elif off < get(buf[ks:ke]):
            out.append(SUPERSEDED)
        else:
            out.append(LATEST if vs >= 0 else LATEST_TOMBSTONE)
    return bytes(out)


class _Records:
    """One batch's records for :func:`filter_batch`: a v2 data batch's through offmap.c when the map is the C
    table (classes and the rewritten records from the records' bytes, no Python object per record), else
    decoded into columns (the reference; v0/v1, control batches)."""

    def __init__(self, h: BatchHeader, m: OffsetMap, data_batch: bool):
        self.h, self.m = h, m
        self.data = self.cols = self._classes = None
        if m.table is not None and data_batch and h.magic >= 2:
            data, cols = v2_records(h)
            classes = speedups.C.offmap_classes(m.table, data, h.count, h.base_offset, m.latest)
            if classes is not None:
                self.data, self.cols, self._classes = data, cols, classes
                return
        self.cols = decode_records(h, h.data)

    def __len__(self) -> int:
        return len(self._classes) if self._classes is not None else len(self.cols)

    def classes(self) -> bytes:
        if self._classes is None:
            self._classes = record_classes(self.cols, self.m, self.h)
        return self._classes

    def rebuild(self, keep: int, horizon: int | None) -> tuple[bytes, int]:
        """``buildRetainedRecordsInto``: the records of the classes in ``keep`` in a batch with the original's
        header fields, and the last kept record's offset."""
        h = self.h
        if self.data is not None:
            lat = h.timestamp_type == "log_append"
            r = speedups.C.retained_records(self.data, h.count, self._classes, keep, h.first_timestamp, lat,
                                            h.max_timestamp, horizon)
            if r is not None:
                body, n, base_ts, max_ts, last_delta = r
                return _v2_batch(h, body, n, base_ts, max_ts, horizon), h.base_offset + last_delta
        cols = self.cols if self.cols is not None else decode_records(h, h.data)
        if keep == _ALL_KEPT:
            kept = list(range(len(cols)))
        else:
            kept = [i for i, c in enumerate(self.classes()) if keep >> c & 1]
        return _rebuild(h, cols, kept, horizon), cols.offsets[kept[-1]]


def _v2_batch(h: BatchHeader, body: bytes, n: int, base_ts: int, max_ts: int, horizon: int | None) -> bytes:
    """``build_v2_batch`` around records already encoded (``n`` of them, deltas from ``base_ts``): the
    header fields of ``h``, compressed with its codec."""
    if h.compression != NONE:
        body = compress(h.compression, body, None, 2)
    attrs = h.compression & COMPRESSION_MASK
    if h.timestamp_type == "log_append":
        attrs |= TIMESTAMP_TYPE_BIT
        max_ts = h.max_timestamp
    if h.is_transactional:
        attrs |= TRANSACTIONAL_BIT
    if h.is_control:
        attrs |= CONTROL_BIT
    if horizon is not None:
        attrs |= DELETE_HORIZON_BIT
    hdr = bytearray(V2_HEADER.pack(h.base_offset, V2_HEADER.size - 12 + len(body), h.partition_leader_epoch, 2, 0,
                                   attrs, h.last_offset - h.base_offset, base_ts, max_ts, h.producer_id,
                                   h.producer_epoch, h.base_sequence, n))
    _CRC.pack_into(hdr, CRC_OFFSET, crc32c(body, crc32c(memoryview(hdr)[ATTRIBUTES_OFFSET:])))
    return bytes(hdr) + body


def _count_removed(h: BatchHeader, st: CleanStats) -> None:
    st.batches_removed += 1
    n = h.count if h.count is not None else 1
    st.records_read += n
    st.records_removed += n
    if h.is_control:
        st.markers_removed += 1
    else:
        st.aborted_records += n


# --------------------------------------------------------------------------------------------- grouping


def group_segments(segs: list, sizes: list[tuple[int, int, int]], max_size: int, max_index_size: int,
                   first_uncleanable: int) -> list[list[int]]:
    """``groupSegmentsBySize``: indexes into ``segs`` (each with ``sizes[i]`` = (log, offset index, time index
    bytes)) in groups whose log bytes stay within ``segment.bytes``, each index within
    ``segment.index.bytes``, and whose offsets span at most ``Integer.MAX_VALUE`` (estimated by the next
    segment's base offset, or the first uncleanable offset for the last)."""
    groups: list[list[int]] = []
    i, n = 0, len(segs)
    while i < n:
        group = [i]
        log, idx, tidx = sizes[i]
        i += 1
        while i < n:
            s_log, s_idx, s_tidx = sizes[i]
            last = segs[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable - 1
            if not (log + s_log <= max_size and idx + s_idx <= max_index_size and tidx + s_tidx <= max_index_size
                    and (s_log == 0 or last - segs[group[0]].base_offset <= INT_MAX)):
                break
            group.append(i)
            log, idx, tidx = log + s_log, idx + s_idx, tidx + s_tidx
            i += 1
        groups.append(group)
    return groups


# ------------------------------------------------------------------------------------------ the output


class CleanedSegment:
    """The new segment of one group: ``<base>.log.cleaned`` and its indexes (``dry_run``: sizes only).
    Index entries follow ``LogSegment.append``'s rule batch by batch (:meth:`add`); the ``.txnindex``
    holds the aborted transactions whose ABORT marker was kept."""

    KINDS = ("log", "index", "timeindex", "txnindex")

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int, max_index_bytes: int,
                 dry_run: bool):
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index = IndexBuilder(base_offset, index_interval_bytes, max_index_bytes)
        self.aborted: list = []
        self.size = 0
        self.dry_run = dry_run
        self._buf: list[bytes] = []
        self._buffered = 0
        self._chunk: list[bytes] = []
        self._fd: int | None = None
        self.paths: dict[str, Path] = {}

    def path(self, kind: str, suffix: str = "cleaned") -> Path:
        return self.directory / fn.segment_file(self.base_offset, kind, suffix)

    def open(self) -> None:
        if self.dry_run:
            return
        p = self.paths["log"] = self.path("log")
        self._fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def add(self, out: tuple[bytes, int], h: BatchHeader) -> None:
        """One output batch (``h``: the source batch's header; a rewritten batch's own header is read from
        its bytes). Its index entries follow Kafka 4.4's ``LogSegment.append``, which walks the appended
        batches one by one: an offset entry ``(batch.lastOffset, its position)`` when more than
        ``index.interval.bytes`` were appended since the last entry, the time index taking the running
        maximum timestamp and the last offset of the batch holding it (the rule of recovery too)."""
        data = out[0]
        if data is h.data:
            last, ts = h.last_offset, h.max_timestamp
        else:
            nh = parse_header(data, 0, check_crc=False)
            last, ts = nh.last_offset, nh.max_timestamp
        n = len(data)
        self.index.on_batch(self.size, n, last, ts)
        self.size += n
        self._chunk.append(data)

    def end_chunk(self) -> None:
        """What one ``filterTo`` call kept (one read buffer of source batches), written as one piece."""
        if not self._chunk:
            return
        data = b"".join(self._chunk) if len(self._chunk) > 1 else self._chunk[0]
        self._chunk = []
        if self._fd is not None:
            self._buf.append(data)
            self._buffered += len(data)
            if self._buffered >= (1 << 20):
                self._flush()

    def _flush(self) -> None:
        if self._buf:
            data = b"".join(self._buf)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            self._buf, self._buffered = [], 0

    def finish(self, mtime_ns: int | None) -> None:
        """``onBecomeInactiveSegment`` + flush: the final time-index entry, the index files, fsync, and
        the last source segment's modification time (``setLastModified``) on log and indexes."""
        self.end_chunk()
        self.index.finish()
        if self.dry_run:
            return
        self._flush()
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        files = {"index": self.index.offset_index_bytes(), "timeindex": self.index.time_index_bytes()}
        if self.aborted:
            files["txnindex"] = b"".join(encode_aborted_txn(t.producer_id, t.first_offset, t.last_offset,
                                                            t.last_stable_offset) for t in self.aborted)
        for kind, data in files.items():
            p = self.paths[kind] = self.path(kind)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        if mtime_ns is not None:
            for kind in ("log", "index", "timeindex"):
                os.utime(self.paths[kind], ns=(mtime_ns, mtime_ns))

    def discard(self) -> None:
        """Remove what was written (an aborted pass)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for kind in self.KINDS:
            try:
                os.unlink(self.path(kind))
            except FileNotFoundError:
                pass

    def files_size(self) -> int:
        n = self.size + len(self.index.offset_entries) * 8 + len(self.index.time_entries) * 12
        return n + 34 * len(self.aborted)
