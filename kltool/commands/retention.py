"""kltool retention: time, size and log-start-offset retention offline, by the broker's rules."""

from __future__ import annotations

import re
import time

import click

from ..errors import UsageError
from ..storage.change import retention as ret
from . import common
from .common import format_time, human_bytes, parse_time, paths_argument, select, selection_options

_SIZE = re.compile(r"^\s*(-?\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def parse_size(value: str | None) -> int | None:
    """Bytes, or with a binary suffix: 500M, 10G, 1TiB (-1: unlimited)."""
    if value is None:
        return None
    m = _SIZE.match(value)
    if not m:
        raise UsageError(f"--retention-bytes takes a number of bytes (optionally 500M, 10G, 1T), not {value!r}")
    n = int(m.group(1))
    return n * 1024 ** " kmgt".index(m.group(2).lower() or " ")


def read_offset_json_file(path: str) -> dict[tuple[str, int], int]:
    """kafka-delete-records.sh's --offset-json-file: ``{"partitions": [{"topic": "t", "partition": 0,
    "offset": 42}, ...], "version": 1}`` (offset -1: the high watermark) → {(topic, partition): offset}."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise UsageError("not a JSON file (not UTF-8 text)", path=path) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"not JSON: {e.msg} (line {e.lineno}, column {e.colno})", path=path,
                         position=e.pos) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise UsageError('expected kafka-delete-records\' {"partitions": [{"topic": ..., "partition": ..., '
                         '"offset": ...}], "version": 1}', path=path)
    if doc.get("version", 1) != 1:
        raise UsageError(f"unsupported version {doc.get('version')!r} (kafka-delete-records writes 1)", path=path)
    out: dict[tuple[str, int], int] = {}
    for i, e in enumerate(doc["partitions"]):
        ok = (isinstance(e, dict) and isinstance(e.get("topic"), str) and type(e.get("partition")) is int
              and type(e.get("offset")) is int)
        if not ok:
            raise UsageError(f"partitions[{i}]: needs \"topic\" (text), \"partition\" and \"offset\" (integers), "
                             f"got {json.dumps(e)[:120]}", path=path)
        key = (e["topic"], e["partition"])
        if key in out:
            raise UsageError(f"partitions[{i}]: {key[0]}-{key[1]} appears twice (kafka-delete-records refuses "
                             f"duplicate partitions too)", path=path)
        if e["offset"] < -1:
            raise UsageError(f"partitions[{i}]: offset {e['offset']}: an offset, or -1 for the high watermark",
                             path=path)
        out[key] = e["offset"]
    if not out:
        raise UsageError("names no partitions", path=path)
    return out


def _limits(retention_ms, retention_hours, retention_bytes, before_time, now) -> dict:
    """The command line's limits as :meth:`kltool.Logs.retention` takes them (which checks each)."""
    if retention_ms is not None and retention_hours is not None:
        raise UsageError("give --retention-ms or --retention-hours, not both")
    if retention_hours is not None:
        retention_ms = -1 if retention_hours < 0 else int(retention_hours * 3600 * 1000)
    return {"retention_ms": retention_ms, "retention_bytes": parse_size(retention_bytes),
            "before_time": parse_time(before_time),
            "now": parse_time(now) if now is not None else int(time.time() * 1000)}


def _only_named(sel, offsets_by_partition: dict, paths, filtered: bool, offset_json_file: str) -> None:
    """--offset-json-file: only the partitions it names, each of which must be there."""
    have = {(p.topic, p.partition) for p in sel.partitions}
    missing = sorted(k for k in offsets_by_partition if k not in have)
    if missing:
        names = ", ".join(f"{t}-{n}" for t, n in missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise UsageError(f"names partitions that are not in {', '.join(paths)}"
                         f"{' (with the filters given)' if filtered else ''}: {names}", path=offset_json_file)
    sel.partitions = [p for p in sel.partitions if (p.topic, p.partition) in offsets_by_partition]


def _time_range(info: dict) -> str:
    return f"{format_time(info['first_timestamp'])} .. {format_time(info['largest_timestamp'])}"


_SOURCES = {ret.FROM_COMMAND_LINE: "command line", ret.FROM_TOPIC_CONFIG: "kltool-topics.json"}


def _limits_line(pp) -> str:
    def one(key, value, source):
        return f"{key} {value} ({_SOURCES[source]})" if source else f"no {key}"

    return (one("retention.ms", pp.retention_ms, pp.retention_ms_source) + ", "
            + one("retention.bytes", pp.retention_bytes, pp.retention_bytes_source))


def _print_plan(out, plan: ret.RetentionPlan) -> None:
    shown = set()
    for pp in plan.partitions:  # which limits apply to each topic, and where they come from
        key = (pp.partition.topic, _limits_line(pp))
        if not pp.skipped and pp.cleanup_policy is not None and key not in shown:
            shown.add(key)
            out.line(f"{key[0]}: {key[1]}")
    common.print_notes(out, plan.all_notes)
    rows = []
    for a in plan.actions:
        i = a.info
        if a.op == "delete" and i.get("kind") == "segment":
            offsets = "-" if i["first_offset"] is None else f"{i['first_offset']}..{i['last_offset']}"
            src = "" if i["timestamp_source"] in ("timeindex", "timeindex+batches", "batches") else \
                f" ({i['timestamp_source']})"
            rows.append([a.topic, a.partition, a.file.name, offsets, _time_range(i) + src,
                         i["records"], human_bytes(i["bytes"]), i["reason"]])
    if rows:
        out.table(["topic", "part", "segment", "offsets", "time range", "records", "size", "reason"], rows,
                  justify={"part": "right", "records": "right", "size": "right"})
    for pp in plan.partitions:
        if not pp.actions:
            continue
        extra = []
        for a in pp.actions:
            k = a.info.get("kind")
            if a.op == "roll":
                extra.append(f"empty segment rolled at {a.info['base_offset']}")
            elif k == "leader_epoch":
                extra.append("leader-epoch-checkpoint truncated")
        for k, what in (("snapshot", "producer snapshot(s) below the log start"), ("leftover", "leftover file(s)")):
            n = sum(1 for a in pp.actions if a.info.get("kind") == k)
            if n:
                extra.append(f"{n} {what} removed")
        start = (f"log start {pp.log_start_offset} -> {pp.new_log_start_offset}"
                 if pp.new_log_start_offset != pp.log_start_offset else f"log start {pp.log_start_offset}")
        out.line(f"{pp.name}: {start} (log end {pp.log_end_offset}), {len(pp.deleted)} segments "
                 f"({human_bytes(pp.segment_bytes)}), {human_bytes(pp.reclaimed_bytes)} reclaimed"
                 + ("; " + "; ".join(extra) if extra else ""))


@click.command("retention")
@paths_argument
@selection_options
@click.option("--retention-ms", type=int, metavar="MS", help="Time retention: a segment goes when now - its largest "
              "timestamp > MS (-1: unlimited). Default: the topic's setting, else 604800000 (7 days).")
@click.option("--retention-hours", type=float, metavar="H", help="--retention-ms in hours.")
@click.option("--retention-bytes", metavar="BYTES", help="Size retention per partition (500M, 10G, ...; -1: "
              "unlimited): oldest segments go while the rest stays >= BYTES. Default: the topic's, else -1.")
@click.option("--before-offset", type=int, metavar="OFFSET", help="New log start offset, like kafka-delete-records "
              "(-1: the high watermark). Alone, no time or size retention is applied.")
@click.option("--before-time", metavar="T", help="New log start offset at the first record with timestamp >= T.")
@click.option("--offset-json-file", type=click.Path(path_type=str, dir_okay=False, readable=False), metavar="FILE",
              help="kafka-delete-records.sh's JSON file: a new log start offset per partition (-1: the high "
              "watermark). Only the partitions it names change; alone, no time or size retention.")
@click.option("--now", metavar="T", help="Evaluate time retention at T (ISO-8601 or epoch ms) instead of now.")
@click.option("--dry-run", is_flag=True, help="Print the plan, change nothing (exit 1 when there is work).")
@click.option("--backup-dir", type=click.Path(path_type=str, readable=False), help="Where removed files are moved "
              "(with a manifest kltool restore undoes). Default: <log dir>.kltool-backup beside the log dir.")
@click.option("--no-backup", is_flag=True, help="Delete the broker's way (renamed *.deleted, then removed): nothing "
              "is kept.")
@click.pass_obj
def command(out, paths, topic, partition_spec, retention_ms, retention_hours, retention_bytes, before_offset,
            before_time, offset_json_file, now, dry_run, backup_dir, no_backup):
    """Delete old segments like the broker's retention check: log start offset, size, then time;
    oldest first, stopping at the first segment that must stay. Only the limits given here or stored
    for the topic (kltool create --config) apply, never Kafka's defaults; with none, exit 2. What is
    deleted is backed up beside the log dir (kltool restore undoes it) unless --no-backup. Topics whose
    cleanup.policy is only compact are left alone. Refuses (exit 3) while a broker holds the log dir's .lock.
    """
    from ..api import Logs

    limits = _limits(retention_ms, retention_hours, retention_bytes, before_time, now)
    offsets_by_partition = None
    if offset_json_file is not None:
        if before_offset is not None or before_time is not None:
            raise UsageError("give --offset-json-file, --before-offset or --before-time, not two of them")
        offsets_by_partition = read_offset_json_file(offset_json_file)
    sel = select(paths, topic, partition_spec)
    if offsets_by_partition is not None:
        _only_named(sel, offsets_by_partition, paths, bool(topic or partition_spec), offset_json_file)
    if dry_run:
        common.warn_held(out, dict.fromkeys(p.logdir.path for p in sel.partitions if p.logdir is not None), "planning only")
    logs = Logs.from_selection(sel, *paths, topic=topic, partitions=partition_spec)
    plan = logs.retention(**limits, before_offset=before_offset, before_offsets=offsets_by_partition,
                          dry_run=dry_run, backup=not no_backup, backup_dir=backup_dir,
                          on_plan=lambda p: _show_plan(out, p, dry_run),
                          on_action=(lambda a: out.emit(a.to_json())) if out.json_mode else None)
    summary = ret.summarize(plan)
    summary.update({"dry_run": dry_run, "now": limits["now"], "manifests": [str(m) for m in plan.manifests]})
    verb = "would be" if dry_run else "were"
    line = (f"retention{' (dry run)' if dry_run else ''}: {summary['segments_deleted']} segments "
            f"({human_bytes(summary['segment_bytes'])}, {summary['records_deleted']} records) in "
            f"{summary['partitions_changed']} of {summary['partitions']} partitions {verb} removed, "
            f"{human_bytes(summary['reclaimed_bytes'])} reclaimed"
            + (f"; {summary['warnings']} warnings" if summary["warnings"] else ""))
    common.finish_run(out, "retention", summary, line, plan.manifests)
    return 1 if dry_run and plan.has_work else 0


def _show_plan(out, plan: ret.RetentionPlan, dry_run: bool) -> None:
    if not out.json_mode:
        _print_plan(out, plan)
        return
    for n in plan.notes:
        out.emit(n.to_json())
    for pp in plan.partitions:
        for n in pp.notes:
            out.emit(n.to_json())
        if pp.actions:
            out.emit(pp.to_json())
    if dry_run:
        for a in plan.actions:
            out.emit(a.to_json())
