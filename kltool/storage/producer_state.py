"""Producer state, once: Kafka's ``ProducerStateManager`` as far as offline tools need it.

One :class:`ProducerStateManager` serves every place that follows producers through a log:

* ``append`` (:class:`~kltool.storage.write.writer.PartitionWriter`): epochs, sequences and the open
  transaction of each producer, loaded from the latest snapshot and replayed
  (:meth:`ProducerStateManager.load`, like ``UnifiedLog.rebuildProducerState``), written back as
  ``.snapshot`` files on roll and close;
* ``repair`` and index rebuilds: the aborted transactions of each segment (its ``.txnindex``), as
  ``LogSegment.recover`` collects them through ``ProducerStateManager`` (``TxnIndexBuilder`` in
  :mod:`kltool.storage.index_builder` is this class, started from the open transactions).

An open transaction is ``current_txn_first_offset`` (None when there is none, as Kafka's
``OptionalLong``); on disk, in a snapshot, "none" is -1. Producer expiration is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import CorruptDataError
from ..format import decode_records
from ..format.index import AbortedTxn, encode_aborted_txn
from ..format.records import BatchHeader, java_long
from ..format.snapshot import ProducerEntry, encode_snapshot
from .fs import read_snapshot, snapshot_entries

__all__ = ["ProducerStateEntry", "ProducerStateManager", "SnapshotChoice", "control_of", "latest_snapshot"]


@dataclass(slots=True)
class ProducerStateEntry:
    """Kafka's ``ProducerStateEntry`` with the last batch's metadata (what a snapshot keeps)."""

    producer_id: int
    epoch: int = -1
    last_sequence: int = -1
    last_offset: int = -1  # last data offset; -1 = no batch metadata
    offset_delta: int = 0
    timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None  # the open transaction's first offset

    # the name the writer and ``kltool append`` used before; kept for scripts
    @property
    def txn_first_offset(self) -> int | None:
        return self.current_txn_first_offset


class ProducerStateManager:
    """Producers by id, their open transactions and the aborted transactions completed so far.

    Feed every batch in log order through :meth:`update` (batches without a producer id and v0/v1
    messages are ignored, as Kafka does), with the decoded first record of a control batch:

    * a transactional data batch of a producer with no open transaction opens one at its base offset;
      a non-transactional one while a transaction is open is an error (Kafka's
      ``InvalidTxnStateException``: "Expected transactional write");
    * a COMMIT/ABORT marker closes the producer's open transaction (a marker with none open completes
      nothing); an ABORT yields ``AbortedTxn(pid, firstOffset, markerOffset, lastStableOffset)`` where
      LSO = first offset of the earliest transaction still open for *another* producer, else marker
      offset + 1 (``ProducerStateManager.lastStableOffset``);
    * a new producer epoch drops the batch metadata (``ProducerAppendInfo.maybeUpdateProducerEpoch``).

    State carries over segment boundaries: :meth:`take` returns (and clears) the aborted transactions
    collected since the last call, i.e. one segment's ``.txnindex`` entries.
    """

    def __init__(self, entries=(), open_txns: dict[int, int] | None = None):
        """``entries``: a snapshot's :class:`~kltool.format.snapshot.ProducerEntry` list; ``open_txns``:
        {producer id: first offset} of transactions begun before the first batch fed."""
        self.producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # first offset -> producer id (ProducerStateManager.ongoingTxns)
        self.aborted: list[AbortedTxn] = []
        for e in entries or ():
            first = e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None
            self.producers[e.producer_id] = ProducerStateEntry(
                e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta, e.timestamp,
                e.coordinator_epoch, first)
        for pid, first in (open_txns or {}).items():
            self.producers.setdefault(pid, ProducerStateEntry(pid)).current_txn_first_offset = first
        for p in self.producers.values():
            if p.current_txn_first_offset is not None:
                self._ongoing[p.current_txn_first_offset] = p.producer_id

    # -- queries ------------------------------------------------------------------------------------
    def get(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    @property
    def open_txns(self) -> dict[int, int]:
        """{producer id: first offset} of the transactions still open."""
        return {pid: first for first, pid in sorted(self._ongoing.items())}

    def _lso(self, pid: int, marker_offset: int) -> int:
        for first in sorted(self._ongoing):
            if self._ongoing[first] != pid:
                return first
        return marker_offset + 1

    # -- updates ------------------------------------------------------------------------------------
    def update(self, h: BatchHeader, control: dict | None = None) -> AbortedTxn | None:
        """``ProducerAppendInfo.append`` for one batch (``control``: the decoded first record of a
        control batch, None for an empty one); returns the aborted transaction an ABORT marker
        completes (a ``.txnindex`` entry), if any."""
        if h.magic < 2 or h.producer_id < 0:
            return None
        pid = h.producer_id
        p = self.producers.get(pid)
        if p is None:
            p = self.producers[pid] = ProducerStateEntry(pid)
        if h.producer_epoch != p.epoch:  # maybeUpdateProducerEpoch: a new epoch drops the batch metadata
            p.epoch = h.producer_epoch
            p.last_sequence, p.last_offset, p.offset_delta = -1, -1, 0
        if not h.is_control:
            self._append_data(p, h)
            return None
        return self._append_end_txn_marker(p, h, control)

    def _append_data(self, p: ProducerStateEntry, h: BatchHeader) -> None:
        """``ProducerAppendInfo.appendDataBatch``: sequences, offsets, an opening transaction."""
        if p.current_txn_first_offset is not None and not h.is_transactional:
            raise CorruptDataError(f"Expected transactional write from producer {p.producer_id} at offset "
                                   f"{h.base_offset}", position=h.position)
        if p.current_txn_first_offset is None and h.is_transactional:
            p.current_txn_first_offset = h.base_offset
            self._ongoing[h.base_offset] = p.producer_id
        p.last_sequence = h.last_sequence
        p.last_offset = java_long(h.last_offset)  # a Java long in the broker's state (and snapshots)
        p.offset_delta = h.last_offset - h.base_offset
        p.timestamp = h.max_timestamp

    def _append_end_txn_marker(self, p: ProducerStateEntry, h: BatchHeader, control: dict | None) -> AbortedTxn | None:
        """``ProducerAppendInfo.appendEndTxnMarker``: closes the open transaction; an ABORT is a
        ``.txnindex`` entry."""
        ctype = None if control is None else control.get("type")
        if ctype is None:  # empty control batch: the transaction was cleaned away
            return None
        if ctype not in ("ABORT", "COMMIT"):
            # EndTransactionMarker.deserialize -> IllegalArgumentException: Kafka's load fails here.
            raise CorruptDataError(f"Invalid control record type for end transaction marker: {ctype}",
                                   position=h.position)
        first, marker = p.current_txn_first_offset, h.base_offset
        if first is not None and ctype == "ABORT" and self.aborted and marker <= self.aborted[-1].last_offset:
            raise CorruptDataError(f"The last offset of appended transactions must increase sequentially, "
                                   f"but {marker} is not greater than current last offset "
                                   f"{self.aborted[-1].last_offset} of index", position=h.position)
        p.current_txn_first_offset = None
        p.coordinator_epoch = control.get("coordinator_epoch", -1)
        p.timestamp = h.max_timestamp
        if first is None:  # a marker without data completes nothing
            return None
        result = None
        if ctype == "ABORT":
            result = AbortedTxn(0, p.producer_id, first, marker, self._lso(p.producer_id, marker))
            self.aborted.append(result)
        self._ongoing.pop(first, None)
        return result

    def on_batch(self, header: BatchHeader, control_type: str | None = None) -> AbortedTxn | None:
        """:meth:`update` with only the control type of a control batch's first record (``"ABORT"``,
        ``"COMMIT"``; None for an empty control batch), for callers that do not decode markers."""
        return self.update(header, None if control_type is None else {"type": control_type})

    # -- output -------------------------------------------------------------------------------------
    def take(self) -> list[AbortedTxn]:
        """The aborted transactions since the last call (cleared; the open transactions are kept)."""
        out, self.aborted = self.aborted, []
        return out

    def txn_index_bytes(self) -> bytes:
        """The ``.txnindex`` bytes of the entries collected since the last :meth:`take`."""
        return b"".join(encode_aborted_txn(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
                        for t in self.aborted)

    def entries(self) -> list[ProducerEntry]:
        """The snapshot entries, by producer id (-1 for no open transaction)."""
        return [ProducerEntry(p.producer_id, p.epoch, p.last_sequence, p.last_offset, p.offset_delta, p.timestamp,
                              p.coordinator_epoch,
                              -1 if p.current_txn_first_offset is None else p.current_txn_first_offset)
                for _pid, p in sorted(self.producers.items())]

    def snapshot_bytes(self) -> bytes:
        return encode_snapshot(self.entries())

    # -- loading ------------------------------------------------------------------------------------
    @classmethod
    def load(cls, partition, log_end_offset: int) -> tuple[ProducerStateManager, int]:
        """(state, snapshot offset): the snapshot the broker's load picks (:func:`latest_snapshot` with the
        log start offset and the log dir's clean-shutdown marker), then a replay of the batches after it
        (``UnifiedLog.rebuildProducerState``). Without a usable snapshot the whole log from the log start
        offset is replayed, as the broker does (an open transaction in an early segment is found), except
        after a clean shutdown with no snapshot file at all, where the broker reads nothing and starts empty.
        Aborted transactions met in the replay are in the ``.txnindex`` files already and are not kept."""
        ld = getattr(partition, "logdir", None)
        snap = latest_snapshot(partition, log_end_offset, log_start_offset=partition.log_start_offset(),
                               clean_shutdown=ld is not None and ld.clean_shutdown)
        state = cls(snap.entries if snap.path is not None else ())
        if snap.offset < log_end_offset:
            state.replay(partition.segments, snap.offset)
        state.take()
        return state, snap.offset

    def replay(self, segs, from_offset: int, watch=None, until: int | None = None) -> None:
        """Feed the batches at and above ``from_offset`` of segments ``segs`` (what a snapshot does not
        cover yet) through :meth:`update`, each segment walked from the offset index's entry at or below
        ``from_offset``. Batches the broker's state ignores (no producer id, v0/v1) are skipped; a batch
        :meth:`update` refuses keeps the state as it was (data the broker accepted once).

        ``watch(seg, item, before, result)``, when given, sees every item of the walk in the range: a
        :class:`~kltool.storage.scan.Damage` or a batch whose CRC fails (``before`` and ``result`` None,
        not fed), and each batch fed, with ``before`` the producer's open transaction's first offset
        before it (None: none) and ``result`` what :meth:`update` returned (an AbortedTxn or None) or the
        CorruptDataError it raised."""
        for i, seg in enumerate(segs):
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
            if nxt is not None and nxt <= from_offset:
                continue
            if until is not None and seg.base_offset >= until:
                return
            start = seg.position_for_offset(from_offset) if seg.base_offset < from_offset else 0
            for h in seg.walk(start=start):
                if until is not None and isinstance(h, BatchHeader) and h.base_offset >= until:
                    return
                if not isinstance(h, BatchHeader) or not h.crc_valid:
                    if watch is not None:
                        watch(seg, h, None, None)
                    continue
                if h.last_offset < from_offset or h.magic < 2 or h.producer_id < 0:
                    continue
                p = self.producers.get(h.producer_id)
                before = None if p is None else p.current_txn_first_offset
                try:
                    result = self.update(h, control_of(seg.log_path, h) if h.is_control else None)
                except CorruptDataError as e:
                    result = e  # data the broker accepted once; keep the state we have
                if watch is not None:
                    watch(seg, h, before, result)


@dataclass(slots=True)
class SnapshotChoice:
    """Which ``.snapshot`` the broker loads at start-up (:func:`latest_snapshot`): ``offset`` (the replay
    starts there), ``path`` and ``entries`` (None and [] when none is usable: ``offset`` is then where
    the broker starts from empty state), ``skipped``: (path, reason) of the snapshots it passes over
    (stray, out of range, unreadable, corrupt), and ``note``: how the start was chosen without one."""

    offset: int
    path: Path | None
    entries: list
    skipped: list
    note: str = ""


def latest_snapshot(partition, log_end_offset: int, *, log_start_offset: int,
                    clean_shutdown: bool | None = None, stream: bool = False) -> SnapshotChoice:
    """The latest valid snapshot at or below the log end offset (a corrupt one is passed over, as the
    broker deletes it and tries the next older one).

    The broker's load exactly (``LogLoader.load``,
    ``ProducerStateManager.removeStraySnapshots`` and ``truncateAndReload``, ``UnifiedLog
    .rebuildProducerState``): a snapshot whose offset is no segment's base offset is stray (only the
    largest stray survives, when it is at or past the last segment's base), one at or below the log start
    offset is deleted; without a usable one the state starts empty at the log start offset (the whole
    log is replayed), except after a clean shutdown (``clean_shutdown``) with no snapshot file at all,
    where the broker takes empty snapshots and starts empty at the log end offset (nothing replayed).

    With ``stream``, the chosen snapshot's ``entries`` are not held: an iterator that reads them a chunk at a
    time, once (:func:`~kltool.storage.fs.snapshot_entries`; its CRC was checked)."""
    segs = partition.segments
    snaps = sorted(partition.snapshots)
    skipped = []
    bases = {s.base_offset for s in segs}
    strays = [off for off, _p in snaps if off not in bases]
    kept_stray = strays[-1] if strays and (not segs or strays[-1] >= segs[-1].base_offset) else None
    usable = []
    for off, spath in snaps:
        if off not in bases and off != kept_stray:
            skipped.append((spath, f"its offset {off} is no segment's base offset (a stray snapshot)"))
        elif off <= log_start_offset and segs:
            skipped.append((spath, f"its offset {off} is at or below the log start offset {log_start_offset}"))
        else:
            usable.append((off, spath))
    for off, spath in reversed(usable):
        if off > log_end_offset:
            skipped.append((spath, f"its offset {off} is above the log end offset {log_end_offset}"))
            continue
        try:
            snap = read_snapshot(spath, strict=True, entries=not stream)
        except OSError as e:
            skipped.append((spath, e.strerror or str(e)))
            continue
        except CorruptDataError as e:
            skipped.append((spath, str(e)))
            continue
        return SnapshotChoice(off, spath, snapshot_entries(spath, snap) if stream else snap.entries, skipped)
    if clean_shutdown and not snaps:
        return SnapshotChoice(log_end_offset, None, [], skipped,
                              "a clean shutdown and no snapshot: the broker starts with empty producer state at "
                              "the log end offset and reads no batch")
    return SnapshotChoice(log_start_offset, None, [], skipped,
                          "no usable snapshot: the broker replays the log from the log start offset")


def control_of(path_or_data, h: BatchHeader) -> dict | None:
    """The decoded first record of control batch ``h`` (from the file at ``path_or_data``, or its
    bytes), None when it has none or cannot be decoded."""
    if isinstance(path_or_data, Path):
        with open(path_or_data, "rb") as f:
            f.seek(h.position)
            data = f.read(h.size)
    else:
        data = path_or_data
    if not h.count:
        return None
    try:
        cols = decode_records(h, data)
    except CorruptDataError:
        return None
    return cols.controls[0] if cols.controls else None
