#!/usr/bin/env python3
"""Records/s of the Spark data source's Arrow conversion in this process, without Spark: what one
executor task does (``kltool.spark.datasource.read_partition_rows`` over every planned partition of a
segment), per codec. The stable figure beside bench_spark.py's (no JVM, no scheduling, no Arrow
transfer to the JVM).

    .venv/bin/python bench/gen_segment.py --records 4000000 --codecs none,lz4,zstd,snappy,gzip \\
        --short-values --small 0 --out bench/out/c4m
    .venv/bin/python bench/bench_arrow.py --dir bench/out/c4m

Modes: ``pruned`` reads the columns ``offset, timestamp`` (the pruned count's schema: every record is
still decoded and checked, keys, values and headers are not copied); ``full`` reads every column of
Spark's Kafka-source schema. Each figure is the median of ``--runs`` runs after one warm-up, in wall
time and in this process's CPU time (user + system: what one core spent, which other processes' load
inflates far less than the wall time), with the 1-minute load average at the end of the runs (the
machine is shared: compare figures taken at a similar load). ``KLTOOL_NO_SPEEDUPS=1`` measures the
pure-Python reference, ``KLTOOL_NO_ISAL=1`` gzip through zlib's inflate instead of ISA-L's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

MODES = {"pruned": ["offset", "timestamp"], "full": None}


def read_all(path: Path, columns) -> int:
    from kltool.spark import datasource as ds

    o = ds.normalize_options({"path": str(path)})
    rows = 0
    for part in ds.KafkaLogReader(o, columns, 2).partitions():
        for b in ds.read_partition_rows(o, part, columns):
            rows += b.num_rows
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=HERE / "out" / "c4m", help="gen_segment.py's --out")
    ap.add_argument("--codecs", default="none,lz4,zstd,snappy,gzip")
    ap.add_argument("--modes", default="pruned,full")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"{'codec':8s} {'mode':7s} {'records':>10s} {'median s':>9s} {'M rec/s':>8s} {'min s':>7s} "
          f"{'CPU s':>7s} {'M rec/CPU s':>12s}  load (1 min)")
    for codec in args.codecs.split(","):
        path = args.dir / f"{codec}-0"
        if not path.is_dir():
            print(f"{codec}: no {path}", file=sys.stderr)
            continue
        for mode in args.modes.split(","):
            cols = MODES[mode]
            n = read_all(path, cols)  # warm-up (and page cache)
            times, cpus = [], []
            for _ in range(args.runs):
                t, c = time.perf_counter(), time.process_time()
                got = read_all(path, cols)
                times.append(time.perf_counter() - t)
                cpus.append(time.process_time() - c)
                assert got == n, (got, n)
            med, cpu = statistics.median(times), statistics.median(cpus)
            print(f"{codec:8s} {mode:7s} {n:10,d} {med:9.3f} {n / med / 1e6:8.2f} {min(times):7.3f} "
                  f"{cpu:7.3f} {n / cpu / 1e6:12.2f}  {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
