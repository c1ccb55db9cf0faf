"""kltool restore: undo a repair from its manifest; refuse when files changed since; one-line errors."""

from __future__ import annotations

import json
import shutil

from .conftest import REAL
from .test_repair import manifests, tree


def _repaired(kl, copy_fixture, tmp_path, rel="java-oracle/damaged-v2-crc-0"):
    part = copy_fixture(rel, name="logs/p-0")
    root = part.parent
    before = tree(root)
    r = kl("--json", "verify", "--repair", "--backup-dir", tmp_path / "bk", root)
    assert r.code == 0, r
    (m,) = manifests(tmp_path / "bk")
    return root, part, before, m


def test_dry_run_then_restore(kl, copy_fixture, tmp_path):
    root, part, before, m = _repaired(kl, copy_fixture, tmp_path)
    after = tree(root)
    d = kl("--json", "restore", "--dry-run", m)
    assert d.code == 1
    steps = [o for o in d.json() if o["type"] == "action"]
    assert [s["op"] for s in steps] == ["delete", "rewrite", "delete"]
    assert tree(root) == after
    r = kl("restore", m)
    assert r.code == 0 and "3 step(s) done" in r.out
    assert tree(root) == before
    assert json.loads(m.read_text())["status"] == "restored"
    assert kl("restore", "--dry-run", m).code == 0


def test_refuses_when_a_file_changed_since(kl, copy_fixture, tmp_path):
    root, part, before, m = _repaired(kl, copy_fixture, tmp_path)
    log = part / "00000000000000000000.log"
    with open(log, "ab") as f:
        f.write(b"appended by a broker after the repair")
    r = kl("restore", m)
    assert r.code == 3 and "not restored" in r.err and r.err.count("\n") <= 2


def test_refuses_a_tampered_backup(kl, copy_fixture, tmp_path):
    root, part, before, m = _repaired(kl, copy_fixture, tmp_path)
    (cut,) = [a for a in json.loads(m.read_text())["actions"] if a["op"] == "excise"][0]["cuts"]
    b = m.parent / cut["backup"]
    b.write_bytes(bytes(len(b.read_bytes())))
    r = kl("restore", m)
    assert r.code == 3 and "sha256" in r.err


def test_bad_manifests_are_one_line_errors(kl, tmp_path):
    r = kl("restore", tmp_path / "nope.json")
    assert r.code == 2 and "no such manifest" in r.err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = kl("restore", bad)
    assert r.code == 2 and "manifest" in r.err and "Traceback" not in r.err
    other = tmp_path / "other.json"
    other.write_text('{"type": "something"}')
    r = kl("restore", other)
    assert r.code == 2 and "not a kltool backup manifest" in r.err


def test_restore_from_another_directory_with_relative_paths(kl, copy_fixture, tmp_path, monkeypatch):
    part = copy_fixture("java-oracle/damaged-v2-torn-payload-0", name="logs/p-0")
    before = tree(part.parent)
    monkeypatch.chdir(tmp_path)
    r = kl("--json", "verify", "--repair", "--backup-dir", "bk", "logs")
    assert r.code == 0, r
    (m,) = r.json()[-1]["manifests"]
    monkeypatch.chdir("/")
    assert kl("restore", m).code == 0
    assert tree(part.parent) == before


def test_restore_refuses_while_a_broker_holds_the_lock(kl, tmp_path):
    from .test_repair import _hold_lock

    root = tmp_path / "w"
    shutil.copytree(REAL / "william0423-indexed-zk", root)
    with open(root / "debug_topic-0" / "00000000000000000000.log", "ab") as f:
        f.write(bytes(100))
    assert kl("verify", "--repair", "--backup-dir", tmp_path / "bk", root).code == 0
    (m,) = manifests(tmp_path / "bk")
    holder = _hold_lock(root / ".lock")
    try:
        r = kl("restore", m)
        assert r.code == 3
    finally:
        holder.kill()
        holder.wait()
    assert kl("restore", m).code == 0


def test_chain_of_interrupted_runs(kl, copy_fixture, tmp_path):
    """A manifest left 'applying' by an interrupted run is followed by the next run's manifest."""
    part = copy_fixture("java-oracle/damaged-v2-zero-tail-0", name="logs/p-0")
    root = part.parent
    before = tree(root)
    bk = tmp_path / "bk"
    assert kl("verify", "--repair", "--backup-dir", bk, root).code == 0
    (m1,) = manifests(bk)
    doc = json.loads(m1.read_text())
    doc["status"] = "applying"  # as if killed before the end
    m1.write_text(json.dumps(doc))
    (part / "00000000000000000000.timeindex").unlink()  # run 2 has something to do
    assert kl("verify", "--repair", "--backup-dir", bk, root).code == 0
    m1_, m2 = manifests(bk)
    assert json.loads(m2.read_text())["follows"] == [str(m1)]
    r = kl("restore", m2)
    assert r.code == 0, r
    assert tree(root) == before
