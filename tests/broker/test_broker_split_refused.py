"""Issue 23 leftover 3: what Kafka 4.4 does with a segment whose last batch overflows (it splits it,
``LocalLog.splitOverflowedSegment``) when another segment is named inside the offsets the split covers; what
``verify --repair --like-broker``'s ``split_refused`` finding says the broker does (the refusal itself:
tests/test_like_broker_split_refused.py).

v2-none-0 (offsets 0..6) with its last batch's offset field at 5 + 2^39, and a one-record segment named inside
[0, 5 + 2^39 + 2): named 100, it stays between the new segments 0 and 5 + 2^39 and every record is served;
named 5 + 2^39 (like a new segment), the new segment's files are renamed over it and its record is gone (the
offset is served from the split segment's copy). The broker is started without the clean-shutdown marker and
with the recovery point at 0."""

from __future__ import annotations

from kltool.format import names as fn

from ..conftest import run_kltool
from ..test_like_broker_split_refused import HI, write_overflow_and_other
from .test_broker_recovers import _create_all, _served, _set_checkpoint

CASES = {"ovf-stays": 100, "ovf-replaced": HI}


def _write(pdir, other):
    for f in pdir.iterdir():
        if f.name != "partition.metadata":
            f.unlink()
    write_overflow_and_other(pdir, other)


def test_the_broker_splits_over_another_segments_name(broker):
    b = broker
    _create_all(b, list(CASES), {})
    b.stop()
    for name, other in CASES.items():
        _write(b.partition_dir(name, 0), other)
    refused = run_kltool("--json", "verify", "--repair", "--like-broker", "--dry-run", "--topic", "ovf-*", b.logdir)
    _set_checkpoint(b.logdir / "recovery-point-offset-checkpoint", {(n, 0): 0 for n in CASES})
    if b.clean_shutdown_marker().exists():
        b.clean_shutdown_marker().unlink()
    b.start()
    log = b.log_text(since_start=True)
    served = {n: _served(b, n) for n in CASES}
    b.stop()
    assert "Splitting overflowed segment" in log, log[-3000:]
    rows, why = served["ovf-stays"]
    assert why == "end"
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 4, 100, HI, HI + 1], rows
    assert sorted(p.name for p in b.partition_dir("ovf-stays", 0).glob("*.log")) == \
        [fn.segment_file(o, "log") for o in (0, 100, HI)]
    rows, why = served["ovf-replaced"]
    assert why == "end"
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 4, HI, HI + 1], rows
    assert all(r["key"] != served["ovf-stays"][0][5]["key"] for r in rows), rows  # the other segment's record is gone
    # what kltool --like-broker says of them: the same fates, and it changes nothing
    found = {f["file"].split("/")[-2]: f["message"] for f in refused.json() if f.get("kind") == "split_refused"}
    assert "it stays between the new segments" in found["ovf-stays-0"], found
    assert "is replaced by the new segment of the same name" in found["ovf-replaced-0"], found
    assert not [x for x in refused.json() if x["type"] == "action"]
