"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import click

from ..output import human_bytes
from ..storage.select import parse_partitions, select
from ..timeutil import format_time, parse_time

__all__ = ["parse_time", "format_time", "parse_partitions", "select", "human_bytes", "selection_options",
           "paths_argument"]


def selection_options(f):
    """--topic and --partition, for commands that take a log dir."""
    f = click.option("--partition", "-p", "partition_spec", metavar="N[,N..]",
                     help="Only these partition numbers (e.g. 0,2,5-7).")(f)
    f = click.option("--topic", metavar="GLOB", help="Only topics matching this glob (e.g. 'orders*').")(f)
    return f


def paths_argument(f):
    return click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str, readable=False))(f)
