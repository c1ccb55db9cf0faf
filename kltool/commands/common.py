"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import datetime as _dt

import click

from ..errors import UsageError


def parse_time(value: str | None) -> int | None:
    """ISO-8601 (naive = UTC) or epoch milliseconds → epoch ms."""
    if value is None:
        return None
    v = value.strip()
    if v.lstrip("-").isdigit():
        return int(v)
    if v.lower() == "now":
        return int(_dt.datetime.now(_dt.UTC).timestamp() * 1000)
    try:
        d = _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"cannot read time {value!r}: use ISO-8601 (2024-05-01T12:00:00Z) or epoch ms") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.UTC)
    return int(d.timestamp() * 1000)


def format_time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    try:
        return _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)


def parse_partitions(value: str | None) -> set[int] | None:
    if value is None:
        return None
    out = set()
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        else:
            try:
                out.add(int(part))
            except ValueError:
                raise UsageError(f"--partition takes numbers like 0,2,5-7, not {value!r}") from None
    return out


def human_bytes(n: int) -> str:
    f = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if f < 1024 or unit == "TiB":
            return f"{int(f)} {unit}" if unit == "B" else f"{f:.1f} {unit}"
        f /= 1024
    return str(n)


def selection_options(f):
    """--topic and --partition, for commands that take a log dir."""
    f = click.option("--partition", "partition_spec", metavar="N[,N..]",
                     help="Only these partition numbers (e.g. 0,2,5-7).")(f)
    f = click.option("--topic", metavar="GLOB", help="Only topics matching this glob (e.g. 'orders*').")(f)
    return f


def paths_argument(f):
    return click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str, readable=False))(f)


def select(paths, topic, partition_spec):
    from ..storage import open_paths

    sel = open_paths(paths, topic, parse_partitions(partition_spec))
    if not sel.partitions and not sel.files and not sel.logdirs:
        raise UsageError("nothing matched the paths and filters given")
    return sel
