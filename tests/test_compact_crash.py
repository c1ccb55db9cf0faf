"""kill -9 at every step of a compaction's swap, then ``kltool verify --repair`` (which does what the broker's
LogLoader does at start-up): each group ends either complete or undone, never half of each."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

from .compact_data import T0, Log, read_records
from .conftest import ROOT, run_kltool

KILLER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from kltool.storage.logdir import open_paths
    from kltool.storage.change import compact as cp
    from kltool.storage.change.apply import LogDirLocks
    root, k, mode, now = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    seen = [0]
    def step(a):
        seen[0] += 1
        if seen[0] == k:
            os.kill(os.getpid(), signal.SIGKILL)
    with LogDirLocks([Path(root)], dry_run=False):
        plan = cp.plan_compaction(open_paths([root]), cp.Policy(now=now, config={"segment.bytes": sys.argv[5]}),
                                  dry_run=False)
        if k == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # the .cleaned files are written, nothing swapped yet
        cp.apply_compaction(plan, backup=mode == "backup", on_action=step)
    print(len(plan.actions))
""")


def _source(tmp_path):
    log = Log(tmp_path / "src", {"segment.bytes": "1200", "delete.retention.ms": "1000"})
    for i in range(90):
        log.data([(b"k%d" % (i % 7), b"v%d" % i)])
        if i == 20:
            log.data([(b"k3", None)])
        if i == 40:
            log.data([(b"t", b"aborted")], pid=5, txn=True)
            log.marker(5, commit=False)
    return log.close()


def _table(records):
    """A read_committed consumer's table (the one aborted record left out, tombstones delete)."""
    t = {}
    for x in records:
        if x[1] == "marker" or x[2] == b"aborted":
            continue
        if x[2] is None:
            t.pop(x[1], None)
        else:
            t[x[1]] = x[2]
    return t


def _run(root, k, mode, seg_bytes):
    p = subprocess.run([sys.executable, "-c", KILLER, str(root), str(k), mode, str(T0 + 10), seg_bytes],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    return p


def _groups(root, seg_bytes):
    from kltool.storage.change import compact as cp
    from kltool.storage.logdir import open_paths

    plan = cp.plan_compaction(open_paths([str(root)]), cp.Policy(now=T0 + 10, config={"segment.bytes": seg_bytes}))
    pc = plan.partitions[0]
    bounds = [g.base_offset for g in pc.groups] + [pc.end_offset]
    return list(zip(bounds, bounds[1:], strict=False)), len(plan.actions)


def _check(tmp_path, mode, seg_bytes, points):
    src = _source(tmp_path)
    before = read_records(src / "t-0", controls=True)
    ranges, n_actions = _groups(src, seg_bytes)
    done = tmp_path / "done"
    shutil.copytree(src, done)
    assert _run(done, 10**6, mode, seg_bytes).returncode == 0
    after = read_records(done / "t-0", controls=True)
    assert after != before
    for k in points(n_actions):
        work = tmp_path / f"k{k}"
        shutil.copytree(src, work)
        p = _run(work, k, mode, seg_bytes)
        assert p.returncode == -9, (k, p.stderr)
        r = run_kltool("verify", "--repair", work)
        assert r.code == 0, (k, r.out, r.err)
        assert run_kltool("verify", work).code == 0
        got = read_records(work / "t-0", controls=True)
        for lo, hi in ranges:  # every group: all of the clean or none of it
            part = [x for x in got if lo <= x[0] < hi]
            old, new = [x for x in before if lo <= x[0] < hi], [x for x in after if lo <= x[0] < hi]
            # all of the clean or none of it; but a group whose cleaned segment ends before its last source
            # segment starts (its tail all removed, or all of it) is completed by LogLoader (and repair) over
            # offsets [base, readNextOffset) only, so the later source segments stay (Kafka's own behaviour):
            # then the group holds the whole clean plus old records after it, and the next pass ends it
            assert part == old or (all(x in part for x in new) and all(x in old for x in part)
                                   and part == sorted(part)), (k, lo)
        assert _table(got) == _table(before), k
        assert [x for x in got if x[0] >= ranges[-1][1]] == [x for x in before if x[0] >= ranges[-1][1]]
        assert not [q for q in (work / "t-0").iterdir() if q.name.endswith((".cleaned", ".swap", ".deleted"))]
        # and compacting again reaches the full result
        assert run_kltool("compact", work, "--no-backup", "--now", T0 + 10, "--config",
                          f"segment.bytes={seg_bytes}").code == 0
        assert read_records(work / "t-0", controls=True) == after, k


@pytest.mark.parametrize("mode", ["broker", "backup"])
def test_kill_at_a_few_steps_then_repair(tmp_path, mode):
    _check(tmp_path, mode, "1000000", lambda n: [0, 2, n // 2 + 1, n - 1])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["broker", "backup"])
@pytest.mark.parametrize("seg_bytes", ["1000000", "3000"])
def test_kill_at_every_step_then_repair(tmp_path, mode, seg_bytes):
    _check(tmp_path, mode, seg_bytes, lambda n: range(0, n + 1))
