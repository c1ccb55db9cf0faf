"""A reader that goes away (`kltool verify DIR | head -1`): a command whose exit code is a verdict keeps it,
dump stops quietly (as kafka-dump-log.sh). Real pipes, the installed ``kltool`` command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FIXTURES, ORACLE

KLTOOL = str(Path(sys.executable).with_name("kltool"))


def _run(args, *, closed_reader: bool, cwd=None):
    """Run kltool with stdout a pipe whose reader has already gone (every write is EPIPE), or with stdout
    read to the end; returns (exit code, stderr)."""
    env = dict(os.environ)
    env.pop("KLTOOL_DEBUG", None)
    if closed_reader:
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([KLTOOL, *map(str, args)], stdout=w, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=cwd, timeout=120)
        finally:
            os.close(w)
    else:
        p = subprocess.run([KLTOOL, *map(str, args)], capture_output=True, text=True,
                           env=env, cwd=cwd, timeout=120)
    return p.returncode, p.stderr


@pytest.fixture
def damaged(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    for name in ("damaged-v2-crc-0", "damaged-v2-bad-magic-0", "v2-multi-segment-0"):
        shutil.copytree(ORACLE / name, d / name)
    for idx in (d / "v2-multi-segment-0").glob("*.index"):
        idx.unlink()  # work for rebuild-index
    return d


@pytest.mark.parametrize("args", [
    ["verify", "{d}"],
    ["--json", "verify", "{d}"],
    ["verify", "--repair", "--dry-run", "{d}"],
    ["rebuild-index", "--dry-run", "{d}"],
    ["retention", "--dry-run", "--before-offset", "3", "{d}"],
    ["info", "{d}"],
    ["offsets", "--count", "{d}"],
])
def test_verdict_survives_a_closed_reader(damaged, args):
    args = [a.format(d=damaged) for a in args]
    want, _ = _run(args, closed_reader=False)
    assert want in (0, 1), want
    got, err = _run(args, closed_reader=True)
    assert "Traceback" not in err and "internal error" not in err, err
    assert got == want, (args, got, err)


def test_repair_is_not_cut_short_by_a_closed_reader(damaged):
    """`kltool verify --repair DIR | head -1`: the repair goes to its end (and says so in its exit code)."""
    code, err = _run(["verify", "--repair", damaged], closed_reader=True)
    assert code == 0, err
    assert _run(["verify", damaged / "damaged-v2-crc-0"], closed_reader=False)[0] == 0
    assert _run(["verify", "--repair", "--dry-run", damaged], closed_reader=True)[0] == 0


def test_dump_stops_quietly(damaged):
    code, err = _run(["dump", "--records", FIXTURES / "real" / "william0423-indexed-zk" / "__consumer_offsets-28"],
                     closed_reader=True)
    assert code == 0 and "Traceback" not in err, err


def test_shell_pipefail_with_head(damaged):
    """The issue's own command line: `set -o pipefail; kltool verify DIR | head -1` fails on a damaged DIR."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.fail("bash is not installed") if os.environ.get("CI") else pytest.skip("bash is not installed")
    p = subprocess.run([bash, "-c", f'set -o pipefail; "{KLTOOL}" verify "$1" | head -1 >/dev/null', "x",
                        str(damaged)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p
