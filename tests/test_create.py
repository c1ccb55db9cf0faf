"""kltool create: partition directories, partition.metadata, topic settings, the name rules."""

from __future__ import annotations

import json

import pytest

from kltool.format.checkpoints import parse_partition_metadata
from kltool.storage.topic_config import (
    CONFIG_FILE_NAME,
    DEFAULTS,
    load_topic_config,
    parse_config_items,
)
from kltool.storage.write.create import create_topic


def test_create_layout(kl, tmp_path):
    ld = tmp_path / "logs"
    r = kl("create", ld, "orders", "--partitions", "3")
    assert r.code == 0, r
    assert sorted(p.name for p in ld.iterdir()) == [".lock", CONFIG_FILE_NAME, "orders-0", "orders-1", "orders-2"]
    ids = set()
    for p in range(3):
        d = ld / f"orders-{p}"
        names = sorted(x.name for x in d.iterdir())
        assert names == ["00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
                         "leader-epoch-checkpoint", "partition.metadata"]
        text = (d / "partition.metadata").read_text()
        assert text.startswith("version: 0\ntopic_id: ") and not text.endswith("\n")  # Kafka's exact format
        version, tid = parse_partition_metadata(text)
        assert version == 0 and len(tid) == 22
        ids.add(tid)
        for n in names[:4]:
            assert (d / n).stat().st_size == 0
    assert len(ids) == 1  # one topic id for all partitions
    entry = json.loads((ld / CONFIG_FILE_NAME).read_text())["topics"]["orders"]
    assert entry == {"partitions": 3, "topic_id": ids.pop(), "config": {}}
    v = kl("verify", ld)
    assert v.code == 0 and "0 errors, 0 warnings" in v.out, v


def test_create_json_and_topic_id(kl, tmp_path):
    ld = tmp_path / "logs"
    r = kl("--json", "create", ld, "t", "--partitions", "2", "--topic-id", "Ck1TLvXHQzS9oAZVDYPoQw")
    assert r.code == 0, r
    objs = r.json()
    assert [o["op"] for o in objs if o["type"] == "action"] == ["create_partition", "create_partition"]
    summary = objs[-1]
    assert summary["type"] == "summary" and summary["topic_id"] == "Ck1TLvXHQzS9oAZVDYPoQw"
    assert summary["partitions"] == 2 and summary["created"] == 2 and summary["existed"] is False
    assert (ld / "t-1" / "partition.metadata").read_text() == "version: 0\ntopic_id: Ck1TLvXHQzS9oAZVDYPoQw"


def test_existing_topic(kl, tmp_path):
    ld = tmp_path / "logs"
    assert kl("create", ld, "orders", "--partitions", "2").code == 0
    r = kl("create", ld, "orders", "--partitions", "2")
    assert r.code == 2 and "already exists" in r.err and r.err.count("\n") == 1
    r = kl("create", ld, "orders", "--partitions", "1")
    assert r.code == 2 and "can only be increased" in r.err
    r = kl("create", ld, "orders", "--partitions", "2", "--if-not-exists")
    assert r.code == 0 and "already exists" in r.out


def test_add_partitions_keeps_topic_id_and_data(kl, tmp_path):
    ld = tmp_path / "logs"
    assert kl("create", ld, "orders", "--partitions", "2").code == 0
    tid = parse_partition_metadata((ld / "orders-0" / "partition.metadata").read_text())[1]
    assert kl("append", ld, "orders", "-p", "1", "--value", "x").code == 0
    before = (ld / "orders-1" / "00000000000000000000.log").read_bytes()
    r = kl("create", ld, "orders", "--partitions", "5")
    assert r.code == 0, r
    assert "3 partitions of topic orders" in r.out
    for p in range(5):
        assert parse_partition_metadata((ld / f"orders-{p}" / "partition.metadata").read_text())[1] == tid
    assert (ld / "orders-1" / "00000000000000000000.log").read_bytes() == before
    assert json.loads((ld / CONFIG_FILE_NAME).read_text())["topics"]["orders"]["partitions"] == 5


def test_topic_name_rules(kl, tmp_path):
    ld = tmp_path / "logs"
    for bad in (".", "..", "a" * 250, "bad/name", "spaces here", "ümlaut"):
        r = kl("create", ld, bad, "--partitions", "1")
        assert r.code == 2 and "Topic name is invalid" in r.err, (bad, r)
    assert kl("create", ld, "a" * 249, "--partitions", "1").code == 0
    r = kl("create", ld, "__cluster_metadata", "--partitions", "1")
    assert r.code == 2


def test_collision_warning_and_refusal(kl, tmp_path):
    ld = tmp_path / "logs"
    r = kl("create", ld, "metrics.cpu", "--partitions", "1")
    assert r.code == 0 and "could collide" in r.err
    r = kl("create", ld, "metrics_cpu", "--partitions", "1")
    assert r.code == 2 and "collides with existing topic: metrics.cpu" in r.err
    assert not (ld / "metrics_cpu-0").exists()
    assert kl("create", ld, "plain", "--partitions", "1").err == ""


def test_config_stored_validated_and_merged(kl, tmp_path):
    ld = tmp_path / "logs"
    r = kl("create", ld, "t", "--partitions", "1", "--config", "segment.bytes=1048576", "--config", "cleanup.policy=compact,delete",
           "--config", "message.timestamp.type=LogAppendTime")
    assert r.code == 0, r
    cfg = load_topic_config(ld, "t")
    assert cfg.segment_bytes == 1048576 and cfg.compact and cfg.log_append_time
    assert cfg.index_interval_bytes == 4096  # default
    # --if-not-exists on an existing topic still stores new settings (merged)
    r = kl("create", ld, "t", "--partitions", "1", "--if-not-exists", "--config", "retention.ms=1000")
    assert r.code == 0 and "stored settings" in r.out
    cfg = load_topic_config(ld, "t")
    assert cfg.retention_ms == 1000 and cfg.segment_bytes == 1048576
    for bad, msg in (("segment.bytes=13", "at least 14"), ("index.interval.bytes=-1", "at least 0"),
                     ("message.timestamp.type=Now", "one of"), ("compression.type=brotli", "one of"),
                     ("min.insync.replicas=2", "unsupported"), ("segment.bytes", "key=value"),
                     ("compression.zstd.level=23", "in [")):
        r = kl("create", ld, "u", "--partitions", "1", "--config", bad)
        assert r.code == 2 and msg in r.err, (bad, r)
        assert not (ld / "u-0").exists()


def test_config_defaults_match_kafka():
    cfg = load_topic_config("/nonexistent", "x")
    assert cfg.segment_bytes == 1073741824
    assert cfg.segment_index_bytes == 10485760
    assert cfg.index_interval_bytes == 4096
    assert cfg.max_message_bytes == 1048588
    assert cfg.segment_ms == 604800000
    assert cfg.compression_type == "producer"
    assert set(cfg.as_dict()) == set(DEFAULTS)
    assert parse_config_items(["segment.bytes= 100 "]) == {"segment.bytes": "100"}


def test_corrupt_config_file_is_one_line_error(kl, tmp_path):
    ld = tmp_path / "logs"
    assert kl("create", ld, "t", "--partitions", "1").code == 0
    (ld / CONFIG_FILE_NAME).write_text("{not json")
    r = kl("append", ld, "t", "--value", "x")
    assert r.code == 2 and "invalid JSON" in r.err and r.err.count("\n") == 1


def test_dry_run_changes_nothing(kl, tmp_path):
    ld = tmp_path / "logs"
    r = kl("create", ld, "t", "--partitions", "2", "--dry-run")
    assert r.code == 1 and "would create" in r.out
    assert not ld.exists()


def test_refuses_a_directory_that_is_not_a_log_dir(kl, tmp_path):
    d = tmp_path / "home"
    d.mkdir()
    (d / "notes.txt").write_text("hello")
    r = kl("create", d, "t", "--partitions", "1")
    assert r.code == 2 and "does not look like a Kafka log directory" in r.err


def test_broker_lock_refused(kl, tmp_path):
    from tests.test_fs import hold_lock, stop

    ld = tmp_path / "logs"
    assert kl("create", ld, "t", "--partitions", "1").code == 0
    p = hold_lock(ld / ".lock")
    try:
        r = kl("create", ld, "u", "--partitions", "1")
        assert r.code == 3 and "a broker or another kltool holds" in r.err
        assert not (ld / "u-0").exists()
    finally:
        stop(p)


def test_library_api(tmp_path):
    r = create_topic(tmp_path / "ld", "lib", 4)
    assert r.partitions == 4 and len(r.created) == 4 and not r.existed
    r2 = create_topic(tmp_path / "ld", "lib", 4, if_not_exists=True)
    assert r2.created == [] and r2.existed and r2.topic_id == r.topic_id


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state"])
def test_internal_topics_allowed(kl, tmp_path, name):
    assert kl("create", tmp_path / "ld", name, "--partitions", "1").code == 0


def test_internal_topic_defaults():
    cfg = load_topic_config("/nonexistent", "__consumer_offsets")
    assert cfg.segment_bytes == 104857600 and cfg.compact and cfg.overrides == {}
    assert load_topic_config("/nonexistent", "orders").segment_bytes == 1073741824


KRAFT_META = "#\n#Thu Nov 26 08:00:00 UTC 2026\nnode.id=1\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAA\nversion=1\ncluster.id=Q1Xb7sCfT2yH2xr3bE4TqA\n"
ZK_META = "#\n#Thu May 16 10:00:00 UTC 2019\nversion=0\nbroker.id=1001\n"


@pytest.mark.parametrize("shape", ["meta-v1", "cluster-metadata-dir"])
def test_create_refuses_a_kraft_log_dir(kl, tmp_path, shape):
    """Kafka 4.x renames a partition directory its KRaft metadata does not know -stray and serves nothing of it
    (tests/broker/test_broker_serves.py): create refuses, says why and what to do, and changes nothing."""
    ld = tmp_path / "logs"
    ld.mkdir()
    if shape == "meta-v1":
        (ld / "meta.properties").write_text(KRAFT_META)
    else:
        (ld / "__cluster_metadata-0").mkdir()
    before = sorted(p.name for p in ld.iterdir())
    for extra in ([], ["--dry-run"]):
        r = kl("create", ld, "orders", "--partitions", "2", *extra)
        assert r.code == 3, r
        assert "KRaft" in r.err and "stray" in r.err and "kafka-topics.sh --create --topic orders --partitions 2" in r.err
        assert "kltool append" in r.err and "--force" in r.err and len(r.err.strip().splitlines()) == 1
        if shape == "meta-v1":
            assert "cluster.id Q1Xb7sCfT2yH2xr3bE4TqA, node.id 1" in r.err
    assert sorted(p.name for p in ld.iterdir() if p.name != ".lock") == [n for n in before if n != ".lock"]
    # --force: the operator wants the directories anyway (on a copy, say)
    r = kl("create", ld, "orders", "--partitions", "2", "--force")
    assert r.code == 0, r
    assert (ld / "orders-1" / "partition.metadata").exists()
    # adding partitions is refused too; an existing topic with --if-not-exists creates nothing and passes
    assert kl("create", ld, "orders", "--partitions", "3").code == 3
    assert kl("create", ld, "orders", "--partitions", "2", "--if-not-exists").code == 0


def test_create_on_a_zookeeper_era_log_dir_still_works(kl, tmp_path):
    ld = tmp_path / "logs"
    ld.mkdir()
    (ld / "meta.properties").write_text(ZK_META)
    r = kl("create", ld, "orders", "--partitions", "1")
    assert r.code == 0, r
    assert (ld / "orders-0" / "partition.metadata").exists()
