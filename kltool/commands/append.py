"""kltool append: records from JSON lines, text lines or the command line, written as real batches
(see kltool-append(1)). The work is done by :class:`kltool.storage.write.appender.Appender`."""

from __future__ import annotations

import sys
import time

import click

from ..errors import UsageError
from .common import human_bytes, parse_time


def _header_option(h: str) -> tuple[bytes, bytes | None]:
    k, sep, v = h.partition("=")
    if not k:
        raise UsageError(f"--header takes KEY=VALUE, not {h!r}")
    return k.encode("utf-8"), v.encode("utf-8") if sep else None


@click.command("append")
@click.argument("logdir", type=click.Path(path_type=str, readable=False))
@click.argument("topic")
@click.option("--partition", "-p", type=int, help="Write every record to this partition.")
@click.option("--input", "-i", "input_path", default="-", show_default=True, metavar="FILE",
              help="JSON lines or text lines ('-' = stdin).")
@click.option("--format", "fmt", type=click.Choice(["json", "text"]), default=None,
              help="Input format [default: json; text with --key-separator].")
@click.option("--key-separator", metavar="SEP", help="Text lines are KEY SEP VALUE (without it: the line is the value).")
@click.option("--key", "key_opt", metavar="TEXT", help="One record with this key (no input is read).")
@click.option("--value", "value_opt", metavar="TEXT", help="One record with this value (missing: a null value).")
@click.option("--header", "header_opts", multiple=True, metavar="KEY=VALUE", help="A header of that one record.")
@click.option("--timestamp", "timestamp_opt", metavar="TIME", help="Timestamp of that one record (ISO-8601 or ms).")
@click.option("--magic", type=click.IntRange(0, 2), default=2, show_default=True,
              help="Message format: 2 (record batches), 0/1 (old formats, for tests).")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              help="Codec [default: the topic's compression.type, else none].")
@click.option("--compression-level", type=int, help="gzip 1-9, lz4 1-17, zstd -131072..22 [default: Kafka's].")
@click.option("--batch-bytes", type=int, default=16384, show_default=True,
              help="Close a batch before it passes this many (uncompressed) bytes, like the producer's batch.size.")
@click.option("--batch-records", type=int, help="At most this many records per batch.")
@click.option("--timestamp-type", type=click.Choice(["create", "log-append"]),
              help="CreateTime (the records' own) or LogAppendTime [default: the topic's message.timestamp.type].")
@click.option("--append-time", metavar="TIME", help="The broker clock for LogAppendTime and markers [default: now].")
@click.option("--producer-id", type=int, default=-1, help="Idempotent producer id (v2).")
@click.option("--producer-epoch", type=int, help="Producer epoch [default: the producer's current one, else 0].")
@click.option("--base-sequence", type=int, help="First sequence [default: continue the producer's sequence].")
@click.option("--transactional", is_flag=True, help="Write transactional batches (needs --producer-id).")
@click.option("--end-transaction", type=click.Choice(["commit", "abort"]),
              help="Then write a COMMIT or ABORT marker to each partition written (or with an open transaction).")
@click.option("--coordinator-epoch", type=int, default=0, show_default=True, help="Coordinator epoch of markers.")
@click.option("--leader-epoch", type=int, help="Partition leader epoch [default: the partition's latest, else 0].")
@click.option("--partitioner", type=click.Choice(["sticky", "round-robin"]), default="sticky", show_default=True,
              help="Where records without a key and partition go.")
@click.option("--ignore-unknown-fields", is_flag=True,
              help="Let JSON fields other than a record's (and dump's) through; without it such a field, "
                   "e.g. a typo'd \"valu\", is an error naming the line and the field.")
@click.option("--dry-run", is_flag=True, help="Read and check everything, print what would be written, write nothing.")
@click.option("--memory-limit", type=int, default=64, show_default=True, metavar="MiB",
              help="Built batches held in memory (all partitions) before they are written.")
@click.pass_obj
def command(out, logdir, topic, partition, input_path, fmt, key_separator, key_opt, value_opt, header_opts,
            timestamp_opt, magic, compression, compression_level, batch_bytes, batch_records, timestamp_type,
            append_time, producer_id, producer_epoch, base_sequence, transactional, end_transaction,
            coordinator_epoch, leader_epoch, partitioner, ignore_unknown_fields, dry_run, memory_limit):
    """Append records to TOPIC in LOGDIR as real batches: offsets go on from the log end offset,
    segments roll and indexes are written by the broker's rules.

    Input (stdin or --input): JSON lines {"key", "value", "headers", "timestamp", "partition"} with
    bytes as text or {"base64": ...} (so `kltool dump --records --json` output can be appended back;
    any other field is an error unless --ignore-unknown-fields),
    or text lines (--format text, --key-separator), or one record from --key/--value.
    All or nothing: bad input anywhere leaves the log dir as it was.
    """
    from ..storage.write.appender import Appender, AppendOptions

    single = key_opt is not None or value_opt is not None or bool(header_opts) or timestamp_opt is not None
    if single and input_path != "-":
        raise UsageError("--key/--value/--header/--timestamp make one record; do not give --input too")
    if key_separator is not None:
        if fmt == "json":
            raise UsageError("--key-separator is for --format text")
        fmt = "text"
        if not key_separator:
            raise UsageError("--key-separator must not be empty")
    fmt = fmt or "json"
    if memory_limit < 1:
        raise UsageError("--memory-limit must be at least 1 MiB")
    opts = AppendOptions(
        magic=magic, compression=compression, level=compression_level, batch_bytes=batch_bytes,
        batch_records=batch_records,
        timestamp_type=None if timestamp_type is None else timestamp_type.replace("-", "_"),
        append_time=parse_time(append_time), producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, transactional=transactional, end_transaction=end_transaction,
        coordinator_epoch=coordinator_epoch, leader_epoch=leader_epoch, partitioner=partitioner,
        memory_limit=memory_limit << 20, dry_run=dry_run)
    source = "<stdin>" if input_path == "-" else input_path
    t0 = time.perf_counter()
    skipped = 0
    appender = Appender(logdir, topic, opts, source=None if single else source)
    try:
        if compression and appender.config.compression_type not in ("producer", compression,
                                                                    "uncompressed" if compression == "none" else ""):
            out.warn(f"topic {topic} has compression.type={appender.config.compression_type}: a broker would "
                     f"recompress what it receives; writing {compression} as asked")
        if single:
            appender.add(None if key_opt is None else key_opt.encode("utf-8"),
                         None if value_opt is None else value_opt.encode("utf-8"),
                         tuple(_header_option(h) for h in header_opts), parse_time(timestamp_opt), partition)
        else:
            skipped = _read_input(out, appender, input_path, fmt, key_separator, partition, ignore_unknown_fields)
        if skipped:
            out.info(f"skipped {skipped} lines that are not data records (batch/summary lines, control records)")
        with out.progress(None, "writing") as prog:
            result = appender.commit(progress=prog.advance)
    finally:
        appender.close()
    secs = time.perf_counter() - t0
    _report(out, result, skipped, secs)
    return 1 if dry_run and result.records + result.markers else 0


def _read_input(out, appender, input_path: str, fmt: str, key_separator: str | None, partition: int | None,
                ignore_unknown: bool = False) -> int:
    """Open the input and hand it to :meth:`Appender.add_lines`; returns the lines skipped."""
    import os

    if input_path == "-":
        stream, total, close = sys.stdin.buffer, None, False
    else:
        try:
            stream = open(input_path, "rb")  # noqa: SIM115
        except OSError as e:
            raise UsageError(e.strerror or str(e), path=input_path) from None
        close = True
        try:
            total = os.fstat(stream.fileno()).st_size
        except OSError:
            total = None
    sep = key_separator.encode("utf-8") if key_separator is not None else None
    try:
        with out.progress(total if total and total > (8 << 20) else None, "reading") as prog:
            return appender.add_lines(stream, fmt, sep, partition, progress=prog.advance, ignore_unknown=ignore_unknown)
    finally:
        if close:
            stream.close()


def _report(out, r, skipped: int, secs: float) -> None:
    applied = not r.dry_run
    if out.json_mode:
        for p in r.partitions:
            s = p.stats
            out.emit({"type": "action", "op": "append", "file": str(p.path), "topic": r.topic,
                      "partition": p.partition, "first_offset": s.first_offset, "last_offset": s.last_offset,
                      "records": p.records, "markers": p.markers, "batches": s.batches, "bytes": s.bytes,
                      "segments_rolled": s.rolled, "aborted_txns": s.aborted_txns, "applied": applied})
        out.emit({"type": "summary", "topic": r.topic, "records": r.records, "markers": r.markers,
                  "batches": r.batches, "bytes": r.bytes, "partitions": len(r.partitions),
                  "segments_rolled": r.segments_rolled, "skipped_lines": skipped, "seconds": round(secs, 3),
                  "dry_run": r.dry_run})
        return
    for p in r.partitions:
        s = p.stats
        rolled = f", rolled {len(s.rolled)} segments (new: {', '.join(map(str, s.rolled))})" if s.rolled else ""
        markers = f" + {p.markers} marker" + ("s" if p.markers != 1 else "") if p.markers else ""
        out.line(f"{r.topic}-{p.partition}: {p.records} records{markers} in {s.batches} batches "
                 f"({human_bytes(s.bytes)}), offsets {s.first_offset}..{s.last_offset}{rolled}")
    verb = "would append" if r.dry_run else "appended"
    rate = f", {r.records / secs:,.0f} records/s" if secs > 0 and r.records >= 10_000 else ""
    out.line(f"{verb} {r.records} records in {r.batches} batches ({human_bytes(r.bytes)}) to {len(r.partitions)} "
             f"partitions of {r.topic}; {r.segments_rolled} segments rolled; {secs:.2f}s{rate}")
