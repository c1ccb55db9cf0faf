"""The stream reader's offsets without a JVM (kltool/spark/streaming.py): the calls Spark makes
(initialOffset, latestOffset, partitions, read), in order, on log dirs written by kltool's append."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402

from kltool.errors import KltoolError  # noqa: E402
from kltool.spark.streaming import KafkaLogStreamReader, rate_limit, stream_end  # noqa: E402


def append(kl, ld: Path, start: int, n: int, partitions: int = 1, *extra) -> None:
    lines = "".join(json.dumps({"key": f"k{i}", "value": f"v{i}", "partition": i % partitions}) + "\n"
                    for i in range(start, start + n))
    r = kl("append", ld, "orders", "--batch-records", "5", *extra, stdin=lines)
    assert r.code == 0, r


def make(kl, tmp_path, n, partitions=1, segment_bytes=400) -> Path:
    ld = tmp_path / "logs"
    assert kl("create", ld, "orders", "--partitions", partitions, "--config", f"segment.bytes={segment_bytes}").code == 0
    if n:
        append(kl, ld, 0, n, partitions)
    return ld


def reader(ld, **opts) -> KafkaLogStreamReader:
    from kltool.spark.datasource import KafkaLogDataSource

    src = KafkaLogDataSource({"path": str(ld), "startingOffsets": "earliest", **opts})
    return src.streamReader(None)


def offsets_read(r, start, end) -> list[tuple[int, int]]:
    return [(p, o) for part in r.partitions(start, end) for b in r.read(part)
            for p, o in zip(b.column("partition").to_pylist(), b.column("offset").to_pylist(), strict=True)]


def torn(ld: Path, scratch: Path, kl, start: int, n: int) -> tuple[Path, bytes]:
    """The bytes one more batch of ``n`` records would add to the active segment of ``ld``."""
    shutil.copytree(ld, scratch)
    append(kl, scratch, start, n)
    log = max((ld / "orders-0").glob("*.log"))
    return log, (scratch / "orders-0" / log.name).read_bytes()[log.stat().st_size:]


def test_offsets_are_sparks_kafka_json_and_go_on_over_new_batches_and_segments(kl, tmp_path):
    ld = make(kl, tmp_path, 30, partitions=2)
    r = reader(ld)
    start = r.initialOffset()
    assert start == {"orders": {"0": 0, "1": 0}}
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"orders": {"0": 15, "1": 15}}
    assert sorted(offsets_read(r, start, end)) == sorted((i % 2, i // 2) for i in range(30))
    assert r.latestOffset(end, ReadAllAvailable()) == end  # nothing new
    n = len(list((ld / "orders-0").glob("*.log")))
    append(kl, ld, 30, 40, 2)
    assert len(list((ld / "orders-0").glob("*.log"))) > n  # rolled
    end2 = r.latestOffset(end, ReadAllAvailable())
    assert end2 == {"orders": {"0": 35, "1": 35}}
    assert sorted(offsets_read(r, end, end2)) == sorted((p, o) for p in (0, 1) for o in range(15, 35))
    assert r.reportLatestOffset() == end2


def test_the_stream_ends_before_a_torn_batch_and_reads_it_once_whole(kl, tmp_path):
    ld = make(kl, tmp_path, 20, segment_bytes=1 << 20)
    log, tail = torn(ld, tmp_path / "scratch", kl, 20, 5)
    p = _partition(ld)
    assert stream_end(p) == 20
    with open(log, "ab") as f:
        f.write(tail[:-7])  # all but the last bytes of the batch
    assert stream_end(_partition(ld)) == 20
    r = reader(ld)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"orders": {"0": 20}}
    assert [o for _p, o in offsets_read(r, start, end)] == list(range(20))  # no data-loss error for the tail
    with open(log, "ab") as f:
        f.write(bytes(7))  # every byte there, the last ones not written yet: the CRC does not match
    assert r.latestOffset(start, ReadAllAvailable()) == {"orders": {"0": 20}}
    assert [o for _p, o in offsets_read(r, start, end)] == list(range(20))
    with open(log, "r+b") as f:
        f.seek(-7, os.SEEK_END)
        f.write(tail[-7:])
    end2 = r.latestOffset(end, ReadAllAvailable())
    assert end2 == {"orders": {"0": 25}}
    assert [o for _p, o in offsets_read(r, end, end2)] == list(range(20, 25))


def test_a_batch_with_a_bad_crc_mid_segment_is_data_loss_when_read(kl, tmp_path):
    ld = make(kl, tmp_path, 20, segment_bytes=1 << 20)
    log = max((ld / "orders-0").glob("*.log"))
    data = bytearray(log.read_bytes())
    data[100] ^= 0xFF  # inside the first batch's records
    log.write_bytes(bytes(data))
    r = reader(ld)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"orders": {"0": 20}}  # the last whole valid batch
    with pytest.raises(KltoolError, match="data lost"):
        offsets_read(r, start, end)
    r = reader(ld, failOnDataLoss="false")
    assert [o for _p, o in offsets_read(r, start, end)] == list(range(5, 20))


def _partition(ld):
    from kltool.storage.partition import Partition

    return Partition(ld / "orders-0")


def test_max_offsets_per_trigger_is_the_default_read_limit_and_shared_like_sparks(kl, tmp_path):
    ld = make(kl, tmp_path, 40, partitions=2)
    r = reader(ld, maxOffsetsPerTrigger="10")
    assert r.getDefaultReadLimit() == ReadMaxRows(10)
    assert reader(ld).getDefaultReadLimit() == ReadAllAvailable()
    start = r.initialOffset()
    end = r.latestOffset(start, ReadMaxRows(10))
    assert end == {"orders": {"0": 5, "1": 5}}
    assert r.latestOffset(start, ReadAllAvailable()) == {"orders": {"0": 20, "1": 20}}  # the engine's limit wins
    # Spark's proration: by what each partition has to read, at least one offset for a small one
    a, b = ("t", 0), ("t", 1)
    assert rate_limit({a: 0, b: 0}, {a: 1000, b: 1}, 100) == {a: 99, b: 1}
    assert rate_limit({a: 0, b: 0}, {a: 30, b: 10}, 100) == {a: 30, b: 10}


def test_min_offsets_per_trigger_holds_micro_batches_back_as_sparks_kafka_source(kl, tmp_path):
    """Spark's minOffsetsPerTrigger: the first call lets a micro-batch through, later ones only when at
    least that many offsets are new (over all partitions) or maxTriggerDelay has passed since the last one;
    with maxOffsetsPerTrigger too, a micro-batch let through is capped as before. pyspark hands the
    reader's own limit back (ReadMinRows), so both come from the options."""
    ld = make(kl, tmp_path, 30, partitions=2)
    r = reader(ld, minOffsetsPerTrigger="20", maxTriggerDelay="1h")
    limit = r.getDefaultReadLimit()
    assert limit == ReadMinRows(20)
    start = r.initialOffset()
    end = r.latestOffset(start, limit)
    assert end == {"orders": {"0": 15, "1": 15}}  # the first: through (Spark's last trigger time starts at 0)
    append(kl, ld, 30, 10, 2)
    assert r.latestOffset(end, limit) == end  # 10 new < 20: no micro-batch yet
    assert r.latestOffset(end, ReadAllAvailable()) == {"orders": {"0": 20, "1": 20}}  # the engine's limit wins
    append(kl, ld, 40, 10, 2)
    assert r.latestOffset(end, limit) == {"orders": {"0": 25, "1": 25}}  # 20 new: through
    # with maxOffsetsPerTrigger: capped when let through; maxTriggerDelay 0 lets every call through
    r = reader(ld, minOffsetsPerTrigger="4", maxOffsetsPerTrigger="6", maxTriggerDelay="0")
    start = r.initialOffset()
    assert r.getDefaultReadLimit() == ReadMinRows(4)
    assert r.latestOffset(start, r.getDefaultReadLimit()) == {"orders": {"0": 3, "1": 3}}
    r = reader(ld, minOffsetsPerTrigger="1000", maxTriggerDelay="0")
    assert r.latestOffset(start, r.getDefaultReadLimit()) == {"orders": {"0": 25, "1": 25}}
    r = reader(ld, minOffsetsPerTrigger="1000", maxOffsetsPerTrigger="2000")
    r.latestOffset(start, r.getDefaultReadLimit())
    assert r.latestOffset(start, r.getDefaultReadLimit()) == start  # 50 new < 1000, within 15 min (the default)


def test_start_timestamps_in_a_stream_are_what_listoffsets_answers(kl, tmp_path):
    """As in a batch query (and Spark's Kafka source, whose startingOffsetsByTimestampStrategy is error by
    default in a stream too): special negative timestamps, no offset an error, every partition named."""
    ld = make(kl, tmp_path, 20, partitions=2)
    assert reader(ld, startingTimestamp="-2").initialOffset() == {"orders": {"0": 0, "1": 0}}
    assert reader(ld, startingTimestamp="-1").initialOffset() == {"orders": {"0": 10, "1": 10}}
    assert reader(ld, startingOffsetsByTimestamp='{"orders":{"0":-1,"1":-2}}').initialOffset() == {
        "orders": {"0": 10, "1": 0}}
    with pytest.raises(KltoolError, match=r"orders-[01]: no offset matches startingTimestamp -5 "):
        reader(ld, startingTimestamp="-5").initialOffset()
    late = str(4_000_000_000_000)
    with pytest.raises(KltoolError, match=rf"orders-[01]: no offset matches startingTimestamp {late} "):
        reader(ld, startingTimestamp=late).initialOffset()
    assert reader(ld, startingTimestamp=late, startingOffsetsByTimestampStrategy="latest").initialOffset() == {
        "orders": {"0": 10, "1": 10}}
    with pytest.raises(KltoolError, match=r"option startingOffsetsByTimestamp names \{orders-0\}, the partitions read are \{orders-0, orders-1\}"):
        reader(ld, startingOffsetsByTimestamp='{"orders":{"0":-2}}').initialOffset()
    with pytest.raises(KltoolError, match=r"option startingOffsets names \{orders-0\}, the partitions read are"):
        reader(ld, startingOffsets='{"orders":{"0":-2}}').initialOffset()


def test_available_now_stops_at_what_was_there_when_the_query_started(kl, tmp_path):
    ld = make(kl, tmp_path, 20)
    r = reader(ld)
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    append(kl, ld, 20, 10)
    assert r.latestOffset(start, ReadAllAvailable()) == {"orders": {"0": 20}}
    assert reader(ld).latestOffset(start, ReadAllAvailable()) == {"orders": {"0": 30}}


def test_starting_offsets_latest_is_the_default_as_in_sparks_kafka_source(kl, tmp_path):
    from kltool.spark.datasource import KafkaLogDataSource

    ld = make(kl, tmp_path, 20)
    r = KafkaLogDataSource({"path": str(ld)}).streamReader(None)
    assert r.initialOffset() == {"orders": {"0": 20}}
    assert reader(ld, startingOffsets='{"orders":{"0":7}}').initialOffset() == {"orders": {"0": 7}}
    assert reader(ld, startingOffsets='{"orders":{"0":-1}}').initialOffset() == {"orders": {"0": 20}}
    with pytest.raises(KltoolError, match="starting offset 99 is after the end of the partition"):
        reader(ld, startingOffsets='{"orders":{"0":99}}').initialOffset()
    r = reader(ld, startingOffsets='{"orders":{"0":99}}', failOnDataLoss="false")
    assert r.initialOffset() == {"orders": {"0": 20}}


def test_retention_below_the_checkpoint_is_data_loss(kl, tmp_path):
    ld = make(kl, tmp_path, 100)
    r = reader(ld)
    start = {"orders": {"0": 10}}
    assert kl("retention", ld, "--before-offset", "50", "--no-backup").code == 0
    end = r.latestOffset(start, ReadAllAvailable())
    with pytest.raises(KltoolError, match="offsets 10 to 49 are gone"):
        r.partitions(start, end)
    r = reader(ld, failOnDataLoss="false")
    assert [o for _p, o in offsets_read(r, start, end)] == list(range(50, 100))


def test_new_and_vanished_partitions(kl, tmp_path):
    ld = make(kl, tmp_path, 10)
    r = reader(ld)
    start = {"orders": {"0": 10}, "gone": {"0": 3}}
    with pytest.raises(KltoolError, match="gone-0 are gone"):
        r.latestOffset(start, ReadAllAvailable())
    assert kl("create", ld, "audit", "--partitions", "1").code == 0
    assert kl("append", ld, "audit", "--value", "a").code == 0
    r = reader(ld, failOnDataLoss="false")
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"audit": {"0": 1}, "orders": {"0": 10}}
    assert offsets_read(r, {"orders": {"0": 10}}, end) == [(0, 0)]  # the new partition from its start


def test_nothing_is_written_to_the_log_dir(kl, tmp_path):
    ld = make(kl, tmp_path, 50, partitions=2)
    before = {p: (os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in ld.rglob("*")}
    r = reader(ld, maxOffsetsPerTrigger="7")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    while (end := r.latestOffset(start, ReadMaxRows(7))) != start:
        offsets_read(r, start, end)
        r.commit(end)
        start = end
    assert start == {"orders": {"0": 25, "1": 25}}
    assert {p: (os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in ld.rglob("*")} == before


def test_option_errors_wait_for_the_first_call(kl, tmp_path):
    ld = make(kl, tmp_path, 5)
    r = reader(ld, endingOffsets="latest")  # creating the reader never raises (see KafkaLogStreamReader)
    with pytest.raises(KltoolError, match="endingOffsets is not valid in a stream"):
        r.initialOffset()
    with pytest.raises(KltoolError, match="endingOffsets is not valid in a stream"):
        r.latestOffset({"orders": {"0": 0}}, ReadAllAvailable())


@pytest.fixture
def bucket():
    """An empty bucket on an S3 server on 127.0.0.1 (moto's): (pyarrow filesystem, storage options)."""
    import uuid

    from .s3_local import s3_server, storage

    with s3_server() as (fs, opts):
        name = f"stream-{uuid.uuid4().hex[:12]}"  # moto keeps buckets per process, across servers
        fs.create_dir(name)
        yield fs, name, storage(opts)


def upload(fs, name: str, ld: Path, tail_cut: int = 0) -> None:
    """The log dir's partition files into s3://NAME/logs/ (the last segment cut by ``tail_cut`` bytes)."""
    for d in ld.iterdir():
        if not d.is_dir():
            continue
        logs = sorted(d.glob("*.log"))
        for f in d.iterdir():
            data = f.read_bytes()
            if tail_cut and f == logs[-1]:
                data = data[:-tail_cut]
            with fs.open_output_stream(f"{name}/logs/{d.name}/{f.name}") as out:
                out.write(data)


def test_a_bucket_of_segments_streams_like_a_log_dir(kl, tmp_path, bucket):
    fs, name, storage = bucket
    uri = f"s3://{name}/logs"
    ld = make(kl, tmp_path, 30)
    upload(fs, name, ld, tail_cut=9)  # the last batch of the last segment not all there yet
    r = reader(uri, **storage)
    start = r.initialOffset()
    assert start == {"orders": {"0": 0}}
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"orders": {"0": 25}}
    assert [o for _p, o in offsets_read(r, start, end)] == list(range(25))
    append(kl, ld, 30, 30)  # new segments
    upload(fs, name, ld)
    end2 = r.latestOffset(end, ReadAllAvailable())
    assert end2 == {"orders": {"0": 60}}
    assert [o for _p, o in offsets_read(r, end, end2)] == list(range(25, 60))
    assert reader(uri, startingOffsets="latest", **storage).initialOffset() == end2
