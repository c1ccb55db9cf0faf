"""Tiered storage (KIP-405): Kafka's LocalTieredStorage layout read as a partition's older segments, alone
or together with the log dir that holds the newest ones, each offset once."""

from __future__ import annotations

import json
import shutil

import pytest

from .conftest import ORACLE, run_kltool

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
SEG_IDS = {0: "c2VnbWVudC1pZC0wMDAwMA", 400: "c2VnbWVudC1pZC0wMDQwMA"}


def build(tmp_path, remote=(0, 400), local=(400, 800)):
    """A log dir holding the segments ``local`` of v2-multi-segment-0 and a LocalTieredStorage root holding
    copies of the segments ``remote`` (`<root>/kafka-tiered-storage/<topic>-0-<id>/<offset>-<id>.log`)."""
    src = ORACLE / "v2-multi-segment-0"
    logs = tmp_path / "logs"
    part = logs / "v2-multi-segment-0"
    part.mkdir(parents=True)
    for off in local:
        shutil.copy(src / f"{off:020d}.log", part)
    (logs / "log-start-offset-checkpoint").write_text("0\n1\nv2-multi-segment 0 0\n")
    root = tmp_path / "remote" / "kafka-tiered-storage" / f"v2-multi-segment-0-{TOPIC_ID}"
    root.mkdir(parents=True)
    for off in remote:
        stem = f"{off:020d}-{SEG_IDS[off]}"
        shutil.copy(src / f"{off:020d}.log", root / f"{stem}.log")
        (root / f"{stem}.snapshot").write_bytes(b"")
        (root / f"{stem}.leader_epoch_checkpoint").write_text("0\n1\n0 0\n")
    return logs, tmp_path / "remote"


def offsets_of(*paths):
    r = run_kltool("dump", "--json", "--records", *map(str, paths))
    assert r.code == 0, r.err
    return [x["offset"] for x in r.json() if x["type"] == "record"]


def test_union_of_remote_and_local_counts_each_offset_once(tmp_path):
    from kltool.storage import open_paths

    logs, remote = build(tmp_path)
    sel = open_paths([logs, remote])
    assert len(sel.partitions) == 1
    p = sel.partitions[0]
    assert [s.base_offset for s in p.segments] == [0, 400, 800]
    assert str(p.segments[0].log_path).startswith(str(remote))  # the older one from the tiered copy
    assert str(p.segments[1].log_path).startswith(str(logs))  # both copies: the local one is read
    assert (p.log_start_offset(), p.log_end_offset()) == (0, 1200)
    assert p.other_files == []


def test_tiered_root_alone(tmp_path):
    from kltool.storage import open_paths

    _logs, remote = build(tmp_path)
    for path in (remote, remote / "kafka-tiered-storage", next((remote / "kafka-tiered-storage").iterdir())):
        (p,) = open_paths([path]).partitions
        assert (p.topic, p.partition, p.remote.topic_id) == ("v2-multi-segment", 0, TOPIC_ID)
        assert [s.base_offset for s in p.segments] == [0, 400]
        assert p.log_end_offset() == 800


def test_info_verify_dump_read_the_union(tmp_path):
    logs, remote = build(tmp_path)
    r = run_kltool("info", "--json", str(logs), str(remote))
    assert r.code == 0, r.err
    rows = [x for x in r.json() if x.get("topic") == "v2-multi-segment"]
    assert rows and rows[0]["log_end_offset"] == 1200 and rows[0]["segments"] == 3, rows
    r = run_kltool("verify", str(logs), str(remote))
    assert r.code == 0, r.out + r.err
    assert "unknown_file" not in r.out + r.err
    r = run_kltool("dump", str(logs), str(remote))
    assert r.code == 0, r.err
    assert r.out.count("baseOffset: 0 ") == 1 and r.out.count("Dumping") == 3


def test_local_only_is_unchanged(tmp_path):
    logs, _remote = build(tmp_path)
    from kltool.storage import open_paths

    (p,) = open_paths([logs]).partitions
    assert [s.base_offset for s in p.segments] == [400, 800]


def test_spark_reader_reads_the_union(tmp_path):
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from .test_spark_datasource import read_all, rows_of

    logs, remote = build(tmp_path)
    rows = rows_of(read_all({"paths": json.dumps([str(logs), str(remote)])}))
    assert [r[2] for r in rows] == list(range(1200))
    rows = rows_of(read_all({"path": str(remote)}))
    assert [r[2] for r in rows] == list(range(800))


REAL_TIERED = ORACLE.parent / "broker-4.4-tiered"


def test_real_broker_layout_reads_as_one_partition():
    from kltool.storage import open_paths

    sel = open_paths([REAL_TIERED / "data", REAL_TIERED / "remote"], topic="tiered")
    (p,) = sel.partitions
    assert [s.base_offset for s in p.segments] == [0, 50, 100, 150, 200, 250, 300]
    assert p.remote.topic_id == p.metadata_topic_id()
    assert (p.log_start_offset(), p.log_end_offset()) == (0, 300)


def test_remote_log_metadata_decoded():
    r = run_kltool("--json", "dump", "--records", str(REAL_TIERED / "data" / "__remote_log_metadata-0"))
    assert r.code == 0, r.err
    decoded = [x["decoded"] for x in r.json() if x.get("type") == "record"]
    assert len(decoded) == 12
    assert [d["state"] for d in decoded] == ["COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED"] * 6
    first = decoded[0]
    assert first["type"] == "REMOTE_LOG_SEGMENT_METADATA_RECORD"
    seg = first["data"]
    assert seg["remoteLogSegmentId"]["topicIdPartition"]["name"] == "tiered"
    assert (seg["startOffset"], seg["endOffset"]) == (0, 49)
    assert seg["segmentLeaderEpochs"] == [{"leaderEpoch": 0, "offset": 0}]
    # the segment ids are the tiered copies' names
    remote = sorted(p.name for p in (REAL_TIERED / "remote").rglob("*.log"))
    starts = [d["data"] for d in decoded if d["type"] == "REMOTE_LOG_SEGMENT_METADATA_RECORD"]
    assert sorted(f"{d['startOffset']:020d}-{d['remoteLogSegmentId']['id']}.log" for d in starts) == remote
    r = run_kltool("dump", "--records", "--decoder", "remote-log-metadata",
                   str(REAL_TIERED / "data" / "__remote_log_metadata-0"))
    assert r.code == 0 and "COPY_SEGMENT_FINISHED" in r.out


def test_remote_log_metadata_other_records():
    from kltool.format.internal import decode_remote_log_metadata

    tip = b"\x07tiered" + bytes(16) + b"\x00\x00\x00\x03"  # compact string "tiered", uuid, partition 3
    body = b"\x01\x02\x00" + tip + b"\x00" + b"\x00\x00\x00\x01" + (5).to_bytes(8, "big") + b"\x01" + b"\x00"
    d = decode_remote_log_metadata(None, body)
    assert d["type"] == "REMOTE_PARTITION_DELETE_METADATA_RECORD" and d["state"] == "DELETE_PARTITION_STARTED"
    assert d["data"]["topicIdPartition"]["partition"] == 3
    snap = (b"\x01\x03\x00" + bytes(16) + (10).to_bytes(8, "big") + (19).to_bytes(8, "big") + b"\x00\x00\x00\x01"
            + (7).to_bytes(8, "big") + (8).to_bytes(8, "big") + b"\x01" + b"\x00\x00\x10\x00" + b"\x00" + b"\x03" + b"\x00")
    d = decode_remote_log_metadata(None, snap)
    assert d["type"] == "REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_RECORD" and d["state"] == "DELETE_SEGMENT_FINISHED"
    assert d["data"]["segmentSizeInBytes"] == 4096 and d["data"]["customMetadata"] is None
    assert decode_remote_log_metadata(None, b"\x01\x09\x00abc")["type"] == "unknown"
    from kltool.errors import CorruptDataError

    with pytest.raises(CorruptDataError):
        decode_remote_log_metadata(None, body[:-3])


def test_writing_commands_change_no_tiered_copy(tmp_path):
    """The writing commands plan from the log dir's own files, never the tiered copies; and applying an
    action on a tiered copy is refused, one line, nothing written."""
    from kltool.errors import UsageError
    from kltool.storage.change.apply import apply_changes
    from kltool.storage.change.plan import Action, ChangeSet

    logs, remote = build(tmp_path)
    r = run_kltool("rebuild-index", str(logs), str(remote))
    assert r.code == 0 and "Traceback" not in r.err, r
    assert not list(remote.rglob("*.index")) and not list(remote.rglob("*.timeindex"))
    copy = next(remote.rglob("00000000000000000000-*.log"))
    raw = bytearray(copy.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    copy.write_bytes(bytes(raw))
    before = copy.read_bytes()
    r = run_kltool("verify", str(logs), str(remote))
    assert r.code == 1 and copy.name in r.out + r.err, r
    r = run_kltool("verify", "--repair", str(logs), str(remote))
    assert "Traceback" not in r.err and copy.read_bytes() == before, r
    change = ChangeSet(copy.parent, [Action("truncate", copy, "test", start=10, end=len(before))])
    with pytest.raises(UsageError, match="tiered-storage copy"):
        apply_changes([change], "repair", tmp_path / "backup")
    assert copy.read_bytes() == before and not (tmp_path / "backup").exists()


def test_spark_reader_on_s3_reads_the_union(tmp_path):
    """The same layout in a bucket (moto's S3 on 127.0.0.1): the log dir's URI with the tiered root's URI
    reads each offset once."""
    pafs = pytest.importorskip("pyarrow.fs")
    pytest.importorskip("moto.server")
    pytest.importorskip("pyspark")
    from .s3_local import s3_server, storage
    from .test_spark_datasource import read_all, rows_of

    logs, remote = build(tmp_path)
    with s3_server() as (fs, s3_opts):
        fs.create_dir("cluster")
        pafs.copy_files(str(logs), "cluster/logs", destination_filesystem=fs)
        pafs.copy_files(str(remote), "cluster/remote", destination_filesystem=fs)
        opts = storage(s3_opts)
        both = json.dumps(["s3://cluster/logs", "s3://cluster/remote"])
        rows = rows_of(read_all({"paths": both, **opts}))
        assert [r[2] for r in rows] == list(range(1200))
        rows = rows_of(read_all({"path": "s3://cluster/remote", **opts}))
        assert [r[2] for r in rows] == list(range(800))


def _segment_file(path, start, end):
    from kltool.format import build_batch

    with open(path, "wb") as f:
        for b in range(start, end, 10):
            f.write(build_batch([(i, 1_700_000_000_000 + b + i, None, b"v%d" % (b + i), []) for i in range(10)],
                                base_offset=b))


def test_remote_copy_straddling_the_first_local_segment_is_read_up_to_it(tmp_path):
    """A follower's segments roll elsewhere than the leader's copies: remote 0..99, 100..199, local from 150.
    Offsets 150..199 are read once (from the log dir); the remote copy is cut, never changed."""
    from kltool.storage import open_paths

    part = tmp_path / "logs" / "t-0"
    rdir = tmp_path / "remote" / "kafka-tiered-storage" / f"t-0-{TOPIC_ID}"
    part.mkdir(parents=True)
    rdir.mkdir(parents=True)
    _segment_file(rdir / f"{0:020d}-{SEG_IDS[0]}.log", 0, 100)
    _segment_file(rdir / f"{100:020d}-{SEG_IDS[400]}.log", 100, 200)
    _segment_file(part / f"{150:020d}.log", 150, 260)
    before = {p: p.read_bytes() for p in rdir.iterdir()}
    (p,) = open_paths([tmp_path / "logs", tmp_path / "remote"]).partitions
    assert [s.base_offset for s in p.segments] == [0, 100, 150]
    cut = p.segments[1]
    assert cut.trimmed_from.parent == rdir and cut.next_offset() == 150
    r = run_kltool("offsets", "--count", "--json", str(tmp_path / "logs"), str(tmp_path / "remote"))
    assert r.code == 0 and [x["records"] for x in r.json() if x.get("topic") == "t"] == [260], r
    r = run_kltool("verify", str(tmp_path / "logs"), str(tmp_path / "remote"))
    assert r.code == 0 and "ERROR" not in r.out, r
    assert offsets_of(tmp_path / "logs", tmp_path / "remote") == list(range(260))
    assert {p: p.read_bytes() for p in rdir.iterdir()} == before
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from .test_spark_datasource import read_all, rows_of

    rows = rows_of(read_all({"paths": json.dumps([str(tmp_path / "logs"), str(tmp_path / "remote")])}))
    assert [r[2] for r in rows] == list(range(260))


def test_a_small_remote_index_is_fetched_once(tmp_path):
    """Planning a read of a remote segment read its index twice: the range read from the end that looks for
    the zero tail, then the same bytes again from 0. Counted on the loopback S3 server's request log: one
    GET of the object now (was two)."""
    import logging

    from kltool.format.index import encode_offset_entry
    from kltool.storage.uri import read_remote_index

    from .s3_local import s3_server

    entries = b"".join(encode_offset_entry(i, i * 100) for i in range(1, 500))
    with s3_server() as (fs, opts):
        fs.create_dir("bkt")
        with fs.open_output_stream("bkt/00000000000000000000.index") as f:
            f.write(entries + b"\0" * 8 * 100)
        gets: list[str] = []

        class Count(logging.Handler):
            def emit(self, record):
                msg = record.getMessage()
                if "GET /bkt/00000000000000000000.index" in msg:
                    gets.append(msg)

        log = logging.getLogger("werkzeug")
        h, level = Count(), log.level
        log.addHandler(h)
        log.setLevel(logging.INFO)
        try:
            data = read_remote_index("s3://bkt/00000000000000000000.index", opts)
        finally:
            log.removeHandler(h)
            log.setLevel(level)
    assert bytes(data[: len(entries)]) == entries and len(data) == len(entries) + 800
    assert len(gets) == 1, gets
