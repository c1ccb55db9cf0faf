"""kltool verify: CRCs, structure, indexes, stale files. Never modifies a file (without --repair)."""

from __future__ import annotations

import time

import click

from .common import human_bytes, paths_argument, select, selection_options, total_size


@click.command("verify")
@paths_argument
@selection_options
@click.option("--deep", is_flag=True, help="Also decompress and parse every record.")
@click.option("--max-record-bytes", type=click.IntRange(min=1024), default=256 << 20, show_default=True,
              help="The largest record (key, value and headers) read; a record over it is reported "
                   "(record_too_large), never held. Batches of any size are read.")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@click.option("--repair", is_flag=True, help="Repair what is found (see kltool-verify(1)); plan first with --dry-run.")
@click.option("--dry-run", is_flag=True, help="With --repair: print the plan, change nothing.")
@click.option("--backup-dir", type=click.Path(path_type=str, readable=False), help="With --repair: where cut bytes are kept.")
@click.option("--like-broker", is_flag=True, help="With --repair: truncate at the first damage and drop later "
              "segments, as the broker's recovery does (still backed up).")
@click.pass_obj
def command(out, paths, topic, partition_spec, deep, max_record_bytes, strict, repair, dry_run, backup_dir,
            like_broker):
    """Check every batch's CRC and structure, every index against its log, and stale files.

    Exit 0 when clean, 1 when anything is wrong (or, with --repair --dry-run, when there is work).
    """
    from ..format.compression import set_limit

    set_limit(max_record_bytes)
    if repair or dry_run or backup_dir or like_broker:
        from .repair import run_repair

        return run_repair(out, paths, topic, partition_spec, deep=deep, dry_run=dry_run, backup_dir=backup_dir,
                          like_broker=like_broker)
    from ..api import Logs

    sel = select(paths, topic, partition_spec)
    total = total_size(sel)
    t0 = time.perf_counter()
    with out.progress(total, "verify") as prog:
        report = Logs.from_selection(sel, *paths, topic=topic, partitions=partition_spec).verify(
            deep=deep, progress=prog.advance,
            on_finding=(lambda f: out.emit(f.to_json())) if out.json_mode else (lambda f: out.line(f.line())))
    stats = report.stats
    secs = time.perf_counter() - t0
    summary = {
        "type": "summary", "partitions": stats.partitions, "segments": stats.segments, "files": stats.files,
        "batches": stats.batches, "records": stats.records, "bytes": stats.bytes, "damaged_bytes": stats.lost_bytes,
        "errors": stats.errors, "warnings": stats.warnings, "seconds": round(secs, 3), "deep": deep,
        "uncounted_wrappers": stats.uncounted_wrappers,
    }
    if out.json_mode:
        out.emit(summary)  # (no hints on stderr: scripts read the findings)
    else:
        state = "clean" if stats.errors == 0 else "PROBLEMS FOUND"
        if stats.uncounted_wrappers:
            out.info(f"note: the records of {stats.uncounted_wrappers} compressed v0/v1 messages are counted only "
                     f"with --deep")
        out.line(f"verify: {state}: {stats.partitions} partitions, {stats.segments} segments, {stats.files} files, "
                 f"{stats.batches} batches, {stats.records} records, {human_bytes(stats.bytes)} in {secs:.2f}s; "
                 f"{stats.errors} errors, {stats.warnings} warnings")
        if stats.errors:
            out.info("next: `kltool verify --repair --dry-run PATH` shows what a repair would change "
                     "(nothing is changed without --repair, and everything cut is backed up)")
    return 1 if stats.errors or (strict and stats.warnings) else 0
