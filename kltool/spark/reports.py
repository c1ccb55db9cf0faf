"""Reports over Kafka log dirs as Spark DataFrames, built on the ``kafka-log`` data source.

Every function takes a SparkSession (with ``kafka-log`` registered, see :func:`kltool.spark.session`),
the paths (a log dir, partition directories, ``.log`` files, or a tree of log dirs) and optional
``topic`` glob / ``partition`` spec (``"0,2,5-7"``), and returns a DataFrame.

- :func:`sizes`: per partition, with per-topic and grand totals (ROLLUP): segments, bytes on disk,
  batches, records, batch bytes, damaged bytes, CRC errors, compression mix, bytes per record.
- :func:`offsets_by_time`: per partition, the first offset whose timestamp is >= T (Kafka's
  ListOffsets by time), as a Spark aggregation over batches and then the records of one batch.
- :func:`counts`: true record counts (data and control records), first/last offsets and timestamps.
- :func:`timeline`: batches, records and bytes per topic and hour (by each batch's max timestamp).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .datasource import NAME

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
KEYS = ["topic", "partition"]


def load(spark: SparkSession, paths, level: str = "records", topic: str | None = None,
         partition: str | Iterable[int] | None = None, storage_options: dict | None = None, *,
         schema: str | None = None, **options) -> DataFrame:
    """``spark.read.format("kafka-log")`` with kltool's options (``storage_options`` become
    ``storage.K`` options: endpoint and credentials for object-store paths; ``schema``: a narrower one).
    The reports count damaged data apart (``damaged_bytes``), so records are read with
    ``failOnDataLoss=false`` unless given."""
    if isinstance(paths, str):
        paths = [paths]
    r = spark.read.format(NAME).option("paths", json.dumps([str(p) for p in paths])).option("level", level)
    if schema is not None:
        r = r.schema(schema)
    if level == "records":
        options.setdefault("failOnDataLoss", False)
    for k, v in (storage_options or {}).items():
        r = r.option(f"storage.{k}", str(v))
    if topic:
        r = r.option("topic", topic)
    if partition is not None and partition != "":
        if not isinstance(partition, str):
            partition = ",".join(str(p) for p in sorted(partition))
        r = r.option("partition", partition)
    options.setdefault("minPartitions", spark.sparkContext.defaultParallelism)
    for k, v in options.items():
        if v is not None:
            r = r.option(k, str(v).lower() if isinstance(v, bool) else str(v))
    return r.load()


def _sorted(df: DataFrame, *cols) -> DataFrame:
    """A small result in one sorted partition (no range-partitioning job, unlike orderBy)."""
    return df.coalesce(1).sortWithinPartitions(*cols)


def _keyed(df: DataFrame) -> DataFrame:
    """Lone .log files outside a partition directory have no topic/partition: '' and -1."""
    return df.fillna({"topic": ""}).withColumn("partition", F.coalesce("partition", F.lit(-1)))


def sizes(spark: SparkSession, paths, topic=None, partition=None, storage_options=None) -> DataFrame:
    """Per partition, per topic (partition null) and in total (topic and partition null); ``scope``
    says which. ``bytes`` is the size of the .log files (= ``kltool info``), ``batches``/``records``/
    ``batch_bytes`` are what ``kltool verify --deep`` counts, ``damaged_bytes`` its damaged regions
    (the same topic-partition under several log dirs, e.g. replicas in a backup, adds up)."""
    segs = _keyed(load(spark, paths, "segments", topic, partition, storage_options)).groupBy(KEYS).agg(
        F.count("*").alias("segments"), F.sum("bytes").alias("bytes"))
    codec_cols = [F.sum(F.when(F.col("compression") == c, 1).otherwise(0)).alias(f"b_{c}") for c in CODECS]
    bats = _keyed(load(spark, paths, "batches", topic, partition, storage_options)).groupBy(KEYS).agg(
        F.count("*").alias("batches"), F.sum(F.coalesce("count", F.lit(0))).alias("records"),
        F.sum("size").alias("batch_bytes"),
        F.sum(F.when(F.col("crc_valid"), 0).otherwise(1)).alias("crc_errors"),
        F.sum(F.when(F.col("is_control"), F.col("count")).otherwise(0)).alias("control_records"),
        *codec_cols)
    dmg = _keyed(load(spark, paths, "damage", topic, partition, storage_options)).filter(F.col("kind") != "crc_mismatch") \
        .groupBy(KEYS).agg(F.sum("length").alias("damaged_bytes"))
    per = segs.join(F.broadcast(bats), KEYS, "left").join(F.broadcast(dmg), KEYS, "left").fillna(0)
    sums = ["segments", "bytes", "batches", "records", "control_records", "batch_bytes", "damaged_bytes",
            "crc_errors"] + [f"b_{c}" for c in CODECS]
    rolled = per.rollup(*KEYS).agg(*[F.sum(c).alias(c) for c in sums], F.grouping_id().alias("_g"))
    mix = F.concat_ws(",", *[F.when(F.col(f"b_{c}") > 0, F.concat(F.lit(f"{c}="), F.col(f"b_{c}")))
                             for c in CODECS])
    scope = F.when(F.col("_g") == 0, "partition").when(F.col("_g") == 1, "topic").otherwise("total")
    out = rolled.select(
        scope.alias("scope"), "topic", "partition",
        *[F.col(c).cast("long").alias(c) for c in ("segments", "bytes", "batches", "records", "control_records",
                                                     "batch_bytes", "damaged_bytes", "crc_errors")],
        mix.alias("compression"),
        F.when(F.col("records") > 0, F.round(F.col("bytes") / F.col("records"), 1)).alias("bytes_per_record"),
    )
    return _sorted(out, F.col("topic").asc_nulls_last(), F.col("partition").asc_nulls_last())


def offsets_by_time(spark: SparkSession, paths, timestamp: int, topic=None, partition=None,
                    storage_options=None) -> DataFrame:
    """For each partition, as ``kltool offsets --time``: ``time`` = the time asked (``timestamp``,
    epoch ms), ``offset`` = the first offset whose record timestamp is >= it and ``timestamp`` = that
    record's timestamp; both null when no record is that new (Kafka then answers the log end offset).

    Two Spark aggregations: over batch headers, the lowest batch whose max timestamp is >= T
    (collected: one row per partition); then over the records of only those batches (the reader
    seeks to them through the offset index). Control records count, as in the broker's lookup.
    """
    timestamp = int(timestamp)
    bats = load(spark, paths, "batches", topic, partition, storage_options).filter(
        F.col("crc_valid") & (F.col("max_timestamp") >= timestamp) & F.col("topic").isNotNull())
    first = bats.groupBy(KEYS).agg(F.min(F.struct("base_offset", "last_offset")).alias("b")).collect()
    parts = load(spark, paths, "segments", topic, partition, storage_options).select(KEYS).distinct()
    schema = "topic string, partition int, offset long, record_ts long"
    if not first:
        found = spark.createDataFrame([], schema)
    else:
        starts: dict = {}
        ends: dict = {}
        for r in first:
            starts.setdefault(r["topic"], {})[str(r["partition"])] = r["b"]["base_offset"]
            ends.setdefault(r["topic"], {})[str(r["partition"])] = r["b"]["last_offset"] + 1
        assign = {t: sorted(int(p) for p in ps) for t, ps in starts.items()}
        recs = load(spark, paths, "records", None, None, storage_options, assign=json.dumps(assign),
                    startingOffsets=json.dumps(starts), endingOffsets=json.dumps(ends),
                    includeControl=True, includeHeaders=False)
        ts_ms = F.unix_millis("timestamp")
        found = (recs.filter(ts_ms >= timestamp)
                 .groupBy(KEYS).agg(F.min(F.struct("offset", ts_ms.alias("ts"))).alias("m"))
                 .select(*KEYS, F.col("m.offset").alias("offset"), F.col("m.ts").alias("record_ts")))
    out = parts.join(F.broadcast(found), KEYS, "left").select(
        *KEYS, F.timestamp_millis(F.lit(timestamp).cast("long")).alias("time"), "offset",
        F.timestamp_millis("record_ts").alias("timestamp"))
    return _sorted(out, *KEYS)


def counts(spark: SparkSession, paths, topic=None, partition=None, storage_options=None) -> DataFrame:
    """True record counts per partition from the decoded records (a consumer's view: ``records``
    excludes control records, counted apart from the batch headers), ``damaged_bytes`` (unreadable
    regions and batches with a bad CRC: their records are not counted), first/last offsets and
    the lowest/highest record timestamps, and Kafka's ``log_start_offset`` (the log-start-offset
    checkpoint or the first segment, as ``kltool info``) and ``log_end_offset`` (after the last valid
    batch); ``offset_span`` - ``records`` is what compaction, aborted-transaction markers, deleted
    records and gaps take."""
    recs = _keyed(load(spark, paths, "records", topic, partition, storage_options, includeHeaders=False)).groupBy(KEYS).agg(
        F.count("*").alias("records"), F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset"),
        F.min("timestamp").alias("min_timestamp"), F.max("timestamp").alias("max_timestamp"))
    bats = _keyed(load(spark, paths, "batches", topic, partition, storage_options)).filter("crc_valid").groupBy(KEYS).agg(
        F.sum(F.when(F.col("is_control"), F.col("count")).otherwise(0)).cast("long").alias("control_records"),
        (F.max("last_offset") + 1).alias("log_end_offset"))
    parts = _keyed(load(spark, paths, "segments", topic, partition, storage_options)).groupBy(KEYS).agg(
        F.min("log_start_offset").alias("log_start_offset"))
    dmg = _keyed(load(spark, paths, "damage", topic, partition, storage_options)).groupBy(KEYS).agg(
        F.sum("length").alias("damaged_bytes"))
    return _sorted(parts.join(F.broadcast(recs), KEYS, "left").join(F.broadcast(bats), KEYS, "left")
            .join(F.broadcast(dmg), KEYS, "left")
            .select(*KEYS, F.coalesce("records", F.lit(0)).alias("records"),
                    F.coalesce("control_records", F.lit(0)).alias("control_records"),
                    "first_offset", "last_offset", "log_start_offset",
                    F.coalesce("log_end_offset", "log_start_offset").alias("log_end_offset"),
                    (F.coalesce("log_end_offset", "log_start_offset") - F.col("log_start_offset")).alias("offset_span"),
                    "min_timestamp", "max_timestamp",
                    F.coalesce("damaged_bytes", F.lit(0)).cast("long").alias("damaged_bytes")), *KEYS)


def timeline(spark: SparkSession, paths, topic=None, partition=None, unit: str = "hour",
             storage_options=None) -> DataFrame:
    """Records (control records too) per topic and ``unit`` (hour, day, minute), each record in the
    bucket of its own timestamp; ``batches`` and ``bytes`` by each batch's max timestamp (from the batch
    headers)."""
    b = load(spark, paths, "batches", topic, partition, storage_options).filter(F.col("max_timestamp") >= 0)
    bats = (b.withColumn("time", F.date_trunc(unit, F.timestamp_millis("max_timestamp")))
            .groupBy("topic", "time").agg(F.count("*").alias("batches"), F.sum("size").alias("bytes")))
    r = load(spark, paths, "records", topic, partition, storage_options, schema="topic STRING, timestamp TIMESTAMP",
             includeHeaders=False, includeControl=True)
    recs = (r.filter(F.unix_millis("timestamp") >= 0).withColumn("time", F.date_trunc(unit, "timestamp"))
            .groupBy("topic", "time").agg(F.count("*").alias("records")))
    out = bats.join(recs, ["topic", "time"], "full").select(
        "topic", "time", F.coalesce("batches", F.lit(0)).alias("batches"),
        F.coalesce("records", F.lit(0)).alias("records"), F.coalesce("bytes", F.lit(0)).alias("bytes"))
    return _sorted(out, "topic", "time")


REPORTS = {
    "sizes": sizes,
    "offsets-by-time": offsets_by_time,
    "counts": counts,
    "timeline": timeline,
}
