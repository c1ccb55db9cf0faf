"""The apply engine (storage/change/apply.py): what every writing command goes through. Each action's
removed bytes are in the backup and the manifest before anything changes; a re-run finds actions done and
leaves them; a file that changed since planning is refused; the backup never lands inside what it changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kltool.errors import UnsafeOperation, UsageError
from kltool.storage.change.apply import MANIFEST_NAME, apply_changes, default_backup_root
from kltool.storage.change.plan import Action, ChangeSet, Cut
from kltool.storage.change.restore import restore

from .test_repair import tree

LOG = "00000000000000000000.log"


@pytest.fixture
def ld(copy_fixture):
    part = copy_fixture("java-oracle/v2-multi-segment-0", name="logs/t-0")
    (part.parent / "meta.properties").write_text("version=1\ncluster.id=x\nnode.id=1\n")
    return part.parent


def _actions(part: Path) -> list[Action]:
    logs = sorted(part.glob("*.log"))
    first, last = logs[0], logs[-1]
    size = last.stat().st_size
    return [
        Action("truncate", last, "test: cut the tail", old_size=size, new_size=size - 10,
               ranges=[Cut(size - 10, size, "test", "tail")]),
        Action("quarantine", logs[1], "test: move aside", old_size=logs[1].stat().st_size),
        Action("write_checkpoint", part / "leader-epoch-checkpoint", "test: write", data=b"0\n1\n0 0\n"),
        Action("fix_field", first, "test: one byte", position=20, old_byte=first.read_bytes()[20],
               new_byte=first.read_bytes()[20] ^ 1),
    ]


def test_apply_backs_up_then_restore_gives_every_byte_back(ld):
    before = tree(ld)
    (m,) = apply_changes([ChangeSet(ld, _actions(ld / "t-0"))], "repair")
    assert m.parent.parent == default_backup_root(ld)
    doc = json.loads(m.read_text())
    assert doc["status"] == "complete" and [e["op"] for e in doc["actions"]] == \
        ["truncate", "quarantine", "write_checkpoint", "fix_field"]
    assert tree(ld) != before
    steps = restore(m)
    assert len(steps) == 4 and tree(ld) == before


def test_a_rerun_finds_each_action_done(ld):
    acts = _actions(ld / "t-0")
    apply_changes([ChangeSet(ld, acts)], "repair")
    after = tree(ld)
    (m2,) = apply_changes([ChangeSet(ld, _actions_again(acts))], "repair")
    assert tree(ld) == after
    assert json.loads(m2.read_text())["status"] == "complete"


def _actions_again(acts: list[Action]) -> list[Action]:
    out = []
    for a in acts:
        b = Action(a.op, a.file, a.reason, old_size=a.old_size, new_size=a.new_size, ranges=a.ranges,
                   data=a.data, position=a.position, old_byte=a.old_byte, new_byte=a.new_byte)
        if a.op == "quarantine":  # already moved: nothing left to move
            continue
        if a.op == "truncate":  # planned again on the truncated file: finds the new size
            b.old_size = b.new_size
            b.ranges = [Cut(a.new_size, a.new_size, "test", "nothing")]
        out.append(b)
    return out


def test_a_file_changed_since_planning_is_refused_and_the_run_stays_open(ld):
    acts = _actions(ld / "t-0")
    acts[0].old_size += 1  # the plan expected another size
    with pytest.raises(UnsafeOperation, match="changed since planning"):
        apply_changes([ChangeSet(ld, acts)], "repair")
    (m,) = default_backup_root(ld).glob(f"*/{MANIFEST_NAME}")
    assert json.loads(m.read_text())["status"] == "applying"
    (m2,) = apply_changes([ChangeSet(ld, _actions(ld / "t-0")[1:])], "repair")
    assert json.loads(m2.read_text())["follows"] == [str(m)]


@pytest.mark.parametrize("where", ["log dir", "partition dir"])
def test_the_backup_is_never_inside_what_it_changes(ld, where):
    inside = ld / "bk" if where == "log dir" else ld / "t-0" / "bk"
    with pytest.raises(UsageError, match="inside the"):
        apply_changes([ChangeSet(ld, _actions(ld / "t-0"), protect=[ld / "t-0"])], "repair", inside)
    assert not inside.exists()


# ------------------------------------------------------------------- the .lock, killed at every step


def _lock_cases(copy_fixture, tmp: Path):
    from .test_retention_build import T0, H, build_partition

    def repair_tree(d: Path) -> Path:
        from .test_repair_faults import build

        return build(copy_fixture, d)

    def retention_tree(d: Path) -> Path:
        ld = d / "logs"
        build_partition(ld, "t", [[[T0]], [[T0 + H]], [[T0 + 2 * H]], [[T0 + 3 * H]]])
        (ld / "meta.properties").write_text("version=1\ncluster.id=x\nnode.id=1\n")
        return ld

    return {"repair": (repair_tree, ["verify", "--repair"]),
            "retention": (retention_tree, ["retention", "--retention-ms", "1", "--now", str(T0 + 10 * H)])}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["repair", "retention"])
@pytest.mark.parametrize("lock_before", [False, True], ids=["no-lock", "broker-lock"])
def test_killed_at_every_step_leaves_the_lock_as_it_was(copy_fixture, tmp_path, command, lock_before):
    """A run killed with SIGKILL at any durable step, then run again, then restored: the log dir's .lock is
    there at the end exactly when it was there before (kltool's own is removed, the broker's stays)."""
    _killed_runs(copy_fixture, tmp_path, command, lock_before, every=True)


def test_killed_early_and_late_leaves_no_lock(copy_fixture, tmp_path):
    _killed_runs(copy_fixture, tmp_path, "repair", False, every=False)


def _killed_runs(copy_fixture, tmp_path, command, lock_before, *, every):
    import os as _os
    import signal

    from .conftest import run_kltool
    from .test_repair import manifests
    from .test_repair_faults import count_steps, run_until, sample

    make, argv = _lock_cases(copy_fixture, tmp_path)[command]

    def fresh(d: Path) -> Path:
        root = make(d)
        if lock_before:
            (root / ".lock").write_bytes(b"")
        return root

    ref = fresh(tmp_path / "ref")
    n = count_steps([*argv, "--backup-dir", tmp_path / "ref" / "bk", ref])
    assert (ref / ".lock").exists() == lock_before
    for k in sorted({1, 2, 3, 4, *sample(n, 10)}) if every else (1, n // 2, n):
        d = tmp_path / f"k{k}"
        root = fresh(d)
        original = tree(root)
        args = [*argv, "--backup-dir", d / "bk", root]
        status = run_until(k, args)
        assert _os.WIFSIGNALED(status) and _os.WTERMSIG(status) == signal.SIGKILL, (k, status)
        again = run_kltool(*args)
        assert again.code == 0, (k, again)
        assert (root / ".lock").exists() == lock_before, f"killed at step {k} of {n}: .lock after the re-run"
        ms = manifests(d / "bk")
        rs = run_kltool("restore", *ms)
        assert rs.code == 0, (k, rs)
        assert tree(root) == original, k
        assert (root / ".lock").exists() == lock_before, f"killed at step {k} of {n}: .lock after restore"
        if lock_before:
            assert (root / ".lock").read_bytes() == b""
