"""``verify --repair --like-broker`` on a batch whose baseOffset field (not covered by the CRC) was hit: the
batch's CRC still checks, its offset is far beyond its neighbours'.

What Kafka 4.4 does (seen on the real broker, started without a clean-shutdown marker on this very segment):
``LogSegment.recover`` throws ``LogSegmentOffsetOverflowException`` at the batch ("Caught segment overflow
error: Detected offset overflow at offset 549755813892 ... Split segment and retry"), ``LogLoader`` goes to split
the segment, but ``LocalLog.splitOverflowedSegment`` requires ``hasOverflow()``, which looks only at the
segment's last batch (offsets 5..6, in range): ``IllegalArgumentException: Split operation is only permitted
for segments with overflow``, a fatal fault ("Error starting LogManager"), and the broker exits. It neither
keeps the 7 records nor truncates anything. (tests/broker/test_broker_split.py sees the same refusal for
batches below a segment's base.) So --like-broker changes nothing and says so; the default salvage mode
restores the offset field and keeps every record. When the hit batch is the LAST one, the broker does split the
segment, and so does --like-broker."""

from __future__ import annotations

import struct

from .conftest import ORACLE


def _bit39(tmp_path, at: int, offset: int):
    """orders-0: v2-none-0's segment (batches at bytes 0 (offsets 0..2), 100 (3..4), 186 (5..6)) with bit 39 set
    in the offset field of the batch at byte ``at`` (first offset ``offset``); (the partition dir, its bytes)."""
    part = tmp_path / "kafka-logs" / "orders-0"
    part.mkdir(parents=True)
    data = bytearray((ORACLE / "v2-none-0" / "00000000000000000000.log").read_bytes())
    assert struct.unpack_from(">q", data, at)[0] == offset
    struct.pack_into(">q", data, at, offset + (1 << 39))
    (part / "00000000000000000000.log").write_bytes(data)
    return part, bytes(data)


def _damaged(tmp_path):
    """The second batch's offset field gets bit 39 set."""
    return _bit39(tmp_path, 100, 3)


def test_like_broker_says_the_broker_will_not_start_and_changes_nothing(kl, tmp_path):
    part, data = _damaged(tmp_path)
    for _ in range(2):  # (a second run says the same: nothing was half done)
        r = kl("--json", "verify", "--repair", "--like-broker", str(tmp_path / "kafka-logs"))
        assert r.code == 1, r
        rows = r.json()
        assert [x for x in rows if x["type"] == "action"] == []
        refusal = [x for x in rows if x.get("kind") == "broker_will_not_start"]
        assert len(refusal) == 1, rows
        assert refusal[0]["severity"] == "error"
        assert "Split operation is only permitted for segments with overflow" in refusal[0]["message"]
        assert "verify --repair" in refusal[0]["message"]  # the way out: the default salvage mode
        assert not [x for x in rows if x.get("kind") == "index_not_rebuilt"], rows
        assert (part / "00000000000000000000.log").read_bytes() == data
        assert sorted(p.name for p in part.iterdir()) == ["00000000000000000000.log"]


def test_salvage_restores_the_offset_field_and_keeps_every_record(kl, tmp_path):
    part, _ = _damaged(tmp_path)
    r = kl("--json", "verify", "--repair", str(tmp_path / "kafka-logs"))
    assert r.code == 0, r
    records = [x for x in kl("--json", "dump", "--records", str(part)).json() if x["type"] == "record"]
    assert [x["offset"] for x in records] == list(range(7))
    assert kl("verify", str(tmp_path / "kafka-logs")).code == 0


def _last_batch_overflows(tmp_path):
    """The LAST batch's offset field (bytes 186.., offsets 5..6) gets bit 39 set: the segment's last batch
    overflows, so Kafka 4.4's loader splits it (``hasOverflow()``)."""
    return _bit39(tmp_path, 186, 5)


def test_like_broker_splits_a_segment_whose_last_batch_overflows(kl, tmp_path, kafka_oracle):
    """Kafka 4.4 (seen on the real broker): ``LogSegment.recover`` raises ``LogSegmentOffsetOverflowException``,
    ``LocalLog.splitOverflowedSegment`` splits the segment (its last batch overflows) into 00..0 (offsets 0..4)
    and 00..549755813893 (the last batch), and the broker serves all 7 records at 0..4 and 549755813893..94.
    --like-broker plans that split (it used to change nothing and say index_not_rebuilt)."""
    from kltool.format import names as fn

    part, data = _last_batch_overflows(tmp_path)
    hi = 5 + (1 << 39)
    logs = tmp_path / "kafka-logs"
    r = kl("--json", "verify", "--repair", "--like-broker", "--backup-dir", str(tmp_path / "bk"), str(logs))
    assert r.code == 0, r
    rows = r.json()
    assert not [x for x in rows if x.get("kind") in ("index_not_rebuilt", "broker_will_not_start")], rows
    acts = [x for x in rows if x["type"] == "action"]
    assert not [a for a in acts if a["op"] in ("truncate", "excise")], acts
    assert sorted(p.name for p in part.iterdir() if p.suffix == ".log") == \
        [fn.segment_file(0, "log"), fn.segment_file(hi, "log")]
    assert (part / fn.segment_file(0, "log")).read_bytes() == data[:186]
    assert (part / fn.segment_file(hi, "log")).read_bytes() == data[186:]
    assert not [p for p in part.iterdir() if p.suffix in (".cleaned", ".swap")]
    records = [x for x in kl("--json", "dump", "--records", str(part)).json() if x["type"] == "record"]
    assert [x["offset"] for x in records] == [0, 1, 2, 3, 4, hi, hi + 1]
    assert kl("verify", str(logs)).code == 0
    again = kl("--json", "verify", "--repair", "--like-broker", "--dry-run", str(logs))
    assert again.code == 0, again
    assert [x for x in again.json() if x["type"] == "action"] == []
    code, _rows = kafka_oracle(sorted(part.glob("*.log")))
    assert code == 0, _rows
    (manifest,) = (tmp_path / "bk").rglob("manifest.json")
    assert kl("restore", str(manifest)).code == 0
    assert sorted(p.name for p in part.iterdir()) == ["00000000000000000000.log"]
    assert (part / "00000000000000000000.log").read_bytes() == data
