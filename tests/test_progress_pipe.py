"""`kltool verify DIR | cat` on a terminal: stdout goes into a pipe whose reader prints on the terminal the
progress bar is drawn on (stderr). No bar then, so no finding line lands in a bar frame."""

from __future__ import annotations

import shutil
import sys

from .conftest import ORACLE
from .test_cli_ux import _screen_lines, pty_output


def _in_pty(shell_cmd: str, cols: int = 120) -> str:
    return pty_output(["sh", "-c", shell_cmd], cols, rows=40)


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
