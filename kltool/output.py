"""The one place that writes to the terminal: text lines and JSON lines on stdout, tables,
warnings and progress (rich) on stderr. Commands get an :class:`Output` from the click context."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from typing import Any

SCHEMA_VERSION = 1

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def encode_bytes(b: bytes | None, encoding: str = "text") -> Any:
    """Bytes for JSON: null stays null; ``text`` gives a str when the bytes are valid UTF-8,
    else ``{"base64": ...}``; ``base64``/``hex`` always give ``{"base64": ...}``/``{"hex": ...}``."""
    if b is None:
        return None
    if encoding == "text":
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(b).decode("ascii")}
    if encoding == "hex":
        return {"hex": b.hex()}
    return {"base64": base64.b64encode(b).decode("ascii")}


def decode_bytes(v: Any) -> bytes | None:
    """Inverse of :func:`encode_bytes` (used by ``append`` to read ``dump --json`` output back)."""
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, dict):
        if "base64" in v:
            return base64.b64decode(v["base64"], validate=True)
        if "hex" in v:
            return bytes.fromhex(v["hex"])
        if "text" in v:
            return str(v["text"]).encode("utf-8")
    raise ValueError(f"cannot read bytes from {v!r}: expected a string, null, or {{\"base64\": ...}}")


def text_bytes(b: bytes | None, encoding: str = "text", limit: int | None = None) -> str:
    """Bytes for a human line."""
    if b is None:
        return "null"
    if encoding == "hex":
        s = b.hex()
    elif encoding == "base64":
        s = base64.b64encode(b).decode("ascii")
    else:
        try:
            s = b.decode("utf-8")
            s = s.encode("unicode_escape").decode("ascii") if not s.isprintable() else s
        except UnicodeDecodeError:
            s = "base64:" + base64.b64encode(b).decode("ascii")
    if limit is not None and len(s) > limit:
        s = s[:limit] + f"…(+{len(s) - limit})"
    return s


class Output:
    def __init__(self, json_mode: bool = False, quiet: bool = False, color: bool | None = None):
        self.json_mode = json_mode
        self.quiet = quiet
        if color is None:
            color = "NO_COLOR" not in os.environ
        self.color = color
        self._stdout = sys.stdout
        self._err_console = None
        self._out_console = None

    # -- stdout ------------------------------------------------------------------------------
    def emit(self, obj: dict) -> None:
        """One JSON line (``--json``)."""
        self._stdout.write(_dumps(obj))
        self._stdout.write("\n")

    def line(self, text: str = "") -> None:
        self._stdout.write(text)
        self._stdout.write("\n")

    def write_lines(self, lines) -> None:
        w = self._stdout.write
        for ln in lines:
            w(ln)
            w("\n")

    def flush(self) -> None:
        with contextlib.suppress(Exception):
            self._stdout.flush()

    @property
    def out_console(self):
        if self._out_console is None:
            from rich.console import Console

            tty = self._stdout.isatty()
            self._out_console = Console(file=self._stdout, no_color=not self.color, highlight=False,
                                        soft_wrap=False, width=None if tty else 400,
                                        color_system="auto" if tty and self.color else None)
        return self._out_console

    def table(self, columns: list[str], rows: list[list[Any]], title: str | None = None,
              justify: dict[str, str] | None = None) -> None:
        from rich import box
        from rich.table import Table

        t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        justify = justify or {}
        for c in columns:
            t.add_column(c, justify=justify.get(c, "left"), no_wrap=True)
        for r in rows:
            t.add_row(*("" if v is None else str(v) for v in r))
        self.out_console.print(t)

    # -- stderr ------------------------------------------------------------------------------
    @property
    def err_console(self):
        if self._err_console is None:
            from rich.console import Console

            self._err_console = Console(stderr=True, no_color=not self.color, highlight=False)
        return self._err_console

    def info(self, msg: str) -> None:
        if not self.quiet:
            print(msg, file=sys.stderr)

    def warn(self, msg: str) -> None:
        print(f"kltool: warning: {msg}", file=sys.stderr)

    def error(self, msg: str) -> None:
        print(f"kltool: error: {msg}", file=sys.stderr)

    def progress(self, total: int | None, description: str):
        """A progress bar on stderr (only on a terminal, never with --quiet)."""
        return Progress(self, total, description)


class Progress:
    """Context manager; ``advance(n)``. Silent unless stderr is a terminal."""

    def __init__(self, out: Output, total: int | None, description: str):
        self.enabled = not out.quiet and sys.stderr.isatty() and (total is None or total > 0)
        self._p = None
        self._task = None
        self.out = out
        self.total = total
        self.description = description

    def __enter__(self):
        if self.enabled:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._p = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                               TransferSpeedColumn(), TimeRemainingColumn(), console=self.out.err_console,
                               transient=True)
            self._p.__enter__()
            self._task = self._p.add_task(self.description, total=self.total)
        return self

    def advance(self, n: int) -> None:
        if self._p is not None:
            self._p.advance(self._task, n)

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)
        return False
