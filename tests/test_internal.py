"""Decoders of __consumer_offsets, __transaction_state and __cluster_metadata records
(kltool/format/internal.py, reference: shared/reference/internal-topics.md)."""

from __future__ import annotations

import base64
import collections
import glob
import json
import re
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kltool.errors import CorruptDataError
from kltool.format import decode_records
from kltool.format.internal import (
    DECODERS,
    decode_cluster_metadata,
    decode_consumer_offsets,
    decode_message,
    decode_raft_control,
    decode_remote_log_metadata,
    decode_transaction_state,
    decoder_for_topic,
)
from kltool.format.records import BatchHeader
from kltool.format.varint import encode_uvarint as uv
from kltool.storage.scan import walk

from .conftest import REAL, ROOT

SHARED = ROOT.parent / "shared"
CORPUS = SHARED / "corpus" / "real"
REFERENCE = SHARED / "reference" / "internal-topics.md"


def dumps(o) -> str:
    return json.dumps(o, separators=(",", ":"), ensure_ascii=False)


def records(path, *, controls: bool = False):
    """(offset, key, value, batch) of every record in a segment file."""
    for h in walk(path, with_data=True):
        assert isinstance(h, BatchHeader), h
        if h.is_control and not controls:
            continue
        for r in decode_records(h):
            yield r.offset, r.key, r.value, h


def dump_line(d: dict) -> str:
    """What kafka-dump-log.sh --offsets-decoder prints after the record metadata."""
    return f"key: {dumps(d['key'])} payload: {'<DELETE>' if d['payload'] is None else dumps(d['payload'])}"


# --- byte builders (Kafka's generated-message encoding, reference section 1) -----------------

def i8(v): return struct.pack(">b", v)
def i16(v): return struct.pack(">h", v)
def u16(v): return struct.pack(">H", v)
def i32(v): return struct.pack(">i", v)
def i64(v): return struct.pack(">q", v)
def f64(v): return struct.pack(">d", v)


def s16(s: str | None) -> bytes:  # non-flexible string
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def cs(s: str | None) -> bytes:  # compact string
    if s is None:
        return uv(0)
    b = s.encode()
    return uv(len(b) + 1) + b


def cb(b: bytes | None) -> bytes:  # compact bytes
    return uv(0) if b is None else uv(len(b) + 1) + b


def carr(items: list[bytes] | None) -> bytes:
    return uv(0) if items is None else uv(len(items) + 1) + b"".join(items)


def arr(items: list[bytes] | None) -> bytes:
    return i32(-1) if items is None else i32(len(items)) + b"".join(items)


def uuid(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "==")


def tags(*fields: tuple[int, bytes]) -> bytes:
    return uv(len(fields)) + b"".join(uv(t) + uv(len(v)) + v for t, v in fields)


NO_TAGS = b"\x00"


def meta(api_key: int, version: int, body: bytes) -> bytes:
    return uv(1) + uv(api_key) + uv(version) + body


# ============================================================================================
# __consumer_offsets: real data


WILLIAM_28 = REAL / "william0423-indexed-zk/__consumer_offsets-28/00000000000000000000.log"
SPOOLDIR = REAL / "connect-spooldir-2019-zk"
K271 = REAL / "kafka2.7.1-compacted-zk"


def test_william_group_metadata_and_commits_match_kafka_dump_log():
    recs = list(records(WILLIAM_28))
    decoded = [(o, decode_consumer_offsets(k, v)) for o, k, v, _ in recs]
    o0, d0 = decoded[0]
    assert o0 == 0 and d0["type"] == "group_metadata"
    # Lines printed by kafka-dump-log.sh --offsets-decoder (Kafka >= 3.8) for offsets 0 and 1.
    assert dump_line(d0) == (
        'key: {"type":"2","data":{"group":"debug-consumer-group"}} payload: {"version":"2","data":'
        '{"protocolType":"consumer","generation":1,"protocol":"range","leader":'
        '"consumer-1-61400dcb-1b93-4b4e-8891-5ae75e419305","currentStateTimestamp":1534299389537,"members":'
        '[{"memberId":"consumer-1-61400dcb-1b93-4b4e-8891-5ae75e419305","clientId":"consumer-1","clientHost":'
        '"/127.0.0.1","rebalanceTimeout":300000,"sessionTimeout":10000,"subscription":{"topics":["debug_topic"],'
        '"userData":""},"assignment":{"assignedPartitions":[{"topic":"debug_topic","partitions":[0]}],'
        '"userData":""}}]}}')
    o1, d1 = decoded[1]
    assert o1 == 1
    assert dump_line(d1) == (
        'key: {"type":"1","data":{"group":"debug-consumer-group","topic":"debug_topic","partition":0}} '
        'payload: {"version":"2","data":{"offset":20,"metadata":"","commitTimestamp":1534299390704}}')
    commits = [d for _, d in decoded if d["type"] == "offset_commit"]
    assert len(commits) == len(decoded) - 1
    assert {(c["key"]["data"]["group"], c["key"]["data"]["topic"]) for c in commits} == {
        ("debug-consumer-group", "debug_topic")}
    assert {c["payload"]["version"] for c in commits} == {"2"}
    assert all("leaderEpoch" not in c["payload"]["data"] for c in commits)  # v2 has no leader epoch


def test_spooldir_schema_registry_group_and_tombstone():
    decoded = {o: decode_consumer_offsets(k, v) for o, k, v, _ in records(SPOOLDIR / "__consumer_offsets-29/00000000000000000000.log")}
    assert dump_line(decoded[4]) == 'key: {"type":"2","data":{"group":"schema-registry"}} payload: <DELETE>'
    assert decoded[4]["payload"] is None and decoded[4]["type"] == "group_metadata"
    g = decoded[0]["payload"]["data"]
    assert decoded[0]["payload"]["version"] == "2"
    assert (g["protocolType"], g["generation"], g["protocol"]) == ("sr", 1, "v0")
    assert g["leader"] == "sr-1-8fd246d3-9dcc-4bce-8a7b-76737d846089"
    m = g["members"][0]
    assert m["memberId"] == g["leader"] and m["clientId"] == "sr-1" and m["rebalanceTimeout"] == 300000
    # not the "consumer" protocol: subscription and assignment stay base64
    assert isinstance(m["subscription"], str) and isinstance(m["assignment"], str)
    base64.b64decode(m["subscription"], validate=True)
    empty = decoded[1]["payload"]["data"]
    assert empty == {"protocolType": "sr", "generation": 2, "protocol": None, "leader": None,
                     "currentStateTimestamp": 1558736565781, "members": []}


def test_spooldir_connect_group():
    decoded = [decode_consumer_offsets(k, v) for _, k, v, _ in records(SPOOLDIR / "__consumer_offsets-37/00000000000000000000.log")]
    assert {d["key"]["data"]["group"] for d in decoded} == {"compose-connect-group"}
    assert [d["payload"] is None for d in decoded].count(True) == 1
    first = decoded[0]["payload"]["data"]
    assert first["protocolType"] == "connect" and first["protocol"] == "default"
    assert first["members"][0]["clientId"] == "connect-1" and first["members"][0]["clientHost"] == "/172.21.0.2"
    gens = [d["payload"]["data"]["generation"] for d in decoded[:16]]
    assert gens == list(range(1, 17))


def test_spooldir_empty_group_id_commits_and_offset_tombstone():
    decoded = [(o, decode_consumer_offsets(k, v)) for o, k, v, _ in records(SPOOLDIR / "__consumer_offsets-0/00000000000000000000.log")]
    o, d = decoded[0]
    assert d == {"type": "offset_commit",
                 "key": {"type": "1", "data": {"group": "", "topic": "docker-connect-configs", "partition": 0}},
                 "payload": {"version": "3", "data": {"offset": 12, "leaderEpoch": -1, "metadata": "",
                                                      "commitTimestamp": 1558748434402}}}
    o, d = decoded[-1]
    assert o == 5 and d["payload"] is None and d["key"]["data"]["topic"] == "docker-connect-configs"


def test_kafka271_partition_39_v3_values_and_tombstones():
    out = []
    for seg in sorted((K271 / "__consumer_offsets-39").glob("*.log")):
        out += [(o, decode_consumer_offsets(k, v)) for o, k, v, _ in records(seg)]
    by_offset = dict(out)
    assert sorted(by_offset) == [4, 16, 17, 18, 19]
    assert dump_line(by_offset[4]) == 'key: {"type":"2","data":{"group":"console-consumer-52588"}} payload: <DELETE>'
    assert by_offset[16]["payload"] == {"version": "3", "data": {"offset": 9, "leaderEpoch": -1, "metadata": "",
                                                                 "commitTimestamp": 1685814551579}}
    assert by_offset[16]["key"]["data"] == {"group": "console-consumer-65070", "topic": "test_topic_0603",
                                            "partition": 0}
    g = by_offset[17]["payload"]
    assert g["version"] == "3" and g["data"]["protocolType"] == "consumer" and g["data"]["generation"] == 6
    assert g["data"]["members"] == []
    assert by_offset[18]["type"] == "offset_commit" and by_offset[18]["payload"] is None
    assert by_offset[19]["type"] == "group_metadata" and by_offset[19]["payload"] is None


def test_kafka271_consumer_protocol_v1_subscription_decoded():
    [(_, k, v, _)] = list(records(K271 / "__consumer_offsets-17/00000000000000000000.log"))[:1]
    d = decode_consumer_offsets(k, v)
    m = d["payload"]["data"]["members"][0]
    assert d["payload"]["version"] == "3"
    assert m["groupInstanceId"] is None  # v3 field, null
    assert m["clientId"] == "consumer-console-consumer-55231-1"
    assert m["subscription"] == {"topics": ["myTopic"], "userData": None, "ownedPartitions": []}
    assert m["assignment"] == {"assignedPartitions": [{"topic": "myTopic", "partitions": [0]}], "userData": None}


def test_every_fixture_consumer_offsets_record_decodes():
    counts = collections.Counter()
    for path in sorted(REAL.glob("*/__consumer_offsets-*/*.log")):
        for _, k, v, _ in records(path):
            d = decode_consumer_offsets(k, v)
            dumps(d)  # JSON-able
            counts[(path.parts[-3], d["type"], d["payload"] and d["payload"]["version"])] += 1
    assert counts == {
        ("william0423-indexed-zk", "offset_commit", "2"): 8201,
        ("william0423-indexed-zk", "group_metadata", "2"): 1,
        ("connect-spooldir-2019-zk", "group_metadata", "2"): 173,
        ("connect-spooldir-2019-zk", "group_metadata", None): 2,
        ("connect-spooldir-2019-zk", "offset_commit", "3"): 49,
        ("connect-spooldir-2019-zk", "offset_commit", None): 1,
        ("kafka2.7.1-compacted-zk", "group_metadata", "3"): 8,
        ("kafka2.7.1-compacted-zk", "group_metadata", None): 6,
        ("kafka2.7.1-compacted-zk", "offset_commit", "3"): 1,
        ("kafka2.7.1-compacted-zk", "offset_commit", None): 1,
    }


# ============================================================================================
# __consumer_offsets: hand-built values of every version


def test_offset_commit_value_versions():
    key = i16(1) + s16("g") + s16("t") + i32(3)
    v0 = i16(0) + i64(42) + s16("meta") + i64(1000)
    assert decode_consumer_offsets(key, v0)["payload"] == {
        "version": "0", "data": {"offset": 42, "metadata": "meta", "commitTimestamp": 1000}}
    v1 = i16(1) + i64(42) + s16("") + i64(1000) + i64(2000)
    assert decode_consumer_offsets(key, v1)["payload"]["data"] == {
        "offset": 42, "metadata": "", "commitTimestamp": 1000, "expireTimestamp": 2000}
    v3 = i16(3) + i64(42) + i32(7) + s16("") + i64(1000)
    assert decode_consumer_offsets(key, v3)["payload"]["data"] == {
        "offset": 42, "leaderEpoch": 7, "metadata": "", "commitTimestamp": 1000}
    v4 = i16(4) + i64(42) + i32(7) + cs("m") + i64(1000) + tags((9, b"\x01\x02"))  # unknown tag: skipped
    assert decode_consumer_offsets(key, v4)["payload"] == {
        "version": "4", "data": {"offset": 42, "leaderEpoch": 7, "metadata": "m", "commitTimestamp": 1000}}
    # the 0.8.2 key type 0 has the same layout
    d = decode_consumer_offsets(i16(0) + s16("g") + s16("t") + i32(3), v0)
    assert d["type"] == "offset_commit" and d["key"] == {"type": "0", "data": {"group": "g", "topic": "t", "partition": 3}}
    # a newer value version is read with the newest layout (v4), like Kafka's generated reader
    assert decode_consumer_offsets(key, i16(5) + v4[2:])["payload"]["data"]["metadata"] == "m"


def test_group_metadata_value_v0_v1():
    key = i16(2) + s16("grp")
    member0 = s16("m-1") + s16("client") + s16("/10.0.0.1") + i32(10000) + arr([b"\x00\x01"])[:0] \
        + i32(0) + i32(0)  # empty subscription and assignment bytes
    v0 = i16(0) + s16("") + i32(0) + s16(None) + s16(None) + arr([member0])
    assert decode_consumer_offsets(key, v0)["payload"]["data"] == {
        "protocolType": "", "generation": 0, "protocol": None, "leader": None,
        "members": [{"memberId": "m-1", "clientId": "client", "clientHost": "/10.0.0.1", "sessionTimeout": 10000,
                     "subscription": "", "assignment": ""}]}
    member1 = s16("m-1") + s16("c") + s16("h") + i32(300000) + i32(10000) + i32(0) + i32(0)
    v1 = i16(1) + s16("x") + i32(3) + s16("p") + s16("m-1") + arr([member1])
    assert decode_consumer_offsets(key, v1)["payload"]["data"]["members"][0] == {
        "memberId": "m-1", "clientId": "c", "clientHost": "h", "rebalanceTimeout": 300000, "sessionTimeout": 10000,
        "subscription": "", "assignment": ""}


def test_group_metadata_value_v4_matches_dump_log_segments_test():
    sub = i16(3) + arr([s16("foo")]) + i32(-1) + arr([s16("foo") + arr([i32(0)])]) + i32(0) + s16("rack")
    asg = i16(3) + arr([s16("foo") + arr([i32(0)])]) + i32(-1)
    member = (cs("member") + cs("instance") + cs("client") + cs("host") + i32(1000) + i32(100)
              + cb(sub) + cb(asg) + NO_TAGS)
    value = i16(4) + cs("consumer") + i32(10) + cs("range") + cs("member") + i64(-1) + carr([member]) + NO_TAGS
    d = decode_consumer_offsets(i16(2) + s16("group"), value)
    assert dump_line(d) == (
        'key: {"type":"2","data":{"group":"group"}} payload: {"version":"4","data":{"protocolType":"consumer",'
        '"generation":10,"protocol":"range","leader":"member","currentStateTimestamp":-1,"members":[{"memberId":'
        '"member","groupInstanceId":"instance","clientId":"client","clientHost":"host","rebalanceTimeout":1000,'
        '"sessionTimeout":100,"subscription":{"topics":["foo"],"userData":null,"ownedPartitions":[{"topic":"foo",'
        '"partitions":[0]}],"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":[{"topic":"foo",'
        '"partitions":[0]}],"userData":null}}]}}')


def test_consumer_protocol_fallbacks():
    # a subscription that does not parse stays base64; version 7 is read with the v3 layout
    bad_sub = i16(0) + i32(5)  # 5 topics announced, none present
    future_asg = i16(7) + arr([s16("t") + arr([i32(1), i32(2)])]) + i32(-1)
    member = s16("m") + s16(None) + s16("c") + s16("h") + i32(1) + i32(2) + arr([])[:0] \
        + i32(len(bad_sub)) + bad_sub + i32(len(future_asg)) + future_asg
    value = i16(3) + s16("consumer") + i32(1) + s16("range") + s16("m") + i64(5) + arr([member])
    m = decode_consumer_offsets(i16(2) + s16("g"), value)["payload"]["data"]["members"][0]
    assert m["subscription"] == base64.b64encode(bad_sub).decode()
    assert m["assignment"] == {"assignedPartitions": [{"topic": "t", "partitions": [1, 2]}], "userData": None}


def test_consumer_group_member_metadata_classic_member_tag():
    key = i16(5) + s16("g") + s16("member-1")
    body = (cs(None) + cs("rack-a") + cs("client") + cs("/1.2.3.4") + carr([cs("orders")]) + cs(None)
            + i32(45000) + cs("uniform"))
    base = {"instanceId": None, "rackId": "rack-a", "clientId": "client", "clientHost": "/1.2.3.4",
            "subscribedTopicNames": ["orders"], "subscribedTopicRegex": None, "rebalanceTimeoutMs": 45000,
            "serverAssignor": "uniform"}
    d = decode_consumer_offsets(key, i16(0) + body + NO_TAGS)
    assert d["type"] == "consumer_group_member_metadata"
    assert d["key"] == {"type": "5", "data": {"groupId": "g", "memberId": "member-1"}}
    assert d["payload"] == {"version": "0", "data": base}  # tag 0 absent: the empty-struct default, not shown
    d = decode_consumer_offsets(key, i16(0) + body + tags((0, uv(0))))
    assert d["payload"]["data"] == {**base, "classicMemberMetadata": None}
    classic = uv(1) + i32(10000) + carr([cs("range") + cb(b"\x00\x01") + NO_TAGS]) + NO_TAGS
    d = decode_consumer_offsets(key, i16(0) + body + tags((0, classic)))
    assert d["payload"]["data"]["classicMemberMetadata"] == {
        "sessionTimeoutMs": 10000, "supportedProtocols": [{"name": "range", "metadata": "AAE="}]}


def test_new_coordinator_records():
    tp = uuid("fVJ4Z1ZQTB-TZNDBS44j9g")
    d = decode_consumer_offsets(i16(3) + s16("g"), i16(0) + i32(12) + NO_TAGS)
    assert d == {"type": "consumer_group_metadata", "key": {"type": "3", "data": {"groupId": "g"}},
                 "payload": {"version": "0", "data": {"epoch": 12}}}
    assign = carr([tp + carr([i32(0), i32(2)]) + NO_TAGS])
    d = decode_consumer_offsets(i16(8) + s16("g") + s16("m"), i16(0) + i32(5) + i32(4) + i8(0) + assign + carr([]) + NO_TAGS)
    assert d["type"] == "consumer_group_current_member_assignment"
    assert d["payload"]["data"] == {
        "memberEpoch": 5, "previousMemberEpoch": 4, "state": 0,
        "assignedPartitions": [{"topicId": "fVJ4Z1ZQTB-TZNDBS44j9g", "partitions": [0, 2]}],
        "partitionsPendingRevocation": []}
    meta4 = carr([tp + cs("orders") + i32(3) + carr([i32(0) + carr([cs("r1")]) + NO_TAGS]) + NO_TAGS])
    d = decode_consumer_offsets(i16(4) + s16("g"), i16(0) + meta4 + NO_TAGS)
    assert d["payload"]["data"]["topics"] == [{"topicId": "fVJ4Z1ZQTB-TZNDBS44j9g", "topicName": "orders",
                                               "numPartitions": 3, "partitionMetadata": [{"partition": 0, "racks": ["r1"]}]}]
    d = decode_consumer_offsets(i16(11) + s16("share"), i16(0) + i32(1) + NO_TAGS)
    assert d["type"] == "share_group_metadata" and d["payload"]["data"] == {"epoch": 1}
    d = decode_consumer_offsets(i16(15) + s16("share"), None)
    assert d["type"] == "share_group_state_partition_metadata" and d["payload"] is None


def test_newer_and_unknown_record_types():
    d = decode_consumer_offsets(i16(16) + s16("g") + s16("topic.*"), i16(0) + b"\x01\x02")
    assert d == {"type": "consumer_group_regular_expression",
                 "key": {"type": "16", "data": {"groupId": "g", "regularExpression": "topic.*"}},
                 "payload": {"version": "0", "raw": "AQI="}}
    assert decode_consumer_offsets(i16(19) + s16("g") + s16("m"), None)["type"] == "streams_group_member_metadata"
    d = decode_consumer_offsets(i16(99) + b"zz", b"\x00\x00")
    assert d == {"type": "unknown", "record_type": 99, "key": base64.b64encode(i16(99) + b"zz").decode(),
                 "payload": "AAA="}


def test_offsets_corrupt_input():
    with pytest.raises(CorruptDataError, match="missing key"):
        decode_consumer_offsets(None, b"")
    with pytest.raises(CorruptDataError):
        decode_consumer_offsets(b"\x00", None)
    with pytest.raises(CorruptDataError, match="from key's buffer"):
        decode_consumer_offsets(i16(1) + s16("g") + s16("t"), None)  # no partition
    with pytest.raises(CorruptDataError, match="from value's buffer"):
        decode_consumer_offsets(i16(1) + s16("g") + s16("t") + i32(0), i16(3) + i64(1))
    with pytest.raises(CorruptDataError, match="non-nullable field group"):
        decode_consumer_offsets(i16(2) + s16(None), None)
    with pytest.raises(CorruptDataError, match="collection of size"):
        decode_consumer_offsets(i16(2) + s16("g"), i16(3) + s16("") + i32(0) + s16(None) + s16(None) + i64(0) + i32(1000))


# ============================================================================================
# __transaction_state (no real data anywhere: hand-built from the TransactionLogKey/Value spec)


TXN_KEY = i16(0) + s16("my-transactional-id")


def test_transaction_value_v0_ongoing():
    value = (i16(0) + i64(1000) + i16(3) + i32(60000) + i8(1)
             + arr([s16("orders") + arr([i32(0), i32(2)]), s16("payments") + arr([i32(1)])])
             + i64(1700000000123) + i64(1700000000000))
    d = decode_transaction_state(TXN_KEY, value)
    assert d == {
        "type": "transaction_metadata",
        "key": {"version": 0, "data": {"transactionalId": "my-transactional-id"}},
        "payload": {"version": 0, "data": {
            "producerId": 1000, "producerEpoch": 3, "transactionTimeoutMs": 60000, "transactionStatus": 1,
            "transactionPartitions": [{"topic": "orders", "partitionIds": [0, 2]},
                                      {"topic": "payments", "partitionIds": [1]}],
            "transactionLastUpdateTimestampMs": 1700000000123, "transactionStartTimestampMs": 1700000000000}},
        "state": "Ongoing"}


def test_transaction_value_v1_flexible_with_tags():
    body = (i64(2000) + i16(0) + i32(900000) + i8(0) + carr(None) + i64(5) + i64(-1))
    d = decode_transaction_state(TXN_KEY, i16(1) + body + tags((0, i64(1999)), (1, i64(2001)), (2, i16(2))))
    assert d["state"] == "Empty"
    assert d["payload"] == {"version": 1, "data": {
        "producerId": 2000, "previousProducerId": 1999, "nextProducerId": 2001, "producerEpoch": 0,
        "transactionTimeoutMs": 900000, "transactionStatus": 0, "transactionPartitions": None,
        "transactionLastUpdateTimestampMs": 5, "transactionStartTimestampMs": -1, "clientTransactionVersion": 2}}
    assert list(d["payload"]["data"])[:4] == ["producerId", "previousProducerId", "nextProducerId", "producerEpoch"]
    # tagged fields equal to their default (-1, -1, 0) are not shown
    d = decode_transaction_state(TXN_KEY, i16(1) + body + tags((0, i64(-1)), (2, i16(0))))
    assert "previousProducerId" not in d["payload"]["data"] and "clientTransactionVersion" not in d["payload"]["data"]
    # v1 partitions are a compact array
    body = (i64(7) + i16(1) + i32(1) + i8(2) + carr([cs("t") + carr([i32(4)]) + NO_TAGS]) + i64(5) + i64(4))
    d = decode_transaction_state(TXN_KEY, i16(1) + body + NO_TAGS)
    assert d["state"] == "PrepareCommit"
    assert d["payload"]["data"]["transactionPartitions"] == [{"topic": "t", "partitionIds": [4]}]


@pytest.mark.parametrize("status,name", [(0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
                                         (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"),
                                         (7, "PrepareEpochFence"), (9, "Unknown(9)")])
def test_transaction_state_names(status, name):
    value = i16(0) + i64(1) + i16(0) + i32(1) + i8(status) + arr([]) + i64(0) + i64(0)
    assert decode_transaction_state(TXN_KEY, value)["state"] == name


def test_transaction_tombstone_unknown_versions_and_corruption():
    d = decode_transaction_state(TXN_KEY, None)
    assert d["payload"] is None and d["key"]["data"]["transactionalId"] == "my-transactional-id"
    assert decode_transaction_state(TXN_KEY, i16(2) + b"xx")["payload"] == {"version": 2, "data": "unknown"}
    d = decode_transaction_state(i16(1) + s16("x"), None)
    assert d["type"] == "unknown" and d["key_version"] == 1 and d["payload"] is None
    with pytest.raises(CorruptDataError):
        decode_transaction_state(TXN_KEY, i16(0) + i64(1) + i16(0))
    with pytest.raises(CorruptDataError):
        decode_transaction_state(None, None)


# ============================================================================================
# __cluster_metadata: hand-built records (the JSON strings are what kafka-dump-log.sh prints)

TOPIC_ID = "fVJ4Z1ZQTB-TZNDBS44j9g"
DIR_ID = "Teb3PFb009qvAZgMDEFH4g"

# (value bytes, expected `payload:` JSON); sizes match the valueSize of the real records of reference 7.3
KAFKA_LINES = [
    (meta(12, 0, cs("metadata.version") + i16(29) + NO_TAGS),
     '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":29}}'),
    (meta(4, 0, i8(4) + cs("") + cs("min.insync.replicas") + cs("1") + NO_TAGS),
     '{"type":"CONFIG_RECORD","version":0,"data":{"resourceType":4,"resourceName":"","name":"min.insync.replicas","value":"1"}}'),
    (meta(17, 0, i32(1) + i64(11) + tags((0, i8(-1)))),
     '{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":0,"data":{"brokerId":1,"brokerEpoch":11,"fenced":-1}}'),
    (bytes.fromhex("01140000"), '{"type":"NO_OP_RECORD","version":0,"data":{}}'),
    (meta(2, 0, cs("test-topic") + uuid(TOPIC_ID) + NO_TAGS),
     '{"type":"TOPIC_RECORD","version":0,"data":{"name":"test-topic","topicId":"fVJ4Z1ZQTB-TZNDBS44j9g"}}'),
    (meta(3, 2, i32(0) + uuid(TOPIC_ID) + carr([i32(1)]) + carr([i32(1)]) + carr([]) + carr([]) + i32(1) + i32(0)
          + i32(0) + carr([uuid(DIR_ID)]) + NO_TAGS),
     '{"type":"PARTITION_RECORD","version":2,"data":{"partitionId":0,"topicId":"fVJ4Z1ZQTB-TZNDBS44j9g","replicas":[1],'
     '"isr":[1],"removingReplicas":[],"addingReplicas":[],"leader":1,"leaderEpoch":0,"partitionEpoch":0,'
     '"directories":["Teb3PFb009qvAZgMDEFH4g"]}}'),
    (meta(5, 2, i32(0) + uuid("YNY5hm01SZ-bAGeCLAGqWA")
          + tags((0, carr([])), (1, i32(-1)), (6, carr([i32(1)])), (7, carr([i32(1)])))),
     '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":0,"topicId":"YNY5hm01SZ-bAGeCLAGqWA",'
     '"isr":[],"leader":-1,"eligibleLeaderReplicas":[1],"lastKnownElr":[1]}}'),
]


@pytest.mark.parametrize("value,expected", KAFKA_LINES, ids=lambda x: None if isinstance(x, bytes) else x[9:40])
def test_metadata_records_print_like_kafka(value, expected):
    assert dumps(decode_cluster_metadata(None, value)) == expected


def test_metadata_value_sizes_match_real_records():
    assert [len(v) for v, _ in KAFKA_LINES] == [23, 28, 19, 4, 31, 65, 47]


def test_register_broker_and_controller_records():
    ep = carr([cs("PLAINTEXT") + cs("kafka") + u16(9092) + i16(0) + NO_TAGS])
    feat = carr([cs("metadata.version") + i16(1) + i16(19) + NO_TAGS])
    inc = uuid("ta5R4VtUQvagltuIzSD9hg")
    v3 = meta(0, 3, i32(1) + b"\x00" + inc + i64(6) + ep + feat + cs(None) + b"\x01" + b"\x00"
              + tags((0, carr([uuid(DIR_ID)]))))
    assert decode_cluster_metadata(None, v3) == {"type": "REGISTER_BROKER_RECORD", "version": 3, "data": {
        "brokerId": 1, "isMigratingZkBroker": False, "incarnationId": "ta5R4VtUQvagltuIzSD9hg", "brokerEpoch": 6,
        "endPoints": [{"name": "PLAINTEXT", "host": "kafka", "port": 9092, "securityProtocol": 0}],
        "features": [{"name": "metadata.version", "minSupportedVersion": 1, "maxSupportedVersion": 19}],
        "rack": None, "fenced": True, "inControlledShutdown": False, "logDirs": [DIR_ID]}}
    v0 = meta(0, 0, i32(2) + inc + i64(7) + ep + feat + cs("r1") + b"\x00" + NO_TAGS)
    assert decode_cluster_metadata(None, v0)["data"] == {
        "brokerId": 2, "incarnationId": "ta5R4VtUQvagltuIzSD9hg", "brokerEpoch": 7,
        "endPoints": [{"name": "PLAINTEXT", "host": "kafka", "port": 9092, "securityProtocol": 0}],
        "features": [{"name": "metadata.version", "minSupportedVersion": 1, "maxSupportedVersion": 19}],
        "rack": "r1", "fenced": False}
    ctl = meta(27, 0, i32(3000) + inc + b"\x00" + carr([cs("CONTROLLER") + cs("c1") + u16(65535) + i16(1) + NO_TAGS])
               + feat + NO_TAGS)
    d = decode_cluster_metadata(None, ctl)
    assert d["type"] == "REGISTER_CONTROLLER_RECORD" and d["data"]["controllerId"] == 3000
    assert d["data"]["endPoints"] == [{"name": "CONTROLLER", "host": "c1", "port": 65535, "securityProtocol": 1}]


@pytest.mark.parametrize("value,expected", [
    (meta(1, 0, i32(4) + i64(99) + NO_TAGS), ("UNREGISTER_BROKER_RECORD", {"brokerId": 4, "brokerEpoch": 99})),
    (meta(7, 0, i32(4) + i64(99) + NO_TAGS), ("FENCE_BROKER_RECORD", {"id": 4, "epoch": 99})),
    (meta(8, 0, i32(4) + i64(99) + NO_TAGS), ("UNFENCE_BROKER_RECORD", {"id": 4, "epoch": 99})),
    (meta(9, 0, uuid(TOPIC_ID) + NO_TAGS), ("REMOVE_TOPIC_RECORD", {"topicId": TOPIC_ID})),
    (meta(15, 0, i32(1) + i64(6) + i64(5000) + NO_TAGS),
     ("PRODUCER_IDS_RECORD", {"brokerId": 1, "brokerEpoch": 6, "nextProducerId": 5000})),
    (meta(21, 0, i8(3) + NO_TAGS), ("ZK_MIGRATION_STATE_RECORD", {"zkMigrationState": 3})),
    (meta(23, 0, tags((0, cs("Bootstrap records")))), ("BEGIN_TRANSACTION_RECORD", {"name": "Bootstrap records"})),
    (meta(23, 0, NO_TAGS), ("BEGIN_TRANSACTION_RECORD", {})),
    (meta(24, 0, NO_TAGS), ("END_TRANSACTION_RECORD", {})),
    (meta(25, 0, tags((0, cs("oops")))), ("ABORT_TRANSACTION_RECORD", {"reason": "oops"})),
    (meta(14, 0, carr([cs("user") + cs("alice") + NO_TAGS, cs("client-id") + cs(None) + NO_TAGS])
          + cs("producer_byte_rate") + f64(1048576.0) + b"\x00" + NO_TAGS),
     ("CLIENT_QUOTA_RECORD", {"entity": [{"entityType": "user", "entityName": "alice"},
                                         {"entityType": "client-id", "entityName": None}],
                              "key": "producer_byte_rate", "value": 1048576.0, "remove": False})),
    (meta(18, 0, uuid(TOPIC_ID) + i8(2) + cs("orders") + i8(3) + cs("User:bob") + cs("*") + i8(3) + i8(3) + NO_TAGS),
     ("ACCESS_CONTROL_ENTRY_RECORD", {"id": TOPIC_ID, "resourceType": 2, "resourceName": "orders", "patternType": 3,
                                      "principal": "User:bob", "host": "*", "operation": 3, "permissionType": 3})),
    (meta(11, 0, cs("alice") + i8(1) + cb(b"salt") + cb(b"") + cb(b"\xff") + i32(4096) + NO_TAGS),
     ("USER_SCRAM_CREDENTIAL_RECORD", {"name": "alice", "mechanism": 1, "salt": "c2FsdA==", "storedKey": "",
                                       "serverKey": "/w==", "iterations": 4096})),
    (meta(17, 1, i32(1) + i64(6) + tags((1, i8(1)))),
     ("BROKER_REGISTRATION_CHANGE_RECORD", {"brokerId": 1, "brokerEpoch": 6, "inControlledShutdown": 1})),
    (meta(28, 0, cs("") + NO_TAGS), ("CLEAR_ELR_RECORD", {"topicName": ""})),
])
def test_more_metadata_records(value, expected):
    d = decode_cluster_metadata(None, value)
    assert (d["type"], d["data"]) == expected
    dumps(d)


def test_partition_change_record_tags():
    body = i32(3) + uuid(TOPIC_ID)
    # v0: nothing changed but the leader; unchanged fields (defaults) are absent
    d = decode_cluster_metadata(None, meta(5, 0, body + tags((1, i32(2)))))
    assert d["data"] == {"partitionId": 3, "topicId": TOPIC_ID, "leader": 2}
    # v1 directories (tag 8) is printed before the ELR fields only in v2; an unknown tag is skipped
    d = decode_cluster_metadata(None, meta(5, 1, body + tags((0, carr([i32(1), i32(2)])), (5, i8(1)),
                                                             (8, carr([uuid(DIR_ID)])), (42, b"xyz"))))
    assert d["data"] == {"partitionId": 3, "topicId": TOPIC_ID, "isr": [1, 2], "leaderRecoveryState": 1,
                         "directories": [DIR_ID]}
    # an explicit null ISR equals the default: not shown
    d = decode_cluster_metadata(None, meta(5, 0, body + tags((0, uv(0)))))
    assert "isr" not in d["data"]
    # a known tag in a version that does not have it
    with pytest.raises(CorruptDataError, match="Tag 6 is not valid for version 0"):
        decode_cluster_metadata(None, meta(5, 0, body + tags((6, carr([i32(1)])))))


def test_metadata_unknown_newer_and_corrupt():
    assert decode_cluster_metadata(None, meta(99, 3, b"\x01\x02")) == {
        "type": "unknown", "api_key": 99, "version": 3, "payload": "AQI="}
    # a newer TopicRecord with an added tagged field is read with the v0 layout
    d = decode_cluster_metadata(None, meta(2, 1, cs("t") + uuid(TOPIC_ID) + tags((3, b"\x07"))))
    assert d == {"type": "TOPIC_RECORD", "version": 1, "data": {"name": "t", "topicId": TOPIC_ID}}
    # ... but not when bytes are left over: reported as unknown, with the type name
    d = decode_cluster_metadata(None, meta(2, 1, cs("t") + uuid(TOPIC_ID) + NO_TAGS + b"\x00\x00"))
    assert d["type"] == "unknown" and d["name"] == "TOPIC_RECORD" and d["api_key"] == 2
    with pytest.raises(CorruptDataError, match="garbage after TopicRecord"):
        decode_cluster_metadata(None, meta(2, 0, cs("t") + uuid(TOPIC_ID) + NO_TAGS + b"\x00"))
    with pytest.raises(CorruptDataError, match="frame version 0"):
        decode_cluster_metadata(None, b"\x00\x02\x00")
    with pytest.raises(CorruptDataError, match="unknown frame version 2"):
        decode_cluster_metadata(None, b"\x02\x02\x00")
    with pytest.raises(CorruptDataError):
        decode_cluster_metadata(None, None)
    with pytest.raises(CorruptDataError):
        decode_cluster_metadata(None, meta(2, 0, cs("topic")[:3]))
    with pytest.raises(CorruptDataError, match="non-nullable field Name"):
        decode_cluster_metadata(None, meta(2, 0, cs(None) + uuid(TOPIC_ID) + NO_TAGS))
    with pytest.raises(CorruptDataError, match="too long"):
        decode_cluster_metadata(None, b"\x01\xff\xff\xff\xff\xff\x01")


def test_raft_control_records():
    # LeaderChange value of local-test-rig-kafka4.x-kraft offset 0 (valueSize 19)
    value = i16(0) + i32(1) + carr([i32(1) + NO_TAGS]) + carr([i32(1) + NO_TAGS]) + NO_TAGS
    assert len(value) == 19
    assert decode_raft_control(2, value) == {"type": "LEADER_CHANGE", "data": {
        "version": 0, "leaderId": 1, "voters": [{"voterId": 1}], "grantingVoters": [{"voterId": 1}]}}
    assert decode_raft_control(3, i16(0) + i64(1713537222197) + NO_TAGS)["data"] == {
        "version": 0, "lastContainedLogTimestamp": 1713537222197}
    assert decode_raft_control(1, i16(0) + i32(5)) == {"type": "COMMIT", "data": {"version": 0, "coordinatorEpoch": 5}}
    voters = i16(0) + carr([i32(1) + uuid(DIR_ID) + carr([cs("CONTROLLER") + cs("h") + u16(9093) + NO_TAGS])
                            + i16(0) + i16(1) + NO_TAGS + NO_TAGS]) + NO_TAGS
    assert decode_raft_control(6, voters)["data"] == {"version": 0, "voters": [{
        "voterId": 1, "voterDirectoryId": DIR_ID, "endpoints": [{"name": "CONTROLLER", "host": "h", "port": 9093}],
        "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1}}]}
    assert decode_raft_control(77, b"\x01")["type"] == "UNKNOWN"


def test_decoder_selection():
    assert decoder_for_topic("__consumer_offsets") is decode_consumer_offsets
    assert decoder_for_topic("__transaction_state") is decode_transaction_state
    assert decoder_for_topic("__cluster_metadata") is decode_cluster_metadata
    assert decoder_for_topic("orders") is None
    assert DECODERS == {"consumer-offsets": decode_consumer_offsets, "transaction-state": decode_transaction_state,
                        "cluster-metadata": decode_cluster_metadata,
                        "remote-log-metadata": decode_remote_log_metadata}
    assert decoder_for_topic("__remote_log_metadata") is decode_remote_log_metadata
    assert decode_message("TopicRecord", cs("x") + uuid(TOPIC_ID) + NO_TAGS, 0) == {"name": "x", "topicId": TOPIC_ID}


# ============================================================================================
# Real KRaft data in shared/corpus (not in the repo: no licence). Skipped when absent.


def _corpus_metadata_files():
    return sorted(glob.glob(str(CORPUS / "*kraft*/__cluster_metadata-0/*.log"))
                  + glob.glob(str(CORPUS / "*kraft*/__cluster_metadata-0/*.checkpoint"))
                  + glob.glob(str(CORPUS / "*kraft*/bootstrap.checkpoint")))


needs_corpus = pytest.mark.skipif(
    not glob.glob(str(CORPUS / "*kraft*/__cluster_metadata-0/*.log")),
    reason=f"no KRaft metadata logs in {CORPUS} (shared/corpus is kept next to the repo, not in it)")


@needs_corpus
def test_corpus_cluster_metadata_decodes_like_kafka():
    counts = collections.Counter()
    lines = {}
    for path in _corpus_metadata_files():
        for offset, key, value, h in records(path, controls=True):
            if h.is_control:
                d = decode_raft_control(struct.unpack(">h", key[2:4])[0], value)
                counts[("control", d["type"])] += 1
                continue
            d = decode_cluster_metadata(key, value)
            counts[(d["type"], d["version"])] += 1
            if "local-test-rig" in path and path.endswith("0000.log"):
                lines[offset] = dumps(d)
    # the counts of reference section 7.2 (checked there against Kafka's own converters)
    assert counts == {
        ("NO_OP_RECORD", 0): 75002, ("CONFIG_RECORD", 0): 1135,
        ("PARTITION_RECORD", 0): 447, ("PARTITION_RECORD", 1): 54, ("PARTITION_RECORD", 2): 11,
        ("PARTITION_CHANGE_RECORD", 0): 155, ("PARTITION_CHANGE_RECORD", 1): 54, ("PARTITION_CHANGE_RECORD", 2): 3,
        ("TOPIC_RECORD", 0): 197, ("FEATURE_LEVEL_RECORD", 0): 56,
        ("BROKER_REGISTRATION_CHANGE_RECORD", 0): 13, ("BROKER_REGISTRATION_CHANGE_RECORD", 1): 3,
        ("REGISTER_BROKER_RECORD", 2): 4, ("REGISTER_BROKER_RECORD", 3): 12, ("REGISTER_CONTROLLER_RECORD", 0): 11,
        ("PRODUCER_IDS_RECORD", 0): 4, ("ZK_MIGRATION_STATE_RECORD", 0): 4,
        ("BEGIN_TRANSACTION_RECORD", 0): 3, ("END_TRANSACTION_RECORD", 0): 3, ("REMOVE_TOPIC_RECORD", 0): 2,
        ("control", "LEADER_CHANGE"): 7, ("control", "SNAPSHOT_HEADER"): 12, ("control", "SNAPSHOT_FOOTER"): 12,
    }
    # lines kafka-dump-log.sh --cluster-metadata-decoder printed for local-test-rig-kafka4.x-kraft
    for offset, expected in [(2, KAFKA_LINES[0][1]), (8, KAFKA_LINES[1][1]), (12, KAFKA_LINES[2][1]),
                             (13, KAFKA_LINES[3][1]), (1169, KAFKA_LINES[4][1]), (1170, KAFKA_LINES[5][1]),
                             (3594, KAFKA_LINES[6][1])]:
        assert lines[offset] == expected


@needs_corpus
def test_corpus_consumer_offsets_decode():
    counts = collections.Counter()
    for path in sorted(CORPUS.glob("*/__consumer_offsets-*/*.log")):
        for _, k, v, _ in records(path):
            d = decode_consumer_offsets(k, v)
            counts[(d["type"], d["payload"] and d["payload"]["version"])] += 1
    assert counts == {("offset_commit", "2"): 8201, ("offset_commit", "3"): 3150, ("offset_commit", None): 2,
                      ("group_metadata", "2"): 174, ("group_metadata", "3"): 57, ("group_metadata", None): 16}


# Fields Kafka added after the reference's snapshot (seen in Apache Kafka 4.4's own logs,
# fixtures/kafka4.4-kraft): message -> (field, the version that adds it, the reference's newest version)
NEWER_THAN_REFERENCE = {"RegisterBrokerRecord": ("CordonedLogDirs", 4, 3),
                        "BrokerRegistrationChangeRecord": ("CordonedLogDirs", 3, 2),
                        "OffsetCommitValue": ("topicId", 4, 4)}


@pytest.mark.skipif(not REFERENCE.exists(), reason=f"{REFERENCE} not present")
def test_schemas_match_reference_tables():
    """Every schema in internal.py (in schema.py's notation) equals the field list of the reference's tables (which were compared
    mechanically with Kafka's JSON specs)."""
    from kltool.format import internal as m
    from kltool.format.schema import Msg

    rows = collections.defaultdict(list)
    for line in REFERENCE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) >= 5 and re.fullmatch(r"`.*`", cells[-1]):
            rows[cells[-4].split(" ")[0]].append((cells[-3], cells[-2], cells[-1].strip("`")))

    def sig(fields):
        def t(x):
            return x if isinstance(x, str) else (x[0], sig(x[1]) if x[0] == "struct" else t(x[1]))
        return [(f.name, t(f.type), f.nullable, f.vmin, f.vmax, f.tag, repr(f.default)) for f in fields]

    checked = 0
    for name, msg in m._BY_NAME.items():
        fields, max_version = msg.fields, msg.max_version
        if name in NEWER_THAN_REFERENCE:  # a field Kafka added after the reference: the last one
            field, version, reference_max = NEWER_THAN_REFERENCE[name]
            assert (fields[-1].name, fields[-1].vmin) == (field, version), name
            fields, max_version = fields[:-1], reference_max
        for versions, flexible, schema in rows.get(name, ()):
            assert sig(Msg(name, None, 0, schema).fields) == sig(fields), name
            assert flexible == ("none" if msg.flex is None else f"{msg.flex}+"), name
            if not name.endswith("Key") or name == "TransactionLogKey":
                assert int(versions.split("-")[-1]) == max_version, name
            checked += 1
    assert checked >= 66


# ============================================================================================
# Robustness: bad bytes raise CorruptDataError and nothing else


def _samples() -> list[tuple[str, bytes | None, bytes | None]]:
    out = []
    for _, k, v, _ in list(records(WILLIAM_28))[:3]:
        out.append(("consumer-offsets", k, v))
    for _, k, v, _ in records(K271 / "__consumer_offsets-17/00000000000000000000.log"):
        out.append(("consumer-offsets", k, v))
    for _, k, v, _ in list(records(SPOOLDIR / "__consumer_offsets-13/00000000000000000000.log"))[:2]:
        out.append(("consumer-offsets", k, v))
    out.append(("transaction-state", TXN_KEY, i16(1) + i64(2000) + i16(0) + i32(9) + i8(1)
                + carr([cs("t") + carr([i32(4)]) + NO_TAGS]) + i64(5) + i64(-1) + tags((0, i64(1)), (2, i16(2)))))
    out.append(("transaction-state", TXN_KEY, i16(0) + i64(1) + i16(0) + i32(1) + i8(1)
                + arr([s16("orders") + arr([i32(0)])]) + i64(0) + i64(0)))
    for v, _ in KAFKA_LINES:
        out.append(("cluster-metadata", None, v))
    return out


SAMPLES = _samples()


def _only_corrupt_data_errors(name, key, value):
    try:
        d = DECODERS[name](key, value)
    except CorruptDataError:
        return
    json.dumps(d)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(DECODERS)), key=st.none() | st.binary(max_size=40),
       value=st.none() | st.binary(max_size=200))
def test_random_bytes_raise_only_corrupt_data_error(name, key, value):
    _only_corrupt_data_errors(name, key, value)


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_records_raise_only_corrupt_data_error(data):
    name, key, value = data.draw(st.sampled_from(SAMPLES))
    target = data.draw(st.sampled_from(["key", "value"])) if key is not None else "value"
    buf = bytearray(key if target == "key" else value)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        pos = data.draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "set" and buf:
            buf[pos] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0x01]))
        elif op == "truncate":
            del buf[pos:]
        elif op == "insert":
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=6))
        elif op == "delete" and buf:
            del buf[pos:pos + data.draw(st.integers(1, 4))]
    if target == "key":
        key = bytes(buf)
    else:
        value = bytes(buf)
    _only_corrupt_data_errors(name, key, value)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rtype=st.integers(-2, 26), version=st.integers(-1, 6), key_body=st.binary(max_size=30),
       body=st.binary(max_size=120))
def test_structured_offsets_fuzz(rtype, version, key_body, body):
    _only_corrupt_data_errors("consumer-offsets", i16(rtype) + key_body, i16(version) + body)
    _only_corrupt_data_errors("transaction-state", i16(rtype % 2 - 1 if rtype < 0 else 0) + key_body,
                              i16(version) + body)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(api_key=st.integers(0, 30), version=st.integers(0, 4), body=st.binary(max_size=120))
def test_structured_metadata_fuzz(api_key, version, body):
    _only_corrupt_data_errors("cluster-metadata", None, meta(api_key, version, body))
    try:
        decode_raft_control(api_key % 8, body)
    except CorruptDataError:
        pass


def test_fixture_path_sanity():
    assert Path(WILLIAM_28).exists() and (K271 / "__consumer_offsets-39").is_dir()
