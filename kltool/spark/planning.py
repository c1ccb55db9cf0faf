"""Planning (driver side): which segments, which offset range of each, split at batch starts through the
``.index`` and packed into DataFrame partitions the way Spark's file sources pack files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.datasource import InputPartition

from .options import (
    EARLIEST,
    LATEST,
    Pushed,
    _assigned,
    _bool,
    _int,
    _spark_offsets,
    normalize_options,
    option_paths,
    storage_options,
)


@dataclass
class SegmentRead:
    """One segment to read, with the offset range [start, end) to return."""

    file: str
    topic: str | None
    partition: int | None
    segment: int | None
    start: int | None = None  # inclusive, None = from the beginning
    end: int | None = None  # exclusive, None = to the end
    bytes: int = 0
    partition_dir: str | None = None
    log_start_offset: int | None = None  # the partition's (segments level)
    position: int = 0  # byte to start reading at (a batch start: 0, an index seek, a split point)
    stop: int | None = None  # read the batches that start before this byte (a split's end); None: to the end
    storage: dict | None = None  # storage options, for object-store URIs


def offset_for_time(p, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of partition ``p`` whose timestamp is >= ``timestamp``
    (the broker's ListOffsets by time: segments by largest timestamp, .timeindex, .index, scan);
    None when there is none. Control records count, as in the broker's lookup."""
    from ..storage.offsets import offset_for_time as lookup

    hit = lookup(p, timestamp)
    return None if hit is None else (hit.offset, hit.timestamp)


def _selection(opts, paths=None):
    from ..storage import open_paths
    from ..storage.select import parse_partitions

    if paths is None:
        paths = option_paths(opts)
    if not paths:
        return [], []
    parts = parse_partitions(opts.get("partition")) if opts.get("partition") else None
    sel = open_paths(paths, opts.get("topic") or None, parts)
    all_states = _bool(opts.get("allstates"), False)
    partitions = [p for p in sel.partitions if all_states or p.kind == "normal"]
    wanted = _assigned(opts)
    if wanted is not None:
        partitions = [p for p in partitions if (p.topic, p.partition) in wanted]
        return partitions, []
    return partitions, sel.files


def plan_segments(opts, pushed: Pushed | None = None) -> list[SegmentRead]:  # noqa: C901
    """The segments to read, each with its offset range, in (topic, partition, offset) order;
    ``pushed`` (filters pushed down by Spark) narrows partitions and offset ranges through the
    indexes, as the equivalent options would."""
    from ..format.names import classify
    from ..storage.uri import is_remote, local_path

    opts = normalize_options(opts)
    records = (opts.get("level") or "records").lower() == "records"
    all_paths = option_paths(opts)
    remote = [p for p in all_paths if is_remote(p)]
    # local paths as absolute ones, as Spark qualifies file-source paths: executors run elsewhere
    partitions, files = _selection(opts, [os.path.abspath(local_path(p)) for p in all_paths if not is_remote(p)])
    user_times = (_int(opts, "startingtimestamp"), _int(opts, "endingtimestamp"))
    if pushed is not None and not pushed.empty():
        partitions = [p for p in partitions if pushed.wants(p.topic, p.partition)]
        if records:
            opts = dict(opts)
            if pushed.offset_min is not None:
                g = _int(opts, "startingoffset")
                opts["startingoffset"] = str(pushed.offset_min if g is None else max(g, pushed.offset_min))
            if pushed.offset_end is not None:
                g = _int(opts, "endingoffset")
                opts["endingoffset"] = str(pushed.offset_end if g is None else min(g, pushed.offset_end))
            if pushed.time_min is not None:
                g = _int(opts, "startingtimestamp")
                opts["startingtimestamp"] = str(pushed.time_min if g is None else max(g, pushed.time_min))
    g_start, g_end = _int(opts, "startingoffset"), _int(opts, "endingoffset")
    m_start = _spark_offsets(opts.get("startingoffsets"), "startingOffsets")
    m_end = _spark_offsets(opts.get("endingoffsets"), "endingOffsets")
    t_start, t_end = _int(opts, "startingtimestamp"), _int(opts, "endingtimestamp")
    out: list[SegmentRead] = []
    for p in partitions:
        segs = p.segments
        start, end = g_start, g_end
        key = (p.topic, p.partition)
        for spec, is_start in ((m_start, True), (m_end, False)):
            v = spec.get(key) if isinstance(spec, dict) else spec
            if v is None or v == EARLIEST and is_start or v == LATEST and not is_start:
                continue
            if v in (EARLIEST, LATEST):
                v = p.log_start_offset() if v == EARLIEST else p.log_end_offset()
            if is_start:
                start = v if start is None else max(start, v)
            else:
                end = v if end is None else min(end, v)
        for ts, is_start in ((t_start, True), (t_end, False)):
            if ts is None:
                continue
            hit = offset_for_time(p, ts)
            v = p.log_end_offset() if hit is None else hit[0]
            if hit is None and is_start:
                v = None
                start, end = 0, 0  # no record at or after ts: nothing to read here
                break
            if is_start:
                start = v if start is None else max(start, v)
            else:
                end = v if end is None else min(end, v)
        lso = p.log_start_offset() if segs else None  # below it, records are deleted
        if records and _bool(opts.get("respectlogstartoffset"), True) and segs:
            if lso > segs[0].base_offset:
                start = lso if start is None else max(start, lso)
        if start is not None and end is not None and start >= end:
            continue
        for i, s in enumerate(segs):
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
            if start is not None and nxt is not None and nxt <= start:
                continue  # the whole segment is below start
            if end is not None and s.base_offset >= end:
                break  # this and later segments are at or past end
            out.append(SegmentRead(str(s.log_path), p.topic, p.partition, s.base_offset, start, end,
                                   s.size, str(p.path), lso))
    for f in files:
        kind, base = classify(f)
        if kind not in ("log", "kraft_snapshot"):
            continue
        topic = part = None
        from ..errors import CorruptDataError
        from ..format.topics import parse_partition_dir_name

        try:
            topic, part, _k, _u = parse_partition_dir_name(f.parent.name)
        except CorruptDataError:  # a lone file outside a partition directory
            pass
        if pushed is not None and not pushed.wants(topic, part):
            continue
        out.append(SegmentRead(str(f), topic, part, base, g_start, g_end, f.stat().st_size, str(f.parent)))
    if remote:
        # (a pushed timestamp filter prunes nothing there: no time index lookups on object stores yet;
        # Spark checks it on the rows)
        out.extend(_plan_remote(opts, remote, pushed, records, (g_start, g_end, m_start, m_end, *user_times)))
    if records:
        out = split_segments(out, _split_bytes(opts))
    return out


def _split_bytes(opts) -> int:
    v = _int(opts, "splitbytes")
    return 128 << 20 if v is None else v


def _plan_remote(opts, uris, pushed, records, bounds) -> list[SegmentRead]:  # noqa: C901
    """The segments of object-store URIs, planned from their names, the checkpoint and the .index
    of the first segment read in each partition (no segment bytes but one batch header are read)."""
    from ..errors import UsageError
    from ..storage.select import parse_partitions
    from ..storage.uri import select_remote

    g_start, g_end, m_start, m_end, t_start, t_end = bounds
    storage = storage_options(opts)
    if t_start is not None or t_end is not None or LATEST in (m_start,) or (
            isinstance(m_start, dict) and LATEST in m_start.values()):
        raise UsageError(f"{uris[0]}: startingTimestamp/endingTimestamp and startingOffsets latest are not "
                         "supported for object-store paths; filter on the timestamp column instead")
    parts = parse_partitions(opts.get("partition")) if opts.get("partition") else None
    sel = select_remote(uris, opts.get("topic") or None, parts, storage,
                        all_states=_bool(opts.get("allstates"), False), strict=False)
    wanted = _assigned(opts)
    out: list[SegmentRead] = []
    for p in sel.partitions:
        if wanted is not None and (p.topic, p.partition) not in wanted:
            continue
        if pushed is not None and not pushed.wants(p.topic, p.partition):
            continue
        segs = p.segments
        lso = p.log_start_offset() if segs else None
        start, end = g_start, g_end
        for spec, is_start in ((m_start, True), (m_end, False)):
            v = spec.get((p.topic, p.partition)) if isinstance(spec, dict) else spec
            if v is None or v == LATEST and not is_start:
                continue
            if v == EARLIEST:
                v = lso if is_start else None
                if v is None:
                    continue
            if is_start:
                start = v if start is None else max(start, v)
            else:
                end = v if end is None else min(end, v)
        if records and _bool(opts.get("respectlogstartoffset"), True) and segs and lso > segs[0].base_offset:
            start = lso if start is None else max(start, lso)
        if start is not None and end is not None and start >= end:
            continue
        first = True
        for i, s in enumerate(segs):
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
            if start is not None and nxt is not None and nxt <= start:
                continue
            if end is not None and s.base_offset >= end:
                break
            pos = 0
            if first and records and start is not None and s.index:
                pos = _seek(_remote_index(s.index, s.base_offset, storage), s.base_offset, start,
                            lambda at, u=s.log: _remote_head(u, at, storage))
            first = False
            out.append(SegmentRead(s.log, p.topic, p.partition, s.base_offset, start, end, s.size, p.directory,
                                   lso, position=pos, storage=storage or None))
    if wanted is None and (pushed is None or pushed.wants(None, None)):
        for uri, size in sel.files:
            from ..format.names import REMOTE_SEGMENT_FILE as SEGMENT_NAME

            m = SEGMENT_NAME.match(uri.rsplit("/", 1)[-1])
            out.append(SegmentRead(uri, None, None, int(m.group(1)) if m else None, g_start, g_end, size,
                                   uri.rsplit("/", 1)[0], storage=storage or None))
    return out


def _remote_index(uri, base, storage) -> list[tuple[int, int]]:
    from ..format import index as fidx
    from ..storage.uri import read_bytes

    try:
        return fidx.offset_index_entries(read_bytes(uri, storage), base)
    except Exception:  # noqa: BLE001 (an unreadable or damaged index: read from the start, as without one)
        return []


def _remote_head(uri, at, storage) -> bytes:
    from ..format.batch import V2_OVERHEAD
    from ..storage.uri import read_bytes

    return read_bytes(uri, storage, at, V2_OVERHEAD)


def _local_head(path):
    from ..format.batch import V2_OVERHEAD

    def head(at: int) -> bytes:
        with open(path, "rb") as f:
            return os.pread(f.fileno(), V2_OVERHEAD, at)
    return head


def _seek(entries, base: int, offset: int, head) -> int:
    """Where to start reading for ``offset``: the largest index entry <= it, if trusted; else 0."""
    from ..format import index as fidx

    if not entries or offset < base:
        return 0
    o, pos = fidx.lookup_offset(entries, offset, base)
    if pos == 0:
        return 0
    try:
        return pos if fidx.entry_points_at_batch(head(pos), o, base) else 0
    except OSError:
        return 0


def split_segments(reads: list[SegmentRead], target: int) -> list[SegmentRead]:
    """Split segments larger than ``target`` bytes into several reads at batch starts taken from
    their ``.index`` (each checked against the batch header there), about ``target`` bytes apart.
    ``target`` <= 0: no splitting. A segment without a usable index stays whole."""
    if target <= 0:
        return reads
    out: list[SegmentRead] = []
    for r in reads:
        if r.bytes - r.position <= target + target // 2 or r.segment is None:
            out.append(r)
            continue
        entries, head = _index_of(r)
        cuts: list[int] = []
        last = r.position
        for o, pos in entries:
            if pos >= last + target and pos < r.bytes - target // 2:
                try:
                    from ..format.index import entry_points_at_batch

                    ok = entry_points_at_batch(head(pos), o, r.segment)
                except OSError:
                    ok = False
                if ok:
                    cuts.append(pos)
                    last = pos
        if not cuts:
            out.append(r)
            continue
        bounds = [r.position, *cuts, None]
        for a, b in zip(bounds, bounds[1:], strict=False):
            out.append(SegmentRead(r.file, r.topic, r.partition, r.segment, r.start, r.end,
                                   (r.bytes if b is None else b) - a, r.partition_dir, r.log_start_offset,
                                   position=a, stop=b, storage=r.storage))
    return out


def _index_of(r: SegmentRead):
    from ..storage.uri import is_remote

    if is_remote(r.file):
        base = r.file[:-len(".log")] if r.file.endswith(".log") else r.file
        entries = _remote_index(base + ".index", r.segment, r.storage)
        return entries, (lambda at: _remote_head(r.file, at, r.storage))
    from ..storage.segment import Segment

    seg = Segment(os.path.dirname(r.file), r.segment, Path(r.file))
    return seg.offset_index(), _local_head(r.file)


class SegmentGroup(InputPartition):
    """One DataFrame partition: ``value`` is a list of :class:`SegmentRead`."""


def group_segments(segs: list[SegmentRead], *, max_bytes: int = 128 << 20, open_cost: int = 4 << 20,
                   min_partitions: int = 1) -> list[list[SegmentRead]]:
    """Spark's file-source packing: each segment costs its size plus ``open_cost``; consecutive
    segments share a partition up to min(max_bytes, max(open_cost, total / min_partitions)), a
    segment that big has one to itself. A segment is never split; ``max_bytes`` <= 0 gives one
    partition per segment."""
    if max_bytes <= 0:
        return [[s] for s in segs]
    total = sum(s.bytes + open_cost for s in segs)
    limit = min(max_bytes, max(open_cost, total // max(1, min_partitions)))
    groups: list[list[SegmentRead]] = []
    cur: list[SegmentRead] = []
    size = 0
    for s in segs:
        cost = s.bytes + open_cost
        if cost >= limit:  # a big segment: alone
            groups.append([s])
            continue
        if cur and size + cost > limit:
            groups.append(cur)
            cur, size = [], 0
        cur.append(s)
        size += cost
    if cur:
        groups.append(cur)
    return groups

