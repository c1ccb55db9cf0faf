"""Confinement (storage/confine.py and the apply engine): a partition dir or a file that resolves outside the
log dir (``logdir/evil-0 -> /elsewhere``) is reported by verify and never written, moved or deleted by
repair, rebuild-index or retention; a default backup dir that is a symlink is refused."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kltool.errors import UnsafeOperation
from kltool.storage.change.apply import apply_changes
from kltool.storage.change.plan import Action, ChangeSet

from .conftest import FIXTURES, run_kltool

SEG0 = "00000000000000000000.log"
TARGETS = ["java-oracle/damaged-v2-crc-0", "java-oracle/v2-multi-segment-0", "java-oracle/damaged-v2-zero-tail-0"]
# what each command may do to an ordinary partition: repair and rebuild indexes, delete old segments
COMMANDS = {
    "repair": ["verify", "--repair"],
    "repair-like-broker": ["verify", "--repair", "--like-broker"],
    "rebuild-index": ["rebuild-index", "--force"],
    "retention": ["retention", "--retention-ms", "1"],
    "retention-no-backup": ["retention", "--retention-ms", "1", "--no-backup"],
}


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (files with their bytes, directories as None), without following links."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames:
            out[os.path.relpath(os.path.join(dirpath, n), root)] = None
        for n in filenames:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


def build(tmp: Path, target: str, style: str) -> tuple[Path, Path]:
    """A log dir ``ld`` with an ordinary partition ``good-0`` and, per ``style``, a way out to ``elsewhere``:
    a symlinked partition dir (absolute or relative), or a symlinked segment or checkpoint inside good-0."""
    ld, elsewhere = tmp / "ld", tmp / "elsewhere"
    shutil.copytree(FIXTURES / "java-oracle/damaged-v2-crc-0", ld / "good-0")
    shutil.copytree(FIXTURES / target, elsewhere / "part")
    (elsewhere / "part" / "expected.jsonl").unlink()
    (elsewhere / "part" / "00000000000000000000.log.deleted").write_bytes(b"d" * 100)
    (elsewhere / "part" / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (ld / "good-0" / "expected.jsonl").unlink()
    (ld / "meta.properties").write_text("version=1\ncluster.id=x\nnode.id=1\n")
    if style == "dir":
        os.symlink(elsewhere / "part", ld / "evil-0")
    elif style == "dir-relative":
        os.symlink(os.path.relpath(elsewhere / "part", ld), ld / "evil-0")
    elif style == "segment":
        os.symlink(elsewhere / "part" / SEG0, ld / "good-0" / "00000000000000099999.log")
    elif style == "checkpoint":
        os.symlink(elsewhere / "part" / "leader-epoch-checkpoint", ld / "good-0" / "leader-epoch-checkpoint")
    return ld, elsewhere


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(target=st.sampled_from(TARGETS), style=st.sampled_from(["dir", "dir-relative", "segment", "checkpoint"]),
       commands=st.lists(st.sampled_from(sorted(COMMANDS)), min_size=1, max_size=3))
def test_nothing_outside_the_log_dir_is_written_moved_or_deleted(target, style, commands):
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        ld, elsewhere = build(tmp, target, style)
        before = snapshot(elsewhere)
        r = run_kltool("--json", "verify", ld)
        out = [o for o in r.json() if o["type"] == "finding" and o["kind"] == "outside_log_dir"]
        assert len(out) == 1 and "outside the log dir" in out[0]["message"], r.json()
        for name in commands:
            r = run_kltool(*COMMANDS[name], ld)
            assert r.code in (0, 1), (name, r)
            assert snapshot(elsewhere) == before, (name, style)
            if name.startswith("repair"):  # the ordinary partition beside it is repaired
                assert run_kltool("verify", ld / "good-0").code == 0 or style in ("segment", "checkpoint")
                # and what verify still finds damaged, the repair did not call done (the stop-18 adversary)
                assert run_kltool("verify", ld).code == 0 or r.code == 1, (name, style, r)
        backups = tmp / "ld.kltool-backup"
        moved = [p for p in backups.rglob("*") if p.is_file() and "evil-0" in str(p)] if backups.exists() else []
        assert not moved


def test_repair_reports_the_symlinked_partition_and_repairs_the_rest(kl, tmp_path):
    # Changed on purpose (the stop-18 adversary): the damaged partition behind the link is not repaired, so the
    # repair says so in one not_repairable line and exits 1, as verify does; it used to exit 0 with a warning.
    ld, elsewhere = build(tmp_path, "java-oracle/damaged-v2-crc-0", "dir")
    before = snapshot(elsewhere)
    for args in (["verify", "--repair", "--dry-run"], ["verify", "--repair"], ["verify", "--repair"]):
        r = kl(*args, ld)
        assert r.code == 1, (args, r)
        lines = [x for x in r.out.splitlines() if "not_repairable" in x]
        assert len(lines) == 1 and f"{ld / 'evil-0'}: resolves to {elsewhere / 'part'}" in lines[0], r
        assert "outside the log dir" in lines[0] and "not repaired" in lines[0], r
        assert "1 problem(s) not repairable" in r.out or "action(s)" in r.out, r
        assert snapshot(elsewhere) == before
    assert kl("verify", ld / "good-0").code == 0  # the rest of the log dir is repaired
    assert kl("verify", ld).code == 1


@pytest.mark.parametrize("style", ["segment", "checkpoint", "dir-relative"])
def test_repair_says_what_it_leaves_alone_and_exits_1(kl, tmp_path, style):
    """The stop-18 adversary: verify reports damage, repair said "nothing to do" and exit 0. Each path that
    leads out of the log dir of a damaged partition is one not_repairable line; the exit code is 1 (JSON too)."""
    ld, elsewhere = build(tmp_path, "java-oracle/damaged-v2-zero-tail-0", style)
    before = snapshot(elsewhere)
    assert kl("verify", ld).code == 1
    r = kl("--json", "verify", "--repair", ld)
    assert r.code == 1, r
    bad = [o for o in r.json() if o.get("kind") == "not_repairable"]
    linked = {"segment": ld / "good-0" / "00000000000000099999.log", "checkpoint": ld / "good-0" /
              "leader-epoch-checkpoint", "dir-relative": ld / "evil-0"}[style]
    assert [(o["severity"], o["file"]) for o in bad] == [("error", str(linked))], r.json()
    assert r.json()[-1]["errors"] == 1
    assert snapshot(elsewhere) == before
    assert kl("verify", "--repair", ld).code == 1  # again: still not done, still said


def test_repair_leaves_a_clean_linked_partition_alone_with_a_warning(kl, tmp_path):
    """A link out of the log dir to an undamaged partition: verify exits 0, and so does repair (a warning)."""
    ld, elsewhere = build(tmp_path, "java-oracle/v2-multi-segment-0", "dir")
    assert kl("verify", "--repair", ld / "good-0").code == 0
    assert kl("verify", ld).code == 0
    r = kl("verify", "--repair", ld)
    assert r.code == 0 and "outside_log_dir" in r.out and "not_repairable" not in r.out, r


def test_a_symlinked_default_backup_dir_is_refused(kl, tmp_path):
    ld, elsewhere = build(tmp_path, "java-oracle/damaged-v2-crc-0", "none")
    (tmp_path / "trap").mkdir()
    os.symlink(tmp_path / "trap", tmp_path / "ld.kltool-backup")
    before = snapshot(ld)
    for args in (["verify", "--repair"], ["retention", "--retention-ms", "1"]):
        r = kl(*args, ld)
        assert r.code == 3 and "is a symlink" in r.err and r.err.count("\n") == 1, (args, r)
        assert snapshot(ld) == before and not any((tmp_path / "trap").iterdir()), args
    r = kl("verify", "--repair", "--backup-dir", tmp_path / "bk", ld)  # one chosen by hand is used
    assert r.code == 0, r


def test_the_apply_engine_refuses_a_path_out_of_the_log_dir(tmp_path):
    ld, elsewhere = build(tmp_path, "java-oracle/v2-multi-segment-0", "dir")
    before, inside = snapshot(elsewhere), snapshot(ld / "good-0")
    acts = [Action("quarantine", ld / "good-0" / SEG0, "fine"),
            Action("quarantine", ld / "evil-0" / SEG0, "through the link")]
    with pytest.raises(UnsafeOperation, match="outside the log dir"):
        apply_changes([ChangeSet(ld, acts)], "repair")
    assert snapshot(elsewhere) == before and snapshot(ld / "good-0") == inside  # nothing at all changed
    assert not (tmp_path / "ld.kltool-backup").exists()


@pytest.mark.parametrize("backup", [True, False], ids=["backup", "no-backup"])
def test_retention_never_writes_a_checkpoint_through_a_symlink(kl, tmp_path, backup):
    ld, elsewhere = build(tmp_path, "java-oracle/v2-multi-segment-0", "none")
    (elsewhere / "cp").write_text("0\n0\n")
    os.symlink(elsewhere / "cp", ld / "log-start-offset-checkpoint")
    before, inside = snapshot(elsewhere), snapshot(ld)
    dry = kl("--json", "retention", "--retention-ms", "1", "--dry-run", ld)
    assert [f["file"] for f in dry.json() if f.get("kind") == "outside_log_dir"] == \
        [str(ld / "log-start-offset-checkpoint")]
    assert [f["file"] for f in kl("--json", "verify", ld).json() if f.get("kind") == "outside_log_dir"] == \
        [str(ld / "log-start-offset-checkpoint")]
    r = kl("retention", "--retention-ms", "1", *([] if backup else ["--no-backup"]), ld)
    assert r.code == 3 and "outside the log dir" in r.err, r
    assert snapshot(elsewhere) == before and snapshot(ld) == inside
