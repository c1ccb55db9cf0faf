"""kltool.spark.options: the kafka-log source's options and the filters Spark pushes down, checked
without a JVM (pyspark's filter classes are plain Python)."""

from __future__ import annotations

import datetime as dt
import json
import re

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


_NOT_POSITIVE = [("minPartitions", "0"), ("minPartitions", "-2"), ("maxRecordsPerPartition", "0")]
_UNSUPPORTED_KAFKA = [("auto.offset.reset", "earliest"), ("key.deserializer", "x"), ("value.deserializer", "x"),
                      ("enable.auto.commit", "true"), ("interceptor.classes", "")]


@pytest.mark.parametrize("opts,words", [  # found by tests/broker/test_spark_kafka_campaign.py
    *[({k: v}, f"option {k} must be positive, not {v}") for k, v in _NOT_POSITIVE],
    *[({f"kafka.{k}": v}, f"Kafka option '{k}' is not supported") for k, v in _UNSUPPORTED_KAFKA],
    ({"subscribe": " , "}, "no topics to subscribe to: option subscribe is ' , '"),
    ({"subscribe": ""}, "no topics to subscribe to"),
    ({"subscribePattern": " "}, "the pattern to subscribe is empty"),
    ({"assign": "[]"}, "no topic partitions to assign: option assign is '[]'"),
    ({"assign": "", "subscribe": "a"}, "only one of assign, subscribe and subscribePattern"),
    ({"kafka.isolation.level": "READ_COMMITTED"}, "Invalid value READ_COMMITTED for configuration isolation.level"),
])
def test_what_sparks_kafka_source_refuses_before_reading_is_refused(opts, words):
    """Spark's Kafka source checks these before it reads (validateGeneralOptions); kafka-log took a subscription
    given empty as none (every topic), refused maxRecordsPerPartition as unknown and let the rest through."""
    with pytest.raises(UsageError) as e:
        o.check_options(o.normalize_options({"path": "/p", **opts}))
    assert words in str(e.value) and len(str(e.value).splitlines()) == 1


def test_what_sparks_kafka_source_takes_in_any_case_is_taken():
    o.check_options(o.normalize_options({"path": "/p", "maxRecordsPerPartition": "7", "minPartitions": "1",
                                         "subscribePattern": " cg-.* ", "startingOffsets": " EARLIEST ",
                                         "endingOffsets": "Latest"}))
    assert o._spark_offsets(" EARLIEST ", "x") == o.EARLIEST and o._spark_offsets("Latest", "x") == o.LATEST
    assert o.topic_matcher({"subscribepattern": " cg-.* "})("cg-a")


def test_subscribe_and_subscribe_pattern_match_whole_topic_names():
    m = o.topic_matcher({"subscribe": "orders, audit"})
    assert m("orders") and m("audit") and not m("orders2")
    m = o.topic_matcher({"subscribepattern": "ord.*|aud"})
    assert m("orders") and m("aud") and not m("audit") and not m(None)
    assert o.topic_matcher({}) is None


def test_trigger_options_are_checked_as_spark_checks_them():
    assert [o.time_ms(v, "d") for v in ("15m", "30s", "500", "500ms", "2h", "1d", "1min", " 7S ", "2500us")] == [
        900_000, 30_000, 500, 500, 7_200_000, 86_400_000, 60_000, 7_000, 2]
    assert o.time_ms(None, "d") == 900_000  # Spark's default, 15m
    for opts, words in (({"maxTriggerDelay": "soon"}, "option maxTriggerDelay must be a time"),
                        ({"maxTriggerDelay": "5 weeks"}, "option maxTriggerDelay must be a time"),
                        ({"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
                         "minOffsetsPerTrigger (10) is higher than maxOffsetsPerTrigger (5)"),
                        ({"minOffsetsPerTrigger": "x"}, "option minoffsetspertrigger must be an integer")):
        with pytest.raises(UsageError, match=re.escape(words)):
            o.check_options(o.normalize_options({"path": "/p", **opts}))
    o.check_options(o.normalize_options({"path": "/p", "minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "5",
                                         "maxTriggerDelay": "10s"}))


# -- Spark's timestamp options resolved as the broker's ListOffsets answers them (kltool.spark.planning) -----------

def _starts(path, **kw):
    from kltool.spark.planning import plan_segments

    segs = plan_segments({"path": str(path), **kw})
    return None if not segs else (segs[0].start, segs[-1].end)


def test_special_timestamps_are_what_listoffsets_answers():
    """-1 latest, -2 earliest, -3 the record with the largest timestamp, -4 earliest local (no tiered storage:
    the log start), -5 latest tiered (no offset: the start strategy applies, an end is the log end); other
    negative values are refused, as the broker refuses them (offset i has timestamp T0 + i s here)."""
    from tests.conftest import ORACLE

    d = ORACLE / "v2-multi-segment-0"
    assert _starts(d, startingTimestamp="-1") is None  # the log end: nothing to read
    assert _starts(d, startingTimestamp="-2") == (0, None)
    assert _starts(d, startingTimestamp="-4") == (0, None)
    assert _starts(d, startingTimestamp="-3") == (1199, None)
    assert _starts(d, endingTimestamp="-2") is None
    assert _starts(d, endingTimestamp="-5") == (None, 1200)
    assert _starts(d, endingTimestamp="-1") == (None, 1200)
    assert _starts(d, startingTimestamp="-5", startingOffsetsByTimestampStrategy="latest") is None
    with pytest.raises(UsageError, match=r"^v2-multi-segment-0: no offset matches startingTimestamp -5 \(the broker "
                                         r"answers no offset for latest tiered;"):
        _starts(d, startingTimestamp="-5")
    for kw in ({"startingTimestamp": "-7"}, {"endingOffsetsByTimestamp": '{"v2-multi-segment":{"0":-100}}'}):
        with pytest.raises(UsageError, match=r"^v2-multi-segment-0: \w+ -\d+ is not a timestamp Kafka's ListOffsets "
                                             r"takes"):
            _starts(d, **kw)
    # by partition: special values are not compared before the lookup (Spark compares only those >= 0)
    assert _starts(d, startingOffsetsByTimestamp='{"v2-multi-segment":{"0":-2}}',
                   endingOffsetsByTimestamp='{"v2-multi-segment":{"0":-3}}') == (0, 1199)


def test_read_committed_timestamps_answer_only_below_the_last_stable_offset(tmp_path):
    """With a transaction open at the log end, a timestamp whose first record is at or past the last stable
    offset has no offset (a start: the strategy's error or the LSO; an end: the LSO), -1 is the LSO."""
    import shutil

    from kltool.spark.datasource import KafkaLogReader
    from kltool.storage import open_paths
    from tests.conftest import ORACLE

    from .test_spark_helpers import kltool_records

    d = tmp_path / "v2-txn-0"  # pid 2002's transaction (10-13) left open: its COMMIT marker cut off
    shutil.copytree(ORACLE / "v2-txn-0", d)
    last = [b for b in KafkaLogReader({"path": str(d), "level": "batches"}).read(
        KafkaLogReader({"path": str(d), "level": "batches"}).partitions()[0]) for b in b.to_pylist()][-1]
    log = d / "00000000000000000000.log"
    log.write_bytes(log.read_bytes()[:last["position"]])
    ts = {r[2]: r[3] for r in kltool_records([d])}
    committed = {"kafka.isolation.level": "read_committed"}
    assert open_paths([str(d)]).partitions[0].log_end_offset() == 14
    assert _starts(d, startingTimestamp=str(ts[11])) == (11, None)  # read_uncommitted: the record itself
    with pytest.raises(UsageError, match=rf"^v2-txn-0: no offset matches startingTimestamp {ts[11]} \(no record below "
                                         r"the last stable offset has a timestamp at or after it \(read_committed\);"):
        _starts(d, startingTimestamp=str(ts[11]), **committed)
    assert _starts(d, startingTimestamp=str(ts[11]), startingOffsetsByTimestampStrategy="latest", **committed) is None
    assert _starts(d, startingTimestamp=str(ts[6]), **committed) == (6, 10)
    assert _starts(d, endingTimestamp=str(ts[11]), **committed) == (None, 10)  # no offset: the end is the LSO
    assert _starts(d, endingTimestamp="-1", **committed) == (None, 10)
    assert _starts(d, endingTimestamp="-1") == (None, 14)


def test_a_json_of_partitions_names_every_partition_read():
    """As Spark's Kafka source asserts: startingOffsets/endingOffsets and the by-timestamp JSONs name exactly
    the partitions read (only the option in effect on each side, in Spark's order of preference)."""
    from tests.conftest import ORACLE

    paths = json.dumps([str(ORACLE / "v2-multi-segment-0"), str(ORACLE / "v2-txn-0")])
    both = '{"v2-multi-segment":{"0":5},"v2-txn":{"0":-2}}'
    one = '{"v2-multi-segment":{"0":5}}'
    extra = '{"v2-multi-segment":{"0":5,"1":5},"v2-txn":{"0":-2}}'
    from kltool.spark.planning import plan_segments

    assert plan_segments({"paths": paths, "startingoffsets": both})
    for key, name, spec in (("startingoffsets", "startingOffsets", one), ("endingoffsets", "endingOffsets", one),
                            ("startingoffsetsbytimestamp", "startingOffsetsByTimestamp", one),
                            ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp", extra)):
        with pytest.raises(UsageError) as e:
            plan_segments({"paths": paths, key: spec})
        assert str(e.value).startswith(f"kafka-log: option {name} names {{v2-multi-segment-")
        assert "the partitions read are {v2-multi-segment-0, v2-txn-0}: it must name each of them" in str(e.value)
        assert len(str(e.value).splitlines()) == 1
    with pytest.raises(UsageError, match="option startingOffsets names"):  # every level, as the bounds apply to all
        plan_segments({"paths": paths, "level": "batches", "startingoffsets": one})
    # the option not in effect is not checked: startingTimestamp wins over both JSONs
    assert plan_segments({"paths": paths, "startingtimestamp": "0", "startingoffsets": one,
                          "startingoffsetsbytimestamp": one})
    assert plan_segments({"paths": paths, "subscribe": "v2-multi-segment", "startingoffsets": one})
