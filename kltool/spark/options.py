"""Options of the ``kafka-log`` source (all strings, as Spark passes them, looked up in lower case) and
the filters Spark pushes down (:class:`Pushed`): parsed and checked here, on the driver, once."""

from __future__ import annotations

import json
from dataclasses import dataclass

NAME = "kafka-log"

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


# Every option the source takes (lower case, as looked up), and the kinds of value checked at planning.
BOOL_OPTIONS = {"respectlogstartoffset", "includecontrol", "includeheaders", "allstates", "failondataloss",
                "includemetadata"}
INT_OPTIONS = {"startingoffset", "endingoffset", "startingtimestamp", "endingtimestamp", "maxrecordsperbatch",
               "splitbytes", "maxpartitionbytes", "opencostinbytes", "minpartitions",
               "maxoffsetspertrigger", "minoffsetspertrigger",  # (readStream only: kltool/spark/streaming.py)
               "maxrecordsperpartition"}  # (Spark's: how its Kafka source splits a partition; rows are the same)
OPTIONS = BOOL_OPTIONS | INT_OPTIONS | {
    "path", "paths", "topic", "partition", "assign", "subscribe", "subscribepattern", "level", "startingoffsets",
    "endingoffsets", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp", "kafka.isolation.level",
    "startingoffsetsbytimestampstrategy", "replicas", "maxtriggerdelay"}
# Spark's Kafka-source options about reaching a broker: meaningless for files, accepted so that a
# format("kafka") job runs by changing one line (with every kafka.* consumer setting but the isolation level).
IGNORED = {"kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms", "groupidprefix"}
# ... but not the consumer settings Spark's Kafka source refuses (its validateGeneralOptions): the same job fails
# the same way on both sources.
REFUSED_KAFKA = {"kafka.auto.offset.reset": "instead set the source option startingOffsets to earliest or latest",
                 "kafka.key.deserializer": "keys are byte arrays: deserialize them with DataFrame operations",
                 "kafka.value.deserializer": "values are byte arrays: deserialize them with DataFrame operations",
                 "kafka.enable.auto.commit": "", "kafka.interceptor.classes": ""}
LEVELS = ("records", "batches", "damage", "segments")


def check_options(opts: dict) -> None:
    """Every option known and every value well-formed, on the driver when the source is created: an
    unknown option, a bad number, boolean or JSON is one UsageError line here, never ignored or found
    on an executor."""
    from ..errors import UsageError

    for k in opts:
        if k in OPTIONS or k in IGNORED or k.startswith("storage.") or k.startswith("kafka."):
            continue
        raise UsageError(f"kafka-log: unknown option {k!r}; the options are {', '.join(sorted(OPTIONS))}, "
                         "storage.KEY and Spark's kafka.* settings")
    for k in sorted(BOOL_OPTIONS & opts.keys()):
        if str(opts[k]).strip().lower() not in ("true", "false"):
            raise UsageError(f"kafka-log: option {k} must be true or false, not {opts[k]!r}")
    for k in sorted(INT_OPTIONS & opts.keys()):
        _int(opts, k)
    level = str(opts.get("level") or "records").lower()
    if level not in LEVELS:
        raise UsageError(f"kafka-log: option level must be one of {', '.join(LEVELS)}, not {level!r}")
    iso = str(opts.get("kafka.isolation.level") or "read_uncommitted").strip()
    if iso not in ("read_uncommitted", "read_committed"):  # (in lower case: Kafka's consumer refuses another)
        raise UsageError(f"kafka-log: option kafka.isolation.level must be read_uncommitted or read_committed, "
                         f"not {opts['kafka.isolation.level']!r} (Kafka's consumer in Spark's Kafka source: Invalid "
                         f"value {iso} for configuration isolation.level)")
    strategy = str(opts.get("startingoffsetsbytimestampstrategy") or "error").lower()
    if strategy not in ("error", "latest"):
        raise UsageError(f"kafka-log: option startingOffsetsByTimestampStrategy must be error or latest, not "
                         f"{opts['startingoffsetsbytimestampstrategy']!r}")
    lo, hi = _int(opts, "minoffsetspertrigger"), _int(opts, "maxoffsetspertrigger")
    if lo is not None and hi is not None and lo > hi:  # Spark's rule (batch queries too)
        raise UsageError(f"kafka-log: option minOffsetsPerTrigger ({lo}) is higher than maxOffsetsPerTrigger ({hi})")
    time_ms(opts.get("maxtriggerdelay"), "maxTriggerDelay")
    if str(opts.get("replicas") or "all").lower() not in ("all", "one"):
        raise UsageError(f"kafka-log: option replicas must be all or one, not {opts['replicas']!r}")
    given = [k for k in ("assign", "subscribe", "subscribepattern") if opts.get(k) is not None]
    if len(given) > 1:  # Spark's rule
        raise UsageError(f"kafka-log: give only one of assign, subscribe and subscribePattern, not {' and '.join(given)}")
    _check_as_spark(opts)
    topic_matcher(opts)
    _assigned(opts)
    _spark_offsets(opts.get("startingoffsets"), "startingOffsets")
    _spark_offsets(opts.get("endingoffsets"), "endingOffsets")
    for k, name in (("startingoffsetsbytimestamp", "startingOffsetsByTimestamp"),
                    ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp")):
        by_timestamp(opts.get(k), name)


_TIME_UNITS = {"us": 0.001, "micros": 0.001, "ms": 1, "millis": 1, "s": 1000, "m": 60_000, "min": 60_000,
               "h": 3_600_000, "d": 86_400_000}


def time_ms(v, name: str, default: str = "15m") -> int:
    """A duration as Spark writes one (``maxTriggerDelay``: ``15m``, ``30s``, ``500ms``, ``2h``, ``1d``, ``250us``;
    a bare number is milliseconds), in milliseconds (Spark's ``timeStringAsMs``, which truncates)."""
    import re

    s = str(default if v is None else v).strip().lower()
    m = re.fullmatch(r"(-?[0-9]+)([a-z]+)?", s)
    if m is None or (m.group(2) is not None and m.group(2) not in _TIME_UNITS):
        from ..errors import UsageError

        raise UsageError(f"kafka-log: option {name} must be a time as Spark writes one (a number with us, ms, s, m "
                         f"or min, h or d: 50s, 100ms, 15m; a bare number is ms), not {v!r}")
    n, unit = int(m.group(1)), _TIME_UNITS[m.group(2) or "ms"]
    return int(n * unit) if unit >= 1 else int(n / 1000)


def _check_as_spark(opts: dict) -> None:
    """The checks of Spark's Kafka source (KafkaSourceProvider.validateGeneralOptions) on options it shares
    with kafka-log, so that a job fails (or not) the same way on both: a subscription given empty, a
    minPartitions or maxRecordsPerPartition not positive, a consumer setting it refuses."""
    from ..errors import UsageError

    if opts.get("assign") is not None and not str(opts["assign"]).strip().startswith("{"):
        raise UsageError(f"kafka-log: no topic partitions to assign: option assign is {opts['assign']!r} "
                         '(JSON like {"topic":[0,1]})')
    if opts.get("subscribe") is not None and not [t for t in str(opts["subscribe"]).split(",") if t.strip()]:
        raise UsageError(f"kafka-log: no topics to subscribe to: option subscribe is {opts['subscribe']!r}")
    if opts.get("subscribepattern") is not None and not str(opts["subscribepattern"]).strip():
        raise UsageError(f"kafka-log: the pattern to subscribe is empty: option subscribePattern is "
                         f"{opts['subscribepattern']!r}")
    for k, name in (("minpartitions", "minPartitions"), ("maxrecordsperpartition", "maxRecordsPerPartition")):
        v = _int(opts, k)
        if v is not None and v <= 0:
            raise UsageError(f"kafka-log: option {name} must be positive, not {v} (as in Spark's Kafka source)")
    for k in sorted(REFUSED_KAFKA.keys() & opts.keys()):
        why = REFUSED_KAFKA[k]
        raise UsageError(f"kafka-log: Kafka option '{k[len('kafka.'):]}' is not supported"
                         f"{f' ({why})' if why else ''}, as in Spark's Kafka source")


def topic_matcher(opts: dict):
    """Spark's ``subscribe`` (topic names, comma-separated) or ``subscribePattern`` (a regular expression
    the whole topic name matches, as Java's Pattern.matches) as a predicate on topic names; None when
    neither is given."""
    if opts.get("subscribe"):
        names = {t.strip() for t in str(opts["subscribe"]).split(",") if t.strip()}
        return lambda t: t in names
    if opts.get("subscribepattern"):
        import re

        try:
            rx = re.compile(str(opts["subscribepattern"]).strip())  # (Spark trims it)
        except re.error as e:
            from ..errors import UsageError

            raise UsageError(f"kafka-log: option subscribePattern is not a regular expression "
                             f"({opts['subscribepattern']!r}: {e})") from None
        return lambda t: t is not None and rx.fullmatch(t) is not None
    return None


def by_timestamp(spec, name: str) -> dict | None:
    """Spark's startingOffsetsByTimestamp/endingOffsetsByTimestamp: {"topic": {"0": epoch ms}}."""
    if spec is None or str(spec).strip() == "":
        return None
    try:
        d = json.loads(str(spec))
        return {(t, int(p)): int(ts) for t, parts in d.items() for p, ts in parts.items()}
    except (ValueError, AttributeError, TypeError):
        from ..errors import UsageError

        raise UsageError(f'kafka-log: option {name}: expected JSON like {{"topic":{{"0":1700000000000}}}}, '
                         f"not {spec!r}") from None


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
    if s.lower() == "earliest":  # (any case, as Spark's Kafka source)
        return EARLIEST
    if s.lower() == "latest":
        return LATEST
    try:
        d = json.loads(s)
        return {(t, int(p)): int(o) for t, parts in d.items() for p, o in parts.items()}
    except (ValueError, AttributeError, TypeError):
        from ..errors import UsageError

        raise UsageError(f"option {name}: expected earliest, latest or JSON like "
                         f'{{"topic":{{"0":23}}}}, not {spec!r}') from None

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


_EQUAL = ("EqualTo", "EqualNullSafe", "In")
_PUSHABLE = (*_EQUAL, "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual")


def _hi(a, b):
    return b if a is None else max(a, b)


def _lo(a, b):
    return b if a is None else min(a, b)


def _push(pushed: Pushed, f) -> None:
    """Narrow ``pushed`` by one filter on topic, partition, offset or timestamp (others: ignored)."""
    from pyspark.sql import datasource as sds

    attr = getattr(f, "attribute", None)
    kind = type(f).__name__
    if not attr or len(attr) != 1 or kind not in _PUSHABLE:
        return
    col = attr[0].lower()
    values = list(f.value) if isinstance(f, sds.In) else [f.value]
    if not values or any(v is None for v in values):
        return
    if col == "topic":
        if kind in _EQUAL and all(isinstance(v, str) for v in values):
            pushed.topics = set(values) if pushed.topics is None else pushed.topics & set(values)
    elif col == "timestamp":
        _push_time(pushed, kind, values)
    elif col in ("partition", "offset") and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        _push_int(pushed, col, kind, values)


def _push_time(pushed: Pushed, kind: str, values) -> None:
    """A lower bound on the timestamp (an upper one cuts nothing: timestamps are not ordered by offset)."""
    import datetime as dt

    ms = [_ms_ceil(v) for v in values]
    if any(m is None for m in ms):
        return
    if kind == "GreaterThan":  # ts > v: ms*1000 > v_us
        lo = _ms_ceil(values[0] + dt.timedelta(microseconds=1))
    elif kind in (*_EQUAL, "GreaterThanOrEqual"):
        lo = min(ms)
    else:
        return
    pushed.time_min = _hi(pushed.time_min, lo)


def _push_int(pushed: Pushed, col: str, kind: str, values) -> None:
    lo = hi = None  # [lo, hi] inclusive
    if kind in _EQUAL:
        lo, hi = min(values), max(values)
    elif kind in ("GreaterThan", "GreaterThanOrEqual"):
        lo = values[0] + (kind == "GreaterThan")
    else:
        hi = values[0] - (kind == "LessThan")
    if col == "partition":
        if kind in _EQUAL:
            pushed.partitions = set(values) if pushed.partitions is None else pushed.partitions & set(values)
        if lo is not None:
            pushed.partition_min = _hi(pushed.partition_min, lo)
        if hi is not None:
            pushed.partition_max = _lo(pushed.partition_max, hi)
        return
    if lo is not None:
        pushed.offset_min = _hi(pushed.offset_min, lo)
    if hi is not None:
        pushed.offset_end = _lo(pushed.offset_end, hi + 1)
