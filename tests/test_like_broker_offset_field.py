"""``verify --repair --like-broker`` on a batch whose baseOffset field (not covered by the CRC) was hit: the
batch's CRC still checks, its offset is far beyond its neighbours'."""

from __future__ import annotations

import struct

import pytest

from .conftest import ORACLE


@pytest.mark.xfail(strict=True, reason="routed to the repair owners (witness/split): --like-broker keeps the batch "
                   "whose offset field is damaged (offset 3 + 2^39) and truncates the intact batch after it (offsets "
                   "5..6) as offset_order; the broker's recovery splits the overflowing segment "
                   "(LocalLog.splitOverflowedSegment) and keeps all 7 records; a second repair still reports "
                   "index_not_rebuilt")
def test_like_broker_keeps_what_the_broker_keeps_after_a_damaged_offset_field(kl, tmp_path):
    """The broker's LogSegment.recover throws LogSegmentOffsetOverflowException at the batch (its offset is
    more than 2^31-1 past the segment's base) and LogLoader splits the segment there: batches 0..2, 3+2^39 and
    5..6 each start a segment, none is truncated. A --like-broker repair must not cut more than that."""
    part = tmp_path / "kafka-logs" / "orders-0"
    part.mkdir(parents=True)
    data = bytearray((ORACLE / "v2-none-0" / "00000000000000000000.log").read_bytes())
    # batches at bytes 0 (offsets 0..2), 100 (3..4), 186 (5..6); the second one's offset field gets bit 39 set
    assert struct.unpack_from(">q", data, 100)[0] == 3
    struct.pack_into(">q", data, 100, 3 + (1 << 39))
    (part / "00000000000000000000.log").write_bytes(data)
    r = kl("--json", "verify", "--repair", "--like-broker", str(tmp_path / "kafka-logs"))
    assert r.code in (0, 1), r
    records = [x for x in kl("--json", "dump", "--records", str(part)).json() if x["type"] == "record"]
    assert len(records) == 7, [x["offset"] for x in records]
