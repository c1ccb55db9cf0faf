"""One file or directory kltool may not read does not stop verify or dump: it is an `unreadable` finding,
the readable partitions are still checked, and the exit code is 1 at the end. Tests run as root here,
which reads everything: the commands run as `nobody` (setpriv) on a copy readable by that user."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .conftest import FIXTURES

KLTOOL = str(Path(sys.executable).with_name("kltool"))


def as_nobody_cmd(cmd: list[str]) -> list[str]:
    """``cmd`` run as ``nobody`` when the tests run as root (setpriv), else as it is."""
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            why = "setpriv (util-linux) is needed to drop root"
            pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    return cmd


def _as_nobody(*args):
    cmd = as_nobody_cmd([KLTOOL, *map(str, args)])
    env = dict(os.environ)
    env.pop("KLTOOL_DEBUG", None)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def world(tmp_path):
    """A directory every user may traverse (pytest's own tmp_path is under a 0700 directory)."""
    d = Path(tempfile.mkdtemp(prefix="kltool-unreadable-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(d)


def _logdir(world) -> Path:
    ld = world / "ld"
    shutil.copytree(FIXTURES / "sample-logdir", ld)
    for p in [ld, *ld.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return ld


CASES = {
    "partition_dir": "lsx1-0",
    "segment": "lsx1-0/00000000000000000000.log",
    "first_of_two_segments": "__consumer_offsets-17/00000000000000000000.log",
    "time_index": "__consumer_offsets-17/00000000000000000000.timeindex",
    "snapshot": "myTopic-0/00000000000000000038.snapshot",
    "leader_epoch_checkpoint": "lsx1-0/leader-epoch-checkpoint",
    "root_checkpoint": "recovery-point-offset-checkpoint",
    "meta_properties": "meta.properties",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_reports_unreadable_and_goes_on(world, case):
    ld = _logdir(world)
    (ld / CASES[case]).chmod(0)
    r = _as_nobody("--json", "verify", ld)
    assert r.returncode == 1, r
    assert "Traceback" not in r.stderr and "error:" not in r.stderr, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    bad = [o for o in rows if o.get("kind") == "unreadable"]
    assert bad and bad[0]["file"].startswith(str(ld / CASES[case].split("/")[0])), rows
    assert "permission denied" in bad[0]["message"]
    summary = rows[-1]
    assert summary["type"] == "summary" and summary["partitions"] == 5
    # the readable partitions were checked: myTopic-0's batches and lsx1-0's are counted
    assert summary["batches"] >= (9 if case in ("partition_dir", "segment") else 12), summary


@pytest.mark.parametrize("case", ["partition_dir", "segment"])
def test_dump_reports_unreadable_and_goes_on(world, case):
    ld = _logdir(world)
    (ld / CASES[case]).chmod(0)
    r = _as_nobody("dump", ld)
    assert r.returncode == 1, r
    assert "permission denied" in r.stderr and "Traceback" not in r.stderr
    assert "myTopic-0" in r.stdout or "00000000000000000018.log" in r.stdout  # the partitions after it
    assert r.stdout.count("Dumping") >= 6, r.stdout
    j = _as_nobody("--json", "dump", ld)
    assert j.returncode == 1
    kinds = [json.loads(x).get("kind") for x in j.stdout.splitlines()]
    assert "unreadable" in kinds


def test_symlink_loop_is_unreadable_even_for_root(kl, tmp_path):
    """A path that fails for root too: a symlink to itself (ELOOP)."""
    ld = tmp_path / "ld"
    shutil.copytree(FIXTURES / "sample-logdir", ld)
    lec = ld / "lsx1-0" / "leader-epoch-checkpoint"
    lec.unlink()
    os.symlink(lec.name, lec)
    r = kl("--json", "verify", ld)
    assert r.code == 1, r
    bad = [o for o in r.json() if o.get("kind") == "unreadable"]
    assert bad and bad[0]["file"] == str(lec) and "symlink loop" in bad[0]["message"], r.json()


@pytest.mark.parametrize("case", ["partition_dir", "segment"])
def test_info_lists_the_readable_partitions(world, case):
    ld = _logdir(world)
    (ld / CASES[case]).chmod(0)
    r = _as_nobody("info", "--all", ld)
    assert r.returncode == 1, r
    assert "permission denied" in r.stderr and "lsx1-0" in r.stderr and "error:" not in r.stderr
    assert "myTopic" in r.stdout and "__consumer_offsets" in r.stdout, r.stdout


def test_dump_of_several_files_goes_on(world):
    ld = _logdir(world)
    bad = ld / CASES["segment"]
    bad.chmod(0)
    good = ld / "__consumer_offsets-28" / "00000000000000000002.log"
    r = _as_nobody("dump", bad, good)
    assert r.returncode == 1, r
    assert "permission denied" in r.stderr and f"Dumping {good}" in r.stdout
    alone = _as_nobody("dump", bad)  # nothing else to do: one line, exit 2
    assert alone.returncode == 2 and len(alone.stderr.strip().splitlines()) == 1, alone
