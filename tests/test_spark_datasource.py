"""The kafka-log data source's planning and reading functions, called directly (no JVM, fast)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import ORACLE, REAL, ROOT
from .test_spark_helpers import brute_offset_for_time, kltool_records

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from kltool.errors import CorruptDataError, UsageError  # noqa: E402
from kltool.format import build_batch, decode_records  # noqa: E402
from kltool.format.compression import LZ4, ZSTD  # noqa: E402
from kltool.spark import datasource as ds  # noqa: E402

DIRS = [REAL / "william0423-indexed-zk"] + [ORACLE / n for n in (
    "v2-multi-segment-0", "v2-mixed-codecs-0", "v2-txn-0", "v1-gzip-0", "v0-lz4-0", "v1-logappend-0",
    "v2-gzip-headers-0", "v2-compacted-0", "v2-mixed-magic-0", "v2-large-record-0", "v2-logappend-0",
    "damaged-v2-crc-0", "damaged-v2-zero-tail-0", "damaged-v2-bad-magic-0")]


def read_all(opts: dict) -> list[pa.RecordBatch]:
    out = []
    parts = ds.KafkaLogReader(ds.normalize_options(opts)).partitions()
    for part in parts:
        out.extend(ds.KafkaLogReader(ds.normalize_options(opts)).read(part))
    return out


def rows_of(batches) -> list[tuple]:
    rows = []
    for b in batches:
        assert b.schema == ds.ARROW_RECORD_SCHEMA
        for r in b.to_pylist():
            hs = tuple((h["key"], h["value"]) for h in r["headers"]) if r["headers"] is not None else None
            ts = r["timestamp"]
            ms = int(ts.timestamp() * 1000) if ts is not None else None
            rows.append((r["topic"], r["partition"], r["offset"], ms, r["timestampType"], r["key"], r["value"], hs))
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


@pytest.mark.parametrize("d", DIRS, ids=lambda p: p.name)
def test_records_equal_kltool_decoding(d):
    got = rows_of(read_all({"path": str(d), "failOnDataLoss": "false"}))  # damaged ones: kltool's skips
    assert got == kltool_records([d])
    assert got, "fixture read nothing"


def test_segments_planned_packed_and_pruned():
    d = ORACLE / "v2-multi-segment-0"
    segs = ds.plan_segments({"path": str(d)})
    assert [p.segment for p in segs] == [0, 400, 800]
    assert [len(g) for g in ds.group_segments(segs, max_bytes=0)] == [1, 1, 1]
    assert [len(g) for g in ds.group_segments(segs)] == [3]  # 110 KB: one partition
    big = [ds.SegmentRead(f"/x/{i}.log", "t", 0, i, bytes=(1 << 30) if i % 2 else 1000) for i in range(6)]
    assert [len(g) for g in ds.group_segments(big, min_partitions=4)] == [1, 1, 1, 3]
    parts = ds.plan_segments({"path": str(d), "startingOffset": "450", "endingOffset": "800"})
    assert [p.segment for p in parts] == [400]
    rows = rows_of(read_all({"path": str(d), "startingOffset": "350", "endingOffset": "850"}))
    assert [r[2] for r in rows] == list(range(350, 850))
    js = '{"v2-multi-segment": {"0": 1190}}'
    rows = rows_of(read_all({"path": str(d), "startingOffsets": js, "endingOffsets": "latest"}))
    assert [r[2] for r in rows] == list(range(1190, 1200))


def test_starting_timestamp_uses_the_broker_lookup():
    d = REAL / "william0423-indexed-zk"
    all_rows = kltool_records([d], include_control=True)
    ts = sorted({r[3] for r in all_rows})[len(all_rows) // 3]
    brute = brute_offset_for_time([d], ts)
    from kltool.storage import open_paths

    for p in open_paths([str(d)]).partitions:
        hit = ds.offset_for_time(p, ts)
        assert hit == brute.get((p.topic, p.partition)), p
    # partitions with no record that new: nothing there (latest; the default, error, fails the query)
    rows = rows_of(read_all({"path": str(d), "startingTimestamp": str(ts), "startingOffsetsByTimestampStrategy": "latest"}))
    firsts = {}
    for r in rows:
        firsts.setdefault((r[0], r[1]), r[2])
    assert firsts == {k: v[0] for k, v in brute.items()}


def test_damaged_hole_is_skipped_and_counted(tmp_path):
    pdir = tmp_path / "holes-0"
    pdir.mkdir()
    data = bytearray()
    off = 0
    for i in range(6):
        recs = [(j, 1_700_000_000_000 + off + j, b"k%d" % (off + j), b"v" * (j + i), [("h", b"x")] if j else ())
                for j in range(5)]
        data += build_batch(recs, base_offset=off, compression=(LZ4, ZSTD, 0)[i % 3])
        off += 5
        if i == 2:
            data += bytes(8192)  # a zero-filled hole between valid batches
    (pdir / "00000000000000000000.log").write_bytes(bytes(data))
    with pytest.raises(CorruptDataError) as e:  # Spark's failOnDataLoss=true: one line, file and position
        read_all({"path": str(pdir)})
    dmg = [r for b in read_all({"path": str(pdir), "level": "damage"}) for r in b.to_pylist()]
    hole = dmg[0]["position"]
    assert str(e.value).startswith(f"{pdir / '00000000000000000000.log'} at byte {hole}: zero_run, 8192 unreadable bytes")
    assert len(str(e.value).splitlines()) == 1 and "failOnDataLoss=false" in str(e.value)
    rows = rows_of(read_all({"path": str(pdir), "failOnDataLoss": "false"}))
    assert [r[2] for r in rows] == list(range(30))
    assert rows == kltool_records([pdir])
    dmg = [r for b in read_all({"path": str(pdir), "level": "damage"}) for r in b.to_pylist()]
    assert [(r["kind"], r["length"]) for r in dmg] == [("zero_run", 8192)]
    bats = [r for b in read_all({"path": str(pdir), "level": "batches"}) for r in b.to_pylist()]
    assert [r["base_offset"] for r in bats] == [0, 5, 10, 15, 20, 25]
    assert {r["compression"] for r in bats} == {"lz4", "zstd", "none"}


def test_legacy_batches_count_records():
    bats = [r for b in read_all({"path": str(ORACLE / "v1-gzip-0"), "level": "batches"}) for r in b.to_pylist()]
    assert sum(r["count"] for r in bats) == len(kltool_records([ORACLE / "v1-gzip-0"]))
    assert bats[0]["base_offset"] == 0


def test_spark_report_help_does_not_import_pyspark():
    code = ("import sys\nfrom kltool.cli import main\n"
            "try:\n    main(['spark-report', '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'pyspark' not in sys.modules and 'pyarrow' not in sys.modules, 'imported'\n"
            "import kltool.spark\nassert 'pyspark' not in sys.modules\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "offsets-by-time" in p.stdout


def test_log_start_offset_hides_deleted_records(copy_fixture):
    d = copy_fixture("java-oracle/v2-multi-segment-0", "logdir/v2-multi-segment-0")
    (d.parent / "log-start-offset-checkpoint").write_text("0\n1\nv2-multi-segment 0 500\n")
    rows = rows_of(read_all({"path": str(d.parent)}))
    assert [r[2] for r in rows] == list(range(500, 1200))
    assert [p.segment for p in ds.plan_segments({"path": str(d.parent)})] == [400, 800]
    rows = rows_of(read_all({"path": str(d.parent), "respectLogStartOffset": "false"}))
    assert len(rows) == 1200
    bats = [r for b in read_all({"path": str(d.parent), "level": "batches"}) for r in b.to_pylist()]
    assert sum(r["count"] for r in bats) == 1200  # the batches level is physical: everything on disk


def test_bad_options_are_usage_errors():
    from kltool.errors import UsageError

    for opts in ({"startingOffsets": "bogus"}, {"partition": "x"}, {"startingOffset": "ten"}):
        with pytest.raises(UsageError):
            ds.plan_segments({"path": str(ORACLE / "v2-txn-0"), **opts})
    with pytest.raises(UsageError, match="level"):
        ds.KafkaLogDataSource({"path": "x", "level": "nope"})
    with pytest.raises(UsageError, match="needs a path"):
        ds.plan_segments({})


def test_header_keys_that_are_not_utf8_are_replaced_like_java(tmp_path):
    pdir = tmp_path / "h-0"
    pdir.mkdir()
    recs = [(0, 1_700_000_000_000, None, b"v", [(b"\xffk", b"x"), ("ok", None)]), (1, 1_700_000_000_001, b"k", None, ())]
    (pdir / "00000000000000000000.log").write_bytes(build_batch(recs, base_offset=0))
    (b,) = read_all({"path": str(pdir)})
    assert b.column("headers").to_pylist() == [[{"key": "\ufffdk", "value": b"x"}, {"key": "ok", "value": None}], None]
    assert b.column("key").to_pylist() == [None, b"k"] and b.column("value").to_pylist() == [b"v", None]


@pytest.mark.parametrize("name", ["damaged-v2-crc-0", "damaged-v2-zero-tail-0", "damaged-v2-bad-magic-0",
                                  "damaged-v2-torn-payload-0"])
def test_damaged_data_fails_the_read_unless_failondataloss_is_false(name, caplog):
    d = ORACLE / name
    with pytest.raises(CorruptDataError) as e:
        read_all({"path": str(d)})
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and msg.startswith(str(d)) and " at byte " in msg and "data lost" in msg
    with caplog.at_level("WARNING", logger="kltool.spark"):
        rows = rows_of(read_all({"path": str(d), "failOnDataLoss": "false"}))
    assert rows == kltool_records([d])
    assert "damaged bytes" in caplog.text and "failOnDataLoss=false" in caplog.text


def test_a_clean_log_reads_with_the_default():
    assert len(rows_of(read_all({"path": str(ORACLE / "v2-multi-segment-0")}))) == 1200


def test_subscribe_subscribe_pattern_and_offsets_by_timestamp():
    paths = json.dumps([str(ORACLE / n) for n in ("v2-multi-segment-0", "v2-txn-0", "v1-gzip-0")])

    def topics(**kw):
        return sorted({r[0] for r in rows_of(read_all({"paths": paths, **kw}))})

    assert topics(subscribe="v2-txn,v1-gzip") == ["v1-gzip", "v2-txn"]
    assert topics(subscribePattern="v2-.*") == ["v2-multi-segment", "v2-txn"]
    assert topics(subscribePattern="v2") == []  # the whole name, as Java's Pattern.matches
    d = ORACLE / "v2-multi-segment-0"
    stamps = sorted(r[3] for r in kltool_records([d]))
    t = stamps[700]
    by_ts = rows_of(read_all({"path": str(d), "startingOffsetsByTimestamp": json.dumps({"v2-multi-segment": {"0": t}})}))
    assert by_ts == rows_of(read_all({"path": str(d), "startingTimestamp": str(t)}))
    assert by_ts and by_ts[0][2] == brute_offset_for_time([d], t)[("v2-multi-segment", 0)][0]
    end = rows_of(read_all({"path": str(d), "endingOffsetsByTimestamp": json.dumps({"v2-multi-segment": {"0": t}})}))
    assert end == rows_of(read_all({"path": str(d), "endingTimestamp": str(t)}))
    assert len(end) + len(by_ts) == 1200


def test_user_schemas_are_checked_at_planning_and_names_are_case_insensitive():
    from pyspark.sql import types as T

    from kltool.errors import UsageError
    from kltool.spark.datasource import user_columns

    s = T.StructType([T.StructField("OFFSET", T.LongType()), T.StructField("Timestamp", T.TimestampType())])
    assert user_columns("records", s) == (["offset", "timestamp"], ["OFFSET", "Timestamp"])
    assert user_columns("records", T.StructType([T.StructField("offset", T.LongType(), False)])) == (["offset"], None)
    for fields, words in (
            ([T.StructField("offset", T.IntegerType())], "offset is int, the source gives bigint"),
            ([T.StructField("value", T.StringType())], "value is string, the source gives binary"),
            ([T.StructField("key", T.BinaryType(), False)], "key is NOT NULL but may be null"),
            ([T.StructField("timestamp", T.TimestampNTZType())], "the source gives timestamp (timestamp_ltz)"),
            ([T.StructField("nope", T.LongType())], "no column nope")):
        with pytest.raises(UsageError) as e:
            user_columns("records", T.StructType(fields))
        assert words in str(e.value) and len(str(e.value).splitlines()) == 1
    with pytest.raises(UsageError, match="no column _metadata"):
        user_columns("batches", T.StructType([T.StructField("_metadata", T.StringType())]))
    d = ORACLE / "v2-multi-segment-0"
    reader = ds.KafkaLogReader(ds.normalize_options({"path": str(d)}), ["offset"])
    reader.aliases = ["OFFSET"]
    assert [b.schema.names for p in reader.partitions() for b in reader.read(p)][0] == ["OFFSET"]


def test_provenance_columns_name_the_log_dir_file_and_batch_position():
    d = ORACLE / "v2-multi-segment-0"
    cols = [*ds.ARROW_RECORD_SCHEMA.names, "_metadata"]
    reader = ds.KafkaLogReader(ds.normalize_options({"path": str(d), "includeMetadata": "true"}), cols)
    rows = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    assert len(rows) == 1200
    batches = [r for b in read_all({"path": str(d), "level": "batches"}) for r in b.to_pylist()]
    where = {}
    for b in batches:
        for o in range(b["base_offset"], b["last_offset"] + 1):
            where[o] = (b["file"], b["position"])
    for r in rows:
        m = r["_metadata"]
        assert (m["file"], m["position"]) == where[r["offset"]]
        assert m["log_dir"] == str(d.parent)
    plain = rows_of(read_all({"path": str(d)}))
    assert [(r["offset"], r["value"]) for r in rows] == [(x[2], x[6]) for x in plain]  # the same records
    ddl = ds.KafkaLogDataSource({"path": str(d), "includeMetadata": "true"}).schema()
    assert ddl.endswith("_metadata struct<log_dir: string, file: string, position: long>")


def test_replica_copies_in_two_log_dirs(tmp_path, kl, caplog):
    import shutil as sh

    src = ORACLE / "v2-multi-segment-0"
    for broker in ("b1", "b2"):
        sh.copytree(src, tmp_path / broker / "v2-multi-segment-0")
    # broker 2's copy is ahead: one more record
    assert kl("append", tmp_path / "b2", "v2-multi-segment", "-p", "0", stdin='{"value": "late"}\n').code == 0
    paths = json.dumps([str(tmp_path / "b1"), str(tmp_path / "b2")])
    with caplog.at_level("WARNING", logger="kltool.spark"):
        both = rows_of(read_all({"paths": paths}))
    assert len(both) == 1200 + 1201  # every copy, and a warning naming them
    assert "v2-multi-segment-0 is in 2 log dirs" in caplog.text and "replicas=one" in caplog.text
    one = rows_of(read_all({"paths": paths, "replicas": "one"}))
    assert [r[2] for r in one] == list(range(1201)) and one[-1][6] == b"late"


def test_read_committed_skips_aborted_transactions_and_stops_at_the_last_stable_offset(tmp_path):
    import shutil as sh

    d = ORACLE / "v2-txn-0"  # pid 2000 committed (0-2, 6-7), 2001 aborted (3-4), 5 plain, 2002 committed (10-13)

    def offsets(path, **kw):
        return [r[2] for r in rows_of(read_all({"path": str(path), **kw}))]

    assert offsets(d) == [0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13]
    assert offsets(d, **{"kafka.isolation.level": "read_committed"}) == [0, 1, 2, 5, 6, 7, 10, 11, 12, 13]
    assert offsets(d, splitBytes="100", **{"kafka.isolation.level": "read_committed"}) == [
        0, 1, 2, 5, 6, 7, 10, 11, 12, 13]
    # without its COMMIT marker, pid 2002's transaction is open: nothing from its first offset on
    open_txn = tmp_path / "v2-txn-0"
    sh.copytree(d, open_txn)
    last = [b for b in read_all({"path": str(d), "level": "batches"}) for b in b.to_pylist()][-1]
    log = open_txn / "00000000000000000000.log"
    log.write_bytes(log.read_bytes()[:last["position"]])
    assert offsets(open_txn, **{"kafka.isolation.level": "read_committed"}) == [0, 1, 2, 5, 6, 7]
    assert offsets(open_txn) == [0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13]


def test_a_starting_timestamp_past_every_record(tmp_path):
    """As Spark's Kafka source: an error by default (startingOffsetsByTimestampStrategy=error), nothing
    read there with latest; an end timestamp past every record ends at the log end."""
    d = ORACLE / "v2-multi-segment-0"
    recs = kltool_records([d])
    late = str(max(r[3] for r in recs) + 1)
    for opts in ({"startingTimestamp": late}, {"startingOffsetsByTimestamp": json.dumps({"v2-multi-segment": {"0": int(late)}})}):
        for strategy in ({}, {"startingOffsetsByTimestampStrategy": "error"}, {"startingOffsetsByTimestampStrategy": "ERROR"}):
            name = next(iter(opts))
            with pytest.raises(UsageError, match=f"^v2-multi-segment-0: no offset matches {name} {late} "
                                                 r"\(no record has a timestamp at or after it;"):
                read_all({"path": str(d), **strategy, **opts})
        assert rows_of(read_all({"path": str(d), "startingOffsetsByTimestampStrategy": "latest", **opts})) == []
        assert ds.plan_segments({"path": str(d), "startingOffsetsByTimestampStrategy": "latest", **opts}) == []
    assert len(rows_of(read_all({"path": str(d), "endingTimestamp": late}))) == len(recs)
    assert len(rows_of(read_all({"path": str(d), "startingOffset": "5", "endingTimestamp": late}))) == len(recs) - 5
    # a pushed timestamp filter finding nothing reads nothing, whatever the strategy
    p = ds.Pushed(time_min=int(late))
    assert ds.plan_segments({"path": str(d), "startingOffsetsByTimestampStrategy": "error"}, p) == []


def test_spark_bounds_resolve_as_spark_does():
    """Spark's options, resolved per side in Spark's order of preference (startingTimestamp, then
    startingOffsetsByTimestamp, then startingOffsets), and a resolved start after the resolved end an
    error naming both (offset i has timestamp T0 + i s here)."""
    d = ORACLE / "v2-multi-segment-0"
    t0, topic = 1_700_000_000_000, "v2-multi-segment"

    def offsets(**kw):
        return [r[2] for r in rows_of(read_all({"path": str(d), **kw}))]

    by_ts = json.dumps({topic: {"0": t0 + 300_000}})
    assert offsets(startingTimestamp=str(t0 + 500_500), startingOffsets=json.dumps({topic: {"0": 900}}),
                   startingOffsetsByTimestamp=by_ts) == list(range(501, 1200))
    assert offsets(startingOffsetsByTimestamp=by_ts, startingOffsets=json.dumps({topic: {"0": 900}})) == list(range(300, 1200))
    assert offsets(endingTimestamp=str(t0 + 20_000), endingOffsets=json.dumps({topic: {"0": 5}})) == list(range(20))
    assert offsets(startingOffset="10", startingTimestamp=str(t0 + 5_000)) == list(range(10, 1200))  # kltool's own narrows
    with pytest.raises(UsageError, match=r"^v2-multi-segment-0: the resolved start offset 600 \(startingTimestamp\) is "
                                         r"greater than the resolved end offset 400 \(endingTimestamp\)$"):
        read_all({"path": str(d), "startingTimestamp": str(t0 + 600_000), "endingTimestamp": str(t0 + 400_000)})
    with pytest.raises(UsageError, match=r"resolved start offset 1200 \(startingTimestamp\) is greater than the resolved "
                                         r"end offset 50 \(endingOffsets\)$"):
        read_all({"path": str(d), "startingTimestamp": str(t0 + 5_000_000), "startingOffsetsByTimestampStrategy": "latest",
                  "endingOffsets": json.dumps({topic: {"0": 50}})})
    with pytest.raises(UsageError, match=r"resolved start offset 700 \(startingOffsets\) is greater than the resolved "
                                         r"end offset 400 \(endingOffsetsByTimestamp\)$"):
        read_all({"path": str(d), "startingOffsets": json.dumps({topic: {"0": 700}}),
                  "endingOffsetsByTimestamp": json.dumps({topic: {"0": t0 + 400_000}})})
    assert offsets(startingTimestamp=str(t0 + 600_000), endingTimestamp=str(t0 + 600_000)) == []  # equal: empty, no error
    # both by partition: the timestamps are compared before they are looked up (as Spark does), a timestamp
    # for all is not (both below resolve to offset 601: nothing read)
    with pytest.raises(UsageError, match=r"^v2-multi-segment-0: the start timestamp 1700000600500 "
                                         r"\(startingOffsetsByTimestamp\) is greater than the end timestamp 1700000600100"):
        read_all({"path": str(d), "startingOffsetsByTimestamp": json.dumps({topic: {"0": t0 + 600_500}}),
                  "endingOffsetsByTimestamp": json.dumps({topic: {"0": t0 + 600_100}})})
    assert offsets(startingTimestamp=str(t0 + 600_500), endingTimestamp=str(t0 + 600_100)) == []


def _torn_last_wrapper(src, dst, how: str) -> list[int]:
    """``src``'s segment with its last compressed v0/v1 wrapper rebuilt so that its inner message stream ends
    in a partial message: ``body`` cuts the last inner message 5 bytes short, ``claims`` appends an entry
    header claiming more bytes than are left. Returns the wrapper's position and how many inner messages stay
    whole."""
    import struct as st

    from kltool.format import parse_header
    from kltool.format.compression import compress, decompress
    from kltool.format.legacy import encode_legacy_message

    data = (src / "00000000000000000000.log").read_bytes()
    pos = [h.position for h in (parse_header(data, p) for p in _positions(data))]
    last = max(p for p in pos if data[p + 16] < 2 and data[p + 17] & 0x07)
    h = parse_header(data, last)
    cols = decode_records(h, data[last:last + h.size])
    ks = st.unpack_from(">i", data, last + 18 + (8 if h.magic else 0))[0]
    key = None if ks < 0 else data[last + 22 + (8 if h.magic else 0):][:ks]
    vstart = last + 22 + (8 if h.magic else 0) + max(ks, 0) + 4
    inner = decompress(h.compression, data[vstart:last + h.size], h.magic)
    tail = inner[:-5] if how == "body" else inner + st.pack(">qi", 99, 1 << 20) + bytes(30)
    wrapper = encode_legacy_message(h.last_offset, h.magic, data[last + 17], h.max_timestamp, key,
                                    compress(h.compression, tail, magic=h.magic))
    dst.mkdir(parents=True)
    (dst / "00000000000000000000.log").write_bytes(data[:last] + wrapper + data[last + h.size:])
    return last, len(cols) - (how == "body")


def _positions(data: bytes) -> list[int]:
    import struct as st

    out, p = [], 0
    while p + 12 <= len(data):
        out.append(p)
        p += 12 + st.unpack_from(">i", data, p + 8)[0]
    return out

LEGACY_COMPRESSED = ["v0-gzip-0", "v0-snappy-0", "v0-lz4-0", "v1-gzip-0", "v1-snappy-0", "v1-lz4-0",
                     "v1-logappend-0", "v2-mixed-magic-0"]


@pytest.mark.parametrize("how", ["body", "claims"])
@pytest.mark.parametrize("name", LEGACY_COMPRESSED)
def test_a_wrapper_ending_in_a_partial_inner_message_serves_the_whole_ones_as_kafka(tmp_path, kafka_oracle, name,
                                                                                     how):
    """Kafka's legacy deep iterator (AbstractLegacyRecordBatch.DeepRecordsIterator over DataLogInputStream)
    ends the inner messages at one whose 12-byte entry header or body the decompressed stream does not hold
    whole: its consumer, so Spark's Kafka source, serves the whole ones before it and nothing is lost. The
    Spark reader failed the query there (failOnDataLoss) or warned of the batch as skipped (false), its
    batches level counted nothing and a lookup by time passed the wrapper. Every compressed v0/v1 wrapper
    of the Java corpus, its last one torn: the rows are Kafka's (its own reader, run here), and verify
    still names the damage."""
    import base64

    from .conftest import run_kltool

    d = tmp_path / "logs" / f"{name.rsplit('-', 1)[0]}-0"
    at, whole = _torn_last_wrapper(ORACLE / name, d, how)
    code, oracle = kafka_oracle(sorted(d.glob("*.log")), records=True)
    assert code == 0, oracle
    want = [(r["offset"], r["timestamp"], r["key"] and base64.b64decode(r["key"]),
             r["value"] and base64.b64decode(r["value"])) for r in oracle if r["type"] == "record"]
    (torn,) = [i for i, r in enumerate(oracle) if r["type"] == "batch" and r["position"] == at]
    assert oracle[torn]["count"] == whole  # (v1: the inner offsets are relative to the last one read)
    for fail in ("true", "false"):
        got = [(r[2], r[3], r[5], r[6]) for r in rows_of(read_all({"path": str(d), "failOnDataLoss": fail}))]
        assert got == want
    # the batches level counts them, a lookup by time finds them
    bats = [r for b in read_all({"path": str(d), "level": "batches"}) for r in b.to_pylist()]
    assert sum(r["count"] for r in bats) == len(want)
    first_of_torn, ts = oracle[torn + 1]["offset"], oracle[torn + 1]["timestamp"]
    if ts >= 0:  # (v0 has no timestamps)
        by_time = rows_of(read_all({"path": str(d), "startingTimestamp": str(ts)}))
        assert by_time[0][2] == min(w[0] for w in want if w[1] >= ts) <= first_of_torn
    v = run_kltool("--json", "verify", "--deep", str(d))
    assert v.code == 1 and any(o.get("kind") == "record_corrupt" for o in v.json()), v


def test_a_subscribed_topic_no_path_holds_fails_as_in_sparks_source():
    """Spark's Kafka source fails a subscribe naming a topic the cluster does not have
    (UnknownTopicOrPartitionException, found by tests/broker/test_spark_kafka_campaign.py); kafka-log read the
    others."""
    paths = json.dumps([str(ORACLE / n) for n in ("v2-txn-0", "v1-gzip-0")])
    with pytest.raises(UsageError) as e:
        read_all({"paths": paths, "subscribe": "v2-txn, nope"})
    assert "option subscribe names nope, which no path read holds" in str(e.value)
    assert len(str(e.value).splitlines()) == 1
    assert len(rows_of(read_all({"paths": paths, "subscribe": "v2-txn"}))) > 0


def test_a_start_after_its_end_fails_before_an_end_past_the_log_end():
    """Spark's Kafka source resolves every partition's range before it reads (a start after its end fails
    there) and finds an endingOffsets offset past the log end only as it reads: kafka-log failed on the
    past-the-end offset of a partition planned earlier instead (the campaign's c09)."""
    paths = json.dumps([str(ORACLE / n) for n in ("v1-gzip-0", "v2-txn-0")])
    opts = {"paths": paths, "subscribe": "v1-gzip,v2-txn",
            "startingOffsets": json.dumps({"v1-gzip": {"0": 0}, "v2-txn": {"0": 5}}),
            "endingOffsets": json.dumps({"v1-gzip": {"0": 10_000}, "v2-txn": {"0": 3}})}
    with pytest.raises(UsageError) as e:
        read_all(opts)
    assert "v2-txn-0: the resolved start offset 5 (startingOffsets) is greater than the resolved end offset 3" \
        in str(e.value)
    opts["startingOffsets"] = json.dumps({"v1-gzip": {"0": 0}, "v2-txn": {"0": 1}})
    with pytest.raises(UsageError, match="v1-gzip-0: endingOffsets 10000 is past the log end offset"):
        read_all(opts)
