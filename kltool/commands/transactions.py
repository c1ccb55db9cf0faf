"""kltool transactions: open and hanging transactions, the last stable offset, aborted ranges against
the .txnindex, per partition, as the broker sees them after start-up."""

from __future__ import annotations

import itertools
import time

import click

from ..errors import UsageError
from ..output import visible
from ..storage.transactions import DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, partition_transactions
from .common import format_time, parse_time, partitions_of_files, paths_argument, select, selection_options


def _ms(ms: int | None) -> str:
    """A duration for people: 3d4h, 2h5m, 4m10s, 950ms."""
    if ms is None:
        return "-"
    neg, ms = ms < 0, abs(ms)
    s = ms // 1000
    if s < 1:
        out = f"{ms}ms"
    elif s < 3600:
        out = f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
    elif s < 86400:
        out = f"{s // 3600}h{s % 3600 // 60:02d}m"
    else:
        out = f"{s // 86400}d{s % 86400 // 3600:02d}h"
    return "-" + out if neg else out


FIND_HANGING = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
                "Duration(min)")


def kafka_table(headers, rows):
    """kafka-transactions.sh's table (``TransactionsCommand.prettyPrintTable``): each cell padded to its
    column's width and followed by a tab, the header first. ``rows``: a list, or a function returning a fresh
    iterable of them (walked twice, widths then lines, as :func:`kltool.output.iter_table`)."""
    walk = rows if callable(rows) else (lambda: rows)

    def cells():
        for r in walk():
            yield [visible(c) for c in r]  # (a tab or control character in a name: escaped)

    widths = [len(h) for h in headers]
    for r in cells():
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]
    for r in itertools.chain([list(headers)], cells()):
        yield "".join(c.ljust(w) + "\t" for c, w in zip(r, widths, strict=True))


def format_option(what: str):
    return click.option("--format", "fmt", type=click.Choice(["table", "kafka"]), default="table", show_default=True,
                        help=f"kafka: the table kafka-transactions.sh {what} prints (tab-separated columns), for "
                             f"comparing with the live broker.")


def state_options(f):
    """--now and --scan-all, shared by transactions and producers."""
    f = click.option("--scan-all", is_flag=True, help="Read every segment from the first (not only the latest "
                     "snapshot and the log after it, as the broker does at start-up), and check every snapshot "
                     "against the log.")(f)
    f = click.option("--now", "now_", metavar="T", help="The clock for ages and expiry (ISO-8601 or epoch ms; "
                     "default: now).")(f)
    return f


def load_states(out, paths, topic, partition_spec, now_, scan_all, timeout_ms, command):
    """The PartitionTransactions of every selected partition (normal directories only), in order."""
    now = int(time.time() * 1000) if now_ is None else parse_time(now_)
    sel = partitions_of_files(out, select(paths, topic, partition_spec), command)
    parts = [p for p in sel.partitions if p.kind == "normal"]
    if not parts:
        raise UsageError(f"{command} needs a log dir or partition directories: none found in " + ", ".join(paths))
    for p in parts:
        yield partition_transactions(p, now=now, max_transaction_timeout_ms=timeout_ms, scan_all=scan_all)


def count_findings(results) -> tuple[int, int]:
    fs = [f for r in results for f in r.findings]
    return sum(f.severity == "error" for f in fs), sum(f.severity == "warning" for f in fs)


def emit_findings(out, results) -> None:
    for r in results:
        for f in r.findings:
            out.emit(f.to_json()) if out.json_mode else out.line(f.line())


@click.command("transactions")
@paths_argument
@selection_options
@state_options
@click.option("--max-transaction-timeout", "timeout_min", type=click.IntRange(min=0), metavar="MINUTES",
              default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MS // 60000, show_default=True,
              help="A transaction idle longer than this is hanging (the broker's transaction.max.timeout.ms, "
                   "as kafka-transactions.sh find-hanging takes it).")
@click.option("--aborted", is_flag=True, help="Also list the aborted transactions of the range read, each with "
              "whether its segment's .txnindex has it.")
@format_option("find-hanging")
@click.pass_obj
def command(out, paths, topic, partition_spec, now_, scan_all, timeout_min, aborted, fmt):
    """Open and hanging transactions, the last stable offset (LSO) and the aborted ranges against each
    segment's .txnindex, per partition, as the broker sees them after start-up: the latest producer
    snapshot and the log after it (--scan-all: every segment).

    A transaction is open when its producer wrote data after its last marker; it is hanging when,
    as kafka-transactions.sh find-hanging has it, now - the producer's last timestamp exceeds
    --max-transaction-timeout. Exit 0 when nothing hangs and no file disagrees, 1 otherwise.

    \b
    Examples:
      kltool transactions /var/lib/kafka/data --topic orders
      kltool transactions /var/lib/kafka/data/orders-3 --now 2024-05-01T12:00:00Z
      kltool --json transactions /data --max-transaction-timeout 5 --scan-all
      kltool transactions /data --topic orders --format kafka   # find-hanging's table
    """
    if fmt == "kafka" and out.json_mode:
        raise UsageError("--format kafka and --json are two output formats: give one")
    results = list(load_states(out, paths, topic, partition_spec, now_, scan_all, timeout_min * 60000,
                               "transactions"))
    opened = [t for r in results for t in r.open]
    hanging = [t for t in opened if t.hanging]
    if fmt == "kafka":  # find-hanging's table (duration in whole minutes since the last timestamp)
        hanging.sort(key=lambda t: (t.topic, t.partition, t.producer_id))

        def rows():  # (walked twice by the table: no cell held)
            return ([t.topic, str(t.partition), str(t.producer_id), str(t.producer_epoch), str(t.coordinator_epoch),
                     str(t.first_offset), str(t.last_timestamp), str(t.idle_ms // 60000)] for t in hanging)

        out.write_lines(kafka_table(FIND_HANGING, rows), tabs=True)
        return 1 if hanging else 0
    if out.json_mode:
        for r in results:
            out.emit(r.to_json())
            for t in r.open:
                out.emit(t.to_json())
            if aborted:
                for a in r.aborted:
                    out.emit(a.to_json(r.topic, r.partition))
    errors, warnings = count_findings(results)
    summary = {"type": "summary", "partitions": len(results), "open_transactions": len(opened),
               "hanging_transactions": len(hanging),
               "aborted_transactions": sum(len(r.aborted) for r in results),
               "stuck_partitions": sum(1 for r in results if r.last_stable_offset < r.high_watermark),
               "incomplete_partitions": sum(1 for r in results if not r.complete), "errors": errors,
               "warnings": warnings}
    if out.json_mode:
        emit_findings(out, results)
        out.emit(summary)
    else:
        rows = [[r.topic, r.partition, r.last_stable_offset, r.high_watermark, r.log_end_offset, len(r.open),
                 len(r.hanging), "" if r.complete else "incomplete"]
                for r in results if r.open or r.last_stable_offset < r.high_watermark or not r.complete]
        if rows:
            cols = ["topic", "part", "LSO", "HW", "log end", "open", "hanging", "note"]
            out.table(cols, rows, justify={c: "right" for c in ("part", "LSO", "HW", "log end", "open", "hanging")})
            out.line()
        if opened:
            cols = ["topic", "part", "producer", "epoch", "first offset", "first timestamp", "age", "idle", "state"]
            out.table(cols, lambda: ([t.topic, t.partition, t.producer_id, t.producer_epoch, t.first_offset,
                                      format_time(t.first_timestamp), _ms(t.age_ms), _ms(t.idle_ms),
                                      "HANGING" if t.hanging else "open"] for t in opened),
                      justify={c: "right" for c in ("part", "producer", "epoch", "first offset", "age", "idle")})
            out.line()
        if aborted:
            for r in results:
                for a in r.aborted:
                    out.line(f"{r.topic}-{r.partition}: aborted producer {a.producer_id} offsets {a.first_offset}.."
                             f"{a.last_offset} (LSO {a.last_stable_offset}) in {a.segment}: "
                             f"{'indexed' if a.indexed else 'NOT in the .txnindex'}")
        emit_findings(out, results)
        out.line(f"transactions: {len(results)} partitions, {len(opened)} open, {len(hanging)} hanging (idle > "
                 f"{timeout_min} min), {summary['stuck_partitions']} with LSO below the high watermark; "
                 f"{errors} errors, {warnings} warnings")
        if hanging:
            out.info("next: end a hanging transaction with kafka-transactions.sh abort --topic T --partition P "
                     "--start-offset FIRST_OFFSET against the broker")
    return 1 if hanging or errors else 0
