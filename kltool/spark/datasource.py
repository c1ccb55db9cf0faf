"""``spark.read.format("kafka-log")``: Kafka log segments as a Spark DataFrame (PySpark Python Data
Source API, Spark 4+), with the schema of Spark's own Kafka source, so a ``format("kafka")`` job runs
against files (a log dir, a backup) by changing one line::

    from kltool.spark import register
    register(spark)
    df = spark.read.format("kafka-log").option("path", "/var/lib/kafka/data").load()

Each DataFrame partition reads segments (``.log`` files) with the batch walker
(:func:`kltool.storage.walk`): a big segment is split into even pieces (``splitBytes``) at batch starts
taken from its ``.index``, small ones are packed together the way Spark's file sources pack files
(``maxPartitionBytes``, ``openCostInBytes``, ``minPartitions``). Paths are local or URIs on object
stores (:mod:`kltool.storage.uri`: ``s3://``, ``s3a://``, ``gs://``, ``abfs://``, ``hdfs://``): planning
lists them by name, executors copy the byte range they read into a local temporary file. Damaged data
fails the query unless ``failOnDataLoss`` is false (``level=damage`` lists it). Rows are produced as
``pyarrow.RecordBatch`` chunks.

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
``assign`` / ``subscribe`` / ``subscribePattern``
    Spark's: a JSON list of partitions to read (``{"orders":[0,1],"audit":[2]}``), topic names
    (``orders,audit``), a regular expression the whole topic name matches; at most one of the three.
``level``
    ``records`` (default; Spark's Kafka-source schema), ``batches`` (one row per batch, headers only),
    ``damage`` (one row per unreadable region or CRC-invalid batch), ``segments`` (one row per segment).
``startingOffset`` / ``endingOffset``
    One offset for every partition: inclusive start, exclusive end (like Spark's Kafka source).
``startingOffsets`` / ``endingOffsets``
    Spark's JSON (``{"t":{"0":23,"1":-2}}``, -2 earliest, -1 latest) or ``earliest``/``latest``.
``startingTimestamp`` / ``endingTimestamp``
    Epoch ms: per partition, start at (end before) the first offset whose timestamp is >= it, found
    through the time and offset indexes like the broker's ListOffsets; an end no record reaches is the
    log end. As in Spark, each side takes a timestamp over the by-partition ones over the offsets.
``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``
    Spark's JSON of epoch ms per partition (``{"t":{"0":1700000000000}}``): the same per partition.
``startingOffsetsByTimestampStrategy``
    What a start timestamp after every record of a partition does: ``error`` (the default, as Spark's:
    fail the query in one line naming the partition and the timestamp) or ``latest`` (read nothing there).
``replicas``
    ``all`` (default): a partition found in several log dirs (replicas of several brokers, a backup of a
    whole cluster) gives the rows of every copy, with a warning naming them. ``one``: only the copy a
    consumer would read, the one with the highest leader epoch, then the highest log end offset (local
    paths).
``includeMetadata``
    ``true`` adds ``_metadata struct<log_dir, file, position>`` to the records level: the log dir, the
    segment file and the byte position of each record's batch, like the ``_metadata`` of Spark's file
    sources (also given by naming ``_metadata`` in a user schema).
``kafka.isolation.level``
    ``read_uncommitted`` (default) or ``read_committed``: as a consumer with that isolation level, no
    record of an aborted transaction and nothing from the first offset of a transaction still open at the
    log's end (the last stable offset); found by a walk of the partition's batch headers on the driver
    (local paths). Spark's other ``kafka.*`` settings and broker-only options (``kafka.bootstrap.servers``,
    ``fetchOffset.numRetries``, ...) are accepted and have no effect on files; any other unknown option,
    and a malformed value, is an error when the DataFrame is created.
``respectLogStartOffset``
    ``false`` to also return records below a partition's log start offset (its
    ``log-start-offset-checkpoint`` entry): Kafka treats them as deleted. Records level only.
``includeControl``
    ``true`` to also return control records (transaction markers); a Kafka consumer never sees them.
``failOnDataLoss``
    ``true`` (the default, as Spark's Kafka source): damaged bytes in what the records level reads (an
    unreadable region, a batch with a bad CRC, a batch that does not decode) fail the query with one line
    naming the file and the byte position. ``false``: skip them (the valid batches after them are still
    read), with one warning per segment on the executor's log giving the bytes and records lost.
``includeHeaders``
    ``false`` to leave ``headers`` null without decoding them (faster).
``allStates``
    ``true`` to also read ``-delete``/``-future``/``-stray`` partition directories.
``maxOffsetsPerTrigger``
    ``spark.readStream`` only (ignored by ``spark.read``, as in Spark): at most this many offsets per
    micro-batch. Streams: see :mod:`kltool.spark.streaming` (offsets as Spark's Kafka source checkpoints
    them, ``startingOffsets`` ``latest`` by default, ``Trigger.AvailableNow``).
``maxRecordsPerBatch``
    Rows per Arrow batch (default 65536; a batch also ends after 32 MiB of record bytes).
``splitBytes``
    Records level: split segments into even pieces of about this many bytes at batch starts found through
    the ``.index`` (0: never split). By default as Spark splits files (at most ``maxPartitionBytes``, else
    the bytes per core), made even and in a multiple of ``minPartitions`` pieces so that no core finishes
    alone: a 138 MB segment on 2 cores is 2 tasks of 69 MB. The rows are the same either way.
``maxPartitionBytes`` / ``openCostInBytes`` / ``minPartitions``
    Packing of segments (pieces) into DataFrame partitions: default 512 MiB / 4 MiB / the session's
    ``defaultParallelism``, as Spark's ``spark.sql.files.*`` but for the first (Spark's is 128 MiB: a Python
    task costs more to start, see ``planning.DEFAULT_PARTITION_BYTES``); ``maxPartitionBytes=0`` gives
    exactly one partition per segment (piece). ``minPartitions`` must be positive, as in Spark's Kafka source.
``maxRecordsPerPartition``, ``kafka.*``, ``fetchOffset.*``, ...
    Spark's Kafka-source options about splitting and reaching a broker: accepted, nothing to do (a
    ``maxRecordsPerPartition`` must be positive). What Spark's Kafka source refuses before it reads is
    refused the same way: ``kafka.auto.offset.reset``, ``kafka.key.deserializer``/``value.deserializer``,
    ``kafka.enable.auto.commit``, ``kafka.interceptor.classes``, a ``kafka.isolation.level`` not in lower
    case (Kafka's consumer refuses it), and ``assign``/``subscribe``/``subscribePattern`` given empty.

Filters on ``topic``, ``partition``, ``offset`` and ``timestamp`` are pushed down where that cannot give
a wrong answer (see :func:`register`: not on pyspark 4.3.0, which reuses a pushed plan in later scans,
unless forced with ``register(spark, pushdown=True)`` by code that loads a DataFrame per query). A narrower
schema given with ``.schema("offset LONG, timestamp TIMESTAMP")`` is read without decoding keys,
values or headers; its names may be in any case, and a type other than the source's (or NOT NULL on a
column that may be null) is an error at planning. ``timestamp`` is declared ``timestamp_ltz``, as Spark's
Kafka source does, so sessions with ``spark.sql.timestampType=TIMESTAMP_NTZ`` read it too.
"""
from __future__ import annotations

import os

from pyspark.sql.datasource import DataSource, DataSourceReader

from .arrow_rows import (  # noqa: F401 (the names tests, bench and README use from here)
    ARROW_BATCH_SCHEMA,
    ARROW_DAMAGE_SCHEMA,
    ARROW_RECORD_SCHEMA,
    ARROW_SCHEMAS,
    ARROW_SEGMENT_SCHEMA,
    METADATA_DDL,
    METADATA_FIELD,
    RECORD_SCHEMA,
    SCHEMAS,
    in_task,
    read_batches,
    read_damage,
    read_partition_rows,
    read_records,
    read_segments,
)
from .options import (  # noqa: F401
    DEFAULT_ROWS_PER_BATCH,
    EARLIEST,
    LATEST,
    NAME,
    Pushed,
    _int,
    _push,
    check_options,
    normalize_options,
    option_paths,
    storage_options,
)
from .planning import (  # noqa: F401
    SegmentGroup,
    SegmentRead,
    group_reads,
    group_segments,
    offset_for_time,
    plan_segments,
    split_segments,
)


def _internal(e: BaseException):
    """An unexpected exception (a kltool bug) as one line that still says where it was raised; a package
    missing in this worker's Python as one line naming it."""
    import traceback

    from ..errors import KltoolError

    if isinstance(e, ImportError) and e.name:
        from .arrow_rows import missing_package

        return missing_package(e)
    frames = traceback.extract_tb(e.__traceback__)
    at = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return KltoolError(f"internal error in kltool (a bug, please report it): {type(e).__name__}: {e}{at}")


def _one_line(f):
    """Spark shows an exception from a data source's worker with its traceback unless the worker's
    environment has SPARK_HIDE_TRACEBACK (``register`` sets it): kltool's errors are one line that names
    the file and position; anything else becomes one line naming the bug's place."""
    import functools

    from ..errors import KltoolError

    @functools.wraps(f)
    def wrapper(*a, **k):
        try:
            return f(*a, **k)
        except KltoolError:
            raise
        except Exception as e:  # noqa: BLE001
            raise _internal(e) from None
    return wrapper


def _rows_one_line(rows):
    from ..errors import KltoolError

    try:
        yield from rows
    except KltoolError:
        raise
    except Exception as e:  # noqa: BLE001
        raise _internal(e) from None


class KafkaLogReader(DataSourceReader):
    """Reads the planned segments; ``columns``: a narrower schema the user gave (``.schema(...)``)."""

    default_min_partitions: int | None = None

    aliases: list[str] | None = None  # the user schema's names, where their case differs from the columns'

    def __init__(self, options: dict, columns: list[str] | None = None, default_min_partitions: int | None = None):
        self.options = options
        self.columns = columns
        self.pushed = Pushed()
        self.default_min_partitions = default_min_partitions

    @_one_line
    def partitions(self):
        opts = self.options
        segs = plan_segments(opts, self.pushed, self.default_min_partitions)
        if (opts.get("level") or "records").lower() == "segments" or not segs:
            return [SegmentGroup(segs)]  # Spark needs at least one partition
        return [SegmentGroup(g) for g in group_reads(opts, segs, self.default_min_partitions)]

    def read(self, partition):
        in_task()
        rows = _rows_one_line(read_partition_rows(self.options, partition, self.columns))
        if self.aliases is None:
            return rows
        return (b.rename_columns(self.aliases) for b in rows)


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

    @_one_line
    def __init__(self, options):
        super().__init__(options)
        self.options = normalize_options(options)
        check_options(self.options)

    @classmethod
    def name(cls) -> str:
        return NAME

    @_one_line
    def schema(self) -> str:
        level = (self.options.get("level") or "records").lower()
        if level == "records" and str(self.options.get("includemetadata") or "").lower() == "true":
            return f"{RECORD_SCHEMA}, {METADATA_DDL}"
        return SCHEMAS[level]

    @_one_line
    def reader(self, schema) -> DataSourceReader:
        level = (self.options.get("level") or "records").lower()
        columns, aliases = user_columns(level, schema)
        cls = KafkaLogPushdownReader if self.pushdown else KafkaLogReader
        r = cls(self.options, columns, self.default_min_partitions)
        r.aliases = aliases
        return r

    def streamReader(self, schema):  # noqa: N802 (pyspark's name)
        """``spark.readStream``: :class:`kltool.spark.streaming.KafkaLogStreamReader`. Nothing may raise
        here: pyspark 4.3.0's worker hides such an error behind an UnboundLocalError of its own clean-up,
        so a bad option is raised by the reader's first call."""
        from .streaming import KafkaLogStreamReader

        level = (self.options.get("level") or "records").lower()
        wrap = {"one_line": _one_line, "rows_one_line": _rows_one_line}
        try:
            columns, aliases = user_columns("records", schema) if level == "records" else (None, None)
        except Exception as e:  # noqa: BLE001
            r = KafkaLogStreamReader(self.options, **wrap)
            r._error = e
            return r
        return KafkaLogStreamReader(self.options, columns, aliases, self.default_min_partitions, **wrap)


# Columns that may hold null (a record without key, value or headers; a lone segment outside a partition
# directory has no topic or partition): a user schema may not declare them NOT NULL.
_NULLABLE = {"key", "value", "headers", "topic", "partition", "_metadata"}


def user_columns(level: str, schema) -> tuple[list[str] | None, list[str] | None]:
    """The columns a schema asks for (None: all, in the source's order) and the names to give them
    where the schema spells them in another case (Spark's column names are case-insensitive). A
    column the level does not have, a type other than the source's or NOT NULL on a column that
    may be null is one UsageError line, on the driver, before anything is read."""
    from ..errors import UsageError

    full = ARROW_SCHEMAS[level]
    if not hasattr(schema, "fields"):
        return None, None
    from pyspark.sql.pandas.types import from_arrow_type

    known = {f.name.lower(): f for f in full}
    if level == "records":
        known["_metadata"] = METADATA_FIELD
    names, bad = [], []
    for f in schema.fields:
        a = known.get(f.name.lower())
        if a is None:
            raise UsageError(f"kafka-log (level {level}): no column {f.name}; the columns are "
                             f"{', '.join(full.names)}" + (" and _metadata" if level == "records" else ""))
        want = from_arrow_type(a.type)
        if f.dataType != want:
            bad.append(f"{f.name} is {f.dataType.simpleString()}, the source gives {want.simpleString()}"
                       + (" (timestamp_ltz)" if want.typeName() == "timestamp" else ""))
        elif not f.nullable and a.name in _NULLABLE:
            bad.append(f"{f.name} is NOT NULL but may be null")
        names.append(a.name)
    if bad:
        raise UsageError(f"kafka-log (level {level}): schema does not match the source: {'; '.join(bad)}")
    user = [f.name for f in schema.fields]
    return (None if names == full.names else names), (user if user != names else None)


class KafkaLogPushdownDataSource(KafkaLogDataSource):
    pushdown = True


SCAN_BUILDER = "org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder"


def pushdown_is_scan_scoped(spark) -> bool:
    """True when the running Spark keeps what a filter pushdown planned (the partitions and the read
    function) to the scan it was planned for. pyspark 4.3.0 stores it on the relation instead, shared
    by every later scan of the same DataFrame, view or table, so that ``df.where("offset > 995").count();
    df.count()`` counts only the offsets above 995, and a temp view, a union of two filtered halves or a
    cache give the same wrong counts. Spark's fix moved the field into the scan builder; kltool looks for
    it there (False when it cannot look: Spark Connect)."""
    try:
        jvm = spark.sparkContext._jvm
        cls = jvm.java.lang.Class.forName(SCAN_BUILDER)
        return any(f.getName() == "readInfo" for f in cls.getDeclaredFields())
    except Exception:  # noqa: BLE001 (Spark Connect, a renamed class: not provably safe)
        return False


def register(spark, *, pushdown: bool | None = None) -> bool:
    """Make ``spark.read.format("kafka-log")`` available in this session; returns whether filters are
    pushed down.

    ``pushdown`` None (the default): on only where Spark keeps a pushed plan to its own scan
    (:func:`pushdown_is_scan_scoped`; not pyspark 4.3.0), so a DataFrame, a temp view or a cached
    table queried with and without filters always gives Spark's answers. ``True`` forces it on (and
    sets ``spark.sql.python.filterPushdown.enabled``, which pyspark needs for a reader that pushes
    filters): only for code that loads a DataFrame per query and scans it once, as kltool's reports
    do; on pyspark 4.3.0 any reuse of such a DataFrame gives wrong counts. ``False``: off. Without
    pushdown the same rows are read through options (``startingOffsets``, ``assign``, ``topic``...).
    DataFrame partitions default to the cluster's ``defaultParallelism``, not the driver's CPUs."""
    if pushdown is None:
        pushdown = pushdown_is_scan_scoped(spark)
    base = KafkaLogPushdownDataSource if pushdown else KafkaLogDataSource
    if pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        parallelism = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext
        parallelism = None
    cls = type(f"{base.__name__}ForSession", (base,), {"default_min_partitions": parallelism})
    sc = _context(spark)
    python = worker_python(spark)
    saved = getattr(sc, "pythonExec", None)
    env = getattr(sc, "environment", None)
    hide = None if env is None else env.get("SPARK_HIDE_TRACEBACK")
    if sc is not None and python is not None:
        sc.pythonExec = python  # what the registered source's workers run (planning on the driver, executors)
    if env is not None:
        env["SPARK_HIDE_TRACEBACK"] = "1"  # the workers' errors: one line (see _one_line)
    try:
        spark.dataSource.register(cls)
    finally:
        if sc is not None and saved is not None:
            sc.pythonExec = saved
        if env is not None:
            if hide is None:
                env.pop("SPARK_HIDE_TRACEBACK", None)
            else:
                env["SPARK_HIDE_TRACEBACK"] = hide
    return pushdown


def _context(spark):
    try:
        return spark.sparkContext
    except Exception:  # noqa: BLE001 (Spark Connect: no SparkContext, the server's Python runs the source)
        return None


def worker_python(spark) -> str | None:
    """The Python the source's workers run. pyspark gives a registered data source the interpreter
    ``PYSPARK_PYTHON`` named when the context started, else ``python3`` on PATH; the session's
    ``spark.pyspark.python`` is not consulted for it, so a venv not on PATH failed with a long Py4J trace.
    Here: ``PYSPARK_PYTHON`` as it was, else ``spark.pyspark.python`` (both the user's choice: kltool may
    reach it shipped, see ship_kltool), else pyspark's default ``python3`` when it can import kltool and
    pyarrow, else this interpreter. When none can, one line says what to set (MissingDependency)."""
    import shutil
    import subprocess
    import sys

    from ..errors import MissingDependency

    sc = _context(spark)
    if sc is None:
        return None
    conf = sc.getConf().get("spark.pyspark.python", None)
    if os.environ.get("PYSPARK_PYTHON"):
        return getattr(sc, "pythonExec", None) or os.environ["PYSPARK_PYTHON"]
    if conf:
        return conf
    current = getattr(sc, "pythonExec", None) or "python3"
    found = shutil.which(current)
    if found and os.path.realpath(found) == os.path.realpath(sys.executable):
        return current
    try:
        ok = found is not None and subprocess.run([found, "-c", "import kltool.spark.datasource, pyarrow"],
                                                  capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if ok:
        return current
    if sys.executable:
        return sys.executable  # this interpreter has kltool and pyarrow: it is running this
    raise MissingDependency(f"Spark's Python workers would run {current}, which cannot import kltool and pyarrow: "
                            "set PYSPARK_PYTHON (or spark.pyspark.python) to a Python with kltool[spark] installed")
