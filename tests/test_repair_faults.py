"""Fault injection: a repair (and a restore) killed with SIGKILL at every durable step, then run again.

After each kill, running the repair again must converge to exactly what an uninterrupted repair gives,
verify clean, and ``restore`` of the newest manifest (which follows the interrupted runs) must give back
the original files exactly.
"""

from __future__ import annotations

import os
import random
import signal
import struct
from pathlib import Path

import pytest

from .conftest import run_kltool
from .test_repair import batches_of, manifests, tree

SEG0 = "00000000000000000000.log"


def build(copy_fixture, tmp: Path) -> Path:
    """A log dir with most kinds of damage at once."""
    root = tmp / "logs"
    multi = copy_fixture("java-oracle/v2-multi-segment-0", name=f"{tmp.name}/logs/multi-0")
    magic = copy_fixture("java-oracle/damaged-v2-bad-magic-0", name=f"{tmp.name}/logs/magic-0")
    swap = copy_fixture("java-oracle/v2-none-0", name=f"{tmp.name}/logs/swap-0")
    for p in (multi, magic, swap):
        (p / "expected.jsonl").unlink()
    # multi-0: a zero hole in the middle of segment 400, a torn tail on segment 800, stale files
    log = multi / "00000000000000000400.log"
    hs = batches_of(log)
    data = bytearray(log.read_bytes())
    data[hs[3].position + 5:hs[6].position + 9] = bytes(hs[6].position + 4 - hs[3].position)
    log.write_bytes(bytes(data))
    with open(multi / "00000000000000000800.log", "r+b") as f:
        f.truncate(f.seek(0, 2) - 77)
    (multi / "00000000000000000000.log.deleted").write_bytes(random.Random(1).randbytes(5000))
    (multi / "00000000000000077777.index").write_bytes(bytes(40))
    (multi / "00000000000000005000.snapshot").write_bytes(bytes(10))
    (multi / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n1 4000\n")
    # swap-0: an interrupted compaction
    (swap / f"{SEG0}.swap").write_bytes((swap / SEG0).read_bytes())
    (swap / f"{SEG0}.cleaned").write_bytes(b"x" * 100)
    (swap / "00000000000000000003.log.cleaned").write_bytes(b"y" * 100)
    # the root checkpoints
    (root / "recovery-point-offset-checkpoint").write_text("0\n3\nmulti 0 1200\nmagic 0 5\nswap 0 7\n")
    (root / "replication-offset-checkpoint").write_text("0\n1\nmulti 0 1199\n")
    (root / "meta.properties").write_text("#\nversion=0\nbroker.id=0\n")
    return root


# The durable steps: every file-system call that changes what is on disk (as the retention kill tests).
FS_OPS = ("rename", "replace", "unlink", "fsync", "mkdir", "ftruncate")


def _counting(on_step):
    """Wrap ``os``'s file-system calls so that ``on_step(n)`` runs before the n-th; returns an undo."""
    real = {name: getattr(os, name) for name in FS_OPS}
    count = [0]

    def wrap(fn):
        def op(*a, **k):
            count[0] += 1
            on_step(count[0])
            return fn(*a, **k)
        return op

    for name, fn in real.items():
        setattr(os, name, wrap(fn))

    def undo():
        for name, fn in real.items():
            setattr(os, name, fn)
        return count[0]

    return undo


def run_until(k: int, args) -> int:
    """Run kltool in a forked child that SIGKILLs itself just before its k-th durable step; return the
    wait status."""
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            kill = os.kill

            def step(n):
                if n == k:
                    kill(os.getpid(), signal.SIGKILL)

            _counting(step)
            run_kltool(*args)
        except BaseException:
            code = 99
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


def count_steps(args) -> int:
    undo = _counting(lambda n: None)
    try:
        r = run_kltool(*args)
    finally:
        n = undo()
    assert r.code == 0, r
    return n


def sample(n: int, limit: int = 45) -> list[int]:
    ks = list(range(1, n + 1))
    if n > limit:
        ks = sorted(random.Random(n).sample(ks, limit))
    return ks


@pytest.mark.slow
def test_repair_killed_at_every_step_converges(tmp_path, copy_fixture):
    ref = build(copy_fixture, tmp_path / "ref")
    original = tree(ref)
    n = count_steps(["verify", "--repair", "--backup-dir", tmp_path / "ref" / "bk", ref])
    repaired = tree(ref)
    assert repaired != original and n >= 20
    assert run_kltool("verify", ref).code == 0
    for k in sample(n, 32):
        d = tmp_path / f"k{k}"
        root = build(copy_fixture, d)
        bk = d / "bk"
        args = ["verify", "--repair", "--backup-dir", bk, root]
        status = run_until(k, args)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (k, status)
        again = run_kltool(*args)
        assert again.code == 0, (k, again)
        assert tree(root) == repaired, k
        assert run_kltool("verify", root).code == 0, k
        assert run_kltool("verify", "--repair", "--dry-run", root).code == 0, k
        ms = manifests(bk)
        assert ms, k
        rs = run_kltool("restore", ms[-1])
        assert rs.code == 0, (k, rs)
        assert tree(root) == original, k


@pytest.mark.slow
def test_restoring_an_interrupted_repair_directly_gives_back_the_original(tmp_path, copy_fixture):
    """Killed at every step, the repair is not run again: ``restore`` of its own manifest (status applying)
    undoes what was applied, skips what was not, and removes the partial copy a kill in an atomic write left
    (``.NAME.kltool-tmp``; it stayed before)."""
    ref = build(copy_fixture, tmp_path / "ref")
    original = tree(ref)
    n = count_steps(["verify", "--repair", "--backup-dir", tmp_path / "ref" / "bk", ref])
    for k in range(1, n + 1):
        d = tmp_path / f"k{k}"
        root = build(copy_fixture, d)
        bk = d / "bk"
        status = run_until(k, ["verify", "--repair", "--backup-dir", bk, root])
        assert os.WIFSIGNALED(status), (k, status)
        ms = manifests(bk) if bk.exists() else []
        if ms:  # (before its manifest, a run has changed nothing)
            rs = run_kltool("restore", ms[-1])
            assert rs.code == 0, (k, rs)
        assert tree(root) == original, (k, sorted(set(tree(root)) ^ set(original)))


@pytest.mark.slow
def test_restore_killed_at_every_step_converges(tmp_path, copy_fixture):
    ref = build(copy_fixture, tmp_path / "ref")
    original = tree(ref)
    r = run_kltool("--json", "verify", "--repair", "--backup-dir", tmp_path / "ref" / "bk", ref)
    assert r.code == 0, r
    n = count_steps(["restore", manifests(tmp_path / "ref" / "bk")[-1]])
    assert tree(ref) == original and n >= 10
    for k in sample(n, 16):
        d = tmp_path / f"k{k}"
        root = build(copy_fixture, d)
        bk = d / "bk"
        assert run_kltool("verify", "--repair", "--backup-dir", bk, root).code == 0
        (m,) = manifests(bk)
        status = run_until(k, ["restore", m])
        assert os.WIFSIGNALED(status), (k, status)
        rs = run_kltool("restore", m)
        assert rs.code == 0, (k, rs)
        assert tree(root) == original, k


@pytest.mark.parametrize("cut", [1, 1000, 4096 + 7])
def test_interrupted_truncate_restore_resumes(tmp_path, copy_fixture, cut):
    """A restore that appended part of a truncated tail (killed mid-copy) checks the part and goes on."""
    root = copy_fixture("java-oracle/damaged-v2-zero-tail-0", name="logs/p-0").parent
    log = root / "p-0" / SEG0
    original = log.read_bytes()
    r = run_kltool("--json", "verify", "--repair", "--backup-dir", tmp_path / "bk", root)
    assert r.code == 0
    (m,) = manifests(tmp_path / "bk")
    with open(log, "ab") as f:
        f.write(original[657:657 + min(cut, 4096 - 1)])
    assert run_kltool("restore", m).code == 0
    assert log.read_bytes() == original
    # a wrong partial tail is refused
    assert run_kltool("verify", "--repair", "--backup-dir", tmp_path / "bk2", root).code == 0
    (m2,) = manifests(tmp_path / "bk2")
    with open(log, "ab") as f:
        f.write(struct.pack(">q", 12345))
    r = run_kltool("restore", m2)
    assert r.code == 3 and "differ from the backup" in r.err
