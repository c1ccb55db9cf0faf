"""Retention offline, by the broker's rules (``UnifiedLog.deleteOldSegments``,
``LocalLog.deletableSegments``, ``UnifiedLog.deleteSegments``): plan first, then apply.

Per partition, like one retention check of the broker:

1. an optional new log start offset (``before_offset`` / ``before_time``, what DeleteRecords does;
   never above the high watermark); then three passes, each over the segments oldest first that
   **stops at the first segment that must stay**, and each only for segments whose upper bound (the next
   segment's base offset, or the log end for the last) is at or below the high watermark:
   log-start-offset breach (the next segment starts at or below the log start offset), size
   (``retention.bytes``: delete while the rest stays >= the limit) and time (``retention.ms``:
   ``now - largest timestamp > retention``). A topic whose ``cleanup.policy`` lacks ``delete`` gets
   none of this.
2. The last segment is never deleted while empty; when every segment goes, an empty segment is rolled
   at the log end first. The log start offset becomes the first remaining segment's base offset (or the
   new offset when it is inside that segment: the file is not cut).

A segment's largest timestamp is its records' (the ``.timeindex``'s last entry, else the batches), and
only when no record has a timestamp the ``.log``'s mtime, Kafka's last resort. Where the broker would
read something else (a zero-filled ``.timeindex`` end reads as timestamp 0) and decide otherwise, the
plan says so.

Applying, per log dir under the broker's ``.lock``: roll the empty segment; write
``log-start-offset-checkpoint`` (atomically); truncate ``leader-epoch-checkpoint`` from the start like
``LeaderEpochFileCache.truncateFromStart``; remove producer snapshots below the log start offset; then
each segment's files are renamed to ``*.deleted`` and removed (or, with a backup dir, moved into a run
directory there by :func:`kltool.storage.change.apply.apply_changes`, whose manifest ``kltool restore`` undoes). In that order a run killed anywhere leaves a log dir the broker loads
as it is and a re-run finishes the same way: the checkpoint is written before any segment goes, and
leftovers (``*.deleted`` files, index files of a half-removed segment) are part of every plan.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CorruptDataError, UsageError
from ...format import names as fn
from ...format.checkpoints import (
    encode_leader_epoch_checkpoint,
    encode_offset_checkpoint,
    parse_leader_epoch_checkpoint,
)
from ...format.names import filename_prefix
from ...timeutil import format_time
from .. import offsets as offs
from ..confine import logdir_outside_findings, outside_findings
from ..findings import Finding
from ..fs import atomic_write, fsync_dir, read_small_file
from ..logdir import LogDir, Selection
from ..partition import Partition
from ..segment import Segment
from .apply import apply_changes, check_changes, check_files, confine
from .plan import Action, ChangeSet, forget_listings, partition_gate

__all__ = [
    "Policy", "SegmentCandidate", "PartitionPlan", "RetentionPlan",
    "make_policy", "plan_retention", "apply_retention", "run_retention", "truncate_epochs_from_start",
]

# Where a limit came from (``retention_ms_source``/``retention_bytes_source`` in the plan): only limits
# given on the command line or stored for the topic (kltool create --config) apply, never Kafka's
# defaults: offline, kltool cannot know the cluster's settings, and a backup is always "old".
FROM_COMMAND_LINE = "command_line"
FROM_TOPIC_CONFIG = "topic_config"
NO_LIMIT_MESSAGE = ("no retention limit given: give --retention-ms, --retention-hours, --retention-bytes, "
                    "--before-offset, --before-time or --offset-json-file, or store retention.ms or retention.bytes "
                    "for the topic (kltool create --config)")
LOG_START_CHECKPOINT = fn.LOG_START_OFFSET_CHECKPOINT
HW_CHECKPOINT = fn.REPLICATION_OFFSET_CHECKPOINT
EPOCH_CHECKPOINT = fn.LEADER_EPOCH_CHECKPOINT
# Internal topics the broker always creates compacted.
COMPACTED_INTERNAL = {"__consumer_offsets", "__transaction_state", "__share_group_state"}


@dataclass(frozen=True)
class Policy:
    """What to apply. ``None`` settings come from the topic's stored config (``kltool create --config``),
    else are not applied (never Kafka's defaults). ``time_and_size`` False applies only the new log start
    offset."""

    now: int
    retention_ms: int | None = None
    retention_bytes: int | None = None
    before_offset: int | None = None  # -1: the high watermark
    before_time: int | None = None
    time_and_size: bool = True
    # per-partition new log start offsets ({(topic, partition): offset}, -1: the high watermark), as
    # kafka-delete-records.sh's --offset-json-file gives them; partitions not in it keep their start
    before_offsets: dict | None = field(default=None, hash=False, compare=False)


def make_policy(*, now: int, retention_ms: int | None = None, retention_bytes: int | None = None,
                before_offset: int | None = None, before_time: int | None = None,
                before_offsets: dict | None = None) -> Policy:
    """The :class:`Policy` for these limits (each checked; a bad one is a UsageError). A new log start
    offset given alone (``before_offset``, ``before_time`` or ``before_offsets``) applies no time or size
    retention."""
    if before_offsets is not None and (before_offset is not None or before_time is not None):
        raise UsageError("give --offset-json-file, --before-offset or --before-time, not two of them")
    if before_offset is not None and before_time is not None:
        raise UsageError("give --before-offset or --before-time, not both")
    if retention_ms is not None and retention_ms < -1:
        raise UsageError("--retention-ms must be -1 (unlimited) or more")
    if before_offset is not None and before_offset < -1:
        raise UsageError("--before-offset must be an offset, or -1 for the high watermark")
    if before_time is not None and before_time < 0:
        raise UsageError("--before-time must be a time (ISO-8601 or epoch ms)")
    only_start = (before_offset is not None or before_time is not None or before_offsets is not None) and \
        retention_ms is None and retention_bytes is None
    return Policy(now=now, retention_ms=retention_ms, retention_bytes=retention_bytes, before_offset=before_offset,
                  before_time=before_time, time_and_size=not only_start, before_offsets=before_offsets)


@dataclass
class SegmentCandidate:
    """A segment as the passes see it."""

    segment: Segment | None  # None: the empty segment a roll adds
    base_offset: int
    size: int
    largest: tuple[int, str] | None = None  # (largest timestamp, source)
    broker_largest: int | None = None
    reason: str | None = None


@dataclass
class PartitionPlan:
    partition: Partition
    retention_ms: int | None = None  # None: no time limit applies
    retention_bytes: int | None = None  # None: no size limit applies
    retention_ms_source: str | None = None  # FROM_COMMAND_LINE | FROM_TOPIC_CONFIG
    retention_bytes_source: str | None = None
    cleanup_policy: str | None = None
    log_start_offset: int | None = None
    new_log_start_offset: int | None = None
    log_end_offset: int | None = None
    high_watermark: int | None = None
    first_segment_base: int | None = None  # the first segment's base offset after the plan
    deleted: list[SegmentCandidate] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    skipped: bool = False

    @property
    def name(self) -> str:
        return self.partition.name

    @property
    def segment_bytes(self) -> int:
        return sum(c.size for c in self.deleted)

    @property
    def reclaimed_bytes(self) -> int:
        return sum(a.info.get("reclaimed_bytes", 0) for a in self.actions)

    def to_json(self) -> dict:
        p = self.partition
        return {"type": "partition_retention", "topic": p.topic, "partition": p.partition, "path": str(p.path),
                "cleanup_policy": self.cleanup_policy, "retention_ms": self.retention_ms,
                "retention_ms_source": self.retention_ms_source, "retention_bytes": self.retention_bytes,
                "retention_bytes_source": self.retention_bytes_source, "log_start_offset": self.log_start_offset,
                "new_log_start_offset": self.new_log_start_offset, "log_end_offset": self.log_end_offset,
                "high_watermark": self.high_watermark, "segments_deleted": len(self.deleted),
                "segment_bytes": self.segment_bytes, "reclaimed_bytes": self.reclaimed_bytes,
                "skipped": self.skipped}


@dataclass
class RetentionPlan:
    policy: Policy
    partitions: list[PartitionPlan] = field(default_factory=list)
    logdirs: list[LogDir] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    manifests: list[Path] = field(default_factory=list)  # the backup runs written (kltool restore undoes them)

    @property
    def actions(self) -> list[Action]:
        return [a for pp in self.partitions for a in pp.actions]

    @property
    def has_work(self) -> bool:
        return any(pp.actions for pp in self.partitions)

    @property
    def all_notes(self) -> list[Finding]:
        return self.notes + [n for pp in self.partitions for n in pp.notes]

    @property
    def reclaimed_bytes(self) -> int:
        return sum(pp.reclaimed_bytes for pp in self.partitions)


# ------------------------------------------------------------------------------------------------- helpers


def truncate_epochs_from_start(entries: list[tuple[int, int]], start_offset: int) -> list[tuple[int, int]]:
    """``LeaderEpochFileCache.truncateFromStart``: drop entries starting at or below ``start_offset``
    and put the last dropped one back starting at ``start_offset``."""
    kept = [(e, o) for e, o in entries if o > start_offset]
    dropped = [(e, o) for e, o in entries if o <= start_offset]
    return ([(dropped[-1][0], start_offset)] if dropped else []) + kept


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _mtime_ms(path: Path) -> int:
    return int(os.stat(path).st_mtime * 1000)


def _limit(given: int | None, cfg, key: str) -> tuple[int | None, str | None]:
    """A limit and where it came from: the command line, else what ``kltool create --config`` stored for the
    topic, else none."""
    if given is not None:
        return given, FROM_COMMAND_LINE
    stored = cfg.overrides.get(key)
    if stored is not None:
        return int(stored), FROM_TOPIC_CONFIG
    return None, None


def _topic_settings(ld: LogDir, topic: str, policy: Policy, pp: PartitionPlan) -> str:
    """Fill in ``pp``'s limits (with their sources) for ``topic``; returns its cleanup.policy (internal
    topics are compacted)."""
    from ..topic_config import load_topic_config

    cfg = load_topic_config(ld.path, topic)
    cleanup = cfg.get("cleanup.policy")
    if "cleanup.policy" not in cfg.overrides and topic in COMPACTED_INTERNAL:
        cleanup = "compact"
    pp.retention_ms, pp.retention_ms_source = _limit(policy.retention_ms, cfg, "retention.ms")
    pp.retention_bytes, pp.retention_bytes_source = _limit(policy.retention_bytes, cfg, "retention.bytes")
    return cleanup


def stored_limits(sel: Selection) -> bool:
    """Does any selected topic have retention.ms or retention.bytes stored (``kltool create --config``)?"""
    from ..topic_config import load_topic_config

    seen = set()
    for p in sel.partitions:
        if p.logdir is None or (p.logdir.path, p.topic) in seen:
            continue
        seen.add((p.logdir.path, p.topic))
        ov = load_topic_config(p.logdir.path, p.topic).overrides
        if "retention.ms" in ov or "retention.bytes" in ov:
            return True
    return False


# -------------------------------------------------------------------------------------------------- plan


class _Planner:
    def __init__(self, p: Partition, policy: Policy):
        self.p = p
        self.policy = policy
        self.pp = PartitionPlan(p)
        self.stopped_by_hw = False  # the last pass stopped at the high watermark
        self.any_hw_stop = False

    def action(self, op: str, file, info: dict, **kw) -> Action:
        a = Action(op, Path(file), topic=self.p.topic, partition=self.p.partition, info=info,
                   logdir=self.p.logdir.path, **kw)
        self.pp.actions.append(a)
        return a

    def note(self, kind: str, message: str, file=None, offset=None, severity: str = "warning") -> None:
        self.pp.notes.append(Finding(severity, kind, str(file or self.p.path), message, offset=offset))

    def largest(self, c: SegmentCandidate, last: bool) -> int:
        """The segment's largest timestamp for time retention (records, else mtime); also keeps the one
        the broker would read (the raw last .timeindex entry, else mtime) in ``broker_largest``."""
        if c.largest is None:
            seg = c.segment
            tail = seg.time_index_tail()
            ts, src = seg.max_timestamp_so_far, seg.max_timestamp_source
            if ts < 0:
                ts, src = seg.largest_timestamp, "mtime"
            c.largest = (ts, src)
            if last:
                c.broker_largest = ts
            elif tail.raw is not None and tail.raw[0] >= 0:
                c.broker_largest = tail.raw[0]
            else:
                c.broker_largest = _mtime_ms(seg.log_path)
        return c.largest[0]

    def plan(self) -> PartitionPlan:
        p, pp, policy = self.p, self.pp, self.policy
        gate = partition_gate(p, not_run="the broker runs no retention on it",
                              metadata="the broker runs no retention on it", needs="retention needs its checkpoint files")
        if gate:
            return self.skip(*gate)
        ld = p.logdir
        outside = outside_findings(p)
        if outside:  # a symlink out of the log dir: never deleted through
            pp.notes.extend(outside)
            pp.skipped = True
            return pp
        cleanup = pp.cleanup_policy = _topic_settings(ld, p.topic, policy, pp)
        if "delete" not in cleanup.split(","):
            return self.skip("compacted", f"cleanup.policy={cleanup}: left alone (only the log cleaner removes "
                                          f"records of a compacted topic)")
        if policy.time_and_size and pp.retention_ms is None and pp.retention_bytes is None and \
                policy.before_offset is None and policy.before_time is None:
            return self.skip("no_limit", "no retention limit given on the command line or stored for the topic "
                                         "(kltool create --config): left alone")
        segs = p.segments
        if not segs:
            return pp
        swaps = [f for f in p.stale_files if f.name.endswith(".swap")]
        if swaps:
            self.note("stale_file", f"{len(swaps)} .swap file(s) of an unfinished compaction or split: the broker "
                      f"completes it at startup, replacing segments; run kltool verify --repair first; partition "
                      f"skipped", swaps[0])
            pp.skipped = True
            return pp
        key = (p.topic, p.partition)
        leo = offs.log_end_offset(p)
        cp = ld.checkpoint(LOG_START_CHECKPOINT).get(key)
        lso = segs[0].base_offset if cp is None else max(cp, segs[0].base_offset)
        pp.log_start_offset, pp.log_end_offset = lso, leo
        if lso > leo:
            self.note("start_beyond_end", f"log start offset {lso} ({LOG_START_CHECKPOINT}) is beyond the log end "
                      f"offset {leo}: at startup the broker deletes every segment of this partition (segments "
                      f"removed by hand?); fix the checkpoint before starting the broker; partition skipped",
                      ld.path / LOG_START_CHECKPOINT, lso)
            pp.skipped = True
            return pp
        hw = ld.checkpoint(HW_CHECKPOINT).get(key)
        hw = leo if hw is None else min(max(hw, lso), leo)
        pp.high_watermark = hw
        live = [SegmentCandidate(s, s.base_offset, s.size) for s in segs]

        target = self.new_start_offset(lso, leo, hw)
        if target is not None and target > lso:
            lso = target
        live, lso = self.run_pass(live, lso, leo, hw, "log_start_offset",
                                  lambda c, nxt: nxt is not None and nxt.base_offset <= lso)
        if policy.time_and_size:
            live, lso = self.size_pass(live, lso, leo, hw)
            live, lso = self.time_pass(live, lso, leo, hw)
        if self.any_hw_stop:
            self.note("above_high_watermark", f"segments reaching above the high watermark {hw} "
                      f"({HW_CHECKPOINT}) stay, as on the broker", severity="info")
        pp.new_log_start_offset = lso
        self.actions(live, lso, cp)
        return pp

    def skip(self, kind: str, message: str) -> PartitionPlan:
        self.note(kind, message, severity="info")
        self.pp.skipped = True
        return self.pp

    def new_start_offset(self, lso: int, leo: int, hw: int) -> int | None:
        policy = self.policy
        before_offset = policy.before_offset
        if policy.before_offsets is not None:
            before_offset = policy.before_offsets.get((self.p.topic, self.p.partition))
            if before_offset is None:
                return None
        if before_offset is not None:
            target = hw if before_offset == -1 else before_offset
            if target > hw:
                raise UsageError(f"{self.p.name}: cannot move the log start offset to {target}: it is larger than "
                                 f"the high watermark {hw} (DeleteRecords refuses this too)")
        elif policy.before_time is not None:
            warns: list[str] = []
            found = offs.offset_for_time(self.p, policy.before_time, start_offset=lso, warnings=warns)
            for w in warns:
                self.note("record_corrupt", w)
            target = leo if found is None else found.offset
            if target > hw:
                self.note("above_high_watermark", f"records before {format_time(policy.before_time)} reach offset {target}, "
                          f"above the high watermark {hw}; the log start offset stops at {hw}", severity="info")
                target = hw
        else:
            return None
        if target < lso:
            self.note("below_log_start", f"offset {target} is below the log start offset {lso}: nothing to do",
                      severity="info")
        return target

    def run_pass(self, live: list[SegmentCandidate], lso: int, leo: int, hw: int, reason: str,
                 predicate: Callable[[SegmentCandidate, SegmentCandidate | None], bool]):
        """``deleteOldSegments``: the deletable prefix, then ``deleteSegments`` (roll when all go)."""
        k = 0
        self.stopped_by_hw = False
        while k < len(live):
            c = live[k]
            nxt = live[k + 1] if k + 1 < len(live) else None
            upper = nxt.base_offset if nxt is not None else leo
            if hw < upper:
                self.stopped_by_hw = self.any_hw_stop = True
                break
            if (nxt is None and c.size == 0) or not predicate(c, nxt):
                break
            k += 1
        if k == 0:
            return live, lso
        if k == len(live):
            live = live + [SegmentCandidate(None, leo, 0)]
        for c in live[:k]:
            c.reason = reason
            self.pp.deleted.append(c)
        live = live[k:]
        return live, max(lso, live[0].base_offset)

    def size_pass(self, live, lso, leo, hw):
        limit = self.pp.retention_bytes
        size = sum(c.size for c in live)
        if limit is None or limit < 0 or size < limit:
            return live, lso
        diff = size - limit

        def pred(c, _nxt):
            nonlocal diff
            if diff - c.size >= 0:
                diff -= c.size
                return True
            return False

        return self.run_pass(live, lso, leo, hw, "retention_bytes", pred)

    def time_pass(self, live, lso, leo, hw):
        ms = self.pp.retention_ms
        now = self.policy.now
        if ms is None or ms < 0:
            return live, lso
        n = len(live)

        def pred(c, nxt):
            return now - self.largest(c, nxt is None) > ms

        before = list(live)
        live, lso = self.run_pass(live, lso, leo, hw, "retention_ms", pred)
        # What bites people: timestamps the broker reads differently, 0, missing, or in the future.
        for i, c in enumerate(before):
            if c.segment is None or (c.size == 0 and i == n - 1):
                continue
            self.largest(c, i == n - 1)
            ts, src = c.largest
            f = c.segment.log_path
            if src == "mtime":
                self.note("no_timestamp", f"no record has a timestamp: retention uses the file's mtime "
                          f"{format_time(ts)}, which copying or touching the file changes", f)
            elif ts == 0:
                self.note("zero_timestamp", "largest record timestamp is 0 (1970): time retention deletes this "
                          "segment at once", f)
            elif ts > now:
                self.note("future_timestamp", f"largest timestamp {format_time(ts)} is in the future: time retention keeps "
                          f"this segment, and every later one, until then", f)
            b = c.broker_largest
            if b is not None and b != ts and (now - b > ms) != (now - ts > ms):
                why = ("the zero-filled end of its .timeindex" if b == 0 else
                       "the file's mtime (no usable .timeindex)" if src != "timeindex" else "its .timeindex")
                verdict = "delete it at once" if now - b > ms else "keep it"
                self.note("broker_timestamp_differs", f"the broker reads the largest timestamp {b} ({format_time(b)}) from "
                          f"{why} and would {verdict}; kltool uses {ts} ({format_time(ts)}, from {src}); rebuilding the "
                          f"indexes (kltool rebuild-index) makes the broker agree", f)
        if live and live[0].segment is not None and not self.stopped_by_hw:
            stop = live[0]
            later = [c for j, c in enumerate(live[1:], 1)
                     if c.segment is not None and not (j == len(live) - 1 and c.size == 0)
                     and now - self.largest(c, j == len(live) - 1) > ms]
            if later and now - self.largest(stop, len(live) == 1) <= ms:
                self.note("retention_blocked", f"largest timestamp {format_time(stop.largest[0])} of this segment is within "
                          f"retention, so {len(later)} later segment(s) ({sum(c.size for c in later)} bytes) past "
                          f"retention stay too: the broker stops at the first segment that must stay "
                          f"(non-monotonic timestamps)", stop.segment.log_path)
        return live, lso

    # -- actions -------------------------------------------------------------------------------------
    def actions(self, live: list[SegmentCandidate], lso: int, cp: int | None) -> None:
        p, pp = self.p, self.pp
        if live:
            pp.first_segment_base = live[0].base_offset
        for c in live:
            if c.segment is None:  # the roll: indexes first, the .log (which makes it a segment) last
                prefix = p.path / filename_prefix(c.base_offset)
                paths = [Path(f"{prefix}.index"), Path(f"{prefix}.timeindex"), Path(f"{prefix}.log")]
                self.action("roll", paths[-1], {"base_offset": c.base_offset, "reason": "all segments deleted"},
                            paths=paths)
        touched = bool(pp.deleted) or lso > pp.log_start_offset
        if lso > pp.log_start_offset:
            self.action("write_checkpoint", p.logdir.path / LOG_START_CHECKPOINT,
                        {"kind": "log_start_offset", "offset": lso,
                         "old_offset": pp.log_start_offset if cp is None else cp})
        if touched:
            self.epoch_action(lso)
            for off, path in p.snapshots:
                if off < lso:
                    self.action("delete", path, {"kind": "snapshot", "offset": off, "reason": "below_log_start_offset",
                                                 "reclaimed_bytes": _file_size(path)}, paths=[path])
        warns: list[str] = []
        for c in pp.deleted:
            if c.segment is None:
                continue
            seg = c.segment
            st = offs.segment_stats(seg, warnings=warns)
            paths = [q for q in (seg.log_path, seg.index_path, seg.timeindex_path, seg.txnindex_path) if q.exists()]
            info = {"kind": "segment", "reason": c.reason, "base_offset": seg.base_offset,
                    "first_offset": st.first_offset, "last_offset": st.last_offset,
                    "first_timestamp": st.first_timestamp,
                    "largest_timestamp": c.largest[0] if c.largest else st.max_timestamp,
                    "timestamp_source": c.largest[1] if c.largest else "batches",
                    "records": st.records + st.control_records, "bytes": c.size,
                    "reclaimed_bytes": sum(_file_size(q) for q in paths)}
            self.action("delete", seg.log_path, info, paths=paths)
        for w in warns:
            self.note("record_corrupt", w)
        # Leftovers of earlier runs or of the broker: *.deleted files, index files of a removed segment.
        first_base = live[0].base_offset if live else None
        for f in p.stale_files:
            if f.name.endswith(".deleted"):
                self.action("delete", f, {"kind": "leftover", "reason": "deleted_file",
                                          "reclaimed_bytes": _file_size(f)}, paths=[f])
        for f in p.orphan_indexes:
            m = fn.SEGMENT_FILE.match(f.name)
            if m and first_base is not None and int(m.group(1)) < first_base:
                self.action("delete", f, {"kind": "leftover", "reason": "orphan_index",
                                          "reclaimed_bytes": _file_size(f)}, paths=[f])

    def epoch_action(self, lso: int) -> None:
        p = self.p
        path = p.path / EPOCH_CHECKPOINT
        try:
            text = read_small_file(path)  # (a non-UTF-8 byte: CorruptDataError; a FIFO: OSError, not a wait)
        except FileNotFoundError:
            return
        try:
            entries = parse_leader_epoch_checkpoint(text)
        except CorruptDataError as e:  # leave it to verify
            self.note("checkpoint_corrupt", f"cannot read: {e.message}; left as it is", path)
            return
        new = truncate_epochs_from_start(entries, lso)
        if new != entries:
            self.action("write_checkpoint", path, {"kind": "leader_epoch", "entries": [list(e) for e in new],
                                                   "old_entries": [list(e) for e in entries]})


def plan_retention(sel: Selection, policy: Policy) -> RetentionPlan:
    """The plan for every partition of ``sel`` (nothing is changed)."""
    plan = RetentionPlan(policy)
    seen = set()
    skipped: dict[tuple[str, str], list[PartitionPlan]] = {}
    for p in sel.partitions:
        pp = _Planner(p, policy).plan()
        plan.partitions.append(pp)
        if p.logdir is not None and p.logdir.path not in seen:
            seen.add(p.logdir.path)
            plan.logdirs.append(p.logdir)
            plan.notes.extend(logdir_outside_findings(p.logdir.path))
        if pp.notes and pp.notes[0].kind in ("compacted", "no_limit"):  # one note per topic, not per partition
            skipped.setdefault((str(p.logdir.path), p.topic), []).append(pp)
    for (ld, topic), pps in skipped.items():
        first = pps[0].notes.pop(0)
        for pp in pps[1:]:
            pp.notes.pop(0)
        plan.notes.append(Finding("info", first.kind, ld, f"topic {topic} ({len(pps)} partitions): {first.message}"))
    return plan


# ------------------------------------------------------------------------------------------------- apply


def _steps(plan: RetentionPlan) -> list[tuple[str, Path, Action, str | None]]:
    """The plan as file steps in the order they must happen: ``(create | write | remove | replaced, path, action,
    new content)`` (``replaced``: a path the roll rewrote, nothing left to do). Rolls first, then each log dir's log-start-offset-checkpoint (one write with every
    partition's new value), then per partition the leader-epoch checkpoint, snapshots and segments, and
    last the leftovers."""
    acts = plan.actions
    steps: list[tuple[str, Path, Action, str | None]] = []
    firsts = {(pp.partition.logdir.path, pp.partition.topic, pp.partition.partition): pp.first_segment_base
              for pp in plan.partitions if pp.first_segment_base is not None and pp.partition.logdir is not None}
    rolled: set[Path] = set()
    for a in acts:
        if a.op == "roll":
            steps += [("create", q, a, "") for q in a.paths]
            rolled.update(a.paths)
    for ld in plan.logdirs:
        group = [a for a in acts if a.info.get("kind") == "log_start_offset" and a.logdir == ld.path]
        if group:
            current = dict(ld.checkpoint(LOG_START_CHECKPOINT))
            for a in group:
                # as LogManager.checkpointLogStartOffsetsInDir: an entry only for a log start offset above
                # the first segment's base offset (the broker loads max(entry, base) either way)
                if a.info["offset"] > firsts.get((ld.path, a.topic, a.partition), -1):
                    current[(a.topic, a.partition)] = a.info["offset"]
                else:
                    current.pop((a.topic, a.partition), None)
            text = encode_offset_checkpoint(current)
            steps += [("write", ld.path / LOG_START_CHECKPOINT, a, text) for a in group]
    for a in acts:
        if a.op == "write_checkpoint" and a.info.get("kind") == "leader_epoch":
            text = encode_leader_epoch_checkpoint([(e, o) for e, o in a.info["entries"]])
            steps.append(("write", a.file, a, text))
        elif a.op == "delete" and a.info["kind"] in ("snapshot", "segment"):
            # a segment whose base offset the roll reuses (the last one goes, holding no record below the log
            # end): the roll's empty file already replaced it (backed up as a rewrite); removing the path now
            # would remove the new segment
            steps += [("replaced" if q in rolled else "remove", q, a, None) for q in a.paths]
    for a in acts:
        if a.op == "delete" and a.info["kind"] == "leftover":
            steps += [("remove", q, a, None) for q in a.paths]
    return steps


def apply_retention(plan: RetentionPlan, *, backup: bool = True, backup_dir=None,
                    on_action: Callable[[Action], None] | None = None, check_only: bool = False) -> list[Path]:
    """Carry out ``plan``; the caller holds each log dir's ``.lock``. With ``backup`` (the default) every
    file removed or rewritten is moved into a run directory of ``backup_dir`` (default: beside each log dir,
    ``<log dir>.kltool-backup``) by :func:`kltool.storage.change.apply.apply_changes`, whose manifest
    ``kltool restore`` undoes; without, files go the broker's way (renamed ``*.deleted``, removed at the
    end). ``on_action`` is called as each action completes. Returns the manifests written (also in
    ``plan.manifests``). ``check_only`` (a dry run): make every check the real run makes before it changes
    anything (refused the same way), and change nothing."""
    if backup_dir is not None and not backup:
        raise UsageError("--backup-dir and --no-backup: give one")
    for ld in plan.logdirs:  # the broker's way too: nothing outside the log dir, checked before anything
        confine(ChangeSet(ld.path, [a for a in plan.actions if a.logdir == ld.path]))
        check_files(ChangeSet(ld.path, [a for a in plan.actions if a.logdir == ld.path]))
    steps = _steps(plan)
    if check_only:  # a dry run: refused as the real run would be, nothing changed
        return _apply_with_backup(plan, steps, backup_dir, None, check_only=True) if backup else []
    left = {id(a): 0 for a in plan.actions}
    for _kind, _path, a, _c in steps:
        left[id(a)] += 1

    def step_done(a: Action) -> None:
        left[id(a)] -= 1
        if left[id(a)] == 0:
            a.applied = True
            if on_action is not None:
                on_action(a)

    try:
        if backup:
            plan.manifests = _apply_with_backup(plan, steps, backup_dir, step_done)
        else:
            _apply_broker_way(steps, step_done)
        return plan.manifests
    finally:
        for pp in plan.partitions:
            pp.partition.refresh()
        for ld in plan.logdirs:
            ld.forget_checkpoint(LOG_START_CHECKPOINT)


def _apply_broker_way(steps, step_done) -> None:
    deleted: list[tuple[Path, Action]] = []
    written: set[Path] = set()
    for kind, path, a, content in steps:
        if kind in ("create", "write"):
            if path not in written:  # the log-start-offset checkpoint is one write for many actions
                atomic_write(path, content)
                written.add(path)
            step_done(a)
        elif kind == "replaced":
            step_done(a)
        elif a.info["kind"] == "leftover":
            deleted.append((path, a))
        else:
            target = path.with_name(path.name + ".deleted")
            try:
                os.rename(path, target)
            except FileNotFoundError:
                pass
            else:
                fsync_dir(path.parent)
            deleted.append((target, None))
            step_done(a)
    for path, a in deleted:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        fsync_dir(path.parent)
        if a is not None:
            step_done(a)


def _apply_with_backup(plan: RetentionPlan, steps, backup_dir, step_done, check_only: bool = False) -> list[Path]:
    changes: dict[Path, ChangeSet] = {}
    mine: dict[int, list[Action]] = {}
    by_path: dict[Path, Action] = {}
    for ld in plan.logdirs:
        changes[ld.path] = ChangeSet(root=ld.path, protect=[pp.partition.path for pp in plan.partitions
                                                               if pp.partition.logdir is ld])
    for kind, path, a, content in steps:
        if kind == "replaced":  # the roll's rewrite of this path backs up the old file
            mine[id(by_path[path])].append(a)
            continue
        if kind in ("create", "write"):
            if path in by_path:  # one checkpoint write serves several partitions
                mine[id(by_path[path])].append(a)
                continue
            reason = "new empty segment (roll)" if kind == "create" else f"retention: {a.info.get('kind')}"
            ra = by_path[path] = Action("write_checkpoint", path, reason, data=content.encode())
        else:
            ra = Action("quarantine", path, f"retention: {a.info.get('reason')}")
        mine[id(ra)] = [a]
        changes[a.logdir].actions.append(ra)

    def done(ra) -> None:
        for a in mine[id(ra)]:
            step_done(a)

    if check_only:
        check_changes(list(changes.values()), backup_dir)
        return []
    return apply_changes(list(changes.values()), "retention", backup_dir, on_action=done)


def run_retention(sel: Selection, policy: Policy, *, dry_run: bool = True, backup: bool = True, backup_dir=None,
                  on_plan: Callable[[RetentionPlan], None] | None = None,
                  on_action: Callable[[Action], None] | None = None, named=()) -> RetentionPlan:
    """``kltool retention`` and :meth:`kltool.Logs.retention`: lock each log dir (not for a dry run), plan,
    show the plan (``on_plan``, still under the locks) and, unless ``dry_run``, apply it (backed up unless
    ``backup`` is False). Refused (UsageError) when no limit is given and none is stored for a selected
    topic. ``named``: the paths the selection came from (for the message when it holds no partition)."""
    from .apply import LogDirLocks

    if sel.files:  # retention removes whole segments of a partition: a file cannot stand for that
        f = sel.files[0]
        raise UsageError(f"retention works on whole partitions: give the partition directory ({f.parent}) or "
                         f"its log dir, not a single file", path=f)
    if not sel.partitions:
        raise UsageError("retention needs a log dir or partition directories: none found in "
                         + ", ".join(map(str, named)))
    if backup_dir is not None and not backup:
        raise UsageError("--backup-dir and --no-backup: give one")
    given = policy.retention_ms is not None or policy.retention_bytes is not None or not policy.time_and_size \
        or policy.before_offset is not None or policy.before_time is not None
    if not given and not stored_limits(sel):
        raise UsageError(NO_LIMIT_MESSAGE)
    logdirs = sorted({p.logdir.path for p in sel.partitions if p.logdir is not None})
    with contextlib.nullcontext() if dry_run else LogDirLocks(logdirs, dry_run=False):
        if not dry_run:  # plan on the files as they are under the lock, not as listed before it was ours
            forget_listings(sel)
        plan = plan_retention(sel, policy)
        if on_plan is not None:
            on_plan(plan)
        if plan.has_work:
            apply_retention(plan, backup=backup, backup_dir=backup_dir, on_action=on_action, check_only=dry_run)
    return plan


def summarize(plan: RetentionPlan) -> dict:
    segs = [a for a in plan.actions if a.op == "delete" and a.info.get("kind") == "segment"]
    return {"type": "summary", "partitions": len(plan.partitions),
            "partitions_changed": sum(1 for pp in plan.partitions if pp.actions),
            "segments_deleted": len(segs), "segment_bytes": sum(a.info["bytes"] for a in segs),
            "records_deleted": sum(a.info["records"] for a in segs),
            "reclaimed_bytes": plan.reclaimed_bytes, "actions": len(plan.actions),
            "warnings": sum(1 for n in plan.all_notes if n.severity == "warning")}
