"""A segment whose batches lie below its base offset and do not fit between its neighbours (issue 23): repair
splits it the broker's way (``LocalLog.splitOverflowedSegment``: new segments named after their first batch,
``.cleaned`` -> ``.swap`` -> in place), keeps every intact batch, and keeps the second copy of offsets held
twice in the backup, named in the plan. (It used to excise every batch below the name, duplicates and
intact batches alike.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kltool.format import build_batch
from kltool.format import names as fn
from kltool.storage.change.repair import repair
from kltool.storage.change.restore import restore
from kltool.storage.logdir import open_path

from .conftest import ROOT, run_kltool
from .test_misnamed_segments import SOURCES, _errors, _segments
from .test_uncovered_fields import _batches, _logs, _offsets


def _tree(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def dry_run_then_repair(part: Path, backup_dir: Path):
    """``verify --repair --dry-run`` (exit 1, nothing changed), then the repair (exit 0): the dry run's and
    the repair's actions as (op, file name, reason), and the repair's Result."""
    before = _tree(part)
    dry = run_kltool("--json", "verify", "--repair", "--dry-run", part)
    assert dry.code == 1, dry.err
    assert _tree(part) == before
    wet = run_kltool("--json", "verify", "--repair", "--backup-dir", backup_dir, part)
    assert wet.code == 0, wet.err

    def acts(r):
        return [(o["op"], Path(o["file"]).name, o.get("reason")) for o in map(json.loads, r.out.splitlines())
                if o.get("type") == "action"]

    return acts(dry), acts(wet), wet


def _base(p: Path) -> int:
    return int(p.name.split(".")[0])


def _collide(part: Path, k: int, shift: int) -> tuple[dict, set]:
    """Segment 1 gets a copy of segment 0's last ``k`` batches in front and its name moved up by ``shift``:
    its first batches lie below its name and collide with segment 0's. Returns (the original .log files, the
    original offsets)."""
    logs = _logs(part)
    original = {p.name: p.read_bytes() for p in logs}
    before = _offsets(part)
    prev, seg = logs[0], logs[1]
    hs = _batches(prev)
    dup = prev.read_bytes()[hs[-k].position:]
    data = seg.read_bytes()
    seg.unlink()
    (part / fn.segment_file(_base(seg) + shift, "log")).write_bytes(dup + data)
    return original, before


def _max_shift(part: Path, shift: int) -> int:
    names = sorted(_base(p) for p in _logs(part))
    return min(shift, names[2] - names[1] - 1) if len(names) > 2 else shift


@pytest.mark.parametrize("shift", [1, 5])
@pytest.mark.parametrize("src,parts", SOURCES)
def test_a_misnamed_segment_whose_content_collides_keeps_every_batch(tmp_path, src, parts, shift):
    part = _segments(tmp_path, src, parts)
    shift = _max_shift(part, shift)
    k = min(2, len(_batches(_logs(part)[0])))
    original, before = _collide(part, k, shift)
    damaged = _tree(part)
    assert _errors(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    plan = [a.describe() for a in result.plan.actions]
    assert _offsets(part) == before, plan
    assert {p.name: p.read_bytes() for p in _logs(part)} == original, plan
    assert not _errors(part), plan
    assert not [p for p in part.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    # the second copy of the colliding batches is named in the plan and kept in the backup
    (q,) = [a for a in result.plan.actions if a.op == "quarantine" and a.file.suffix == ".log"]
    assert "held twice" in q.reason and f"also in {fn.segment_file(0, 'log')}" in q.reason, q.reason
    assert [a.op for a in result.plan.actions if a.op in ("truncate", "excise")] == []
    doc = json.loads(result.manifests[0].read_text())
    (e,) = [e for e in doc["actions"] if e["op"] == "quarantine" and e["file"].endswith(".log")]
    assert (result.manifests[0].parent / e["backup"]).read_bytes() == damaged[Path(e["file"]).name]
    # restore brings back the damaged tree byte for byte
    restore(result.manifests[0])
    assert _tree(part) == damaged


def _overflowed(part: Path, pieces: int) -> tuple[dict, set, int]:
    """The middle segment's batches in ``pieces`` runs, written in descending order into one file named after
    the first batch (the highest run): every later run lies below the file's base offset."""
    logs = _logs(part)
    original = {p.name: p.read_bytes() for p in logs}
    before = _offsets(part)
    seg = logs[1]
    hs = _batches(seg)
    data = seg.read_bytes()
    cuts = [len(hs) * j // pieces for j in range(pieces)] + [len(hs)]
    runs = [data[hs[a].position:(hs[b].position if b < len(hs) else len(data))] for a, b in zip(cuts, cuts[1:], strict=False)]
    name = hs[cuts[-2]].base_offset
    seg.unlink()
    (part / fn.segment_file(name, "log")).write_bytes(b"".join(reversed(runs)))
    return original, before, name


@pytest.mark.parametrize("pieces", [2, 3])
# v2-none-0 is left out: 7 batches in 3 segments leave too few to cut into runs
@pytest.mark.parametrize("src,parts", [s for s in SOURCES if s[1] != 2 and s[0] != "java-oracle/v2-none-0"])
def test_a_segment_with_batches_below_its_base_is_split(tmp_path, src, parts, pieces):
    """Kafka's overflow case: the broker splits the segment at each batch that does not fit the new segment
    before it; repair does the same and the pieces come back as the segments they were."""
    part = _segments(tmp_path, src, parts)
    assert len(_batches(_logs(part)[1])) >= 2 * pieces, "the source holds too few batches for this case"
    original, before, name = _overflowed(part, pieces)
    damaged = _tree(part)
    assert _errors(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    plan = [a.describe() for a in result.plan.actions]
    assert _offsets(part) == before, plan
    logs = _logs(part)
    assert len(logs) == len(original) + pieces - 1, plan
    assert b"".join(p.read_bytes() for p in logs) == b"".join(original[k] for k in sorted(original)), plan
    lo = min(h.base_offset for h in _batches(part / fn.segment_file(name, "log")))
    for p in logs:  # each named after its first batch; the new ones with the broker's indexes
        assert _base(p) == _batches(p)[0].base_offset
        if lo <= _base(p) <= name:
            assert p.with_suffix(".index").exists() and p.with_suffix(".timeindex").exists()
    assert not _errors(part), plan
    assert run_kltool("verify", part).code == 0
    restore(result.manifests[0])
    assert _tree(part) == damaged


def test_a_dry_run_writes_nothing_and_shows_the_split(tmp_path):
    part = _segments(tmp_path, *SOURCES[0])
    _collide(part, 2, 1)
    damaged = _tree(part)
    r = run_kltool("--json", "verify", "--repair", "--dry-run", part)
    assert r.code == 1, r.err
    assert _tree(part) == damaged
    ops = [json.loads(line) for line in r.out.splitlines() if '"action"' in line]
    assert [o["op"] for o in ops].count("create") == 3
    assert any("held twice" in o.get("reason", "") for o in ops)


def test_a_single_batch_below_the_base_is_not_split(tmp_path):
    """One batch below the base with its neighbours in order is a damaged offset field (the batch walk's case),
    not a split."""
    part = _segments(tmp_path, *SOURCES[0])
    _collide(part, 1, 0)
    result = repair(open_path(part), backup_dir=tmp_path / "bk", dry_run=True)
    assert not [a for a in result.plan.actions if a.op == "create"]


KILLER = textwrap.dedent("""
    import os, signal, sys
    from kltool.storage.logdir import open_path
    from kltool.storage.change.repair import repair
    root, k, bk = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    seen = [0]
    def step(a):
        seen[0] += 1
        if seen[0] == k:
            os.kill(os.getpid(), signal.SIGKILL)
    r = repair(open_path(root), backup_dir=bk, on_action=step)
    print(len(r.plan.actions))
""")


def _past_its_content(part: Path) -> None:
    """The last segment (one batch) named past its last offset, a copy of the batch before it in front: the
    old name lies outside the offsets the new segment covers, so it is moved there first."""
    logs = _logs(part)
    prev, seg = logs[-2], logs[-1]
    dup = prev.read_bytes()[_batches(prev)[-1].position:]
    body = seg.read_bytes()
    seg.unlink()
    (part / fn.segment_file(_batches_last(body, part) + 1, "log")).write_bytes(dup + body)


def _batches_last(body: bytes, part: Path) -> int:
    probe = part.parent / "probe.log"
    probe.write_bytes(body)
    try:
        return _batches(probe)[-1].last_offset
    finally:
        probe.unlink()


def test_kill_at_a_few_steps_of_a_split(tmp_path):
    _kill_and_rerun(tmp_path, *SOURCES[1], lambda p: _overflowed(p, 3), lambda n: [1, n // 3, n // 2, n - 1, n])


@pytest.mark.slow
@pytest.mark.parametrize("src,parts", [SOURCES[0], SOURCES[1]])
def test_kill_at_every_step_of_a_split(tmp_path, src, parts):
    _kill_and_rerun(tmp_path, src, parts, lambda p: _overflowed(p, 3), lambda n: range(1, n + 1))


@pytest.mark.slow
def test_kill_at_every_step_of_a_split_that_moves_the_old_name_first(tmp_path):
    _kill_and_rerun(tmp_path, "java-oracle/v2-none-0", 3, _past_its_content, lambda n: range(1, n + 1))


def test_the_old_name_outside_the_new_offsets_is_moved_in_first(tmp_path):
    part = _segments(tmp_path, "java-oracle/v2-none-0", 3)
    original, before = {p.name: p.read_bytes() for p in _logs(part)}, _offsets(part)
    _past_its_content(part)
    damaged = _tree(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    assert result.plan.actions[0].op == "rename" or any(a.op == "rename" and a.file.suffix == ".log"
                                                         for a in result.plan.actions[:4])
    assert _offsets(part) == before
    assert {p.name: p.read_bytes() for p in _logs(part)} == original
    assert not _errors(part)
    restore(result.manifests[0])
    assert _tree(part) == damaged


def _kill_and_rerun(tmp_path, src, parts, damage, points):
    """kill -9 after each step: ``verify --repair`` then completes the split or undoes it (as the broker's
    LogLoader does), every intact batch is in the log once, and ``restore`` of the chain brings back the
    damaged files byte for byte. ``damage`` may return the offsets a mend brings back."""
    base = _segments(tmp_path / "src", src, parts)
    mended = damage(base)
    before = _offsets(base) | (mended if isinstance(mended, set) else set())
    damaged = _tree(base)
    whole = tmp_path / "whole" / base.name
    shutil.copytree(base, whole)
    p = subprocess.run([sys.executable, "-c", KILLER, str(whole), "1000000", str(tmp_path / "bkw")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    n = int(p.stdout.split()[-1])
    done = _tree(whole)
    for k in points(n):
        work = tmp_path / f"k{k}" / base.name
        shutil.copytree(base, work)
        bk = tmp_path / f"bk{k}"
        p = subprocess.run([sys.executable, "-c", KILLER, str(work), str(k), str(bk)], capture_output=True,
                           text=True, cwd=ROOT, timeout=120)
        assert p.returncode == -9, (k, p.stderr)
        r = run_kltool("verify", "--repair", "--backup-dir", bk, work)
        assert r.code == 0, (k, r.out, r.err)
        assert run_kltool("verify", work).code == 0, k
        assert _offsets(work) == before, k
        # completed or undone, the rerun plans the split afresh: the same segments as an uninterrupted run
        logs = {n_: b for n_, b in _tree(work).items() if n_.endswith((".log", ".index", ".timeindex"))}
        assert logs == {n_: b for n_, b in done.items() if n_.endswith((".log", ".index", ".timeindex"))}, k
        # restore the chain: the damaged files come back byte for byte
        manifests = sorted(bk.glob("*/manifest.json"), key=lambda m: json.loads(m.read_text())["created"])
        r = run_kltool("restore", manifests[-1])
        assert r.code == 0, (k, r.out, r.err)
        assert _tree(work) == damaged, k


def test_two_neighbouring_offset_fields_flipped_below_the_base_are_not_split(tmp_path):
    """Two neighbouring batches whose offset fields (not covered by the CRC) had the same bit flipped land on
    offsets an earlier segment holds, with other bytes: damage, not a second copy (the batch walk's case), so
    no split is planned."""
    import struct

    part = _segments(tmp_path, *SOURCES[0])
    log = _logs(part)[2]
    hs = _batches(log)
    with open(log, "r+b") as f:
        for h in hs[3:5]:
            f.seek(h.position)
            f.write(struct.pack(">q", h.base_offset ^ 512))
    assert [h.base_offset for h in _batches(log)[3:5]] == [hs[3].base_offset ^ 512, hs[4].base_offset ^ 512]
    result = repair(open_path(part), backup_dir=tmp_path / "bk", dry_run=True)
    assert not [a for a in result.plan.actions if a.op == "create"], [a.describe() for a in result.plan.actions]


@pytest.mark.parametrize("damage", ["collide", "overflow"])
@pytest.mark.parametrize("src,parts", [SOURCES[0], SOURCES[1], SOURCES[2]])
def test_verify_names_the_split_once_as_the_plan_makes_it(tmp_path, src, parts, damage):
    """verify says once per segment that --repair splits it (the new segments' names and offset runs, the
    batches held twice), the same pieces the plan writes; it used to report every batch below the base as
    offset_order."""
    part = _segments(tmp_path, src, parts)
    if damage == "collide":
        _collide(part, 2, 1)
    else:
        assert len(_batches(_logs(part)[1])) >= 6, "the source holds too few batches for this case"
        _overflowed(part, 3)
    found = _errors(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk", dry_run=True)
    created = [a for a in result.plan.actions if a.op == "create" and a.file.name.endswith(".log.cleaned")]
    (q,) = [a for a in result.plan.actions if a.op == "quarantine" and a.file.suffix == ".log"]
    assert [(f.kind, Path(f.file).name) for f in found] == [("segment_split", q.file.name)], found
    msg = found[0].message
    for a in created:
        assert f"{a.first_offset}..{a.last_offset} " in msg and f"-> {a.file.name[:-len('.cleaned')]}" in msg, msg
    assert msg.count(" -> ") == len(created), msg
    assert ("held twice" in msg) == ("held twice" in q.reason), (msg, q.reason)


def test_batches_whose_offset_reads_negative_are_not_split(tmp_path):
    """Two neighbouring batches whose offset fields had the sign bit flipped read below 0: damaged fields (no
    segment is named below 0), left to the batch walk; the split used to plan a segment named
    -9223372036854775808 (found by test_damage_pairs' many-times draw: v2-zstd-headers-0, batches 0 and 1,
    byte 0 bit 7)."""
    from .test_damage_pairs import _copy

    part = _copy(tmp_path, "java-oracle/v2-zstd-headers-0")
    log = _logs(part)[0]
    b = bytearray(log.read_bytes())
    for h in _batches(log)[:2]:
        b[h.position] ^= 0x80
    log.write_bytes(bytes(b))
    result = repair(open_path(part), backup_dir=tmp_path / "bk", dry_run=True)
    assert not [a for a in result.plan.actions if a.op == "create" or "-" in a.file.name.split(".")[0]], \
        [a.describe() for a in result.plan.actions]
    assert not [f for f in _errors(part) if f.kind == "segment_split"]


def _txn_runs(tmp_path: Path) -> tuple[Path, dict, set, int]:
    """v2-txn-0 (transactional batches, COMMIT and ABORT markers of three producers) as one segment whose
    two halves are written in the wrong order, named after the second half: the first half lies below the
    base. Returns (the partition, the .txnindex of each half as kltool's index rebuild makes it for the
    segments cut in order, the offsets, the cut offset)."""
    from kltool.storage.change.repair import repair as _repair

    good = tmp_path / "good" / "v2-txn-0"
    shutil.copytree(ROOT / "fixtures" / "java-oracle" / "v2-txn-0", good)
    (good / "expected.jsonl").unlink()
    for p in good.iterdir():
        p.chmod(0o644)
    (log,) = _logs(good)
    hs = _batches(log)
    data = log.read_bytes()
    mid = hs[len(hs) // 2]
    log.unlink()
    (good / fn.segment_file(0, "log")).write_bytes(data[:mid.position])
    (good / fn.segment_file(mid.base_offset, "log")).write_bytes(data[mid.position:])
    before = _offsets(good)
    _repair(open_path(good), backup_dir=tmp_path / "bkgood", force_index=True)
    want = {p.name: p.read_bytes() for p in good.iterdir() if p.suffix == ".txnindex"}
    part = tmp_path / "logs" / "v2-txn-0"
    part.mkdir(parents=True)
    (part / fn.segment_file(mid.base_offset, "log")).write_bytes(data[mid.position:] + data[:mid.position])
    return part, want, before, mid.base_offset


def test_a_segment_with_transaction_markers_is_split_with_its_txnindex(tmp_path, kafka_oracle):
    """Transactional and control batches below the base are carried by the split (they used to be cut, intact
    ones too); each new segment gets the .txnindex of its aborted transactions, as the index rebuild makes it
    for the same segments; the producer state is not touched; Kafka's reader accepts the new segments;
    restore brings the damaged files back byte for byte."""
    part, want, before, mid = _txn_runs(tmp_path)
    assert any(b"\x00" in v for v in want.values()), "the fixture aborts a transaction"
    damaged = _tree(part)
    found = _errors(part)
    assert [f.kind for f in found] == ["segment_split"], found
    assert "transaction marker" in found[0].message
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    plan = [a.describe() for a in result.plan.actions]
    assert _offsets(part) == before, plan
    assert sorted(p.name for p in _logs(part)) == [fn.segment_file(0, "log"), fn.segment_file(mid, "log")], plan
    got = {p.name: p.read_bytes() for p in part.iterdir() if p.suffix == ".txnindex"}
    assert got == want, plan
    assert not [p for p in part.iterdir() if p.suffix == ".snapshot"]
    assert not _errors(part), plan
    assert run_kltool("verify", part).code == 0
    code, _rows = kafka_oracle(_logs(part))
    assert code == 0
    restore(result.manifests[0])
    assert _tree(part) == damaged


def _runs_after_a_first_batch(part: Path) -> None:
    """A source whose second segment is too short to cut into runs of two (v2-compacted-0: 0..5, 10..14 |
    20..24, 30..37): the first batch alone in the first segment, the rest in one file named after its last
    batch, that batch in front (30..37, 10..14, 20..24: a run of two below the base)."""
    logs = _logs(part)
    hs = [(log, h) for log in logs for h in _batches(log)]
    body = [log.read_bytes()[h.position:h.end] for log, h in hs]
    for log in logs:
        log.unlink()
    (part / fn.segment_file(hs[0][1].base_offset, "log")).write_bytes(body[0])
    (part / fn.segment_file(hs[-1][1].base_offset, "log")).write_bytes(b"".join([body[-1], *body[1:-1]]))


# v2-none-0 is left out: 7 batches in 3 segments leave too few to cut into runs
@pytest.mark.parametrize("src,parts", [s for s in SOURCES if s[0] != "java-oracle/v2-none-0"])
def test_a_damage_cut_before_a_split_segment_names_only_its_own_offsets(tmp_path, src, parts):
    """The last batch of the segment before a split one is zeroed (a zero run: its offsets are not in the
    bytes, the next kept batch bounds them): the cut names that batch's offsets only (up to the split
    segment's lowest batch: a compacted log's gap after it too), bounded by the split segment's lowest batch
    (it used to run on to the segment after the split, or stay open: v0 and v1, whose batches never closed a
    cut, and the compacted source)."""
    part = _segments(tmp_path, src, parts)
    if len(_batches(_logs(part)[1])) >= 4:
        _overflowed(part, 2)
    else:
        _runs_after_a_first_batch(part)
    prev, split = _logs(part)[0], _logs(part)[1]
    z = _batches(prev)[-1]
    lo = min(h.base_offset for h in _batches(split))
    assert z.last_offset < lo < _base(split)
    with open(prev, "r+b") as f:
        f.seek(z.position)
        f.write(b"\0" * z.size)
    result = repair(open_path(part), backup_dir=tmp_path / "bk", dry_run=True)
    assert [a.op for a in result.plan.actions].count("create") >= 2, [a.describe() for a in result.plan.actions]
    (cut,) = [a for a in result.plan.actions if a.op in ("truncate", "excise")]
    assert [(c.first_offset, c.last_offset) for c in cut.ranges] == [(z.base_offset, lo - 1)], cut.describe()
    assert f"offsets {z.base_offset}..{lo - 1} lost" in cut.describe(), cut.describe()
    if src != "java-oracle/v2-compacted-0":
        assert lo - 1 == z.last_offset


@pytest.mark.parametrize("magic", [0, 1])
def test_compressed_v0_v1_wrappers_below_the_base_are_split(tmp_path, magic, kafka_oracle):
    """Compressed v0/v1 wrappers (each one message whose offset is its last inner offset) below the base are
    split like v2 batches, each new segment named after its first wrapper's first inner offset (the broker's
    baseOffset() of a legacy batch); they used to be cut."""
    from kltool.format.compression import GZIP

    part = tmp_path / "logs" / f"v{magic}-gzip-0"
    part.mkdir(parents=True)
    wrappers = [build_batch([(k, 1_700_000_000_000 + 3 * w + k, f"k{3 * w + k}".encode(), b"v" * 40, [])
                             for k in range(3)], base_offset=3 * w, magic=magic, compression=GZIP)
                for w in range(12)]
    for a in (0, 4, 8):
        (part / fn.segment_file(3 * a, "log")).write_bytes(b"".join(wrappers[a:a + 4]))
    original = {p.name: p.read_bytes() for p in _logs(part)}
    before = _offsets(part)
    (part / fn.segment_file(12, "log")).unlink()
    (part / fn.segment_file(18, "log")).write_bytes(b"".join(wrappers[6:8] + wrappers[4:6]))
    damaged = _tree(part)
    found = _errors(part)
    assert [f.kind for f in found] == ["segment_split"], found
    assert f"12..17 (2 batches) -> {fn.segment_file(12, 'log')}" in found[0].message, found[0].message
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    plan = [a.describe() for a in result.plan.actions]
    assert _offsets(part) == before, plan
    assert {p.name: p.read_bytes() for p in _logs(part)} == {**original, fn.segment_file(18, "log"):
                                                             b"".join(wrappers[6:8])} | {
        fn.segment_file(12, "log"): b"".join(wrappers[4:6])}, plan
    assert not _errors(part), plan
    code, _rows = kafka_oracle(_logs(part))
    assert code == 0
    restore(result.manifests[0])
    assert _tree(part) == damaged


@pytest.mark.parametrize("magic", [0, 1])
def test_a_damage_cut_before_split_compressed_wrappers_closes_at_the_first_inner_offset(tmp_path, magic):
    """A zeroed wrapper (offsets 9..11) before a segment of compressed v0/v1 wrappers that is split: the cut is
    bounded by the split's first wrapper's first inner offset (12, not in its header, which holds 14); it
    stayed open ("offsets 9..? lost")."""
    from kltool.format.compression import GZIP

    part = tmp_path / "logs" / f"v{magic}-gzip-0"
    part.mkdir(parents=True)
    wrappers = [build_batch([(k, 1_700_000_000_000 + 3 * w + k, f"k{3 * w + k}".encode(), b"v" * 40, [])
                             for k in range(3)], base_offset=3 * w, magic=magic, compression=GZIP)
                for w in range(12)]
    (part / fn.segment_file(0, "log")).write_bytes(b"".join(wrappers[:3]) + b"\0" * len(wrappers[3]))
    (part / fn.segment_file(18, "log")).write_bytes(b"".join(wrappers[6:8] + wrappers[4:6]))
    (part / fn.segment_file(24, "log")).write_bytes(b"".join(wrappers[8:]))
    result = repair(open_path(part), backup_dir=tmp_path / "bk", dry_run=True)
    assert [a.op for a in result.plan.actions].count("create") >= 2, [a.describe() for a in result.plan.actions]
    (cut,) = [a for a in result.plan.actions if a.op in ("truncate", "excise")]
    assert [(c.first_offset, c.last_offset) for c in cut.ranges] == [(9, 11)], cut.describe()
