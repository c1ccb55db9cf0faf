"""Issue 23, item 2: a segment split by ``kltool verify --repair`` (storage/change/split.py), then served by the
broker.

Broker-written data (an idempotent producer, several segments) is copied into three topics and damaged: in one,
a middle segment gets a copy of the previous segment's last batches in front and its name moved up by one
(a misnamed segment whose content collides); in another, a middle segment's batches are written in three
runs in descending order into one file named after its first batch (batches below its base: Kafka's overflow
case); in the third, the same with one batch below the base zeroed and another's magic byte hit (the split
cuts the first, mends the second: every record but the zeroed batch's is served); in a fourth, the last segment's first batch is moved to its end and the file named after its second batch (intact batches in reverse order, one alone below the base); in a fifth, two middle segments' contents swapped between their
file names; in a sixth, a middle segment's two halves written in the wrong order under its name (the last two:
intact runs out of order across files, which repair reorders). kltool repairs them; the broker then starts with the clean-shutdown marker and again without it and
with the recovery point at 0 (its recovery runs over every segment): it must log no truncation and serve every
original record, each as it was. The broker alone, its recovery run over the unrepaired copies, does not start.
"""

from __future__ import annotations

import pytest
from kafka import KafkaProducer

from ..conftest import run_kltool
from .test_broker_recovers import (
    TRUNCATION_WORDS,
    _batches,
    _copy_partition,
    _create_all,
    _produce_source,
    _segs,
    _served,
    _set_checkpoint,
)

SRC = "splitsrc"
CONFIG = {"segment.ms": "1000", "index.interval.bytes": "512"}
N_RECORDS = 400


def _rename_to(path, base):
    return path.with_name(f"{base:020d}.log")


def collide(pdir):
    segs = _segs(pdir)
    prev, seg = segs[1], segs[2]
    pb = _batches(prev)
    dup = prev.read_bytes()[pb[-2]["position"]:]
    body = seg.read_bytes()
    base = int(seg.name.split(".")[0])
    for f in pdir.glob(f"{base:020d}.*"):
        if f.suffix in (".log", ".index", ".timeindex", ".txnindex"):
            f.unlink()
    _rename_to(seg, base + 1).write_bytes(dup + body)


def overflow(pdir):
    seg = _segs(pdir)[2]
    bs = _batches(seg)
    assert len(bs) >= 6, len(bs)
    data = seg.read_bytes()
    cuts = [len(bs) * j // 3 for j in range(3)] + [len(bs)]
    runs = [data[bs[a]["position"]:(bs[b]["position"] if b < len(bs) else len(data))]
            for a, b in zip(cuts, cuts[1:], strict=False)]
    base = int(seg.name.split(".")[0])
    for f in pdir.glob(f"{base:020d}.*"):
        if f.suffix in (".log", ".index", ".timeindex", ".txnindex"):
            f.unlink()
    _rename_to(seg, bs[cuts[2]]["base_offset"]).write_bytes(b"".join(reversed(runs)))


LOST: dict[str, tuple[int, int]] = {}  # the offsets of a batch a damage makes unreadable, by damage kind


def overflow_damaged(pdir):
    """The overflow case, and in the file the split takes: one batch below the base zeroed (cut: its records
    are lost) and another's magic byte set to 3 (the v2 CRC does not cover it: repair mends it in the copy)."""
    overflow(pdir)
    seg = _segs(pdir)[2]
    bs = _batches(seg)
    base = int(seg.name.split(".")[0])
    below = [b for b in bs if b["base_offset"] < base]
    assert len(below) >= 4, below
    zero, hit = below[1], below[-2]
    data = bytearray(seg.read_bytes())
    size = int.from_bytes(data[zero["position"] + 8:zero["position"] + 12], "big") + 12
    data[zero["position"]:zero["position"] + size] = bytes(size)
    data[hit["position"] + 16] = 3
    seg.write_bytes(bytes(data))
    LOST["overflow_damaged"] = (zero["base_offset"], zero["last_offset"])


def reverse_last(pdir):
    """The partition's last segment with its first batch moved to the end and the file named after its second
    batch: intact batches in reverse order, one alone below the base at the end of the file (the split takes
    it: it used to be cut, and the batch before it as an offset field its neighbours contradict)."""
    seg = _segs(pdir)[-1]
    bs = _batches(seg)
    assert len(bs) >= 3, len(bs)
    data = seg.read_bytes()
    base = int(seg.name.split(".")[0])
    for f in pdir.glob(f"{base:020d}.*"):
        if f.suffix in (".log", ".index", ".timeindex", ".txnindex"):
            f.unlink()
    first = data[:bs[1]["position"]]
    _rename_to(seg, bs[1]["base_offset"]).write_bytes(data[bs[1]["position"]:] + first)


def _drop_indexes(pdir, base):
    for f in pdir.glob(f"{base:020d}.*"):
        if f.suffix in (".index", ".timeindex", ".txnindex"):
            f.unlink()


def swap_contents(pdir):
    """Two middle segments' .log bytes swapped between their file names (the old walk cut the batches of the
    file named after the second, all below its name; now each run goes back under the name of its first
    offset)."""
    a, b = _segs(pdir)[1], _segs(pdir)[2]
    da, db = a.read_bytes(), b.read_bytes()
    for seg in (a, b):
        _drop_indexes(pdir, int(seg.name.split(".")[0]))
    a.write_bytes(db)
    b.write_bytes(da)


def runs_swapped(pdir):
    """A middle segment's second half of batches written before its first half, under the same name: no batch
    below the name, but the first half out of order after the second (the old walk cut it)."""
    seg = _segs(pdir)[1]
    bs = _batches(seg)
    assert len(bs) >= 4, len(bs)
    data = seg.read_bytes()
    cut = bs[len(bs) // 2]["position"]
    _drop_indexes(pdir, int(seg.name.split(".")[0]))
    seg.write_bytes(data[cut:] + data[:cut])


DAMAGE = {"collide": collide, "overflow": overflow, "overflow_damaged": overflow_damaged, "reverse_last": reverse_last,
          "swap_contents": swap_contents, "runs_swapped": runs_swapped}


@pytest.fixture(scope="module")
def outcome(broker, tmp_path_factory):
    b = broker
    names = [f"split-{k}" for k in DAMAGE]
    _create_all(b, [SRC, *names], CONFIG)
    prod = KafkaProducer(**b.kafka_python_args(), enable_idempotence=True, linger_ms=2, batch_size=512)
    original, src = _produce_source(b, prod, SRC, N_RECORDS, lambda p, i: p.send(
        SRC, key=f"k{i % 13}".encode(), value=f"v{i}".encode() * 8, partition=0), flush_every=20)
    for k, damage in DAMAGE.items():
        d = b.partition_dir(f"split-{k}", 0)
        _copy_partition(src, d)
        damage(d)
    backup = tmp_path_factory.mktemp("backup")
    before = run_kltool("--json", "verify", "--topic", "split-*", b.logdir)
    repair = run_kltool("--json", "verify", "--repair", "--backup-dir", backup, "--topic", "split-*", b.logdir)
    after = run_kltool("--json", "verify", "--topic", "split-*", b.logdir)
    b.start()
    run1_log = b.log_text(since_start=True)
    run1 = {n: _served(b, n) for n in names}
    b.stop()
    _set_checkpoint(b.logdir / "recovery-point-offset-checkpoint", {(n, 0): 0 for n in names})
    b.clean_shutdown_marker().unlink()
    b.start()
    run2_log = b.log_text(since_start=True)
    run2 = {n: _served(b, n) for n in names}
    b.stop()
    # run 3, the broker alone: the same damage unrepaired, no clean-shutdown marker, recovery point 0
    for k, damage in DAMAGE.items():
        d = b.partition_dir(f"split-{k}", 0)
        _copy_partition(src, d)
        damage(d)
    _set_checkpoint(b.logdir / "recovery-point-offset-checkpoint", {(n, 0): 0 for n in names})
    if b.clean_shutdown_marker().exists():
        b.clean_shutdown_marker().unlink()
    try:
        b.start()
        run3 = {n: _served(b, n) for n in names}
        run3_error = None
    except RuntimeError as e:
        run3, run3_error = {}, str(e)
    run3_log = b.log_text(since_start=True)
    return {"original": original, "before": before, "repair": repair, "after": after, "run1": run1, "run2": run2,
            "logs": run1_log + "\n" + run2_log, "run3": run3, "run3_error": run3_error, "run3_log": run3_log}


def test_kltool_splits_and_is_clean_after(outcome):
    assert outcome["before"].code == 1
    assert outcome["repair"].code == 0, outcome["repair"]
    acts = [r for r in outcome["repair"].json() if r["type"] == "action"]
    assert [a["op"] for a in acts if a["op"] in ("truncate", "excise")] == []
    assert any(a["op"] == "create" for a in acts)
    assert outcome["after"].code == 0, outcome["after"]
    # the damaged one: verify promised the cut and the mend, the plan made them (issue 23 leftover 2)
    (split,) = [f for f in outcome["before"].json() if f.get("kind") == "segment_split" and "split-overflow_damaged"
                in f["file"]]
    assert "1 damaged range(s) cut" in split["message"] and "1 batch(es) mended" in split["message"], split
    mine = [a for a in acts if "split-overflow_damaged" in a["file"]]
    assert any("restored in the copy" in a.get("reason", "") for a in mine if a["op"] == "create"), mine
    assert any("damaged range(s) cut" in a.get("reason", "") for a in mine if a["op"] == "quarantine"), mine


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_broker_serves_every_record(outcome, kind):
    name = f"split-{kind}"
    lo, hi = LOST.get(kind, (None, None))
    want = [r for r in outcome["original"] if lo is None or not lo <= r["offset"] <= hi]
    assert lo is None or len(want) < len(outcome["original"])
    for run in ("run1", "run2"):
        rows, why = outcome[run][name]
        assert why == "end", (run, why)
        assert rows == want, run
    lines = [ln for ln in outcome["logs"].splitlines() if f"{name}-0" in ln and any(w in ln for w in TRUNCATION_WORDS)]
    assert lines == []



def test_the_broker_alone_refuses_to_start(outcome):
    """What Kafka 4.4 does with the unrepaired copies when its recovery reaches them: ``LogSegment.recover``
    raises ``LogSegmentOffsetOverflowException`` at the first batch below the base, the loader goes to split
    the segment, but ``splitOverflowedSegment`` requires ``hasOverflow()``, which looks only at the last
    batch: ``IllegalArgumentException``, a fatal fault, and the broker exits (no record served)."""
    assert outcome["run3_error"] is not None
    log = outcome["run3_log"]
    assert "Caught segment overflow error" in log
    assert "Split operation is only permitted for segments with overflow" in log
    assert "Error starting LogManager" in log
