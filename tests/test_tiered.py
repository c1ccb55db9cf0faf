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
    r = run_kltool("dump", "--json", *map(str, paths))
    assert r.code == 0, r.err
    return [x["offset"] for x in r.json() if "offset" in x and x.get("kind", "record") == "record"]


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
