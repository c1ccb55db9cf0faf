"""Writing to a partition the way a leader broker does (``UnifiedLog.append``, ``LogSegment.append``, ``UnifiedLog.roll``).

:class:`PartitionWriter` appends whole batches (bytes from :func:`kltool.format.build_batch`) to one
partition directory:

* it opens the **active segment** (the last ``.log``), walks it once (header only) and refuses to write
  after damage (a torn tail must be repaired first); the log end offset (LEO) is where offsets go on;
* it **resumes** the segment's :class:`~kltool.storage.index_builder.IndexBuilder` from the existing
  ``.index``/``.timeindex`` (``IndexBuilder.resume``: ``bytesSinceLastIndexEntry`` = 0, as after a broker
  restart) when they are consistent with the log, else from a rebuild by the recovery rule;
* each batch is one append call (``LogSegment.append``: an index entry when more than
  ``index.interval.bytes`` were written since the last one; the time index keeps the running maximum);
* it **rolls** before a batch exactly when ``LogSegment.shouldRoll`` does: the segment would pass
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

Durability and undo: batches go straight to the ``.log`` files (opened for appending, written in
blocks of a few MiB), nothing else is touched until :meth:`PartitionWriter.close`. Rolled segments get
their data fsynced at the roll, but their index files and the producer snapshot the roll makes wait
for close. Until then the writer can be undone: :meth:`PartitionWriter.abort` truncates the segment
it started in back to its old end and removes the segment files it created, which leaves the
partition byte for byte as it was. :meth:`PartitionWriter.prepare` makes every byte written durable
(the first half of close); close then replaces index, snapshot and checkpoint files atomically
(:func:`atomic_write`), after the data they describe is durable.

A crash (the process killed, the power cut) before close leaves whole batches after the old end of
the active segment, at worst a torn batch at the very end, and perhaps new ``.log`` files without
index files: what a broker that crashed while appending leaves. Kafka's recovery (which runs: the
:class:`~kltool.storage.write.appender.Appender` holds ``.kafka_cleanshutdown`` away meanwhile) keeps the whole
batches, cuts the torn one and rebuilds the indexes; ``kltool verify`` reports the torn tail and the
missing indexes, ``verify --repair`` cuts and rebuilds them. Nothing that was in the log before is
changed: index files of the old active segment still describe a valid prefix of it.

:class:`~kltool.storage.write.appender.Appender` (records in, batches out) and
:func:`~kltool.storage.write.create.create_topic` sit on top of it, in their own modules.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CorruptDataError, KltoolError, UnsafeOperation, UsageError
from ...format import names as fn
from ...format import parse_header
from ...format.checkpoints import (
    encode_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
)
from ...format.index import AbortedTxn, encode_txn_index
from ...format.names import filename_prefix
from ...format.topics import parse_partition_dir_name
from ..confine import unfit
from ..fs import atomic_write, fsync_dir, read_small_file
from ..index_builder import IndexBuilder
from ..partition import Partition
from ..producer_state import ProducerStateManager, control_of
from ..scan import Damage
from ..segment import Segment
from ..topic_config import TopicConfig

__all__ = ["ProducerState", "PartitionWriter", "WriterStats", "LEADER_EPOCH_FILE"]

ProducerState = ProducerStateManager  # the name this module used; producer_state.py is its home
LEADER_EPOCH_FILE = fn.LEADER_EPOCH_CHECKPOINT


_WRITE_BLOCK = 4 << 20  # bytes of batches gathered before one writev
_IOV_MAX = 512  # buffers per writev (Linux allows 1024)


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


class _IndexMatch:
    """Whether a segment's .index and .timeindex entries are ones the broker could have written for its
    batches: fed the headers of one walk in order, judged by :meth:`finish`."""

    def __init__(self, entries, tentries):
        self.entries, self.tentries = entries, tentries
        self.ok = all(entries[i][0] < entries[i + 1][0] and entries[i][1] < entries[i + 1][1]
                      for i in range(len(entries) - 1))
        self.ok = self.ok and all(tentries[i][0] < tentries[i + 1][0] and tentries[i][1] <= tentries[i + 1][1]
                                  for i in range(len(tentries) - 1))
        self.j = self.k = 0  # the next offset-index and time-index entry
        self.prev_max = None

    def on_header(self, h) -> None:
        entries, tentries = self.entries, self.tentries
        # each time-index entry names the batch holding its offset, with that batch's max timestamp
        k = self.k
        while k < len(tentries) and tentries[k][1] <= h.last_offset:
            if tentries[k][0] != h.max_timestamp:
                self.ok = False
            k += 1
        self.k = k
        j = self.j
        while j < len(entries) and entries[j][1] < h.position:
            self.ok = False
            j += 1
        if j < len(entries) and entries[j][1] == h.position:
            off = entries[j][0]
            if h.last_offset > off or (self.prev_max is not None and self.prev_max >= off):
                self.ok = False
            j += 1
        self.j = j
        self.prev_max = h.last_offset if self.prev_max is None else max(self.prev_max, h.last_offset)

    def finish(self, base_offset: int) -> bool:
        """True when every entry was matched to a batch (and none is below the segment's base offset)."""
        if self.j < len(self.entries) or self.k < len(self.tentries):
            self.ok = False
        if self.tentries and self.tentries[0][1] < base_offset:
            self.ok = False
        return self.ok


class PartitionWriter:
    """Append batches to one partition directory (see the module docstring).

    ``dry_run`` computes everything (offsets, rolls, index entries) and writes nothing.
    """

    def __init__(self, path, *, config: TopicConfig | None = None, leader_epoch: int | None = None,
                 dry_run: bool = False, now_ms: int | None = None):
        self.path = Path(path)
        self.config = config or TopicConfig()
        self._segment_bytes = self.config.segment_bytes  # read once: _should_roll runs for every batch
        self._max_segment_ms = self.config.max_segment_ms
        self.dry_run = dry_run
        self.now_ms = now_ms if now_ms is not None else _now_ms()
        self.stats = WriterStats()
        self.wrote_v2 = False  # a v2 batch was appended (the leader-epoch checkpoint applies)
        self._fd: int | None = None
        self._txn_new: list[AbortedTxn] = []  # aborted txns of the active segment not yet in its .txnindex
        self._closed = False
        self._buf: list = []  # batches not yet written (a writev block)
        self._buf_bytes = 0
        self._disk = 0  # bytes of the active segment's .log on disk (seg_size less what _buf holds)
        self._sealed: list[tuple] = []  # rolled segments whose index files wait for close
        self._roll_snapshots: list[tuple[Path, bytes]] = []  # snapshots the rolls made, written at close
        self._undo: list[tuple[Path, int | None]] = []  # .log files to cut back (None: to remove) on abort
        self._unsynced = False  # the active segment has data written and not yet fsynced
        self._prepared = False  # every byte written is durable
        self._publishing = False  # close has started to replace files: no undo from here on
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
        self._disk = self.seg_size
        self._undo.append((self.segment.log_path, None if self._new_segment_file else self.seg_size))
        self._load_producer_state()
        self._load_leader_epochs(leader_epoch)
        self.start_offset = self.leo

    def _log_start_offset(self) -> int:
        """Where an empty partition starts: the root's log-start-offset-checkpoint, else 0."""
        try:
            text = read_small_file(self.path.parent / fn.LOG_START_OFFSET_CHECKPOINT).decode("utf-8")
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
        match = _IndexMatch(entries, tentries)
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
            if first_ts is None:
                first_ts = h.max_timestamp
            match.on_header(h)
            if last is not None and h.last_offset <= last:
                raise UnsafeOperation(f"offsets go backwards at byte {h.position} ({h.last_offset} after {last}); "
                                      f"run kltool verify first", path=seg.log_path)
            last = h.last_offset
            if h.max_timestamp > max_ts:
                max_ts, max_ts_off = h.max_timestamp, h.last_offset
            if h.magic == 2 and h.partition_leader_epoch >= 0:
                last_epoch = h.partition_leader_epoch
            size = h.end
        ok = match.finish(seg.base_offset)
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
            text = read_small_file(path).decode("utf-8")
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
        """``LogSegment.shouldRoll`` (roll jitter 0)."""
        seg_size = self.seg_size
        if seg_size > self._segment_bytes - size:
            return True
        if seg_size > 0:
            first = self.first_batch_ts
            waited = max_timestamp - first if first is not None and first >= 0 else self.now_ms - self.seg_created_ms
            if waited > self._max_segment_ms:
                return True
        return self.index.is_full() or not self.index.can_append_offset(last_offset)

    def _open_fd(self) -> None:
        if self._fd is None and not self.dry_run:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
            self._fd = os.open(self.segment.log_path, flags, 0o644)
            if os.fstat(self._fd).st_size != self._disk:
                os.close(self._fd)
                self._fd = None
                raise UnsafeOperation("the file changed while kltool was writing it", path=self.segment.log_path)

    def _write(self, data) -> None:
        """Queue the bytes of the batches just counted into ``seg_size``; whole blocks go to disk."""
        if self.dry_run or not len(data):
            return
        self._buf.append(data)
        self._buf_bytes += len(data)
        if self._buf_bytes >= _WRITE_BLOCK:
            self._flush_buf()

    @property
    def buffered(self) -> int:
        """Bytes of batches appended but not yet written (at most about one write block)."""
        return self._buf_bytes

    def flush(self) -> None:
        """Write the batches queued so far to the segment (not fsynced: :meth:`prepare` does that)."""
        if not self.dry_run:
            self._flush_buf()

    def _flush_buf(self) -> None:
        """Write the queued batches to the active segment (``writev``, no copy). The file is open only
        while it is written, so that an append to thousands of partitions holds no descriptors."""
        bufs = self._buf
        if not bufs:
            return
        self._open_fd()
        fd = self._fd
        try:
            for i in range(0, len(bufs), _IOV_MAX):
                part = bufs[i:i + _IOV_MAX]
                want = sum(map(len, part))
                n = os.writev(fd, part)
                if n < want:  # a short write: the rest in order
                    rest = memoryview(b"".join(part))[n:]
                    while rest:
                        rest = rest[os.write(fd, rest):]
                self._disk += want
        finally:
            self._release()
        self._buf, self._buf_bytes = [], 0
        self._unsynced = True

    def append(self, data) -> None:
        """Append whole batches (any magic); the first must start at the log end offset."""
        if self._closed:
            raise ValueError("writer is closed")
        if self._prepared:
            raise ValueError("writer is prepared: nothing more can be appended")
        if type(data) is not bytes and not self.dry_run:
            data = bytes(data)  # queued until written: a caller's buffer may change after this call
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

    def _seal(self) -> None:
        """The active segment is complete (a roll, or close): the final time-index entry, and its data
        written and fsynced. Its index files are written by :meth:`_publish_segment` at close."""
        self.index.finish()
        if self.dry_run:
            return
        self._flush_buf()
        if self._unsynced:
            fd = os.open(self.segment.log_path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unsynced = False

    def _publish_segment(self, seg: Segment, index, txn_new: list, new_file: bool) -> None:
        """What the broker leaves for a finished segment: trimmed indexes (atomically), the
        ``.txnindex`` entries of its aborted transactions, the (empty) ``.log`` if it has none yet."""
        if new_file and not seg.log_path.exists():
            atomic_write(seg.log_path, b"")
        atomic_write(seg.index_path, index.offset_index_bytes())
        atomic_write(seg.timeindex_path, index.time_index_bytes())
        if txn_new:
            try:
                old = seg.txnindex_path.read_bytes()
            except FileNotFoundError:
                old = b""
            atomic_write(seg.txnindex_path, old + encode_txn_index(txn_new))

    def _roll(self, new_base: int) -> None:
        new_base = max(new_base, self.leo)
        if self.seg_size == 0 and self.segment.base_offset == new_base:
            return  # rolling an empty active segment at its own base offset recreates it: nothing to do
        self._seal()
        self._sealed.append((self.segment, self.index, self._txn_new, self._new_segment_file))
        self._txn_new = []
        self.stats.rolled.append(new_base)
        self.segment_bases.append(new_base)
        seg = Segment(self.path, new_base)
        why = "is a symlink" if os.path.islink(seg.log_path) else unfit(seg.log_path)  # a dry run refuses too
        if why is not None:
            raise UnsafeOperation(f"{why}: in the way of the new segment", path=seg.log_path)
        try:
            existing = seg.log_path.stat().st_size
        except FileNotFoundError:
            existing = None
        if existing:
            raise UnsafeOperation("a non-empty segment file is in the way of the new segment", path=seg.log_path)
        if not self.dry_run:
            self._undo.append((seg.log_path, existing))
            os.close(os.open(seg.log_path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644))
        self.segment = seg
        self._new_segment_file = True
        cfg = self.config
        self.index = IndexBuilder(new_base, cfg.index_interval_bytes, cfg.segment_index_bytes)
        self.seg_size = 0
        self._disk = 0
        self.first_batch_ts = None
        self.seg_created_ms = self.now_ms
        # UnifiedLog.roll: producerStateManager.takeSnapshot() named by the new base offset (written at close).
        if not self.dry_run:
            self._roll_snapshots.append((self.path / f"{filename_prefix(new_base)}.snapshot",
                                         self.producer_state.snapshot_bytes()))

    def prepare(self) -> None:
        """The first half of :meth:`close`: every batch appended is written and fsynced; no other file
        is touched. :meth:`abort` still undoes it all."""
        if self._closed:
            raise ValueError("writer is closed")
        if self._prepared:
            return
        if self.stats.batches:
            self._seal()
        self._prepared = True

    def close(self) -> WriterStats:
        """Finish like a clean broker shutdown (see the module docstring): :meth:`prepare`, then the
        index files of every segment written, the snapshots, the leader-epoch checkpoint. Nothing is
        touched when nothing was appended."""
        if self._closed:
            return self.stats
        if self.stats.batches == 0:
            self._closed = True
            self._release()
            return self.stats
        self.prepare()
        self._closed = True
        if self.dry_run:
            return self.stats
        self._publishing = True
        for seg, index, txn_new, new_file in self._sealed:
            self._publish_segment(seg, index, txn_new, new_file)
        self._publish_segment(self.segment, self.index, self._txn_new, self._new_segment_file)
        self._sealed, self._txn_new = [], []
        for spath, data in self._roll_snapshots:
            atomic_write(spath, data)
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

    def abort(self, undo: bool = True) -> None:
        """Stop after an error. Until close has started to replace files, everything written is
        undone: the segment the writer started in is cut back to its old end and the segment files it
        created are removed, so the partition is byte for byte as it was. With ``undo=False``, or once
        close has started, the data written stays (durable if :meth:`prepare` finished) and nothing
        more is written."""
        if self._closed and (not self._prepared or self._publishing):
            return  # closed, or aborted before
        self._closed = True
        self._buf, self._buf_bytes = [], 0
        self._release()
        if self.dry_run or self._publishing or not undo:
            return
        removed = False
        for path, size in reversed(self._undo):
            if size is None:
                try:
                    path.unlink()
                    removed = True
                except FileNotFoundError:
                    pass
                continue
            fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            finally:
                os.close(fd)
        if removed:
            fsync_dir(self.path)
        self._undo = []
