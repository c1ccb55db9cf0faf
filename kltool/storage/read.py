"""Offset- and time-bounded reads over a partition, seeking through the indexes like the broker
(reference §5.6): segments by base offset (binary search) or by largest timestamp, then the
``.timeindex``, then the ``.index``, then a short scan."""

from __future__ import annotations

from collections.abc import Iterator

from ..format.records import BatchHeader
from .partition import Partition
from .scan import Damage
from .segment import Segment


def segments_for_time(p: Partition, timestamp: int) -> list[Segment]:
    """Segments from the first whose largest timestamp is >= ``timestamp`` (the broker's
    ``fetchOffsetByTimestamp`` skips earlier ones)."""
    segs = p.segments
    for i, s in enumerate(segs):
        if s.max_timestamp_so_far >= timestamp:
            return segs[i:]
    return []


def read_partition(p: Partition, *, from_offset: int | None = None, to_offset: int | None = None,
                   from_time: int | None = None, with_data: bool = True
                   ) -> Iterator[tuple[Segment, BatchHeader | Damage]]:
    """Batches (and damage) that may hold offsets in [from_offset, to_offset] and timestamps
    >= from_time, in offset order. Callers filter records exactly."""
    segs = p.segments_from(from_offset)
    if from_time is not None:
        by_time = segments_for_time(p, from_time)
        if len(by_time) < len(segs):
            segs = by_time
    first = True
    for seg in segs:
        start = 0
        if first:
            if from_time is not None:
                start = seg.position_for_time(from_time, from_offset)
            elif from_offset is not None:
                start = seg.position_for_offset(from_offset)
        first = False
        for item in seg.walk(start=start, with_data=with_data):
            if isinstance(item, Damage):
                yield seg, item
                continue
            if from_offset is not None and item.last_offset < from_offset:
                continue
            if from_time is not None and item.max_timestamp < from_time and item.magic > 0:
                continue
            yield seg, item
            if to_offset is not None and item.last_offset >= to_offset:
                return
