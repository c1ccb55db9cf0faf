"""The kafka-log source on object storage (an S3 server on loopback: moto's), URIs and local paths
with a colon, tiered-storage segment names, split segments and executor-side errors. The reader's
planning and reading functions are called directly here (no JVM); test_spark.py runs the same
through Spark and spark-report."""

from __future__ import annotations

import shutil
import uuid

import pytest

from .conftest import ORACLE, REAL
from .s3_local import s3_server, storage
from .test_spark_helpers import kltool_records

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")
pafs = pytest.importorskip("pyarrow.fs")

from kltool.spark import datasource as ds  # noqa: E402

WILLIAM = REAL / "william0423-indexed-zk"
ORACLE_DIRS = ["v2-multi-segment-0", "v2-txn-0", "v1-gzip-0", "v0-lz4-0", "v2-gzip-headers-0", "v2-compacted-0",
               "damaged-v2-crc-0", "damaged-v2-zero-tail-0", "damaged-v2-bad-magic-0"]
BUCKET = "kafka-backup"


@pytest.fixture(scope="session")
def s3():
    """An S3 server on 127.0.0.1 holding William's log dir at s3://kafka-backup/william, oracle
    partition directories under s3://kafka-backup/oracle/, and v2-multi-segment-0 with tiered-storage
    names under s3://kafka-backup/tiered/. Yields the storage options."""
    with s3_server() as (fs, opts):
        fs.create_dir(BUCKET)
        pafs.copy_files(str(WILLIAM), f"{BUCKET}/william", destination_filesystem=fs)
        for name in ORACLE_DIRS:
            pafs.copy_files(str(ORACLE / name), f"{BUCKET}/oracle/{name}", destination_filesystem=fs)
        # KIP-405 copies: <offset>-<segment id>.<kind> in topic-N-<topic id>
        tdir = f"{BUCKET}/tiered/v2-multi-segment-0-AAAAAAAAAAAAAAAAAAAAAA"
        for f in sorted((ORACLE / "v2-multi-segment-0").iterdir()):
            stem, dot, kind = f.name.partition(".")
            if kind in ("log", "index", "timeindex"):
                with fs.open_output_stream(f"{tdir}/{stem}-{uuid.UUID(int=int(stem) + 1)}.{kind}") as out:
                    out.write(f.read_bytes())
        yield opts


def read_all(opts: dict, split: int | None = None) -> list[pa.RecordBatch]:
    if split is not None:
        opts = {**opts, "splitBytes": str(split)}
    reader = ds.KafkaLogReader(ds.normalize_options(opts))
    return [b for part in reader.partitions() for b in reader.read(part)]


def rows(batches, drop=("file", "partition_dir")) -> list[tuple]:
    out = []
    for b in batches:
        for r in b.to_pylist():
            out.append(tuple((k, v if not isinstance(v, list) else tuple(map(str, v)))
                             for k, v in r.items() if k not in drop))
    return sorted(out, key=repr)


@pytest.mark.parametrize("level", ["records", "batches", "damage", "segments"])
def test_a_log_dir_in_a_bucket_reads_exactly_like_the_local_copy(s3, level):
    local = [str(WILLIAM)] + [str(ORACLE / n) for n in ORACLE_DIRS]
    remote = [f"s3://{BUCKET}/william", f"s3a://{BUCKET}/oracle"]
    import json

    skip = {"failOnDataLoss": "false"}  # three of the oracle directories are damaged
    got = rows(read_all({"paths": json.dumps(remote), "level": level, **skip, **storage(s3)}))
    want = rows(read_all({"paths": json.dumps(local), "level": level, **skip}))
    assert got == want
    assert len(got) >= {"records": 1500, "batches": 100, "damage": 3, "segments": 60}[level]


def test_offsets_and_the_log_start_checkpoint_on_s3(s3, tmp_path):
    opts = {"path": f"s3://{BUCKET}/oracle/v2-multi-segment-0", **storage(s3)}
    segs = ds.plan_segments({**opts, "startingOffset": "450", "endingOffset": "820"})
    assert [s.segment for s in segs] == [400, 800]
    seek = ds.plan_segments({"path": f"s3://{BUCKET}/william", "topic": "__consumer_offsets", "partition": "28",
                             "startingOffset": "4000", "splitBytes": "0", **storage(s3)})
    assert len(seek) == 1 and seek[0].position > 0  # seeked through the .index on S3
    local = ds.plan_segments({"path": str(WILLIAM / "__consumer_offsets-28"), "startingOffset": "4000",
                              "splitBytes": "0"})
    from kltool.storage.segment import Segment

    seg = Segment(WILLIAM / "__consumer_offsets-28", 0, WILLIAM / "__consumer_offsets-28" / local[0].file.rsplit("/", 1)[1])
    assert seek[0].position == seg.position_for_offset(4000)  # where kltool's own lookup starts
    got = [r["offset"] for b in read_all({**opts, "startingOffset": "450", "endingOffset": "820"})
           for r in b.to_pylist()]
    assert sorted(got) == list(range(450, 820))
    # the log dir's log-start-offset-checkpoint hides deleted records, as locally
    rows_ = [r["offset"] for b in read_all({"path": f"s3://{BUCKET}/william", "topic": "__consumer_offsets",
                                            "partition": "28", **storage(s3)}) for r in b.to_pylist()]
    assert sorted(rows_) == [r[2] for r in kltool_records([WILLIAM / "__consumer_offsets-28"])]


def test_tiered_storage_segment_names_are_segments(s3):
    got = read_all({"path": f"s3://{BUCKET}/tiered", **storage(s3)})
    assert rows(got) == rows(read_all({"path": str(ORACLE / "v2-multi-segment-0")}))
    segs = ds.plan_segments({"path": f"s3://{BUCKET}/tiered", "startingOffset": "900", **storage(s3)})
    assert [(s.topic, s.partition, s.segment) for s in segs] == [("v2-multi-segment", 0, 800)]


def test_damage_on_an_object_store_names_the_segment_and_its_own_position(s3):
    from kltool.errors import CorruptDataError

    with pytest.raises(CorruptDataError) as e:
        read_all({"path": f"s3://{BUCKET}/oracle/damaged-v2-zero-tail-0", **storage(s3)})
    local = str(ORACLE / "damaged-v2-zero-tail-0")
    with pytest.raises(CorruptDataError) as le:
        read_all({"path": local})
    assert str(e.value) == str(le.value).replace(local, f"s3://{BUCKET}/oracle/damaged-v2-zero-tail-0")


def test_remote_errors_are_one_line_usage_errors(s3):
    from kltool.errors import UsageError

    with pytest.raises(UsageError, match="no such file"):
        ds.plan_segments({"path": f"s3://{BUCKET}/nope", **storage(s3)})
    from kltool.storage.uri import select_remote

    with pytest.raises(UsageError, match="--topic 'zzz'"):
        select_remote([f"s3://{BUCKET}/william"], "zzz", None, s3)
    with pytest.raises(UsageError, match="storage option 'colour'"):
        ds.plan_segments({"path": f"s3://{BUCKET}/william", "storage.colour": "red"})


def test_plain_paths_with_a_colon_and_file_uris_are_local(tmp_path):
    d = tmp_path / "a:b" / "v2-txn-0"
    shutil.copytree(ORACLE / "v2-txn-0", d)
    want = rows(read_all({"path": str(ORACLE / "v2-txn-0")}))
    assert rows(read_all({"path": str(d)})) == want
    assert rows(read_all({"path": f"file://{d}"})) == want


def test_an_executor_that_cannot_open_a_path_says_which_and_where(tmp_path):
    from kltool.errors import KltoolError

    part = ds.SegmentRead(str(tmp_path / "gone-0" / "00000000000000000000.log"), "gone", 0, 0)
    with pytest.raises(KltoolError) as ei:
        list(ds.read_records(part))
    msg = str(ei.value)
    assert "gone-0/00000000000000000000.log" in msg and "executor on " in msg and "pid" in msg
    assert len(msg.splitlines()) == 1


@pytest.mark.parametrize("where", ["local", "s3"])
def test_split_segments_give_the_same_rows(s3, where):
    path = str(WILLIAM) if where == "local" else f"s3://{BUCKET}/william"
    opts = {"path": path, "topic": "__consumer_offsets", "partition": "28",
            **(storage(s3) if where == "s3" else {})}
    whole = ds.plan_segments({**opts, "splitBytes": "0"})
    split = ds.plan_segments({**opts, "splitBytes": str(64 << 10)})
    assert len(whole) == 1 and len(split) >= 10  # a 1 MiB segment in ~64 KiB pieces at batch starts
    assert [s.position for s in split][0] == 0 and all(a.stop == b.position for a, b in zip(split, split[1:], strict=False))
    assert rows(read_all(opts, split=64 << 10)) == rows(read_all(opts, split=0))
    assert rows(read_all(opts, split=64 << 10)) == rows(read_all({"path": str(WILLIAM / "__consumer_offsets-28")}))
    # with a start offset: the seek and the splits together
    got = [r["offset"] for b in read_all({**opts, "startingOffset": "4000"}, split=64 << 10) for r in b.to_pylist()]
    assert sorted(got) == [r[2] for r in kltool_records([WILLIAM / "__consumer_offsets-28"]) if r[2] >= 4000]


def test_pushed_filters_prune_object_store_reads_too(s3):
    import datetime as dt

    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In

    opts = ds.normalize_options({"path": f"s3://{BUCKET}/oracle", **storage(s3)})
    reader = ds.KafkaLogPushdownReader(opts)
    filters = [In(("topic",), ("v2-multi-segment", "v2-txn")), EqualTo(("partition",), 0),
               GreaterThanOrEqual(("offset",), 850),
               GreaterThanOrEqual(("timestamp",), dt.datetime(1970, 1, 1, tzinfo=dt.UTC))]
    assert list(reader.pushFilters(filters)) == filters  # all handed back: Spark checks them on the rows
    parts = reader.partitions()
    segs = [s for g in parts for s in g.value]
    assert {(s.topic, s.segment) for s in segs} == {("v2-multi-segment", 800), ("v2-txn", 0)}
    got = sorted((r["topic"], r["offset"]) for g in parts for b in reader.read(g) for r in b.to_pylist())
    assert got == [("v2-multi-segment", o) for o in range(850, 1200)]  # v2-txn ends before 850
