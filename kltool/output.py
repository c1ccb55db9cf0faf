"""The one place that writes to the terminal: text lines and JSON lines on stdout, tables,
warnings and progress (rich) on stderr. Commands get an :class:`Output` from the click context."""

from __future__ import annotations

import json
import os
import re
import sys
from binascii import b2a_base64  # (base64.b64encode without importing base64)

SCHEMA_VERSION = 1

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

# A path (or topic) that is not UTF-8 arrives as a str with lone surrogates (os.fsdecode): in a JSON line each
# is written as its JSON escape ("\udcff"), which JSON readers decode back to the same str (Python's
# os.fsencode then gives the original bytes); UTF-8 cannot hold it as it is. Text lines write the original
# bytes back (surrogateescape). Costs nothing unless such a character is written.
JSON_ERRORS = "kltool-json-escape"


def _escape_surrogates(err: UnicodeError):
    if not isinstance(err, UnicodeEncodeError):
        raise err
    return "".join(f"\\u{ord(c):04x}" for c in err.object[err.start:err.end]), err.end


import codecs  # noqa: E402

codecs.register_error(JSON_ERRORS, _escape_surrogates)


def json_text(s: str) -> str:
    """``s`` (a piece of JSON) with any lone surrogate as its JSON escape: safe to encode as UTF-8."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", JSON_ERRORS).decode("utf-8")

from .jsonl import decode_bytes, encode_bytes  # noqa: E402,F401  (the record schema lives in jsonl.py)

# Characters a terminal acts on instead of showing: C0 controls (ESC starts escape sequences; newline and CR
# forge or overwrite lines; tab), DEL, C1 controls (U+0080-U+009F, and the bytes 0x80-0x9f of a name that is not
# UTF-8, which surrogateescape would write raw), the Unicode line and paragraph separators and the bidi
# controls (which reorder what is shown). A file name or topic may hold any of them.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\udc80-\udc9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible_char(m) -> str:
    c = m.group()
    o = ord(c)
    if o >= 0xDC80:  # (a byte of a non-UTF-8 name)
        return f"\\x{o - 0xDC00:02x}"
    named = _NAMED.get(c)
    if named is not None:
        return named
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def visible(text: str) -> str:
    """``text`` for a human line: every character a terminal would act on rather than show (see _CONTROL)
    written as its escape (``\\x1b``, ``\\n``, ``\\u202e``), so that no file name or topic can move the
    cursor, recolour, or forge a line. The one home of that rule: every text line on stdout and stderr goes
    through it (--json lines are JSON's escapes already)."""
    if text.isprintable():
        return text
    return _CONTROL.sub(_visible_char, text)


def text_bytes(b: bytes | None, encoding: str = "text", limit: int | None = None) -> str:
    """Bytes for a human line."""
    if b is None:
        return "null"
    if encoding == "hex":
        s = b.hex()
    elif encoding == "base64":
        s = b2a_base64(b, newline=False).decode("ascii")
    else:
        try:
            s = b.decode("utf-8")
            s = s.encode("unicode_escape").decode("ascii") if not s.isprintable() else s
        except UnicodeDecodeError:
            s = "base64:" + b2a_base64(b, newline=False).decode("ascii")
    if limit is not None and len(s) > limit:
        s = s[:limit] + f"…(+{len(s) - limit})"
    return s


GAP = "   "


def render_table(columns: list[str], rows, *, width: int | None = None,
                 title: str | None = None, justify: dict[str, str] | None = None) -> list[str]:
    """Lines of a table (all of :func:`iter_table`)."""
    return list(iter_table(columns, rows, width=width, title=title, justify=justify))


def iter_table(columns: list[str], rows, *, width: int | None = None,
               title: str | None = None, justify: dict[str, str] | None = None):
    """Lines of a table, one at a time. Fits in ``width`` (None: any width) as aligned columns with a header
    and a rule; when it cannot, each row becomes ``name: value`` fields, the first field unindented and the
    rest wrapped onto lines indented by two spaces (a field longer than the width gets a line of its own).
    Nothing is ever truncated. ``rows``: a list, or a function returning a fresh iterable of them (walked
    twice, once for the widths, once for the lines: no cell is held, so a million rows cost no memory)."""
    justify = justify or {}
    walk = rows if callable(rows) else (lambda: rows)

    def cells():
        for r in walk():
            yield ["" if v is None else visible(str(v)) for v in r]

    widths = [len(c) for c in columns]
    for r in cells():
        widths = [max(w, len(v)) for w, v in zip(widths, r, strict=True)]
    total = sum(widths) + len(GAP) * (len(columns) - 1)
    if title is not None:
        yield title
    if width is None or total <= width:
        def fmt(vals):
            return GAP.join(v.rjust(w) if justify.get(c) == "right" else v.ljust(w)
                            for v, w, c in zip(vals, widths, columns, strict=True)).rstrip()

        yield fmt(columns)
        yield "\u2500" * total
        yield from map(fmt, cells())
        return
    for r in cells():
        line = ""
        for f in (f"{c}: {v}" for c, v in zip(columns, r, strict=True) if v != ""):
            if line and len(line) + 2 + len(f) > width:
                yield line
                line = "  " + f
            else:
                line = f if not line else (line + "  " + f)
        if line:
            yield line


def silence_stdout() -> None:
    """Point stdout (fd 1) at /dev/null, so that writes after its reader went away, and the interpreter's
    final flush, cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


class Output:
    """``carry_on_closed_stdout``: when stdout's reader goes away (``| head``), stdout is silenced and the
    command goes on (``stdout_closed`` becomes True), so that its work and its exit code are not cut
    short; otherwise (``dump``) the BrokenPipeError stops the command."""

    def __init__(self, json_mode: bool = False, quiet: bool = False, color: bool | None = None,
                 carry_on_closed_stdout: bool = False):
        self.json_mode = json_mode
        self.quiet = quiet
        self.carry_on_closed_stdout = carry_on_closed_stdout
        self.stdout_closed = False
        if color is None:
            color = "NO_COLOR" not in os.environ
        self.color = color
        self._stdout = sys.stdout
        reconfigure = getattr(sys.stdout, "reconfigure", None)
        if reconfigure is not None:  # (a non-UTF-8 name never stops a command: see JSON_ERRORS)
            try:
                reconfigure(errors=JSON_ERRORS if json_mode else "surrogateescape")
            except (ValueError, OSError):
                pass
        self._raw: list = []  # UTF-8 blocks from write_bytes(), written together once ~1 MiB is pending
        self._raw_size = 0
        self._err_console = None

    # -- stdout ------------------------------------------------------------------------------
    def _closed(self, e: BrokenPipeError) -> None:
        """stdout's reader went away: stop (raise) or, with ``carry_on_closed_stdout``, go on silenced."""
        if not self.carry_on_closed_stdout:
            raise e
        if not self.stdout_closed:
            self.stdout_closed = True
            self._raw, self._raw_size = [], 0
            silence_stdout()

    def emit(self, obj: dict) -> None:
        """One JSON line (``--json``)."""
        try:
            if self._raw:
                self._flush_raw()
            self._stdout.write(_dumps(obj))
            self._stdout.write("\n")
        except BrokenPipeError as e:
            self._closed(e)

    def write(self, text: str) -> None:
        """Text as it is (no newline added)."""
        try:
            if self._raw:
                self._flush_raw()
            self._stdout.write(text)
        except BrokenPipeError as e:
            self._closed(e)

    def line(self, text: str = "") -> None:
        """One human line (its control characters made visible: :func:`visible`)."""
        try:
            if self._raw:
                self._flush_raw()
            self._stdout.write(text if text.isprintable() else visible(text))
            self._stdout.write("\n")
        except BrokenPipeError as e:
            self._closed(e)

    def write_lines(self, lines, *, tabs: bool = False) -> None:
        """Human lines (control characters made visible); ``tabs``: their tabs are column separators
        (Kafka's tab-separated tables), kept as they are."""
        try:
            if self._raw:
                self._flush_raw()
            w = self._stdout.write
            for ln in lines:
                if not ln.isprintable():
                    ln = "\t".join(map(visible, ln.split("\t"))) if tabs else visible(ln)
                w(ln)
                w("\n")
        except BrokenPipeError as e:
            self._closed(e)

    def write_bytes(self, data) -> None:
        """Whole lines already encoded as UTF-8 (the hot output paths, e.g. dump --records): kept
        and written to stdout's binary layer about 1 MiB at a time (large blocks go through without a
        copy), in order with the other methods' text."""
        self._raw.append(data)
        self._raw_size += len(data)
        if self._raw_size >= (1 << 20):
            try:
                self._flush_raw()
            except BrokenPipeError as e:
                self._closed(e)

    def _flush_raw(self) -> None:
        raw = self._raw
        self._raw = []
        self._raw_size = 0
        binary = getattr(self._stdout, "buffer", None)
        if binary is None:  # a text-only stream (tests' StringIO)
            self._stdout.write(b"".join(raw).decode("utf-8"))
        else:
            self._stdout.flush()  # the text layer's pending lines come first
            binary.writelines(raw)

    def flush(self) -> None:
        """Everything written so far reaches stdout (raises BrokenPipeError when the reader left)."""
        try:
            if self._raw:
                self._flush_raw()
            self._stdout.flush()
        except BrokenPipeError as e:
            self._closed(e)
        except (OSError, ValueError):
            pass

    def width(self) -> int | None:
        """The width tables must fit: $COLUMNS when set, else the terminal's; None (unlimited) when
        stdout is not a terminal."""
        env = os.environ.get("COLUMNS", "")
        if env.isdigit() and int(env) > 0:
            return int(env)
        try:
            if self._stdout.isatty():
                return os.get_terminal_size(self._stdout.fileno()).columns
        except (OSError, ValueError, AttributeError):
            pass
        return None

    def table(self, columns: list[str], rows, title: str | None = None,
              justify: dict[str, str] | None = None) -> None:
        """Aligned columns when they fit the width; otherwise each row as ``name: value`` fields
        wrapped onto indented lines. Cells are never cut. ``rows``: a list, or a function returning a fresh
        iterable of them (see :func:`iter_table`), written as they are formatted."""
        self.write_lines(iter_table(columns, rows, width=self.width(), title=title, justify=justify))

    # -- stderr ------------------------------------------------------------------------------
    @property
    def err_console(self):
        if self._err_console is None:
            from rich.console import Console

            self._err_console = Console(stderr=True, no_color=not self.color, highlight=False)
        return self._err_console

    def info(self, msg: str) -> None:
        if not self.quiet:
            print(visible(msg), file=sys.stderr)

    def warn(self, msg: str) -> None:
        print(f"kltool: warning: {visible(msg)}", file=sys.stderr)

    def error(self, msg: str) -> None:
        print(f"kltool: error: {visible(msg)}", file=sys.stderr)

    def progress(self, total: int | None, description: str):
        """A progress bar on stderr (only on a terminal, never with --quiet)."""
        return Progress(self, total, visible(description))


class _AboveTheBar:
    """Stands in for stdout while a progress bar is live on the same terminal: each whole line is
    printed through the bar's console, which clears the bar, prints the line and draws the bar again
    below it, so a finding never shares a line with the bar."""

    def __init__(self, console, real):
        self._console = console
        self._real = real
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            done, _, self._pending = self._pending.rpartition("\n")
            self._console.print(done, markup=False, highlight=False, emoji=False, soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._console.print(self._pending, end="", markup=False, highlight=False, emoji=False,
                                soft_wrap=True)
            self._pending = ""

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._real.fileno()


def _stdout_is_a_pipe(stream) -> bool:
    """stdout goes into a pipe (``| grep``, ``| head``, ``| less``): whatever reads it most likely prints on
    the terminal the progress bar is drawn on, where its lines would land in the bar's line."""
    import stat

    try:
        return stat.S_ISFIFO(os.fstat(stream.fileno()).st_mode) or stat.S_ISSOCK(os.fstat(stream.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):
        return False


class Progress:
    """Context manager; ``advance(n)``. Silent unless stderr is a terminal, and while stdout goes into a
    pipe (its reader prints on that terminal too, across the bar). While the bar shows, stdout lines for the
    same terminal go above it; sizes are binary (KiB, MiB), as everywhere."""

    _p = _task = _saved_stdout = None  # the rich bar, its task, and stdout while the bar shows (until __enter__)

    def __init__(self, out: Output, total: int | None, description: str):
        self.enabled = not out.quiet and sys.stderr.isatty() and (total is None or total > 0) \
            and not _stdout_is_a_pipe(out._stdout)
        self.out = out
        self.total = total
        self.description = description

    def __enter__(self):
        if self.enabled:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                ProgressColumn,
                TextColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress
            from rich.text import Text

            class BinarySpeedColumn(ProgressColumn):
                def render(self, task):
                    speed = task.finished_speed or task.speed
                    return Text("?" if speed is None else f"{human_bytes(int(speed))}/s")

            self.out.flush()
            self._p = RichProgress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                                   BinarySpeedColumn(), TimeRemainingColumn(), console=self.out.err_console,
                                   transient=True, redirect_stdout=False, redirect_stderr=True)
            self._p.__enter__()
            self._task = self._p.add_task(self.description, total=self.total)
            try:
                stdout_tty = self.out._stdout.isatty()
            except (AttributeError, ValueError):
                stdout_tty = False
            if stdout_tty:
                self._saved_stdout = self.out._stdout
                self.out._stdout = _AboveTheBar(self._p.console, self._saved_stdout)
        return self

    def advance(self, n: int) -> None:
        if self._p is not None:
            self._p.advance(self._task, n)

    def __exit__(self, *exc):
        if self._p is not None:
            if self._saved_stdout is not None:
                self.out._stdout.flush()
                self.out._stdout = self._saved_stdout
                self._saved_stdout = None
            self._p.__exit__(*exc)
        return False


def human_bytes(n: int) -> str:
    """Sizes for people, in binary units (B, KiB, MiB, GiB, TiB), the one unit system kltool prints."""
    f = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if f < 1024 or unit == "TiB":
            return f"{int(f)} {unit}" if unit == "B" else f"{f:.1f} {unit}"
        f /= 1024
    return str(n)
