"""A FIFO named like a snapshot, checkpoint, index or segment never makes verify, verify --repair or
rebuild-index wait for ever: only regular files are read (storage.fs.read_small_file; segment files are
opened with O_NONBLOCK and checked before the walk), and a FIFO named like a segment is an `unreadable`
finding. The commands run in a subprocess with a timeout: the old code blocked on open()/read()."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FIXTURES

KLTOOL = str(Path(sys.executable).with_name("kltool"))

FIFOS = {
    "snapshot": "myTopic-0/00000000000000000038.snapshot",
    "leader_epoch_checkpoint": "myTopic-0/leader-epoch-checkpoint",
    "root_checkpoint": "recovery-point-offset-checkpoint",
    "log_start_checkpoint": "log-start-offset-checkpoint",
    "txnindex": "myTopic-0/00000000000000000038.txnindex",
    "index": "myTopic-0/00000000000000000038.index",
    "segment": "myTopic-0/00000000000000000038.log",
}

COMMANDS = {
    "verify": ["verify"],
    "repair_dry_run": ["verify", "--repair", "--dry-run"],
    "repair": ["verify", "--repair"],
    "rebuild_index": ["rebuild-index"],
}


def _run(*args):
    env = dict(os.environ)
    env.pop("KLTOOL_DEBUG", None)
    try:
        return subprocess.run([KLTOOL, *map(str, args)], capture_output=True, text=True, env=env, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kltool {' '.join(map(str, args))} waited on the FIFO")


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("what", FIFOS)
def test_a_fifo_never_blocks(tmp_path, what, cmd):
    ld = tmp_path / "ld"
    shutil.copytree(FIXTURES / "sample-logdir", ld)
    fifo = ld / FIFOS[what]
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    for target in (ld / "myTopic-0", ld):
        r = _run(*COMMANDS[cmd], "--backup-dir", tmp_path / "backup", target) if cmd in ("repair", "rebuild_index") \
            else _run(*COMMANDS[cmd], target)
        assert r.returncode not in (70, 120), r
        assert "Traceback" not in r.stderr, r.stderr
        assert fifo.exists() and not fifo.is_file()  # a FIFO is never rewritten or moved as if it were data
    if what == "segment" and cmd == "verify":
        r = _run("--json", "verify", ld / "myTopic-0")
        assert r.returncode == 1, r
        assert '"unreadable"' in r.stdout and FIFOS[what] in r.stdout, r.stdout
