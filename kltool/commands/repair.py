"""``kltool verify --repair``: plan, then (unless ``--dry-run``) back up and apply (kltool.storage.change.repair).

Not a subcommand of its own: ``kltool verify`` calls :func:`run_repair` when ``--repair``, ``--dry-run``,
``--backup-dir`` or ``--like-broker`` is given.
"""

from __future__ import annotations

import click

from ..errors import UsageError
from .common import finish_run, human_bytes, range_records
from .plans import plan_exit_code, run_and_print_plan


def run_repair(out, paths, topic, partition_spec, *, deep: bool = False, dry_run: bool = False,
               backup_dir: str | None = None, like_broker: bool = False,
               index_interval_bytes: int | None = None) -> int:
    """Plan and apply a repair (:meth:`kltool.Logs.repair`); returns the exit code (0 done/nothing to do, 1
    work planned or problems left, 3 refused). ``deep`` is accepted for symmetry with verify: the repair
    follows the broker's rules, which never look inside records (a control batch's marker aside)."""
    from ..api import Logs

    ctx = click.get_current_context(silent=True)
    if ctx is not None and "repair" in ctx.params and not ctx.params["repair"] and not dry_run:
        raise UsageError("--backup-dir and --like-broker go with --repair (add --dry-run to see the plan first)")
    result, problems, secs = run_and_print_plan(out, paths, topic, partition_spec, "repair: scan", Logs.repair,
                                                dry_run=dry_run, command="verify --repair", backup_dir=backup_dir,
                                                like_broker=like_broker, index_interval_bytes=index_interval_bytes)
    plan = result.plan
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
    more = f" (+{unknown} damaged range(s) whose record count is unknown)" if unknown else ""
    if spanned:
        more += f" ({spanned} damaged range(s) counted by the offsets they span)"
    if not acts:
        line = (f"repair: nothing to do ({plan.mode}); {errors} problem(s) not repairable" if errors
                else f"repair: nothing to do ({plan.mode})")
    elif dry_run:
        line = (f"repair: {len(acts)} action(s) planned ({plan.mode}, dry run, nothing changed); "
                f"{human_bytes(lost_bytes)} and {lost_records} record(s) would be cut{more}")
    else:
        line = (f"repair: {len(acts)} action(s) applied ({plan.mode}) in {secs:.2f}s; {human_bytes(lost_bytes)} "
                f"and {lost_records} record(s) cut{more}, all backed up")
    finish_run(out, "repair", summary, line, result.manifests)
    return plan_exit_code(dry_run, acts, errors)
