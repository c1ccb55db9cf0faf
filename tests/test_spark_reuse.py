"""No wrong count from a reused plan. pyspark 4.3.0 keeps what the first filtered query on a DataFrame
planned through filter pushdown (its partitions) and serves it to the later scans of the same
relation (an unfiltered count, a temp view, a union, a cache). kltool's default session and
``register(spark)`` therefore turn pushdown on only where the running Spark keeps a pushed plan to its
own scan; every everyday shape here must give the counts Spark gives without pushdown."""

from __future__ import annotations

import pytest

from .conftest import ORACLE
from .test_spark_helpers import local_spark

pytestmark = [pytest.mark.spark, pytest.mark.slow]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

MULTI = ORACLE / "v2-multi-segment-0"  # offsets 0..1199 in segments at 0, 400, 800
ALL, HIGH, LOW = 1200, 4, 10  # all records; offset > 1195; offset < 10


@pytest.fixture(scope="module")
def spark():
    s = local_spark("kltool-reuse")
    yield s
    s.stop()


def df_of(spark):
    return spark.read.format("kafka-log").option("maxPartitionBytes", "0").load(str(MULTI))


def shapes(spark) -> dict:
    """Each everyday shape's counts."""
    out = {}
    df = df_of(spark)
    out["filtered then plain"] = (df.where("offset > 1195").count(), df.count())
    df = df_of(spark)
    df.createOrReplaceTempView("reuse_v")
    out["temp view"] = (spark.sql("SELECT count(*) FROM reuse_v WHERE offset > 1195").first()[0],
                        spark.sql("SELECT count(*) FROM reuse_v").first()[0])
    spark.sql(f"CREATE OR REPLACE TEMP VIEW reuse_u USING `kafka-log` OPTIONS (path '{MULTI}')")
    out["CREATE TEMP VIEW USING"] = (spark.sql("SELECT count(*) FROM reuse_u WHERE offset > 1195").first()[0],
                                     spark.sql("SELECT count(*) FROM reuse_u").first()[0])
    df = df_of(spark)
    out["union of two filtered"] = (df.where("offset > 1195").unionByName(df.where("offset < 10")).count(),)
    df = df_of(spark)
    first = df.where("offset > 1195").count()
    df.cache()
    out["cache after a filtered count"] = (first, df.count(), df.where("offset < 10").count())
    df.unpersist()
    return out


EXPECTED = {"filtered then plain": (HIGH, ALL), "temp view": (HIGH, ALL), "CREATE TEMP VIEW USING": (HIGH, ALL),
            "union of two filtered": (HIGH + LOW,), "cache after a filtered count": (HIGH, ALL, LOW)}


def test_every_shape_counts_right_in_the_default_session(spark):
    assert shapes(spark) == EXPECTED


def test_pushdown_is_on_by_default_only_where_spark_keeps_a_pushed_plan_to_its_scan(spark):
    from kltool.spark import register
    from kltool.spark.datasource import pushdown_is_scan_scoped

    safe = pushdown_is_scan_scoped(spark)
    assert (spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true") == safe
    register(spark, pushdown=True)  # forced: what the default avoids where Spark reuses plans
    try:
        assert (shapes(spark) == EXPECTED) == safe
    finally:
        register(spark)
    assert shapes(spark) == EXPECTED


def test_planning_errors_are_one_line(spark, tmp_path):
    """A missing path, a bad option value or JSON, an unknown option, a wrong schema: one line from
    Spark, the kltool error's, no Python traceback."""
    from pyspark.errors import PySparkException

    d = str(MULTI)
    cases = [
        (lambda: spark.read.format("kafka-log").load("/nonexistent/kafka-logs").count(), "no such file"),
        (lambda: spark.read.format("kafka-log").option("startingOffsets", "{oops").load(d).count(), "startingOffsets"),
        (lambda: spark.read.format("kafka-log").option("maxRecordsPerBatch", "lots").load(d).count(),
         "maxrecordsperbatch must be an integer"),
        (lambda: spark.read.format("kafka-log").option("startingOffsetz", "1").load(d).count(), "unknown option"),
        (lambda: spark.read.format("kafka-log").schema("offset INT").load(d).count(), "offset is int"),
        (lambda: spark.read.format("kafka-log").load(str(tmp_path / "nothing-*")).count(), "glob matches no"),
    ]
    for run, words in cases:
        with pytest.raises(PySparkException) as e:
            run()
        msg = str(e.value)
        assert words in msg and "Traceback" not in msg, msg
        assert len([ln for ln in msg.splitlines() if ln.strip()]) <= 2, msg  # Spark's line + kltool's


def test_a_glob_path_reads_what_it_matches(spark):
    assert spark.read.format("kafka-log").load(str(MULTI.parent / "v2-multi-seg*")).count() == ALL


def test_readstream_reads_the_same_records(spark, tmp_path):
    """readStream is supported since issue 22 part 4 (tests/test_spark_stream.py): the same rows."""
    df = spark.readStream.format("kafka-log").option("startingOffsets", "earliest").load(str(MULTI))
    q = (df.writeStream.format("memory").queryName("kafka_log_stream").trigger(availableNow=True)
         .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    q.awaitTermination()
    assert spark.sql("SELECT count(*), count(DISTINCT offset) FROM kafka_log_stream").first() == (ALL, ALL)
