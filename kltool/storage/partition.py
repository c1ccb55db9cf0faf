"""A partition directory: its segments in offset order, its other files, and the broker's lookups."""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

from ..errors import CorruptDataError
from ..format import names as fn
from .fs import read_small_file
from .segment import Segment


class Partition:
    """``topic-N`` (or ``topic-N.<id>-delete|-future|-stray``) directory."""

    def __init__(self, path, logdir=None, *, topic: str | None = None, partition: int | None = None,
                 kind: str | None = None):
        self.path = Path(path)
        self.logdir = logdir
        if topic is None:
            from ..format.topics import parse_partition_dir_name

            topic, partition, kind, _uid = parse_partition_dir_name(self.path.name)
        self.topic = topic
        self.partition = partition
        self.kind = kind or "normal"  # normal | delete | future | stray
        self._scanned = False
        self._segments: list[Segment] = []
        self.stale_files: list[Path] = []  # .deleted / .cleaned / .swap
        self.orphan_indexes: list[Path] = []
        self.snapshots: list[tuple[int, Path]] = []
        self.kraft_snapshots: list[Path] = []
        self.other_files: list[Path] = []
        self.temp_files: list[Path] = []
        self.remote = None  # a tiered.TieredPartition: tiered-storage copies read before the local segments

    @property
    def name(self) -> str:
        return self.path.name

    def __repr__(self) -> str:
        return f"Partition({self.path})"

    def _scan(self) -> None:
        if self._scanned:
            return
        from .discovery import classify_dir, list_dir

        found = classify_dir(list_dir(str(self.path)))
        if found.duplicate_logs:
            dup = found.duplicate_logs[0]
            raise CorruptDataError(f"two log files for base offset {fn.parse_segment_file(dup.name)[0]}",
                                   path=self.path / dup.name)
        here = self.path
        items = sorted(found.logs.items())
        self._segments = [Segment(here, off, here / e.name, active=i == len(items) - 1)
                          for i, (off, e) in enumerate(items)]
        self.stale_files = [here / e.name for e in found.stale]
        self.orphan_indexes = [here / e.name for off, _k, e in found.indexes if off not in found.logs]
        self.snapshots = sorted((off, here / e.name) for off, e in found.snapshots)
        self.kraft_snapshots = [here / e.name for e in found.kraft_snapshots]
        self.temp_files = [here / e.name for e in found.temp]
        # tiered-storage copies (<offset>-<id>.log) are not this partition's segments
        self.other_files = sorted(here / e.name for e in (*found.other, *found.tiered.values()))
        if self.remote is not None:  # tiered copies first, each offset once (storage/tiered.py)
            self._segments = self.remote.merged(self._segments)
            self.other_files = [f for f in self.other_files if f not in set(self.remote.files)]
        self._scanned = True

    def refresh(self) -> None:
        self._scanned = False
        self._segments = []
        self.stale_files, self.orphan_indexes, self.snapshots = [], [], []
        self.kraft_snapshots, self.other_files, self.temp_files = [], [], []
        self._scan()  # the leftovers (stale_files, ...) are read as attributes: list them again now

    @property
    def segments(self) -> list[Segment]:
        self._scan()
        return self._segments

    @property
    def base_offsets(self) -> list[int]:
        return [s.base_offset for s in self.segments]

    def segment_for_offset(self, offset: int) -> Segment | None:
        """The segment whose range holds ``offset`` (floor by base offset)."""
        segs = self.segments
        i = bisect_right(self.base_offsets, offset) - 1
        return segs[i] if i >= 0 else (segs[0] if segs else None)

    def segments_from(self, offset: int | None) -> list[Segment]:
        segs = self.segments
        if offset is None or not segs:
            return segs
        i = max(0, bisect_right(self.base_offsets, offset) - 1)
        return segs[i:]

    # -- offsets ------------------------------------------------------------------------------
    def log_start_offset(self) -> int:
        """max(log-start-offset-checkpoint, first segment's base offset), like the broker's loader."""
        first = self.segments[0].base_offset if self.segments else 0
        cp = self.logdir.checkpoint(fn.LOG_START_OFFSET_CHECKPOINT) if self.logdir is not None else {}
        v = cp.get((self.topic, self.partition))
        return max(first, v) if v is not None else first

    def log_end_offset(self) -> int:
        """The broker's log end offset: the next offset of the last segment (its base offset when
        it is empty, e.g. right after a roll)."""
        segs = self.segments
        return segs[-1].next_offset() if segs else 0

    def metadata_topic_id(self) -> str | None:
        p = self.path / fn.PARTITION_METADATA
        try:
            text = read_small_file(p)
        except FileNotFoundError:
            return None
        from ..format.checkpoints import parse_partition_metadata

        try:
            return parse_partition_metadata(text)[1]
        except CorruptDataError as e:
            raise e.at(path=p) from None

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)
