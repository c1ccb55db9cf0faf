"""kltool.format.snapshot: producer-state snapshots (N.snapshot)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from kltool.errors import CorruptDataError
from kltool.format.snapshot import (
    ENTRY_SIZE,
    HEADER_SIZE,
    ProducerEntry,
    encode_snapshot,
    parse_snapshot,
    snapshot_crc,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL = FIXTURES / "real"
THREE = REAL / "kafka2.7.1-compacted-zk" / "myTopic-0" / "00000000000000000038.snapshot"
EMPTY = REAL / "william0423-indexed-zk" / "__consumer_offsets-28" / "00000000000000000142.snapshot"


def _i(bits):
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


ENTRIES = st.builds(ProducerEntry, _i(64), _i(16), _i(32), _i(64), _i(32), _i(64), _i(32), _i(64))


def test_real_snapshot_with_three_producers():
    data = THREE.read_bytes()
    snap = parse_snapshot(data)
    assert len(data) == 148 and snap.version == 1
    assert snap.crc == 0x1A3A695A == snap.computed_crc and snap.crc_valid and snap.trailing_bytes == 0
    assert snap.entries == [
        ProducerEntry(4001, 0, 11, 11, 2, 1670068129797, -1, -1),
        ProducerEntry(4002, 0, 11, 23, 11, 1670068739452, -1, -1),
        ProducerEntry(4003, 0, 13, 37, 13, 1670071262224, -1, -1),
    ]
    assert snap.entries[0].first_sequence == 9 and snap.entries[0].has_batch_metadata
    assert encode_snapshot(snap.entries) == data  # byte-identical to what Kafka 2.7 wrote


def test_real_empty_snapshot():
    data = EMPTY.read_bytes()
    snap = parse_snapshot(data)
    assert data == bytes.fromhex("000148674bc700000000")
    assert snap.entries == [] and snap.crc_valid and snap.crc == crc32c(b"\0\0\0\0")
    assert encode_snapshot([]) == data


@pytest.mark.parametrize("path", sorted(REAL.rglob("*.snapshot")), ids=lambda p: str(p.relative_to(REAL)))
def test_every_real_snapshot(path):
    data = path.read_bytes()
    snap = parse_snapshot(data, strict=True)
    assert snap.crc_valid
    assert len(data) == HEADER_SIZE + ENTRY_SIZE * len(snap.entries)
    assert encode_snapshot(snap.entries) == data


@pytest.mark.parametrize(("size", "message", "position"), [
    (0, "Snapshot failed schema validation: Error reading field 'version': java.nio.BufferUnderflowException", 0),
    (1, "Error reading field 'version'", 0),
    (4, "Snapshot failed schema validation: Error reading field 'crc': java.nio.BufferUnderflowException", 2),
    (9, "Error reading field 'producer_entries': java.nio.BufferUnderflowException", 6),
    (10 + 46 + 3, "Error reading field 'producer_entries': Error reading field 'producer_id': "
                  "java.nio.BufferUnderflowException", 56),
    (10 + 46 + 8 + 2 + 4 + 8 + 1, "Error reading field 'offset_delta'", 56 + 22),
    (147, "Error reading field 'current_txn_first_offset'", 140),
])
def test_truncated_snapshot(size, message, position):
    with pytest.raises(CorruptDataError) as info:
        parse_snapshot(THREE.read_bytes()[:size])
    assert message in info.value.message and info.value.position == position


def test_bad_entry_counts():
    with pytest.raises(CorruptDataError, match="Array size -1 cannot be negative"):
        parse_snapshot(struct.pack(">hIi", 1, 0, -1))
    with pytest.raises(CorruptDataError, match=r"Error reading array of size 5, only 4 bytes available"):
        parse_snapshot(struct.pack(">hIi", 1, 0, 5) + b"abcd")


def test_unknown_version():
    data = bytearray(THREE.read_bytes())
    data[1] = 2
    with pytest.raises(CorruptDataError) as info:
        parse_snapshot(bytes(data))
    assert info.value.message == "Snapshot contained an unknown file version 2"


def test_crc_mismatch_and_trailing_bytes():
    data = bytearray(THREE.read_bytes())
    data[40] ^= 0x01
    snap = parse_snapshot(bytes(data))
    assert not snap.crc_valid and snap.crc == 0x1A3A695A and snap.computed_crc == snapshot_crc(data)
    with pytest.raises(CorruptDataError) as info:
        parse_snapshot(bytes(data), strict=True)
    assert info.value.message == (f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {0x1A3A695A}. "
                                  f"Computed crc: {snap.computed_crc}")
    extra = parse_snapshot(THREE.read_bytes() + b"\0")
    assert extra.trailing_bytes == 1 and not extra.crc_valid and len(extra.entries) == 3


def test_first_sequence_wraps_like_kafka():
    def entry(last_seq, delta):
        return ProducerEntry(1, 0, last_seq, 10, delta, 0, -1, -1)

    assert entry(10, 3).first_sequence == 7
    assert entry(2, 5).first_sequence == 2**31 - 3  # decrementSequence wrap
    assert not ProducerEntry(1, 0, -1, -1, 0, 0, 5, 100).has_batch_metadata


@given(st.lists(ENTRIES, max_size=12))
def test_round_trip(entries):
    data = encode_snapshot(entries)
    assert len(data) == HEADER_SIZE + ENTRY_SIZE * len(entries)
    snap = parse_snapshot(data, strict=True)
    assert snap.entries == entries and snap.crc_valid and snap.version == 1


@given(st.binary(max_size=200))
def test_random_bytes_only_corrupt_data_error(data):
    try:
        snap = parse_snapshot(data)
    except CorruptDataError as e:
        assert e.position is not None and 0 <= e.position <= len(data)
    else:
        assert snap.version == 1 and HEADER_SIZE + ENTRY_SIZE * len(snap.entries) + snap.trailing_bytes == len(data)


@given(st.data())
def test_mutated_real_snapshot_only_corrupt_data_error(data):
    raw = bytearray(THREE.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        snap = parse_snapshot(bytes(raw[:cut]))
    except CorruptDataError:
        return
    assert snap.crc_valid == (snap.crc == snap.computed_crc)
