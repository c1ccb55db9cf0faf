"""What the commands that plan (verify --repair, rebuild-index) share: run a plan under a progress bar,
printing each action as it is applied (or, for a dry run, the whole plan), then the problems left."""

from __future__ import annotations

import time


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


def run_and_print_plan(out, paths, topic, partition_spec, label: str, call, *, dry_run: bool, command: str, **kw):
    """``call(logs, dry_run=..., progress=..., on_action=..., **kw)`` (a :class:`kltool.Logs` method) over the
    PATHs with --topic/--partition applied, under a progress bar over the selection's bytes; prints the
    actions (as each is applied, or the plan for a dry run) and then the problems (a damaged loose file the
    plan skipped as a ``not_repairable`` error naming ``command``). Returns (the result, the problems
    printed, its seconds)."""
    from ..api import Logs
    from .common import loose_file_findings, select

    logs = Logs.from_selection(select(paths, topic, partition_spec), *paths, topic=topic, partitions=partition_spec)
    total = sum(s.size for p in logs.partitions for s in p.segments)
    t0 = time.perf_counter()
    with out.progress(total, label) as prog:
        result = call(logs, dry_run=dry_run, progress=prog.advance,
                      on_action=None if dry_run else (lambda a: emit_plan_line(out, a, False)), **kw)
    if dry_run:
        for a in result.plan.actions:
            emit_plan_line(out, a, True)
    problems = loose_file_findings(result.plan.problems, command)
    emit_problems(out, problems)
    return result, problems, time.perf_counter() - t0


def plan_exit_code(dry_run: bool, actions, errors: int) -> int:
    """0 done or nothing to do; 1 problems left, or for a dry run work planned."""
    if dry_run:
        return 1 if actions or errors else 0
    return 1 if errors else 0
