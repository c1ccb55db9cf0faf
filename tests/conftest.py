from __future__ import annotations

import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
ORACLE = FIXTURES / "java-oracle"
REAL = FIXTURES / "real"


class Result:
    def __init__(self, code, out, err):
        self.code = code
        self.out = out
        self.err = err

    def json(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]

    def __repr__(self):
        return f"Result(code={self.code}, out={self.out[:500]!r}, err={self.err[:500]!r})"


def run_kltool(*args, stdin: str | bytes | None = None) -> Result:
    """Run the kltool entry point in-process (same code path as the installed command)."""
    from kltool.cli import main

    old = sys.stdout, sys.stderr, sys.stdin
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin if isinstance(stdin, bytes) else stdin.encode()))
    try:
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdout, sys.stderr, sys.stdin = old
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def kl():
    return run_kltool


@pytest.fixture
def copy_fixture(tmp_path):
    """Copy a fixture directory into tmp_path (writable) and return the copy's path."""

    def _copy(rel: str, name: str | None = None) -> Path:
        src = FIXTURES / rel
        dst = tmp_path / (name or src.name)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        for p in [dst, *dst.rglob("*")] if dst.is_dir() else [dst]:
            p.chmod(p.stat().st_mode | 0o200)
        return dst

    return _copy


def find_oracle() -> Path | None:
    """Kafka's own reader (shared/oracle, built by its setup.sh into ~/.cache). Optional."""
    import os

    cand = os.environ.get("KLTOOL_KAFKA_ORACLE") or os.environ.get("KAFKA_ORACLE")
    paths = [Path(cand)] if cand else []
    cache = Path(os.environ.get("KAFKA_ORACLE_CACHE", Path.home() / ".cache" / "kltool-kafka-oracle"))
    paths.append(cache / "kafka-oracle")
    for p in paths:
        if p.is_file() and os.access(p, os.X_OK) and shutil.which("java"):
            return p
    return None


@pytest.fixture(scope="session")
def kafka_oracle():
    """Run Kafka's own reader on files: returns a function(files, records=False) -> (exit code, JSON rows)."""
    import subprocess

    exe = find_oracle()
    if exe is None:
        why = "Kafka's Java oracle is not built on this machine (bash ../shared/oracle/setup.sh builds it)"
        if os.environ.get("CI"):  # .ci/run builds it: a failed build must not turn these checks into skips
            pytest.fail(why)
        pytest.skip(why)

    def read(files, records: bool = False):
        args = [str(exe), "read"] + (["--records"] if records else []) + [str(f) for f in files]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        return p.returncode, rows

    return read


def pytest_sessionstart(session):
    """Rebuild the C accelerator when the built one is older than _speedups.c's interface (after a
    pull that changed it), so that the tests check the code as it is. Quiet when it is current."""
    import importlib
    import subprocess

    from kltool.format import speedups

    try:
        mod = importlib.import_module("kltool.format._speedups")
    except ImportError:
        mod = None
    if mod is None or getattr(mod, "ABI", 1) == speedups.ABI:
        return  # not built (no compiler: the tests that need it say so), or current
    print(f"conftest: rebuilding kltool's C accelerator (built ABI {getattr(mod, 'ABI', None)}, source ABI "
          f"{speedups.ABI})", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)], check=False,
                   stdout=subprocess.DEVNULL)
    raise SystemExit("conftest: the C accelerator was rebuilt; run pytest again")


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch):
    """Tables follow $COLUMNS even off a terminal: tests that want a width set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)
