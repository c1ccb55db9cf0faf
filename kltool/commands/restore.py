"""kltool restore: undo a repair (or rebuild-index) run from its backup manifest."""

from __future__ import annotations

import click


@click.command("restore")
@click.argument("manifests", nargs=-1, required=True, type=click.Path(path_type=str, readable=False))
@click.option("--dry-run", is_flag=True, help="Print what would be put back; change nothing (exit 1 when there is work).")
@click.option("--no-follow", is_flag=True, help="Only this run, not the interrupted runs it follows.")
@click.pass_obj
def command(out, manifests, dry_run, no_follow):
    """Put every file a run changed back as it was. Each MANIFEST is a run's manifest.json, its run
    directory, or a whole backup directory (every run in it, e.g. all the manifests of a repair of a
    tree): runs are undone newest first, each in reverse order. Cut bytes go back in place, quarantined
    files move back, renames and rewritten files are undone. Every manifest is validated before anything
    changes: a path outside the log dir it was made for or outside its own run directory is refused
    (exit 2, naming the entry). Each step first checks the file is in the state the run left it (refusing,
    exit 3, when it changed since), so a restore can be interrupted and run again. A run that followed
    interrupted runs restores those too, unless --no-follow.
    """
    from ..api import restore

    def show(step):
        if out.json_mode:
            out.emit(step.to_json())
        else:
            out.line(f"{'PLAN' if dry_run else 'DONE'}  {step.op} {step.file}: {step.message}")

    steps = restore(*manifests, dry_run=dry_run, follow=not no_follow, on_step=show)
    if out.json_mode:
        out.emit({"type": "summary", "dry_run": dry_run, "actions": len(steps),
                  "applied": sum(1 for s in steps if s.done)})
    elif not steps:
        out.line("restore: nothing to do (the files are as they were before the run)")
    else:
        out.line(f"restore: {len(steps)} step(s) {'planned (dry run)' if dry_run else 'done'}")
    return 1 if dry_run and steps else 0
