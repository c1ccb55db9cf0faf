"""Offsets Kafka computes in a Java long are shown as Kafka shows them: past 2^63-1 they wrap negative.

A batch at baseOffset 2^63-3 with lastOffsetDelta 5: Kafka's reader (DefaultRecordBatch, checked with the
oracle's kafka-clients 3.9.1 ``read --records``) gives lastOffset -9223372036854775806, nextOffset
-9223372036854775805 and the second record (offsetDelta 5) offset -9223372036854775806. dump (text, --json,
--records, --format %o), info and offsets print those; verify still names the overflow with the true value.
"""

from __future__ import annotations

from kltool.format.batch import build_v2_batch
from kltool.format.records import java_long

M = (1 << 63) - 1
BASE = M - 2
WRAPPED_LAST = -9223372036854775806  # Kafka's lastOffset (and the second record's offset)
WRAPPED_NEXT = -9223372036854775805  # Kafka's nextOffset: the log end offset


def _partition(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    b = build_v2_batch([(0, 1000, b"k", b"v", ()), (5, 1001, b"k2", b"v2", ())], base_offset=BASE,
                       producer_id=7, producer_epoch=0, base_sequence=0)
    (d / "00000000000000000000.log").write_bytes(b)
    return d


def test_java_long():
    assert java_long(M) == M
    assert java_long(-(1 << 63)) == -(1 << 63)
    assert java_long(M + 1) == -(1 << 63)
    assert java_long(BASE + 5) == WRAPPED_LAST
    assert java_long(-(1 << 63) - 1) == M


def test_dump_text_prints_kafkas_wrapped_offsets(kl, tmp_path):
    log = _partition(tmp_path) / "00000000000000000000.log"
    r = kl("dump", "--records", log)
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert f"baseOffset: {BASE} lastOffset: {WRAPPED_LAST} count: 2 " in lines[2]
    assert lines[3].startswith(f"| offset: {BASE} ")
    assert lines[4].startswith(f"| offset: {WRAPPED_LAST} ")
    assert "lastSequence: 5 " in lines[2]  # (incrementSequence(baseSequence, lastOffsetDelta), unaffected)
    r = kl("dump", log)
    assert f"lastOffset: {WRAPPED_LAST} " in r.out


def test_dump_json_prints_kafkas_wrapped_offsets(kl, tmp_path):
    p = _partition(tmp_path)
    for target in (p, p / "00000000000000000000.log"):
        rows = kl("--json", "dump", "--records", target).json()
        batch = [x for x in rows if x["type"] == "batch"]
        assert [(b["base_offset"], b["last_offset"], b["last_sequence"]) for b in batch] == [(BASE, WRAPPED_LAST, 5)]
        assert [x["offset"] for x in rows if x["type"] == "record"] == [BASE, WRAPPED_LAST]
        rows = kl("--json", "dump", target).json()
        assert [x["last_offset"] for x in rows if x["type"] == "batch"] == [WRAPPED_LAST]
    r = kl("dump", "--format", "%o\n", p)
    assert r.out.splitlines() == [str(BASE), str(WRAPPED_LAST)]


def test_info_and_offsets_show_the_wrapped_log_end(kl, tmp_path):
    p = _partition(tmp_path)
    d = [x for x in kl("--json", "info", tmp_path).json() if x["type"] == "partition"][0]
    assert d["log_end_offset"] == WRAPPED_NEXT
    assert str(WRAPPED_NEXT) in kl("info", tmp_path).out
    d = kl("--json", "offsets", "--max-timestamp", "--latest", p).json()[0]
    assert (d["log_end_offset"], d["max_timestamp_offset"]) == (WRAPPED_NEXT, WRAPPED_LAST)
    assert kl("offsets", "--format", "kafka", p).out == f"t:0:{WRAPPED_NEXT}\n"


def test_verify_still_names_the_overflow(kl, tmp_path):
    p = _partition(tmp_path)
    rows = kl("--json", "verify", p).json()
    over = [x for x in rows if x.get("kind") == "offset_overflow"]
    assert over and over[0]["offset"] == BASE + 5  # the model keeps the true value: verify names the overflow


def test_index_entries_past_the_long_range_wrap(kl, tmp_path):
    """OffsetIndex/TimeIndex.parseEntry: baseOffset + relativeOffset in a Java long."""
    import struct

    d = tmp_path / "t-0"
    d.mkdir()
    base = "09223372036854775800"
    (d / f"{base}.index").write_bytes(struct.pack(">ii", 10, 0))
    (d / f"{base}.timeindex").write_bytes(struct.pack(">qi", 1000, 10))
    r = kl("dump", d / f"{base}.index")
    assert r.out.splitlines()[1] == "offset: -9223372036854775806 position: 0"
    assert kl("--json", "dump", d / f"{base}.index").json()[0]["offset"] == -9223372036854775806
    r = kl("dump", d / f"{base}.timeindex")
    assert r.out.splitlines()[1] == "timestamp: 1000 offset: -9223372036854775806"
    assert kl("--json", "dump", d / f"{base}.timeindex").json()[0]["offset"] == -9223372036854775806


def test_last_sequence_as_kafka_computes_it(kl, tmp_path):
    """DefaultRecordBatch.lastSequence = incrementSequence(baseSequence, lastOffsetDelta) in Java ints, -1 only
    for baseSequence -1 (numbers from the oracle's kafka-clients 3.9.1 reader)."""
    d = tmp_path / "t-0"
    d.mkdir()
    rec = [(0, 1000, b"k", b"v", ())]
    batches = [build_v2_batch(rec, base_offset=100, producer_id=3, producer_epoch=0, base_sequence=5,
                              last_offset_delta=-10),
               build_v2_batch(rec, base_offset=200, producer_id=3, producer_epoch=0, base_sequence=2147483600,
                              last_offset_delta=100),
               build_v2_batch(rec + [(1, 1000, b"k", b"v", ())], base_offset=300, producer_id=3, producer_epoch=0,
                              base_sequence=-5)]
    log = d / "00000000000000000000.log"
    log.write_bytes(b"".join(batches))
    want = [2147483643, 52, -4]
    assert [x["last_sequence"] for x in kl("--json", "dump", log).json() if x["type"] == "batch"] == want
    rows = kl("--json", "dump", "--records", d).json()
    assert [x["last_sequence"] for x in rows if x["type"] == "batch"] == want
    text = kl("dump", log).out
    assert [int(t.split("lastSequence: ")[1].split()[0]) for t in text.splitlines()[2:]] == want


def test_offset_filters_past_the_long_range_are_no_internal_error(kl, tmp_path):
    """--from-offset -N past a log end beyond 2^63-1, or a --to-offset past it, reached the C formatter as an
    int it cannot take (exit 70): the Python loop reads such a batch."""
    p = _partition(tmp_path)
    for js in ((), ("--json",)):
        r = kl(*js, "dump", "--from-offset", "-3", "--records", p)
        assert r.code == 0, r
        r = kl(*js, "dump", "--to-offset", "99999999999999999999", "--records", p)
        assert r.code == 0, r
    r = kl("dump", "--from-offset", "-3", "--records", p)
    assert [ln for ln in r.out.splitlines() if ln.startswith("| offset:")] == \
        [ln for ln in kl("dump", "--records", p).out.splitlines() if ln.startswith(f"| offset: {WRAPPED_LAST} ")]
    r = kl("dump", "--to-offset", "99999999999999999999", "--records", p)
    assert r.out.count("| offset:") == 2


def test_a_limit_past_the_long_range_is_no_internal_error(kl, tmp_path):
    """--limit 99999999999999999999 reached the C formatter as a count it cannot take (exit 70)."""
    p = _partition(tmp_path)
    log = p / "00000000000000000000.log"
    log.write_bytes(build_v2_batch([(0, 1000, b"k", b"v", ())], base_offset=0))  # (a batch the C formatter takes)
    for js in ((), ("--json",)):
        r = kl(*js, "dump", "--records", "--limit", "99999999999999999999", p)
        assert r.code == 0, r
        assert r.out.count('"type":"record"' if js else "| offset: 0 ") == 1


def test_producer_state_holds_kafkas_wrapped_last_offset(kl, tmp_path):
    # The broker's ProducerStateManager keeps batch.lastOffset(), a Java long: producers shows it (and a
    # snapshot kltool writes holds it) wrapped, as kafka-producer-state dumps show it.
    p = _partition(tmp_path)
    rows = kl("--json", "producers", p).json()
    assert [(x["producer_id"], x["last_offset"], x["last_sequence"]) for x in rows if x["type"] == "producer"] \
        == [(7, WRAPPED_LAST, 5)]
    assert str(WRAPPED_LAST) in kl("producers", p).out
