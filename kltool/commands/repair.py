"""``kltool verify --repair``: plan, then (unless ``--dry-run``) back up and apply (kltool.storage.change.repair).

Not a subcommand of its own: ``kltool verify`` calls :func:`run_repair` when ``--repair``, ``--dry-run``,
``--backup-dir`` or ``--like-broker`` is given.
"""

from __future__ import annotations

import time

import click

from ..errors import UsageError
from .common import human_bytes, loose_file_findings, range_records, select


def emit_plan_line(out, action, dry_run: bool) -> None:
    if out.json_mode:
        out.emit(action.to_json())
    else:
        out.line(f"{'PLAN' if dry_run else 'DONE'}  {action.describe()}")


def emit_problems(out, problems) -> None:
    for p in problems:
        if out.json_mode:
            out.emit(p.to_json())
        else:
            out.line(p.line())


def run_repair(out, paths, topic, partition_spec, *, deep: bool = False, dry_run: bool = False,
               backup_dir: str | None = None, like_broker: bool = False,
               index_interval_bytes: int | None = None) -> int:
    """Plan and apply a repair; returns the exit code (0 done/nothing to do, 1 work planned or problems left,
    3 refused). ``deep`` is accepted for symmetry with verify: the repair follows the broker's rules, which
    never look inside records (a control batch's marker aside)."""
    from ..storage.change.repair import repair
    from ..storage.index_builder import DEFAULT_INDEX_INTERVAL_BYTES

    ctx = click.get_current_context(silent=True)
    if ctx is not None and "repair" in ctx.params and not ctx.params["repair"] and not dry_run:
        raise UsageError("--backup-dir and --like-broker go with --repair (add --dry-run to see the plan first)")
    sel = select(paths, topic, partition_spec)
    total = sum(s.size for p in sel.partitions for s in p.segments)
    t0 = time.perf_counter()
    with out.progress(total, "repair: scan") as prog:
        result = repair(sel, dry_run=dry_run, backup_dir=backup_dir, like_broker=like_broker,
                        interval=index_interval_bytes or DEFAULT_INDEX_INTERVAL_BYTES, progress=prog.advance,
                        on_action=None if dry_run else (lambda a: emit_plan_line(out, a, False)))
    plan = result.plan
    if dry_run:
        for a in plan.actions:
            emit_plan_line(out, a, True)
    problems = loose_file_findings(plan.problems)  # a damaged file repair skips: an error, exit 1
    emit_problems(out, problems)
    secs = time.perf_counter() - t0
    acts = plan.actions
    cut = [a for a in acts if a.op in ("truncate", "excise")]
    # whole segments a --like-broker plan deletes after its truncation count as lost too
    gone = [a for a in acts if a.op == "quarantine" and a.file.suffix == ".log" and a.first_offset is not None]
    lost_bytes = sum(a.bytes or 0 for a in cut + gone)
    counts = [range_records(c) for a in cut for c in a.ranges]  # a range read or not: the offsets it spans
    lost_records = sum(n for n, _s in counts if n is not None) + sum(a.records_lost or 0 for a in gone)
    spanned = sum(1 for n, s in counts if s)
    unknown = sum(1 for n, _s in counts if n is None) + sum(1 for a in gone if a.records_lost is None)
    errors = sum(1 for p in problems if p.severity == "error")
    summary = {
        "type": "summary", "mode": plan.mode, "dry_run": dry_run, "actions": len(acts),
        "applied": sum(1 for a in acts if a.applied), "bytes_cut": lost_bytes, "records_lost": lost_records,
        "ranges_with_unknown_records": unknown, "errors": errors,
        "warnings": sum(1 for p in problems if p.severity == "warning"),
        "manifests": [str(m) for m in result.manifests], "seconds": round(secs, 3),
    }
    if out.json_mode:
        out.emit(summary)
    else:
        more = f" (+{unknown} damaged range(s) whose record count is unknown)" if unknown else ""
        if spanned:
            more += f" ({spanned} damaged range(s) counted by the offsets they span)"
        if not acts:
            out.line(f"repair: nothing to do ({plan.mode}); {errors} problem(s) not repairable" if errors
                     else f"repair: nothing to do ({plan.mode})")
        elif dry_run:
            out.line(f"repair: {len(acts)} action(s) planned ({plan.mode}, dry run, nothing changed); "
                     f"{human_bytes(lost_bytes)} and {lost_records} record(s) would be cut{more}")
        else:
            out.line(f"repair: {len(acts)} action(s) applied ({plan.mode}) in {secs:.2f}s; {human_bytes(lost_bytes)} "
                     f"and {lost_records} record(s) cut{more}, all backed up")
            for m in result.manifests:
                out.line(f"repair: backup manifest {m} (undo: kltool restore {m})")
    if dry_run:
        return 1 if acts or errors else 0
    return 1 if errors else 0
