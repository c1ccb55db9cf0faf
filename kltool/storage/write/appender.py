"""Appending records to a topic the way a producer and a leader broker do, offline.

:class:`Appender` sits on top: it takes records (key, value, headers, timestamp, partition), picks
partitions (murmur2 for keys, sticky or round-robin for null keys), cuts batches like the producer
(``batch.size``), and appends **all or nothing**: each batch goes to its partition's
:class:`~kltool.storage.write.writer.PartitionWriter` as soon as it is built (straight into the segment
files, no second copy), and nothing else changes before :meth:`Appender.commit`. Bad input (or any
error, or an interrupt) before the commit undoes every partition: the writers cut the segments back
to their old ends and remove the segment files they created. The commit first makes the data of every
partition durable (fsync), and only then replaces index, snapshot and checkpoint files. A crash
before that leaves whole batches after the old log end (at worst a torn one at the end), which a
broker's recovery and ``kltool verify --repair`` handle; see :mod:`kltool.storage.write.writer`. The log
dir's ``.kafka_cleanshutdown`` is held away while the append writes (put back when it is finished or
undone), so that after a crash the broker recovers the segments instead of trusting them.
"""

from __future__ import annotations

import os
import random
import struct
from dataclasses import dataclass
from pathlib import Path

from ...errors import BrokerLockHeld, CorruptDataError, KltoolError, UsageError
from ...format import build_batch, speedups
from ...format import names as fn
from ...format.batch import (
    V2_OVERHEAD,
    build_end_txn_marker,
    build_v2_batch,
    encode_control_key,
    encode_end_txn_value,
)
from ...format.checkpoints import encode_offset_checkpoint, parse_offset_checkpoint
from ...format.compression import CODEC_IDS, NONE, ZSTD
from ...format.names import CLEAN_SHUTDOWN_FILE
from ...format.partitioner import default_partition
from ...format.records import LOG_OVERHEAD
from ...format.topics import parse_partition_dir_name, validate_topic
from ...jsonl import SKIP, LineError, record_blocks
from ..fs import (
    LOCK_FILE_NAME,
    BrokerLock,
    atomic_write,
    fsync_dir,
    held_message,
    lock_holder_present,
    read_small_file,
)
from ..topic_config import load_topic_config, load_topic_entry, validate_config
from .writer import PartitionWriter, WriterStats, _now_ms

__all__ = ["DEFAULT_BATCH_BYTES", "AppendOptions", "Appender", "AppendResult", "PartitionResult",
           "topic_partition_dirs"]

DEFAULT_BATCH_BYTES = 16384  # the producer's batch.size
DEFAULT_MEMORY_LIMIT = 64 << 20
INT32_MAX = 2**31 - 1
_SIZE = struct.Struct(">i")

# --------------------------------------------------------------------------------------------- appender


def topic_partition_dirs(logdir, topic: str) -> dict[int, Path]:
    """``{partition: path}`` of the topic's (normal, not -delete/-future/-stray) partition dirs."""
    out = {}
    prefix = topic + "-"
    try:
        names = os.listdir(logdir)
    except FileNotFoundError:
        raise UsageError("no such log directory", path=logdir) from None
    for name in names:
        if not name.startswith(prefix):
            continue
        try:
            t, p, kind, _u = parse_partition_dir_name(name)
        except CorruptDataError:
            continue
        if t == topic and kind is None and p >= 0 and (Path(logdir) / name).is_dir():
            out[p] = Path(logdir) / name
    return out


@dataclass
class AppendOptions:
    magic: int = 2
    compression: str | None = None  # none|gzip|snappy|lz4|zstd; None = the topic's compression.type
    level: int | None = None  # None = the topic's compression.<codec>.level
    batch_bytes: int = DEFAULT_BATCH_BYTES  # uncompressed bytes per batch, like the producer's batch.size
    batch_records: int | None = None
    timestamp_type: str | None = None  # create | log_append; None = the topic's message.timestamp.type
    append_time: int | None = None  # the broker clock for LogAppendTime and markers (default: now)
    producer_id: int = -1
    producer_epoch: int | None = None
    base_sequence: int | None = None
    transactional: bool = False
    end_transaction: str | None = None  # commit | abort
    coordinator_epoch: int = 0
    leader_epoch: int | None = None
    partitioner: str = "sticky"  # for records without a key: sticky | round-robin
    memory_limit: int = DEFAULT_MEMORY_LIMIT  # built batches held over all partitions before they are written
    dry_run: bool = False


@dataclass
class PartitionResult:
    partition: int
    path: Path
    records: int  # data records (markers not counted)
    markers: int  # end-transaction markers
    stats: WriterStats  # offsets, batches, bytes, rolled segments


@dataclass
class AppendResult:
    topic: str
    partitions: list[PartitionResult]
    dry_run: bool

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def markers(self) -> int:
        return sum(p.markers for p in self.partitions)

    @property
    def batches(self) -> int:
        return sum(p.stats.batches for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.stats.bytes for p in self.partitions)

    @property
    def segments_rolled(self) -> int:
        return sum(len(p.stats.rolled) for p in self.partitions)


class _Part:
    """One partition's state during an append: its writer, the batch being filled."""

    __slots__ = ("partition", "writer", "next_offset", "records", "lines", "est", "count",
                 "next_seq", "epoch", "markers")

    def __init__(self, partition: int, writer: PartitionWriter):
        self.partition = partition
        self.writer = writer
        self.next_offset = writer.log_end_offset
        self.records: list = []
        self.lines: list = []
        self.est = 0
        self.count = 0
        self.next_seq = -1
        self.epoch = -1
        self.markers = 0


_TS_LIMIT = 2**63
_RECORD_OVERHEAD_EST = {2: 11, 1: 34, 0: 26}  # bytes per record beyond key, value and headers
_BATCH_OVERHEAD = {2: V2_OVERHEAD, 1: 0, 0: 0}


class Appender:
    """Append records to a topic of a log dir, all or nothing (see the module docstring).

    >>> with Appender("/var/lib/kafka/data", "orders") as a:       # doctest: +SKIP
    ...     a.add(b"key", b"value", [("h", b"v")], timestamp=1700000000000)
    ...     result = a.commit()

    Errors are :class:`~kltool.errors.KltoolError`; ``line`` (given to :meth:`add`) and ``source`` (the
    input's name) are put in front of their messages.
    """

    def __init__(self, logdir, topic: str, options: AppendOptions | None = None, *, source: str | None = None,
                 lock: bool = True):
        self.logdir = Path(logdir)
        self.topic = validate_topic(topic)
        self.options = options or AppendOptions()
        self.source = source
        self._lock = None
        self._parts: dict[int, _Part] = {}
        self._rr = 0
        self._sticky: int | None = None
        self._random = random.Random()
        self._key_partitions: dict[bytes, int] = {}  # murmur2 results of recent keys
        self._committed = False
        self._finished = False  # every partition closed: the log dir is as a clean shutdown leaves it
        self._clean_shutdown: tuple[bytes, os.stat_result] | None = None  # the marker, held away while writing
        self._mem = 0  # bytes the writers hold, not yet written
        self._last_partition: int | None = None  # where add_items put its last record (add_run continues it)
        if not self.logdir.is_dir():
            raise UsageError("no such log directory", path=self.logdir)
        self.dirs = topic_partition_dirs(self.logdir, self.topic)
        if not self.dirs:
            raise UsageError(f"unknown topic {self.topic!r}: no partition directory in this log dir (create it "
                             f"with kltool create)", path=self.logdir)
        entry = load_topic_entry(self.logdir, self.topic) or {}
        self.num_partitions = max(int(entry.get("partitions", 0) or 0), max(self.dirs) + 1)
        self.available = sorted(self.dirs)
        self.config = load_topic_config(self.logdir, self.topic)
        self._check_options()
        if lock and not self.options.dry_run:
            self._lock = BrokerLock(self.logdir).acquire()
        elif lock and lock_holder_present(self.logdir):
            raise BrokerLockHeld(held_message(self.logdir / LOCK_FILE_NAME),
                                 path=self.logdir / LOCK_FILE_NAME)

    # -------------------------------------------------------------------------------------- options

    def _check_options(self) -> None:
        o = self.options
        self._check_codec()
        self._check_timestamps()
        if o.batch_bytes < 1:
            raise UsageError("the batch size in bytes must be positive")
        if o.batch_records is not None and not 1 <= o.batch_records <= INT32_MAX:
            raise UsageError("the batch size in records must be positive")
        self._check_producer()
        if o.partitioner not in ("sticky", "round-robin"):
            raise UsageError("the partitioner for null keys must be sticky or round-robin")
        if o.leader_epoch is not None and not 0 <= o.leader_epoch <= INT32_MAX:
            raise UsageError("the leader epoch must be in [0, 2147483647]")
        self.max_batch = min(self.config.max_message_bytes, self.config.segment_bytes)
        # hot-path copies for add()
        self._magic = o.magic
        self._rec_overhead = _RECORD_OVERHEAD_EST[o.magic]
        self._batch_overhead = _BATCH_OVERHEAD[o.magic]
        self._batch_bytes = o.batch_bytes
        self._batch_records = o.batch_records if o.batch_records is not None else INT32_MAX
        self._sticky_mode = o.partitioner == "sticky"

    def _check_codec(self) -> None:
        """The message format and the compression codec and level (the options', else the topic's)."""
        o = self.options
        cfg = self.config
        if o.magic not in (0, 1, 2):
            raise UsageError(f"magic must be 0, 1 or 2, not {o.magic}")
        if o.compression is None:
            ct = cfg.compression_type
            name = "none" if ct in ("producer", "uncompressed") else ct
        else:
            name = o.compression.lower()
            if name not in CODEC_IDS:
                raise UsageError(f"unknown compression {o.compression!r} (none, gzip, snappy, lz4, zstd)")
        self.codec = CODEC_IDS[name]
        self.codec_name = name
        self.level = o.level if o.level is not None else cfg.compression_level(name)
        if o.level is not None:
            if name in ("gzip", "lz4", "zstd"):
                validate_config(f"compression.{name}.level", str(o.level))
            elif name in ("none", "snappy"):
                raise UsageError(f"--compression-level does not apply to {name}")
        if self.codec == ZSTD and o.magic < 2:
            raise UsageError("zstd needs magic 2 (Kafka rejects zstd in v0/v1 messages)")

    def _check_timestamps(self) -> None:
        """CreateTime or LogAppendTime (the option, else the topic's), and the append time."""
        o = self.options
        cfg = self.config
        if o.timestamp_type is None:
            self.log_append = cfg.log_append_time
        elif o.timestamp_type in ("create", "log_append"):
            self.log_append = o.timestamp_type == "log_append"
        else:
            raise UsageError(f"timestamp type must be create or log_append, not {o.timestamp_type!r}")
        if self.log_append and o.magic == 0:
            raise UsageError("magic 0 has no timestamps (LogAppendTime needs magic 1 or 2)")
        self.append_time = o.append_time if o.append_time is not None else _now_ms()
        if self.append_time < 0:
            raise UsageError("the append time must not be negative")

    def _check_producer(self) -> None:
        """Producer id, epoch, sequences and transactions: magic 2 only, and the epoch and sequence need an id."""
        o = self.options
        uses_producer = (o.producer_id >= 0 or o.transactional or o.end_transaction or o.producer_epoch is not None
                         or o.base_sequence is not None)
        if uses_producer and o.magic < 2:
            raise UsageError("producer ids, sequences and transactions need magic 2")
        if (o.transactional or o.end_transaction or o.producer_epoch is not None or o.base_sequence is not None) \
                and o.producer_id < 0:
            raise UsageError("a producer epoch, sequences and transactions need a producer id (--producer-id)")
        if o.producer_epoch is not None and not 0 <= o.producer_epoch <= 32767:
            raise UsageError("the producer epoch must be in [0, 32767]")
        if o.base_sequence is not None and not 0 <= o.base_sequence <= INT32_MAX:
            raise UsageError("the base sequence must be in [0, 2147483647]")
        if o.end_transaction not in (None, "commit", "abort"):
            raise UsageError("the transaction end must be commit or abort")

    def _err(self, msg: str, line: int | None) -> UsageError:
        return UsageError(f"line {line}: {msg}" if line is not None else msg, path=self.source)

    # --------------------------------------------------------------------------------- partitions

    def _part(self, partition: int, line: int | None = None) -> _Part:
        pa = self._parts.get(partition)
        if pa is not None:
            return pa
        path = self.dirs.get(partition)
        if path is None:
            if not 0 <= partition < self.num_partitions:
                raise self._err(f"partition {partition} does not exist: topic {self.topic} has "
                                f"{self.num_partitions} partitions", line)
            raise self._err(f"partition {partition} of topic {self.topic} is not in this log dir", line)
        o = self.options
        if not o.dry_run and not self._parts:
            self._hold_clean_shutdown()
        try:
            w = PartitionWriter(path, config=self.config, leader_epoch=o.leader_epoch, dry_run=o.dry_run,
                                now_ms=self.append_time)
        except KltoolError as e:
            if e.path is None:
                e.path = path
            raise
        pa = _Part(partition, w)
        if o.producer_id >= 0:
            st = w.producer(o.producer_id)
            epoch = o.producer_epoch if o.producer_epoch is not None else (st.epoch if st and st.epoch >= 0 else 0)
            if st is not None and 0 <= epoch < st.epoch:
                raise self._err(f"producer {o.producer_id} already has epoch {st.epoch} in partition {partition}; "
                                f"epochs only grow (--producer-epoch)", None)
            if o.base_sequence is not None:
                seq = o.base_sequence
            elif st is not None and st.epoch == epoch and st.last_sequence >= 0:
                seq = 0 if st.last_sequence == INT32_MAX else st.last_sequence + 1
            else:
                seq = 0
            pa.epoch, pa.next_seq = epoch, seq
            if st is not None and st.current_txn_first_offset is not None and not o.transactional and not o.end_transaction:
                raise self._err(f"producer {o.producer_id} has an open transaction in partition {partition} (from "
                                f"offset {st.current_txn_first_offset}): append with --transactional, or end it with "
                                f"--end-transaction commit|abort", None)
        self._parts[partition] = pa
        return pa

    def choose_partition(self, key: bytes | None, line: int | None = None) -> int:
        """The Java producer's choice: murmur2 of the key, else sticky / round-robin."""
        if key is not None:
            if type(key) is not bytes:
                return default_partition(bytes(key), self.num_partitions)
            p = self._key_partitions.get(key)
            if p is None:
                if len(self._key_partitions) >= 1 << 16:
                    self._key_partitions.clear()
                p = self._key_partitions[key] = default_partition(key, self.num_partitions)
            return p
        if self.options.partitioner == "round-robin":
            p = self.available[self._rr % len(self.available)]
            self._rr += 1
            return p
        if self._sticky is None:
            self._sticky = self._random.choice(self.available)
        return self._sticky

    # ------------------------------------------------------------------------------------ records

    def add(self, key: bytes | None, value: bytes | None, headers=(), timestamp: int | None = None,
            partition: int | None = None, *, line: int | None = None) -> int:
        """Queue one record; returns its partition. Nothing is written before :meth:`commit`.
        ``key``, ``value`` and header values are bytes or None, header keys str or bytes."""
        if timestamp is None:
            timestamp = _now_ms()
        elif not -1 <= timestamp < _TS_LIMIT:
            raise self._err(f"invalid timestamp {timestamp} (epoch milliseconds; -1 means none)", line)
        est = self._rec_overhead
        if key is not None:
            est += len(key)
        if value is not None:
            est += len(value)
        if headers:
            if self._magic < 2:
                raise self._err("headers need magic 2", line)
            for hk, hv in headers:
                est += len(hk) + (len(hv) if hv is not None else 0) + 2
        else:
            headers = ()
        if partition is None:
            partition = self.choose_partition(key, line)
            sticky = key is None and self._sticky_mode
        else:
            if partition < 0:
                raise self._err(f"invalid partition {partition}", line)
            sticky = False
        pa = self._parts.get(partition)
        if pa is None:
            pa = self._part(partition, line)
        recs = pa.records
        if recs and (pa.est + est > self._batch_bytes or len(recs) >= self._batch_records):
            self._flush(pa)
            if sticky:  # the batch is full: the sticky partitioner picks a new partition for this record
                partition = self.choose_partition(None, line)
                pa = self._parts.get(partition) or self._part(partition, line)
                if pa.records and (pa.est + est > self._batch_bytes or len(pa.records) >= self._batch_records):
                    self._flush(pa)
            recs = pa.records
        if not recs:
            pa.est = self._batch_overhead
        recs.append((len(recs), timestamp, key, value, headers))
        pa.lines.append(line)
        pa.est += est
        return partition

    def add_run(self, items: list, i: int, partition: int, override: int | None, first_line: int,
                skip) -> tuple[int, int]:
        """:meth:`add` for parsed JSON lines ``items[i:]`` (``_speedups.parse_json_lines``' output: record
        tuples, None for blank lines, ``skip`` for lines that are not records) in one call of the C
        accelerator, as long as they go to ``partition`` (``override``, else their own) and fit its
        open batch; ``items[j]`` is input line ``first_line + j``. A record without a timestamp gets
        the time of this call. Returns (index of the first item not done, lines skipped); the caller
        gives that item to :meth:`add`. Items done may be replaced by None (their tuples become the
        records). Without the accelerator, or before ``partition`` is open: (i, 0)."""
        c = speedups.C
        pa = self._parts.get(partition)
        if c is None or pa is None:
            return i, 0
        i, pa.est, skipped = c.fill_records(items, i, pa.records, pa.lines, partition, override, first_line, _now_ms(),
                                            self._rec_overhead, self._batch_overhead, pa.est, self._batch_bytes,
                                            self._batch_records, self._magic >= 2, skip)
        return i, skipped

    def add_lines(self, stream, fmt: str = "json", key_separator: bytes | None = None, partition: int | None = None,
                  progress=None, ignore_unknown: bool = False) -> int:
        """Queue the records of a binary stream of JSON lines (``fmt="json"``) or text lines (``"text"``,
        :func:`kltool.jsonl.parse_text_record`), every one to ``partition`` if given; returns the number
        of lines skipped (not data records). A bad line (an unknown field too, unless ``ignore_unknown``)
        raises UsageError naming it.
        ``progress(n)`` is told the bytes read."""
        import gc

        # Millions of short-lived tuples and no reference cycles: the cyclic GC's passes over them would
        # cost a quarter of the parse, so it waits until the input is read.
        enabled = gc.isenabled()
        gc.disable()
        skipped = 0
        try:
            for first, items, nbytes in record_blocks(stream, fmt, key_separator, ignore_unknown):
                skipped += self.add_items(items, first, partition)
                if progress is not None:
                    progress(nbytes)
        except LineError as e:
            raise self._err(e.message, e.lineno) from None
        finally:
            if enabled:
                gc.enable()
        return skipped

    def add_items(self, items: list, first_line: int, partition: int | None = None) -> int:
        """Queue parsed input lines (:func:`kltool.jsonl.record_blocks`' items: record tuples, None, SKIP),
        ``items[j]`` being input line ``first_line + j``; runs of plain records that go to the partition
        of the record before them are queued in one call (:meth:`add_run`), the others by :meth:`add`.
        Returns the number of lines skipped."""
        add = self.add
        add_run = self.add_run
        skipped = 0
        last = self._last_partition
        k = 0
        n = len(items)
        while k < n:
            if last is not None:
                k, sk = add_run(items, k, last, partition, first_line, SKIP)
                skipped += sk
                if k >= n:
                    break
            rec = items[k]
            k += 1
            if rec is None:
                continue
            if rec is SKIP:
                skipped += 1
                continue
            key, value, headers, ts, part = rec
            last = add(key, value, headers, ts, partition if partition is not None else part, line=first_line + k - 1)
        self._last_partition = last
        return skipped

    def _build(self, pa: _Part, recs: list, base_offset: int, lines: list) -> bytes:
        try:
            return self._build1(pa, recs, base_offset)
        except ValueError as e:  # e.g. timestamps more than 2^63 ms apart in one batch
            raise self._err(f"cannot build a batch: {e}", lines[0]) from None

    def _build1(self, pa: _Part, recs: list, base_offset: int) -> bytes:
        o = self.options
        if o.magic == 2:
            return build_v2_batch(recs, base_offset=base_offset, compression=self.codec, level=self.level,
                                  log_append_time=self.append_time if self.log_append else None,
                                  producer_id=o.producer_id, producer_epoch=pa.epoch if o.producer_id >= 0 else -1,
                                  base_sequence=pa.next_seq if o.producer_id >= 0 else -1,
                                  partition_leader_epoch=pa.writer.leader_epoch, is_transactional=o.transactional)
        return build_batch(recs, base_offset=base_offset, magic=o.magic, compression=self.codec, level=self.level,
                           log_append_time=self.append_time if self.log_append else None)

    def _flush(self, pa: _Part, recs: list | None = None, lines: list | None = None) -> None:
        """Build the pending records of ``pa`` into a batch (split in halves when the batch is over
        ``max.message.bytes``) and queue it."""
        top = recs is None
        if top:
            recs, lines = pa.records, pa.lines
            pa.records, pa.lines, pa.est = [], [], 0
            if not recs:
                return
        data = self._build(pa, recs, pa.next_offset, lines)
        if self._too_large(data):
            if len(recs) > 1:
                half = len(recs) // 2
                first, second = recs[:half], [(i, *r[1:]) for i, r in enumerate(recs[half:])]
                self._flush(pa, first, lines[:half])
                self._flush(pa, second, lines[half:])
                return
            size = self._largest(data)
            limit = "max.message.bytes" if self.max_batch == self.config.max_message_bytes else "segment.bytes"
            raise self._err(f"record too large: its batch is {size} bytes, more than {limit} "
                            f"({self.max_batch})", lines[0])
        self._queue(pa, data, len(recs))
        pa.count += len(recs)
        if pa.partition == self._sticky:
            self._sticky = None  # the sticky partitioner moves on once a batch is full

    def _too_large(self, data: bytes) -> bool:
        if self.options.magic == 2 or self.codec != NONE:
            return len(data) > self.max_batch
        return self._largest(data) > self.max_batch

    @staticmethod
    def _largest(data: bytes) -> int:
        """The largest shallow batch (v0/v1 uncompressed: message) in ``data``."""
        pos = best = 0
        while pos + LOG_OVERHEAD <= len(data):
            size = _SIZE.unpack_from(data, pos + 8)[0] + LOG_OVERHEAD
            best = max(best, size)
            pos += size
        return best

    def _queue(self, pa: _Part, data: bytes, nrecs: int) -> None:
        o = self.options
        pa.next_offset += nrecs
        if o.producer_id >= 0:
            s = pa.next_seq + nrecs
            pa.next_seq = s - INT32_MAX - 1 if s > INT32_MAX else s
        w = pa.writer
        held = w.buffered
        w.append(data)  # in a dry run the writer computes offsets, rolls and indexes, writes nothing
        self._mem += w.buffered - held
        if self._mem > o.memory_limit:  # many partitions, each holding part of a write block
            for p in self._parts.values():
                p.writer.flush()
            self._mem = 0

    def _add_markers(self) -> None:
        o = self.options
        if not o.end_transaction:
            return
        commit = o.end_transaction == "commit"
        if any(pa.count for pa in self._parts.values()) and not o.transactional:
            raise UsageError("records with --end-transaction must be transactional (--transactional)")
        # The coordinator writes a marker to every partition of the transaction: those written now and
        # those where the producer's transaction is still open from before.
        targets = []
        for p in self.available:
            pa = self._part(p)
            st = pa.writer.producer(o.producer_id)
            if pa.count or (st is not None and st.current_txn_first_offset is not None):
                targets.append(pa)
        if not targets:
            raise UsageError(f"producer {o.producer_id} has no open transaction in topic {self.topic}")
        for pa in sorted(targets, key=lambda x: x.partition):
            ts = self.append_time
            if self.log_append:
                rec = (0, ts, encode_control_key(1 if commit else 0), encode_end_txn_value(o.coordinator_epoch), ())
                data = build_v2_batch([rec], base_offset=pa.next_offset, log_append_time=ts,
                                      producer_id=o.producer_id, producer_epoch=pa.epoch,
                                      partition_leader_epoch=pa.writer.leader_epoch, is_transactional=True,
                                      is_control=True)
            else:
                data = build_end_txn_marker(offset=pa.next_offset, commit=commit, producer_id=o.producer_id,
                                            producer_epoch=pa.epoch, coordinator_epoch=o.coordinator_epoch,
                                            timestamp=ts, partition_leader_epoch=pa.writer.leader_epoch)
            seq = pa.next_seq
            self._queue(pa, data, 1)
            pa.next_seq = seq  # markers carry no sequence
            pa.markers += 1

    def commit(self, progress=None) -> AppendResult:
        """Build the last batches and markers, make every partition's data durable, then finish each
        partition (index files, snapshots, checkpoints); in a dry run only compute it. An error before
        the data is durable undoes the whole append. ``progress(n)`` is told the bytes of each
        partition made durable."""
        if self._committed:
            raise ValueError("already committed")
        try:
            for pa in list(self._parts.values()):
                self._flush(pa)
            self._add_markers()
            parts = sorted(self._parts.values(), key=lambda x: x.partition)
            for pa in parts:
                pa.writer.prepare()
                if progress is not None:
                    progress(pa.writer.stats.bytes)
            self._committed = True  # every batch is durable: from here on nothing is undone
            for pa in parts:
                pa.writer.close()
            if not self.options.dry_run:
                self._advance_high_watermarks(parts)
            self._finished = True
        finally:
            self.close()
        parts = [PartitionResult(p, pa.writer.path, pa.count, pa.markers, pa.writer.stats)
                 for p, pa in sorted(self._parts.items()) if pa.count or pa.markers]
        return AppendResult(self.topic, parts, self.options.dry_run)

    def _advance_high_watermarks(self, parts) -> None:
        """A partition whose ``replication-offset-checkpoint`` entry was its log end offset (everything
        committed) gets the new log end: the records appended are committed as a single-replica leader's
        are (the broker's high watermark reaches them as soon as it leads the partition). Otherwise the
        offline changes that stop at the high watermark (retention, compact, the last stable offset) would
        treat kltool's own records as unreplicated. A lower entry (an unreplicated tail) stays as it is."""
        path = self.logdir / fn.REPLICATION_OFFSET_CHECKPOINT
        try:
            hws = parse_offset_checkpoint(read_small_file(path).decode("utf-8"), path=str(path))
        except (OSError, UnicodeDecodeError, KltoolError, ValueError):
            return  # none, or damaged (kltool verify reports it): not ours to rewrite
        changed = False
        for pa in parts:
            key = (self.topic, pa.partition)
            w = pa.writer
            if hws.get(key) == w.start_offset and w.leo > w.start_offset:
                hws[key] = w.leo
                changed = True
        if changed:
            atomic_write(path, encode_offset_checkpoint(hws).encode("utf-8"))

    @property
    def pending_records(self) -> int:
        return sum(pa.count + len(pa.records) for pa in self._parts.values())

    def close(self) -> None:
        """Release everything. Without a :meth:`commit` (or when it failed before the data was
        durable) the append is undone: every partition is left as it was."""
        try:
            for pa in self._parts.values():
                pa.writer.abort(undo=not self._committed)
            if self._clean_shutdown is not None and (self._finished or not self._committed):
                data, st = self._clean_shutdown  # finished, or undone: the log dir is as it was left
                atomic_write(self.logdir / CLEAN_SHUTDOWN_FILE, data, like=st)
                self._clean_shutdown = None
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def _hold_clean_shutdown(self) -> None:
        """Take the broker's ``.kafka_cleanshutdown`` away (kept in memory) before the first byte is
        written, as a starting broker removes it: if kltool dies in the middle, the broker then
        recovers the segments written (cuts a torn tail, rebuilds indexes) instead of trusting them.
        :meth:`close` puts it back, byte for byte, once the append is finished or undone."""
        path = self.logdir / CLEAN_SHUTDOWN_FILE
        try:
            data = path.read_bytes()
            st = path.stat()
        except FileNotFoundError:
            return
        path.unlink()
        fsync_dir(self.logdir)
        self._clean_shutdown = (data, st)

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
