"""kltool spark-report: sizes, offsets by time, record counts and a timeline, computed by Spark over
the ``kafka-log`` data source. pyspark and pyarrow are imported only inside the callback."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import time

import click

from ..errors import UsageError
from ..storage.select import select
from ..timeutil import format_time
from .common import human_bytes, paths_argument, selection_options

REPORT_NAMES = ("sizes", "offsets-by-time", "counts", "timeline")
OUTPUT_SUFFIXES = (".csv", ".json", ".jsonl", ".parquet")


def _cell(v):
    """A value for JSON: timestamps as epoch ms, like the rest of kltool's JSON."""
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=_dt.UTC)
        return int(v.timestamp() * 1000)
    return v


def _text(col: str, v):
    if v is None:
        return "-" if col not in ("topic", "partition") else ""
    if isinstance(v, _dt.datetime):
        return format_time(_cell(v))
    if col in ("bytes", "batch_bytes", "damaged_bytes") and isinstance(v, int):
        return human_bytes(v)
    return str(v)


def _csv_times(table):
    """Timestamp columns as ISO-8601 text with milliseconds (``2024-05-01T12:00:00.000Z``), as kltool
    prints times everywhere (pyarrow's CSV writer would give ``2024-05-01 12:00:00.000000Z``)."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type):
            text = [None if v is None else format_time(_cell(v)) for v in table.column(i).to_pylist()]
            table = table.set_column(i, field.name, pa.array(text, pa.string()))
    return table


def write_output(table, path: str) -> None:
    """Write a pyarrow Table as one file, the format chosen by the suffix: Parquet keeps timestamp
    columns as timestamps, JSON lines gives them as epoch ms, CSV as ISO-8601 text with ms."""
    low = path.lower()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if low.endswith(".parquet"):
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    elif low.endswith(".csv"):
        import pyarrow.csv as pcsv

        pcsv.write_csv(_csv_times(table), path)
    else:  # .json / .jsonl: JSON lines
        import json

        with open(path, "w", encoding="utf-8") as f:
            for row in table.to_pylist():
                f.write(json.dumps({k: _cell(v) for k, v in row.items()}, ensure_ascii=False))
                f.write("\n")


def _pairs(items, flag: str) -> dict:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise UsageError(f"{flag} takes KEY=VALUE, not {item!r}")
        out[k.strip()] = v
    return out


def check_selection(paths, topic, partition_spec, storage_options=None) -> list[str]:
    """What spark-report will read, checked before Spark starts: a path that does not exist, a
    --topic/--partition that selects nothing, or paths that hold no Kafka segment (a README.md)
    are bad input. Returns the paths as the data source takes them (local ones absolute)."""
    from ..format.names import classify
    from ..storage.select import parse_partitions
    from ..storage.uri import is_remote, local_path, select_remote

    remote = [p for p in paths if is_remote(p)]
    local = [local_path(p) for p in paths if not is_remote(p)]
    if remote:  # listed by name on the object store (pyarrow, no Spark)
        select_remote(remote, topic, parse_partitions(partition_spec), storage_options)
    if local:
        sel = select(local, topic, partition_spec)
        if not sel.partitions and not any(classify(f)[0] in ("log", "kraft_snapshot") for f in sel.files):
            where = ", ".join(str(p) for p in local)
            raise UsageError(f"{where}: no Kafka log dir, partition directory or .log segment to read")
    return remote + [os.path.abspath(p) for p in local]


@click.command("spark-report")
@click.argument("report", type=click.Choice(REPORT_NAMES))
@paths_argument
@selection_options
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master URL (local[N], spark://HOST:7077, yarn, k8s://..., local-cluster[N,C,MB]).")
@click.option("--conf", "confs", multiple=True, metavar="K=V",
              help="A Spark setting (repeatable), as spark-submit --conf; applied last.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="K=V",
              help="For object-store paths (s3://, gs://, abfs://, hdfs://): endpoint_override, access_key, "
                   "secret_key, region, ... (repeatable; the usual AWS_*/GOOGLE_* environment works too).")
@click.option("--ship-kltool", is_flag=True,
              help="Send kltool (a zip of its Python files) to executors whose Python lacks it.")
@click.option("--time", "time_spec", metavar="T", help="offsets-by-time: ISO-8601 time or epoch ms.")
@click.option("--unit", type=click.Choice(["minute", "hour", "day"]), default="hour", show_default=True,
              help="timeline: bucket size.")
@click.option("--output", "-o", "output", type=click.Path(dir_okay=False, path_type=str, readable=False),
              help="Also write the result to FILE (.csv, .json/.jsonl or .parquet, by suffix); an existing "
                   "FILE needs --force.")
@click.option("--force", is_flag=True, help="Overwrite an existing --output FILE.")
@click.pass_obj
def command(out, report, paths, topic, partition_spec, master, confs, storage_options, ship_kltool, time_spec,
            unit, output, force):
    """Run REPORT with Spark over log dirs (PATH...): sizes, offsets-by-time (--time T), counts,
    timeline. Starting Spark takes ~15 s; needs Java 17+ and kltool[spark].

    \b
    sizes            segments, bytes, batches, records, compression mix per partition, topic, total
    offsets-by-time  first offset with timestamp >= T per partition (Kafka's ListOffsets by time)
    counts           true record counts, first/last offsets and timestamps per partition
    timeline         batches, records and bytes per topic and hour (--unit)
    """
    from ..timeutil import parse_time

    ts = parse_time(time_spec)
    _check_options(report, ts, output, force)
    conf = _pairs(confs, "--conf")
    storage = _pairs(storage_options, "--storage-option")
    paths = check_selection(paths, topic, partition_spec, storage)  # errors before Spark starts

    from ..spark import session

    try:
        from pyspark.sql import SparkSession

        existing = SparkSession.getActiveSession()
    except ImportError:
        existing = None
    t0 = time.perf_counter()
    jvm_log = None
    if existing is None:
        import tempfile

        jvm_log = os.path.join(tempfile.gettempdir(), f"kltool-spark-{os.getpid()}.log")
        out.info(f"spark-report: starting Spark ({master}) ...")
    # pushdown forced on: every report loads a DataFrame per query and scans it with one set of filters
    spark = existing if existing is not None else session(master, "kltool spark-report", jvm_log=jvm_log,
                                                          conf=conf, ship=ship_kltool, pushdown=True)
    if existing is not None and ship_kltool:
        from ..spark import ship_kltool as _ship

        _ship(spark)
    ok = False
    try:
        from ..spark import reports

        fn = reports.REPORTS[report]
        kw = {"topic": topic, "partition": partition_spec}
        if storage:
            kw["storage_options"] = storage
        if report == "offsets-by-time":
            df = fn(spark, paths, ts, **kw)
        elif report == "timeline":
            df = fn(spark, paths, unit=unit, **kw)
        else:
            df = fn(spark, paths, **kw)
        table = df.toArrow()
        ok = True
    except Exception as e:
        from ..errors import KltoolError
        from ..spark import spark_error

        if isinstance(e, KltoolError):
            raise
        err = spark_error(e)
        if jvm_log and not isinstance(err, UsageError):
            err.message += f" (Spark's log: {jvm_log})"
        raise err from None
    finally:
        if existing is None:
            spark.stop()
            if ok and jvm_log:
                with contextlib.suppress(OSError):
                    os.unlink(jvm_log)
    return _show(out, report, table, time.perf_counter() - t0, output)


def _check_options(report: str, ts: int | None, output: str | None, force: bool) -> None:
    if report == "offsets-by-time" and ts is None:
        raise UsageError("offsets-by-time needs --time T (ISO-8601 or epoch ms)")
    if output is not None and not output.lower().endswith(OUTPUT_SUFFIXES):
        raise UsageError(f"--output {output}: use a .csv, .json, .jsonl or .parquet file name")
    if output is not None and os.path.lexists(output) and not force:
        raise UsageError(f"--output {output}: the file exists; give --force to overwrite it")


def _show(out, report: str, table, secs: float, output: str | None) -> int:
    """The report's rows (a pyarrow table) as JSON objects or a table, its damage warnings, and --output."""
    rows = table.to_pylist()
    cols = table.column_names
    damaged = [r for r in rows if r.get("damaged_bytes") and r.get("scope", "partition") == "partition"]
    for r in damaged:  # counted apart: what `kltool offsets --count` warns about
        out.warn(f"{r['topic']}-{r['partition']}: {r['damaged_bytes']} damaged bytes were not read "
                 "(kltool verify shows where)")
    if output is not None:
        write_output(table, output)
    if out.json_mode:
        kind = report.replace("-", "_")
        for r in rows:
            d = {"type": kind}
            d.update({k: _cell(v) for k, v in r.items()})
            out.emit(d)
        out.emit({"type": "summary", "report": report, "rows": len(rows), "seconds": round(secs, 3),
                  "output": output})
        return 0
    if rows:
        out.table(cols, [[_text(c, r[c]) for c in cols] for r in rows],
                  justify={c: "right" for c in cols if c not in ("scope", "topic", "compression")})
    out.info(f"spark-report {report}: {len(rows)} rows in {secs:.1f}s"
             + (f"; written to {output}" if output else ""))
    return 0
