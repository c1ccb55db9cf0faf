"""The kafka-log data source and the reports on a real local SparkSession (one, shared by the
module: starting Spark costs ~15 s), compared with kltool's own reading of the same files."""

from __future__ import annotations

import pytest

from .conftest import FIXTURES, ORACLE, REAL
from .test_spark_helpers import brute_offset_for_time, kltool_batches, kltool_records, local_spark
from .test_spark_remote import s3  # noqa: F401 (the S3 server fixture)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

WILLIAM = REAL / "william0423-indexed-zk"
DIRS = [WILLIAM] + [ORACLE / n for n in (
    "v2-multi-segment-0", "v2-mixed-codecs-0", "v2-txn-0", "v1-gzip-0", "v0-snappy-0", "v2-gzip-headers-0",
    "v2-compacted-0", "v2-logappend-0", "v2-mixed-magic-0", "damaged-v2-crc-0", "damaged-v2-zero-tail-0")]


@pytest.fixture(scope="module")
def spark():
    # AQE off: it only adds planning time on data this small (saves ~0.5 s per report)
    # pushdown forced on, as spark-report has it: every query here loads its own DataFrame
    s = local_spark("kltool-tests", {"spark.sql.adaptive.enabled": "false", "spark.sql.codegen.wholeStage": "false"},
                    pushdown=True)
    yield s
    s.stop()


def load(spark, paths, **opts):
    from kltool.spark.reports import load as _load

    return _load(spark, [str(p) for p in paths], **opts)


def spark_records(df) -> list[tuple]:
    from pyspark.sql import functions as F

    rows = df.select("topic", "partition", "offset", F.unix_millis("timestamp").alias("ts"), "timestampType",
                     "key", "value", "headers").collect()
    out = []
    for r in rows:
        hs = None if r.headers is None else tuple(
            (h.key, None if h.value is None else bytes(h.value)) for h in r.headers)
        out.append((r.topic, r.partition, r.offset, r.ts, r.timestampType,
                    None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value), hs))
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


def test_records_equal_kltool_decoding(spark):
    df = load(spark, DIRS)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    n_segments = sum(len(p.segments) for p in __import__("kltool").open_path(WILLIAM).partitions)
    assert load(spark, [WILLIAM], maxPartitionBytes=0).rdd.getNumPartitions() == n_segments
    assert load(spark, [WILLIAM]).rdd.getNumPartitions() <= 3  # small segments packed (local[2])
    got = spark_records(df)
    expected = kltool_records(DIRS)
    assert len(got) == len(expected) > 1500
    assert got == expected  # offsets, timestamps, types, keys, values, headers, exactly
    topics = {r[0] for r in got}
    assert {"v2-multi-segment", "v1-gzip", "damaged-v2-zero-tail", "__consumer_offsets"} <= topics


def test_batches_level_equals_the_walker(spark):
    rows = load(spark, DIRS, level="batches").select(
        "topic", "partition", "segment", "position", "size", "last_offset", "magic", "compression", "crc_valid",
        "max_timestamp", "is_control").collect()
    assert sorted(tuple(r) for r in rows) == kltool_batches(DIRS)
    dmg = load(spark, [ORACLE / "damaged-v2-zero-tail-0", ORACLE / "damaged-v2-crc-0"], level="damage").collect()
    assert sorted((r.topic, r.kind) for r in dmg) == [("damaged-v2-crc", "crc_mismatch"),
                                                      ("damaged-v2-zero-tail", "zero_run")]


def test_sizes_equal_info_and_verify(spark, kl):
    from kltool.spark.reports import sizes

    # (sample-logdir is left out: its __consumer_offsets-17 would add to William's)
    paths = [WILLIAM, ORACLE / "v1-gzip-0", ORACLE / "v0-lz4-0", ORACLE / "v2-mixed-codecs-0",
             ORACLE / "damaged-v2-zero-tail-0", ORACLE / "damaged-v2-crc-0"]
    rows = [r.asDict() for r in sizes(spark, [str(p) for p in paths]).collect()]
    info = {(d["topic"], d["partition"]): d for d in kl("--json", "info", *paths).json() if d["type"] == "partition"}
    per = {(r["topic"], r["partition"]): r for r in rows if r["scope"] == "partition"}
    assert set(per) == set(info)
    for k, d in info.items():
        assert (per[k]["segments"], per[k]["bytes"]) == (d["segments"], d["bytes"]), k
    verify = [d for d in kl("--json", "verify", "--deep", *paths).json() if d["type"] == "summary"][0]
    total = [r for r in rows if r["scope"] == "total"][0]
    assert (total["batches"], total["records"], total["batch_bytes"], total["damaged_bytes"]) == (
        verify["batches"], verify["records"], verify["bytes"], verify["damaged_bytes"])
    assert total["bytes"] == sum(d["bytes"] for d in info.values())
    assert total["segments"] == sum(d["segments"] for d in info.values())
    mixed = per[("v2-mixed-codecs", 0)]
    assert mixed["compression"] == "none=1,gzip=1,snappy=1,lz4=1,zstd=1"
    topic_rows = {r["topic"]: r for r in rows if r["scope"] == "topic"}
    assert topic_rows["__consumer_offsets"]["records"] == sum(
        r["records"] for k, r in per.items() if k[0] == "__consumer_offsets")


def test_offsets_by_time_equal_brute_force(spark):
    from kltool.spark.datasource import offset_for_time
    from kltool.spark.reports import offsets_by_time
    from kltool.storage import open_paths

    paths = [WILLIAM, ORACLE / "v2-multi-segment-0", ORACLE / "v2-txn-0", ORACLE / "v2-logappend-0"]
    stamps = sorted({r[3] for r in kltool_records(paths, include_control=True)})
    parts = open_paths([str(p) for p in paths]).partitions
    for ts in (stamps[len(stamps) // 2], stamps[-1] - 1, stamps[-1] + 1):
        brute = brute_offset_for_time(paths, ts)
        rows = offsets_by_time(spark, [str(p) for p in paths], ts).collect()
        assert {r.time.timestamp() * 1000 for r in rows} == {ts}  # the time asked, apart from the record's
        got = {(r.topic, r.partition): (r.offset, None if r.timestamp is None else round(r.timestamp.timestamp() * 1000))
               for r in rows}
        assert set(got) == {(p.topic, p.partition) for p in parts}
        assert {k: v for k, v in got.items() if v[0] is not None} == brute, ts
        for p in parts:  # and kltool's own per-partition answer (through the indexes)
            assert offset_for_time(p, ts) == brute.get((p.topic, p.partition)), (ts, p)


def test_counts_and_timeline(spark):
    from kltool.spark.reports import counts, timeline

    paths = [WILLIAM, ORACLE / "v2-txn-0", ORACLE / "v2-compacted-0"]
    recs = kltool_records(paths)
    allr = kltool_records(paths, include_control=True)
    got = {(r.topic, r.partition): r for r in counts(spark, [str(p) for p in paths]).collect()}
    for key, r in got.items():
        mine = [x for x in recs if (x[0], x[1]) == key]
        ctrl = len([x for x in allr if (x[0], x[1]) == key]) - len(mine)
        assert (r.records, r.control_records) == (len(mine), ctrl), key
        if mine:
            assert (r.first_offset, r.last_offset) == (mine[0][2], mine[-1][2])
            assert int(r.min_timestamp.timestamp() * 1000) == min(x[3] for x in mine)
    assert got[("v2-compacted", 0)].offset_span > got[("v2-compacted", 0)].records  # compaction gaps
    from kltool.storage import open_paths

    for p in open_paths([str(x) for x in paths]).partitions:  # Kafka's names and values, as kltool info
        r = got[(p.topic, p.partition)]
        assert (r.log_start_offset, r.log_end_offset) == (p.log_start_offset(), p.log_end_offset()), p
    tl = timeline(spark, [str(p) for p in paths]).collect()
    assert sum(r.records for r in tl) == len(allr)
    assert all(r.damaged_bytes == 0 for r in got.values())


def test_timeline_buckets_records_by_their_own_timestamps(spark, kl, tmp_path):
    import datetime as dt
    import json

    from kltool.spark.reports import timeline

    hour = 1_700_002_800_000  # a whole hour (UTC)
    ld = tmp_path / "ld"
    assert kl("create", ld, "tl", "-p", "1").code == 0
    stamps = [hour - 60_000, hour + 60_000, hour + 120_000, hour + 3_600_000 + 5]  # batches of two
    stdin = "".join(json.dumps({"value": "v", "timestamp": t}) + "\n" for t in stamps)
    assert kl("append", ld, "tl", "-p", "0", "--batch-records", "2", stdin=stdin).code == 0
    got = {int(r.time.replace(tzinfo=dt.UTC).timestamp() * 1000): (r.records, r.batches)
           for r in timeline(spark, [str(ld)]).collect()}
    assert {k: v[0] for k, v in got.items()} == {hour - 3_600_000: 1, hour: 2, hour + 3_600_000: 1}
    assert {k: v[1] for k, v in got.items() if v[1]} == {hour: 1, hour + 3_600_000: 1}  # by max timestamp


def test_counts_name_the_damaged_bytes(spark, kl):
    from kltool.spark.reports import counts

    d = ORACLE / "damaged-v2-zero-tail-0"
    [r] = counts(spark, [str(d)]).collect()
    verify = [x for x in kl("--json", "verify", d).json() if x["type"] == "summary"][0]
    assert r.damaged_bytes == verify["damaged_bytes"] > 0
    assert r.records == len(kltool_records([d]))
    res = kl("spark-report", "counts", d)
    assert res.code == 0 and f"damaged-v2-zero-tail-0: {r.damaged_bytes} damaged bytes were not read" in res.err, res


def test_cli_writes_parquet(spark, kl, tmp_path):
    out = tmp_path / "x.parquet"
    res = kl("spark-report", "sizes", FIXTURES / "sample-logdir", "--output", out)
    assert res.code == 0, res
    assert "__consumer_offsets" in res.out and "total" in res.out
    import pyarrow.parquet as pq

    t = pq.read_table(out)
    rows = t.to_pylist()
    assert t.column_names[:4] == ["scope", "topic", "partition", "segments"]
    total = [r for r in rows if r["scope"] == "total"][0]
    info = [d for d in kl("--json", "info", FIXTURES / "sample-logdir").json() if d["type"] == "summary"][0]
    assert (total["segments"], total["bytes"]) == (info["segments"], info["bytes"])
    res = kl("--json", "spark-report", "offsets-by-time", FIXTURES / "sample-logdir", "--time", "0",
             "--output", tmp_path / "o.csv")
    assert res.code == 0, res
    lines = res.json()
    assert lines[-1]["type"] == "summary" and lines[-1]["rows"] == len(lines) - 1
    assert all(d["type"] == "offsets_by_time" for d in lines[:-1])
    csv = (tmp_path / "o.csv").read_text().splitlines()
    assert csv[0] == '"topic","partition","time","offset","timestamp"'
    assert csv[1].startswith('"__consumer_offsets",17,"1970-01-01T00:00:00.000Z",0,"2022-12-03T12:40:52.901Z"'), csv
    assert [(d["time"], d["offset"], d["timestamp"]) for d in lines if d.get("partition") == 17] == [
        (0, 0, 1670071252901)]  # as kltool --json offsets --time 0 gives
    assert spark.sparkContext._jsc is not None  # the shared session is still alive


def test_plain_load_and_planner_errors(spark):
    from kltool.errors import UsageError
    from kltool.spark import spark_error

    # the one-line change from format("kafka"): load(PATH) like any file source
    assert spark.read.format("kafka-log").load(str(ORACLE / "v2-txn-0")).count() == 12

    with pytest.raises(Exception) as ei:
        load(spark, [ORACLE / "v2-txn-0"], startingOffsets="bogus").count()
    err = spark_error(ei.value)
    assert isinstance(err, UsageError) and "startingOffsets" in str(err)


def test_a_timestamp_past_sparks_range_is_one_line_naming_the_record(spark, tmp_path):
    """A record whose timestamp (ms) does not fit a Spark timestamp (us, int64): Spark's Kafka source fails on
    it (millisToMicros overflows); so does the read, with one line naming the segment and the offset (was
    pyarrow's "ArrowInvalid: overflow", an internal error). A schema without the timestamp still reads."""
    import subprocess
    import sys

    from kltool.spark import spark_error

    ld = tmp_path / "ld"
    kl = [sys.executable, "-m", "kltool"]
    subprocess.run(kl + ["create", str(ld), "t", "--partitions", "1"], check=True, capture_output=True)
    for ts in ("1700000000000", str(1 << 62)):
        subprocess.run(kl + ["append", str(ld), "t", "-p", "0", "--key", "k", "--value", "v", "--timestamp", ts],
                       check=True, capture_output=True)
    with pytest.raises(Exception) as ei:
        load(spark, [ld]).collect()
    err = str(spark_error(ei.value))
    assert "the record at offset 1 has timestamp 4611686018427387904 ms" in err and "t-0" in err, err
    assert "\n" not in err and "ArrowInvalid" not in err, err
    assert spark.read.format("kafka-log").schema("offset LONG, value BINARY").load(str(ld)).count() == 2
    r = subprocess.run(kl + ["spark-report", "counts", str(ld)], capture_output=True, text=True)
    assert r.returncode == 2 and "offset 1 has timestamp" in r.stderr and "internal error" not in r.stderr, r.stderr


def test_pushed_down_filters_read_less_and_answer_the_same(spark):
    import datetime as dt

    from pyspark.sql import functions as F

    multi = ORACLE / "v2-multi-segment-0"  # segments at 0, 400, 800
    expected = kltool_records([multi])

    class Fresh:  # pyspark 4.3.0 reuses a DataFrame's pushed-down plan in its later scans: one per query
        def __getattr__(self, name):
            return getattr(spark.read.format("kafka-log").option("maxPartitionBytes", "0").load(str(multi)), name)

    df = Fresh()
    assert df.rdd.getNumPartitions() == 3

    def offsets(q):
        return sorted(r.offset for r in q.select("offset").collect())

    q = df.where("partition = 0 AND offset >= 900")
    assert q.rdd.getNumPartitions() == 1  # only the segment at 800 is read
    assert offsets(q) == [r[2] for r in expected if r[2] >= 900]
    q = df.where(F.col("offset").between(390, 410))
    assert q.rdd.getNumPartitions() == 2
    assert offsets(q) == list(range(390, 411))
    q = df.where("offset IN (5, 401) AND topic = 'v2-multi-segment'")
    assert q.rdd.getNumPartitions() == 2 and offsets(q) == [5, 401]
    assert offsets(df.where("offset > 1198 OR offset < 1")) == [0, 1199]  # an OR is not pushed: all read
    assert spark.read.format("kafka-log").load(str(multi)).where("topic = 'nope'").count() == 0
    assert df.where("partition IN (1, 2)").count() == 0

    # timestamps: the broker's lookup finds where to start; Spark checks every row again
    stamps = sorted(r[3] for r in expected)
    ts = stamps[700]
    t = dt.datetime.fromtimestamp(ts / 1000, dt.UTC)
    q = df.where(F.col("timestamp") >= F.lit(t))
    assert q.rdd.getNumPartitions() < 3
    assert offsets(q) == sorted(r[2] for r in expected if r[3] >= ts)
    assert offsets(df.where(F.col("timestamp") > F.lit(t))) == sorted(r[2] for r in expected if r[3] > ts)
    assert offsets(df.where(F.col("timestamp") < F.lit(t))) == sorted(r[2] for r in expected if r[3] < ts)

    # many partitions and topics: the same rows as Spark filtering everything itself
    everything = load(spark, DIRS).select("topic", "partition", "offset").collect()
    for cond in ("partition = 28 AND offset >= 8000", "topic IN ('v2-txn', 'v1-gzip') AND offset BETWEEN 3 AND 7",
                 "partition >= 1 AND partition < 29", "offset = 0"):
        got = sorted(tuple(r) for r in load(spark, DIRS).where(cond).select("topic", "partition", "offset").collect())
        base = sorted(tuple(r) for r in everything if _holds(cond, r))
        assert got == base, cond


def _holds(cond, r):
    env = {"topic": r.topic, "partition": r.partition, "offset": r.offset}
    py = cond.replace(" AND ", " and ").replace(" = ", " == ").replace(" IN ", " in ")
    if "BETWEEN" in py:
        py = py.replace("offset BETWEEN 3 and 7", "3 <= offset <= 7")
    return eval(py, {}, env)  # noqa: S307 (the test's own literals)


def test_a_narrower_schema_skips_decoding_keys_values_headers(spark):
    from pyspark.sql import functions as F

    d = ORACLE / "v2-gzip-headers-0"
    narrow = spark.read.format("kafka-log").schema("offset LONG, timestamp TIMESTAMP").load(str(d))
    assert narrow.columns == ["offset", "timestamp"]
    got = sorted((r.offset, r.ms) for r in narrow.select("offset", F.unix_millis("timestamp").alias("ms")).collect())
    assert got == sorted((r[2], r[3]) for r in kltool_records([d]))
    assert spark.read.format("kafka-log").schema("partition INT, offset LONG").load(str(d)).where(
        "offset >= 2").count() == len([r for r in kltool_records([d]) if r[2] >= 2])
    with pytest.raises(Exception) as ei:
        spark.read.format("kafka-log").schema("offset LONG, nope STRING").load(str(d)).collect()
    assert "no column nope" in str(ei.value)


def test_object_storage_through_spark_and_spark_report(spark, kl, s3):  # noqa: F811
    from pyspark.sql import functions as F

    from .test_spark_remote import BUCKET

    r = spark.read.format("kafka-log")
    for k, v in s3.items():
        r = r.option(f"storage.{k}", v)
    remote = r.load(f"s3a://{BUCKET}/william")
    local = spark.read.format("kafka-log").load(str(WILLIAM))
    cols = ["topic", "partition", "offset", F.unix_millis("timestamp").alias("ts"), "key", "value"]
    assert sorted(map(tuple, remote.select(cols).collect())) == sorted(map(tuple, local.select(cols).collect()))
    opts = [x for k, v in s3.items() for x in ("--storage-option", f"{k}={v}")]
    res = kl("--json", "spark-report", "counts", f"s3://{BUCKET}/william", *opts)
    assert res.code == 0, res
    res_local = kl("--json", "spark-report", "counts", WILLIAM)
    assert [d for d in res.json() if d["type"] == "counts"] == [d for d in res_local.json() if d["type"] == "counts"]
    bad = kl("spark-report", "sizes", f"s3://{BUCKET}/william", "--topic", "nope*", *opts)
    assert bad.code == 2 and "--topic 'nope*'" in bad.err


def test_split_segments_through_spark(spark):
    from pyspark.sql import functions as F

    p = WILLIAM / "__consumer_offsets-28"
    split = load(spark, [p], splitBytes=64 << 10, maxPartitionBytes=0)  # one task per piece
    whole = load(spark, [p], splitBytes=0, maxPartitionBytes=0)
    assert whole.rdd.getNumPartitions() == 1 and split.rdd.getNumPartitions() >= 4
    cols = ["offset", F.unix_millis("timestamp").alias("ts"), "key", "value"]
    assert sorted(map(tuple, split.select(cols).collect())) == sorted(map(tuple, whole.select(cols).collect()))


def test_schema_edge_cases(spark):
    from kltool.errors import UsageError
    from kltool.spark import spark_error

    d = str(ORACLE / "v2-txn-0")
    spark.conf.set("spark.sql.timestampType", "TIMESTAMP_NTZ")  # Spark's Kafka source declares timestamp_ltz too
    try:
        df = spark.read.format("kafka-log").load(d)
        assert dict(df.dtypes)["timestamp"] == "timestamp" and df.count() == 12
        assert len(df.select("timestamp").collect()) == 12
    finally:
        spark.conf.unset("spark.sql.timestampType")
    got = spark.read.format("kafka-log").schema("OFFSET LONG, Partition INT").load(d).select("offset").collect()
    assert sorted(r.offset for r in got) == sorted(r[2] for r in kltool_records([ORACLE / "v2-txn-0"]))
    with pytest.raises(Exception) as ei:
        spark.read.format("kafka-log").schema("offset INT, value STRING").load(d).count()
    err = spark_error(ei.value)
    assert isinstance(err, UsageError) and "offset is int, the source gives bigint" in str(err), err
    assert len(str(err).splitlines()) == 1
