"""Bad input: one line naming the file (and byte position), a non-zero exit code, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import FIXTURES, ROOT


def _one_line(r):
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert len(lines) == 1, r.err
    assert "Traceback" not in r.err
    return lines[0]


def test_missing_path(kl, tmp_path):
    r = kl("verify", tmp_path / "nope")
    assert r.code == 2
    assert str(tmp_path / "nope") in _one_line(r)


def test_directory_that_is_not_a_log_dir(kl, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "hello.txt").write_text("hi")
    r = kl("dump", tmp_path / "a")
    assert r.code == 2
    assert "not a Kafka log dir" in _one_line(r)


def test_permission_denied(tmp_path):
    """Run as an unprivileged user (root reads every file whatever its mode), in a directory that user may
    traverse (pytest's tmp_path is under a 0700 directory: there "permission denied" would be the path's)."""
    import shutil as _sh
    import tempfile
    from pathlib import Path

    world = Path(tempfile.mkdtemp(prefix="kltool-perm-", dir="/tmp"))
    world.chmod(0o755)
    f = world / "00000000000000000000.log"
    f.write_bytes(b"x" * 100)
    f.chmod(0o600)
    cmd = [sys.executable, "-m", "kltool", "dump", str(f)]
    if os.geteuid() == 0:
        assert _sh.which("setpriv"), "setpriv (util-linux) is needed to drop root for this test"
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    else:
        f.chmod(0)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    f.chmod(0o644)
    _sh.rmtree(world)
    assert p.returncode == 2, p
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "permission denied" in lines[0] and str(f) in lines[0], p.stderr


def test_not_a_kafka_file_reports_position(kl, tmp_path):
    f = tmp_path / "00000000000000000000.log"
    f.write_bytes(b"this is a text file, not a Kafka segment at all\n" * 3)
    r = kl("verify", f)
    assert r.code == 1
    assert "00000000000000000000.log:0" in r.out
    assert "Traceback" not in r.err


def test_corrupt_checkpoint_names_file(kl, tmp_path):
    f = tmp_path / "recovery-point-offset-checkpoint"
    f.write_text("0\n2\nfoo 0 1\n")
    r = kl("dump", f)
    assert r.code == 2
    line = _one_line(r)
    assert "recovery-point-offset-checkpoint" in line and "Expected" in line


def test_corrupt_snapshot_names_file(kl, tmp_path):
    f = tmp_path / "00000000000000000005.snapshot"
    f.write_bytes(b"\x00\x07garbage")
    r = kl("dump", f)
    assert r.code == 2
    assert "00000000000000000005.snapshot" in _one_line(r)


def test_bad_time_argument(kl):
    r = kl("dump", "--from-time", "yesterday-ish", FIXTURES / "sample-logdir")
    assert r.code == 2
    assert "ISO-8601" in _one_line(r)


def test_unknown_option_is_usage_error(kl):
    r = kl("dump", "--no-such-option", FIXTURES / "sample-logdir")
    assert r.code == 2


def test_installed_command_and_module_entry_point():
    env = dict(os.environ, NO_COLOR="1")
    out = subprocess.run([sys.executable, "-m", "kltool", "--help"], capture_output=True, text=True, env=env,
                         cwd=ROOT)
    assert out.returncode == 0
    assert "verify" in out.stdout and "dump" in out.stdout
    # --help must not import pyspark/pyarrow
    code = "import sys; from kltool.cli import main\ntry:\n main(['--help'])\nexcept SystemExit: pass\n" \
           "assert 'pyspark' not in sys.modules and 'pyarrow' not in sys.modules"
    chk = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert chk.returncode == 0, chk.stderr


def test_broken_pipe_is_quiet(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "kltool", "dump", "--records", str(FIXTURES / "real" /
                          "william0423-indexed-zk" / "__consumer_offsets-28")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=60)
    assert "Traceback" not in err
    assert p.returncode == 0, err  # as kafka-dump-log.sh: a reader that leaves is no error (click would say 1)


def test_process_exit_keeps_codes_output_and_atexit(tmp_path, kl):
    """The console entry point leaves without interpreter teardown (cli._exit_process): the exit code,
    every byte of a large stdout and atexit handlers must survive it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("KLTOOL_DEBUG", None)
    part = FIXTURES / "real" / "william0423-indexed-zk" / "__consumer_offsets-28"
    out_file = tmp_path / "out.jsonl"
    with open(out_file, "wb") as f:
        p = subprocess.run([sys.executable, "-m", "kltool", "--json", "dump", "--records", str(part)], stdout=f,
                           stderr=subprocess.PIPE, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr
    expected = kl("--json", "dump", "--records", part)
    assert expected.code == 0
    assert out_file.read_text() == expected.out and len(expected.out) > 100_000
    missing = subprocess.run([sys.executable, "-m", "kltool", "verify", str(tmp_path / "nope")],
                             capture_output=True, text=True, cwd=ROOT, env=env)
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
    marker = tmp_path / "atexit-ran"
    code = ("import atexit, pathlib, sys; atexit.register(pathlib.Path(sys.argv[1]).write_text, 'yes'); "
            "sys.argv = ['kltool', 'verify', sys.argv[2]]; from kltool.cli import main; main()")
    damaged = tmp_path / "00000000000000000000.log"
    damaged.write_bytes(b"\x00" * 12 + b"\xff" * 100)
    r = subprocess.run([sys.executable, "-c", code, str(marker), str(damaged)], capture_output=True, text=True,
                       cwd=ROOT, env=env)
    assert r.returncode == 1, r.stderr
    assert marker.read_text() == "yes"
