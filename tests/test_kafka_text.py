"""kltool.kafka_text: kafka-dump-log's words for what the goldens of test_dump_parity.py seldom show."""

from __future__ import annotations

from kltool.format import internal
from kltool.kafka_text import control_text, decoded_key_payload, first_sequence


def test_first_sequence_wraps_like_decrement_sequence():
    assert first_sequence(11, 2) == 9
    assert first_sequence(1, 3) == 2**31 - 2  # Integer.MAX_VALUE - (3 - 1) + 1


def test_control_records():
    assert control_text({"type": "COMMIT", "coordinator_epoch": 7}, b"") == " endTxnMarker: COMMIT coordinatorEpoch: 7"
    assert control_text({"type": "UNKNOWN", "type_id": 42}, None) == " controlType: UNKNOWN(42)"
    assert control_text({"type": "LEADER_CHANGE"}, b"\x00").startswith(" LeaderChange: <")  # undecodable: said so


def test_decoder_texts():
    dec = internal.decode_consumer_offsets
    tomb = {"type": "group_metadata", "key": {"type": "2", "data": {"group": "g"}}, "payload": None}
    assert decoded_key_payload(dec, 5, tomb, None) == ('{"type":"2","data":{"group":"g"}}', "<DELETE>")
    unknown = {"type": "unknown", "record_type": 99, "key": "", "payload": None}
    assert decoded_key_payload(dec, 5, unknown, None) == ("Unknown record type 99 at offset 5, skipping.", None)
    assert decoded_key_payload(dec, 5, None, "bad") == ("Error at offset 5, skipping. bad", None)
    meta = internal.decode_cluster_metadata
    assert decoded_key_payload(meta, 3, None, "bad") == (None, "Error at 3, skipping. bad")
