"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import UsageError
from ..output import human_bytes
from ..storage.select import parse_partitions
from ..storage.select import select as _select
from ..timeutil import format_time, parse_time

__all__ = ["parse_time", "format_time", "parse_partitions", "select", "human_bytes", "selection_options",
           "paths_argument", "partitions_of_files"]


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
