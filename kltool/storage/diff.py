"""Where two copies of a partition diverge, and what each lacks (``kltool diff A B``).

Two copies of one partition (leader and follower, a backup and the live log, before and after an
unclean election) are walked side by side, batch by batch in offset order, through the one walker: a
batch is the same on both sides when its offsets, size, CRC (which covers attributes, timestamps,
producer fields and records) and partitionLeaderEpoch (which the CRC does not cover) are equal. One pass,
two batch headers held at a time: linear time, bounded memory.

Reported per partition (:class:`PartitionDiff`):

* ``diverge_offset``: the first offset where the two copies hold different data (None when one is a
  prefix of the other, or they are equal); offsets that only one side has *before* the other's first
  batch (retention) or *after* its last (it is behind) are not divergence;
* what both have, and what only A and only B have (offsets, records, bytes, time range), and each pair
  of batches with the same offsets and different content (:class:`BatchDiff`);
* ``truncation_offset``: where the broker truncates B when B follows A, by Kafka's OffsetsForLeaderEpoch
  rule (:mod:`kltool.storage.epoch_cache`), from each side's leader-epoch cache
  (``leader-epoch-checkpoint``, or the batches' epochs when it is missing), and ``lost``: the batches of B at and after it, which that truncation removes. Where
  the epoch rule keeps data that differs (truncation above the divergence), a finding says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import CorruptDataError, UsageError
from ..format import names as fn
from ..format.records import BatchHeader
from .epoch_cache import derived_cache, follower_truncation, leader_epoch_cache
from .findings import Finding
from .scan import Damage
from .transactions import high_watermark

__all__ = ["SideStats", "BatchDiff", "PartitionDiff", "pair_partitions"]


class SideStats:
    """Batches, records, bytes, offset range and time range of a set of batches."""

    __slots__ = ("batches", "records", "bytes", "first_offset", "last_offset", "first_timestamp", "last_timestamp")

    def __init__(self):
        self.batches = self.records = self.bytes = 0
        self.first_offset = self.last_offset = self.first_timestamp = self.last_timestamp = None

    def add(self, h: BatchHeader) -> None:
        self.batches += 1
        self.records += h.count if h.count is not None else 1
        self.bytes += h.size
        if self.first_offset is None or h.base_offset < self.first_offset:
            self.first_offset = h.base_offset
        if self.last_offset is None or h.last_offset > self.last_offset:
            self.last_offset = h.last_offset
        lo = h.first_timestamp if h.magic == 2 else h.max_timestamp
        for ts in (lo, h.max_timestamp):
            if ts is not None and ts >= 0:
                if self.first_timestamp is None or ts < self.first_timestamp:
                    self.first_timestamp = ts
                if self.last_timestamp is None or ts > self.last_timestamp:
                    self.last_timestamp = ts

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class BatchDiff:
    """Batches at the same offsets with different content."""

    base_offset: int
    last_offset: int
    crc_a: int
    crc_b: int
    size_a: int
    size_b: int
    epoch_a: int
    epoch_b: int

    def to_json(self, topic: str, partition: int) -> dict:
        return {"type": "batch_diff", "topic": topic, "partition": partition, "base_offset": self.base_offset,
                "last_offset": self.last_offset, "crc_a": self.crc_a, "crc_b": self.crc_b, "size_a": self.size_a,
                "size_b": self.size_b, "leader_epoch_a": self.epoch_a, "leader_epoch_b": self.epoch_b}


# ---------------------------------------------------------------------------------------------- pairing


def _topic_id(p, notes: list | None) -> str | None:
    """The partition's topic id; None when it has no ``partition.metadata`` or it cannot be read (a warning
    in ``notes`` then: the copies are compared, their identity unproven)."""
    try:
        return p.metadata_topic_id()
    except (OSError, UnicodeDecodeError, CorruptDataError) as e:
        if notes is not None:
            notes.append(Finding("warning", "partition_metadata", str(p.path / fn.PARTITION_METADATA),
                                 f"unreadable, the topic id unknown: {e}"))
        return None


def pair_partitions(sel_a, sel_b, notes: list | None = None) -> tuple[list[tuple], list, list]:
    """([(A partition, B partition)], only in A, only in B): two partition directories are a pair (when
    their names differ, only if their topic ids say they are one); otherwise partitions pair by topic and
    number. Two copies with different topic ids (``partition.metadata``) are refused (UsageError); an
    unreadable ``partition.metadata`` is a warning in ``notes``."""
    def normal(sel):
        return {(p.topic, p.partition): p for p in sel.partitions if p.kind == "normal"}

    if len(sel_a.partitions) == 1 and len(sel_b.partitions) == 1 and not (sel_a.logdirs and sel_b.logdirs):
        pairs = [(sel_a.partitions[0], sel_b.partitions[0])]
        only_a, only_b = [], []
    else:
        a, b = normal(sel_a), normal(sel_b)
        pairs = [(a[k], b[k]) for k in sorted(a.keys() & b.keys())]
        only_a = [a[k] for k in sorted(a.keys() - b.keys())]
        only_b = [b[k] for k in sorted(b.keys() - a.keys())]
    for pa, pb in pairs:
        ida, idb = _topic_id(pa, notes), _topic_id(pb, notes)
        if ida is not None and idb is not None and ida != idb:
            raise UsageError(f"not copies of the same partition: topic id {ida} in {pa.path / fn.PARTITION_METADATA}"
                             f", {idb} in {pb.path / fn.PARTITION_METADATA}")
        if (pa.topic, pa.partition) != (pb.topic, pb.partition) and (ida is None or ida != idb):
            raise UsageError(f"not copies of the same partition: {pa.topic}-{pa.partition} and {pb.topic}-"
                             f"{pb.partition}, and no topic id (partition.metadata) says they are one", path=pb.path)
    return pairs, only_a, only_b


# ------------------------------------------------------------------------------------------- the walk


@dataclass
class PartitionDiff:
    """Two copies of one partition, A (the leader, the copy that stays) and B (the follower, the copy the
    broker would truncate). :meth:`run` walks both and yields each :class:`BatchDiff` and
    :class:`~kltool.storage.findings.Finding` as it meets them; the fields are complete once it ends."""

    a: object
    b: object
    common: SideStats = field(default_factory=SideStats)
    only_a: SideStats = field(default_factory=SideStats)
    only_b: SideStats = field(default_factory=SideStats)
    lost: SideStats = field(default_factory=SideStats)  # B's batches the truncation removes
    diverge_offset: int | None = None
    differing_batches: int = 0
    log_end_a: int = 0
    log_end_b: int = 0
    truncation_offset: int | None = None
    truncation_rule: str = ""
    epochs_a: str = ""
    epochs_b: str = ""
    cache_a: list = field(default_factory=list)  # [(epoch, start offset)] as the broker loads it
    cache_b: list = field(default_factory=list)
    damaged: bool = False
    findings: list = field(default_factory=list)  # (filled by :meth:`compare`)
    batch_diffs: list = field(default_factory=list)  # the first ``keep`` of them (filled by :meth:`compare`)

    @property
    def identical(self) -> bool:
        return not (self.only_a.batches or self.only_b.batches or self.damaged)

    def to_json(self) -> dict:
        return {"type": "divergence", "topic": self.a.topic, "partition": self.a.partition, "a": str(self.a.path),
                "b": str(self.b.path), "identical": self.identical, "diverge_offset": self.diverge_offset,
                "log_end_offset_a": self.log_end_a, "log_end_offset_b": self.log_end_b,
                "truncation_offset": self.truncation_offset, "truncation_rule": self.truncation_rule,
                "leader_epochs_a": self.epochs_a, "leader_epochs_b": self.epochs_b,
                "epoch_cache_a": [list(e) for e in self.cache_a], "epoch_cache_b": [list(e) for e in self.cache_b],
                "common": self.common.to_json(), "only_a": self.only_a.to_json(), "only_b": self.only_b.to_json(),
                "differing_batches": self.differing_batches, "follower_loses": self.lost.to_json(),
                "complete": not self.damaged}

    def _caches(self) -> tuple[list, list, list[Finding]]:
        notes = []
        caches = []
        for name, p, leo in (("A", self.a, self.log_end_a), ("B", self.b, self.log_end_b)):
            cache, source = leader_epoch_cache(p, leo, p.log_start_offset())
            if cache is None:
                notes.append(Finding("info", "leader_epochs_derived", str(p.path / fn.LEADER_EPOCH_CHECKPOINT),
                                     f"leader-epoch-checkpoint {source}: {name}'s epochs are read from its batches "
                                     f"(as the broker's recovery rebuilds them)"))
                cache, source = derived_cache(p), "batches"
            caches.append(cache)
            if name == "A":
                self.epochs_a = source
            else:
                self.epochs_b = source
        return caches[0], caches[1], notes

    def compare(self, keep: int = 100) -> PartitionDiff:
        """:meth:`run` to the end, keeping the findings and the first ``keep`` batch pairs; returns self."""
        for item in self.run():
            if isinstance(item, Finding):
                self.findings.append(item)
            elif len(self.batch_diffs) < keep:
                self.batch_diffs.append(item)
        return self

    def run(self) -> Iterator[BatchDiff | Finding]:
        self.log_end_a, self.log_end_b = self.a.log_end_offset(), self.b.log_end_offset()
        ca, cb, notes = self._caches()
        self.cache_a, self.cache_b = ca, cb
        yield from notes
        self.truncation_offset, self.truncation_rule = follower_truncation(
            ca, self.log_end_a, cb, self.log_end_b, high_watermark(self.b, self.log_end_b)[0])
        sink: list[Finding] = []
        yield from self._merge(self._batches(self.a, sink), self._batches(self.b, sink), sink)
        yield from sink
        if self.truncation_offset is not None and self.diverge_offset is not None \
                and self.truncation_offset > self.diverge_offset:
            yield Finding("error", "divergence_kept", str(self.b.path),
                          f"the leader-epoch rule truncates B at {self.truncation_offset}, above the first offset "
                          f"where B differs from A ({self.diverge_offset}): as B's follower the broker keeps "
                          f"records A does not have", None, self.diverge_offset)

    def _batches(self, p, sink: list) -> Iterator[BatchHeader]:
        for seg in p.segments:
            for item in seg.walk():
                if isinstance(item, Damage):
                    self.damaged = True
                    sink.append(Finding("error", item.kind, str(seg.log_path), item.message + " (left out of the "
                                        "comparison)", item.position, None, item.length))
                elif not item.crc_valid:
                    self.damaged = True
                    sink.append(Finding("error", "crc_mismatch", str(seg.log_path),
                                        f"batch {item.base_offset}..{item.last_offset} fails its CRC (left out of the "
                                        f"comparison)", item.position, item.base_offset))
                else:
                    yield item

    def _only(self, stats: SideStats, h: BatchHeader, other_started: bool, other_ended: bool) -> None:
        stats.add(h)
        if other_started and not other_ended:
            self._diverge(h.base_offset)

    def _diverge(self, offset: int) -> None:
        if self.diverge_offset is None or offset < self.diverge_offset:
            self.diverge_offset = offset

    def _lose(self, h: BatchHeader) -> None:
        if h.last_offset >= self.truncation_offset:
            self.lost.add(h)

    def _merge(self, ia, ib, sink) -> Iterator[BatchDiff]:
        a, b = next(ia, None), next(ib, None)
        first_a = None if a is None else a.base_offset
        first_b = None if b is None else b.base_offset
        while a is not None or b is not None:
            if b is None or (a is not None and a.last_offset < b.base_offset):
                # A has a batch B lacks: before B's first batch, after B's last, or a hole in B
                self._only(self.only_a, a, first_b is not None and a.base_offset >= first_b, b is None)
                a = next(ia, None)
                continue
            if a is None or b.last_offset < a.base_offset:
                self._only(self.only_b, b, first_a is not None and b.base_offset >= first_a, a is None)
                self._lose(b)
                b = next(ib, None)
                continue
            same = (a.base_offset == b.base_offset and a.last_offset == b.last_offset and a.size == b.size
                    and a.crc == b.crc and a.partition_leader_epoch == b.partition_leader_epoch)
            if same:
                self.common.add(a)
                self._lose(b)
                a, b = next(ia, None), next(ib, None)
                continue
            self._diverge(min(a.base_offset, b.base_offset))
            if a.base_offset == b.base_offset and a.last_offset == b.last_offset:
                self.differing_batches += 1
                yield BatchDiff(a.base_offset, a.last_offset, a.crc, b.crc, a.size, b.size, a.partition_leader_epoch,
                                b.partition_leader_epoch)
            if a.last_offset <= b.last_offset:
                self.only_a.add(a)
                advance_b = a.last_offset == b.last_offset
                a = next(ia, None)
                if advance_b:
                    self.only_b.add(b)
                    self._lose(b)
                    b = next(ib, None)
            else:
                self.only_b.add(b)
                self._lose(b)
                b = next(ib, None)
