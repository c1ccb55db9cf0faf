"""Atomic writes, range copies and the broker's .lock."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from kltool.errors import BrokerLockHeld, UnsafeOperation, UsageError
from kltool.storage.fs import (
    BrokerLock,
    atomic_write,
    copy_range,
    fsync_dir,
    lock_holder_present,
    looks_like_log_dir,
    tmp_path_for,
)

# A child process that takes fcntl.lockf(LOCK_EX) on the given file (as the broker's
# FileChannel.tryLock() does on Linux), says so, and holds it until its stdin closes.
HOLDER = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("locked", flush=True)
    sys.stdin.read()
""")


@pytest.fixture
def logdir(tmp_path):
    d = tmp_path / "kafka-logs"
    d.mkdir()
    (d / "meta.properties").write_text("#\nversion=0\nbroker.id=0\n")
    (d / "orders-0").mkdir()
    return d


def hold_lock(path):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def stop(p):
    p.stdin.close()
    p.wait(timeout=10)


# ------------------------------------------------------------------------------------------- atomic write


def test_atomic_write_round_trip(tmp_path):
    f = tmp_path / "recovery-point-offset-checkpoint"
    atomic_write(f, "0\n1\norders 0 15\n")
    assert f.read_text() == "0\n1\norders 0 15\n"
    atomic_write(f, b"\x00\x01binary")
    assert f.read_bytes() == b"\x00\x01binary"
    assert (f.stat().st_mode & 0o777) == 0o644
    assert not tmp_path_for(f).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recovery-point-offset-checkpoint"]


def test_atomic_write_mode_and_stale_temp(tmp_path):
    f = tmp_path / "x"
    tmp = tmp_path_for(f)
    assert tmp.name == ".x.kltool-tmp"
    tmp.write_bytes(b"leftover from a crash, longer than the new content")
    atomic_write(f, b"new", mode=0o600)
    assert f.read_bytes() == b"new"
    assert (f.stat().st_mode & 0o777) == 0o600
    assert not tmp.exists()


def test_atomic_write_failure_keeps_old_content(tmp_path, monkeypatch):
    f = tmp_path / "x"
    f.write_bytes(b"old")

    def boom(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write(f, b"new")
    assert f.read_bytes() == b"old"
    assert not tmp_path_for(f).exists()


def test_fsync_dir(tmp_path):
    fsync_dir(tmp_path)


# --------------------------------------------------------------------------------------------- copy range


def test_copy_range(tmp_path):
    src = tmp_path / "00000000000000000000.log"
    data = bytes(range(256)) * 100
    src.write_bytes(data)
    dst = tmp_path / "backup" / "cut.bin"
    dst.parent.mkdir()
    assert copy_range(src, 1000, 20000, dst) == 19000
    assert dst.read_bytes() == data[1000:20000]
    assert copy_range(src, 5, 5, tmp_path / "empty") == 0
    assert (tmp_path / "empty").read_bytes() == b""
    with pytest.raises(UnsafeOperation):
        copy_range(src, 0, len(data) + 1, tmp_path / "too-long")
    assert not (tmp_path / "too-long").exists()
    with pytest.raises(ValueError):
        copy_range(src, 10, 5, tmp_path / "bad")


def test_copy_range_large_chunks(tmp_path):
    src = tmp_path / "big"
    data = os.urandom(9 * 1024 * 1024 + 17)
    src.write_bytes(data)
    copy_range(src, 3, len(data), tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == data[3:]


# ------------------------------------------------------------------------------------------------ locking


def test_broker_lock_refused_while_another_process_holds_it(logdir):
    lockpath = logdir / ".lock"
    lockpath.touch()
    holder = hold_lock(lockpath)
    try:
        assert lock_holder_present(logdir)
        with pytest.raises(BrokerLockHeld) as ei:
            with BrokerLock(logdir):
                pass
        assert ei.value.message == "a broker or another kltool holds this lock; stop it first"
        assert str(ei.value) == f"{lockpath}: a broker or another kltool holds this lock; stop it first"  # named once
        assert ei.value.exit_code == 3
        assert ei.value.path == lockpath
    finally:
        stop(holder)
    assert not lock_holder_present(logdir)
    with BrokerLock(logdir) as lock:
        assert lock.held
    assert not lock.held


def test_broker_lock_blocks_a_broker_like_process(logdir):
    """While kltool holds the lock, another process's lockf (what a starting broker does) fails."""
    probe = textwrap.dedent("""
        import fcntl, os, sys
        fd = os.open(sys.argv[1], os.O_RDWR)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            print("got it")
        except OSError:
            print("refused")
    """)
    with BrokerLock(logdir):
        out = subprocess.run([sys.executable, "-c", probe, str(logdir / ".lock")], capture_output=True, text=True,
                             check=True).stdout.strip()
        assert out == "refused"
        # testing from this process must not drop our own lock (POSIX locks are per process)
        assert not lock_holder_present(logdir)
        out = subprocess.run([sys.executable, "-c", probe, str(logdir / ".lock")], capture_output=True, text=True,
                             check=True).stdout.strip()
        assert out == "refused"
    # the .lock kltool created is gone again; one that was there stays, free for the next taker
    assert not (logdir / ".lock").exists()
    (logdir / ".lock").write_bytes(b"")
    with BrokerLock(logdir):
        pass
    out = subprocess.run([sys.executable, "-c", probe, str(logdir / ".lock")], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "got it"


def test_broker_lock_is_reentrant(logdir):
    with BrokerLock(logdir) as a:
        with BrokerLock(logdir) as b:
            assert a.held and b.held
        # releasing the inner one keeps the outer lock
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(logdir / ".lock")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        holder.stdin.close()
        assert holder.wait(timeout=10) != 0  # the child could not take it
    assert not lock_holder_present(logdir)


def test_lock_file_created_only_in_a_log_dir(tmp_path, logdir):
    assert not (logdir / ".lock").exists()
    with BrokerLock(logdir):
        assert (logdir / ".lock").exists()
        assert (logdir / ".lock").read_bytes() == b""
    assert not (logdir / ".lock").exists()  # kltool leaves no .lock it created behind

    plain = tmp_path / "not-kafka"
    plain.mkdir()
    (plain / "notes.txt").write_text("hi")
    assert not looks_like_log_dir(plain)
    with pytest.raises(UsageError):
        BrokerLock(plain).acquire()
    assert not (plain / ".lock").exists()
    with BrokerLock(plain, create=True):
        assert (plain / ".lock").exists()

    with pytest.raises(UsageError):
        BrokerLock(tmp_path / "missing").acquire()


def test_looks_like_log_dir(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    assert not looks_like_log_dir(d)
    (d / "lost+found").mkdir()
    assert not looks_like_log_dir(d)
    (d / "orders-0").mkdir()
    assert looks_like_log_dir(d)
    e = tmp_path / "e"
    e.mkdir()
    (e / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    assert looks_like_log_dir(e)


def test_lock_holder_present_without_lock_file(tmp_path):
    assert not lock_holder_present(tmp_path)


def test_lock_holder_present_on_read_only_lock_file(logdir):
    lockpath = logdir / ".lock"
    lockpath.touch()
    holder = hold_lock(lockpath)
    try:
        os.chmod(lockpath, 0o444)  # the test needs only read access (root ignores this, which is fine)
        assert lock_holder_present(logdir)
    finally:
        stop(holder)
        os.chmod(lockpath, 0o644)
    assert not lock_holder_present(logdir)
