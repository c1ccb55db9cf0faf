"""kltool compact: one pass of the broker's log cleaner, offline (kltool.storage.change.compact)."""

from __future__ import annotations

import contextlib
import time

import click

from ..errors import UsageError
from ..storage.change import compact as cp
from . import common
from .common import format_time, human_bytes, parse_time, paths_argument, select, selection_options

EXAMPLES = """
\b
Examples:
  kltool compact /var/lib/kafka/data --topic orders --dry-run   # what one cleaner pass would keep
  kltool compact /var/lib/kafka/data -p 0 --topic orders        # compact, old segments backed up
  kltool compact DATA --now 2024-06-01T00:00:00Z --dry-run      # tombstones past their horizon then?
  kltool compact DATA --topic t --config delete.retention.ms=0 --dedupe-buffer-size 2M
  kltool restore DATA.kltool-backup                             # undo (the old segments come back)
"""


def _size(value: str | None) -> int | None:
    if value is None:
        return None
    from .retention import parse_size

    try:
        n = parse_size(value)
    except UsageError:
        raise UsageError(f"--dedupe-buffer-size takes bytes (2M, 128M, 1G), not {value!r}") from None
    if n <= 0:
        raise UsageError("--dedupe-buffer-size must be positive")
    return n


def _print_plan(out, plan: cp.CompactPlan) -> None:
    common.print_notes(out, plan.notes)
    rows = []
    for pc in plan.partitions:
        if not pc.groups:
            continue
        s = pc.stats
        until = "-" if s.tombstones_until is None else format_time(s.tombstones_until)
        rows.append([pc.partition.topic, pc.partition.partition, f"{pc.first_dirty_offset}..{pc.end_offset}",
                     len(pc.groups), s.records_kept, s.records_removed,
                     f"{s.tombstones_kept} (until {until})" if s.tombstones_kept else "0",
                     f"{s.markers_kept}/{s.markers_removed}",
                     f"{human_bytes(s.bytes_before)} -> {human_bytes(s.bytes_after)}"])
    if rows:
        out.table(["topic", "part", "dirty range", "groups", "kept", "removed", "tombstones kept", "markers kept/rm",
                   "bytes"], rows, justify={"part": "right", "groups": "right", "kept": "right", "removed": "right"})


def _emit_plan(out, plan: cp.CompactPlan, dry_run: bool) -> None:
    if out.json_mode:
        for n in plan.notes:
            out.emit(n.to_json())
        for pc in plan.partitions:
            out.emit(pc.to_json())
        if dry_run:
            for a in plan.actions:
                out.emit(a.to_json())
        return
    _print_plan(out, plan)
    if dry_run:
        for a in plan.actions:
            out.line(f"PLAN  {a.describe()}")


@click.command("compact", epilog=EXAMPLES)
@paths_argument
@selection_options
@click.option("--now", metavar="T", help="The cleaner's clock (ISO-8601 or epoch ms): delete horizons, "
              "min.compaction.lag.ms and producer expiry are judged at T. Default: now.")
@click.option("--config", "config_items", multiple=True, metavar="KEY=VALUE", help="A topic setting for this run "
              "(delete.retention.ms, min.compaction.lag.ms, segment.bytes, ...; repeatable). Default: the topic's "
              "in kltool-topics.json, else Kafka's.")
@click.option("--dedupe-buffer-size", metavar="BYTES", help="The offset map's memory, as "
              "log.cleaner.dedupe.buffer.size / log.cleaner.threads (24 bytes a key, filled to 90%; when full the "
              "pass ends there). Default 128M.")
@click.option("--dry-run", is_flag=True, help="Print the plan, change nothing (exit 1 when there is work).")
@click.option("--backup-dir", type=click.Path(path_type=str, readable=False), help="Move the replaced segments "
              "here, with a manifest for kltool restore. Default: <log dir>.kltool-backup beside the log dir.")
@click.option("--no-backup", is_flag=True, help="Delete the replaced segments the broker's way (.deleted), no backup.")
@click.option("--force", is_flag=True, help="Compact topics whose cleanup.policy is not compact too.")
@click.pass_obj
def command(out, paths, topic, partition_spec, now, config_items, dedupe_buffer_size, dry_run, backup_dir,
            no_backup, force):
    """Compact partitions the way the broker's log cleaner does, in one pass: from the first dirty offset
    (cleaner-offset-checkpoint) to the first uncleanable one, keep each key's latest record, drop keyless
    records and aborted transactions, keep tombstones until their delete horizon, rewrite the segments in
    groups and swap them in (.cleaned -> .swap -> final). Refuses (exit 3) while a broker holds the log
    dir's .lock."""
    from ..storage.topic_config import parse_config_items

    overrides = parse_config_items(config_items)
    now_ms = parse_time(now) if now is not None else int(time.time() * 1000)
    policy = cp.Policy(now=now_ms, config=overrides, force=force,
                       dedupe_buffer_size=_size(dedupe_buffer_size) or cp.DEFAULT_DEDUPE_BUFFER)
    sel = select(paths, topic, partition_spec)
    logdirs = sorted({p.logdir.path for p in sel.partitions if p.logdir is not None})
    total = sum(s.size for p in sel.partitions for s in p.segments[:-1]) * 2
    t0 = time.perf_counter()
    if dry_run:
        common.warn_held(out, logdirs, "planning only; the files may change while they are read")
    with contextlib.ExitStack() as bar:
        prog = bar.enter_context(out.progress(total or None, "compact"))

        def on_plan(plan):
            bar.close()  # the progress line ends before the plan is shown
            _emit_plan(out, plan, dry_run)

        emit = (lambda a: out.emit(a.to_json())) if out.json_mode else None
        plan = cp.run_compaction(sel, policy, dry_run=dry_run, backup=not no_backup, backup_dir=backup_dir,
                                 on_plan=on_plan, on_action=emit, progress=prog.advance, named=paths)
    manifests = plan.manifests
    summary = cp.summarize(plan)
    summary["seconds"] = round(time.perf_counter() - t0, 3)
    summary["manifests"] = [str(m) for m in manifests]
    verb = "would keep" if dry_run else "kept"
    line = (f"compact{' (dry run)' if dry_run else ''}: {summary['partitions_cleaned']} of "
            f"{summary['partitions']} partitions cleaned in {summary['groups']} groups; {verb} "
            f"{summary['records_kept']} of {summary['records_read']} records, "
            f"{human_bytes(summary['bytes_before'])} -> {human_bytes(summary['bytes_after'])}"
            + (f"; {summary['partitions_refused']} refused" if summary["partitions_refused"] else "")
            + (f"; {summary['warnings']} warnings" if summary["warnings"] else ""))
    common.finish_run(out, "compact", summary, line, manifests)
    if summary["partitions_refused"] and summary["partitions_refused"] == summary["partitions"]:
        return 3
    return 1 if dry_run and plan.has_work else 0
