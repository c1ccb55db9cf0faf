"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import datetime as _dt

import click

from ..errors import UsageError
from ..output import human_bytes  # noqa: F401  (the one size formatter; re-exported)


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
    try:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part[1:]:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if lo < 0 or hi < lo:
                    raise ValueError(part)
                out.update(range(lo, hi + 1))
            else:
                n = int(part)
                if n < 0:
                    raise ValueError(part)
                out.add(n)
    except ValueError:
        raise UsageError(f"--partition takes partition numbers like 0,2,5-7, not {value!r}") from None
    if not out:
        raise UsageError(f"--partition takes partition numbers like 0,2,5-7, not {value!r}")
    return out


def selection_options(f):
    """--topic and --partition, for commands that take a log dir."""
    f = click.option("--partition", "-p", "partition_spec", metavar="N[,N..]",
                     help="Only these partition numbers (e.g. 0,2,5-7).")(f)
    f = click.option("--topic", metavar="GLOB", help="Only topics matching this glob (e.g. 'orders*').")(f)
    return f


def paths_argument(f):
    return click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str, readable=False))(f)


def select(paths, topic, partition_spec):
    """Open the PATH arguments and apply --topic/--partition. A filter that selects no partition is
    bad input (exit 2, naming the filter and what is there), never an empty "clean" result."""
    from ..storage import open_paths

    wanted = parse_partitions(partition_spec)
    sel = open_paths(paths)
    if topic is None and wanted is None:
        if not sel.partitions and not sel.files and not sel.logdirs:
            raise UsageError("nothing matched the paths given")
        return sel
    filtered = sel.filter(topic, wanted)
    if not filtered.partitions and not filtered.files:
        raise UsageError(_no_match_message(sel, paths, topic, partition_spec))
    return filtered


def _no_match_message(sel, paths, topic, partition_spec) -> str:
    import fnmatch

    given = " ".join(f for f in ((f"--topic {topic!r}" if topic is not None else ""),
                                 (f"--partition {partition_spec}" if partition_spec is not None else "")) if f)
    where = ", ".join(str(p) for p in paths)
    if not sel.partitions:
        return f"{given} selects nothing: {where} holds no partition directories"
    topics = sorted({p.topic for p in sel.partitions})
    if topic is not None and not any(fnmatch.fnmatchcase(t, topic) for t in topics):
        shown = ", ".join(topics[:10]) + (f", ... ({len(topics)} topics)" if len(topics) > 10 else "")
        return f"--topic {topic!r} matches no topic in {where} (topics there: {shown})"
    numbers = sorted({p.partition for p in sel.partitions
                      if topic is None or fnmatch.fnmatchcase(p.topic, topic)})
    shown = ",".join(str(n) for n in numbers[:20]) + (",..." if len(numbers) > 20 else "")
    return f"{given} selects no partition in {where} (partitions there: {shown})"
