"""``spark.read.format("kafka-log")``: Kafka log segments as a Spark DataFrame (PySpark Python Data
Source API, Spark 4+), with the schema of Spark's own Kafka source, so a ``format("kafka")`` job runs
against files (a log dir, a backup) by changing one line::

    from kltool.spark import register
    register(spark)
    df = spark.read.format("kafka-log").option("path", "/var/lib/kafka/data").load()

Each DataFrame partition reads segments (``.log`` files) with the batch walker
(:func:`kltool.storage.walk`): a segment larger than ``splitBytes`` is split at batch starts taken from
its ``.index``, small ones are packed together the way Spark's file sources pack files
(``maxPartitionBytes``, ``openCostInBytes``, ``minPartitions``). Paths are local or URIs on object
stores (:mod:`kltool.storage.uri`: ``s3://``, ``s3a://``, ``gs://``, ``abfs://``, ``hdfs://``): planning
lists them by name, executors copy the byte range they read into a local temporary file. Damaged regions
are skipped and valid batches after them are still read (``level=damage`` lists them). Rows are
produced as ``pyarrow.RecordBatch`` chunks.

Options (all strings, as Spark passes them):

``path`` / ``paths``
    A log dir, a partition directory, a tree holding log dirs, or ``.log`` files, as a plain path,
    ``file://`` or an object-store URI (tiered-storage copies ``<offset>-<id>.log`` count as segments).
    Several: ``paths`` as a JSON list (what ``load([p1, p2])`` passes).
``storage.KEY``
    Storage options for object-store URIs: ``storage.endpoint_override``, ``storage.access_key``,
    ``storage.secret_key``, ``storage.region``, ... (else the usual environment and config files).
``topic``, ``partition``
    A topic glob (``orders*``) and partition numbers (``0,2,5-7``).
``assign``
    Spark's JSON list of partitions to read: ``{"orders":[0,1],"audit":[2]}``.
``level``
    ``records`` (default; Spark's Kafka-source schema), ``batches`` (one row per batch, headers only),
    ``damage`` (one row per unreadable region or CRC-invalid batch), ``segments`` (one row per segment).
``startingOffset`` / ``endingOffset``
    One offset for every partition: inclusive start, exclusive end (like Spark's Kafka source).
``startingOffsets`` / ``endingOffsets``
    Spark's JSON (``{"t":{"0":23,"1":-2}}``, -2 earliest, -1 latest) or ``earliest``/``latest``.
``startingTimestamp`` / ``endingTimestamp``
    Epoch ms: per partition, start at (end before) the first offset whose timestamp is >= it, found
    through the time and offset indexes like the broker's ListOffsets.
``respectLogStartOffset``
    ``false`` to also return records below a partition's log start offset (its
    ``log-start-offset-checkpoint`` entry): Kafka treats them as deleted. Records level only.
``includeControl``
    ``true`` to also return control records (transaction markers); a Kafka consumer never sees them.
``includeHeaders``
    ``false`` to leave ``headers`` null without decoding them (faster).
``allStates``
    ``true`` to also read ``-delete``/``-future``/``-stray`` partition directories.
``maxRecordsPerBatch``
    Rows per Arrow batch (default 65536; a batch also ends after 32 MiB of record bytes).
``splitBytes``
    Records level: split segments into pieces of about this many bytes at batch starts found through
    the ``.index`` (default 128 MiB; 0: never split). The rows are the same either way.
``maxPartitionBytes`` / ``openCostInBytes`` / ``minPartitions``
    Packing of segments (pieces) into DataFrame partitions: default 128 MiB / 4 MiB / the session's
    ``defaultParallelism``, as Spark's ``spark.sql.files.*``; ``maxPartitionBytes=0`` gives exactly one
    partition per segment (piece).

Filters on ``topic``, ``partition``, ``offset`` and ``timestamp`` are pushed down when the session
has ``spark.sql.python.filterPushdown.enabled`` (``register(spark, pushdown=True)``). A narrower
schema given with ``.schema("offset LONG, timestamp TIMESTAMP")`` is read without decoding keys,
values or headers.
"""

from __future__ import annotations

import json
import os
from array import array
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

NAME = "kafka-log"

# Spark's Kafka source (KafkaRecordToRowConverter.kafkaSchema with includeHeaders=true).
RECORD_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                 "timestampType int, headers array<struct<key: string, value: binary>>")
BATCH_SCHEMA = ("topic string, partition int, segment long, position long, size int, base_offset long, "
                "last_offset long, count int, magic int, compression string, crc_valid boolean, "
                "first_timestamp long, max_timestamp long, producer_id long, is_transactional boolean, "
                "is_control boolean, timestamp_type string, file string")
DAMAGE_SCHEMA = ("topic string, partition int, segment long, position long, length long, kind string, "
                 "message string, resumed_at long, file string")
SEGMENT_SCHEMA = ("topic string, partition int, segment long, bytes long, file string, partition_dir string, "
                  "log_start_offset long")
SCHEMAS = {"records": RECORD_SCHEMA, "batches": BATCH_SCHEMA, "damage": DAMAGE_SCHEMA, "segments": SEGMENT_SCHEMA}

TIMESTAMP_TYPE_IDS = {"create": 0, "log_append": 1, "none": -1}  # Kafka's TimestampType.id
_TS = pa.timestamp("us", tz="UTC")  # what Spark's to_arrow_schema(timezone="UTC") gives
_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
_HEADERS = pa.list_(_HEADER)
ARROW_RECORD_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", _TS), ("timestampType", pa.int32()), ("headers", _HEADERS),
])
ARROW_BATCH_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("segment", pa.int64()), ("position", pa.int64()),
    ("size", pa.int32()), ("base_offset", pa.int64()), ("last_offset", pa.int64()), ("count", pa.int32()),
    ("magic", pa.int32()), ("compression", pa.string()), ("crc_valid", pa.bool_()),
    ("first_timestamp", pa.int64()), ("max_timestamp", pa.int64()), ("producer_id", pa.int64()),
    ("is_transactional", pa.bool_()), ("is_control", pa.bool_()), ("timestamp_type", pa.string()),
    ("file", pa.string()),
])
ARROW_DAMAGE_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("segment", pa.int64()), ("position", pa.int64()),
    ("length", pa.int64()), ("kind", pa.string()), ("message", pa.string()), ("resumed_at", pa.int64()),
    ("file", pa.string()),
])
ARROW_SEGMENT_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("segment", pa.int64()), ("bytes", pa.int64()),
    ("file", pa.string()), ("partition_dir", pa.string()), ("log_start_offset", pa.int64()),
])

EARLIEST, LATEST = -2, -1
DEFAULT_ROWS_PER_BATCH = 65536  # records level (maxRecordsPerBatch): fewer, larger batches cost Spark less


def _bool(v, default: bool) -> bool:
    if v is None:
        return default
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def _int(opts, name):
    v = opts.get(name)
    if v is None or str(v).strip() == "":
        return None
    try:
        return int(str(v).strip())
    except ValueError:
        from ..errors import UsageError

        raise UsageError(f"option {name} must be an integer, not {v!r}") from None


def normalize_options(options) -> dict:
    """Spark passes options case-insensitively: keys are looked up in lower case here."""
    return {str(k).lower(): v for k, v in dict(options).items()}


def option_paths(opts) -> list[str]:
    if opts.get("paths"):
        v = opts["paths"]
        try:
            ps = json.loads(v)
        except ValueError:
            ps = [v]
        if isinstance(ps, str):
            ps = [ps]
        return [str(p) for p in ps]
    if opts.get("path"):
        return [str(opts["path"])]  # one path (a local dir may be named a:b); several: ``paths``
    from ..errors import UsageError

    raise UsageError('kafka-log needs a path: .option("path", LOGDIR) or .load(LOGDIR)')


def _spark_offsets(spec: str | None, name: str) -> dict | int | None:
    """Spark's startingOffsets/endingOffsets: 'earliest', 'latest' or {"topic": {"0": off}}."""
    if spec is None:
        return None
    s = str(spec).strip()
    if s == "earliest":
        return EARLIEST
    if s == "latest":
        return LATEST
    try:
        d = json.loads(s)
        return {(t, int(p)): int(o) for t, parts in d.items() for p, o in parts.items()}
    except (ValueError, AttributeError, TypeError):
        from ..errors import UsageError

        raise UsageError(f"option {name}: expected earliest, latest or JSON like "
                         f'{{"topic":{{"0":23}}}}, not {spec!r}') from None


# -- planning (driver side) --------------------------------------------------------------------

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


def storage_options(opts) -> dict:
    """``storage.K`` options (endpoint, credentials for object-store paths) as {K: value}."""
    return {k[len("storage."):]: v for k, v in opts.items() if k.startswith("storage.") and v is not None}


def _assigned(opts) -> set | None:
    if not opts.get("assign"):
        return None
    try:
        return {(t, int(x)) for t, ps in json.loads(opts["assign"]).items() for x in ps}
    except (ValueError, AttributeError, TypeError):
        from ..errors import UsageError

        raise UsageError(f'option assign: expected JSON like {{"topic":[0,1]}}, not {opts["assign"]!r}') from None


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
    if opts.get("assign"):
        try:
            wanted = {(t, int(x)) for t, ps in json.loads(opts["assign"]).items() for x in ps}
        except (ValueError, AttributeError, TypeError):
            from ..errors import UsageError

            raise UsageError(f'option assign: expected JSON like {{"topic":[0,1]}}, not {opts["assign"]!r}') from None
        partitions = [p for p in partitions if (p.topic, p.partition) in wanted]
        return partitions, []
    return partitions, sel.files


@dataclass
class Pushed:
    """What the pushed-down filters allow (an AND of them): used to read less, never to answer.
    Spark evaluates every filter again on the rows (they are all handed back as "partially pushed"),
    so pruning here only has to keep every row that could match."""

    topics: set | None = None
    partitions: set | None = None
    partition_min: int | None = None
    partition_max: int | None = None
    offset_min: int | None = None  # inclusive
    offset_end: int | None = None  # exclusive
    time_min: int | None = None  # epoch ms, inclusive

    def empty(self) -> bool:
        return all(v is None for v in vars(self).values())

    def wants(self, topic, partition) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        if partition is None:
            return self.partitions is None and self.partition_min is None and self.partition_max is None
        if self.partitions is not None and partition not in self.partitions:
            return False
        if self.partition_min is not None and partition < self.partition_min:
            return False
        return self.partition_max is None or partition <= self.partition_max


def _ms_ceil(v) -> int | None:
    """A pushed timestamp value (datetime; naive ones are local time, as pyspark makes them) as the
    smallest epoch ms >= it."""
    import datetime as dt

    if not isinstance(v, dt.datetime):
        return None
    if v.tzinfo is None:
        v = v.astimezone()  # pyspark's naive datetimes are local time
    delta = v - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    us = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return -(-us // 1000)


def _push(pushed: Pushed, f) -> None:  # noqa: C901
    """Narrow ``pushed`` by one filter on topic, partition, offset or timestamp (others: ignored)."""
    from pyspark.sql import datasource as sds

    attr = getattr(f, "attribute", None)
    if not attr or len(attr) != 1:
        return
    col = attr[0].lower()
    kind = type(f).__name__
    if kind not in ("EqualTo", "EqualNullSafe", "GreaterThan", "GreaterThanOrEqual", "LessThan",
                    "LessThanOrEqual", "In"):
        return
    values = list(f.value) if isinstance(f, sds.In) else [f.value]
    if any(v is None for v in values) or not values:
        return
    if col == "topic":
        if kind in ("EqualTo", "EqualNullSafe", "In") and all(isinstance(v, str) for v in values):
            pushed.topics = set(values) if pushed.topics is None else pushed.topics & set(values)
        return
    if col == "timestamp":
        ms = [_ms_ceil(v) for v in values]
        if any(m is None for m in ms):
            return
        if kind == "GreaterThan":  # ts > v: ms*1000 > v_us
            lo = _ms_ceil(values[0] + __import__("datetime").timedelta(microseconds=1))
        elif kind in ("GreaterThanOrEqual", "EqualTo", "EqualNullSafe", "In"):
            lo = min(ms)
        else:
            return  # an upper time bound: timestamps are not ordered by offset, nothing to cut
        pushed.time_min = lo if pushed.time_min is None else max(pushed.time_min, lo)
        return
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return
    lo = hi = None  # [lo, hi] inclusive
    if kind in ("EqualTo", "EqualNullSafe", "In"):
        lo, hi = min(values), max(values)
    elif kind == "GreaterThan":
        lo = values[0] + 1
    elif kind == "GreaterThanOrEqual":
        lo = values[0]
    elif kind == "LessThan":
        hi = values[0] - 1
    else:
        hi = values[0]
    if col == "partition":
        if kind in ("EqualTo", "EqualNullSafe", "In"):
            pushed.partitions = set(values) if pushed.partitions is None else pushed.partitions & set(values)
        if lo is not None:
            pushed.partition_min = lo if pushed.partition_min is None else max(pushed.partition_min, lo)
        if hi is not None:
            pushed.partition_max = hi if pushed.partition_max is None else min(pushed.partition_max, hi)
    elif col == "offset":
        if lo is not None:
            pushed.offset_min = lo if pushed.offset_min is None else max(pushed.offset_min, lo)
        if hi is not None:
            pushed.offset_end = hi + 1 if pushed.offset_end is None else min(pushed.offset_end, hi + 1)


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

    seg = Segment(os.path.dirname(r.file), r.segment, _path(r.file))
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


# -- reading (executor side) -------------------------------------------------------------------

# Column buffers of a chunk, in the order of _speedups.arrow_v2's outputs: int64 offsets and
# timestamps (ms), int32 timestampType, key/value end offsets (int32, from a leading 0), bytes and
# validity (a byte per row), headers' list end offsets and validity, header keys' ends and bytes,
# header values' ends, bytes and validity.
(_OFF, _TSS, _TYPES, _KE, _KD, _KV, _VE, _VD, _VV, _HE, _HV, _HKE, _HKD, _HVE, _HVD, _HVV) = range(16)
_ZERO32 = bytes(4)


class _RecordChunk:
    """Rows as Arrow column buffers (bytearrays), turned into one pyarrow.RecordBatch: the C reader
    (``_speedups.arrow_v2``) and the Python loop (:meth:`add`) append to the same buffers, and only
    to those of the columns asked for (``want``)."""

    __slots__ = ("bufs", "rows", "nbytes")

    def __init__(self, want):
        def new(*inits):
            return [bytearray(i) for i in inits]

        b = [None] * 16
        if "offset" in want:
            b[_OFF] = bytearray()
        if "timestamp" in want:
            b[_TSS] = bytearray()
        if "timestampType" in want:
            b[_TYPES] = bytearray()
        if "key" in want:
            b[_KE:_KV + 1] = new(_ZERO32, b"", b"")
        if "value" in want:
            b[_VE:_VV + 1] = new(_ZERO32, b"", b"")
        if "headers" in want:
            b[_HE:_HVV + 1] = new(_ZERO32, b"", _ZERO32, b"", _ZERO32, b"", b"")
        self.bufs = tuple(b)
        self.rows = 0
        self.nbytes = 0

    def __len__(self):
        return self.rows

    def add(self, cols, idx, tt: int) -> None:
        """The records ``idx`` (a range or list of positions) of a decoded batch (RecordColumns)."""
        b = self.bufs
        n = len(idx)
        whole = isinstance(idx, range) and n == len(cols)
        buf = cols.buffer

        def pick(xs):
            return xs if whole else [xs[i] for i in idx]

        if b[_OFF] is not None:
            b[_OFF].extend(array("q", pick(cols.offsets)))
        if b[_TSS] is not None:
            b[_TSS].extend(array("q", pick(cols.timestamps)))
        if b[_TYPES] is not None:
            b[_TYPES].extend(array("i", [tt]) * n)
        if b[_KE] is not None:
            _spans(buf, pick(cols.key_starts), pick(cols.key_ends), b[_KE], b[_KD], b[_KV])
        if b[_VE] is not None:
            _spans(buf, pick(cols.value_starts), pick(cols.value_ends), b[_VE], b[_VD], b[_VV])
        if b[_HE] is not None:
            hdrs = pick(cols.headers)
            valid = bytearray(n)
            ends = array("i")
            total = len(b[_HKE]) // 4 - 1
            ks, ke, vs, ve = [], [], [], []
            for j, spans in enumerate(hdrs):
                if spans:
                    valid[j] = 1
                    total += len(spans)
                    for a, z, c, d in spans:
                        ks.append(a)
                        ke.append(z)
                        vs.append(c)
                        ve.append(d)
                ends.append(total)
            b[_HE].extend(ends)
            b[_HV].extend(valid)
            if ks:
                _spans(buf, ks, ke, b[_HKE], b[_HKD], None)
                _spans(buf, vs, ve, b[_HVE], b[_HVD], b[_HVV])
        self.rows += n
        self.nbytes += len(buf)

    def to_arrow(self, topic: str | None, partition: int | None, columns: list[str] | None = None) -> pa.RecordBatch:
        """The chunk as a RecordBatch of ``columns`` (default: all of Spark's Kafka-source schema)."""
        n = self.rows
        b = self.bufs

        def ints(i, t):
            return pa.Array.from_buffers(t, n, [None, pa.py_buffer(b[i])])

        make = {
            "key": lambda: _binary(pa.binary(), n, b[_KE], b[_KD], b[_KV]),
            "value": lambda: _binary(pa.binary(), n, b[_VE], b[_VD], b[_VV]),
            "topic": lambda: pa.repeat(pa.scalar(topic, pa.string()), n),
            "partition": lambda: pa.repeat(pa.scalar(partition, pa.int32()), n),
            "offset": lambda: ints(_OFF, pa.int64()),
            "timestamp": lambda: pc.multiply_checked(ints(_TSS, pa.int64()), 1000).cast(_TS),
            "timestampType": lambda: ints(_TYPES, pa.int32()),
            "headers": lambda: self._headers(n) if b[_HE] is not None and len(b[_HKE]) > 4 else pa.nulls(n, _HEADERS),
        }
        if columns is None:
            return pa.RecordBatch.from_arrays([make[f.name]() for f in ARROW_RECORD_SCHEMA], schema=ARROW_RECORD_SCHEMA)
        schema = pa.schema([ARROW_RECORD_SCHEMA.field(c) for c in columns])
        return pa.RecordBatch.from_arrays([make[c]() for c in columns], schema=schema)

    def _headers(self, n: int) -> pa.Array:
        """list<struct<key string, value binary>>: null for the rows without headers."""
        b = self.bufs
        m = len(b[_HKE]) // 4 - 1
        keys = _binary(pa.binary(), m, b[_HKE], b[_HKD], None)
        try:
            keys = keys.cast(pa.string())  # validates UTF-8
        except pa.ArrowInvalid:  # like Java's new String(bytes, UTF_8): U+FFFD for bad bytes
            keys = pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string())
        struct = pa.StructArray.from_arrays([keys, _binary(pa.binary(), m, b[_HVE], b[_HVD], b[_HVV])],
                                            fields=list(_HEADER))
        return pa.Array.from_buffers(_HEADERS, n, [_validity(b[_HV], n), pa.py_buffer(b[_HE])], children=[struct])


def _spans(buf, starts, ends, out_ends: bytearray, out_data: bytearray, out_valid: bytearray | None) -> None:
    """Append the bytes ``buf[s:e]`` (null where s < 0) as Arrow binary buffers."""
    pos = len(out_data)
    offs = array("i")
    parts = []
    valid = bytearray(len(starts))
    for j, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if s >= 0:
            parts.append(buf[s:e])
            pos += e - s
            valid[j] = 1
        offs.append(pos)
    out_data.extend(b"".join(parts))
    out_ends.extend(offs)
    if out_valid is not None:
        out_valid.extend(valid)


def _validity(valid: bytearray, n: int):
    """An Arrow validity bitmap from a byte per row (None when no row is null)."""
    if valid.find(0) < 0:
        return None
    return pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(valid)]).cast(pa.bool_()).buffers()[1]


def _binary(t, n: int, ends: bytearray, data: bytearray, valid: bytearray | None) -> pa.Array:
    return pa.Array.from_buffers(t, n, [None if valid is None else _validity(valid, n), pa.py_buffer(ends),
                                        pa.py_buffer(data)])


class _Source:
    """Where an executor reads a planned segment (or split): the local file itself, or the byte range
    of an object-store segment copied into a local temporary file. Errors name the path and the
    executor (a path every executor must see, but this one does not)."""

    def __init__(self, part: SegmentRead):
        self.part = part
        self.path = part.file
        self.shift = 0  # file position of self.path's byte 0
        self.start = part.position
        self.stop = part.stop
        self._tmp = None

    def _where(self) -> str:
        import socket

        try:
            from pyspark import TaskContext

            tc = TaskContext.get()
            task = f", task {tc.partitionId()}.{tc.attemptNumber()} of stage {tc.stageId()}" if tc else ""
        except Exception:  # noqa: BLE001
            task = ""
        return f"executor on {socket.gethostname()} (pid {os.getpid()}{task})"

    def __enter__(self):
        from ..errors import KltoolError
        from ..storage.uri import is_remote, local_path

        part = self.part
        if not is_remote(part.file):
            self.path = local_path(part.file)
            if not os.path.isfile(self.path):
                raise KltoolError(f"{part.file}: not readable on the {self._where()}: every executor must see "
                                  "the path at the same place (a shared filesystem), or give an object-store URI")
            return self
        import tempfile

        from ..storage.uri import filesystem

        try:
            fs, inner = filesystem(part.file, part.storage)
            fd, self._tmp = tempfile.mkstemp(prefix="kltool-seg-", suffix=".log")
            with os.fdopen(fd, "wb") as out, fs.open_input_file(inner) as f:
                end = f.size() if part.stop is None else min(part.stop, f.size())
                pos = part.position
                while pos < end:
                    n = min(8 << 20, end - pos)
                    buf = f.read_at(n, pos)
                    if not buf:
                        break
                    out.write(buf)
                    pos += len(buf)
        except KltoolError:
            self.close()
            raise
        except Exception as e:  # noqa: BLE001 (pyarrow's OSError/ArrowException)
            self.close()
            raise KltoolError(f"{part.file}: cannot read on the {self._where()}: "
                              f"{str(e).splitlines()[0][:300]}") from None
        self.path, self.shift, self.start, self.stop = self._tmp, part.position, 0, None
        return self

    def walk(self, **kw):
        """The walker's items from ``start`` up to the first batch at or past ``stop``; positions
        are those of ``self.path`` (add ``shift`` for the segment's own). With ``runs=True`` a
        BatchRun that starts before ``stop`` may go on past it: the caller cuts it there."""
        from ..storage.scan import walk

        for item in walk(self.path, start=self.start, **kw):
            if self.stop is not None and item.position >= self.stop:
                break
            yield item

    def close(self):
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None

    def __exit__(self, *exc):
        self.close()


def read_records(part: SegmentRead, *, include_control: bool = False, include_headers: bool = True,
                 chunk_rows: int = DEFAULT_ROWS_PER_BATCH, chunk_bytes: int = 32 << 20, columns: list[str] | None = None):
    """pyarrow.RecordBatches of the records of one segment in [part.start, part.end); only
    ``columns`` when given (keys, values and headers are not copied out when not asked for)."""
    want_kv = columns is None or "key" in columns or "value" in columns
    include_headers = include_headers and (columns is None or "headers" in columns)
    from ..storage.read import RecordFilter
    from ..storage.segment import Segment

    start, end = part.start, part.end
    src = _Source(part)
    if start is not None and part.segment is not None and part.position == 0 and part.stop is None \
            and part.storage is None and "://" not in part.file:
        seg = Segment(os.path.dirname(part.file), part.segment, _path(part.file))
        src.start = seg.position_for_offset(start)
    flt = RecordFilter(from_offset=start, to_offset=None if end is None else end - 1)  # end is exclusive
    with src:
        yield from _records_of(src, part, flt, start, end, include_control, include_headers, want_kv, chunk_rows,
                               chunk_bytes, columns)


def _records_of(src, part, flt, start, end, include_control, include_headers, want_kv, chunk_rows, chunk_bytes,
                columns):
    """The rows of ``src``: runs of plain checked v2 batches through the C reader (``arrow_v2``)
    when built, every other batch (and every batch without it) through :func:`_add_batch`."""
    from ..format import parse_header, speedups
    from ..storage.scan import HOLD, BatchRun

    want = set(ARROW_RECORD_SCHEMA.names if columns is None else columns)
    if not include_headers:
        want.discard("headers")
    if not want_kv:
        want -= {"key", "value"}
    C = speedups.C
    out = _Rows(want, part.topic, part.partition, columns, chunk_rows, chunk_bytes)
    stop = src.stop
    for item in src.walk(with_data=True, runs=C is not None, hold_limit=HOLD):
        if isinstance(item, BatchRun):
            buf, i = item.window()
            first = i
            j = i + item.size
            clipped = stop is not None and item.end > stop  # a split ends inside the run
            if clipped:
                j = i + (stop - item.position)
            status = 0
            while i < j:
                chunk = out.chunk
                i, status, chunk.rows, chunk.nbytes = C.arrow_v2(buf, i, j, start, end, include_control, chunk_rows,
                                                                 chunk_bytes, chunk.rows, chunk.nbytes, chunk.bufs)
                if status == 2:  # this batch is for the Python loop
                    h = parse_header(buf, i, check_crc=False)
                    h.crc_valid = True  # checked by the walker
                    h.position = item.position + (i - first)
                    h.data = bytes(buf[i:i + h.size])
                    i += h.size
                    status = yield from _add_batch(out, h, flt, start, end, include_control)
                    if status != 3 and out.full():
                        status = 1
                if status == 1:
                    yield out.flush()
                elif status == 3:
                    break
            if status == 3 or clipped:
                break
            continue
        if not hasattr(item, "crc_valid"):  # Damage: skipped (see level=damage)
            continue
        if (yield from _add_batch(out, item, flt, start, end, include_control)) == 3:
            break
        if out.full():
            yield out.flush()
    if len(out.chunk):
        yield out.flush()


class _Rows:
    """The chunk of rows being filled, and how it becomes the next pyarrow.RecordBatch."""

    __slots__ = ("want", "topic", "partition", "columns", "max_rows", "max_bytes", "chunk")

    def __init__(self, want, topic, partition, columns, max_rows, max_bytes):
        self.want, self.topic, self.partition, self.columns = want, topic, partition, columns
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.chunk = _RecordChunk(want)

    def full(self) -> bool:
        return len(self.chunk) >= self.max_rows or self.chunk.nbytes >= self.max_bytes

    def flush(self):
        batch = self.chunk.to_arrow(self.topic, self.partition, self.columns)
        self.chunk = _RecordChunk(self.want)
        return batch


def _add_batch(out: _Rows, h, flt, start, end, include_control):
    """Add the records of batch ``h`` that the read returns to ``out``: returns 0, or 3 when the read is
    over (the batch starts at or past ``end``). A batch is read as :func:`kltool.storage.scan.records_of`
    gives it: a usual one whole, a larger one (more than ``--max-record-bytes`` decompressed, or not held
    by the walker) a bounded group of records at a time, yielding every chunk it fills on the way, so
    memory stays a chunk plus a group whatever the batch holds."""
    from ..errors import CorruptDataError
    from ..format import speedups
    from ..storage.scan import records_of

    if not h.crc_valid or (h.is_control and not include_control):
        return 0
    if start is not None and h.last_offset < start:
        return 0
    if end is not None and h.magic == 2 and h.base_offset >= end:
        return 3
    tt = TIMESTAMP_TYPE_IDS.get(h.timestamp_type, -1)
    try:
        groups = records_of(h)
        if isinstance(groups, tuple):  # a usual batch: decoded whole
            cols = groups[0]
            if not len(cols):
                return 0
            idx = flt.indices(cols)
            if not idx:
                return 0
            C = speedups.C
            if C is not None and h.magic == 2:  # the C appender over the decoded (decompressed) records
                chunk = out.chunk
                got = C.arrow_records(cols.buffer, h.count, h.base_offset, h.first_timestamp,
                                      h.timestamp_type == "log_append", h.max_timestamp, start, end, chunk.bufs)
                if got is not None:
                    chunk.rows += got
                    chunk.nbytes += len(cols.buffer)
                    return 0
            out.chunk.add(cols, idx, tt)
            return 0
        for cols in groups:
            idx = flt.indices(cols) if len(cols) else None
            if idx:
                out.chunk.add(cols, idx, tt)
                if out.full():
                    yield out.flush()
    except CorruptDataError:
        return 0  # an undecodable batch (the records before the damage are kept): `kltool verify --deep` names it
    return 0


def _path(p):
    from pathlib import Path

    return Path(p)


def _legacy_count(path: str, h) -> tuple[int | None, int]:
    """Records in a legacy (v0/v1) message and its exact base offset: a compressed wrapper has no
    record count in its header, so it is decoded (the one case where level=batches decompresses)."""
    if h.compression == 0:
        return 1, h.base_offset
    from ..errors import CorruptDataError
    from ..format import decode_records

    with open(path, "rb") as f:
        data = os.pread(f.fileno(), h.size, h.position)
    try:
        cols = decode_records(h, data)
    except CorruptDataError:
        return None, h.base_offset
    return len(cols), cols.offsets[0]


def read_batches(part: SegmentRead, chunk_rows: int = 65536):
    with _Source(part) as src:
        yield from _batches_of(src, part, chunk_rows)


def _batches_of(src, part, chunk_rows):
    cols: dict[str, list] = {f.name: [] for f in ARROW_BATCH_SCHEMA}
    n = 0
    start, end = part.start, part.end
    shift = src.shift
    for h in src.walk():
        if not hasattr(h, "crc_valid"):
            continue
        base, count = h.base_offset, h.count
        if h.magic < 2 and h.crc_valid:
            count, base = _legacy_count(src.path, h)
        if start is not None and h.last_offset < start:
            continue
        if end is not None and base >= end:
            continue
        for k, v in (("topic", part.topic), ("partition", part.partition), ("segment", part.segment),
                     ("position", h.position + shift), ("size", h.size), ("base_offset", base),
                     ("last_offset", h.last_offset), ("count", count), ("magic", h.magic),
                     ("compression", h.compression_name), ("crc_valid", bool(h.crc_valid)),
                     ("first_timestamp", h.first_timestamp), ("max_timestamp", h.max_timestamp),
                     ("producer_id", h.producer_id), ("is_transactional", h.is_transactional),
                     ("is_control", h.is_control), ("timestamp_type", h.timestamp_type), ("file", part.file)):
            cols[k].append(v)
        n += 1
        if n >= chunk_rows:
            yield pa.RecordBatch.from_pydict(cols, schema=ARROW_BATCH_SCHEMA)
            cols = {f.name: [] for f in ARROW_BATCH_SCHEMA}
            n = 0
    if n:
        yield pa.RecordBatch.from_pydict(cols, schema=ARROW_BATCH_SCHEMA)


def read_damage(part: SegmentRead):
    rows = []
    with _Source(part) as src:
        sh = src.shift
        for item in src.walk():
            if hasattr(item, "crc_valid"):
                if not item.crc_valid:
                    rows.append((item.position + sh, item.size, "crc_mismatch",
                                 f"stored crc {item.crc} does not match in batch {item.base_offset}..{item.last_offset}",
                                 item.end + sh))
            else:
                rows.append((item.position + sh, item.length, item.kind, item.message,
                             None if item.resumed_at is None else item.resumed_at + sh))
    if rows:
        n = len(rows)
        yield pa.RecordBatch.from_arrays([
            pa.array([part.topic] * n, pa.string()), pa.array([part.partition] * n, pa.int32()),
            pa.array([part.segment] * n, pa.int64()), pa.array([r[0] for r in rows], pa.int64()),
            pa.array([r[1] for r in rows], pa.int64()), pa.array([r[2] for r in rows], pa.string()),
            pa.array([r[3] for r in rows], pa.string()), pa.array([r[4] for r in rows], pa.int64()),
            pa.array([part.file] * n, pa.string()),
        ], schema=ARROW_DAMAGE_SCHEMA)


def read_segments(parts: list[SegmentRead]):
    if parts:
        yield pa.RecordBatch.from_pydict({
            "topic": [p.topic for p in parts], "partition": [p.partition for p in parts],
            "segment": [p.segment for p in parts], "bytes": [p.bytes for p in parts],
            "file": [p.file for p in parts], "partition_dir": [p.partition_dir for p in parts],
            "log_start_offset": [p.log_start_offset for p in parts],
        }, schema=ARROW_SEGMENT_SCHEMA)


def _project(batches, columns):
    for b in batches:
        yield b if columns is None else b.select(columns)


def read_partition_rows(opts: dict, part: SegmentGroup | SegmentRead | list, columns: list[str] | None = None):
    """What one DataFrame partition holds, for ``opts['level']`` (also usable without Spark); only
    ``columns`` (a narrower schema the user gave) when given."""
    opts = normalize_options(opts)
    level = (opts.get("level") or "records").lower()
    segs = part.value if isinstance(part, InputPartition) else part
    if isinstance(segs, SegmentRead):
        segs = [segs]
    if level == "segments":
        yield from _project(read_segments(segs), columns)
        return
    for seg in segs:
        if level == "records":
            yield from read_records(seg, include_control=_bool(opts.get("includecontrol"), False),
                                    include_headers=_bool(opts.get("includeheaders"), True),
                                    chunk_rows=_int(opts, "maxrecordsperbatch") or DEFAULT_ROWS_PER_BATCH, columns=columns)
        elif level == "batches":
            yield from _project(read_batches(seg), columns)
        else:
            yield from _project(read_damage(seg), columns)


# -- the Data Source -----------------------------------------------------------------------------

ARROW_SCHEMAS = {"records": ARROW_RECORD_SCHEMA, "batches": ARROW_BATCH_SCHEMA, "damage": ARROW_DAMAGE_SCHEMA,
                 "segments": ARROW_SEGMENT_SCHEMA}


class KafkaLogReader(DataSourceReader):
    """Reads the planned segments; ``columns``: a narrower schema the user gave (``.schema(...)``)."""

    default_min_partitions: int | None = None

    def __init__(self, options: dict, columns: list[str] | None = None, default_min_partitions: int | None = None):
        self.options = options
        self.columns = columns
        self.pushed = Pushed()
        self.default_min_partitions = default_min_partitions

    def partitions(self):
        opts = self.options
        segs = plan_segments(opts, self.pushed)
        if (opts.get("level") or "records").lower() == "segments" or not segs:
            return [SegmentGroup(segs)]  # Spark needs at least one partition
        max_bytes = _int(opts, "maxpartitionbytes")
        groups = group_segments(segs, max_bytes=128 << 20 if max_bytes is None else max_bytes,
                                open_cost=_int(opts, "opencostinbytes") or 4 << 20,
                                min_partitions=_int(opts, "minpartitions") or self.default_min_partitions
                                or os.cpu_count() or 1)
        return [SegmentGroup(g) for g in groups]

    def read(self, partition):
        return read_partition_rows(self.options, partition, self.columns)


class KafkaLogPushdownReader(KafkaLogReader):
    """With filter pushdown (``spark.sql.python.filterPushdown.enabled``; pyspark refuses a reader
    with ``pushFilters`` when it is off): predicates on topic, partition, offset and timestamp
    (=, <, <=, >, >=, IN, BETWEEN) choose the partitions and the offset range to read, through the
    offset and time indexes. Every filter is handed back to Spark, which checks it on the rows read."""

    def pushFilters(self, filters):
        for f in filters:
            _push(self.pushed, f)
            yield f


class KafkaLogDataSource(DataSource):
    """``spark.read.format("kafka-log")``; see the module docstring for the options."""

    pushdown = False
    default_min_partitions: int | None = None

    def __init__(self, options):
        super().__init__(options)
        self.options = normalize_options(options)
        level = (self.options.get("level") or "records").lower()
        if level not in SCHEMAS:
            from ..errors import UsageError

            raise UsageError(f"kafka-log: option level must be one of {', '.join(SCHEMAS)}, not {level!r}")

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMAS[(self.options.get("level") or "records").lower()]

    def reader(self, schema) -> DataSourceReader:
        level = (self.options.get("level") or "records").lower()
        full = ARROW_SCHEMAS[level].names
        names = list(schema.fieldNames()) if hasattr(schema, "fieldNames") else list(full)
        unknown = [n for n in names if n not in full]
        if unknown:
            from ..errors import UsageError

            raise UsageError(f"kafka-log (level {level}): no column {', '.join(unknown)}; "
                             f"the columns are {', '.join(full)}")
        columns = None if names == list(full) else names
        cls = KafkaLogPushdownReader if self.pushdown else KafkaLogReader
        return cls(self.options, columns, self.default_min_partitions)


class KafkaLogPushdownDataSource(KafkaLogDataSource):
    pushdown = True


def register(spark, *, pushdown: bool = False) -> None:
    """Make ``spark.read.format("kafka-log")`` available in this session. With ``pushdown`` it also
    turns on Python data source filter pushdown (``spark.sql.python.filterPushdown.enabled``, a
    runtime SQL setting: pyspark refuses a reader that pushes filters while it is off).

    Off by default in your own sessions because pyspark 4.3.0 keeps the plan of the first filtered
    query on a DataFrame for its later scans: ``df.where("offset > 5").count(); df.count()`` then
    counts only offsets > 5. With pushdown, load a DataFrame per query (kltool's reports do).
    DataFrame partitions default to the cluster's ``defaultParallelism``, not the driver's CPUs."""
    base = KafkaLogPushdownDataSource if pushdown else KafkaLogDataSource
    if pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        parallelism = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext
        parallelism = None
    cls = type(f"{base.__name__}ForSession", (base,), {"default_min_partitions": parallelism})
    spark.dataSource.register(cls)
