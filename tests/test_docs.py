"""The man pages and README keep up with the commands: every subcommand has a page, and every
option of every subcommand is documented in it."""

from __future__ import annotations

import importlib

import click
import pytest

from kltool.cli import COMMANDS, GLOBAL_OPTIONS, cli

from .conftest import ROOT

MAN = ROOT / "man"


def test_main_page_lists_every_command():
    text = (MAN / "kltool.1").read_text()
    for name in COMMANDS:
        assert f"kltool-{name}" in text, name
    for opt in cli.params:
        if isinstance(opt, click.Option):
            for o in opt.opts:
                if o.startswith("--") and o not in ("--help", "--version"):
                    assert o.replace("-", r"\-") in text or o in text, o


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_is_in_the_man_page(name):
    page = MAN / f"kltool-{name}.1"
    assert page.exists(), page
    text = page.read_text().replace(r"\-", "-").replace(r"\fB", "").replace(r"\fR", "").replace(r"\fI", "")
    cmd = importlib.import_module(COMMANDS[name][0]).command
    global_opts = {o for opts, *_ in GLOBAL_OPTIONS for o in opts}  # documented in kltool(1)
    missing = [o for p in cmd.params if isinstance(p, click.Option) for o in p.opts
               if o.startswith("--") and o != "--help" and o not in global_opts and o not in text]
    assert not missing, f"{page.name} does not document {missing}"


def test_readme_has_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    assert "bash .ci/run" in text or ".ci/run" in text


def _readme_examples():
    """(command line, expected stdout) for every `$ kltool ...` line in the README's console blocks that
    runs on the repository's fixtures (the others need a log dir the reader builds first)."""
    import re

    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        cmd, lines = None, []
        for ln in block.splitlines() + ["$ "]:
            if ln.startswith("$ "):
                if cmd is not None and "fixtures/" in cmd and "rd/" not in cmd:
                    out.append((cmd, "\n".join(lines)))
                cmd, lines = ln[2:], []
            else:
                lines.append(ln)
    return out


def _normal(s: str) -> str:
    import re

    s = re.sub(r"in \d+\.\d+s", "in Xs", s)
    return re.sub(r'"seconds":[0-9.]+', '"seconds":X', s).rstrip("\n")


@pytest.mark.parametrize("cmd,expected", _readme_examples(), ids=lambda v: v[:60] if isinstance(v, str) else "")
def test_readme_examples_are_true(kl, monkeypatch, cmd, expected):
    import shlex

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("COLUMNS", raising=False)
    args = shlex.split(cmd)
    assert args[0] == "kltool"
    r = kl(*args[1:])
    assert r.code in (0, 1), r
    assert _normal(r.out) == _normal(expected), f"README example out of date: {cmd}\n{r.out}"


def test_readme_has_examples_that_run():
    assert len(_readme_examples()) >= 6
