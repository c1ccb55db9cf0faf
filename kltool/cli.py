"""The ``kltool`` command: a click group whose subcommands are loaded lazily, so that
``kltool --help`` and the quick commands never import pyspark or pyarrow."""

from __future__ import annotations

import errno
import importlib
import importlib.util
import os
import sys

import click

from . import __version__
from .errors import KltoolError
from .output import Output, silence_stdout, visible

# name -> (module, short help). Each module defines ``command`` (a click.Command).
COMMANDS = {
    "info": ("kltool.commands.info", "Overview of topics, partitions, segments, sizes, offsets and times."),
    "dump": ("kltool.commands.dump", "Print batches, records, indexes, snapshots and checkpoint files."),
    "verify": ("kltool.commands.verify", "Check CRCs, structure and indexes; --repair fixes what it finds."),
    "rebuild-index": ("kltool.commands.rebuild_index", "Rebuild .index/.timeindex/.txnindex by Kafka's rules."),
    "restore": ("kltool.commands.restore", "Undo a repair or retention run from its backup manifest."),
    "create": ("kltool.commands.create", "Create a topic's partition directories offline."),
    "append": ("kltool.commands.append", "Append records as real batches (every codec, rolling, indexes)."),
    "offsets": ("kltool.commands.offsets", "Offsets by time, earliest/latest, true record counts."),
    "retention": ("kltool.commands.retention", "Apply time, size and start-offset retention offline."),
    "transactions": ("kltool.commands.transactions", "Open and hanging transactions, LSO, aborted ranges vs .txnindex."),
    "producers": ("kltool.commands.producers", "Producer state as the broker rebuilds it (snapshot + log)."),
    "diff": ("kltool.commands.diff", "Where two copies of a partition or log dir diverge, and what each lacks."),
    "tiered-fetch": ("kltool.commands.tiered_fetch", "Reassemble segments of Aiven's tiered-storage plugin."),
    "compact": ("kltool.commands.compact", "Compact partitions like the broker's log cleaner, offline."),
    "spark-report": ("kltool.commands.spark_report", "Batch analytics on a local or remote Spark."),
    "completion": ("kltool.commands.completion", "Print the shell completion script (bash, zsh, fish)."),
}


def _set_global(attr: str, value):
    def callback(ctx, param, given):
        if given:
            out = ctx.find_object(Output)
            if out is not None:
                setattr(out, attr, value)
    return callback


# The group's options, accepted after the subcommand too (`kltool verify --json PATH`).
GLOBAL_OPTIONS = (
    (("--json",), "json_mode", True, "Print JSON lines on stdout (stable schema, version 1)."),
    (("--quiet", "-q"), "quiet", True, "No progress or info messages on stderr."),
    (("--no-color",), "color", False, "No colours (also: the NO_COLOR environment variable)."),
)


def _add_global_options(cmd: click.Command) -> None:
    if getattr(cmd, "_kltool_global_options", False):
        return
    taken = {o for p in cmd.params for o in getattr(p, "opts", ())}
    for opts, attr, value, help_ in GLOBAL_OPTIONS:
        if taken.intersection(opts):
            continue
        cmd.params.append(click.Option(list(opts), is_flag=True, expose_value=False, is_eager=True,
                                       callback=_set_global(attr, value), help=help_ + " (Global option.)"))
    cmd._kltool_global_options = True


class _StdoutClosed(Exception):
    """stdout's reader went away (``kltool dump | head``) and the command stopped: ``code`` is the exit code
    (0 for the commands that stop quietly, 141 for the others; see :data:`QUIET_ON_CLOSED_STDOUT`)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


# Commands that stop quietly (exit 0) when stdout's reader goes away, as kafka-dump-log.sh and kcat do:
# their output is the product, not a verdict (click would say 1). Every other command carries on with
# stdout silenced (a repair is never cut short by `| head`) and exits with its own code, so that
# `set -o pipefail; kltool verify DIR | head -1` still fails on a damaged DIR. If stdout breaks where
# kltool cannot carry on, such a command exits 141 (128 + SIGPIPE), as Unix tools do, never 0.
QUIET_ON_CLOSED_STDOUT = frozenset({"dump", "completion"})
EXIT_SIGPIPE = 141


class LazyGroup(click.Group):
    def invoke(self, ctx):
        try:
            rv = super().invoke(ctx)
            if isinstance(ctx.obj, Output):
                ctx.obj.flush()  # here, not only in the context's close, where click would see the EPIPE
            return rv
        except BrokenPipeError as e:
            quiet = ctx.invoked_subcommand in QUIET_ON_CLOSED_STDOUT
            raise _StdoutClosed(0 if quiet else EXIT_SIGPIPE) from e

    def list_commands(self, ctx):
        return [n for n, (mod, _h) in COMMANDS.items() if importlib.util.find_spec(mod) is not None]

    def get_command(self, ctx, name):
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        try:
            mod = importlib.import_module(entry[0])
        except ModuleNotFoundError as e:
            if e.name == entry[0]:
                return None
            raise
        cmd = mod.command
        _add_global_options(cmd)
        return cmd

    def format_commands(self, ctx, formatter):
        rows = [(n, COMMANDS[n][1]) for n in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--json", "json_mode", is_flag=True, help=GLOBAL_OPTIONS[0][3])
@click.option("--quiet", "-q", is_flag=True, help=GLOBAL_OPTIONS[1][3])
@click.option("--no-color", is_flag=True, help=GLOBAL_OPTIONS[2][3])
@click.version_option(__version__, prog_name="kltool")
@click.pass_context
def cli(ctx, json_mode, quiet, no_color):
    """kltool: read, verify, repair and write Apache Kafka log directories offline.

    PATH arguments take a log dir (a log.dirs entry), a partition directory, or single files.
    Exit codes: 0 ok/clean, 1 problems found or work planned, 2 bad usage or unreadable input,
    3 refused (a live broker holds the directory, or the change is unsafe).
    """
    ctx.obj = Output(json_mode=json_mode, quiet=quiet, color=False if no_color else None,
                     carry_on_closed_stdout=ctx.invoked_subcommand not in QUIET_ON_CLOSED_STDOUT)
    ctx.call_on_close(ctx.obj.flush)  # Output.write_bytes() keeps up to ~1 MiB


def _usage_line(e: click.ClickException) -> str:
    """click's usage error as one line that names the option (or argument) and what it takes:
    ``dump: --limit: 0 is not in the range x>=1 (give a whole number of at least 1; kltool dump --help lists
    the options)``, not click's four lines (Usage, Try, a blank line, Error)."""
    ctx = getattr(e, "ctx", None)
    path = ctx.command_path if ctx is not None else "kltool"
    sub = path.partition(" ")[2]
    where = f"{sub}: " if sub else ""
    what = "options" if sub else "commands and options"
    hint = f"{path} --help lists the {what}"
    param = getattr(e, "param", None)
    if isinstance(e, click.BadParameter) and not isinstance(e, click.MissingParameter) and param is not None:
        name = param.name.upper() if isinstance(param, click.Argument) else max(param.opts, key=len)
        if isinstance(param.type, click.IntRange):
            hint = f"give {_range_text(param.type)}; {hint}"
        return f"{where}{name}: {e.message.rstrip('.')} ({hint})"
    if isinstance(e, click.MissingParameter) and isinstance(param, click.Argument):
        return f"{where}missing argument {param.name.upper()} ({hint})"
    msg = e.format_message().rstrip(".")
    if ctx is None:
        return f"{msg[:1].lower()}{msg[1:]}"
    return f"{where}{msg[:1].lower()}{msg[1:]} ({hint})"


def _range_text(r: click.IntRange) -> str:
    lo = None if r.min is None else r.min + (1 if r.min_open else 0)
    hi = None if r.max is None else r.max - (1 if r.max_open else 0)
    if lo is not None and hi is not None:
        return f"a whole number from {lo} to {hi}"
    if lo is not None:
        return f"a whole number of at least {lo}"
    return f"a whole number of at most {hi}"


def _os_error_message(e: OSError) -> str:
    name = e.filename if e.filename is not None else ""
    reason = e.strerror or str(e)
    if e.errno == errno.ENOENT:
        reason = "no such file or directory"
    elif e.errno == errno.EACCES:
        reason = "permission denied"
    elif e.errno == errno.EISDIR:
        reason = "is a directory"
    elif e.errno == errno.ENOTDIR:
        reason = "not a directory"
    return f"{name}: {reason}" if name else reason


def main(argv=None) -> None:
    """Entry point: maps every error to one line on stderr and an exit code, never a traceback."""
    debug = bool(os.environ.get("KLTOOL_DEBUG"))
    try:
        rv = cli.main(args=argv, prog_name="kltool", standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except click.exceptions.Exit as e:
        code = e.exit_code
    except click.ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `kltool` alone: the help, as before
            e.show()
        else:
            print(f"kltool: error: {visible(_usage_line(e))}", file=sys.stderr)
        code = 2
    except click.exceptions.Abort:
        print("kltool: aborted", file=sys.stderr)
        code = 130
    except KltoolError as e:
        if debug:
            raise
        print(f"kltool: error: {visible(str(e))}", file=sys.stderr)
        code = e.exit_code
    except _StdoutClosed as e:
        silence_stdout()  # the reader went away (e.g. `| head`)
        code = e.code
    except BrokenPipeError:
        silence_stdout()
        code = EXIT_SIGPIPE
    except KeyboardInterrupt:
        print("kltool: interrupted", file=sys.stderr)
        code = 130
    except OSError as e:
        if debug:
            raise
        print(f"kltool: error: {visible(_os_error_message(e))}", file=sys.stderr)
        code = 2
    except Exception as e:  # a bug: still one line, with a hint to get the traceback
        if debug:
            raise
        print(f"kltool: internal error: {type(e).__name__}: {visible(str(e))} (set KLTOOL_DEBUG=1 for a traceback)",
              file=sys.stderr)
        code = 70
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    if argv is None and not debug:
        _exit_process(code)
    sys.exit(code)


def _exit_process(code: int) -> None:
    """End the ``kltool`` process without tearing the interpreter down.

    Python's own exit frees every module and object one by one: 6-10 ms of each run, more than verify
    spends on 30 MB. Nothing kltool leaves needs it: every file it writes is closed (and fsynced)
    before its command returns. atexit handlers still run (pyspark's, logging's), standard streams are
    flushed, and while any other thread is alive (a Spark gateway) the normal exit is taken.
    Only the console entry point comes here; ``main([...])`` from Python raises SystemExit as before.
    """
    import threading

    if threading.active_count() > 1:
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
