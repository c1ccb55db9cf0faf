#!/usr/bin/env python3
"""Records/s of the ``kafka-log`` Spark data source, side by side on ``local[2]`` and
``local-cluster[2,1,1024]`` (executors in their own JVMs), and the tasks one big segment becomes.

    .venv/bin/python bench/bench_spark.py                    # a 1 GiB segment, 3 runs per query
    .venv/bin/python bench/bench_spark.py --size 256M --runs 1 --masters 'local[2]'

Data: one partition ``t-0`` holding one segment of ``--size`` bytes (default 1 GiB) of uncompressed
16 KiB batches (~70 records of ~200 bytes each, one header on every 10th record) and its ``.index``
(an entry per batch, as the broker writes with ``log.index.interval.bytes=4096``). It is written fast
by repeating one batch with its base offset patched (the base offset is outside a v2 batch's CRC):
every batch is valid to Kafka's reader, the offsets run 0..N-1.

Queries, each the median of ``--runs`` after one warm-up, with records/s and records/s per core:

  count            ``df.count()`` with the full Kafka-source schema
  pruned count     ``.schema("offset LONG, timestamp TIMESTAMP")``: count and max(offset) (no key,
                   value or header decoding)
  full read        an aggregate over every column (count, sum of key/value lengths, headers seen)
  pushed query     ``where(partition = 0 AND offset >= N - 390000)``, count: filter pushdown
  startingOffsets  the same rows asked for with ``startingOffsets`` (the form pushdown must match)
  floor            Spark's own cost: a trivial Python data source yielding prebuilt Arrow batches of
                   the pruned count's two columns (offset, timestamp), as many rows in as many tasks
                   and batches as the pruned count: no file is read, so this is the most any Python
                   data source can do here
  full floor       with ``--data``: the full read's floor, the same aggregate over a trivial Python data
                   source yielding the data set's own first Arrow batch (every column, as the reader made
                   it) again and again, as many rows in as many tasks as the reader plans: Spark's cost of
                   taking these rows from any Python source, nothing read or decoded

Queries run interleaved (one warm-up each, then ``--runs`` rounds of every query); the machine's
load (``uptime``) is printed before and after. With ``--data``, each query's CPU time (user + system of the
Spark JVM and its Python workers, the process tree under this one) is printed too, with records / (CPU
seconds / 2): what the query would do on 2 cores of its own, the figure that other work on a shared
machine inflates least (an estimate: it assumes both cores kept busy).

Compressed data: ``--data DIR[,DIR...]`` reads existing partition directories instead (for example
gen_segment.py's per-codec ``<codec>-0``, ``--short-values`` for issue 22's ~100-byte values), each
labelled by its name, all in one session; ``--queries`` picks queries by name (comma-separated, e.g.
``pruned count,full read``), ``--split-bytes`` the reader's ``splitBytes`` (a segment is split at its
``.index`` entries: ``kltool rebuild-index`` writes them for generated data), or ``--tasks N`` a
``splitBytes`` per data set that cuts its segment into N even splits, each its own task (``maxPartitionBytes``
0). Without either, the reader's own planning: segments cut as Spark cuts files, in even pieces, a
multiple of the cores (a 138 MB gzip segment: 2 tasks on local[2]). The expected counts are
read first, in-process.

    .venv/bin/python bench/gen_segment.py --records 4000000 --codecs none,lz4,zstd,snappy,gzip \
        --short-values --small 0 --out bench/out/c4m
    .venv/bin/kltool rebuild-index bench/out/c4m/*-0
    .venv/bin/python bench/bench_spark.py --masters 'local[2]' --queries 'pruned count,full read' \
        --split-bytes 32M --data bench/out/c4m/none-0,bench/out/c4m/lz4-0,bench/out/c4m/zstd-0,bench/out/c4m/snappy-0,bench/out/c4m/gzip-0

Plus the input tasks the segment is planned into: split at batch starts every ``splitBytes``
(128 MiB) versus whole (``splitBytes=0``). Session start is timed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from kltool.format import build_batch  # noqa: E402

TS_BASE = 1_700_000_000_000


def _size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(float(t.rstrip("KMG")) * mult)


def generate(pdir: Path, size: int) -> int:
    """Write the segment and its index; return the record count. Skipped when already there."""
    done = pdir / ".complete"
    if done.exists():
        return int(done.read_text())
    pdir.mkdir(parents=True, exist_ok=True)
    pad = b"0123456789abcdef" * 12
    per = 70
    recs = [(i, TS_BASE + i, b"key-%06d" % i, b"value-%06d-" % i + pad, [("trace", b"t-%d" % i)] if i % 10 == 0 else ())
            for i in range(per)]
    template = bytearray(build_batch(recs, base_offset=0))
    n_batches = max(1, size // len(template))
    with open(pdir / f"{0:020d}.log", "wb") as log, open(pdir / f"{0:020d}.index", "wb") as idx:
        buf = bytearray()
        for b in range(n_batches):
            struct.pack_into(">q", template, 0, b * per)
            buf += template
            idx.write(struct.pack(">ii", b * per + per - 1, b * len(template)))
            if len(buf) >= (8 << 20):
                log.write(buf)
                buf.clear()
        log.write(buf)
    n = n_batches * per
    done.write_text(str(n))
    return n


def tree_cpu() -> float:
    """CPU seconds (user + system) of this process and every process under it: the Spark JVM and its
    Python workers, with the children they have reaped. On a loaded machine the wall time of a query
    grows with the load; its CPU time much less."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(d)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))  # ppid; utime stime cutime cstime
    me = os.getpid()
    total = 0
    for pid, (_ppid, cpu) in stats.items():
        p = pid
        while p in stats and p != me:
            p = stats[p][0]
        if p == me:
            total += cpu
    return total / tick


def timed(queries: dict, runs: int, cpu: dict | None = None) -> dict:
    """{name: (median seconds, last result)}: a warm-up of each, then ``runs`` interleaved rounds; the
    median CPU seconds of the process tree per query go to ``cpu`` when given."""
    for fn in queries.values():
        fn()
    times: dict = {name: [] for name in queries}
    cpus: dict = {name: [] for name in queries}
    out: dict = {}
    for _ in range(runs):
        for name, fn in queries.items():
            t, c = time.perf_counter(), tree_cpu()
            out[name] = fn()
            times[name].append(time.perf_counter() - t)
            cpus[name].append(tree_cpu() - c)
    if cpu is not None:
        cpu.update({name: statistics.median(cs) for name, cs in cpus.items()})
    return {name: (statistics.median(ts), out[name]) for name, ts in times.items()}


def floor_source(rows_per_batch: int):
    """A Python data source with nothing to read: ``rows`` rows in ``parts`` partitions, yielded as one
    prebuilt Arrow batch (sliced at the end): of ``rows_per_batch`` rows of (offset, timestamp), or, with
    the option ``batch`` (an Arrow IPC file holding one batch) and ``schema`` (its DDL), that batch."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorReader(DataSourceReader):
        def __init__(self, options):
            self.rows, self.parts = int(options["rows"]), int(options["parts"])
            self.batch = options.get("batch")

        def partitions(self):
            per = -(-self.rows // self.parts)
            return [InputPartition(max(0, min(per, self.rows - i * per))) for i in range(self.parts)]

        def read(self, partition):
            from array import array

            import pyarrow as pa

            if self.batch:
                with pa.OSFile(self.batch) as f:
                    batch = pa.ipc.open_file(f).get_batch(0)
                k = batch.num_rows
            else:
                k = rows_per_batch
                off = pa.Array.from_buffers(pa.int64(), k, [None, pa.py_buffer(array("q", range(k)))])
                ts = pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), k,
                                           [None, pa.py_buffer(array("q", range(0, 1000 * k, 1000)))])
                batch = pa.RecordBatch.from_arrays([off, ts], names=["offset", "timestamp"])
            left = partition.value
            while left > 0:
                yield batch if left >= k else batch.slice(0, left)
                left -= k

    class FloorSource(DataSource):
        @classmethod
        def name(cls):
            return "kltool-bench-floor"

        def schema(self):
            return self.options.get("schema", "offset long, timestamp timestamp")

        def reader(self, schema):
            return FloorReader(self.options)

    return FloorSource


def floor_batch(pdir: Path, out: Path) -> tuple[Path, int]:
    """The first Arrow batch the reader makes of ``pdir`` (every column), written to ``out`` for the
    full-row floor, and the number of tasks the reader plans for ``pdir`` on 2 cores."""
    import pyarrow as pa

    from kltool.spark import datasource as ds

    o = ds.normalize_options({"path": str(pdir)})
    parts = ds.KafkaLogReader(o, None, 2).partitions()
    batch = next(iter(ds.read_partition_rows(o, parts[0], None)))
    out.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(out), "wb") as f, pa.ipc.new_file(f, batch.schema) as w:
        w.write_batch(batch)
    return out, len(parts)


def tasks(pdir: Path) -> tuple[int, int]:
    from kltool.spark import datasource as ds

    def n(opts):
        r = ds.KafkaLogReader(ds.normalize_options({"path": str(pdir), **opts}), default_min_partitions=2)
        return len(r.partitions())

    return n({}), n({"splitBytes": "0"})


def count_records(pdir: Path) -> int:
    """The records of a partition dir, read in-process (the expected count of its queries)."""
    from kltool.spark import datasource as ds

    o = ds.normalize_options({"path": str(pdir)})
    cols = ["offset"]
    return sum(b.num_rows for part in ds.KafkaLogReader(o, cols, 2).partitions()
               for b in ds.read_partition_rows(o, part, cols))


def bench_data(master: str, sets: list[tuple[str, Path, int]], runs: int, which: list[str],
               split_bytes: str | None = None, tasks: int | None = None, opts: dict | None = None,
               confs: dict | None = None) -> dict:
    """``which`` queries over each data set in one session: {label: [(query, seconds, rows)]}."""
    from pyspark.sql import functions as F

    from kltool.spark import session

    t = time.perf_counter()
    spark = session(master, "kltool-bench", conf={"spark.executor.memory": "1g", "spark.sql.adaptive.enabled": "false",
                                                  **(confs or {})}, pushdown=True)
    print(f"  {master}: session start {time.perf_counter() - t:.1f} s", flush=True)

    def fresh(path, schema=None):
        r = spark.read.format("kafka-log").options(**(opts or {}))
        if tasks:  # about ``tasks`` splits of the data set's segment bytes
            size = sum(f.stat().st_size for f in Path(path).glob("*.log"))
            r = r.option("splitBytes", str(size // tasks)).option("maxPartitionBytes", "0")
        elif split_bytes:
            r = r.option("splitBytes", str(_size(split_bytes)))
        if schema:
            r = r.schema(schema)
        return r.load(path)

    from kltool.spark.datasource import DEFAULT_ROWS_PER_BATCH, RECORD_SCHEMA

    spark.dataSource.register(floor_source(DEFAULT_ROWS_PER_BATCH))
    full = F.count("*"), F.sum(F.length("key")), F.sum(F.length("value")), F.sum(F.size("headers"))

    def floor_full(p):
        batch, parts = floor_batch(Path(p), HERE / "out" / "floor" / f"{Path(p).name}.arrow")
        n = next(k for label, d, k in sets if str(d) == p)
        return lambda: spark.read.format("kltool-bench-floor").options(
            rows=n, parts=parts, batch=str(batch), schema=RECORD_SCHEMA).load().agg(*full).collect()[0][0]

    make = {
        "count": lambda p: lambda: fresh(p).count(),
        "pruned count": lambda p: lambda: fresh(p, "offset LONG, timestamp TIMESTAMP").agg(
            F.count("*"), F.max("offset")).collect()[0][0],
        "full read": lambda p: lambda: fresh(p).agg(*full).collect()[0][0],
        "full floor": floor_full,
    }
    queries, want = {}, {}
    for label, pdir, n in sets:
        for q in which:
            queries[(label, q)] = make[q](str(pdir))
            want[(label, q)] = n
    out: dict = {}
    cpu: dict = {}
    for (label, q), (secs, got) in timed(queries, runs, cpu).items():
        if got != want[(label, q)]:
            raise SystemExit(f"{q} of {label} on {master}: {got} rows, expected {want[(label, q)]}")
        c = cpu[(label, q)]
        out.setdefault(label, []).append((q, secs, got, c))
        print(f"  {master:10s} {label:10s} {q:14s} {secs:7.2f} s  {got / secs / 1e6:6.2f} M rec/s  "
              f"CPU {c:6.2f} s ({got / c * 2 / 1e6:5.2f} M rec/s if 2 cores were free)  "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
    spark.stop()
    return out


def bench_master(master: str, pdir: Path, n: int, runs: int, n_tasks: int) -> list[tuple[str, float, int]]:
    from pyspark.sql import functions as F

    from kltool.spark import session

    t = time.perf_counter()
    spark = session(master, "kltool-bench", conf={"spark.executor.memory": "1g", "spark.sql.adaptive.enabled": "false"},
                    pushdown=True)  # a fresh DataFrame per query
    print(f"  {master}: session start {time.perf_counter() - t:.1f} s", flush=True)
    path = str(pdir)
    cores = 2
    lo = max(0, n - 390000)

    def fresh(schema=None):
        r = spark.read.format("kafka-log")
        if schema:
            r = r.schema(schema)
        return r.load(path)

    from kltool.spark.datasource import DEFAULT_ROWS_PER_BATCH

    spark.dataSource.register(floor_source(DEFAULT_ROWS_PER_BATCH))
    queries = {
        "count": lambda: fresh().count(),
        "pruned count": lambda: fresh("offset LONG, timestamp TIMESTAMP").agg(
            F.count("*"), F.max("offset")).collect()[0][0],
        "full read": lambda: fresh().agg(F.count("*"), F.sum(F.length("key")), F.sum(F.length("value")),
                                         F.sum(F.size("headers"))).collect()[0][0],
        "pushed query": lambda: fresh().where(f"partition = 0 AND offset >= {lo}").count(),
        "startingOffsets": lambda: spark.read.format("kafka-log").option(
            "startingOffsets", json.dumps({"t": {"0": lo}})).load(path).count(),
        "floor": lambda: spark.read.format("kltool-bench-floor").option("rows", n).option("parts", n_tasks).load().agg(
            F.count("*"), F.max("offset")).collect()[0][0],
    }
    rows = []
    for name, (secs, got) in timed(queries, runs).items():
        want = n - lo if name in ("pushed query", "startingOffsets") else n
        if got != want:
            raise SystemExit(f"{name} on {master}: {got} rows, expected {want}")
        rows.append((name, secs, want))
        print(f"  {master:26s} {name:16s} {secs:7.2f} s  {want / secs / 1e6:6.2f} M rec/s  "
              f"{want / secs / cores / 1e6:6.2f} M rec/s per core", flush=True)
    spark.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="segment size (default 1G)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--masters", default="local[2];local-cluster[2,1,1024]", help="separated by ;")
    ap.add_argument("--data", help="existing partition dirs, comma-separated (instead of the generated segment)")
    ap.add_argument("--queries", default="count,pruned count,full read",
                    help="with --data: the queries, comma-separated (count, pruned count, full read, full floor)")
    ap.add_argument("--split-bytes", help="with --data: the reader's splitBytes (default its own, 128M; a "
                    "segment is split at its .index entries, so give the data sets one: kltool rebuild-index)")
    ap.add_argument("--tasks", type=int, help="with --data: splitBytes per data set so that its segment is read "
                    "in about this many tasks (an even number keeps both cores of local[2] busy to the end)")
    ap.add_argument("--opt", action="append", default=[], metavar="K=V", help="with --data: a reader option")
    ap.add_argument("--conf", action="append", default=[], metavar="K=V", help="with --data: a session setting")
    args = ap.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min)")
    if args.data:
        sets = []
        for d in args.data.split(","):
            pdir = Path(d.strip())
            sets.append((pdir.name, pdir, count_records(pdir)))
            print(f"data: {pdir} ({sets[-1][2]:,} records)", flush=True)
        which = [q.strip() for q in args.queries.split(",") if q.strip()]
        for master in [m.strip() for m in args.masters.split(";") if m.strip()]:
            res = bench_data(master, sets, args.runs, which, args.split_bytes, args.tasks,
                             dict(o.split("=", 1) for o in args.opt), dict(c.split("=", 1) for c in args.conf))
            print(f"\n{master}: M records/s (seconds), medians of {args.runs}; then CPU seconds of the JVM and its "
                  "Python workers, and records / (CPU s / 2): the rate if the query had 2 cores to itself")
            print(f"{'data':12s}" + "".join(f"{q:>22s}" for q in which) + "".join(f"{q + ' CPU':>26s}" for q in which))
            for label, rows in res.items():
                print(f"{label:12s}" + "".join(f"{n / secs / 1e6:12.2f} ({secs:5.2f} s)" for _q, secs, n, _c in rows)
                      + "".join(f"{c:10.2f} s ({n / c * 2 / 1e6:5.2f} M/s)" for _q, _s, n, c in rows))
            for label, rows in res.items():
                d = {q: (secs, c) for q, secs, _n, c in rows}
                if "full read" in d and "full floor" in d:
                    print(f"{label}: the full read takes {d['full read'][0] / d['full floor'][0]:.2f}x the full "
                          f"floor's time, {d['full read'][1] / d['full floor'][1]:.2f}x its CPU")
        print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min)")
        return
    size = _size(args.size)
    pdir = HERE / "out" / f"spark-seg-{args.size}" / "t-0"
    t = time.perf_counter()
    n = generate(pdir, size)
    print(f"data: {pdir} ({os.path.getsize(pdir / f'{0:020d}.log') / (1 << 20):.0f} MiB, {n:,} records; "
          f"{time.perf_counter() - t:.1f} s to write or find)")
    split, whole = tasks(pdir)
    print(f"tasks for the segment: {split} split at .index batch starts (splitBytes 128 MiB), {whole} unsplit")
    results = {}
    for master in [m.strip() for m in args.masters.split(";") if m.strip()]:
        results[master] = bench_master(master, pdir, n, args.runs, split)
    print("\nquery              " + "".join(f"{m:>30s}" for m in results))
    names = [r[0] for r in next(iter(results.values()))]
    for i, name in enumerate(names):
        cells = []
        for rows in results.values():
            _nm, secs, cnt = rows[i]
            cells.append(f"{cnt / secs / 2 / 1e6:9.2f} M/s/core ({secs:5.2f} s)")
        print(f"{name:18s} " + "".join(f"{c:>30s}" for c in cells))
    for m, rows in results.items():
        d = {r[0]: r[1] for r in rows}
        print(f"{m}: pushed query / startingOffsets = {d['pushed query'] / d['startingOffsets']:.2f}x; "
              f"pruned count takes {d['pruned count'] / d['floor']:.2f}x the floor's time")
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min)")


if __name__ == "__main__":
    main()
