"""Usage errors are one line that names the option (or argument) and what it takes, exit 2: not click's
four lines (Usage, Try, a blank line, Error)."""

from __future__ import annotations

import pytest

from .conftest import FIXTURES

LOGDIR = str(FIXTURES / "sample-logdir")


@pytest.mark.parametrize("args,names", [
    (["dump", "--limit", "0", LOGDIR], ["--limit", "at least 1"]),
    (["dump", "--limit", "x", LOGDIR], ["--limit", "at least 1"]),
    (["dump", "--bogus", LOGDIR], ["--bogus", "kltool dump --help"]),
    (["dump", "--lim", "3", LOGDIR], ["--lim", "--limit"]),
    (["dump", "--encoding", "raw", LOGDIR], ["--encoding", "'raw'", "base64", "hex"]),
    (["completion", "tcsh"], ["SHELL", "tcsh", "bash", "zsh", "fish"]),
    (["verify"], ["PATHS", "missing"]),
    (["append", LOGDIR], ["TOPIC", "missing"]),
    (["append", LOGDIR, "t", "--magic", "7"], ["--magic", "from 0 to 2"]),
    (["verify", "--max-record-bytes", "5", LOGDIR], ["--max-record-bytes", "at least 1024"]),
    (["nosuchcommand"], ["nosuchcommand", "kltool --help"]),
    (["--bogus", "verify", LOGDIR], ["--bogus"]),
    (["dump", "--limit"], ["--limit", "argument"]),
    (["--json", "verify"], ["PATHS"]),
])
def test_usage_error_is_one_line(kl, args, names):
    r = kl(*args)
    assert r.code == 2, r
    lines = r.err.splitlines()
    assert len(lines) == 1, r.err
    line = lines[0]
    assert line.startswith("kltool: error: "), line
    for n in names:
        assert n in line, (n, line)
    assert "Usage:" not in r.err and "Try '" not in r.err and r.out == ""


def test_kltool_alone_shows_the_help(kl):
    r = kl()
    assert r.code == 2 and "Commands:" in r.err and "kltool: error" not in r.err
