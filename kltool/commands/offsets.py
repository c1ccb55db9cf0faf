"""kltool offsets: offset by time, earliest, latest, max timestamp and true record counts, per partition."""

from __future__ import annotations

import click

from ..errors import UsageError
from ..kafka_text import shown_offsets
from .common import format_time, partitions_of_files, paths_argument, select, selection_options

# ListOffsets' special timestamps and kafka-get-offsets' names for them (--time -1/latest, ...)
SPECIAL_TIMES = {-1: "latest", -2: "earliest", -3: "max_timestamp", -4: "earliest"}
SPECIAL_NAMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "max_timestamp": -3, "earliest-local": -4}


def _target_time(value: str | None) -> tuple[int | None, set[str]]:
    from .common import parse_time

    if value is None:
        return None, set()
    v = value.strip().lower()
    if v in ("latest-tiered", "-5", "earliest-pending-upload", "-6"):
        raise UsageError(f"--time {value}: there is no tiered storage in a log dir read offline (use latest, "
                         f"earliest or max-timestamp)")
    if v in SPECIAL_NAMES:
        return None, {SPECIAL_TIMES[SPECIAL_NAMES[v]]}
    t = parse_time(value)
    if t < 0:
        if t not in SPECIAL_TIMES:
            raise UsageError(f"--time {value}: a negative time must be -1 (latest), -2 (earliest) or -3 "
                             f"(max-timestamp), as in kafka-get-offsets")
        return None, {SPECIAL_TIMES[t]}
    return t, set()


def _row(d: dict, target, modes) -> list:
    part = d["partition"] if "state" not in d else f"{d['partition']} ({d['state']})"
    row = [d["topic"], part]
    if "earliest" in modes:
        row.append(d["log_start_offset"])
    if "latest" in modes:
        row.append(d["log_end_offset"])
    if target is not None:
        row += ["-" if d["offset"] is None else d["offset"], format_time(d["timestamp"])]
    if "max_timestamp" in modes:
        row += ["-" if d["max_timestamp_offset"] is None else d["max_timestamp_offset"],
                format_time(d["max_timestamp"])]
    if "count" in modes:
        row += [d["records"], d["offset_span"]]
    return row


def kafka_line(d: dict, modes: set[str], target) -> str | None:
    """kafka-get-offsets.sh's line, ``topic:partition:offset``; None where it prints nothing (no offset)."""
    if target is not None:
        off = d["offset"]
    elif "earliest" in modes:
        off = d["log_start_offset"]
    elif "latest" in modes:
        off = d["log_end_offset"]
    else:
        off = d["max_timestamp_offset"]
    return None if off is None else f"{d['topic']}:{d['partition']}:{off}"


@click.command("offsets")
@paths_argument
@selection_options
@click.option("--time", "time_", metavar="T", help="First offset whose record timestamp is >= T (ISO-8601 or epoch "
              "ms), or as in kafka-get-offsets: latest (-1), earliest (-2), max-timestamp (-3).")
@click.option("--earliest", is_flag=True, help="The log start offset.")
@click.option("--latest", is_flag=True, help="The log end offset (the offset the next record gets).")
@click.option("--max-timestamp", is_flag=True, help="The largest record timestamp and the offset of its record.")
@click.option("--count", is_flag=True, help="The true number of records (reads every batch header), next to "
              "log end - log start, which compaction and gaps make wrong.")
@click.option("--format", "fmt", type=click.Choice(["table", "kafka"]), default="table", show_default=True,
              help="kafka: topic:partition:offset lines, as kafka-get-offsets.sh prints (one offset kind; "
              "default latest).")
@click.pass_obj
def command(out, paths, topic, partition_spec, time_, earliest, latest, max_timestamp, count, fmt):
    """Offsets per partition, found like the broker finds them: segments by largest timestamp, then
    the .timeindex, then the .index, then a short scan. Without options: --earliest --latest.
    A segment file stands for its partition.
    """
    from ..api import Logs

    target, modes = _target_time(time_)
    modes |= {name for flag, name in ((earliest, "earliest"), (latest, "latest"), (max_timestamp, "max_timestamp"),
                                      (count, "count")) if flag}
    if fmt == "kafka":
        modes = _kafka_modes(out, target, modes)
    if not modes and target is None:
        modes = {"earliest", "latest"}
    sel = partitions_of_files(out, select(paths, topic, partition_spec), "offsets")
    if not sel.partitions:
        raise UsageError("offsets needs a log dir or partition directories: none found in " + ", ".join(paths))
    warnings: list[str] = []
    results = []
    for d in Logs.from_selection(sel, *paths, topic=topic, partitions=partition_spec).offsets(
            time=target, warnings=warnings, **{m: True for m in modes}):
        d = shown_offsets(d)
        results.append(d)
        if out.json_mode:
            out.emit(d)
    for w in warnings:
        out.warn(w)
    if fmt == "kafka":  # sorted as kafka-get-offsets sorts (TopicPartition.toString); no line without offset
        for d in sorted(results, key=lambda d: f"{d['topic']}-{d['partition']}"):
            ln = kafka_line(d, modes, target)
            if ln is not None:
                out.line(ln)
    elif out.json_mode:
        s = {"type": "summary", "partitions": len(results)}
        if "count" in modes:
            s["records"] = sum(d.get("records", 0) for d in results)
        if target is not None:
            s["found"] = sum(1 for d in results if d["offset"] is not None)
        out.emit(s)
    else:
        _table(out, results, target, modes)
    return 0


def _kafka_modes(out, target, modes: set[str]) -> set[str]:
    """--format kafka: one offset kind per partition (kafka-get-offsets' default: latest)."""
    if out.json_mode:
        raise UsageError("--format kafka and --json are two output formats: give one")
    if "count" in modes or len(modes) + (target is not None) > 1:
        raise UsageError("--format kafka prints one offset per partition: give one of --time, --earliest, "
                         "--latest, --max-timestamp")
    if not modes and target is None:
        return {"latest"}
    return modes


def _table(out, results: list[dict], target, modes: set[str]) -> None:
    cols = ["topic", "part"]
    if "earliest" in modes:
        cols.append("log start")
    if "latest" in modes:
        cols.append("log end")
    if target is not None:
        cols += [f"offset at {format_time(target)}", "timestamp"]
    if "max_timestamp" in modes:
        cols += ["max ts offset", "max timestamp"]
    if "count" in modes:
        cols += ["records", "end - start"]
    out.table(cols, [_row(d, target, modes) for d in results],
              justify={c: "right" for c in cols if c not in ("topic", "timestamp", "max timestamp")})
    if "count" in modes:
        out.line(f"{len(results)} partitions, {sum(d.get('records', 0) for d in results)} records")
