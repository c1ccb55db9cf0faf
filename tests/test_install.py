"""kltool installed the way users install it: a wheel built from this checkout, installed into a
fresh virtual environment without the test extras (no editable install, nothing from the checkout on
sys.path), then every command's --help, bare ``kltool`` and the README's demo commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow


def _demo_commands() -> list[list[str]]:
    """The `make demo` recipe's kltool lines, as argument lists."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^demo:.*\n((?:\t.*\n)+)", text, re.M)
    assert m, "Makefile has no demo target"
    cmds = []
    for line in m.group(1).splitlines():
        words = line.strip().replace("$(SAMPLE)", "fixtures/sample-logdir").split()
        if words and words[0] == "$(BIN)/kltool":
            cmds.append(words[1:])
    assert cmds
    return cmds


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    wheels = tmp / "dist"
    b = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                       capture_output=True, text=True, cwd=tmp)
    assert b.returncode == 0, b.stderr[-3000:]
    (whl,) = wheels.glob("kltool-*.whl")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py = env_dir / "bin" / "python"
    i = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(whl)],
                       capture_output=True, text=True, cwd=tmp)
    assert i.returncode == 0, i.stderr[-3000:]
    return env_dir


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KLTOOL_", "VIRTUAL_ENV"))}
    env["NO_COLOR"] = "1"
    return env


def _run(installed, *args, cwd=ROOT):
    return subprocess.run([str(installed / "bin" / "kltool"), *args], capture_output=True, text=True,
                          cwd=cwd, env=_env(), timeout=300)


def _clean(r, codes=(0,)):
    assert r.returncode in codes, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_installed_copy_is_the_wheel_without_test_extras(installed, tmp_path):
    code = ("import kltool, importlib.util as u; print(kltool.__file__); "
            "print(u.find_spec('pytest') is None, u.find_spec('hypothesis') is None)")
    r = subprocess.run([str(installed / "bin" / "python"), "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stderr
    path, no_pytest = r.stdout.splitlines()
    assert "site-packages" in path and str(ROOT) not in path
    assert no_pytest == "True True"


def test_help_bare_and_every_subcommand_help(installed):
    from kltool.cli import COMMANDS

    r = _run(installed, "--help")
    _clean(r)
    for name in COMMANDS:
        assert name in r.stdout
    bare = _run(installed)
    _clean(bare, codes=(0, 2))
    assert "Commands:" in bare.stdout + bare.stderr
    for name in COMMANDS:
        h = _run(installed, name, "--help")
        _clean(h)
        assert f"kltool {name}" in h.stdout


def test_demo_commands(installed):
    for args in _demo_commands():
        r = _run(installed, *args)
        _clean(r, codes=(0, 1))
        assert r.stdout.strip(), args
