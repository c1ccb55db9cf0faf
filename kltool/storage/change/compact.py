"""Compaction offline: one pass of Kafka 4.x's log cleaner per partition (``LogCleanerManager.cleanableOffsets``
+ ``Cleaner.doClean``), planned, previewed, then swapped in the broker's way, with a backup.

Per partition (the rules themselves are in :mod:`kltool.storage.change.cleaner`):

1. **Range.** The first dirty offset is the partition's line in the log dir's ``cleaner-offset-checkpoint``
   (the log start offset when missing, below the log start or above the log end). The first uncleanable
   offset is the earliest of the last stable offset (the first offset of the earliest open transaction, else
   the high watermark from ``replication-offset-checkpoint``, else the log end), the active segment's base
   offset, and the base offset of the first dirty segment whose largest timestamp is newer than
   ``now - min.compaction.lag.ms``.
2. **Offset map** over the dirty range (keys of aborted transactions and keyless records left out), bounded
   like the broker's by ``--dedupe-buffer-size``; full, it ends the pass where it stopped.
3. **Groups.** Every segment below the map's end, from the log start, in groups by ``segment.bytes``, the
   index sizes and an offset span of at most ``Integer.MAX_VALUE``; each group is filtered into one new
   segment named after its first base offset (``<base>.log.cleaned`` and its indexes). ``min.cleanable.dirty.ratio``
   is reported (whether the broker would pick the partition now), not required.
4. **Swap**, per group as ``LocalLog.replaceSegments`` does: the ``.cleaned`` files renamed ``.swap`` (log
   first), the old segment files removed (renamed ``.deleted`` then deleted, or, with a backup, moved into
   the backup run by :func:`kltool.storage.change.apply.apply_changes`, whose manifest records the new files as
   ``create`` steps so that ``kltool restore`` removes them again), the ``.swap`` files renamed into place;
   then ``cleaner-offset-checkpoint`` moves to the map's end. Killed at any point, the broker's start-up
   (``LogLoader``) and ``kltool verify --repair`` finish the swap (every ``.swap`` file of the group exists)
   or undo it (a ``.cleaned`` file is left: it and the ``.swap`` files at or above it are deleted).

A dry run computes the same pass and writes nothing. Without it, planning writes the ``.cleaned`` files
(under the log dir's ``.lock``) and :func:`apply_compaction` swaps them in. Partitions of a topic whose
``cleanup.policy`` lacks ``compact`` are refused unless ``force``; a damaged segment or an unfinished swap
refuses its partition, pointing to ``kltool verify --repair``.
"""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CorruptDataError, UsageError
from ...format import names as fn
from ...format.checkpoints import encode_offset_checkpoint
from ..findings import Finding
from ..fs import atomic_write, fsync_dir
from ..logdir import Selection
from ..partition import Partition
from ..producer_state import ProducerStateManager, control_of
from ..topic_config import INTERNAL_TOPIC_DEFAULTS, TopicConfig, load_topic_config
from . import apply as ap
from .cleaner import (
    DEFAULT_DEDUPE_BUFFER,
    IO_BUFFER,
    CleanedSegment,
    CleanStats,
    OffsetMap,
    Rules,
    TxnMeta,
    batches_of,
    collect_aborted,
    filter_batch,
    group_segments,
)
from .plan import Action, ChangeSet, forget_listings, partition_gate

__all__ = ["Policy", "PartitionCompaction", "Group", "CompactPlan", "plan_compaction", "apply_compaction",
           "run_compaction", "summarize", "SETTINGS", "DEFAULT_PRODUCER_ID_EXPIRATION_MS"]

CLEANER_CHECKPOINT = fn.CLEANER_OFFSET_CHECKPOINT
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86400000  # producer.id.expiration.ms
SETTINGS = ("cleanup.policy", "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
            "min.cleanable.dirty.ratio", "segment.bytes", "segment.index.bytes", "index.interval.bytes")
_PROGRESS_STEP = 4 << 20


@dataclass(frozen=True)
class Policy:
    """What one run applies. ``config`` overrides the topics' settings (``--config``); the rest of each
    setting comes from ``kltool-topics.json``, else Kafka's default."""

    now: int
    config: dict = field(default_factory=dict, hash=False, compare=False)
    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER
    force: bool = False
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS


class Group:
    """One group of source segments and the new segment it becomes."""

    def __init__(self, sources: list, cleaned: CleanedSegment):
        self.sources = sources
        self.cleaned = cleaned
        self.stats = CleanStats()
        self.actions: list[Action] = []

    @property
    def base_offset(self) -> int:
        return self.cleaned.base_offset

    def to_json(self) -> dict:
        d = {"base_offset": self.base_offset, "segments": [s.name for s in self.sources],
             "segment_bytes_before": sum(s.size for s in self.sources), "segment_bytes_after": self.cleaned.size}
        d.update(self.stats.to_json())
        return d


class PartitionCompaction:
    """The plan of one partition (``to_json``: the ``partition_compaction`` line of ``--json``)."""

    def __init__(self, partition: Partition):
        self.partition = partition
        self.settings: dict[str, dict] = {}
        self.log_start_offset: int | None = None
        self.log_end_offset: int | None = None
        self.high_watermark: int | None = None
        self.last_stable_offset: int | None = None
        self.first_dirty_offset: int | None = None
        self.first_uncleanable_offset: int | None = None
        self.uncleanable_by: list[str] = []
        self.end_offset: int | None = None
        self.map_entries = 0
        self.map_capacity = 0
        self.map_full = False
        self.dirty_ratio: float | None = None
        self.groups: list[Group] = []
        self.stats = CleanStats()
        self.notes: list[Finding] = []
        self.skipped = False
        self.refused = False
        self.checkpoint_action: Action | None = None

    @property
    def name(self) -> str:
        return self.partition.name

    @property
    def actions(self) -> list[Action]:
        return [a for g in self.groups for a in g.actions]

    def setting(self, key: str):
        return self.settings[key]["value"]

    def note(self, kind: str, message: str, severity: str = "info", file=None, offset=None) -> None:
        self.notes.append(Finding(severity, kind, str(file or self.partition.path), message, offset=offset))

    def to_json(self) -> dict:
        p = self.partition
        ratio = self.settings.get("min.cleanable.dirty.ratio", {}).get("value")
        return {"type": "partition_compaction", "topic": p.topic, "partition": p.partition, "path": str(p.path),
                "skipped": self.skipped, "refused": self.refused, "settings": self.settings,
                "log_start_offset": self.log_start_offset, "log_end_offset": self.log_end_offset,
                "high_watermark": self.high_watermark, "last_stable_offset": self.last_stable_offset,
                "first_dirty_offset": self.first_dirty_offset,
                "first_uncleanable_offset": self.first_uncleanable_offset, "uncleanable_by": self.uncleanable_by,
                "end_offset": self.end_offset, "map_entries": self.map_entries, "map_capacity": self.map_capacity,
                "map_full": self.map_full,
                "dirty_ratio": None if self.dirty_ratio is None else round(self.dirty_ratio, 6),
                "broker_would_clean": None if self.dirty_ratio is None or ratio is None
                else self.dirty_ratio > float(ratio),
                "groups": [g.to_json() for g in self.groups], **self.stats.to_json()}


class CompactPlan:
    def __init__(self, policy: Policy, dry_run: bool):
        self.policy = policy
        self.dry_run = dry_run
        self.partitions: list[PartitionCompaction] = []
        self.checkpoints: list[Action] = []  # one cleaner-offset-checkpoint write per log dir
        self.manifests: list[Path] = []  # the backup runs written (applied with a backup)

    @property
    def actions(self) -> list[Action]:
        out = [a for pc in self.partitions for a in pc.actions]
        return out + self.checkpoints

    @property
    def has_work(self) -> bool:
        return bool(self.actions)

    @property
    def notes(self) -> list[Finding]:
        return [n for pc in self.partitions for n in pc.notes]

    def discard(self) -> None:
        """Remove every ``.cleaned`` file written (a pass that stops before its swap)."""
        for pc in self.partitions:
            for g in pc.groups:
                g.cleaned.discard()


# --------------------------------------------------------------------------------------------- settings


def topic_settings(ld, topic: str, overrides: dict) -> dict[str, dict]:
    """{setting: {"value", "source"}} for ``topic``: ``--config``, then ``kltool-topics.json``, then the
    internal topics' defaults, then Kafka's."""
    cfg = load_topic_config(ld.path, topic) if ld is not None else \
        TopicConfig({}, dict(INTERNAL_TOPIC_DEFAULTS.get(topic, {})))
    out = {}
    for k in SETTINGS:
        if k in overrides:
            out[k] = {"value": overrides[k], "source": "--config"}
        elif k in cfg.overrides:
            out[k] = {"value": cfg.overrides[k], "source": "kltool-topics.json"}
        elif k in cfg.defaults:
            out[k] = {"value": cfg.defaults[k], "source": "internal topic default"}
        else:
            out[k] = {"value": cfg.get(k), "source": "Kafka default"}
    return out


def _mtime_ms(path: Path) -> int:
    return os.stat(path).st_mtime_ns // 1_000_000


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


# ------------------------------------------------------------------------------------------------- plan


class _Progress:
    def __init__(self, fn_: Callable[[int], None] | None):
        self.fn = fn_
        self.pending = 0

    def add(self, n: int) -> None:
        if self.fn is None:
            return
        self.pending += n
        if self.pending >= _PROGRESS_STEP:
            self.fn(self.pending)
            self.pending = 0

    def flush(self) -> None:
        if self.fn is not None and self.pending:
            self.fn(self.pending)
            self.pending = 0


class _Planner:
    def __init__(self, p: Partition, policy: Policy, dry_run: bool, progress: _Progress):
        self.p = p
        self.policy = policy
        self.dry_run = dry_run
        self.progress = progress
        self.pc = PartitionCompaction(p)

    def skip(self, kind: str, message: str, severity: str = "info") -> PartitionCompaction:
        self.pc.note(kind, message, severity)
        self.pc.skipped = True
        return self.pc

    def plan(self) -> PartitionCompaction:
        p, pc, policy = self.p, self.pc, self.policy
        gate = partition_gate(p, not_run="the broker does not clean it", metadata="the log cleaner never cleans it",
                              needs="compaction needs its cleaner-offset-checkpoint")
        if gate:
            return self.skip(*gate)
        ld = p.logdir
        pc.settings = topic_settings(ld, p.topic, policy.config)
        cleanup = pc.setting("cleanup.policy")
        if "compact" not in cleanup.split(",") and not policy.force:
            pc.refused = True
            return self.skip("not_compacted", f"cleanup.policy={cleanup}: the broker never compacts this topic; "
                             f"refused (--force compacts it anyway)", "warning")
        pending = [f for f in p.stale_files if f.name.endswith((".swap", ".cleaned"))]
        if pending:
            pc.refused = True
            return self.skip("stale_file", f"{pending[0].name}: an unfinished clean or swap; the broker finishes or "
                             f"undoes it at start-up; run kltool verify --repair first", "warning")
        segs = p.segments
        if not segs:
            return self.skip("empty", "no segments")
        self.range(segs, ld)
        if pc.first_dirty_offset >= pc.first_uncleanable_offset:
            return self.skip("nothing_dirty", f"nothing to clean: the first dirty offset {pc.first_dirty_offset} is "
                             f"not below the first uncleanable offset {pc.first_uncleanable_offset} "
                             f"({', '.join(pc.uncleanable_by)})")
        self.clean(segs)
        return pc

    # -- 1. the range --------------------------------------------------------------------------------
    def range(self, segs, ld) -> None:
        p, pc, now = self.p, self.pc, self.policy.now
        key = (p.topic, p.partition)
        start, leo = p.log_start_offset(), p.log_end_offset()
        pc.log_start_offset, pc.log_end_offset = start, leo
        hw = ld.checkpoint(fn.REPLICATION_OFFSET_CHECKPOINT).get(key)
        hw = leo if hw is None else min(max(hw, start), leo)
        pc.high_watermark = hw
        self.state = ProducerStateManager.load(p, leo)[0]
        open_first = min(self.state.open_txns.values(), default=None)
        pc.last_stable_offset = hw if open_first is None else min(open_first, hw)
        cp = ld.checkpoint(CLEANER_CHECKPOINT).get(key)
        if cp is None:
            first_dirty = start
        elif cp < start or cp > leo:
            first_dirty = start
            pc.note("checkpoint_reset", f"{CLEANER_CHECKPOINT} says {cp}, outside the log [{start}, {leo}]: the "
                    f"broker resets the first dirty offset to the log start offset {start}",
                    file=ld.path / CLEANER_CHECKPOINT)
        else:
            first_dirty = cp
        pc.first_dirty_offset = first_dirty
        cands = [(pc.last_stable_offset, "last stable offset"), (segs[-1].base_offset, "active segment")]
        lag = max(int(pc.setting("min.compaction.lag.ms")), 0)
        if lag > 0:
            bases = [s.base_offset for s in segs]
            for s in segs[max(0, bisect_right(bases, first_dirty) - 1):-1]:
                if s.largest_timestamp > now - lag:
                    cands.append((s.base_offset, "min.compaction.lag.ms"))
                    break
        low = min(c for c, _ in cands)
        pc.uncleanable_by = [why for c, why in cands if c == low]
        pc.first_uncleanable_offset = max(first_dirty, low)
        # LogToClean's ratio: dirty bytes (floor(first dirty) .. the segment of the first uncleanable offset)
        # against them plus the clean bytes (segments below the first dirty offset)
        clean = sum(s.size for s in segs if s.base_offset < first_dirty)
        unclean_seg = next((s.base_offset for s in segs[:-1] if s.base_offset >= low), segs[-1].base_offset)
        lo = min(first_dirty, unclean_seg)
        bases = [s.base_offset for s in segs]
        floor_i = max(0, bisect_right(bases, lo) - 1)
        dirty = sum(s.size for s in segs[floor_i:] if s.base_offset < unclean_seg)
        pc.dirty_ratio = dirty / (clean + dirty) if clean + dirty else 0.0

    # -- 2. the offset map ---------------------------------------------------------------------------
    def build_map(self, segs, txn_lists) -> OffsetMap:
        pc = self.pc
        start, end = pc.first_dirty_offset, pc.first_uncleanable_offset
        bases = [s.base_offset for s in segs]
        first = max(0, bisect_right(bases, start) - 1)
        dirty = [s for s in segs[first:] if s.base_offset < end]
        m = OffsetMap(self.policy.dedupe_buffer_size, input_bytes=sum(s.size for s in dirty))
        if m.capacity < 1:
            raise UsageError(f"the offset map of {self.policy.dedupe_buffer_size} bytes is too small to fit even "
                             f"one key (--dedupe-buffer-size: 24 bytes a key, filled to 90%)")
        txn = TxnMeta()
        txn.add(collect_aborted(txn_lists, first, pc.log_start_offset, end))
        m.start = start
        full = False
        for j, seg in enumerate(dirty):
            nxt = dirty[j + 1].base_offset if j + 1 < len(dirty) else end
            try:
                full = self.map_segment(seg, m, txn, start)
            except CorruptDataError as e:  # records the decoder refuses: name the segment
                raise e.at(seg.log_path) from None
            if full:
                break
            m.update_latest(nxt - 1)
        pc.map_entries, pc.map_capacity, pc.map_full = len(m), m.capacity, full
        pc.end_offset = m.latest + 1
        if full:
            pc.note("map_full", f"the offset map filled up ({len(m)} keys; --dedupe-buffer-size "
                    f"{self.policy.dedupe_buffer_size}): this pass cleans up to offset {pc.end_offset}, the next "
                    f"goes on from there", "warning")
        return m

    def map_segment(self, seg, m: OffsetMap, txn: TxnMeta, start: int) -> bool:
        """``buildOffsetMapForSegment``: True when the map filled up in this segment."""
        for h in batches_of(seg, self.index_position(seg, start)):
            self.progress.add(h.size)
            if h.magic >= 2 and h.is_control:
                c = control_of(h.data, h)
                txn.on_control(h, None if c is None else c.get("type"))
            elif txn.on_data(h):
                m.skipped.add(h.base_offset)
            elif m.put_batch(h, start):
                return True
            if h.last_offset >= start:
                m.update_latest(h.last_offset)
        return False

    @staticmethod
    def index_position(seg, offset: int) -> int:
        """``OffsetIndex.lookup``: the position of the last index entry at or below ``offset`` (0 when none)."""
        entries = seg.offset_index()
        i = bisect_right(entries, (offset, float("inf")))
        return entries[i - 1][1] if i else 0

    # -- 3. the groups -------------------------------------------------------------------------------
    def last_records(self) -> dict:
        """``lastRecordsOfActiveProducers``: producers not expired at ``now`` (``producer.id.expiration.ms``,
        none with an open transaction expires)."""
        now, exp = self.policy.now, self.policy.producer_id_expiration_ms
        out = {}
        for pid, e in self.state.producers.items():
            if e.current_txn_first_offset is None and now - e.timestamp >= exp:
                continue
            out[pid] = (e.last_offset if e.last_offset >= 0 else None, e.epoch)
        return out

    def clean(self, segs) -> None:
        p, pc, policy = self.p, self.pc, self.policy
        txn_lists = [s.txn_index() for s in segs]
        m = self.build_map(segs, txn_lists)
        end = pc.end_offset
        to_clean = [s for s in segs if s.base_offset < end]
        sizes = [(s.size, _file_size(s.index_path), _file_size(s.timeindex_path)) for s in to_clean]
        groups = group_segments(to_clean, sizes, int(pc.setting("segment.bytes")),
                                int(pc.setting("segment.index.bytes")), pc.first_uncleanable_offset)
        delete_ms = int(pc.setting("delete.retention.ms"))
        before = [s for s in segs if s.base_offset < pc.first_dirty_offset]
        legacy_horizon = _mtime_ms(before[-1].log_path) - delete_ms if before else 0
        rules = Rules(m, policy.now, delete_ms, self.last_records(), pc.first_uncleanable_offset)
        txn = TxnMeta()
        index_of = {s.base_offset: i for i, s in enumerate(segs)}
        for g in groups:
            members = [to_clean[i] for i in g]
            cleaned = CleanedSegment(p.path, members[0].base_offset, int(pc.setting("index.interval.bytes")),
                                     int(pc.setting("segment.index.bytes")), self.dry_run)
            group = Group(members, cleaned)
            pc.groups.append(group)
            cleaned.open()
            txn.kept_aborted = cleaned.aborted
            for k, seg in enumerate(members):
                upper = members[k + 1].base_offset if k + 1 < len(members) else seg.next_offset()
                txn.add(collect_aborted(txn_lists, index_of[seg.base_offset], pc.log_start_offset, upper))
                retain_legacy = _mtime_ms(seg.log_path) > legacy_horizon
                self.clean_into(seg, cleaned, rules, txn, retain_legacy, group.stats)
            cleaned.finish(_mtime_ms(members[-1].log_path) * 1_000_000)
            pc.stats.add(group.stats)
            group.actions = _swap_actions(group)
        if pc.stats.horizon_set is not None:
            pc.note("horizon_set", f"tombstones and empty-transaction markers kept until deleteHorizonMs "
                    f"{pc.stats.horizon_set} (now + delete.retention.ms): a pass after that removes them")

    def clean_into(self, seg, cleaned: CleanedSegment, rules: Rules, txn: TxnMeta, retain_legacy: bool,
                   stats: CleanStats) -> None:
        """``cleanInto``: the segment read a buffer at a time (whole batches within it; a larger batch grows the
        buffer for the rest of the segment), each buffer's kept batches appended at once."""
        cap, chunk_start = IO_BUFFER, 0
        for h in batches_of(seg):
            self.progress.add(h.size)
            if h.end > chunk_start + cap:
                cleaned.end_chunk()
                chunk_start = h.position
                while h.size > cap:
                    cap *= 2
            try:
                out = filter_batch(h, rules, txn, retain_legacy, stats)
            except CorruptDataError as e:  # records the decoder refuses: name the segment
                raise e.at(seg.log_path) from None
            if out is not None:
                cleaned.add(out, h)
        cleaned.end_chunk()


def _swap_actions(g: Group) -> list[Action]:
    """``LocalLog.replaceSegments`` for one group, as plan steps: the new files ``.cleaned`` -> ``.swap``
    (log first), the old segments' files out, the ``.swap`` files into place."""
    c = g.cleaned
    kinds = ["log", "index", "timeindex"] + (["txnindex"] if c.aborted else [])
    # the new files, written while planning, recorded first so that restore removes them again
    acts = [Action("create", c.path(k), f"the cleaned segment replacing {len(g.sources)} "
                   f"segment(s) from offset {c.base_offset}", new_size=c.size if k == "log" else None) for k in kinds]
    acts += [Action("rename", c.path(k), "cleaned segment complete: .cleaned -> .swap", target=c.path(k, "swap"))
             for k in kinds]
    for s in g.sources:
        for q in (s.log_path, s.index_path, s.timeindex_path, s.txnindex_path):
            size = ap.file_size(q)
            if size is not None:
                acts.append(Action("quarantine", q, f"replaced by the cleaned segment "
                                      f"{fn.segment_file(c.base_offset, 'log')}", old_size=size))
    acts += [Action("rename", c.path(k, "swap"), "swap the cleaned segment in", target=c.path(k, ""))
             for k in kinds]
    return acts


def plan_compaction(sel: Selection, policy: Policy, *, dry_run: bool = True,
                    progress: Callable[[int], None] | None = None) -> CompactPlan:
    """One cleaning pass planned for every partition of ``sel``. Without ``dry_run`` the new segments are
    written as ``.cleaned`` files (the caller holds the log dirs' ``.lock``) for :func:`apply_compaction`;
    if planning fails they are removed again."""
    plan = CompactPlan(policy, dry_run)
    prog = _Progress(progress)
    try:
        for p in sel.partitions:
            planner = _Planner(p, policy, dry_run, prog)
            plan.partitions.append(planner.pc)
            planner.plan()
    except BaseException:
        plan.discard()
        raise
    prog.flush()
    _one_refusal_per_topic(plan)
    by_ld: dict[Path, list[PartitionCompaction]] = {}
    for pc in plan.partitions:
        if pc.end_offset is not None:
            by_ld.setdefault(pc.partition.logdir.path, []).append(pc)
    for path, pcs in by_ld.items():
        ld = pcs[0].partition.logdir
        current = dict(ld.checkpoint(CLEANER_CHECKPOINT))
        new = dict(current)
        for pc in pcs:
            new[(pc.partition.topic, pc.partition.partition)] = pc.end_offset
        if new != current:
            a = Action("write_checkpoint", path / CLEANER_CHECKPOINT, "the first dirty offsets after this pass: "
                          + ", ".join(f"{pc.name} {pc.end_offset}" for pc in pcs),
                          data=encode_offset_checkpoint(new).encode())
            plan.checkpoints.append(a)
            for pc in pcs:
                pc.checkpoint_action = a
    return plan


def _one_refusal_per_topic(plan: CompactPlan) -> None:
    """A topic that is not compacted is said once (on its first partition), not once per partition."""
    seen: dict[tuple, list[PartitionCompaction]] = {}
    for pc in plan.partitions:
        if pc.notes and pc.notes[0].kind == "not_compacted":
            seen.setdefault((str(pc.partition.logdir.path), pc.partition.topic), []).append(pc)
    for (_ld, topic), pcs in seen.items():
        if len(pcs) > 1:
            n = pcs[0].notes[0]
            n.message = f"topic {topic} ({len(pcs)} partitions): {n.message}"
            for pc in pcs[1:]:
                pc.notes.pop(0)


# ------------------------------------------------------------------------------------------------ apply


def apply_compaction(plan: CompactPlan, *, backup_dir=None, backup: bool = True,
                     on_action: Callable[[Action], None] | None = None) -> list[Path]:
    """Swap the planned groups in (the caller holds every log dir's ``.lock``). With ``backup`` (default)
    the old segment files are moved into a backup run with a manifest (``kltool restore`` puts them back and
    removes the new segment's files); without it they go
    the broker's way (renamed ``*.deleted``, then deleted). Returns the manifests written."""
    if plan.dry_run:
        raise ValueError("a dry-run plan has no .cleaned files to swap in")
    try:
        if backup:
            return _apply_with_backup(plan, backup_dir, on_action)
        _check(plan, None, backup=False)  # the backup path's checks, before anything is renamed or deleted
        _apply_broker_way(plan, on_action)
        return []
    finally:
        for pc in plan.partitions:
            pc.partition.refresh()
            if pc.partition.logdir is not None:
                pc.partition.logdir.forget_checkpoint(CLEANER_CHECKPOINT)


def _change_sets(plan: CompactPlan) -> list[ChangeSet]:
    """The plan as the change engine's change sets, one per log dir."""
    changes: dict[Path, ChangeSet] = {}
    for pc in plan.partitions:
        acts = pc.actions
        if acts:
            root = pc.partition.logdir.path
            cs = changes.setdefault(root, ChangeSet(root=root))
            cs.actions += acts
            cs.protect.append(pc.partition.path)
    for a in plan.checkpoints:
        root = a.file.parent
        changes.setdefault(root, ChangeSet(root=root)).actions.append(a)
    return list(changes.values())


def _check(plan: CompactPlan, backup_dir, backup: bool) -> None:
    """What the change engine checks before it changes anything (``apply.check_changes``: confined to the log
    dir, regular files kltool may read and change; the backup root when backed up), for the dry run and the
    real run alike, with or without backup."""
    ap.check_changes(_change_sets(plan), backup_dir, backup=backup)


def _apply_with_backup(plan: CompactPlan, backup_dir, on_action) -> list[Path]:
    """The one coupling to the change engine: one change set per log dir, applied by ``apply_changes``."""
    return ap.apply_changes(_change_sets(plan), "compact", backup_dir, on_action=on_action)


def _apply_broker_way(plan: CompactPlan, on_action) -> None:
    for pc in plan.partitions:
        for g in pc.groups:
            deleted = []
            for a in g.actions:
                if a.op == "create":  # written while planning
                    pass
                elif a.op == "rename":
                    os.rename(a.file, a.target)
                    fsync_dir(a.file.parent)
                else:  # quarantine: the broker's asyncDeleteSegment renames to .deleted, deletes later
                    t = a.file.with_name(a.file.name + ".deleted")
                    os.rename(a.file, t)
                    fsync_dir(t.parent)
                    deleted.append(t)
                a.applied = True
                if on_action is not None:
                    on_action(a)
            for t in deleted:
                os.unlink(t)
            if deleted:
                fsync_dir(deleted[0].parent)
    for a in plan.checkpoints:
        atomic_write(a.file, a.data)
        a.applied = True
        if on_action is not None:
            on_action(a)


def run_compaction(sel: Selection, policy: Policy, *, dry_run: bool = True, backup: bool = True, backup_dir=None,
                   on_plan: Callable[[CompactPlan], None] | None = None,
                   on_action: Callable[[Action], None] | None = None,
                   progress: Callable[[int], None] | None = None, lock: bool = True, named=()) -> CompactPlan:
    """``kltool compact`` and :meth:`kltool.Logs.compact`: lock each log dir (not for a dry run), plan (the
    ``.cleaned`` files written), show the plan (``on_plan``, still under the locks) and, unless ``dry_run``,
    swap it in (backed up unless ``backup`` is False; ``plan.manifests`` for ``kltool restore``). A failure
    before anything is swapped in removes the ``.cleaned`` files again. ``lock=False``: the caller holds
    the locks; ``named``: the paths the selection came from (for the message when it holds no partition)."""
    from .apply import LogDirLocks

    if sel.files:
        f = sel.files[0]
        raise UsageError(f"compaction works on whole partitions: give the partition directory ({f.parent}) or its "
                         f"log dir, not a single file", path=f)
    if not sel.partitions:
        raise UsageError("compact needs a log dir or partition directories: none found in " + ", ".join(map(str, named)))
    if backup_dir is not None and not backup:
        raise UsageError("give --backup-dir or --no-backup, not both")
    logdirs = sorted({p.logdir.path for p in sel.partitions if p.logdir is not None})
    with LogDirLocks(logdirs, dry_run=False) if lock and not dry_run else contextlib.nullcontext():
        if not dry_run:  # plan on the files as they are under the lock, not as listed before it was ours
            forget_listings(sel)
        plan = plan_compaction(sel, policy, dry_run=dry_run, progress=progress)
        try:
            if on_plan is not None:
                on_plan(plan)
            if not dry_run and plan.has_work:
                plan.manifests = apply_compaction(plan, backup_dir=backup_dir, backup=backup, on_action=on_action)
            elif plan.has_work:  # a dry run: refused as the real run would be, nothing changed
                _check(plan, backup_dir, backup)
        except BaseException:
            if not dry_run and not any(a.applied for a in plan.actions):
                plan.discard()
            raise
    return plan


def summarize(plan: CompactPlan) -> dict:
    total = CleanStats()
    for pc in plan.partitions:
        total.add(pc.stats)
    d = {"type": "summary", "partitions": len(plan.partitions),
         "partitions_cleaned": sum(1 for pc in plan.partitions if pc.groups),
         "partitions_refused": sum(1 for pc in plan.partitions if pc.refused),
         "groups": sum(len(pc.groups) for pc in plan.partitions), "actions": len(plan.actions),
         "applied": sum(1 for a in plan.actions if a.applied), "dry_run": plan.dry_run, "now": plan.policy.now,
         "warnings": sum(1 for n in plan.notes if n.severity == "warning")}
    d.update(total.to_json())
    return d
