"""Tiered storage (KIP-405) copies on a local filesystem, read as a partition's older segments.

Kafka's own ``LocalTieredStorage`` (the storage module's test jar) keeps a root ``kafka-tiered-storage/``
with one directory per partition, ``<topic>-<partition>-<topic id>``, holding plain copies of the broker's
segment files named ``<start offset>-<segment id>.{log,index,timeindex,txnindex,snapshot,
leader_epoch_checkpoint}``. A tiered root is read as a set of partitions whose segments are those copies;
given together with the log dir that still holds the partition's newest segments, the copies are merged in
front of the local segments (:meth:`TieredPartition.merged`): a segment both local and remote (the broker
keeps a local copy until ``local.retention`` passes) is read once, from the local disk, and a remote copy
whose start offset is at or above the first local segment is not read.

Only names are read here (the discovery of :mod:`kltool.storage.discovery`); the segments are
:class:`RemoteSegment` objects, read as local segments are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..format import names as fn
from . import scan
from .segment import Segment

ROOT_DIR = "kafka-tiered-storage"  # LocalTieredStorage's directory under its configured dir


class RemoteSegment(Segment):
    """A tiered copy ``<offset>-<id>.log`` with its indexes ``<offset>-<id>.index`` ... beside it. Never the
    active segment (the broker copies only rolled segments)."""

    def __init__(self, directory: Path, base_offset: int, log_path: Path, segment_id: str | None):
        super().__init__(directory, base_offset, log_path, active=False)
        self.segment_id = segment_id
        self.trimmed_from: Path | None = None  # the remote copy this one was cut from (see trimmed)
        self._stem = log_path.name[: -len(".log")]

    @property
    def _index_stem(self) -> str:
        return self._stem


    def trimmed(self, first: int) -> RemoteSegment:
        """This copy up to the batch that starts at ``first`` (where the log dir's first segment starts),
        as a trimmed copy of the log and its indexes in a private temporary directory (the remote copy is
        not changed); ``trimmed_from`` names the copy. Itself when no batch starts at or after ``first``."""
        from ..format import index as fidx
        from ..format.records import BatchHeader
        from .fs import atomic_write, copy_range

        cut = next((h.position for h in scan.walk(self.log_path, start=self.position_for_offset(first))
                    if isinstance(h, BatchHeader) and h.crc_valid and h.base_offset >= first), None)
        if cut is None:
            return self
        d = _scratch_dir() / self.directory.name
        d.mkdir(parents=True, exist_ok=True)
        seg = RemoteSegment(d, self.base_offset, d / self.log_path.name, self.segment_id)
        copy_range(self.log_path, 0, cut, seg.log_path)
        base = self.base_offset
        atomic_write(seg.index_path, fidx.encode_offset_index([e for e in self.offset_index() if e[1] < cut], base))
        atomic_write(seg.timeindex_path, fidx.encode_time_index([e for e in self.time_index() if e[1] < first], base))
        txns = [t for t in self.txn_index() if t.first_offset < first]
        if txns:
            atomic_write(seg.txnindex_path, fidx.encode_txn_index(txns))
        seg.trimmed_from = self.log_path
        return seg


@dataclass
class TieredPartition:
    """One partition directory of a tiered root: its topic, partition, topic id and remote segments."""

    path: Path
    topic: str
    partition: int
    topic_id: str | None
    segments: list[RemoteSegment] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # every file read as part of a remote segment

    def merged(self, local: list[Segment]) -> list[Segment]:
        """The remote segments below the first local one, then ``local``: each offset read once."""
        return merge_segments(self.segments, local)


def merge_segments(remote: list, local: list) -> list:
    """A partition's segments (objects with ``base_offset``, each list in offset order) from its tiered
    copies and its log dir: the remote ones below the first local segment, then the local ones. A segment
    copied to remote storage and still local is read once, from the log dir (the one rule, for local
    partitions and object-store listings)."""
    first = local[0].base_offset if local else None
    older = [s for s in remote if first is None or s.base_offset < first]
    if older and first is not None and isinstance(older[-1], RemoteSegment) and older[-1].next_offset() > first:
        older[-1] = older[-1].trimmed(first)  # a follower's segments roll elsewhere than the leader's copies
    return [*older, *local]


_SCRATCH: list[Path] = []


def _scratch_dir() -> Path:
    """A private temporary directory for trimmed copies, removed when the process exits."""
    if not _SCRATCH:
        import atexit
        import shutil
        import tempfile

        d = Path(tempfile.mkdtemp(prefix="kltool-tiered-"))
        atexit.register(shutil.rmtree, d, True)
        _SCRATCH.append(d)
    return _SCRATCH[0]


def _segments(directory: Path) -> tuple[list[RemoteSegment], list[Path]]:
    """The remote segments of one tiered partition directory; for one start offset copied more than once
    (a new leader copying again), the largest copy."""
    from .discovery import classify_dir, list_dir

    found = classify_dir(list_dir(str(directory)))
    by_offset: dict[int, RemoteSegment] = {}
    files: list[Path] = []
    for (off, kind), e in sorted(found.tiered.items()):
        files.append(directory / e.name)
        if kind != "log":
            continue
        m = fn.REMOTE_SEGMENT_FILE.match(e.name)
        seg = RemoteSegment(directory, off, directory / e.name, m.group(2) if m else None)
        old = by_offset.get(off)
        if old is None or seg.size > old.size:
            by_offset[off] = seg
    files.extend(directory / e.name for e in found.other if fn.REMOTE_SEGMENT_EXTRA.match(e.name))
    return [by_offset[k] for k in sorted(by_offset)], files


def partition_dir(path: Path) -> TieredPartition | None:
    """``path`` as a tiered partition directory ``<topic>-<partition>-<topic id>`` holding at least one
    ``<offset>-<id>.log``; None otherwise."""
    m = fn.REMOTE_PARTITION_DIR.match(path.name)
    if m is None or not path.is_dir():
        return None
    try:
        segs, files = _segments(path)
    except (PermissionError, NotADirectoryError):
        return None
    if not segs:
        return None
    return TieredPartition(path, m.group(1), int(m.group(2)), path.name[len(m.group(1)) + len(m.group(2)) + 2:],
                           segs, files)


def open_root(path) -> list[TieredPartition] | None:
    """The partitions of a tiered root (the ``kafka-tiered-storage`` directory or the directory holding it),
    or of one tiered partition directory; None when ``path`` is none of these."""
    path = Path(path)
    one = partition_dir(path)
    if one is not None:
        return [one]
    if (path / ROOT_DIR).is_dir():
        path = path / ROOT_DIR
    try:
        subdirs = sorted(Path(e.path) for e in os.scandir(path) if e.is_dir())
    except (PermissionError, NotADirectoryError, FileNotFoundError):
        return None
    parts = [p for p in (partition_dir(d) for d in subdirs) if p is not None]
    return sorted(parts, key=lambda p: (p.topic, p.partition, str(p.path))) or None


def as_partitions(parts: list[TieredPartition]) -> list:
    """Each tiered partition as a :class:`~kltool.storage.partition.Partition` of its remote segments alone."""
    from .partition import Partition

    out = []
    for tp in parts:
        p = Partition(tp.path, None, topic=tp.topic, partition=tp.partition, kind="normal")
        p.remote = tp
        out.append(p)
    return out


def merge(partitions: list) -> list:
    """``partitions`` with every tiered-only partition (see :func:`as_partitions`) attached to the local
    partition of the same topic and partition number (and topic id, when both know it), as its older
    segments; a tiered partition with no local partition stays on its own."""
    local = [p for p in partitions if p.remote is None or p.remote.path != p.path]
    out = list(local)
    for p in partitions:
        if p.remote is None or p.remote.path != p.path:
            continue
        match = [q for q in local if q.topic == p.topic and q.partition == p.partition and q.kind == "normal"
                 and q.remote is None and _same_topic_id(q, p.remote.topic_id)]
        if match:
            match[0].remote = p.remote
            match[0].refresh()
        else:
            out.append(p)
    return out


def _same_topic_id(p, topic_id: str | None) -> bool:
    try:
        mine = p.metadata_topic_id()
    except Exception:  # noqa: BLE001 (a damaged partition.metadata: verify names it; match by name)
        mine = None
    return mine is None or topic_id is None or mine == topic_id


def is_tiered_copy(path) -> bool:
    """Whether ``path`` names a file of a tiered copy (``<offset>-<segment id>.<kind>``): kltool reads them,
    and changes none (their owner is the remote storage manager)."""
    name = Path(path).name
    m = fn.REMOTE_SEGMENT_FILE.match(name)
    return bool(m and m.group(2)) or bool(fn.REMOTE_SEGMENT_EXTRA.match(name))
