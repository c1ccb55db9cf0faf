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
    by_timestamp,
    normalize_options,
    option_paths,
    storage_options,
    topic_matcher,
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
    aborted: tuple | None = None  # read_committed: (producer id, first offset, marker offset) of aborted txns


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


def plan_segments(opts, pushed: Pushed | None = None, parallelism: int | None = None) -> list[SegmentRead]:
    """The segments to read, each with its offset range, in (topic, partition, offset) order;
    ``pushed`` (filters pushed down by Spark) narrows partitions and offset ranges through the
    indexes, as the equivalent options would. Local paths and object-store URIs are planned by the
    same code (:class:`_Planned`), from one discovery of their files (:mod:`kltool.storage.discovery`).
    Records-level reads of big segments are split (:func:`split_target`; ``parallelism``: the
    session's default parallelism, for ``minPartitions``' default)."""
    from ..storage.uri import is_remote, local_path

    opts = normalize_options(opts)
    records = (opts.get("level") or "records").lower() == "records"
    all_paths = option_paths(opts)
    remote = [p for p in all_paths if is_remote(p)]
    if remote:
        _check_remote_bounds(opts, remote[0])
        if _committed_only(opts):
            from ..errors import UsageError

            raise UsageError(f"{remote[0]}: kafka.isolation.level=read_committed needs local paths")
    if records and pushed is not None and not pushed.empty():
        opts = _narrowed(opts, pushed)
    bounds = _Bounds(opts)
    # local paths as absolute ones, as Spark qualifies file-source paths: executors run elsewhere
    local = [q for p in all_paths if not is_remote(p) for q in _expand(os.path.abspath(local_path(p)), p)]
    out: list[SegmentRead] = []
    indexes: dict = {}  # (a remote .index fetched once in a planning: the seek and the split both use it)
    found = [_local_partitions(opts, local), _remote_partitions(opts, remote)]
    _check_subscribed(opts, {p.topic for parts, _lone in found for p in parts})
    check_named(bounds, {(p.topic, p.partition) for parts, _lone in found for p in parts})
    for parts, lone in found:
        for p in parts:
            if pushed is None or pushed.wants(p.topic, p.partition):
                out.extend(_plan_partition(p, bounds, records, opts, indexes))
        for r in lone:
            if pushed is None or pushed.wants(r.topic, r.partition):
                out.append(r)
    # Spark's Kafka source resolves every partition's range (and fails on a start after its end) before it
    # reads, and finds an endingOffsets offset past the log end only as it reads: after, as here.
    for parts, _lone in found:
        for p in parts:
            if pushed is None or pushed.wants(p.topic, p.partition):
                _check_spark_offsets(p, bounds, opts)
    if records:
        out = split_segments(out, split_target(opts, out, parallelism), indexes)
    return out


def _check_subscribed(opts, topics: set) -> None:
    """Spark's Kafka source fails a ``subscribe`` naming a topic the cluster does not have (the Admin
    client's UnknownTopicOrPartitionException): so does kafka-log for one that no path read holds."""
    if not opts.get("subscribe"):
        return
    missing = sorted({t.strip() for t in str(opts["subscribe"]).split(",") if t.strip()} - topics)
    if missing:
        from ..errors import UsageError

        raise UsageError(f"kafka-log: option subscribe names {', '.join(missing)}, which no path read holds "
                         "(Spark's Kafka source fails too: UnknownTopicOrPartitionException, This server does not "
                         "host this topic-partition)")


def _expand(path: str, given: str) -> list[str]:
    """A local path with glob characters that does not exist as named: its matches (as Spark's file
    sources expand a glob), in order; none is a one-line error."""
    if os.path.exists(path) or not any(c in path for c in "*?["):
        return [path]
    import glob

    found = sorted(glob.glob(path))
    if not found:
        from ..errors import UsageError

        raise UsageError(f"{given}: the glob matches no file or directory")
    return found


PUSHED_TIME = " pushed timestamp"  # (not an option name: a pushed filter finding no record reads nothing)


def _narrowed(opts: dict, pushed: Pushed) -> dict:
    """``opts`` with the offset and time bounds the pushed filters allow (records level)."""
    opts = dict(opts)
    for key, v, pick in (("startingoffset", pushed.offset_min, max), ("endingoffset", pushed.offset_end, min),
                         (PUSHED_TIME, pushed.time_min, max)):
        if v is not None:
            g = _int(opts, key)
            opts[key] = str(v if g is None else pick(g, v))
    return opts


class _Bounds:
    """The offset and time bounds the options give. kltool's own (``startingOffset``/``endingOffset``, one
    offset for every partition, and a pushed timestamp filter) narrow what Spark's give. Spark's come in
    Spark's order of preference, each side on its own: a timestamp for every partition
    (``startingTimestamp``), else timestamps by partition (``startingOffsetsByTimestamp``), else offsets
    (``startingOffsets``: JSON, ``earliest``, ``latest``)."""

    def __init__(self, opts):
        self.start, self.end = _int(opts, "startingoffset"), _int(opts, "endingoffset")
        self.m_start = _spark_offsets(opts.get("startingoffsets"), "startingOffsets")
        self.m_end = _spark_offsets(opts.get("endingoffsets"), "endingOffsets")
        self.t_start, self.t_end = _int(opts, "startingtimestamp"), _int(opts, "endingtimestamp")
        self.mt_start = by_timestamp(opts.get("startingoffsetsbytimestamp"), "startingOffsetsByTimestamp")
        self.mt_end = by_timestamp(opts.get("endingoffsetsbytimestamp"), "endingOffsetsByTimestamp")
        self.t_pushed = _int(opts, PUSHED_TIME)
        # Spark's startingOffsetsByTimestampStrategy: error (its default) or latest
        self.strict = str(opts.get("startingoffsetsbytimestampstrategy") or "error").lower() == "error"

    def spark(self, key, is_start: bool):
        """Spark's bound of partition ``key`` on one side: ("timestamp", epoch ms, option name),
        ("offset", offset or EARLIEST/LATEST, option name), or None (Spark's default: earliest, latest)."""
        ts, by_ts, offsets = ((self.t_start, self.mt_start, self.m_start) if is_start
                              else (self.t_end, self.mt_end, self.m_end))
        side = "starting" if is_start else "ending"
        if ts is not None:
            return "timestamp", ts, f"{side}Timestamp"
        if by_ts is not None:  # (it names every partition read: check_named)
            return None if key not in by_ts else ("timestamp", by_ts[key], f"{side}OffsetsByTimestamp")
        v = offsets.get(key) if isinstance(offsets, dict) else offsets
        return None if v is None else ("offset", v, f"{side}Offsets")

    def named(self, is_start: bool):
        """(option name, the partitions it names) of the JSON in effect on one side (Spark's order of
        preference), or None when that side's bound is not a JSON of partitions."""
        ts, by_ts, offsets = ((self.t_start, self.mt_start, self.m_start) if is_start
                              else (self.t_end, self.mt_end, self.m_end))
        side = "starting" if is_start else "ending"
        if ts is not None:
            return None
        if by_ts is not None:
            return f"{side}OffsetsByTimestamp", set(by_ts)
        return (f"{side}Offsets", set(offsets)) if isinstance(offsets, dict) else None


def check_named(b: _Bounds, keys) -> None:
    """Spark's Kafka source's rule: a JSON of offsets or timestamps by partition names exactly the partitions
    read (``keys``: (topic, partition)); else one UsageError line naming both sets (Spark: an assertion)."""
    keys = set(keys)
    for is_start in (True, False):
        got = b.named(is_start)
        if got is None or got[1] == keys:
            continue
        from ..errors import UsageError

        name, named = got

        def show(ks):
            return "{" + ", ".join(f"{t}-{n}" for t, n in sorted(ks)) + "}"

        raise UsageError(f"kafka-log: option {name} names {show(named)}, the partitions read are {show(keys)}: "
                         "it must name each of them and no other, as Spark's Kafka source requires (-2 is earliest, "
                         "-1 latest)")


def _check_remote_bounds(opts, uri) -> None:
    from ..errors import UsageError

    m_start = _spark_offsets(opts.get("startingoffsets"), "startingOffsets")
    latest = m_start == LATEST or isinstance(m_start, dict) and LATEST in m_start.values()
    times = ("startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp")
    if any(opts.get(k) not in (None, "") for k in times) or latest:
        raise UsageError(f"{uri}: timestamps (startingTimestamp, startingOffsetsByTimestamp, ...) and "
                         "startingOffsets latest are not supported for object-store paths; filter on the "
                         "timestamp column instead")


@dataclass
class _Planned:
    """A partition to plan, local or on an object store: its segments (``base_offset``, ``size`` and
    ``file``), its log start offset, and what only a local partition can answer (the log end offset and
    the offset of a timestamp; None on object stores, where timestamps are not looked up: Spark checks a
    pushed timestamp filter on the rows)."""

    topic: str
    partition: int
    directory: str
    segments: list  # (base_offset, file, size, index file or None)
    log_start: int | None
    log_end: object = None  # () -> int
    for_time: object = None  # (timestamp) -> (offset, timestamp) | None
    storage: dict | None = None
    aborted: tuple | None = None  # read_committed (see committed())
    stable_end: int | None = None  # read_committed: the last stable offset, where reading stops
    local: object = None  # the local partition (kltool.storage.partition.Partition); None on object stores


def _local_partitions(opts, paths):
    from ..errors import CorruptDataError
    from ..format.names import classify
    from ..format.topics import parse_partition_dir_name

    partitions, files = _selection(opts, paths) if paths else ([], [])
    wanted = topic_matcher(opts)
    if wanted is not None:
        partitions, files = [p for p in partitions if wanted(p.topic)], []
    partitions = _replicas(partitions, str(opts.get("replicas") or "all").lower())
    planned = [_Planned(p.topic, p.partition, str(p.path),
                        [(s.base_offset, str(s.log_path), _Size(s), None) for s in p.segments],
                        p.log_start_offset() if p.segments else None, p.log_end_offset,
                        lambda ts, p=p: offset_for_time(p, ts), local=p) for p in partitions]
    if _committed_only(opts) and (opts.get("level") or "records").lower() == "records":
        for pl, p in zip(planned, partitions, strict=True):
            pl.aborted, pl.stable_end = committed(p)
    lone = []
    g_start, g_end = _int(opts, "startingoffset"), _int(opts, "endingoffset")
    for f in files:
        kind, base = classify(f)
        if kind not in ("log", "kraft_snapshot"):
            continue
        topic = part = None
        try:
            topic, part, _k, _u = parse_partition_dir_name(f.parent.name)
        except CorruptDataError:  # a lone file outside a partition directory
            pass
        lone.append(SegmentRead(str(f), topic, part, base, g_start, g_end, f.stat().st_size, str(f.parent)))
    return planned, lone


def _replicas(partitions: list, mode: str) -> list:
    """The copies of one partition found in several log dirs (replicas on several brokers, backups of a
    whole cluster): ``mode`` ``all`` keeps every copy (with a warning naming them: each gives rows, see the
    provenance columns), ``one`` the copy a consumer would read, the one with the highest leader epoch,
    then the highest log end offset."""
    by_key: dict = {}
    for p in partitions:
        by_key.setdefault((p.topic, p.partition), []).append(p)
    dups = {k: ps for k, ps in by_key.items() if len(ps) > 1}
    if not dups:
        return partitions
    if mode == "all":
        import logging

        for (t, n), ps in sorted(dups.items()):
            logging.getLogger("kltool.spark").warning(
                "%s-%d is in %d log dirs (%s): rows come from every copy; option replicas=one keeps the leader's",
                t, n, len(ps), ", ".join(str(p.path.parent) for p in ps))
        return partitions
    keep = {id(max(ps, key=_replica_rank)) for ps in dups.values()}
    return [p for p in partitions if (p.topic, p.partition) not in dups or id(p) in keep]


def _replica_rank(p) -> tuple[int, int]:
    """(leader epoch, log end offset) of a copy: the epoch from its leader-epoch-checkpoint and its last batch."""
    from ..storage.epochs import checkpoint_epochs

    epochs = set(checkpoint_epochs(p.path))
    segs = p.segments
    last = segs[-1].last_batch() if segs else None
    if last is not None and getattr(last, "partition_leader_epoch", None) is not None:
        epochs.add(last.partition_leader_epoch)
    return max(epochs, default=-1), p.log_end_offset()


class _Size:
    """A local segment's size, taken (one stat) only for the segments planned."""

    __slots__ = ("seg",)

    def __init__(self, seg):
        self.seg = seg

    def __int__(self):
        return self.seg.size


def _remote_partitions(opts, uris):
    """The partitions and lone segments of object-store URIs, planned from their names, the checkpoint
    and the .index of the first segment read in each partition (no segment bytes but one batch header
    are read)."""
    if not uris:
        return [], []
    from ..format.names import REMOTE_SEGMENT_FILE
    from ..storage.select import parse_partitions
    from ..storage.uri import select_remote

    storage = storage_options(opts) or None
    parts = parse_partitions(opts.get("partition")) if opts.get("partition") else None
    sel = select_remote(uris, opts.get("topic") or None, parts, storage,
                        all_states=_bool(opts.get("allstates"), False), strict=False)
    if str(opts.get("replicas") or "all").lower() == "one":
        from ..errors import UsageError

        raise UsageError(f"{uris[0]}: replicas=one needs local paths (the copies' leader epochs and log ends)")
    wanted = _assigned(opts)
    subscribed = topic_matcher(opts)
    planned = [_Planned(p.topic, p.partition, p.directory, [(s.base_offset, s.log, s.size, s.index) for s in p.segments],
                        p.log_start_offset() if p.segments else None, storage=storage)
               for p in sel.partitions if (wanted is None or (p.topic, p.partition) in wanted)
               and (subscribed is None or subscribed(p.topic))]
    lone = []
    if wanted is None and subscribed is None:
        g_start, g_end = _int(opts, "startingoffset"), _int(opts, "endingoffset")
        for uri, size in sel.files:
            m = REMOTE_SEGMENT_FILE.match(uri.rsplit("/", 1)[-1])
            lone.append(SegmentRead(uri, None, None, int(m.group(1)) if m else None, g_start, g_end, size,
                                    uri.rsplit("/", 1)[0], storage=storage))
    return planned, lone


def _offset_range(p: _Planned, b: _Bounds, records: bool, opts) -> tuple[int | None, int | None]:
    """[start, end) of partition ``p`` under the bounds ``b`` (None: open)."""
    start, end = _spark_range(p, b, opts)
    start, end = _narrow(start, end, b.start, True)
    start, end = _narrow(start, end, b.end, False)
    if b.t_pushed is not None and p.for_time is not None:
        hit = p.for_time(b.t_pushed)
        if hit is None:
            return 0, 0  # a pushed timestamp filter no record meets: nothing to read here, never an error
        start = _narrow(start, end, hit[0], True)[0]
    segs = p.segments
    if records and _bool(opts.get("respectlogstartoffset"), True) and segs and p.log_start > segs[0][0]:
        start = p.log_start if start is None else max(start, p.log_start)  # below it, records are deleted
    return start, end


def _spark_range(p: _Planned, b: _Bounds, opts) -> tuple[int | None, int | None]:
    """[start, end) of partition ``p`` under Spark's options, resolved as Spark's Kafka source resolves them
    (None: open), with its errors, one line each: a timestamp is the first offset whose record timestamp is
    >= it; a start timestamp no record reaches fails the query (``startingOffsetsByTimestampStrategy``
    error, the default) or starts at the log end (latest); an end timestamp no record reaches ends at the
    log end; a resolved start after the resolved end fails the query. Object stores (no log end, no time
    lookup) take the offsets as given."""
    key = (p.topic, p.partition)
    specs = b.spark(key, True), b.spark(key, False)
    if (all(sp is not None and sp[2].endswith("OffsetsByTimestamp") and sp[1] >= 0 for sp in specs)
            and specs[0][1] > specs[1][1]):
        from ..errors import UsageError  # Spark compares these before looking them up (special ones aside)

        raise UsageError(f"{p.topic}-{p.partition}: the start timestamp {specs[0][1]} (startingOffsetsByTimestamp) is "
                         f"greater than the end timestamp {specs[1][1]} (endingOffsetsByTimestamp)")
    start = end = None
    named = {}
    for is_start, spec in zip((True, False), specs, strict=True):
        if spec is None:
            continue
        kind, v, name = spec
        if kind == "timestamp":
            if p.local is None:
                continue
            hit = list_offsets(p.local, v, _latest(p), f"{p.topic}-{p.partition}: {name}")
            if hit is None and is_start and b.strict:
                from ..errors import UsageError

                raise UsageError(no_offset_for_time(f"{p.topic}-{p.partition}", name, v, p.stable_end is not None))
            v = _latest(p) if hit is None else hit
        elif v == EARLIEST:
            v = None if is_start else p.log_start
        elif v == LATEST:
            v = None if not is_start else _latest(p)
        if is_start:
            start = v
        else:
            end = v
        named[is_start] = name
    if start is not None and p.log_end is not None:
        resolved_end = _latest(p) if end is None else end
        if start > resolved_end:
            from ..errors import UsageError

            raise UsageError(f"{p.topic}-{p.partition}: the resolved start offset {start} ({named[True]}) is "
                             f"greater than the resolved end offset {resolved_end}"
                             f"{'' if named.get(False) is None else f' ({named[False]})'}")
        if start == resolved_end:
            end = start  # nothing to read here (a start at the log end)
    return start, end


SPECIAL_TIMES = {-1: "latest", -2: "earliest", -3: "max timestamp", -4: "earliest local", -5: "latest tiered"}


def list_offsets(part, ts: int, fetchable: int, what: str) -> int | None:
    """The offset Kafka's ListOffsets answers for timestamp ``ts`` on local partition ``part`` (a
    :class:`kltool.storage.partition.Partition`), as a consumer asks it (Spark's Kafka source passes every
    timestamp option there as it is): -1 is ``fetchable`` (the log end; read_committed: the last stable
    offset), -2 and -4 (earliest local: no tiered storage here) the log start offset, -3 the first record with
    the largest timestamp, -5 (latest tiered) no offset; a timestamp >= 0, the first record whose timestamp is
    >= it. A record found at or past ``fetchable`` is no offset (the broker's answer: read_committed, nothing
    in a transaction still open). None: no offset. Another negative value is a one-line error, as the
    broker refuses it (``what`` names the option)."""
    if ts == LATEST:
        return fetchable
    if ts in (EARLIEST, -4):
        return part.log_start_offset()
    if ts == -5:
        return None
    if ts == -3:
        from ..storage.offsets import max_timestamp

        hit = max_timestamp(part)
        hit = None if hit is None else (hit.offset, hit.timestamp)
    elif ts < 0:
        from ..errors import UsageError

        raise UsageError(f"{what} {ts} is not a timestamp Kafka's ListOffsets takes (a negative one must be "
                         f"{', '.join(f'{k} ({v})' for k, v in SPECIAL_TIMES.items())}; the broker answers "
                         "UNSUPPORTED_VERSION and Spark's Kafka source fails)")
    else:
        hit = offset_for_time(part, ts)
    if hit is None or (fetchable is not None and hit[0] >= fetchable):
        return None
    return hit[0]


def no_offset_for_time(where: str, name: str, ts: int, committed_only: bool = False) -> str:
    """The one line of a start timestamp ListOffsets answers with no offset (Spark: strategy ``error``)."""
    if ts >= 0:
        why = ("no record below the last stable offset has a timestamp at or after it (read_committed)"
               if committed_only else "no record has a timestamp at or after it")
    else:
        why = f"the broker answers no offset for {SPECIAL_TIMES.get(ts, 'it')}"
    return (f"{where}: no offset matches {name} {ts} ({why}; Spark's Kafka source fails too; "
            "startingOffsetsByTimestampStrategy=latest reads nothing there)")


def _latest(p: _Planned) -> int | None:
    """Spark's ``latest`` of partition ``p``: the log end offset (read_committed: the last stable offset);
    None on object stores (the end of what is listed)."""
    if p.stable_end is not None:
        return p.stable_end
    return None if p.log_end is None else p.log_end()


def _check_spark_offsets(p: _Planned, b: _Bounds, opts) -> None:
    """Spark's Kafka source's error for an ``endingOffsets`` offset past the log end, unless
    failOnDataLoss=false (then: to the log end)."""
    from ..errors import UsageError

    spec = b.spark((p.topic, p.partition), False)
    if spec is None or spec[0] != "offset" or p.log_end is None:  # object stores: the end is not looked up
        return
    v_end, log_end = spec[1], p.log_end()
    if v_end > log_end and _bool(opts.get("failondataloss"), True):
        raise UsageError(f"{p.topic}-{p.partition}: endingOffsets {v_end} is past the log end offset {log_end} "
                         "(Spark's Kafka source: data lost; failOnDataLoss=false reads to the log end)")


def _narrow(start, end, v, is_start):
    if v is None:
        return start, end
    if is_start:
        return (v if start is None else max(start, v)), end
    return start, (v if end is None else min(end, v))


def _committed_only(opts) -> bool:
    return str(opts.get("kafka.isolation.level") or "").lower() == "read_committed"


def committed(p) -> tuple[tuple, int]:
    """What a read_committed consumer of local partition ``p`` skips: the aborted transactions as
    (producer id, first offset, ABORT marker offset), and the last stable offset (the first offset of
    the earliest transaction still open at the log's end, else the log end offset), past which it reads
    nothing. Found the broker's way: every batch header fed, in log order, to the one producer state
    (control batches' markers decoded)."""
    from ..storage.producer_state import ProducerStateManager, control_of

    psm = ProducerStateManager()
    for seg in p.segments:
        for h in seg.batches():
            if h.crc_valid:
                psm.update(h, control_of(seg.log_path, h) if h.is_control else None)
    aborted = tuple((a.producer_id, a.first_offset, a.last_offset) for a in psm.aborted)
    opened = psm.open_txns.values()
    return aborted, (min(opened) if opened else p.log_end_offset())


def _plan_partition(p: _Planned, b: _Bounds, records: bool, opts, indexes: dict | None = None) -> list[SegmentRead]:
    start, end = _offset_range(p, b, records, opts)
    if p.stable_end is not None:
        end = p.stable_end if end is None else min(end, p.stable_end)
    if start is not None and end is not None and start >= end:
        return []
    out: list[SegmentRead] = []
    segs = p.segments
    for i, (base, file, size, index) in enumerate(segs):
        nxt = segs[i + 1][0] if i + 1 < len(segs) else None
        if start is not None and nxt is not None and nxt <= start:
            continue  # the whole segment is below start
        if end is not None and base >= end:
            break  # this and later segments are at or past end
        pos = 0  # a local segment is sought on the executor (read_records)
        if not out and records and start is not None and index:
            pos = _seek(_remote_index(index, base, p.storage, indexes), base, start,
                        lambda at, u=file: _remote_head(u, at, p.storage))
        out.append(SegmentRead(file, p.topic, p.partition, base, start, end, int(size), p.directory, p.log_start,
                               position=pos, storage=p.storage, aborted=p.aborted or None))
    return out


# The most bytes a task reads by default (``maxPartitionBytes``): 4x Spark's 128 MiB for files, because a
# Python data source's task costs far more to start than a JVM file scan's (measured on local[2] at load 2-3:
# 30-40 ms a task, against a 128 MiB piece's ~0.5 s of reading), while what a task holds stays bounded however much it
# reads (batches are streamed). A 518 MiB segment on 2 cores: 2 tasks (6 with 128 MiB, 10% slower full row).
DEFAULT_PARTITION_BYTES = 512 << 20


def _packing(opts, parallelism: int | None) -> tuple[int, int, int]:
    """(maxPartitionBytes, openCostInBytes, minPartitions) with their defaults, as Spark's
    ``spark.sql.files.*`` but for maxPartitionBytes (:data:`DEFAULT_PARTITION_BYTES`; minPartitions: the
    session's default parallelism)."""
    max_bytes = _int(opts, "maxpartitionbytes")
    return (DEFAULT_PARTITION_BYTES if max_bytes is None else max_bytes, _int(opts, "opencostinbytes") or 4 << 20,
            _int(opts, "minpartitions") or parallelism or os.cpu_count() or 1)


def split_target(opts, reads: list[SegmentRead], parallelism: int | None = None) -> int:
    """How many bytes apart segments are split: ``splitBytes`` when given (0: never); else Spark's rule for
    splittable files, made even: the bytes to read (each read costing openCostInBytes more) in a multiple
    of ``minPartitions`` pieces of at most maxPartitionBytes, so that every core has the same work to the
    end (a 138 MB segment on 2 cores: 2 tasks of 69 MB, where 128 MiB pieces gave one task)."""
    v = _int(opts, "splitbytes")
    if v is not None:
        return v
    max_bytes, open_cost, cores = _packing(opts, parallelism)
    if max_bytes <= 0:
        max_bytes = DEFAULT_PARTITION_BYTES
    total = sum(max(0, r.bytes - r.position) + open_cost for r in reads)
    n = cores * max(1, -(-total // (cores * max_bytes)))
    return max(open_cost, total // n)


def group_reads(opts, reads: list[SegmentRead], parallelism: int | None = None) -> list[list[SegmentRead]]:
    """The DataFrame partitions of ``reads``: :func:`group_segments` with the packing options."""
    max_bytes, open_cost, cores = _packing(opts, parallelism)
    return group_segments(reads, max_bytes=max_bytes, open_cost=open_cost, min_partitions=cores)


def _remote_index(uri, base, storage, cache: dict | None = None) -> list[tuple[int, int]]:
    """The entries of the remote ``.index`` at ``uri`` ([] when it cannot be read); with ``cache`` (a dict one
    planning shares), an index already fetched is not fetched again."""
    from ..format import index as fidx
    from ..storage.uri import read_remote_index

    key = (uri, base)
    if cache is not None and key in cache:
        return cache[key]
    try:  # (ranged reads: what is held stays bounded whatever the index holds)
        entries = fidx.offset_index_entries(read_remote_index(uri, storage), base)
    except Exception:  # noqa: BLE001 (an unreadable or damaged index: read from the start, as without one)
        entries = []
    if cache is not None:
        cache[key] = entries
    return entries


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


def split_segments(reads: list[SegmentRead], target: int, indexes: dict | None = None) -> list[SegmentRead]:
    """Split segments into even reads about ``target`` bytes long (as many as the segment's size over
    ``target``, rounded: one up to 1.5 times ``target``) at batch starts taken from their ``.index``
    (each checked against the batch header there). ``target`` <= 0: no splitting. A segment without a
    usable index stays whole. ``indexes``: the remote indexes the planning fetched already (see
    :func:`_remote_index`)."""
    if target <= 0:
        return reads
    from ..format.index import entry_points_at_batch

    out: list[SegmentRead] = []
    for r in reads:
        size = r.bytes - r.position
        k = int(size / target + 0.5)
        if k < 2 or r.segment is None:
            out.append(r)
            continue
        step = size / k
        entries, head = _index_of(r, indexes)
        cuts: list[int] = []
        nxt = r.position + step
        for o, pos in entries:
            if pos < nxt:
                continue
            if pos >= r.bytes - step / 2:
                break
            try:
                ok = entry_points_at_batch(head(pos), o, r.segment)
            except OSError:
                ok = False
            if ok:
                cuts.append(pos)
                nxt = pos + step
        if not cuts:
            out.append(r)
            continue
        bounds = [r.position, *cuts, None]
        for a, b in zip(bounds, bounds[1:], strict=False):
            out.append(SegmentRead(r.file, r.topic, r.partition, r.segment, r.start, r.end,
                                   (r.bytes if b is None else b) - a, r.partition_dir, r.log_start_offset,
                                   position=a, stop=b, storage=r.storage, aborted=r.aborted))
    return out


def _index_of(r: SegmentRead, indexes: dict | None = None):
    from ..storage.uri import is_remote

    if is_remote(r.file):
        base = r.file[:-len(".log")] if r.file.endswith(".log") else r.file
        entries = _remote_index(base + ".index", r.segment, r.storage, indexes)
        return entries, (lambda at: _remote_head(r.file, at, r.storage))
    from ..storage.segment import Segment

    seg = Segment(os.path.dirname(r.file), r.segment, Path(r.file))
    return seg.offset_index(), _local_head(r.file)


class SegmentGroup(InputPartition):
    """One DataFrame partition: ``value`` is a list of :class:`SegmentRead`."""


def group_segments(segs: list[SegmentRead], *, max_bytes: int = DEFAULT_PARTITION_BYTES, open_cost: int = 4 << 20,
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

