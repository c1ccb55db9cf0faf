"""kltool restore treats a manifest as input: every path stays inside the log dir the backup was made
for or inside its own run directory, the whole manifest is validated before anything changes, the tree
ends byte-identical to before the repair (no .lock left behind), and a backup directory of many runs is
undone in one command."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from .test_repair import manifests


def full_tree(root):
    """Every file and directory under ``root``, ``.lock`` included: relative path → bytes (None for a dir)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = None if p.is_dir() else p.read_bytes()
    return out


@pytest.fixture
def repaired(kl, copy_fixture, tmp_path):
    """A log dir with a damaged partition (no .lock: the broker is not there), repaired into tmp/bk."""
    part = copy_fixture("java-oracle/damaged-v2-crc-0", name="logs/p-0")
    root = part.parent
    (root / "meta.properties").write_text("version=0\nbroker.id=0\n")
    before = full_tree(root)
    r = kl("--json", "verify", "--repair", "--backup-dir", tmp_path / "bk", root)
    assert r.code == 0, r
    (m,) = manifests(tmp_path / "bk")
    assert full_tree(root) != before
    return root, before, m


def test_restore_leaves_the_tree_byte_identical_lock_included(kl, repaired):
    root, before, m = repaired
    assert not (root / ".lock").exists()  # the lock repair created is gone again
    r = kl("restore", m)
    assert r.code == 0, r
    assert full_tree(root) == before


def test_an_existing_lock_file_stays(kl, copy_fixture, tmp_path):
    part = copy_fixture("java-oracle/damaged-v2-crc-0", name="logs/p-0")
    (part.parent / ".lock").write_bytes(b"")
    before = full_tree(part.parent)
    assert kl("verify", "--repair", "--backup-dir", tmp_path / "bk", part.parent).code == 0
    (m,) = manifests(tmp_path / "bk")
    assert kl("restore", m).code == 0
    assert full_tree(part.parent) == before


def _edit(m, fn):
    doc = json.loads(m.read_text())
    fn(doc)
    m.write_text(json.dumps(doc))


def _first(doc, op):
    return next(a for a in doc["actions"] if a["op"] == op)


HOSTILE = {
    "absolute file outside": (lambda d, v: _first(d, "excise").__setitem__("file", str(v)), "actions[1].file"),
    "rename target outside": (lambda d, v: d["actions"].append({"op": "rename", "file": d["actions"][0]["file"],
                                                                "target": str(v)}), "target"),
    "dotdot in a backup": (lambda d, v: _first(d, "excise")["cuts"][0].__setitem__("backup", "../../victim"),
                           "cuts[0].backup"),
    "absolute backup": (lambda d, v: _first(d, "excise")["cuts"][0].__setitem__("backup", str(v)), "cuts[0].backup"),
    "log dir is /": (lambda d, v: d.__setitem__("log_dir", "/"), "log_dir"),
    "log dir elsewhere": (lambda d, v: d.__setitem__("log_dir", str(v.parent)), "log_dir"),
    "follows elsewhere": (lambda d, v: d.__setitem__("follows", [str(v.parent / "other" / "run" / "manifest.json")]),
                          "follows[0]"),
    "unknown op": (lambda d, v: d["actions"].append({"op": "chmod", "file": d["actions"][0]["file"]}), "op"),
    "position not a number": (lambda d, v: d["actions"].append({"op": "fix_magic", "file": _first(d, "excise")["file"],
                                                                "position": "16", "old_byte": 7, "new_byte": 2}),
                              "position"),
    "negative size": (lambda d, v: _first(d, "excise").__setitem__("old_size", -1), "old_size"),
    "ranges that do not add up": (lambda d, v: _first(d, "excise")["cuts"][0].__setitem__("end", 10**9), "cuts"),
    "actions not a list": (lambda d, v: d.__setitem__("actions", {"0": 1}), "actions"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_manifests_are_refused_before_anything_changes(kl, repaired, tmp_path, case):
    root, _before, m = repaired
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_bytes(b"not kltool's to touch")
    (victim.parent / "other" / "run").mkdir(parents=True)
    fn, entry = HOSTILE[case]
    _edit(m, lambda d: fn(d, victim))
    after_repair = full_tree(root)
    backup = full_tree(m.parent)
    r = kl("restore", m)
    assert r.code == 2, r
    assert "refusing to restore" in r.err and entry in r.err and r.err.count("\n") <= 1
    assert full_tree(root) == after_repair
    assert full_tree(m.parent) == backup
    assert victim.read_bytes() == b"not kltool's to touch"


def test_a_symlink_out_of_the_log_dir_is_refused(kl, repaired, tmp_path):
    root, _before, m = repaired
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "00000000000000000000.log").write_bytes(b"x" * 2000)
    os.symlink(outside, root / "evil-0")
    _edit(m, lambda d: _first(d, "excise").__setitem__("file", str(root / "evil-0" / "00000000000000000000.log")))
    r = kl("restore", m)
    assert r.code == 2 and "outside the log dir" in r.err
    assert (outside / "00000000000000000000.log").read_bytes() == b"x" * 2000


def test_a_symlinked_backup_escaping_the_run_is_refused(kl, repaired, tmp_path):
    root, _before, m = repaired
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", m.parent / "files" / "escape")
    _edit(m, lambda d: _first(d, "excise")["cuts"][0].__setitem__("backup", "files/escape/x"))
    r = kl("restore", m)
    assert r.code == 2 and "outside the backup run" in r.err


def _damaged_tree(copy_fixture, tmp_path, n):
    """A tree of ``n`` log dirs, each with one damaged partition."""
    for i in range(n):
        part = copy_fixture("java-oracle/damaged-v2-crc-0", name=f"tree/ld{i}/p-{i}")
        (part.parent / "meta.properties").write_text(f"version=0\nbroker.id={i}\n")
    return tmp_path / "tree"


def test_a_backup_directory_undoes_every_run_in_one_command(kl, copy_fixture, tmp_path):
    tree = _damaged_tree(copy_fixture, tmp_path, 12)
    before = full_tree(tree)
    assert kl("verify", "--repair", "--backup-dir", tmp_path / "bk", tree).code == 0
    assert len(manifests(tmp_path / "bk")) == 12
    assert kl("verify", tree).code == 0
    d = kl("restore", "--dry-run", tmp_path / "bk")
    assert d.code == 1
    r = kl("restore", tmp_path / "bk")
    assert r.code == 0, r
    assert full_tree(tree) == before
    assert kl("restore", "--dry-run", tmp_path / "bk").code == 0  # nothing left to undo


def test_several_manifests_in_one_command(kl, copy_fixture, tmp_path):
    tree = _damaged_tree(copy_fixture, tmp_path, 3)
    before = full_tree(tree)
    assert kl("verify", "--repair", "--backup-dir", tmp_path / "bk", tree).code == 0
    ms = manifests(tmp_path / "bk")
    r = kl("restore", *ms)
    assert r.code == 0, r
    assert full_tree(tree) == before


def test_one_hostile_manifest_among_many_changes_nothing(kl, copy_fixture, tmp_path):
    tree = _damaged_tree(copy_fixture, tmp_path, 3)
    assert kl("verify", "--repair", "--backup-dir", tmp_path / "bk", tree).code == 0
    ms = manifests(tmp_path / "bk")
    after = full_tree(tree)
    _edit(ms[-1], lambda d: d.__setitem__("log_dir", "/"))
    r = kl("restore", tmp_path / "bk")
    assert r.code == 2
    assert full_tree(tree) == after


def test_an_empty_backup_directory_is_an_error(kl, tmp_path):
    (tmp_path / "bk").mkdir()
    r = kl("restore", tmp_path / "bk")
    assert r.code == 2 and "no backup runs" in r.err


def test_library_restore_takes_several_paths(copy_fixture, tmp_path, kl):
    from kltool.storage.change.restore import restore

    tree = _damaged_tree(copy_fixture, tmp_path, 2)
    before = full_tree(tree)
    assert kl("verify", "--repair", "--backup-dir", tmp_path / "bk", tree).code == 0
    steps = restore([str(m.parent) for m in manifests(tmp_path / "bk")])
    assert steps and all(s.done for s in steps)
    assert full_tree(tree) == before
    shutil.rmtree(tmp_path / "bk")
