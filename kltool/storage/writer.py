"""Writing to a partition the way a leader broker does (reference §5.4-5.5, §6, §7, §11).

:class:`PartitionWriter` appends whole batches (bytes from :func:`kltool.format.build_batch`) to one
partition directory:

* it opens the **active segment** (the last ``.log``), walks it once (header only) and refuses to write
  after damage (a torn tail must be repaired first); the log end offset (LEO) is where offsets go on;
* it **resumes** the segment's :class:`~kltool.storage.index_builder.IndexBuilder` from the existing
  ``.index``/``.timeindex`` (``IndexBuilder.resume``: ``bytesSinceLastIndexEntry`` = 0, as after a broker
  restart) when they are consistent with the log, else from a rebuild by the recovery rule;
* each batch is one append call (``LogSegment.append``: an index entry when more than
  ``index.interval.bytes`` were written since the last one; the time index keeps the running maximum);
* it **rolls** before a batch exactly when ``LogSegment.shouldRoll`` does (§7): the segment would pass
  ``segment.bytes``; the batch's max timestamp is more than ``segment.ms`` after the segment's first
  batch; an index is full; or the batch's last offset does not fit a relative offset. The old segment
  gets its final time-index entry and trimmed indexes; the new one is named by its base offset (the
  LEO), and a producer snapshot named by it is written (``UnifiedLog.roll``);
* it keeps the **producer state** (``ProducerStateManager``): loaded from the latest snapshot at or
  below the LEO and replayed from there, updated by every batch with a producer id; ABORT markers add
  ``.txnindex`` entries (``lastStableOffset`` by the broker's rule);
* :meth:`PartitionWriter.close` does what a broker's clean shutdown leaves behind: trimmed indexes with
  the final time-index entry, a producer snapshot at the LEO (stray older ones removed, as the broker's
  loader does), the ``leader-epoch-checkpoint`` entry for a new epoch.

Durability: batches are written with ``os.write`` to the ``.log`` (opened for appending) and fsynced at
each roll and at close; index, snapshot and checkpoint files are replaced atomically (:func:`atomic_write`)
after the data they describe is durable. An interrupted append therefore leaves at worst a torn batch at
the end of the ``.log`` (``verify`` reports it, ``verify --repair`` cuts it), and index files that are a
valid prefix of the full ones.

:class:`Appender` sits on top: it takes records (key, value, headers, timestamp, partition), picks
partitions (murmur2 for keys, sticky or round-robin for null keys), cuts batches like the producer
(``batch.size``), and **validates the whole input before anything is written**: the batches are built
in full first and kept in memory up to a limit, beyond it in anonymous temporary files
(``O_TMPFILE``) in each partition directory, which vanish if the process dies. Only when the input has
been read to the end without an error are they appended to the logs.
"""

from __future__ import annotations

import os
import random
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BrokerLockHeld, CorruptDataError, KltoolError, UnsafeOperation, UsageError
from ..format import build_batch, parse_header, speedups
from ..format.batch import build_end_txn_marker, build_v2_batch, encode_control_key, encode_end_txn_value
from ..format.checkpoints import (
    encode_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
)
from ..format.compression import CODEC_IDS, NONE, ZSTD
from ..format.index import AbortedTxn, encode_txn_index
from ..format.partitioner import default_partition
from ..format.records import LOG_OVERHEAD
from ..format.topics import parse_partition_dir_name, validate_topic
from .fsutil import LOCK_FILE_NAME, BrokerLock, atomic_write, fsync_dir, lock_holder_present
from .index_builder import IndexBuilder
from .partition import Partition
from .producer_state import ProducerStateManager, control_of
from .scan import Damage
from .segment import Segment, filename_prefix
from .topic_config import TopicConfig, load_topic_config, load_topic_entry, validate_config

__all__ = [
    "DEFAULT_BATCH_BYTES", "ProducerState", "PartitionWriter", "WriterStats", "AppendOptions", "Appender",
    "AppendResult", "PartitionResult", "topic_partition_dirs", "create_topic", "CreateResult",
]

ProducerState = ProducerStateManager  # the name this module used; producer_state.py is its home
DEFAULT_BATCH_BYTES = 16384  # the producer's batch.size
DEFAULT_MEMORY_LIMIT = 64 << 20
INT32_MAX = 2**31 - 1
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
_CHUNK = 4 << 20
_SIZE = struct.Struct(">i")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# ------------------------------------------------------------------------------------------------ writer


@dataclass
class WriterStats:
    first_offset: int | None = None
    last_offset: int | None = None
    batches: int = 0
    records: int = 0  # records of v2 batches; v0/v1: messages (a compressed wrapper counts once)
    bytes: int = 0
    rolled: list[int] = field(default_factory=list)  # base offsets of the segments this run created
    aborted_txns: int = 0


class PartitionWriter:
    """Append batches to one partition directory (see the module docstring).

    ``dry_run`` computes everything (offsets, rolls, index entries) and writes nothing.
    """

    def __init__(self, path, *, config: TopicConfig | None = None, leader_epoch: int | None = None,
                 dry_run: bool = False, now_ms: int | None = None):
        self.path = Path(path)
        self.config = config or TopicConfig()
        self.dry_run = dry_run
        self.now_ms = now_ms if now_ms is not None else _now_ms()
        self.stats = WriterStats()
        self.wrote_v2 = False  # a v2 batch was appended (the leader-epoch checkpoint applies)
        self._fd: int | None = None
        self._txn_new: list[AbortedTxn] = []  # aborted txns of the active segment not yet in its .txnindex
        self._closed = False
        self._open(leader_epoch)

    # ---------------------------------------------------------------------------------------- opening

    def _open(self, leader_epoch: int | None) -> None:
        try:
            parse_partition_dir_name(self.path.name)
        except CorruptDataError as e:
            raise UsageError(e.message.splitlines()[0], path=self.path) from None
        if not self.path.is_dir():
            raise UsageError("no such partition directory", path=self.path)
        p = Partition(self.path)
        segs = p.segments  # scans the directory
        pending = [f for f in p.stale_files if f.name.endswith((".swap", ".cleaned"))]
        if pending:
            raise UnsafeOperation(f"{pending[0].name}: a cleaner or segment swap is unfinished; start the broker "
                                  "once (it completes it) or run kltool verify --repair first", path=self.path)
        self.partition = p
        self.segment_bases = [s.base_offset for s in segs]
        cfg = self.config
        if not segs:
            base = self._log_start_offset()
            self.segment = Segment(self.path, base)
            self.index = IndexBuilder(base, cfg.index_interval_bytes, cfg.segment_index_bytes)
            self.seg_size = 0
            self.leo = base
            self.first_batch_ts = None
            self.last_epoch_in_log = -1
            self._new_segment_file = True
        else:
            self.segment = segs[-1]
            self._new_segment_file = False
            self._load_active()
        self.seg_created_ms = self.now_ms
        self._load_producer_state()
        self._load_leader_epochs(leader_epoch)
        self.start_offset = self.leo

    def _log_start_offset(self) -> int:
        """Where an empty partition starts: the root's log-start-offset-checkpoint, else 0."""
        try:
            text = (self.path.parent / "log-start-offset-checkpoint").read_text(encoding="utf-8")
            topic, part, _k, _u = parse_partition_dir_name(self.path.name)
            return max(0, parse_offset_checkpoint(text).get((topic, part), 0))
        except (OSError, UnicodeDecodeError, CorruptDataError):
            return 0

    def _load_active(self) -> None:
        """One header walk of the active segment: damage, LEO, first timestamp, indexes."""
        seg = self.segment
        cfg = self.config
        rebuilt = IndexBuilder(seg.base_offset, cfg.index_interval_bytes, cfg.segment_index_bytes)
        entries = seg.offset_index()
        tentries = seg.time_index()
        ok = all(entries[i][0] < entries[i + 1][0] and entries[i][1] < entries[i + 1][1]
                 for i in range(len(entries) - 1))
        ok = ok and all(tentries[i][0] < tentries[i + 1][0] and tentries[i][1] <= tentries[i + 1][1]
                        for i in range(len(tentries) - 1))
        j = k = 0
        prev_max = None
        last = None
        first_ts = None
        max_ts, max_ts_off = -1, seg.base_offset
        last_epoch = -1
        size = 0
        rebuild_error = None
        for item in seg.walk():
            if isinstance(item, Damage) or not item.crc_valid:
                where = item.position
                what = item.kind if isinstance(item, Damage) else "crc_mismatch"
                raise UnsafeOperation(f"{what} at byte {where}: appending after damage would bury it; run "
                                      f"kltool verify --repair first", path=seg.log_path)
            h = item
            if rebuild_error is None:
                try:
                    rebuilt.on_header(h)
                except KltoolError as e:  # offset overflow, a full index under today's settings ...
                    rebuild_error = e
            # each time-index entry names the batch holding its offset, with that batch's max timestamp
            while k < len(tentries) and tentries[k][1] <= h.last_offset:
                if tentries[k][0] != h.max_timestamp:
                    ok = False
                k += 1
            if first_ts is None:
                first_ts = h.max_timestamp
            while j < len(entries) and entries[j][1] < h.position:
                ok = False
                j += 1
            if j < len(entries) and entries[j][1] == h.position:
                off = entries[j][0]
                if h.last_offset > off or (prev_max is not None and prev_max >= off):
                    ok = False
                j += 1
            prev_max = h.last_offset if prev_max is None else max(prev_max, h.last_offset)
            if last is not None and h.last_offset <= last:
                raise UnsafeOperation(f"offsets go backwards at byte {h.position} ({h.last_offset} after {last}); "
                                      f"run kltool verify first", path=seg.log_path)
            last = h.last_offset
            if h.max_timestamp > max_ts:
                max_ts, max_ts_off = h.max_timestamp, h.last_offset
            if h.magic == 2 and h.partition_leader_epoch >= 0:
                last_epoch = h.partition_leader_epoch
            size = h.end
        if j < len(entries) or k < len(tentries):
            ok = False
        if tentries and tentries[0][1] < seg.base_offset:
            ok = False
        if not ok and rebuild_error is not None:
            raise UnsafeOperation(f"the indexes of the active segment do not match it and cannot be rebuilt "
                                  f"({rebuild_error.message}); run kltool verify first", path=seg.log_path)
        if ok:
            idx = IndexBuilder.resume(seg.base_offset, entries, tentries, size,
                                      index_interval_bytes=cfg.index_interval_bytes,
                                      max_index_bytes=cfg.segment_index_bytes)
        else:  # the broker's recovery: rebuild, final time entry, then appends re-anchor at the end
            rebuilt.finish()
            rebuilt.restart()
            idx = rebuilt
        if max_ts > idx.max_timestamp:
            idx.max_timestamp, idx.offset_of_max_timestamp = max_ts, max_ts_off
        self.index = idx
        self.seg_size = size
        self.leo = seg.base_offset if last is None else last + 1
        self.first_batch_ts = first_ts
        self.last_epoch_in_log = last_epoch

    def _load_producer_state(self) -> None:
        """Latest valid snapshot at or below the LEO, then a replay of the batches after it
        (:meth:`ProducerStateManager.load`)."""
        self.producer_state, self.snapshot_offset = ProducerStateManager.load(self.partition, self.leo)

    def _load_leader_epochs(self, leader_epoch: int | None) -> None:
        path = self.path / LEADER_EPOCH_FILE
        try:
            text = path.read_text(encoding="utf-8")
            self.epoch_file_exists = True
        except FileNotFoundError:
            text = ""
            self.epoch_file_exists = False
        except UnicodeDecodeError:
            raise CorruptDataError("not UTF-8 text", path=path) from None
        try:
            self.epoch_entries = parse_leader_epoch_checkpoint(text)
        except CorruptDataError as e:
            raise e.at(path=path) from None
        latest = max([self.last_epoch_in_log] + [e for e, _o in self.epoch_entries])
        if leader_epoch is None:
            leader_epoch = max(latest, 0)
        elif leader_epoch < latest:
            raise UsageError(f"leader epoch {leader_epoch} is below the partition's latest epoch {latest} "
                             f"(leader epochs only grow)", path=self.path)
        self.leader_epoch = leader_epoch

    # --------------------------------------------------------------------------------------- queries

    @property
    def log_end_offset(self) -> int:
        return self.leo

    def producer(self, producer_id: int):
        """The producer's :class:`ProducerStateEntry` (epoch, last_sequence, current_txn_first_offset ...) or None."""
        return self.producer_state.get(producer_id)

    # ---------------------------------------------------------------------------------------- writing

    def _should_roll(self, size: int, last_offset: int, max_timestamp: int) -> bool:
        """``LogSegment.shouldRoll`` (reference §7; roll jitter 0)."""
        cfg = self.config
        seg_size = self.seg_size
        if seg_size > cfg.segment_bytes - size:
            return True
        if seg_size > 0:
            first = self.first_batch_ts
            waited = max_timestamp - first if first is not None and first >= 0 else self.now_ms - self.seg_created_ms
            if waited > cfg.max_segment_ms:
                return True
        return self.index.is_full() or not self.index.can_append_offset(last_offset)

    def _open_fd(self, expected_size: int) -> None:
        if self._fd is None and not self.dry_run:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
            self._fd = os.open(self.segment.log_path, flags, 0o644)
            if os.fstat(self._fd).st_size != expected_size:
                os.close(self._fd)
                self._fd = None
                raise UnsafeOperation("the file changed while kltool was writing it", path=self.segment.log_path)

    def _write(self, data) -> None:
        """Write the bytes of the batches just counted into ``seg_size``."""
        if self.dry_run or not len(data):
            return
        self._open_fd(self.seg_size - len(data))
        mv = memoryview(data)
        while mv:
            n = os.write(self._fd, mv)
            mv = mv[n:]

    def append(self, data) -> None:
        """Append whole batches (any magic); the first must start at the log end offset."""
        if self._closed:
            raise ValueError("writer is closed")
        mv = memoryview(data)
        n = len(mv)
        pos = 0
        start = 0
        st = self.stats
        while pos < n:
            if n - pos < 17:
                raise ValueError("a partial batch at the end of the data")
            h = parse_header(mv, pos, check_crc=False)
            size = h.size
            if pos + size > n:
                raise ValueError("a partial batch at the end of the data")
            first = h.base_offset if h.magic == 2 else h.last_offset
            if first < self.leo:
                raise ValueError(f"batch offset {first} is below the log end offset {self.leo}")
            if self._should_roll(size, h.last_offset, h.max_timestamp):
                self._write(mv[start:pos])
                start = pos
                self._roll(h.base_offset if h.magic == 2 else self.leo)
            self.index.on_append(self.seg_size, size, h.last_offset, h.max_timestamp, h.last_offset)
            if h.magic == 2 and h.producer_id >= 0:
                control = control_of(bytes(mv[pos:pos + size]), h) if h.is_control else None
                aborted = self.producer_state.update(h, control)
                if aborted is not None:
                    self._txn_new.append(aborted)
                    st.aborted_txns += 1
            if self.first_batch_ts is None:
                self.first_batch_ts = h.max_timestamp
            if h.magic == 2:
                self.wrote_v2 = True
            self.seg_size += size
            if st.first_offset is None:
                st.first_offset = self.leo
            self.leo = h.last_offset + 1
            st.last_offset = h.last_offset
            st.batches += 1
            st.records += h.count if h.count is not None else 1
            st.bytes += size
            pos += size
        self._write(mv[start:])

    def _finish_segment(self) -> None:
        """What the broker does to the active segment on roll and on close: the final time-index entry,
        trimmed indexes, and the data made durable first."""
        self.index.finish()
        if self.dry_run:
            return
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        elif self._new_segment_file and not self.segment.log_path.exists():
            atomic_write(self.segment.log_path, b"")
        seg = self.segment
        atomic_write(seg.index_path, self.index.offset_index_bytes())
        atomic_write(seg.timeindex_path, self.index.time_index_bytes())
        if self._txn_new:
            try:
                old = seg.txnindex_path.read_bytes()
            except FileNotFoundError:
                old = b""
            atomic_write(seg.txnindex_path, old + encode_txn_index(self._txn_new))
            self._txn_new = []

    def _roll(self, new_base: int) -> None:
        new_base = max(new_base, self.leo)
        if self.seg_size == 0 and self.segment.base_offset == new_base:
            return  # rolling an empty active segment at its own base offset recreates it: nothing to do
        self._finish_segment()
        self.stats.rolled.append(new_base)
        self.segment_bases.append(new_base)
        seg = Segment(self.path, new_base)
        if not self.dry_run:
            try:
                if seg.log_path.stat().st_size != 0:
                    raise UnsafeOperation("a non-empty segment file is in the way of the new segment",
                                          path=seg.log_path)
            except FileNotFoundError:
                pass
            fd = os.open(seg.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            self._fd = fd
        self.segment = seg
        self._new_segment_file = True
        cfg = self.config
        self.index = IndexBuilder(new_base, cfg.index_interval_bytes, cfg.segment_index_bytes)
        self.seg_size = 0
        self.first_batch_ts = None
        self.seg_created_ms = self.now_ms
        # UnifiedLog.roll: producerStateManager.takeSnapshot() named by the new base offset.
        if not self.dry_run:
            atomic_write(self.path / f"{filename_prefix(new_base)}.snapshot", self.producer_state.snapshot_bytes())

    def close(self) -> WriterStats:
        """Finish like a clean broker shutdown (see the module docstring). Nothing is touched when
        nothing was appended."""
        if self._closed:
            return self.stats
        self._closed = True
        if self.stats.batches == 0:
            self._release()
            return self.stats
        self._finish_segment()
        if self.dry_run:
            return self.stats
        if self._needs_epoch_entry():
            # LeaderEpochFileCache.assign: entries that would not stay monotonic are dropped first
            entries = [(e, o) for e, o in self.epoch_entries if e < self.leader_epoch and o < self.start_offset]
            entries.append((self.leader_epoch, self.start_offset))
            atomic_write(self.path / LEADER_EPOCH_FILE, encode_leader_epoch_checkpoint(entries))
        # UnifiedLog.close: a snapshot at the log end offset; older strays go, as LogLoader removes them.
        atomic_write(self.path / f"{filename_prefix(self.leo)}.snapshot", self.producer_state.snapshot_bytes())
        bases = set(self.segment_bases)
        for off, spath in self.partition.snapshots:
            if off not in bases and off < self.leo:
                try:
                    spath.unlink()
                except FileNotFoundError:
                    pass
        fsync_dir(self.path)
        return self.stats

    def _needs_epoch_entry(self) -> bool:
        """A v2 append at a leader epoch newer than the checkpoint's latest adds ``(epoch, start offset)``."""
        if not self.wrote_v2:
            return False
        return not self.epoch_entries or self.leader_epoch > self.epoch_entries[-1][0]

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def abort(self) -> None:
        """Stop without finishing (after an error): data written so far stays, indexes are not rewritten."""
        self._closed = True
        self._release()


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
    memory_limit: int = DEFAULT_MEMORY_LIMIT
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


class _Spool:
    """Built batches of one partition waiting for the whole input to be valid: in memory, then (past
    the appender's memory limit) in an anonymous temporary file in the partition directory."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.mem: list[bytes] = []
        self.mem_bytes = 0
        self.file = None

    def add(self, data: bytes) -> None:
        self.mem.append(data)
        self.mem_bytes += len(data)

    def spill(self) -> int:
        if not self.mem:
            return 0
        if self.file is None:
            self.file = tempfile.TemporaryFile(dir=self.directory, prefix=".kltool-spool-")
        self.file.write(b"".join(self.mem))
        n = self.mem_bytes
        self.mem, self.mem_bytes = [], 0
        return n

    def chunks(self):
        """The spooled bytes in order, cut at batch boundaries."""
        if self.file is not None:
            f = self.file
            f.flush()
            f.seek(0)
            rest = b""
            while True:
                block = f.read(_CHUNK)
                if not block:
                    break
                buf = rest + block if rest else block
                end = _whole_batches(buf)
                if end:
                    yield memoryview(buf)[:end]
                rest = buf[end:]
            if rest:
                raise ValueError("spool ends inside a batch")
        if self.mem:
            data = b"".join(self.mem)
            self.mem, self.mem_bytes = [], 0
            yield data

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        self.mem = []


def _whole_batches(buf) -> int:
    """Length of the prefix of ``buf`` made of whole batches."""
    pos = 0
    n = len(buf)
    while pos + LOG_OVERHEAD <= n:
        size = _SIZE.unpack_from(buf, pos + 8)[0] + LOG_OVERHEAD
        if pos + size > n:
            break
        pos += size
    return pos


class _Part:
    """One partition's state during an append: its writer, the batch being filled, the spool."""

    __slots__ = ("partition", "writer", "spool", "next_offset", "records", "lines", "est", "count",
                 "next_seq", "epoch", "markers")

    def __init__(self, partition: int, writer: PartitionWriter, spool: _Spool | None):
        self.partition = partition
        self.writer = writer
        self.spool = spool
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
_BATCH_OVERHEAD = {2: 61, 1: 0, 0: 0}


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
        self._mem = 0
        self._rr = 0
        self._sticky: int | None = None
        self._random = random.Random()
        self._key_partitions: dict[bytes, int] = {}  # murmur2 results of recent keys
        self._committed = False
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
            raise BrokerLockHeld(f"a running broker holds {self.logdir / LOCK_FILE_NAME}; stop it first",
                                 path=self.logdir / LOCK_FILE_NAME)

    # -------------------------------------------------------------------------------------- options

    def _check_options(self) -> None:
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
        if o.batch_bytes < 1:
            raise UsageError("the batch size in bytes must be positive")
        if o.batch_records is not None and not 1 <= o.batch_records <= INT32_MAX:
            raise UsageError("the batch size in records must be positive")
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
        try:
            w = PartitionWriter(path, config=self.config, leader_epoch=o.leader_epoch, dry_run=o.dry_run,
                                now_ms=self.append_time)
        except KltoolError as e:
            if e.path is None:
                e.path = path
            raise
        pa = _Part(partition, w, None if o.dry_run else _Spool(path))
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
        gives that item to :meth:`add`. Without the accelerator, or before ``partition`` is open: (i, 0)."""
        c = speedups.C
        pa = self._parts.get(partition)
        if c is None or pa is None:
            return i, 0
        i, pa.est, skipped = c.fill_records(items, i, pa.records, pa.lines, partition, override, first_line, _now_ms(),
                                            self._rec_overhead, self._batch_overhead, pa.est, self._batch_bytes,
                                            self._batch_records, self._magic >= 2, skip)
        return i, skipped

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
        if pa.spool is None:  # dry run: the writer computes offsets, rolls and indexes, writes nothing
            pa.writer.append(data)
            return
        pa.spool.add(data)
        self._mem += len(data)
        if self._mem > o.memory_limit:
            for p in self._parts.values():
                if p.spool is not None:
                    self._mem -= p.spool.spill()

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
        """Build the last batches, then append everything (or, in a dry run, only compute it)."""
        if self._committed:
            raise ValueError("already committed")
        self._committed = True
        for pa in list(self._parts.values()):
            self._flush(pa)
        self._add_markers()
        try:
            for pa in sorted(self._parts.values(), key=lambda x: x.partition):
                w = pa.writer
                if pa.spool is not None:
                    try:
                        for chunk in pa.spool.chunks():
                            w.append(chunk)
                            if progress is not None:
                                progress(len(chunk))
                    except BaseException:
                        w.abort()
                        raise
                    finally:
                        pa.spool.close()
                w.close()
        finally:
            self.close()
        parts = [PartitionResult(p, pa.writer.path, pa.count, pa.markers, pa.writer.stats)
                 for p, pa in sorted(self._parts.items()) if pa.count or pa.markers]
        return AppendResult(self.topic, parts, self.options.dry_run)

    @property
    def pending_records(self) -> int:
        return sum(pa.count + len(pa.records) for pa in self._parts.values())

    def close(self) -> None:
        """Release everything (without :meth:`commit`: discard the queued records, write nothing)."""
        for pa in self._parts.values():
            if pa.spool is not None:
                pa.spool.close()
            if not self._committed:
                pa.writer.abort()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()



# ------------------------------------------------------------------------------------------------ create


@dataclass
class CreateResult:
    topic: str
    topic_id: str
    logdir: Path
    existed: bool  # the topic had partition directories before
    partitions_before: int
    partitions: int  # the topic's partition count afterwards
    created: list[Path]  # partition directories created (or, in a dry run, to create)
    config: dict[str, str]  # the settings stored for the topic afterwards (overrides only)
    config_changed: bool
    warnings: list[str]
    dry_run: bool


COLLISION_WARNING = ("topic names with a period ('.') or underscore ('_') could collide in Kafka's metric names; "
                     "to avoid issues it is best to use either, but not both")


def _topics_in(logdir: Path) -> set[str]:
    out = set()
    try:
        names = os.listdir(logdir)
    except FileNotFoundError:
        return out
    for name in names:
        try:
            t, _p, kind, _u = parse_partition_dir_name(name)
        except CorruptDataError:
            continue
        if kind is None and (logdir / name).is_dir():
            out.add(t)
    return out


def _existing_topic_id(dirs: dict[int, Path]) -> str | None:
    from ..format.checkpoints import parse_partition_metadata

    for _p, path in sorted(dirs.items()):
        pm = path / "partition.metadata"
        try:
            return parse_partition_metadata(pm.read_text(encoding="utf-8"))[1]
        except FileNotFoundError:
            continue
        except (UnicodeDecodeError, CorruptDataError) as e:
            raise CorruptDataError(getattr(e, "message", str(e)), path=pm) from None
    return None


def create_topic(logdir, topic: str, partitions: int, *, config: dict[str, str] | None = None,
                 if_not_exists: bool = False, topic_id: str | None = None, dry_run: bool = False) -> CreateResult:
    """Create ``topic`` with ``partitions`` partition directories in ``logdir`` (made if missing), or add
    partitions to an existing topic when ``partitions`` is larger than its count. Each new directory gets
    what a broker leaves in a new, never-written partition after a clean shutdown: an empty
    ``00000000000000000000.log`` with empty ``.index``/``.timeindex``, an empty ``leader-epoch-checkpoint``
    and ``partition.metadata`` (``version: 0`` + the topic id, written last). ``config`` (validated
    settings) is merged into ``kltool-topics.json`` (see :mod:`kltool.storage.topic_config`)."""
    from ..format.checkpoints import encode_partition_metadata, new_topic_id, uuid_from_string
    from ..format.topics import CLUSTER_METADATA_TOPIC_NAME, has_collision, has_collision_chars
    from .topic_config import save_topic_entry

    logdir = Path(logdir)
    validate_topic(topic)
    if topic == CLUSTER_METADATA_TOPIC_NAME:
        raise UsageError(f"{topic} is the KRaft metadata log, not a topic")
    if partitions < 1:
        raise UsageError("--partitions must be at least 1")
    if topic_id is not None:
        try:
            uuid_from_string(topic_id)
            encode_partition_metadata(topic_id)
        except ValueError as e:
            raise UsageError(f"invalid topic id {topic_id!r}: {e}") from None
    config = dict(config or {})
    warnings = [COLLISION_WARNING] if has_collision_chars(topic) else []
    if logdir.exists() and not logdir.is_dir():
        raise UsageError("not a directory", path=logdir)
    is_new = not logdir.exists() or not any(logdir.iterdir())
    lock = None
    if dry_run:
        if logdir.exists() and lock_holder_present(logdir):
            raise BrokerLockHeld(f"a running broker holds {logdir / LOCK_FILE_NAME}; stop it first",
                                 path=logdir / LOCK_FILE_NAME)
    else:
        logdir.mkdir(parents=True, exist_ok=True)
        lock = BrokerLock(logdir, create=True if is_new else None).acquire()
    try:
        for other in sorted(_topics_in(logdir)):
            if other != topic and has_collision(topic, other):
                raise UsageError(f"Topic '{topic}' collides with existing topic: {other}", path=logdir)
        dirs = topic_partition_dirs(logdir, topic) if logdir.exists() else {}
        entry = (load_topic_entry(logdir, topic) if logdir.exists() else None) or {}
        stored = dict(entry.get("config", {}))
        before = max(dirs) + 1 if dirs else 0
        existed = bool(dirs)
        tid = _existing_topic_id(dirs) if dirs else None
        if tid is not None and topic_id is not None and tid != topic_id:
            raise UsageError(f"topic {topic} already has topic id {tid}, not {topic_id}")
        tid = tid or topic_id or entry.get("topic_id") or new_topic_id()
        if existed and partitions <= before:
            if not if_not_exists:
                if partitions < before:
                    raise UsageError(f"The number of partitions for a topic can only be increased. Topic {topic} "
                                     f"currently has {before} partitions, {partitions} would not be an increase.")
                raise UsageError(f"Topic '{topic}' already exists (use --if-not-exists to accept that, or a "
                                 f"larger --partitions to add partitions).")
            new = []
        else:
            new = [logdir / f"{topic}-{p}" for p in range(before, partitions)]
        merged = {**stored, **config}
        result = CreateResult(topic, tid, logdir, existed, before, max(partitions, before), new, merged,
                              merged != stored, warnings, dry_run)
        if dry_run:
            return result
        meta = encode_partition_metadata(tid)
        seg = filename_prefix(0)
        for d in new:
            d.mkdir()
            for name in (f"{seg}.log", f"{seg}.index", f"{seg}.timeindex", LEADER_EPOCH_FILE):
                fd = os.open(d / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            atomic_write(d / "partition.metadata", meta)  # fsyncs the partition directory too
        if new:
            fsync_dir(logdir)
        if new or merged != stored:
            save_topic_entry(logdir, topic, partitions=max(partitions, before, int(entry.get("partitions") or 0)),
                             topic_id=tid, config=config)
        return result
    finally:
        if lock is not None:
            lock.release()
