"""kltool info: a fast overview from file names, indexes and the tail of each partition."""

from __future__ import annotations

import click

from ..storage.logdir import unreadable as unreadable_finding
from ..storage.segment import first_batch
from .common import format_time, human_bytes, partitions_of_files, paths_argument, select, selection_options


def partition_info(p) -> dict:
    segs = p.segments
    size = sum(s.size for s in segs)
    first = None
    for s in segs:
        first = first_batch(s)
        if first is not None:
            break
    leo = p.log_end_offset()
    # Closed segments: the time index's last entry (12 bytes read); the last one: its tail batches too.
    max_ts = max((s.max_timestamp_so_far for s in segs), default=-1)
    return {
        "type": "partition", "topic": p.topic, "partition": p.partition, "state": p.kind, "path": str(p.path),
        "segments": len(segs), "bytes": size, "log_start_offset": p.log_start_offset(), "log_end_offset": leo,
        "first_timestamp": -1 if first is None else (first.first_timestamp if first.magic == 2 else first.max_timestamp),
        "max_timestamp": max_ts, "stale_files": len(p.stale_files),
        "producer_snapshots": len(p.snapshots),
    }


@click.command("info")
@paths_argument
@selection_options
@click.option("--all", "show_all", is_flag=True, help="Also list empty partitions.")
@click.pass_obj
def command(out, paths, topic, partition_spec, show_all):
    """Topics, partitions, segments, bytes, offset and time ranges (fast: names, indexes and
    the tail of each partition, not a full scan)."""
    sel = partitions_of_files(out, select(paths, topic, partition_spec), "info")
    rows = []
    infos = []
    empty = 0
    unreadable = 0
    for p in sel.partitions:
        try:
            info = partition_info(p)
        except OSError as e:  # a partition or file it may not read: said, the others listed (exit 1)
            if isinstance(e, BrokenPipeError):
                raise
            unreadable += 1
            f = unreadable_finding(e.filename or p.path, e, f"partition {p.name} is not listed")
            out.emit(f.to_json()) if out.json_mode else out.warn(f"{f.file}: {f.message}")
            continue
        infos.append(info)
        if out.json_mode:
            out.emit(info)
            continue
        if info["bytes"] == 0 and not show_all:
            empty += 1
            continue
        rows.append([info["topic"], info["partition"] if info["state"] == "normal" else
                     f"{info['partition']} ({info['state']})", info["segments"], human_bytes(info["bytes"]),
                     info["log_start_offset"], info["log_end_offset"], format_time(info["first_timestamp"]),
                     format_time(info["max_timestamp"])])
    for ld in sel.logdirs:
        meta = ld.meta_properties() or {}
        d = {"type": "log_dir", "path": str(ld.path), "partitions": len(ld.partitions),
             "cluster_id": meta.get("cluster.id"), "node_id": meta.get("node.id") or meta.get("broker.id"),
             "meta_version": meta.get("version"), "clean_shutdown": ld.clean_shutdown,
             "lock_file": ld.lock_path.exists(), "unknown_dirs": [str(x) for x in ld.unknown_dirs]}
        if out.json_mode:
            out.emit(d)
        else:
            parts = [f"log dir {ld.path}: {d['partitions']} partitions"]
            if meta:
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
            for u in ld.unknown_dirs:
                out.warn(f"{u}: not a topic-partition directory (a broker will refuse to start)")
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
