"""Transactions and producers of a partition as the broker sees them after start-up, offline.

:func:`partition_transactions` answers what ``kafka-transactions.sh describe-producers`` and
``find-hanging`` answer against a live broker, from the files alone:

* the producer state the broker rebuilds at start-up (``UnifiedLog.rebuildProducerState``): the
  latest usable ``.snapshot`` (:func:`~kltool.storage.producer_state.latest_snapshot`) and a replay of
  the log after it through the one :class:`~kltool.storage.producer_state.ProducerStateManager`; with
  ``scan_all`` the whole log from its first segment instead, every snapshot compared with the state the
  log gives at its offset;
* the open transactions (data after the producer's last marker) with their first offset and first
  timestamp, and the hanging ones by ``find-hanging``'s rule: open, and ``now - lastTimestamp`` above
  the maximum transaction timeout (``TransactionsCommand.FindHangingTransactionsCommand``);
* the last stable offset: min(high watermark, first offset of the earliest open transaction, first
  offset of a completed transaction whose marker is not below the high watermark)
  (``ProducerStateManager.firstUnstableOffset``);
* the aborted transactions of the range read against each segment's ``.txnindex``;
* findings where the files disagree with themselves: damage in the range read, snapshots the broker
  would skip or that disagree with the log, ``.txnindex`` entries missing, extra or different.

Nothing here changes a file. Answers that the files cannot give with certainty say so (a finding of kind
``state_incomplete``, ``complete`` False) rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptDataError
from ..format import names as fn
from ..format.index import (
    MAX_LISTED,
    TXN_ENTRY,
    ZERO_TXN,
    AbortedTxn,
    txn_index_check,
    txn_index_chunks,
    unchecked_note,
)
from ..format.records import BatchHeader, java_long
from .findings import Finding
from .fs import read_txn_index_file
from .producer_state import ProducerStateEntry, ProducerStateManager, latest_snapshot
from .scan import Damage

__all__ = ["DEFAULT_MAX_TRANSACTION_TIMEOUT_MS", "PRODUCER_ID_EXPIRATION_MS", "OpenTransaction", "AbortedRange",
           "PartitionTransactions", "partition_transactions", "producer_json"]

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000  # transaction.max.timeout.ms; find-hanging's default
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
LOOKUP_CHUNK = 64 << 10  # a lookup reads a few batches, not a walker's 4 MiB chunk
SNAPSHOT_CHECK_LIMIT = 1000  # producers of the latest snapshot checked against their batches (startup mode)


@dataclass(slots=True)
class OpenTransaction:
    """A transaction with data and no marker yet. ``first_timestamp`` is the first timestamp of the
    batch at ``first_offset`` (None when that batch is gone: below the log start, or unreadable);
    ``age_ms`` = now - first_timestamp; ``idle_ms`` = now - the producer's last timestamp, what
    ``find-hanging`` compares with the timeout; ``hanging`` = idle_ms > the timeout."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    first_offset: int
    first_timestamp: int | None
    last_offset: int
    last_timestamp: int
    age_ms: int | None
    idle_ms: int
    hanging: bool

    def to_json(self) -> dict:
        return {"type": "transaction", "state": "hanging" if self.hanging else "open", "topic": self.topic,
                "partition": self.partition, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "coordinator_epoch": self.coordinator_epoch,
                "first_offset": self.first_offset, "first_timestamp": self.first_timestamp,
                "last_offset": self.last_offset, "last_timestamp": self.last_timestamp, "age_ms": self.age_ms,
                "idle_ms": self.idle_ms}


@dataclass(slots=True)
class AbortedRange:
    """An aborted transaction the log shows (from its ABORT marker): what its segment's ``.txnindex``
    must hold. ``indexed``: whether it does."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int
    segment: str
    indexed: bool

    def to_json(self, topic: str, partition: int) -> dict:
        return {"type": "aborted_transaction", "topic": topic, "partition": partition,
                "producer_id": self.producer_id, "first_offset": self.first_offset,
                "last_offset": self.last_offset, "last_stable_offset": self.last_stable_offset,
                "segment": self.segment, "indexed": self.indexed}


@dataclass
class PartitionTransactions:
    """What :func:`partition_transactions` found for one partition."""

    topic: str
    partition: int
    path: Path
    now: int
    max_transaction_timeout_ms: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    high_watermark_source: str  # replication-offset-checkpoint | log_end_offset
    last_stable_offset: int
    snapshot_offset: int  # where the replay started
    snapshot: Path | None  # the snapshot loaded (None: none, empty state)
    scan_all: bool
    producers: dict[int, ProducerStateEntry] = field(default_factory=dict)
    open: list[OpenTransaction] = field(default_factory=list)
    aborted: list[AbortedRange] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    complete: bool = True  # no damage in the range read, and the state before it known (or all the log read)

    @property
    def hanging(self) -> list[OpenTransaction]:
        return [t for t in self.open if t.hanging]

    def expired(self, p: ProducerStateEntry) -> bool:
        """The broker drops a producer with no open transaction whose last timestamp is
        ``producer.id.expiration.ms`` (1 day) before now (``ProducerStateManager.isProducerExpired``)."""
        return p.current_txn_first_offset is None and self.now - p.timestamp >= PRODUCER_ID_EXPIRATION_MS

    def to_json(self) -> dict:
        return {"type": "partition", "topic": self.topic, "partition": self.partition,
                "log_start_offset": self.log_start_offset, "log_end_offset": self.log_end_offset,
                "high_watermark": self.high_watermark, "high_watermark_source": self.high_watermark_source,
                "last_stable_offset": self.last_stable_offset, "open_transactions": len(self.open),
                "hanging_transactions": len(self.hanging), "aborted_transactions": len(self.aborted),
                "producers": len(self.producers), "replayed_from": self.snapshot_offset,
                "snapshot": None if self.snapshot is None else self.snapshot.name, "scan_all": self.scan_all,
                "complete": self.complete}


def producer_json(r: PartitionTransactions, p: ProducerStateEntry) -> dict:
    """The ``producer`` object of ``kltool producers --json`` (describe-producers' columns)."""
    return {"type": "producer", "topic": r.topic, "partition": r.partition, "producer_id": p.producer_id,
            "producer_epoch": p.epoch, "last_sequence": p.last_sequence, "last_offset": p.last_offset,
            "last_timestamp": p.timestamp, "coordinator_epoch": p.coordinator_epoch,
            "current_txn_first_offset": p.current_txn_first_offset, "expired": r.expired(p)}


# ------------------------------------------------------------------------------------------- the engine


class _Watch:
    """What a replay sees beyond the producer state: damage, first timestamps of the transactions it
    opens, completed transactions (for the LSO), aborted transactions per segment, and whether each
    marker's outcome is certain (the producer's state was known when its transaction began)."""

    def __init__(self, seeded: bool, hw: int):
        self.seeded = seeded
        self.hw = hw
        self.findings: list[Finding] = []
        self.damaged = False
        self.first_ts: dict[int, int] = {}  # producer id -> first timestamp of its open transaction
        self.open_known: dict[int, bool] = {}  # producer id -> its state was known when the txn began
        self.known: set[int] = set()
        self.unreplicated: list[tuple[int, int]] = []  # (first offset, marker offset >= hw)
        self.aborted: dict[int, list[AbortedTxn]] = {}  # segment base offset -> aborted txns
        self.markers: dict[int, bool] = {}  # marker offset -> its outcome is certain
        self.last_fed = -1

    def __call__(self, seg, item, before, result) -> None:
        if isinstance(item, Damage):
            self.damaged = True
            self.findings.append(Finding("error", item.kind, str(seg.log_path),
                                         f"{item.message}: producer state after it may differ from the broker's",
                                         item.position, None, item.length))
            return
        h: BatchHeader = item
        if not h.crc_valid:
            self.damaged = True
            self.findings.append(Finding("error", "crc_mismatch", str(seg.log_path),
                                         f"batch {h.base_offset}..{h.last_offset} fails its CRC (stored {h.crc}); "
                                         f"left out of the producer state (the broker's recovery would cut here)",
                                         h.position, h.base_offset))
            return
        self.last_fed = max(self.last_fed, h.last_offset)
        pid = h.producer_id
        was_known = self.seeded or pid in self.known
        if isinstance(result, CorruptDataError):
            self.findings.append(Finding("error", "producer_state", str(seg.log_path), str(result), h.position,
                                         h.base_offset))
            return
        if not h.is_control:
            if h.is_transactional and before is None:
                self.first_ts[pid] = h.first_timestamp
                self.open_known[pid] = was_known
            elif not h.is_transactional:
                self.known.add(pid)
            return
        self.markers[h.base_offset] = self.open_known.get(pid, was_known) if before is not None else was_known
        self.known.add(pid)
        self.first_ts.pop(pid, None)
        if before is not None and h.base_offset >= self.hw:
            self.unreplicated.append((before, h.base_offset))
        if isinstance(result, AbortedTxn):
            self.aborted.setdefault(seg.base_offset, []).append(result)


def high_watermark(p, leo: int) -> tuple[int, str]:
    """(high watermark, where it came from): the partition's line in ``replication-offset-checkpoint``, at
    most the log end offset, else the log end offset."""
    if p.logdir is not None:
        try:
            hw = p.logdir.checkpoint(fn.REPLICATION_OFFSET_CHECKPOINT).get((p.topic, p.partition))
        except CorruptDataError:
            hw = None
        if hw is not None:
            return min(hw, leo), fn.REPLICATION_OFFSET_CHECKPOINT
    return leo, "log_end_offset"


def batch_at(p, offset: int) -> BatchHeader | None:
    """The CRC-valid batch holding ``offset``, found the broker's way (segment by base offset, the offset
    index, a short scan read in small chunks); None when no batch holds it."""
    for seg in p.segments_from(offset):
        start = seg.position_for_offset(offset) if seg.base_offset < offset else 0
        for h in seg.batches(start=start, chunk_size=LOOKUP_CHUNK):
            if h.base_offset > offset:
                return None
            if h.crc_valid and h.last_offset >= offset:
                return h if h.base_offset <= offset else None
    return None


def partition_transactions(p, *, now: int, max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
                           scan_all: bool = False) -> PartitionTransactions:
    """Producer state, open and hanging transactions, the LSO and the ``.txnindex`` check of partition
    ``p`` (see the module docstring). Reads the latest snapshot and the log after it (about a segment's
    tail on a partition the broker shut down cleanly), or with ``scan_all`` every segment."""
    segs = p.segments
    leo = p.log_end_offset()
    log_start = p.log_start_offset()
    hw, hw_source = high_watermark(p, leo)
    findings: list[Finding] = []
    if scan_all:
        start, note = log_start, "--scan-all"
        state, snap_path, seeded = ProducerStateManager(), None, start == 0
        watch = _Watch(seeded, hw)
        _replay_checking_snapshots(p, state, watch, start, leo, log_start)
    else:
        clean = p.logdir is not None and p.logdir.clean_shutdown
        # (the snapshot's entries streamed into the state, never held beside it: the first
        # SNAPSHOT_CHECK_LIMIT kept for the check against their batches)
        choice = latest_snapshot(p, leo, log_start_offset=log_start, clean_shutdown=clean, stream=True)
        for path, why in choice.skipped:
            findings.append(Finding("warning", "snapshot_skipped", str(path),
                                    f"the broker skips (and deletes) this snapshot at start-up: {why}"))
        start, snap_path, note = choice.offset, choice.path, choice.note
        seeded = snap_path is not None or start == 0
        checked: list = []
        state = ProducerStateManager(_keeping(choice.entries, checked, SNAPSHOT_CHECK_LIMIT))
        choice.entries = None
        watch = _Watch(seeded, hw)
        if start < leo:
            state.replay(segs, start, watch)
        if snap_path is not None:
            findings += _check_snapshot_batches(p, snap_path, choice.offset, checked, log_start)
    findings += watch.findings
    r = PartitionTransactions(p.topic, p.partition, p.path, now, max_transaction_timeout_ms, log_start, leo, hw,
                              hw_source, hw, start, snap_path, scan_all, state.producers)
    if not seeded:  # (a note when the broker reads all there is: its answer is this one)
        findings.append(Finding("info" if start == log_start else "warning", "state_incomplete", str(p.path),
                                f"{note}: the state starts empty at offset {start} (as the broker's does); a "
                                f"transaction begun before it and silent since is not seen"
                                + ("" if scan_all or start == log_start else "; --scan-all reads every segment")))
    r.complete = (seeded or start == log_start) and not watch.damaged
    _open_transactions(r, p, state, watch)
    unstable = [t.first_offset for t in r.open] + [first for first, _m in watch.unreplicated]
    r.last_stable_offset = min([hw, *unstable])
    findings += _check_txn_indexes(r, p, segs, start, watch)
    r.findings = findings
    return r


def _open_transactions(r: PartitionTransactions, p, state: ProducerStateManager, watch: _Watch) -> None:
    for pid, first in sorted(state.open_txns.items(), key=lambda kv: kv[1]):
        e = state.producers[pid]
        first_ts = watch.first_ts.get(pid)
        if first_ts is None:  # begun before the replay: read its first batch
            h = batch_at(p, first)
            first_ts = h.first_timestamp if h is not None and h.producer_id == pid else None
        idle = r.now - e.timestamp
        r.open.append(OpenTransaction(p.topic, p.partition, pid, e.epoch, e.coordinator_epoch, first, first_ts,
                                      e.last_offset, e.timestamp, None if first_ts is None else r.now - first_ts,
                                      idle, idle > r.max_transaction_timeout_ms))


def _check_txn_indexes(r: PartitionTransactions, p, segs, start: int, watch: _Watch) -> list[Finding]:
    """Each segment's ``.txnindex`` (entries whose marker is at or above ``start``) against the aborted
    transactions the replay met in it."""
    out: list[Finding] = []
    exact_lso = watch.seeded and not watch.damaged  # (other producers' transactions all known)
    for i, seg in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if nxt is not None and nxt <= start:
            continue
        path = seg.txnindex_path
        got = _read_txn_index(path, seg.base_offset, out)
        if got is None:
            continue
        data, budget = got
        expected = watch.aborted.get(seg.base_offset, [])
        actual, extra, unchecked = _txn_entries(data, start, {t.last_offset for t in expected}, watch, budget)
        for t in expected:
            certain = watch.markers.get(t.last_offset, False)
            got = actual.pop(t.last_offset, None)
            r.aborted.append(AbortedRange(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset,
                                          seg.name, got is not None))
            if got is None:
                if certain:
                    out.append(Finding("error", "txn_index_missing", str(path),
                                       f"aborted transaction of producer {t.producer_id} (offsets {t.first_offset}.."
                                       f"{t.last_offset}, ABORT marker at {t.last_offset}) is not in the .txnindex: "
                                       f"read_committed consumers would read its records", None, t.last_offset))
                continue
            k, a = got
            diffs = []
            if a.producer_id != t.producer_id:
                diffs.append(f"producer id {a.producer_id} (the marker's is {t.producer_id})")
            if certain and a.first_offset != t.first_offset:
                diffs.append(f"first offset {a.first_offset} (the log says {t.first_offset})")
            if certain and exact_lso and a.last_stable_offset != t.last_stable_offset:
                diffs.append(f"last stable offset {a.last_stable_offset} (the log says {t.last_stable_offset})")
            if diffs:
                out.append(Finding("error", "txn_index_mismatch", str(path),
                                   f"entry {k} for the ABORT at offset {t.last_offset}: " + ", ".join(diffs),
                                   k * TXN_ENTRY, t.last_offset))
        for last, (k, a) in sorted(extra.items()):
            why = ("there is no ABORT marker of it at that offset" if watch.markers.get(last) is None else
                   "the marker there does not abort a transaction of it")
            out.append(Finding("error", "txn_index_extra", str(path),
                               f"entry {k} says producer {a.producer_id} aborted offsets {a.first_offset}..{last}, but "
                               f"{why}: read_committed consumers would skip its records", k * TXN_ENTRY, last))
        if unchecked is not None and budget:  # (none left: its check already said the rest is not checked)
            out.append(Finding("info", "index_unchecked", str(path), unchecked_note(
                len(extra), *unchecked, what="are corrupt or name an abort the log does not have")))
    return out


def _read_txn_index(path: Path, base_offset: int, out: list[Finding]) -> tuple[object, int] | None:
    """The content of the ``.txnindex`` at ``path`` (b"" when missing) and how many more of its entries may be
    listed (of :data:`MAX_LISTED` a file), after the findings of its sanity check
    (:func:`~kltool.format.index.txn_index_check`, capped) and of a partial last entry; None, with a
    finding, when it cannot be read."""
    try:
        data = read_txn_index_file(path)  # a trailing run of zero entries read as one
    except FileNotFoundError:
        data = b""
    except OSError as e:
        out.append(Finding("error", "txn_index_unreadable", str(path), e.strerror or str(e)))
        return None
    problems, unchecked = txn_index_check(data, base_offset, path=str(path))
    for msg in problems:
        out.append(Finding("error", "txn_index_corrupt", str(path), msg))
    if unchecked is not None:  # garbage: the rest is not checked (a bounded time and output)
        out.append(Finding("info", "index_unchecked", str(path),
                           unchecked_note(len(problems), *unchecked, what="are corrupt")))
    if len(data) % TXN_ENTRY:
        out.append(Finding("warning", "txn_index_corrupt", str(path),
                           f"{len(data) % TXN_ENTRY} bytes after the last whole entry (ignored by the broker)",
                           len(data) - len(data) % TXN_ENTRY))
    return data, 0 if unchecked is not None else MAX_LISTED - len(problems)


def _txn_entries(data, start: int, wanted: set[int], watch: _Watch, budget: int
                 ) -> tuple[dict, dict, tuple[int, int] | None]:
    """The entries of a ``.txnindex`` (read a chunk at a time) whose marker is at or above ``start``, by marker
    offset (of several with one offset the last), as ``(entry number, entry)``: (those of a ``wanted`` offset,
    those that name an abort the log does not have, None); once ``budget`` of the latter are held (garbage),
    the rest is not read: (…, …, (entries read, entries)). Memory stays bounded whatever the file holds."""
    actual: dict[int, tuple[int, AbortedTxn]] = {}
    extra: dict[int, tuple[int, AbortedTxn]] = {}
    for i, m, entries in txn_index_chunks(data):
        # (a run of zero entries, a sparse file's hole: all alike, the last of them stands for them all)
        pairs = enumerate(entries, i) if entries is not None else ((i + m - 1, ZERO_TXN),)
        for k, a in pairs:
            last = a.last_offset
            if last < start:
                continue
            if last in wanted:
                actual[last] = (k, a)
                continue
            certain = watch.markers.get(last)
            if certain is False or (certain is None and watch.damaged):
                continue
            if last not in extra and len(extra) >= budget:
                return actual, extra, (k if entries is not None else i, len(data) // TXN_ENTRY)
            extra[last] = (k, a)
    return actual, extra, None


# ------------------------------------------------------------------------------------------ snapshots


def _snapshot_diffs(snap, e: ProducerStateEntry) -> list[str]:
    got = (e.epoch, e.last_sequence, e.last_offset, e.timestamp, e.coordinator_epoch,
           -1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
    want = (snap.producer_epoch, snap.last_sequence, snap.last_offset, snap.timestamp, snap.coordinator_epoch,
            snap.current_txn_first_offset)
    names = ("epoch", "last_sequence", "last_offset", "last_timestamp", "coordinator_epoch",
             "current_txn_first_offset")
    return [f"{n} {w} (the log says {g})" for n, w, g in zip(names, want, got, strict=True) if w != g]


def _keeping(entries, kept: list, n: int):
    """``entries``, one at a time, the first ``n`` of them also appended to ``kept``."""
    for e in entries:
        if len(kept) < n:
            kept.append(e)
        yield e


def _check_snapshot_batches(p, path: Path, offset: int, entries, log_start: int) -> list[Finding]:
    """The latest snapshot against the batches it names (startup mode: no full replay): each producer's
    last batch must hold its last offset with its id, epoch and last sequence, and an open transaction's
    first batch must be a transactional batch of it. Producers past :data:`SNAPSHOT_CHECK_LIMIT` are not
    checked."""
    out = []
    for e in entries[:SNAPSHOT_CHECK_LIMIT]:
        if e.last_offset >= offset or e.current_txn_first_offset >= offset:
            out.append(Finding("error", "snapshot_disagrees", str(path),
                               f"producer {e.producer_id}: a snapshot at offset {offset} names offset "
                               f"{max(e.last_offset, e.current_txn_first_offset)}, at or above its own offset"))
            continue
        if e.last_offset >= log_start:
            h = batch_at(p, e.last_offset)
            if h is None:
                out.append(Finding("warning", "snapshot_disagrees", str(path),
                                   f"producer {e.producer_id}: no batch holds its last offset {e.last_offset}",
                                   None, e.last_offset))
            elif (h.producer_id, h.producer_epoch, java_long(h.last_offset), h.last_sequence) \
                    != (e.producer_id, e.producer_epoch, e.last_offset, e.last_sequence):
                out.append(Finding("error", "snapshot_disagrees", str(path),
                                   f"producer {e.producer_id} epoch {e.producer_epoch} last offset {e.last_offset} "
                                   f"last sequence {e.last_sequence}, but the batch {h.base_offset}..{h.last_offset} "
                                   f"there is producer {h.producer_id} epoch {h.producer_epoch}",
                                   None, e.last_offset))
        first = e.current_txn_first_offset
        if first >= log_start:
            h = batch_at(p, first)
            if h is None or h.producer_id != e.producer_id or not h.is_transactional or h.base_offset != first:
                out.append(Finding("error", "snapshot_disagrees", str(path),
                                   f"producer {e.producer_id}: its open transaction begins at offset {first}, but no "
                                   f"transactional batch of it begins there", None, first))
    return out


def _replay_checking_snapshots(p, state: ProducerStateManager, watch: _Watch, start: int, leo: int,
                               log_start: int) -> None:
    """--scan-all: the whole log from ``start``, and at each snapshot's offset the state compared with it."""
    from .fs import read_snapshot

    segs = p.segments
    at = start
    for off, spath in sorted(p.snapshots):
        if off < start or off > leo:
            continue
        if off > at:
            state.replay(segs, at, watch, until=off)
            at = max(off, watch.last_fed + 1)
        try:
            snap = read_snapshot(spath, strict=True)
        except (OSError, CorruptDataError) as e:
            watch.findings.append(Finding("warning", "snapshot_skipped", str(spath),
                                          f"the broker skips (and deletes) this snapshot at start-up: {e}"))
            continue
        for s in snap.entries:
            e = state.producers.get(s.producer_id)
            if e is None:
                if watch.seeded and s.last_offset >= log_start:
                    watch.findings.append(Finding("error", "snapshot_disagrees", str(spath),
                                                  f"producer {s.producer_id} is in the snapshot, but no batch of it "
                                                  f"comes before offset {off}"))
                continue
            diffs = _snapshot_diffs(s, e)
            if diffs and (watch.seeded or s.producer_id in watch.known):
                watch.findings.append(Finding("error", "snapshot_disagrees", str(spath),
                                              f"producer {s.producer_id} at offset {off}: " + ", ".join(diffs)))
        named = {s.producer_id for s in snap.entries}
        for pid, e in state.producers.items():
            if pid not in named and e.current_txn_first_offset is not None:
                watch.findings.append(Finding("error", "snapshot_disagrees", str(spath),
                                              f"producer {pid} has a transaction open since offset "
                                              f"{e.current_txn_first_offset}, and the snapshot at {off} lacks it"))
    if at < leo:
        state.replay(segs, at, watch)
