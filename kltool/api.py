"""The library's front door: :class:`Logs`, the Kafka data at one or more paths, with every command as a
method (like sqlite-utils' ``Database``)::

    import kltool

    logs = kltool.Logs("/var/lib/kafka/data")             # a log dir, partition dirs, a tree of log dirs
    report = logs.verify()                                # report.clean, report.findings, report.stats
    plan = logs.repair(dry_run=True).plan                 # what a repair would do; dry_run=False applies it
    for r in logs.records(topic="orders", partition=0, from_offset=100, to_offset=199):
        print(r.offset, r.timestamp, r.key, r.value)

Everything that writes takes the broker's ``.lock`` of each log dir it changes itself (and raises
:class:`~kltool.errors.BrokerLockHeld` while a broker holds it); every method that plans defaults to
``dry_run=True``. Errors are :class:`~kltool.errors.KltoolError` subclasses (a missing path is
:class:`~kltool.errors.PathNotFound`, bad arguments :class:`~kltool.errors.UsageError`, bytes Kafka
would not write :class:`~kltool.errors.CorruptDataError`, an unsafe write
:class:`~kltool.errors.UnsafeOperation`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import UsageError
from .plain import Plain

__all__ = ["Logs", "VerifyReport", "verify", "repair", "retention", "compact", "restore"]


class VerifyReport(Plain):
    """What :meth:`Logs.verify` found: ``findings`` (severity ``error`` or ``warning``, ``kind``,
    ``file``, ``position``, ``offset``, ``message``; ``to_json()`` gives DESIGN's ``finding`` object)
    and the counts in ``stats``."""

    __slots__ = _fields = ("findings", "stats")

    def __init__(self, findings: list | None = None, stats: object = None):
        self.findings = [] if findings is None else findings
        self.stats = stats

    @property
    def errors(self) -> list:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def clean(self) -> bool:
        """No errors (what ``kltool verify`` exits 0 for)."""
        return not self.errors


class Logs:
    """The Kafka data at ``paths`` (log dirs, partition directories, a tree holding log dirs such as a
    backup, or segment files), optionally narrowed to topics matching the glob ``topic`` and to the
    partition numbers ``partitions`` (an iterable of ints or a ``"0,2,5-7"`` string)."""

    def __init__(self, *paths, topic: str | None = None, partitions: Iterable[int] | str | None = None):
        from .storage.select import parse_partitions, select

        if not paths:
            raise UsageError("Logs() needs at least one path")
        spec = None
        if partitions is not None:
            spec = partitions if isinstance(partitions, str) else ",".join(str(int(n)) for n in partitions)
            parse_partitions(spec)  # a bad spec is a UsageError here, not later
        self.paths = [Path(p) for p in paths]
        self._topic, self._spec = topic, spec
        self.selection = select([str(p) for p in self.paths], topic, spec)

    @classmethod
    def from_selection(cls, selection, *paths, topic: str | None = None, partitions: str | None = None) -> Logs:
        """A :class:`Logs` over a selection already made (``storage.select.select``) from ``paths``."""
        self = cls.__new__(cls)
        self.paths = [Path(p) for p in paths]
        self._topic, self._spec = topic, partitions
        self.selection = selection
        return self

    def __repr__(self) -> str:
        return f"Logs({', '.join(repr(str(p)) for p in self.paths)}: {len(self.partitions)} partitions)"

    # -- what is there ---------------------------------------------------------------------------------
    @property
    def partitions(self) -> list:
        """The :class:`~kltool.storage.partition.Partition` objects, by topic and number."""
        return self.selection.partitions

    @property
    def logdirs(self) -> list:
        """The :class:`~kltool.storage.logdir.LogDir` objects the paths named or hold."""
        return self.selection.logdirs

    @property
    def topics(self) -> list[str]:
        return sorted({p.topic for p in self.partitions})

    def partition(self, topic: str, number: int):
        """One partition (the normal one, not a ``-delete``/``-future`` copy when there is a choice)."""
        found = [p for p in self.partitions if p.topic == topic and p.partition == number]
        if not found:
            raise UsageError(f"no partition {topic}-{number} in {', '.join(map(str, self.paths))}")
        return min(found, key=lambda p: p.kind != "normal")

    def refresh(self) -> None:
        """Read the directories again (after something else changed them)."""
        from .storage.select import select

        self.selection = select([str(p) for p in self.paths], self._topic, self._spec)

    @contextmanager
    def _refreshed_after(self, dry_run: bool) -> Iterator[None]:
        """Around a change to the directories: read them again afterwards (even when it fails part-way)
        unless it was a dry run."""
        try:
            yield
        finally:
            if not dry_run:
                self.refresh()

    # -- reading -------------------------------------------------------------------------------------
    def verify(self, *, deep: bool = False, progress=None, on_finding=None) -> VerifyReport:
        """``kltool verify``: every batch's CRC and structure, every index against its log, stale files;
        ``deep`` also decompresses and parses every record. Never changes a file. ``progress(bytes)`` is
        called as the walk goes, ``on_finding(finding)`` as each finding is made."""
        from .storage.check.verify import VerifyStats, verify_selection

        stats = VerifyStats()
        findings = []
        for f in verify_selection(self.selection, deep=deep, stats=stats, progress=progress):
            findings.append(f)
            if on_finding is not None:
                on_finding(f)
        return VerifyReport(findings, stats)

    def records(self, *, topic: str | None = None, partition: int | None = None, from_offset: int | None = None,
                to_offset: int | None = None, from_time: int | None = None, to_time: int | None = None,
                key: bytes | None = None, include_control: bool = False, isolation_level: str | None = None
                ) -> Iterator:
        """The records (:class:`~kltool.storage.read.LogRecord`) of each selected partition in turn, in
        offset order, with the exact filters of ``kltool dump --records`` (offsets and times inclusive,
        times in epoch ms; the read of a partition ends at the first record stamped after ``to_time``).
        Damaged regions are skipped (:meth:`verify` names them). ``isolation_level`` ``read_uncommitted`` or
        ``read_committed``: what a consumer at that level reads (:class:`~kltool.storage.read.Isolation`);
        None (the default): every record, aborted ones included."""
        from .storage.read import records

        for p in self.partitions:
            if p.kind != "normal" or (topic is not None and p.topic != topic) or \
                    (partition is not None and p.partition != partition):
                continue
            yield from records(p, from_offset=from_offset, to_offset=to_offset, from_time=from_time,
                               to_time=to_time, key=key, include_control=include_control,
                               isolation_level=isolation_level)

    def offset_for_time(self, topic: str, partition: int, timestamp: int):
        """``kltool offsets --time``: the first record with timestamp >= ``timestamp`` found the broker's
        way (``TimestampOffset`` with offset, timestamp, leader epoch), or None."""
        from .storage.offsets import offset_for_time

        return offset_for_time(self.partition(topic, partition), timestamp)

    def info(self) -> Iterator[dict]:
        """``kltool info``: one ``partition`` dict per partition (segments, bytes, log start and end
        offsets, first and largest timestamps, from names, indexes and each partition's tail: no full
        scan), then one ``log_dir`` dict per log dir (meta.properties, clean shutdown, unknown dirs). A
        partition it may not read gives a ``finding`` dict (kind ``unreadable``) instead, and the others
        follow."""
        from .storage.logdir import unreadable

        for p in self.partitions:
            try:
                info = _partition_info(p)
            except OSError as e:
                if isinstance(e, BrokenPipeError):
                    raise
                yield unreadable(e.filename or p.path, e, f"partition {p.name} is not listed").to_json()
                continue
            yield info
        for ld in self.logdirs:
            yield _logdir_info(ld)

    def offsets(self, *, time: int | None = None, earliest: bool = False, latest: bool = False,
                max_timestamp: bool = False, count: bool = False, warnings: list | None = None) -> Iterator[dict]:
        """``kltool offsets``: per partition an ``offsets`` dict with what was asked, found like the broker
        finds it: the first offset whose record timestamp is >= ``time`` (``offset``, ``timestamp``,
        ``leader_epoch``), the log start (``earliest``) and end (``latest``) offsets, the largest timestamp
        and its offset (``max_timestamp``), the true record count (``count``: every batch header read).
        Nothing asked: earliest and latest. Problems met on the way are appended to ``warnings``."""
        modes = {name for flag, name in ((earliest, "earliest"), (latest, "latest"),
                                         (max_timestamp, "max_timestamp"), (count, "count")) if flag}
        if not modes and time is None:
            modes = {"earliest", "latest"}
        warnings = [] if warnings is None else warnings
        for p in self.partitions:
            yield _partition_offsets(p, target=time, modes=modes, warnings=warnings)

    def transactions(self, *, now: int | None = None, max_transaction_timeout_ms: int = 15 * 60_000,
                     scan_all: bool = False) -> list:
        """``kltool transactions`` and ``kltool producers``: per partition a ``PartitionTransactions``
        (``.open``, ``.hanging``, ``.last_stable_offset``, ``.producers``, ``.aborted``, ``.findings``),
        from the latest snapshot and the log after it as the broker rebuilds it (``scan_all``: every
        segment); ``now`` in epoch ms (default: now)."""
        from .storage.transactions import partition_transactions

        now = int(time.time() * 1000) if now is None else now
        return [partition_transactions(p, now=now, max_transaction_timeout_ms=max_transaction_timeout_ms,
                                       scan_all=scan_all) for p in self.partitions if p.kind == "normal"]

    def diff(self, other: Logs) -> list:
        """``kltool diff``: this copy (A, the leader) against ``other`` (B, the follower), a ``PartitionDiff``
        per pair of partitions (``.diverge_offset``, ``.truncation_offset``, ``.only_a``, ``.only_b``,
        ``.lost``, ``.findings``); different topic ids raise UsageError."""
        from .storage.diff import PartitionDiff, pair_partitions

        pairs, _only_a, _only_b = pair_partitions(self.selection, other.selection)
        return [PartitionDiff(a, b).compare() for a, b in pairs]

    # -- writing (each locks the log dirs it changes) -----------------------------------------------
    def repair(self, *, dry_run: bool = True, backup_dir=None, like_broker: bool = False,
               index_interval_bytes: int | None = None, progress=None, on_action=None):
        """``kltool verify --repair``: plan, and with ``dry_run=False`` back up what is cut (beside the
        log dir, or in ``backup_dir``) and apply. Returns a ``RepairResult`` (``.plan.actions``,
        ``.plan.problems``, ``.manifests`` for ``kltool restore``). ``progress(bytes)`` is called as the
        scan goes, ``on_action(action)`` as each action is applied."""
        return self._repair(dry_run=dry_run, backup_dir=backup_dir, like_broker=like_broker,
                            index_interval_bytes=index_interval_bytes, progress=progress, on_action=on_action)

    def rebuild_index(self, *, dry_run: bool = True, backup_dir=None, index_interval_bytes: int | None = None,
                      force: bool = False, progress=None, on_action=None):
        """``kltool rebuild-index``: rebuild the ``.index``, ``.timeindex`` and ``.txnindex`` files that are
        missing, corrupt or inconsistent with their log (every one with ``force``) by the broker's recovery
        rule; the old files are backed up. Returns a ``RepairResult`` like :meth:`repair`."""
        return self._repair(dry_run=dry_run, backup_dir=backup_dir, index_interval_bytes=index_interval_bytes,
                            indexes_only=True, force_index=force, progress=progress, on_action=on_action)

    def _repair(self, *, dry_run, index_interval_bytes, **kw):
        from .storage.change.repair import repair
        from .storage.index_builder import DEFAULT_INDEX_INTERVAL_BYTES

        interval = DEFAULT_INDEX_INTERVAL_BYTES if index_interval_bytes is None else index_interval_bytes
        with self._refreshed_after(dry_run):
            return repair(self.selection, dry_run=dry_run, interval=interval, **kw)

    def retention(self, *, retention_ms: int | None = None, retention_bytes: int | None = None,
                  before_offset: int | None = None, before_time: int | None = None,
                  before_offsets: dict | None = None, now: int | None = None, dry_run: bool = True,
                  backup: bool = True, backup_dir=None, on_plan=None, on_action=None):
        """``kltool retention``: the broker's time, size and log-start-offset retention. Returns the
        ``RetentionPlan`` (applied unless ``dry_run``). Only the limits given here or stored for a topic
        (``kltool create --config``) apply, never Kafka's defaults: with none, a UsageError.
        ``before_offsets`` ({(topic, partition): offset}) moves each partition's log start, as
        kafka-delete-records does. What is deleted is backed up (beside the log dir, or in ``backup_dir``;
        ``plan.manifests`` for ``kltool restore``) unless ``backup=False``. ``on_plan(plan)`` is called
        before anything is applied, ``on_action(action)`` as each action completes."""
        from .storage.change import retention as ret

        policy = ret.make_policy(now=int(time.time() * 1000) if now is None else now, retention_ms=retention_ms,
                                 retention_bytes=retention_bytes, before_offset=before_offset,
                                 before_time=before_time, before_offsets=before_offsets)
        with self._refreshed_after(dry_run):
            return ret.run_retention(self.selection, policy, dry_run=dry_run, backup=backup, backup_dir=backup_dir,
                                     on_plan=on_plan, on_action=on_action, named=self.paths)

    def compact(self, *, now: int | None = None, config: dict | None = None, dedupe_buffer_size: int | None = None,
                force: bool = False, dry_run: bool = True, backup: bool = True, backup_dir=None, on_plan=None,
                on_action=None):
        """``kltool compact``: one pass of the broker's log cleaner per partition. Returns the ``CompactPlan``
        (applied unless ``dry_run``). ``now`` (epoch ms) is the cleaner's clock; ``config`` overrides topic
        settings ({"delete.retention.ms": "0", ...}), else ``kltool-topics.json``, else Kafka's defaults;
        ``dedupe_buffer_size`` bounds the offset map (default 128 MiB). Topics whose cleanup.policy lacks
        ``compact`` are refused unless ``force``. Replaced segments are backed up (beside the log dir, or in
        ``backup_dir``; ``plan.manifests`` for ``kltool restore``) unless ``backup=False``. ``on_plan(plan)``
        is called before anything is swapped in, ``on_action(action)`` as each action completes."""
        from .storage.change import compact as cp
        from .storage.topic_config import parse_config_items

        overrides = parse_config_items([f"{k}={v}" for k, v in (config or {}).items()])
        policy = cp.Policy(now=int(time.time() * 1000) if now is None else now, config=overrides, force=force,
                           dedupe_buffer_size=cp.DEFAULT_DEDUPE_BUFFER if dedupe_buffer_size is None
                           else dedupe_buffer_size)
        with self._refreshed_after(dry_run):
            return cp.run_compaction(self.selection, policy, dry_run=dry_run, backup=backup, backup_dir=backup_dir,
                                     on_plan=on_plan, on_action=on_action, named=self.paths)

    def restore(self, *manifests, dry_run: bool = True, follow: bool = True, on_step=None) -> list:
        """``kltool restore``: undo backup runs (see :func:`restore`); without ``manifests``, every run in
        the backup directory beside each log dir (``<log dir>.kltool-backup``)."""
        from .storage.change.apply import default_backup_root

        if not manifests:
            manifests = tuple(r for r in (default_backup_root(ld.path) for ld in self.logdirs) if r.is_dir())
            if not manifests:
                raise UsageError(f"no backup directory beside {', '.join(str(ld.path) for ld in self.logdirs)}")
        with self._refreshed_after(dry_run):
            return restore(*manifests, dry_run=dry_run, follow=follow, on_step=on_step)

    def append(self, topic: str, records: Iterable, *, partition: int | None = None,
               ignore_unknown_fields: bool = False, **options):
        """``kltool append``: ``records`` are dicts with ``key``, ``value`` (bytes, str or None),
        ``headers`` (pairs), ``timestamp`` (epoch ms) and ``partition``, or ``(key, value)`` pairs,
        written to the single log dir selected as real batches. ``options`` are
        :class:`~kltool.storage.write.appender.AppendOptions` fields (``compression``, ``magic``,
        ``transactional`` ...). All or nothing: an error in any record leaves the log dir as it was (a dict key
        other than a record's is one, unless ``ignore_unknown_fields``). Returns an ``AppendResult``."""
        from .jsonl import unknown_field_message, unknown_fields
        from .storage.write.appender import Appender, AppendOptions

        if len(self.logdirs) != 1:
            raise UsageError(f"append needs exactly one log dir, not {len(self.logdirs)}")

        def as_bytes(v):
            return v.encode("utf-8") if isinstance(v, str) else v

        try:
            opts = AppendOptions(**options)
        except TypeError as e:
            raise UsageError(f"append: {e}") from None
        with Appender(self.logdirs[0].path, topic, opts, source="records") as app:
            for n, rec in enumerate(records, 1):
                if isinstance(rec, dict):
                    if not ignore_unknown_fields and (bad := unknown_fields(rec)):
                        raise UsageError(f"record {n}: {unknown_field_message(bad, relax='ignore_unknown_fields=True')}")
                    app.add(as_bytes(rec.get("key")), as_bytes(rec.get("value")),
                            tuple((k, as_bytes(v)) for k, v in rec.get("headers") or ()), rec.get("timestamp"),
                            rec.get("partition", partition), line=n)
                elif isinstance(rec, tuple | list) and len(rec) == 2:
                    app.add(as_bytes(rec[0]), as_bytes(rec[1]), (), None, partition, line=n)
                else:
                    raise UsageError(f"record {n}: expected a dict (key, value, headers, timestamp, partition) "
                                     f"or a (key, value) pair, not {type(rec).__name__}")
            result = app.commit()
        self.refresh()
        return result


# -- one call each, for scripts that need no handle ----------------------------------------------------
def verify(*paths, deep: bool = False, topic: str | None = None, partitions=None) -> VerifyReport:
    """``Logs(*paths, ...).verify(deep=deep)``."""
    return Logs(*paths, topic=topic, partitions=partitions).verify(deep=deep)


def repair(*paths, dry_run: bool = True, backup_dir=None, like_broker: bool = False, topic: str | None = None,
           partitions=None):
    """``Logs(*paths, ...).repair(dry_run=dry_run, ...)``: a plan unless ``dry_run=False``."""
    return Logs(*paths, topic=topic, partitions=partitions).repair(dry_run=dry_run, backup_dir=backup_dir,
                                                                   like_broker=like_broker)


def retention(*paths, dry_run: bool = True, topic: str | None = None, partitions=None, **limits):
    """``Logs(*paths, ...).retention(dry_run=dry_run, **limits)``: a plan unless ``dry_run=False``."""
    return Logs(*paths, topic=topic, partitions=partitions).retention(dry_run=dry_run, **limits)


def compact(*paths, dry_run: bool = True, topic: str | None = None, partitions=None, **options):
    """``Logs(*paths, ...).compact(dry_run=dry_run, **options)``: a plan unless ``dry_run=False``."""
    return Logs(*paths, topic=topic, partitions=partitions).compact(dry_run=dry_run, **options)


def restore(*manifests, dry_run: bool = True, follow: bool = True, on_step=None) -> list:
    """``kltool restore``: undo backup runs. Each of ``manifests`` is a run's ``manifest.json``, its run
    directory or a whole backup directory; with ``follow``, the interrupted runs a run followed are undone
    too. Every manifest is validated before anything changes. Returns the ``RestoreStep`` list (done unless
    ``dry_run``); ``on_step(step)`` is called for each."""
    from .storage.change.restore import restore as _restore

    if not manifests:
        raise UsageError("restore needs a manifest, a backup run directory or a backup directory")
    return _restore(list(manifests), dry_run=dry_run, follow=follow, on_step=on_step)


# -- what info and offsets report, per partition -------------------------------------------------------
def _partition_info(p) -> dict:
    from .storage.segment import first_batch

    segs = p.segments
    size = sum(s.size for s in segs)
    first = None
    for s in segs:
        first = first_batch(s)
        if first is not None:
            break
    leo = p.log_end_offset()
    # Closed segments: the time index's last entry (12 bytes read); the last one: its tail batches too.
    max_ts = max((s.max_timestamp_so_far for s in segs), default=-1)
    return {
        "type": "partition", "topic": p.topic, "partition": p.partition, "state": p.kind, "path": str(p.path),
        "segments": len(segs), "bytes": size, "log_start_offset": p.log_start_offset(), "log_end_offset": leo,
        "first_timestamp": -1 if first is None else (first.first_timestamp if first.magic == 2 else first.max_timestamp),
        "max_timestamp": max_ts, "stale_files": len(p.stale_files),
        "producer_snapshots": len(p.snapshots),
    }


def _logdir_info(ld) -> dict:
    meta = ld.meta_properties() or {}
    return {"type": "log_dir", "path": str(ld.path), "partitions": len(ld.partitions),
            "cluster_id": meta.get("cluster.id"), "node_id": meta.get("node.id") or meta.get("broker.id"),
            "meta_version": meta.get("version"), "clean_shutdown": ld.clean_shutdown,
            "lock_file": ld.lock_path.exists(), "unknown_dirs": [str(x) for x in ld.unknown_dirs]}


def _partition_offsets(p, *, target: int | None, modes: set[str], warnings: list) -> dict:
    from .storage import offsets as offs

    d: dict = {"type": "offsets", "topic": p.topic, "partition": p.partition}
    if p.kind != "normal":
        d["state"] = p.kind
    if "earliest" in modes:
        d["log_start_offset"] = offs.earliest(p).offset
    if "latest" in modes:
        d["log_end_offset"] = offs.latest(p).offset
    if target is not None:
        r = offs.offset_for_time(p, target, warnings=warnings)
        d.update({"time": target, "offset": None if r is None else r.offset,
                  "timestamp": None if r is None else r.timestamp, "leader_epoch": None if r is None else r.leader_epoch})
    if "max_timestamp" in modes:
        r = offs.max_timestamp(p, warnings=warnings)
        d.update({"max_timestamp": None if r is None else r.timestamp,
                  "max_timestamp_offset": None if r is None else r.offset})
    if "count" in modes:
        rc = offs.count_records(p)
        warnings.extend(rc.warnings)
        d.update({"records": rc.records, "control_records": rc.stats.control_records, "batches": rc.stats.batches,
                  "log_start_offset": rc.log_start_offset, "log_end_offset": rc.log_end_offset,
                  "offset_span": rc.offset_span})
    return d
