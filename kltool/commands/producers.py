"""kltool producers: the producer state the broker rebuilds at start-up (latest snapshot + the log
after it), per partition, and snapshots that disagree with the log."""

from __future__ import annotations

import click

from ..errors import UsageError
from ..storage.transactions import producer_json
from .common import format_time, paths_argument, selection_options
from .transactions import (
    count_findings,
    emit_findings,
    format_option,
    kafka_table,
    load_states,
    state_options,
)

DESCRIBE_PRODUCERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                      "CurrentTransactionStartOffset")


@click.command("producers")
@paths_argument
@selection_options
@state_options
@format_option("describe-producers")
@click.pass_obj
def command(out, paths, topic, partition_spec, now_, scan_all, fmt):
    """Producer state per partition as the broker rebuilds it at start-up: the latest valid .snapshot,
    then the batches after it. The columns of kafka-transactions.sh describe-producers: producer id,
    epoch, last sequence, last timestamp, coordinator epoch, current transaction start offset, and
    the last offset. Snapshots the broker would skip, and snapshots that disagree with the log, are
    findings. --format kafka prints describe-producers' own table (producers expired at --now left out,
    as the broker drops them). Exit 0 when no file disagrees, 1 otherwise.

    \b
    Examples:
      kltool producers /var/lib/kafka/data/orders-3
      kltool --json producers /var/lib/kafka/data --topic 'orders*'
      kltool producers /data/orders-3 --scan-all      # every snapshot against the whole log
      kltool producers /data/orders-3 --format kafka  # describe-producers' table
    """
    if fmt == "kafka" and out.json_mode:
        raise UsageError("--format kafka and --json are two output formats: give one")
    results = list(load_states(out, paths, topic, partition_spec, now_, scan_all, 0, "producers"))
    if fmt == "kafka":  # describe-producers' table for one partition: the producers the broker keeps at --now
        if len(results) != 1:
            raise UsageError(f"--format kafka describes one partition (as describe-producers --topic T --partition "
                             f"P does), not {len(results)}: give a partition directory or --topic and --partition")
        r = results[0]

        def described():  # (walked twice by the table: no cell held)
            return ([str(p.producer_id), str(p.epoch), str(p.coordinator_epoch), str(p.last_sequence),
                     str(p.timestamp), "None" if p.current_txn_first_offset is None else str(p.current_txn_first_offset)]
                    for p in map(r.producers.__getitem__, sorted(r.producers)) if not r.expired(p))

        out.write_lines(kafka_table(DESCRIBE_PRODUCERS, described), tabs=True)
        return 1 if count_findings(results)[0] else 0
    errors, warnings = count_findings(results)
    n = sum(len(r.producers) for r in results)
    if out.json_mode:
        for r in results:
            for p in map(r.producers.__getitem__, sorted(r.producers)):  # (ids sorted: no (id, entry) pairs)
                out.emit(producer_json(r, p))
        emit_findings(out, results)
        out.emit({"type": "summary", "partitions": len(results), "producers": n, "errors": errors,
                  "warnings": warnings,
                  "snapshots": {f"{r.topic}-{r.partition}": None if r.snapshot is None else r.snapshot.name
                                for r in results}})
        return 1 if errors else 0

    def rows():  # walked twice by the table (its widths, then its lines): no cell held, whatever the count
        for r in results:
            for p in map(r.producers.__getitem__, sorted(r.producers)):
                yield [r.topic, r.partition, p.producer_id, p.epoch, p.last_sequence, p.last_offset,
                       format_time(p.timestamp), p.coordinator_epoch,
                       "-" if p.current_txn_first_offset is None else p.current_txn_first_offset,
                       "expired" if r.expired(p) else ""]

    if n:
        cols = ["topic", "part", "producer", "epoch", "last seq", "last offset", "last timestamp", "coord epoch",
                "txn start", "note"]
        out.table(cols, rows, justify={c: "right" for c in ("part", "producer", "epoch", "last seq", "last offset",
                                                              "coord epoch", "txn start")})
    emit_findings(out, results)
    srcs = sorted({"snapshot + log" if r.snapshot is not None else "log only" for r in results})
    out.line(f"producers: {len(results)} partitions, {n} producers ({', '.join(srcs) or '-'}"
             f"{', every segment' if scan_all else ''}); {errors} errors, {warnings} warnings")
    return 1 if errors else 0
