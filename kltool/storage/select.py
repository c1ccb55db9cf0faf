"""Choosing partitions: ``--partition`` lists (``0,2,5-7``) and PATH arguments filtered by topic glob and
partition numbers, with an error that names what is there when a filter selects nothing.

Used by the commands and by the Spark data source alike (so ``spark/`` never imports ``commands/``)."""

from __future__ import annotations

import fnmatch

from ..errors import UsageError

__all__ = ["parse_partitions", "select"]


def parse_partitions(value: str | None) -> set[int] | None:
    """``0,2,5-7`` → {0, 2, 5, 6, 7}; None stays None. Anything else is a :class:`UsageError`."""
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


def select(paths, topic: str | None, partition_spec: str | None):
    """Open the PATH arguments and apply the topic glob and partition list. A filter that selects no
    partition is bad input (a UsageError naming the filter and what is there), never an empty result."""
    from .logdir import open_paths

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
