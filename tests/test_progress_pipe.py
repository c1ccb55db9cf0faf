"""`kltool verify DIR | cat` on a terminal: stdout goes into a pipe whose reader prints on the terminal the
progress bar is drawn on (stderr). No bar then, so no finding line lands in a bar frame."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from .conftest import ORACLE, ROOT
from .test_cli_ux import _screen_lines


def _in_pty(shell_cmd: str, cols: int = 120) -> str:
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env.update({"TERM": "xterm-256color", "PYTHONPATH": str(ROOT)})
    p = subprocess.Popen(["sh", "-c", shell_cmd], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=ROOT,
                         env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    p.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def _many_findings(tmp_path, n=120):
    d = tmp_path / "ld"
    for i in range(n):
        shutil.copytree(ORACLE / "v2-multi-segment-0", d / f"t-{i}")  # no .index files: a warning each
    return d


def test_no_bar_when_stdout_is_a_pipe_to_the_same_terminal(tmp_path):
    d = _many_findings(tmp_path)
    raw = _in_pty(f'"{sys.executable}" -m kltool verify "{d}" | cat')
    lines = _screen_lines(raw)
    findings = [ln for ln in lines if "missing_index" in ln]
    assert len(findings) >= 100, raw[-2000:]
    assert "━" not in raw, "a progress bar was drawn across the piped output"
    for ln in findings:
        assert ln.startswith("WARNING"), ln


def test_bar_still_shows_when_stdout_is_a_file(tmp_path):
    d = _many_findings(tmp_path, 40)
    raw = _in_pty(f'"{sys.executable}" -m kltool verify "{d}" > "{tmp_path / "out.txt"}"')
    assert "━" in raw
    assert (tmp_path / "out.txt").read_text().count("missing_index") >= 40
