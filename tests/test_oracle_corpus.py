"""kltool's dump against Kafka's own read-out (fixtures/java-oracle/*/expected.jsonl, written and
read by Apache kafka-clients 3.9.1), field by field."""

from __future__ import annotations

import json

import pytest

from .conftest import ORACLE

VARIANTS = sorted(p.name for p in ORACLE.iterdir() if p.is_dir())

TS = {"create": "CREATE_TIME", "log_append": "LOG_APPEND_TIME", "none": "NO_TIMESTAMP_TYPE"}


def b64(v):
    if v is None:
        return None
    assert set(v) == {"base64"}, v
    return v["base64"]


def load_expected(variant):
    return [json.loads(line) for line in (ORACLE / variant / "expected.jsonl").read_text().splitlines()]


def test_all_variants_present():
    assert len(VARIANTS) >= 30


@pytest.mark.parametrize("variant", VARIANTS)
def test_dump_matches_kafka(kl, variant):
    expected = load_expected(variant)
    logs = sorted((ORACLE / variant).glob("*.log"))
    assert logs
    r = kl("--json", "dump", "--records", "--encoding", "base64", *logs)
    assert r.code in (0, 1), r
    got = r.json()
    # Kafka's iterator stops at a bad magic / short tail; we report those as findings and go on.
    got_batches = [g for g in got if g["type"] == "batch"]
    exp_batches = [e for e in expected if e["type"] == "batch"]
    by_pos = {(g["file"].rsplit("/", 1)[-1], g["position"]): g for g in got_batches}
    findings = [g for g in got if g["type"] == "finding"]
    for e in exp_batches:
        key = (e["file"], e["position"])
        if e.get("headerError"):
            # Kafka: CRC valid but the magic byte is wrong; kltool reports damage at that position.
            assert any(f["position"] == e["position"] and f["kind"] == "bad_magic" for f in findings), findings
            continue
        g = by_pos.pop(key)
        assert g["size"] == e["sizeInBytes"]
        assert g["magic"] == e["magic"]
        assert g["crc"] == e["crc"]
        assert g["crc_valid"] == e["isValid"]
        assert g["base_offset"] == e["baseOffset"], (g, e)
        assert g["last_offset"] == e["lastOffset"]
        assert g["count"] == e["countOrNull"]
        assert g["compression"] == e["compression"]
        assert TS[g["timestamp_type"]] == e["timestampType"]
        assert g["max_timestamp"] == e["maxTimestamp"]
        assert g["is_transactional"] == e["isTransactional"]
        assert g["is_control"] == e["isControl"]
        assert g["producer_id"] == e["producerId"]
        assert g["producer_epoch"] == e["producerEpoch"]
        assert g["base_sequence"] == e["baseSequence"]
        assert g["last_sequence"] == e["lastSequence"]
        assert g["partition_leader_epoch"] == e["partitionLeaderEpoch"]
        assert g["delete_horizon_ms"] == e["deleteHorizonMs"]
        if "baseTimestamp" in e:
            assert g["first_timestamp"] == e["baseTimestamp"]
    assert not by_pos, f"batches Kafka does not report: {list(by_pos)}"

    # Records of valid batches, in order.
    exp_records = [e for e in expected if e["type"] == "record"]
    got_records = []
    current_valid = False
    for g in got:
        if g["type"] == "batch":
            current_valid = g["crc_valid"]
        elif g["type"] == "record" and current_valid:
            got_records.append(g)
    assert len(got_records) == len(exp_records)
    for g, e in zip(got_records, exp_records, strict=True):
        assert g["offset"] == e["offset"]
        assert g["timestamp"] == e["timestamp"]
        assert g["sequence"] == e["sequence"]
        assert g["size"] == e["sizeInBytes"]
        assert b64(g["key"]) == e["key"]
        assert b64(g["value"]) == e["value"]
        assert [(h["key"], b64(h["value"])) for h in g["headers"]] == [(h["key"], h["value"]) for h in e["headers"]]
        if "control" in e:
            assert g["control"]["type"] == e["control"]["type"]
            assert g["control"].get("coordinator_epoch") == e["control"].get("coordinatorEpoch")
        else:
            assert "control" not in g

    # Where Kafka's recovery would stop: the first damage or invalid batch we report.
    for s in (e for e in expected if e["type"] == "summary"):
        problems = sorted(
            [f["position"] for f in findings if f["file"].endswith(s["file"])]
            + [g["position"] for g in got_batches if not g["crc_valid"] and g["file"].endswith(s["file"])])
        if s["validBytes"] == s["fileSize"]:
            assert problems == []
        else:
            assert problems and problems[0] == s["validBytes"], (problems, s)


@pytest.mark.parametrize("variant", VARIANTS)
def test_verify_matches_kafka_validity(kl, variant):
    expected = load_expected(variant)
    clean = all(s["validBytes"] == s["fileSize"] for s in expected if s["type"] == "summary")
    r = kl("--json", "verify", "--deep", *sorted((ORACLE / variant).glob("*.log")))
    errors = [f for f in r.json() if f["type"] == "finding" and f["severity"] == "error"]
    assert (r.code == 0) == clean, r
    assert (not errors) == clean


def test_transactional_control_batch_with_other_type_is_an_error(kl, tmp_path):
    """The broker's recovery parses a control batch with a producer id as an end-txn marker; a
    LEADER_CHANGE there fails the load, so verify must flag it."""
    from kltool.format import build_batch
    from kltool.format.batch import encode_control_key

    rec = (0, 1_700_000_000_000, encode_control_key(2), b"\x00\x00", ())
    b = build_batch([rec], base_offset=0, producer_id=9, producer_epoch=0, is_transactional=True, is_control=True)
    f = tmp_path / "00000000000000000000.log"
    f.write_bytes(b)
    r = kl("--json", "verify", f)
    assert r.code == 1
    assert any(x.get("kind") == "invalid_control" for x in r.json())
