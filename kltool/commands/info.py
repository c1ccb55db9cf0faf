"""kltool info: a fast overview from file names, indexes and the tail of each partition."""

from __future__ import annotations

import click

from ..kafka_text import shown_offsets
from .common import format_time, human_bytes, partitions_of_files, paths_argument, select, selection_options


def _log_dir_line(out, d: dict) -> None:
    parts = [f"log dir {d['path']}: {d['partitions']} partitions"]
    if d["meta_version"] is not None or d["cluster_id"] or d["node_id"] is not None:
        parts.append("KRaft" if d["meta_version"] == "1" else "ZooKeeper" if d["meta_version"] == "0"
                     else f"meta.properties version {d['meta_version']}")
        if d["cluster_id"]:
            parts.append(f"cluster {d['cluster_id']}")
        if d["node_id"] is not None:
            parts.append(f"node {d['node_id']}")
    else:
        parts.append("no meta.properties")
    parts.append(f"clean shutdown: {'yes' if d['clean_shutdown'] else 'no'}")
    out.line(", ".join(parts))
    for u in d["unknown_dirs"]:
        out.warn(f"{u}: not a topic-partition directory (a broker will refuse to start)")


@click.command("info")
@paths_argument
@selection_options
@click.option("--all", "show_all", is_flag=True, help="Also list empty partitions.")
@click.pass_obj
def command(out, paths, topic, partition_spec, show_all):
    """Topics, partitions, segments, bytes, offset and time ranges (fast: names, indexes and
    the tail of each partition, not a full scan)."""
    from ..api import Logs

    sel = partitions_of_files(out, select(paths, topic, partition_spec), "info")
    rows = []
    infos = []
    empty = 0
    unreadable = 0
    for d in Logs.from_selection(sel, *paths, topic=topic, partitions=partition_spec).info():
        d = shown_offsets(d)
        if d["type"] == "finding":  # a partition or file it may not read: said, the others listed (exit 1)
            unreadable += 1
            out.emit(d) if out.json_mode else out.warn(f"{d['file']}: {d['message']}")
            continue
        if out.json_mode:
            out.emit(d)
        if d["type"] == "log_dir":
            if not out.json_mode:
                _log_dir_line(out, d)
            continue
        infos.append(d)
        if out.json_mode:
            continue
        if d["bytes"] == 0 and not show_all:
            empty += 1
            continue
        rows.append([d["topic"], d["partition"] if d["state"] == "normal" else
                     f"{d['partition']} ({d['state']})", d["segments"], human_bytes(d["bytes"]),
                     d["log_start_offset"], d["log_end_offset"], format_time(d["first_timestamp"]),
                     format_time(d["max_timestamp"])])
    total = sum(i["bytes"] for i in infos)
    if out.json_mode:
        out.emit({"type": "summary", "partitions": len(infos), "topics": len({i["topic"] for i in infos}),
                  "segments": sum(i["segments"] for i in infos), "bytes": total})
        return 1 if unreadable else 0
    if rows:
        out.table(["topic", "part", "segs", "size", "log start", "log end", "first time", "last time"], rows,
                  justify={"segs": "right", "size": "right", "log start": "right", "log end": "right",
                           "part": "right"})
    out.line(f"{len(infos)} partitions ({empty} empty not shown{'' if not empty else '; --all lists them'}), "
             f"{len({i['topic'] for i in infos})} topics, {sum(i['segments'] for i in infos)} segments, "
             f"{human_bytes(total)}")
    return 1 if unreadable else 0
