"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import UsageError
from ..output import Output, human_bytes
from ..storage.select import parse_partitions
from ..storage.select import select as _select
from ..timeutil import format_time
from ..timeutil import parse_time as _parse_time

__all__ = ["parse_time", "format_time", "parse_partitions", "select", "human_bytes", "selection_options",
           "paths_argument", "partitions_of_files", "total_size", "loose_file_findings", "range_records",
           "print_notes", "warn_held", "finish_run"]


# 2001-01-01T00:00:00Z in epoch ms: a bare number below it (and above 0) is more likely seconds than a time
# in 1970, and kltool reads bare numbers as milliseconds, as Kafka's tools do.
_MS_2001 = 978_307_200_000


def parse_time(value: str | None) -> int | None:
    """The command line's times (:func:`kltool.timeutil.parse_time`: ISO-8601, ``now`` or epoch ms). A bare
    number that is a time before 2001 gets a warning on stderr that it was read as milliseconds (the
    seconds it more likely is are 1000 times more)."""
    t = _parse_time(value)
    if t is not None and 0 < t < _MS_2001 and value.strip().isdigit():
        msg = (f"time {value.strip()} is read as epoch milliseconds ({format_time(t)}); if you meant seconds, "
               f"give {t * 1000} or {format_time(t * 1000)}")
        ctx = click.get_current_context(silent=True)
        out = ctx.find_object(Output) if ctx is not None else None
        if out is not None:
            out.warn(msg)
        else:
            import sys

            print(f"kltool: warning: {msg}", file=sys.stderr)
    return t


def selection_options(f):
    """--topic and --partition, for commands that take a log dir."""
    f = click.option("--partition", "-p", "partition_spec", metavar="N[,N..]",
                     help="Only these partition numbers (e.g. 0,2,5-7).")(f)
    f = click.option("--topic", metavar="GLOB", help="Only topics matching this glob (e.g. 'orders*').")(f)
    return f


def paths_argument(f):
    return click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str, readable=False))(f)


def partitions_of_files(out, sel, command: str):
    """For commands that work per partition (info, offsets): a segment or index file given as PATH
    stands for the partition directory that holds it (said on stderr). A file outside a partition
    directory is bad input."""
    from ..storage import open_partition
    from ..storage.logdir import _partition_name

    if not sel.files:
        return sel
    seen = {p.path for p in sel.partitions}
    for f in sel.files:
        d = f.parent if f.parent.name else Path(os.path.abspath(f.parent))
        if _partition_name(d.resolve().name) is None:
            raise UsageError(f"{command} works per partition and this file is not in a partition directory "
                             f"(kltool dump and verify read single files)", path=f)
        if d not in seen:
            seen.add(d)
            sel.partitions.append(open_partition(d))
            out.info(f"{f}: {command} of its partition {d}")
    sel.files = []
    return sel


def select(paths, topic, partition_spec):
    """The PATH arguments with --topic/--partition applied (storage.select.select: a filter that
    selects nothing is an error). When PATHs name only files kltool does not know (a README.md, a
    typo'd name), that is bad input too: exit 2, not a "clean" result over nothing."""
    sel = _select(paths, topic, partition_spec)
    if sel.files and not sel.partitions and not sel.logdirs:
        from ..format.names import classify

        if all(classify(f)[0] == "unknown" for f in sel.files):
            raise UsageError("not a Kafka file (.log, .index, .timeindex, .txnindex, .snapshot, checkpoint, "
                             "partition.metadata, meta.properties), partition directory or log dir",
                             path=sel.files[0])
    return sel


def total_size(sel) -> int:
    """The bytes of the selection's segments and files, for a progress bar: what cannot be read counts 0
    (the command reports it when it gets there)."""
    total = 0
    for p in sel.partitions:
        try:
            total += sum(s.size for s in p.segments)
        except OSError:
            pass
    for f in sel.files:
        try:
            total += f.stat().st_size
        except OSError:
            pass
    return total


def loose_file_findings(problems, command: str = "verify --repair") -> list:
    """``problems`` of a repair plan, where a damaged file that the repair skipped (a file given on its own
    that is not a segment of a partition: ``damaged.log``, a checkpoint) becomes a ``not_repairable`` error
    that says what to do instead, so that the run does not end in "nothing to do" and exit 0."""
    from ..format.names import classify
    from ..storage.check.verify import VerifyStats, verify_file
    from ..storage.findings import Finding

    out = []
    for pr in problems:
        f = Path(pr.file)
        if pr.kind != "skipped" or "kltool backup" in pr.message or not f.is_file():
            out.append(pr)
            continue
        errors = [x for x in verify_file(f, deep=False, stats=VerifyStats()) if x.severity == "error"]
        if not errors:
            out.append(pr)
            continue
        if classify(f)[0] == "log":
            todo = (f"to repair it, copy it into a directory named like a partition as a segment, e.g. mkdir -p fix/t-0 "
                    f"&& cp {f} fix/t-0/00000000000000000000.log (its base offset, 20 digits), then kltool {command} "
                    f"--dry-run fix/t-0")
        else:
            todo = "kltool verify shows what is wrong with it"
        out.append(Finding("error", "not_repairable", str(f), f"{len(errors)} problem(s), not repaired: {command} "
                           f"changes segments, partition directories and log dirs, not a file on its own; {todo}"))
    return out


def range_records(cut) -> tuple[int | None, bool]:
    """The records a damaged range that a repair cuts held: ``(count, spanned)``. Its own count when the
    batches in it could be read; else, when the offsets it held are known (from the batches around it),
    the offsets it spans (``spanned`` True; a compacted log may have held fewer); else (None, False)."""
    if cut.records is not None:
        return cut.records, False
    if cut.first_offset is not None and cut.last_offset is not None and cut.last_offset >= cut.first_offset:
        return cut.last_offset - cut.first_offset + 1, True
    return None, False


def print_notes(out, notes) -> None:
    """A plan's notes (:class:`kltool.storage.findings.Finding`) on stderr, ``FILE: MESSAGE``: warnings as
    warnings, the rest as information."""
    for n in notes:
        msg = f"{n.file}: {n.message}"
        out.warn(msg) if n.severity == "warning" else out.info(msg)


def warn_held(out, logdirs, detail: str) -> None:
    """For a dry run, which only warns: each log dir (a path) whose ``.lock`` a broker or another kltool holds,
    as ``<log dir>/.lock: ... (DETAIL)``."""
    from ..storage.fs import LOCK_FILE_NAME, lock_holder_present

    for ld in logdirs:
        if lock_holder_present(ld):
            out.warn(f"{Path(ld) / LOCK_FILE_NAME}: a broker or another kltool holds this log dir ({detail})")


def finish_run(out, command: str, summary: dict, line: str, manifests) -> None:
    """The last words of a command that plans and applies: the summary as one JSON object, or its ``line``
    and each backup manifest with how to undo the run."""
    if out.json_mode:
        out.emit(summary)
        return
    out.line(line)
    for m in manifests:
        out.line(f"{command}: backup manifest {m} (undo: kltool restore {m})")
