"""The log dir's ``.lock`` is held for the whole of a change, and by one process only.

A POSIX record lock (``lockf``, what the broker's ``FileChannel.tryLock`` takes on Linux) belongs to the
process and the file: closing *any* descriptor of the file releases it. And kltool removes a ``.lock`` it
created when it releases it, so a run that opened the file before that removal and locks it after holds
a lock nobody else sees, while a third run creates and takes a new ``.lock``. Real files, real locks,
real processes.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import textwrap

import pytest

from kltool.api import Logs
from kltool.errors import BrokerLockHeld
from kltool.storage import fs

from .conftest import ORACLE

# What a starting broker does: an exclusive lockf on the log dir's .lock, not waiting.
BROKER_PROBE = textwrap.dedent("""
    import fcntl, os, sys
    try:
        fd = os.open(sys.argv[1], os.O_RDWR)
    except FileNotFoundError:
        print("no lock file")
        sys.exit()
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("got it")
    except OSError:
        print("refused")
""")

HOLDER = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("locked", flush=True)
    sys.stdin.read()
""")


def broker_would_start(logdir) -> str:
    return subprocess.run([sys.executable, "-c", BROKER_PROBE, str(logdir / ".lock")], capture_output=True,
                          text=True, check=True).stdout.strip()


def damaged_logdir(tmp_path):
    """A log dir with one partition of three segments, 4 KiB zeroed in the middle one (a crash's hole)."""
    ld = tmp_path / "kafka-logs"
    part = ld / "orders-0"
    part.mkdir(parents=True)
    for f in sorted((ORACLE / "v2-multi-segment-0").glob("*.log")):
        (part / f.name).write_bytes(f.read_bytes())
    with open(part / "00000000000000000400.log", "r+b") as f:
        f.seek(5000)
        f.write(bytes(4096))
    return ld


def test_lock_stays_held_while_a_repair_applies(tmp_path):
    ld = damaged_logdir(tmp_path)
    seen = []
    result = Logs(ld).repair(dry_run=False, on_action=lambda a: seen.append((a.op, broker_would_start(ld))))
    assert result.manifests
    assert [op for op, _ in seen if op == "excise"] == ["excise"]
    # every action applied while a starting broker was still refused, the manifest's own write included
    assert {verdict for _op, verdict in seen} == {"refused"}, seen
    assert not (ld / ".lock").exists()  # the .lock kltool created is gone again


def test_lock_stays_held_while_retention_applies(tmp_path):
    ld = damaged_logdir(tmp_path)
    (ld / "orders-0" / "00000000000000000400.log").write_bytes((ORACLE / "v2-multi-segment-0" /
                                                               "00000000000000000400.log").read_bytes())
    seen = []
    plan = Logs(ld).retention(retention_bytes=1, dry_run=False,
                              on_action=lambda a: seen.append((a.op, broker_would_start(ld))))
    assert plan.manifests and seen
    assert {verdict for _op, verdict in seen} == {"refused"}, seen


def test_lock_stays_held_while_restore_applies(tmp_path):
    ld = damaged_logdir(tmp_path)
    Logs(ld).repair(dry_run=False)
    seen = []
    Logs(ld).restore(dry_run=False, on_step=lambda s: seen.append(broker_would_start(ld)))
    assert seen and set(seen) == {"refused"}, seen


def _logdir_with_lock(tmp_path, content: bytes):
    """A log dir with one empty partition directory and a ``.lock`` file holding CONTENT (no one locks it):
    (log dir, .lock path)."""
    ld = tmp_path / "kafka-logs"
    (ld / "orders-0").mkdir(parents=True)
    lockpath = ld / ".lock"
    lockpath.write_bytes(content)
    return ld, lockpath


def test_lock_removed_by_its_releaser_is_not_held(tmp_path, monkeypatch):
    """Run B opens the ``.lock`` run A created; A removes it as it releases it; B's lockf then succeeds on the
    removed file, and run C has meanwhile created and locked a new ``.lock``. B must not believe it holds
    the log dir: it takes the lock at the path again (and here finds C holding it)."""
    ld, lockpath = _logdir_with_lock(tmp_path, b"")
    real_lockf = fcntl.lockf
    others = []

    def lockf_after_the_others_ran(fd, cmd, *a):
        if not others and cmd & fcntl.LOCK_EX:
            os.unlink(lockpath)  # A releases and removes the .lock it made
            c = subprocess.Popen([sys.executable, "-c", HOLDER, str(lockpath)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)  # C creates and locks a new one
            assert c.stdout.readline().strip() == "locked"
            others.append(c)
        return real_lockf(fd, cmd, *a)

    monkeypatch.setattr(fs.fcntl, "lockf", lockf_after_the_others_ran)
    try:
        with pytest.raises(BrokerLockHeld):
            fs.BrokerLock(ld).acquire()
    finally:
        for c in others:
            c.stdin.close()
            c.wait(timeout=10)


def test_lock_file_gone_between_the_two_opens_is_created_again(tmp_path, monkeypatch):
    """The ``.lock`` exists when kltool tries to create it and is gone (its releaser removed it) when kltool
    opens it: kltool creates it again and takes it, no FileNotFoundError (exit 70)."""
    ld, lockpath = _logdir_with_lock(tmp_path, b"kltool\n")
    real_open = os.open
    calls = []

    def open_after_removal(path, flags, *a, **kw):
        if str(path) == str(lockpath) and not calls and flags & os.O_EXCL:
            calls.append(path)
            try:
                return real_open(path, flags, *a, **kw)  # FileExistsError, as the .lock is there
            finally:
                os.unlink(lockpath)  # ... and its releaser removes it right after
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(fs.os, "open", open_after_removal)
    lock = fs.BrokerLock(ld).acquire()
    try:
        assert calls and lock.held
        monkeypatch.undo()
        assert broker_would_start(ld) == "refused"
    finally:
        lock.release()
    assert not lockpath.exists()  # created by kltool: removed again on release


STRESS = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from kltool.errors import BrokerLockHeld
    from kltool.storage.change.apply import LogDirLocks
    ld = Path(sys.argv[1])
    for _ in range(int(sys.argv[2])):
        try:
            with LogDirLocks([ld], False):
                try:
                    fd = os.open(ld / "orders-0" / "HELD", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    print("two holders", flush=True)
                    continue
                time.sleep(0.001)
                os.close(fd)
                os.unlink(ld / "orders-0" / "HELD")
        except BrokerLockHeld:
            pass
""")


@pytest.mark.slow
def test_concurrent_runs_never_hold_the_lock_together(tmp_path):
    ld = tmp_path / "kafka-logs"
    (ld / "orders-0").mkdir(parents=True)
    procs = [subprocess.Popen([sys.executable, "-c", STRESS, str(ld), "250"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(5)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 5, [e[-2000:] for _o, e in outs]
    assert not any(o for o, _e in outs), [o for o, _e in outs]
    assert not (ld / ".lock").exists()


# ------------------------------------------------------------------------ plans made on what the lock guards


def _records(logdir) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "kltool", "--json", "dump", "--records", str(logdir)],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if '"type":"record"' in line.replace(" ", "")]


@pytest.mark.parametrize("backup", [True, False])
def test_retention_plans_on_the_files_as_they_are_under_the_lock(tmp_path, backup):
    """A Logs handle lists a partition (one old segment); before its retention takes the ``.lock``, another
    kltool run appends three records and rolls a segment at offset 1. Retention deletes the expired
    segment; planned on the old listing it thought every segment went and rolled an "empty" segment at
    offset 1 over the new one, losing the three records just appended."""
    ld = tmp_path / "kafka-logs"
    cli = [sys.executable, "-m", "kltool", "-q"]
    subprocess.run([*cli, "create", str(ld), "t", "--partitions", "1"], check=True)
    subprocess.run([*cli, "append", str(ld), "t", "-p", "0", "--key", "a", "--value", "old",
                    "--timestamp", "1600000000000"], check=True)
    logs = Logs(ld)
    assert [s.base_offset for p in logs.partitions for s in p.segments] == [0]
    for i in range(3):  # the other run: the first of these rolls (the old segment's time is long past)
        subprocess.run([*cli, "append", str(ld), "t", "-p", "0", "--key", "b", "--value", f"new{i}"], check=True)
    assert sorted(f.name for f in (ld / "t-0").glob("*.log")) == ["00000000000000000000.log",
                                                                  "00000000000000000001.log"]
    plan = logs.retention(retention_ms=86_400_000, dry_run=False, backup=backup)
    assert [a.op for a in plan.actions if a.op == "roll"] == []
    assert [a.info["base_offset"] for a in plan.actions if a.info.get("kind") == "segment"] == [0]
    records = _records(ld)
    assert [json.loads(r)["offset"] for r in records] == [1, 2, 3]


def test_compaction_plans_on_the_files_as_they_are_under_the_lock(tmp_path):
    """A Logs handle lists a compacted partition of four segments; before its compaction takes the
    ``.lock``, another kltool run (retention, by size) removes the first segment."""
    ld = tmp_path / "kafka-logs"
    cli = [sys.executable, "-m", "kltool", "-q"]
    subprocess.run([*cli, "create", str(ld), "t", "--partitions", "1", "--config", "segment.bytes=2000",
                    "--config", "cleanup.policy=compact,delete"], check=True)
    lines = "".join(json.dumps({"key": f"k{i % 5}", "value": "v" * 50, "timestamp": 1600000000000 + i}) + "\n"
                    for i in range(80))
    subprocess.run([*cli, "append", str(ld), "t", "-p", "0", "--batch-records", "5"], input=lines, text=True,
                   check=True)
    logs = Logs(ld)
    segs = [s.base_offset for p in logs.partitions for s in p.segments]
    assert len(segs) >= 4
    subprocess.run([*cli, "retention", str(ld), "--before-offset", str(segs[1]), "--no-backup"], check=True)
    assert not (ld / "t-0" / "00000000000000000000.log").exists()
    plan = logs.compact(dry_run=False, now=1900000000000)
    assert plan.actions
    assert subprocess.run([*cli, "verify", str(ld)]).returncode == 0
