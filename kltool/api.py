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

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UsageError

__all__ = ["Logs", "VerifyReport", "verify", "repair", "retention"]


@dataclass
class VerifyReport:
    """What :meth:`Logs.verify` found: ``findings`` (severity ``error`` or ``warning``, ``kind``,
    ``file``, ``position``, ``offset``, ``message``; ``to_json()`` gives DESIGN's ``finding`` object)
    and the counts in ``stats``."""

    findings: list = field(default_factory=list)
    stats: object = None

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

    # -- reading -------------------------------------------------------------------------------------
    def verify(self, *, deep: bool = False) -> VerifyReport:
        """``kltool verify``: every batch's CRC and structure, every index against its log, stale files;
        ``deep`` also decompresses and parses every record. Never changes a file."""
        from .storage.check.verify import VerifyStats, verify_selection

        stats = VerifyStats()
        findings = list(verify_selection(self.selection, deep=deep, stats=stats))
        return VerifyReport(findings, stats)

    def records(self, *, topic: str | None = None, partition: int | None = None, from_offset: int | None = None,
                to_offset: int | None = None, from_time: int | None = None, to_time: int | None = None,
                key: bytes | None = None, include_control: bool = False) -> Iterator:
        """The records (:class:`~kltool.storage.read.LogRecord`) of each selected partition in turn, in
        offset order, with the exact filters of ``kltool dump --records`` (offsets and times inclusive,
        times in epoch ms; the read of a partition ends at the first record stamped after ``to_time``).
        Damaged regions are skipped (:meth:`verify` names them)."""
        from .storage.read import records

        for p in self.partitions:
            if p.kind != "normal" or (topic is not None and p.topic != topic) or \
                    (partition is not None and p.partition != partition):
                continue
            yield from records(p, from_offset=from_offset, to_offset=to_offset, from_time=from_time,
                               to_time=to_time, key=key, include_control=include_control)

    def offset_for_time(self, topic: str, partition: int, timestamp: int):
        """``kltool offsets --time``: the first record with timestamp >= ``timestamp`` found the broker's
        way (``TimestampOffset`` with offset, timestamp, leader epoch), or None."""
        from .storage.offsets import offset_for_time

        return offset_for_time(self.partition(topic, partition), timestamp)

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
    def repair(self, *, dry_run: bool = True, backup_dir=None, like_broker: bool = False):
        """``kltool verify --repair``: plan, and with ``dry_run=False`` back up what is cut (beside the
        log dir, or in ``backup_dir``) and apply. Returns a ``RepairResult`` (``.plan.actions``,
        ``.plan.problems``, ``.manifests`` for ``kltool restore``)."""
        from .storage.change.repair import repair

        try:
            return repair(self.selection, dry_run=dry_run, backup_dir=backup_dir, like_broker=like_broker)
        finally:
            if not dry_run:
                self.refresh()

    def retention(self, *, retention_ms: int | None = None, retention_bytes: int | None = None,
                  before_offset: int | None = None, before_time: int | None = None, now: int | None = None,
                  dry_run: bool = True, backup_dir=None):
        """``kltool retention``: the broker's time, size and log-start-offset retention. Returns the
        ``RetentionPlan`` (applied unless ``dry_run``; with ``backup_dir``, ``kltool restore`` undoes
        it). Without a limit given, the topics' own (``kltool create --config``) or Kafka's defaults
        apply."""
        from .storage.change import retention as ret
        from .storage.change.backup import LogDirLocks

        if self.selection.files or not self.partitions:
            raise UsageError("retention works on whole partitions: give a log dir or partition directories")
        only_start = (before_offset is not None or before_time is not None) and \
            retention_ms is None and retention_bytes is None
        policy = ret.Policy(now=int(time.time() * 1000) if now is None else now, retention_ms=retention_ms,
                            retention_bytes=retention_bytes, before_offset=before_offset,
                            before_time=before_time, time_and_size=not only_start)
        logdirs = {p.logdir.path for p in self.partitions if p.logdir is not None}
        with contextlib.nullcontext() if dry_run else LogDirLocks(sorted(logdirs), dry_run=False):
            plan = ret.plan_retention(self.selection, policy)
            if not dry_run and plan.has_work:
                try:
                    ret.apply_retention(plan, backup_dir=backup_dir)
                finally:
                    self.refresh()
        return plan

    def append(self, topic: str, records: Iterable, *, partition: int | None = None, **options):
        """``kltool append``: ``records`` are dicts with ``key``, ``value`` (bytes, str or None),
        ``headers`` (pairs), ``timestamp`` (epoch ms) and ``partition``, or ``(key, value)`` pairs,
        written to the single log dir selected as real batches. ``options`` are
        :class:`~kltool.storage.write.appender.AppendOptions` fields (``compression``, ``magic``,
        ``transactional`` ...). All or nothing: an error in any record leaves the log dir as it was. Returns an
        ``AppendResult``."""
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
