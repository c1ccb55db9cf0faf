"""kltool diff: where two copies of a partition (or of a log dir) diverge, and what each lacks."""

from __future__ import annotations

import click

from ..storage.diff import PartitionDiff, pair_partitions
from ..storage.findings import Finding
from .common import format_time, human_bytes, select, selection_options

SHOWN = 10  # batch pairs listed per partition in text output


def _span(s) -> str:
    if not s.batches:
        return "nothing"
    return (f"offsets {s.first_offset}..{s.last_offset}: {s.records} records in {s.batches} batches, "
            f"{human_bytes(s.bytes)}, {format_time(s.first_timestamp)} .. {format_time(s.last_timestamp)}")


def _text(out, d: PartitionDiff, shown: list) -> None:
    name = f"{d.a.topic}-{d.a.partition}"
    if d.identical:
        out.line(f"{name}: identical ({_span(d.common)})")
        return
    where = "no divergence (one is a prefix of the other)" if d.diverge_offset is None else \
        f"diverge at offset {d.diverge_offset}"
    out.line(f"{name}: {where}; log end A {d.log_end_a}, B {d.log_end_b}")
    out.line(f"  both have:    {_span(d.common)}")
    out.line(f"  only A has:   {_span(d.only_a)}")
    out.line(f"  only B has:   {_span(d.only_b)}")
    if d.differing_batches:
        out.line(f"  {d.differing_batches} batches at the same offsets with different content"
                 + (f" (first {len(shown)}):" if d.differing_batches > len(shown) else ":"))
        for x in shown:
            out.line(f"    {x.base_offset}..{x.last_offset}: crc {x.crc_a} / {x.crc_b}, {x.size_a} / {x.size_b} bytes, "
                     f"leader epoch {x.epoch_a} / {x.epoch_b}")
    def epochs(cache):
        return " ".join(f"{e}@{o}" for e, o in cache) or "none"

    out.line(f"  leader epochs (epoch@start offset): A {epochs(d.cache_a)} ({d.epochs_a}), "
             f"B {epochs(d.cache_b)} ({d.epochs_b})")
    out.line(f"  B as A's follower truncates to {d.truncation_offset} ({d.truncation_rule})")
    out.line(f"  and loses:    {_span(d.lost)}")


@click.command("diff")
@click.argument("a", type=click.Path(path_type=str, readable=False))
@click.argument("b", type=click.Path(path_type=str, readable=False))
@selection_options
@click.pass_obj
def command(out, a, b, topic, partition_spec):
    """Compare two copies of a partition, or two log dirs partition by partition: A is the leader (the
    copy that stays), B the follower (the copy the broker would truncate). Both are walked side by side
    in one pass (linear time, bounded memory).

    Reports the first offset where they diverge (batch offsets, sizes, CRCs and leader epochs
    compared), what both have and what only A and only B have (offsets, records, bytes, time range),
    batches at the same offsets with different content, and the offset where B truncates when it
    follows A, by Kafka's OffsetsForLeaderEpoch rule on both leader-epoch caches, with what B loses
    there. Copies with different topic ids (partition.metadata) are refused. Exit 0 when identical,
    1 when they differ, 2 on bad input.

    \b
    Examples:
      kltool diff /data/broker1/orders-3 /data/broker2/orders-3
      kltool diff /backup/kafka-logs /var/lib/kafka/data --topic orders
      kltool --json diff new-leader/orders-3 old-leader/orders-3
    """
    sel_a, sel_b = select([a], topic, partition_spec), select([b], topic, partition_spec)
    from ..errors import UsageError

    if not sel_a.partitions or not sel_b.partitions:
        raise UsageError("diff compares partition directories or log dirs", path=a if not sel_a.partitions else b)
    notes: list[Finding] = []
    pairs, only_a, only_b = pair_partitions(sel_a, sel_b, notes)
    differ = errors = 0
    for f in notes:
        out.emit(f.to_json()) if out.json_mode else out.line(f.line())
    for side, parts in (("A", only_a), ("B", only_b)):
        for p in parts:
            differ += 1
            f = Finding("warning", "partition_missing", str(p.path), f"only {side} has partition {p.name}")
            out.emit(f.to_json()) if out.json_mode else out.line(f.line())
    for pa, pb in pairs:
        d = PartitionDiff(pa, pb)
        shown = []
        for item in d.run():
            if isinstance(item, Finding):
                errors += item.severity == "error"
                out.emit(item.to_json()) if out.json_mode else out.line(item.line())
            elif out.json_mode:
                out.emit(item.to_json(pa.topic, pa.partition))
            elif len(shown) < SHOWN:
                shown.append(item)
        differ += not d.identical
        if out.json_mode:
            out.emit(d.to_json())
        else:
            _text(out, d, shown)
    if out.json_mode:
        out.emit({"type": "summary", "partitions": len(pairs), "differing": differ, "only_a": len(only_a),
                  "only_b": len(only_b), "errors": errors})
    else:
        out.line(f"diff: {len(pairs)} partitions compared, {differ} differ"
                 + (f", {len(only_a)} only in A, {len(only_b)} only in B" if only_a or only_b else ""))
    return 1 if differ or errors else 0
