"""kltool rebuild-index: rebuild .index/.timeindex/.txnindex by the broker's recovery rule."""

from __future__ import annotations

import click

from .common import finish_run, human_bytes, paths_argument, selection_options
from .plans import plan_exit_code, run_and_print_plan


@click.command("rebuild-index")
@paths_argument
@selection_options
@click.option("--dry-run", is_flag=True, help="Print what would be written; change nothing (exit 1 when there is work).")
@click.option("--backup-dir", type=click.Path(path_type=str, readable=False),
              help="Where the old index files are kept (default: <log dir>.kltool-backup beside the log dir).")
@click.option("--index-interval-bytes", type=click.IntRange(min=0), default=4096, show_default=True,
              help="The topic's index.interval.bytes.")
@click.option("--force", is_flag=True,
              help="Rewrite every index by the recovery rule, also those that are valid as they are.")
@click.pass_obj
def command(out, paths, topic, partition_spec, dry_run, backup_dir, index_interval_bytes, force):
    """Rebuild the selected segments' .index and .timeindex (and .txnindex) from their batches, as the
    broker's recovery (LogSegment.recover) does: those that are missing, corrupt or inconsistent with
    their log. Valid indexes (for example the ones a broker wrote, whatever its index.interval.bytes) are
    left alone unless --force; files whose bytes would not change are never rewritten. Old files are
    backed up with a manifest (kltool restore undoes it). Segments with a damaged log are skipped: repair
    them with kltool verify --repair.
    """
    from ..api import Logs

    result, problems, secs = run_and_print_plan(out, paths, topic, partition_spec, "rebuild-index",
                                                Logs.rebuild_index, dry_run=dry_run, command="rebuild-index",
                                                backup_dir=backup_dir, index_interval_bytes=index_interval_bytes,
                                                force=force)
    plan = result.plan
    acts = plan.actions
    errors = sum(1 for p in problems if p.severity == "error")
    written = sum(len(a.data or b"") for a in acts)
    summary = {"type": "summary", "mode": plan.mode, "dry_run": dry_run, "actions": len(acts),
               "applied": sum(1 for a in acts if a.applied), "bytes": written, "errors": errors,
               "manifests": [str(m) for m in result.manifests], "seconds": round(secs, 3)}
    if not acts:
        line = "rebuild-index: every index is valid" + ("" if force else " (--force rewrites them anyway)")
    elif dry_run:
        line = f"rebuild-index: {len(acts)} file(s) would be written ({human_bytes(written)}), dry run"
    else:
        line = f"rebuild-index: {len(acts)} file(s) written ({human_bytes(written)}) in {secs:.2f}s"
    finish_run(out, "rebuild-index", summary, line, result.manifests)
    return plan_exit_code(dry_run, acts, errors)
