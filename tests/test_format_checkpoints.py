"""kltool.format.checkpoints: offset checkpoints, leader-epoch-checkpoint, partition.metadata,
meta.properties, .kafka_cleanshutdown and JSON files."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kltool.errors import CorruptDataError
from kltool.format import checkpoints as cp

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL = FIXTURES / "real"
WILLIAM = REAL / "william0423-indexed-zk"
BIGGER = REAL / "biggerbrain-gzip-headers"

ROOT_CHECKPOINTS = sorted(REAL.glob("*/*-checkpoint"))
EPOCH_CHECKPOINTS = sorted(REAL.rglob("leader-epoch-checkpoint"))
TOPICS = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=249)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def _corrupt(fn, *args, **kw) -> CorruptDataError:
    with pytest.raises(CorruptDataError) as info:
        fn(*args, **kw)
    return info.value


# ------------------------------------------------------------------------------------- offset checkpoints


def test_real_recovery_point_checkpoint():
    text = (WILLIAM / "recovery-point-offset-checkpoint").read_text()
    offsets = cp.parse_offset_checkpoint(text)
    assert len(offsets) == 52
    assert offsets[("__consumer_offsets", 28)] == 8202
    assert offsets[("debug_topic", 0)] == 40 and offsets[("test_topic", 0)] == 0
    assert cp.parse_offset_checkpoint(text.encode()) == offsets
    assert cp.parse_offset_checkpoint((BIGGER / "replication-offset-checkpoint").read_bytes()) == {("lsx1", 0): 14}


@pytest.mark.parametrize("path", ROOT_CHECKPOINTS, ids=lambda p: str(p.relative_to(REAL)))
def test_every_real_offset_checkpoint_round_trips(path):
    text = path.read_text()
    entries = cp.parse_offset_checkpoint_entries(text)
    offsets = cp.parse_offset_checkpoint(text)
    assert len(offsets) == len(entries)
    if text:
        assert int(text.split("\n")[1]) == len(entries)
    encoded = cp.encode_offset_checkpoint(offsets)
    assert cp.parse_offset_checkpoint(encoded) == offsets
    assert sorted(encoded.splitlines()[2:]) == sorted(text.splitlines()[2:])  # same lines, sorted order


def test_empty_real_cleaner_checkpoint():
    assert (WILLIAM / "cleaner-offset-checkpoint").read_bytes() == b""
    assert cp.parse_offset_checkpoint(b"") == {}


def test_encode_offset_checkpoint_format():
    assert cp.encode_offset_checkpoint({("b", 1): 5, ("a", 10): 3, ("a", 2): 7}) == "0\n3\na 2 7\na 10 3\nb 1 5\n"
    assert cp.encode_offset_checkpoint({}) == "0\n0\n"
    with pytest.raises(ValueError):
        cp.encode_offset_checkpoint({("a b", 0): 1})


@pytest.mark.parametrize(("text", "expected"), [
    ("", {}),
    ("0\n", {}),  # no count line: empty, like CheckpointReadBuffer
    ("0\n0\n", {}),
    ("0\r\n1\r\nt 0 5\r\n", {("t", 0): 5}),  # readLine accepts \r\n and \r
    ("0\r1\rt 0 5", {("t", 0): 5}),  # last line needs no terminator
    ("0\n1\nt\t 0   5  \n", {("t", 0): 5}),  # split on \s+, trailing empties dropped
    ("0\n2\nt 0 5\nt 0 9\n", {("t", 0): 9}),  # duplicates count; last one wins
    ("+0\n1\nt +3 -1\n", {("t", 3): -1}),
])
def test_offset_checkpoint_accepts(text, expected):
    assert cp.parse_offset_checkpoint(text) == expected


@pytest.mark.parametrize(("text", "message", "position", "line"), [
    ("1\n0\n", "Unrecognised version:1, expected version: 0", 0, 1),
    ("x\n", "Malformed line in checkpoint file: x", 0, 1),
    (" 0\n", "Malformed line in checkpoint file:  0", 0, 1),
    ("0\nfive\n", "Malformed line in checkpoint file: five", 2, 2),
    ("0\n2\nfoo 0 1\n", "Expected [2] entries in checkpoint file, but found only [1]", 12, 3),
    ("0\n0\nfoo 0 1\n", "Expected [0] entries in checkpoint file, but found only [1]", 12, 3),
    ("0\n1\nfoo 0\n", "Malformed line in checkpoint file: foo 0", 4, 3),
    ("0\n1\n t 0 5\n", "Malformed line in checkpoint file:  t 0 5", 4, 3),  # leading empty field
    ("0\n1\nt 0 5\n\n", "Malformed line in checkpoint file: ", 10, 4),
    ("0\n1\nt x 5\n", 'Malformed line in checkpoint file: t x 5 (NumberFormatException: For input string: "x")',
     4, 3),
    ("0\n1\nt 2147483648 5\n", 'For input string: "2147483648"', 4, 3),
    ("0\n1\nt 0 9223372036854775808\n", 'For input string: "9223372036854775808"', 4, 3),
    ("0\n-1\n", "Illegal Capacity: -1", 2, 2),
    ("0\n1\nt\u00e9 0 x\n", "NumberFormatException", 4, 3),
    ("0\n1\nt\u00e9 0 5\nz\n", "Malformed line in checkpoint file: z", 12, 4),  # byte positions
])
def test_offset_checkpoint_errors(text, message, position, line):
    err = _corrupt(cp.parse_offset_checkpoint, text)
    assert message in err.message
    assert (err.position, err.line) == (position, line)


def test_offset_checkpoint_errors_name_the_file():
    where = "/data/recovery-point-offset-checkpoint"
    assert _corrupt(cp.parse_offset_checkpoint, "0\n2\na 0 1\n", path=where).message == (
        f"Expected [2] entries in checkpoint file [{where}], but found only [1]")
    assert _corrupt(cp.parse_offset_checkpoint, "3\n", path=where).message == (
        f"Unrecognised version:3, expected version: 0 in checkpoint file at: {where}")
    assert _corrupt(cp.parse_offset_checkpoint, "0\n1\nx\n", path=where).message == (
        f"Malformed line in checkpoint file [{where}]: x")


def test_checkpoint_bad_utf8():
    err = _corrupt(cp.parse_offset_checkpoint, b"0\n1\nt\xff 0 1\n")
    assert "UTF-8" in err.message and err.position == 5


@given(st.dictionaries(st.tuples(TOPICS, INT32), INT64, max_size=30))
def test_offset_checkpoint_round_trip(mapping):
    text = cp.encode_offset_checkpoint(mapping)
    assert text.endswith("\n") and text.count("\n") == len(mapping) + 2
    assert cp.parse_offset_checkpoint(text) == mapping
    assert cp.encode_offset_checkpoint(cp.parse_offset_checkpoint(text)) == text


# ---------------------------------------------------------------------------------- leader-epoch-checkpoint


def test_real_leader_epoch_checkpoint():
    text = (BIGGER / "lsx1-0" / "leader-epoch-checkpoint").read_text()
    entries = cp.parse_leader_epoch_checkpoint(text)
    assert entries == [(0, 0), (1, 9), (3, 10), (5, 12), (6, 13), (7, 14)]
    assert cp.encode_leader_epoch_checkpoint(entries) == text


@pytest.mark.parametrize("path", EPOCH_CHECKPOINTS, ids=lambda p: str(p.relative_to(REAL)))
def test_every_real_leader_epoch_checkpoint(path):
    text = path.read_text()
    entries = cp.parse_leader_epoch_checkpoint(text)
    if text:  # Kafka 2.0 left some files empty
        assert cp.encode_leader_epoch_checkpoint(entries) == text
    assert entries == sorted(entries)


def test_leader_epoch_errors():
    assert "Malformed line in checkpoint file: 1 2 3" in _corrupt(
        cp.parse_leader_epoch_checkpoint, "0\n1\n1 2 3\n").message
    assert 'For input string: "2147483648"' in _corrupt(
        cp.parse_leader_epoch_checkpoint, "0\n1\n2147483648 0\n").message
    assert cp.parse_leader_epoch_checkpoint("0\n1\n-1 9223372036854775807\n") == [(-1, 2**63 - 1)]


@given(st.lists(st.tuples(INT32, INT64), max_size=30))
def test_leader_epoch_round_trip(entries):
    assert cp.parse_leader_epoch_checkpoint(cp.encode_leader_epoch_checkpoint(entries)) == entries


# ----------------------------------------------------------------------------------------- partition.metadata


def test_real_partition_metadata():
    text = (BIGGER / "lsx1-0" / "partition.metadata").read_text()
    assert cp.parse_partition_metadata(text) == (0, "nigi0dJNRASJVYh5eRn0Vg")
    assert cp.encode_partition_metadata("nigi0dJNRASJVYh5eRn0Vg") == text == (
        "version: 0\ntopic_id: nigi0dJNRASJVYh5eRn0Vg")


@pytest.mark.parametrize(("text", "expected"), [
    ("version: 1\ntopic_id: nigi0dJNRASJVYh5eRn0Vg\n", (1, "nigi0dJNRASJVYh5eRn0Vg")),  # newer versions read
    ("version:\t0\r\ntopic_id:   nigi0dJNRASJVYh5eRn0Vg\nextra", (0, "nigi0dJNRASJVYh5eRn0Vg")),
    ("version: 0\ntopic_id: nigi0dJNRASJVYh5eRn0Vg==", (0, "nigi0dJNRASJVYh5eRn0Vg")),  # padding accepted
])
def test_partition_metadata_accepts(text, expected):
    assert cp.parse_partition_metadata(text) == expected


@pytest.mark.parametrize(("text", "message", "position"), [
    ("", "Malformed line in partition metadata file: null", 0),
    ("version: 0", "Malformed line in partition metadata file: null", 10),
    ("version:0\ntopic_id: x", "Malformed line in partition metadata file: version:0", 0),
    ("Version: 0\ntopic_id: x", "Malformed line in partition metadata file: Version: 0", 0),
    ("version: x\ntopic_id: x", "Malformed line in partition metadata file: version: x", 0),
    ("version: -1\ntopic_id: x", "Unrecognized version of partition metadata file: -1", 0),
    ("version: 0\ntopicid: nigi0dJNRASJVYh5eRn0Vg", "Malformed line in partition metadata file: topicid:", 11),
    ("version: 0\ntopic_id: abc", "decoded as 2 bytes, which is not equal to the expected 16 bytes", 11),
    ("version: 0\ntopic_id: " + "A" * 25, "is too long to be decoded as a base64 UUID", 11),
    ("version: 0\ntopic_id: nigi0dJNRASJVYh5eRn0V!", "Malformed line in partition metadata file", 11),
    ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "Invalid topic ID in partition metadata file", 11),
])
def test_partition_metadata_errors(text, message, position):
    err = _corrupt(cp.parse_partition_metadata, text)
    assert message in err.message and err.position == position


def test_partition_metadata_errors_name_the_file():
    err = _corrupt(cp.parse_partition_metadata, "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", path="/d/t-0")
    assert err.message == "Invalid topic ID in partition metadata file (/d/t-0)"


def test_encode_partition_metadata_rejects_bad_ids():
    for bad in ("AAAAAAAAAAAAAAAAAAAAAA", "short", "x" * 30):
        with pytest.raises(ValueError):
            cp.encode_partition_metadata(bad)


def test_new_topic_id():
    ids = {cp.new_topic_id() for _ in range(200)}
    assert len(ids) == 200
    for s in ids:
        raw = cp.uuid_from_string(s)
        assert len(s) == 22 and not s.startswith("-") and cp.uuid_to_string(raw) == s
        assert raw[6] >> 4 == 4 and raw[8] >> 6 == 2  # type-4, variant 2 like java.util.UUID.randomUUID
        assert cp.parse_partition_metadata(cp.encode_partition_metadata(s)) == (0, s)


def test_new_topic_id_retries_like_uuid_random_uuid(monkeypatch):
    dash = uuid.UUID(bytes=b"\xf8" + bytes(15))  # base64 starts with '-'
    zero, one = uuid.UUID(bytes=cp.ZERO_UUID), uuid.UUID(bytes=cp.ONE_UUID)
    good = uuid.UUID("12345678-1234-4234-8234-123456789abc")
    seq = iter([dash, zero, one, good])
    monkeypatch.setattr(cp._uuid, "uuid4", lambda: next(seq))
    assert cp.uuid_to_string(dash.bytes).startswith("-")
    assert cp.new_topic_id() == base64.urlsafe_b64encode(good.bytes).rstrip(b"=").decode()


@given(st.binary(min_size=16, max_size=16))
def test_uuid_string_round_trip(raw):
    s = cp.uuid_to_string(raw)
    assert len(s) == 22 and cp.uuid_from_string(s) == raw


# ------------------------------------------------------------------------------------------ meta.properties


@pytest.mark.parametrize("path", sorted(REAL.glob("*/meta.properties")), ids=lambda p: p.parent.name)
def test_every_real_meta_properties(path):
    props = cp.parse_properties(path.read_bytes())
    assert props["version"] == "0" and props["broker.id"].isdigit()
    assert cp.parse_properties(cp.encode_meta_properties(props)) == props


def test_real_meta_properties_values():
    assert cp.parse_properties((BIGGER / "meta.properties").read_text()) == {
        "broker.id": "0", "cluster.id": "1PEpoQSRThK-PWVK_M7NCg", "version": "0"}
    assert cp.parse_properties((WILLIAM / "meta.properties").read_text()) == {"version": "0", "broker.id": "0"}


@pytest.mark.parametrize(("text", "expected"), [
    ("a=b", {"a": "b"}),
    ("a = b  ", {"a": "b  "}),  # Java keeps trailing blanks of values
    ("a:b\nc d", {"a": "b", "c": "d"}),
    ("  a\t= b", {"a": "b"}),
    ("# c\n! d\n\n   \na=1", {"a": "1"}),
    ("#x\\\na=1", {"a": "1"}),  # comments are never continued
    ("a=x\\\n   y", {"a": "xy"}),
    ("a=x\\\\\nb=y", {"a": "x\\", "b": "y"}),  # even backslashes: no continuation
    ("k\\=x=1", {"k=x": "1"}),
    ("a=\\u0041\\t\\q", {"a": "A\tq"}),
    ("key", {"key": ""}),
    ("a==b", {"a": "=b"}),
    ("a b=c", {"a": "b=c"}),
    ("a=1\r\na=2\r", {"a": "2"}),
])
def test_parse_properties_like_java(text, expected):
    assert cp.parse_properties(text) == expected


def test_parse_properties_bad_unicode_escape():
    err = _corrupt(cp.parse_properties, "x=1\ny=\\u00zz")
    assert err.message == "Malformed \\uxxxx encoding." and err.position == 4 and err.line == 2


def test_encode_meta_properties_like_properties_store():
    when = datetime(2024, 7, 10, 11, 13, 46, tzinfo=UTC)
    text = cp.encode_meta_properties({"version": 1, "node.id": 3, "cluster.id": "1PEpoQSRThK-PWVK_M7NCg"},
                                     date=when)
    assert text == ("#\n#Wed Jul 10 11:13:46 UTC 2024\nversion=1\nnode.id=3\n"
                    "cluster.id=1PEpoQSRThK-PWVK_M7NCg\n")
    assert cp.encode_properties({" k:": " v=#"}, comment=None) == "\\ k\\:=\\ v\\=\\#\n"


@given(st.dictionaries(st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
                       st.text(st.characters(exclude_categories=("Cs",)), max_size=12), max_size=8))
def test_properties_round_trip(props):
    assert cp.parse_properties(cp.encode_properties(props)) == props


# ------------------------------------------------------------------------------- .kafka_cleanshutdown, JSON


def test_real_empty_clean_shutdown():
    assert cp.parse_clean_shutdown((WILLIAM / ".kafka_cleanshutdown").read_bytes()) == cp.CleanShutdown(None, None)


def test_clean_shutdown_round_trip():
    text = cp.encode_clean_shutdown(42)
    assert text == '{"version":0,"brokerEpoch":42}'
    assert cp.parse_clean_shutdown(text) == cp.CleanShutdown(0, 42)
    assert cp.parse_clean_shutdown('{"version":0,"brokerEpoch":7,"x":1}').broker_epoch == 7
    for bad in ("{", "[1]", '{"brokerEpoch":"7"}'):
        _corrupt(cp.parse_clean_shutdown, bad)


def test_parse_json_file():
    state = ('{"clusterId":"","leaderId":1,"leaderEpoch":4,"votedId":-1,"appliedOffset":0,'
             '"currentVoters":[{"voterId":1}],"data_version":0}')
    assert cp.parse_json_file(state)["leaderEpoch"] == 4
    err = _corrupt(cp.parse_json_file, '{"é": 1,}', what="quorum-state")
    assert err.message.startswith("Invalid quorum-state:") and err.position == 9 and err.line == 1  # byte offset (é is 2 bytes)


# ------------------------------------------------------------------------------------------------- fuzzing

_ALPHABET = st.sampled_from(list("0123456789 \t\n\r:=#!\\uabc_-+.\u00e9\x0b\f"))


@given(st.one_of(st.text(_ALPHABET, max_size=80), st.binary(max_size=80)))
def test_parsers_raise_only_corrupt_data_error(data):
    for parse in (cp.parse_offset_checkpoint, cp.parse_leader_epoch_checkpoint, cp.parse_partition_metadata,
                  cp.parse_properties, cp.parse_clean_shutdown, cp.parse_json_file):
        try:
            parse(data)
        except CorruptDataError as e:
            assert e.message and e.position is not None and e.position >= 0


@given(st.data())
def test_mutated_real_checkpoint_raises_only_corrupt_data_error(data):
    raw = bytearray((WILLIAM / "recovery-point-offset-checkpoint").read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.sampled_from(b" \n\rx0-9\t\xff"))
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    try:
        result = cp.parse_offset_checkpoint(bytes(raw))
    except CorruptDataError:
        return
    assert all(isinstance(k[0], str) and isinstance(v, int) for k, v in result.items())
