"""``spark.readStream.format("kafka-log")`` (kltool/spark/streaming.py): a log dir written by kltool's
append, read by a real local Spark with ``Trigger.AvailableNow`` and a checkpoint, then written to again
(more batches, a segment roll, a torn batch, retention) and read on from the same checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from .test_spark_helpers import local_spark  # noqa: E402

SEGMENT_BYTES = 2000  # a roll every ~25 records of these


@pytest.fixture(scope="module")
def spark():
    s = local_spark("kltool-stream")
    yield s
    s.stop()


def append(kl, ld: Path, start: int, n: int, partitions: int = 2, *extra) -> None:
    lines = "".join(json.dumps({"key": f"k{i}", "value": f"value-{i:06d}-" + "x" * 40, "partition": i % partitions})
                    + "\n" for i in range(start, start + n))
    r = kl("append", ld, "orders", "--batch-records", "5", *extra, stdin=lines)
    assert r.code == 0, r


def make(kl, tmp_path: Path, n: int, partitions: int = 2) -> Path:
    ld = tmp_path / "logs"
    r = kl("create", ld, "orders", "--partitions", partitions, "--config", f"segment.bytes={SEGMENT_BYTES}")
    assert r.code == 0, r
    if n:
        append(kl, ld, 0, n, partitions)
    return ld


def run(spark, ld, ckpt: Path, **options) -> list[list[tuple]]:
    """One Trigger.AvailableNow run: the rows (partition, offset, value) of each micro-batch."""
    batches: list[list[tuple]] = []

    def each(df, _id):
        batches.append(sorted((r.partition, r.offset, r.value.decode()) for r in df.collect()))

    reader = spark.readStream.format("kafka-log").option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load(str(ld)).writeStream.foreachBatch(each).trigger(availableNow=True)
         .option("checkpointLocation", str(ckpt)).start())
    q.awaitTermination()
    return [b for b in batches if b]


def expected(start: int, n: int, partitions: int = 2) -> list[tuple]:
    """The rows append(start, n) writes, given that partition p's offsets go on from what it holds."""
    out = []
    for i in range(start, start + n):
        p = i % partitions
        out.append((p, sum(1 for j in range(i) if j % partitions == p), f"value-{i:06d}-" + "x" * 40))
    return sorted(out)


def offsets_log(ckpt: Path) -> dict:
    """The last entry of the checkpoint's offsets log: its source offset, as Spark wrote it."""
    last = max((f for f in (ckpt / "offsets").iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    lines = last.read_text().splitlines()
    assert lines[0] == "v1", lines
    return json.loads(lines[2])


def segments(ld: Path, partition: int = 0) -> int:
    return len(list((ld / f"orders-{partition}").glob("*.log")))


def test_available_now_reads_every_record_once_then_exactly_the_new_ones(spark, kl, tmp_path):
    ld = make(kl, tmp_path, 100)
    ckpt = tmp_path / "ckpt"
    got = [r for b in run(spark, ld, ckpt) for r in b]
    assert got == expected(0, 100)
    batch = sorted((r.partition, r.offset, r.value.decode())
                   for r in spark.read.format("kafka-log").load(str(ld)).collect())
    assert got == batch  # the same rows as the batch source
    before = segments(ld)
    append(kl, ld, 100, 60)  # more batches in the active segment, and new segments
    assert segments(ld) > before
    again = [r for b in run(spark, ld, ckpt) for r in b]
    assert again == expected(100, 60)
    assert run(spark, ld, ckpt) == []  # nothing new: nothing read
    assert offsets_log(ckpt) == {"orders": {"0": 80, "1": 80}}


def test_the_checkpoint_holds_sparks_kafka_offsets(spark, kl, tmp_path):
    """The offsets log holds Spark's Kafka-source JSON: {"topic": {"partition": next offset}}."""
    ld = make(kl, tmp_path, 30, partitions=3)
    ckpt = tmp_path / "ckpt"
    run(spark, ld, ckpt)
    assert offsets_log(ckpt) == {"orders": {"0": 10, "1": 10, "2": 10}}


def test_a_torn_batch_at_the_end_is_not_read_until_it_is_whole(spark, kl, tmp_path):
    ld = make(kl, tmp_path, 20, partitions=1)
    ckpt = tmp_path / "ckpt"
    assert [r for b in run(spark, ld, ckpt) for r in b] == expected(0, 20, 1)
    scratch = tmp_path / "scratch"
    shutil.copytree(ld, scratch)
    append(kl, scratch, 20, 5, 1)  # one batch of 5 more, written elsewhere
    log = max((ld / "orders-0").glob("*.log"))
    whole = (scratch / "orders-0" / log.name).read_bytes()
    tail = whole[log.stat().st_size:]
    assert tail
    with open(log, "ab") as f:  # the broker half way through writing that batch
        f.write(tail[: len(tail) // 2])
    assert run(spark, ld, ckpt) == []  # not read, and no data-loss error
    assert offsets_log(ckpt) == {"orders": {"0": 20}}
    with open(log, "ab") as f:
        f.write(tail[len(tail) // 2:])
    assert [r for b in run(spark, ld, ckpt) for r in b] == expected(20, 5, 1)
    assert offsets_log(ckpt) == {"orders": {"0": 25}}


def test_max_offsets_per_trigger_splits_the_run_into_micro_batches(spark, kl, tmp_path):
    ld = make(kl, tmp_path, 100)
    ckpt = tmp_path / "ckpt"
    batches = run(spark, ld, ckpt, maxOffsetsPerTrigger="30")
    assert [len(b) for b in batches] == [30, 30, 30, 10]
    assert sorted(r for b in batches for r in b) == expected(0, 100)
    append(kl, ld, 100, 20)
    assert [len(b) for b in run(spark, ld, ckpt, maxOffsetsPerTrigger="30")] == [20]


def test_retention_deleting_what_the_stream_has_not_read_fails_it_unless_fail_on_data_loss_is_false(
        spark, kl, tmp_path):
    from pyspark.errors import PySparkException

    ld = make(kl, tmp_path, 20, partitions=1)
    ckpt = tmp_path / "ckpt"
    assert len([r for b in run(spark, ld, ckpt) for r in b]) == 20
    append(kl, ld, 20, 80, 1)  # offsets 20..99, over several segments
    r = kl("retention", ld, "--before-offset", "60", "--no-backup")
    assert r.code == 0, r
    with pytest.raises(PySparkException) as e:
        run(spark, ld, ckpt)
    msg = str(e.value)
    assert "offsets 20 to 59 are gone" in msg and "failOnDataLoss" in msg, msg
    assert "Traceback" not in msg, msg
    rows = [r for b in run(spark, ld, ckpt, failOnDataLoss="false") for r in b]
    assert rows == [x for x in expected(20, 80, 1) if x[1] >= 60]


def test_read_committed_stops_at_an_open_transaction(spark, kl, tmp_path):
    ld = make(kl, tmp_path, 10, partitions=1)
    append(kl, ld, 10, 5, 1, "--producer-id", "7", "--transactional")  # open: offsets 10..14
    append(kl, ld, 15, 5, 1)  # after it: not stable yet
    ckpt = tmp_path / "ckpt"
    opts = {"kafka.isolation.level": "read_committed"}
    assert [r[1] for b in run(spark, ld, ckpt, **opts) for r in b] == list(range(10))
    r = kl("append", ld, "orders", "--producer-id", "7", "--transactional", "--end-transaction", "commit",
           "-p", "0", stdin="")
    assert r.code == 0, r
    got = [r[1] for b in run(spark, ld, ckpt, **opts) for r in b]
    assert got == list(range(10, 20))  # the transaction's records and those after it; not the marker


def test_stream_option_errors_are_one_line(spark, kl, tmp_path):
    from pyspark.errors import PySparkException

    ld = make(kl, tmp_path, 10)
    cases = [({"endingOffsets": "latest"}, "endingOffsets is not valid in a stream"),
             ({"level": "batches"}, "readStream reads records only"),
             ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive integer"),
             ({"startingOffsets": '{"orders":{"0":99,"1":-2}}'}, "starting offset 99 is after the end"),
             ({"startingOffsets": '{"orders":{"0":99}}'}, "option startingOffsets names {orders-0}, the partitions "
                                                          "read are {orders-0, orders-1}"),
             ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"}, "minOffsetsPerTrigger (9) is higher")]
    for i, (opts, words) in enumerate(cases):
        with pytest.raises(PySparkException) as e:
            run(spark, ld, tmp_path / f"ckpt{i}", **opts)
        msg = str(e.value)
        assert words in msg and "Traceback" not in msg, msg


def test_the_readme_streaming_example_runs(spark, kl, tmp_path):
    import re

    from .conftest import ROOT

    text = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text[text.index("#### Streaming"):], re.S).group(1)
    ld = make(kl, tmp_path, 40)
    lake = tmp_path / "lake"
    code = code.replace("/var/lib/kafka/data", str(ld)).replace("/lake", str(lake))
    exec(compile(code, "README.md", "exec"), {"spark": spark})  # noqa: S102 (the README's own example)
    assert spark.read.parquet(str(lake / "orders")).count() == 40
    append(kl, ld, 40, 10)
    exec(compile(code, "README.md", "exec"), {"spark": spark})  # noqa: S102
    assert spark.read.parquet(str(lake / "orders")).count() == 50


def test_a_bucket_of_segments_streams_through_spark(spark, kl, tmp_path):
    """s3:// on a local S3 server (moto's): the executors read the micro-batches' segments from the bucket."""
    import uuid

    from .s3_local import s3_server
    from .s3_local import storage as storage_options

    pafs = pytest.importorskip("pyarrow.fs")
    with s3_server() as (fs, opts):
        bucket = f"stream-{uuid.uuid4().hex[:12]}"  # moto keeps buckets per process, across servers
        fs.create_dir(bucket)
        storage = storage_options(opts)
        ld = make(kl, tmp_path, 60)
        pafs.copy_files(str(ld), f"{bucket}/logs", destination_filesystem=fs)
        ckpt = tmp_path / "ckpt"
        got = [r for b in run(spark, f"s3://{bucket}/logs", ckpt, maxOffsetsPerTrigger="25", **storage) for r in b]
        assert sorted(got) == expected(0, 60)
        append(kl, ld, 60, 40)
        pafs.copy_files(str(ld), f"{bucket}/logs", destination_filesystem=fs)
        assert [r for b in run(spark, f"s3://{bucket}/logs", ckpt, **storage) for r in b] == expected(60, 40)
