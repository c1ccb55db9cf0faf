"""kltool.spark.options: the kafka-log source's options and the filters Spark pushes down, checked
without a JVM (pyspark's filter classes are plain Python)."""

from __future__ import annotations

import datetime as dt

import pytest

pytest.importorskip("pyarrow")
sds = pytest.importorskip("pyspark.sql.datasource")

from kltool.errors import UsageError  # noqa: E402
from kltool.spark import options as o  # noqa: E402
from kltool.spark.planning import _narrowed  # noqa: E402


def test_option_names_are_case_insensitive_and_paths_come_from_path_or_paths():
    opts = o.normalize_options({"Path": "/a", "startingOffsets": "earliest"})
    assert opts == {"path": "/a", "startingoffsets": "earliest"}
    assert o.option_paths(opts) == ["/a"]
    assert o.option_paths({"paths": '["/a", "/b"]'}) == ["/a", "/b"]
    assert o.option_paths({"paths": "/not-json"}) == ["/not-json"]
    with pytest.raises(UsageError, match="kafka-log needs a path"):
        o.option_paths({})


def test_spark_offsets_json():
    assert o._spark_offsets("earliest", "x") == o.EARLIEST and o._spark_offsets("latest", "x") == o.LATEST
    assert o._spark_offsets('{"t":{"0":23,"1":-2}}', "x") == {("t", 0): 23, ("t", 1): -2}
    with pytest.raises(UsageError, match='option startingOffsets: expected earliest, latest or JSON'):
        o._spark_offsets("{bad", "startingOffsets")


def test_integer_options_and_assign():
    assert o._int({"n": " 7 "}, "n") == 7 and o._int({"n": ""}, "n") is None
    with pytest.raises(UsageError, match="option n must be an integer, not 'x'"):
        o._int({"n": "x"}, "n")
    assert o._assigned({"assign": '{"a":[0,2]}'}) == {("a", 0), ("a", 2)}
    with pytest.raises(UsageError, match="option assign"):
        o._assigned({"assign": "[1]"})
    assert o.storage_options({"storage.region": "x", "path": "/p"}) == {"region": "x"}


def pushed(*filters) -> o.Pushed:
    p = o.Pushed()
    for f in filters:
        o._push(p, f)
    return p


def test_offset_and_partition_filters_give_ranges():
    p = pushed(sds.GreaterThan(("offset",), 995), sds.LessThanOrEqual(("offset",), 2000),
               sds.In(("partition",), (0, 2)), sds.GreaterThanOrEqual(("partition",), 1))
    assert (p.offset_min, p.offset_end) == (996, 2001)
    assert p.partitions == {0, 2} and p.partition_min == 1
    assert p.wants("t", 2) and not p.wants("t", 0) and not p.wants("t", None)
    q = pushed(sds.EqualTo(("offset",), 5), sds.LessThan(("offset",), 5))
    assert (q.offset_min, q.offset_end) == (5, 5)  # an AND of both: nothing


def test_topic_and_timestamp_filters():
    t = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    p = pushed(sds.In(("topic",), ("a", "b")), sds.EqualTo(("topic",), "b"), sds.GreaterThan(("timestamp",), t))
    assert p.topics == {"b"}
    assert p.time_min == int(t.timestamp() * 1000) + 1  # > t: the next millisecond
    assert pushed(sds.LessThan(("timestamp",), t)).empty()  # an upper time bound cuts nothing


def test_filters_that_cannot_narrow_are_ignored():
    for f in (sds.EqualTo(("key",), b"x"), sds.EqualTo(("offset",), True), sds.EqualTo(("a", "b"), 1),
              sds.IsNotNull(("offset",)), sds.Not(sds.EqualTo(("offset",), 3)), sds.EqualTo(("offset",), None)):
        assert pushed(f).empty(), f


def test_pushed_bounds_meet_the_options():
    p = pushed(sds.GreaterThan(("offset",), 10), sds.LessThan(("offset",), 100))
    assert _narrowed({"startingoffset": "20"}, p) == {"startingoffset": "20", "endingoffset": "100"}
    assert _narrowed({"endingoffset": "50"}, p) == {"startingoffset": "11", "endingoffset": "50"}


@pytest.mark.parametrize(("opts", "words"), [
    ({"path": "/p", "startingOffset": "1", "statringOffsets": "earliest"}, "unknown option 'statringoffsets'"),
    ({"path": "/p", "includeHeaders": "flase"}, "option includeheaders must be true or false, not 'flase'"),
    ({"path": "/p", "maxRecordsPerBatch": "many"}, "option maxrecordsperbatch must be an integer"),
    ({"path": "/p", "level": "bytes"}, "option level must be one of records, batches, damage, segments"),
    ({"path": "/p", "kafka.isolation.level": "serializable"}, "kafka.isolation.level must be read_uncommitted"),
    ({"path": "/p", "subscribe": "a", "assign": '{"a":[0]}'}, "only one of assign, subscribe and subscribePattern"),
    ({"path": "/p", "subscribePattern": "a("}, "subscribePattern is not a regular expression"),
    ({"path": "/p", "startingOffsetsByTimestamp": "{1}"}, "startingOffsetsByTimestamp: expected JSON"),
    ({"path": "/p", "endingOffsets": '{"t":[1]}'}, "endingOffsets: expected earliest, latest or JSON"),
    ({"path": "/p", "replicas": "two"}, "option replicas must be all or one"),
])
def test_bad_options_are_one_line_errors_at_planning(opts, words):
    with pytest.raises(UsageError) as e:
        o.check_options(o.normalize_options(opts))
    assert words in str(e.value) and len(str(e.value).splitlines()) == 1


def test_a_format_kafka_jobs_options_are_accepted():
    o.check_options(o.normalize_options({
        "path": "/p", "kafka.bootstrap.servers": "h:9092", "kafka.security.protocol": "SSL", "subscribe": "a,b",
        "startingOffsets": "earliest", "endingOffsets": "latest", "includeHeaders": "true", "failOnDataLoss": "false",
        "kafka.isolation.level": "read_committed", "fetchOffset.numRetries": "3", "storage.region": "x"}))


def test_subscribe_and_subscribe_pattern_match_whole_topic_names():
    m = o.topic_matcher({"subscribe": "orders, audit"})
    assert m("orders") and m("audit") and not m("orders2")
    m = o.topic_matcher({"subscribepattern": "ord.*|aud"})
    assert m("orders") and m("aud") and not m("audit") and not m(None)
    assert o.topic_matcher({}) is None
