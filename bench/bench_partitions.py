#!/usr/bin/env python3
"""How the commands scale with the number of partitions: every one should be linear.

    .venv/bin/python bench/bench_partitions.py                  # 1k, 5k and 20k partitions
    .venv/bin/python bench/bench_partitions.py --counts 1000,2000

For each count a log dir is generated under ``--dir`` (default: a temp dir in /tmp): one topic with that
many partitions, each with one closed segment of ``--batches`` small v2 batches (its ``.index`` and
``.timeindex`` as the broker's recovery writes them), a ``leader-epoch-checkpoint`` and a
``partition.metadata``, and the four root checkpoints naming every partition. Then each command runs once
in-process (the same code path as the CLI, output discarded) and the wall time is printed, side by side
per count, with the time per 1,000 partitions: that column stays flat when the cost is linear.

Commands: ``info``, ``verify``, ``verify --repair --dry-run``, ``rebuild-index --dry-run``,
``retention --dry-run`` (a size limit that keeps everything), ``offsets``. Nothing is written to the log
dir (every command runs as a dry run or read-only).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kltool.format import build_batch  # noqa: E402
from kltool.format.checkpoints import encode_leader_epoch_checkpoint, encode_offset_checkpoint  # noqa: E402
from kltool.storage.index_builder import rebuild_indexes  # noqa: E402

TS0 = 1_700_000_000_000
TOPIC = "bench"


def _segment(batches: int) -> tuple[bytes, bytes, bytes]:
    log = bytearray()
    off = 0
    for _b in range(batches):
        recs = [(i, TS0 + off + i, f"k{off + i}".encode(), b"v" * 100, []) for i in range(4)]
        log += build_batch(recs, base_offset=off, partition_leader_epoch=0)
        off += 4
    from kltool.storage.scan import walk

    tmp = Path(tempfile.mkstemp(suffix=".log")[1])
    try:
        tmp.write_bytes(log)
        oi, ti = rebuild_indexes(0, walk(tmp), index_interval_bytes=1024)
    finally:
        tmp.unlink()
    return bytes(log), oi, ti


def generate(root: Path, n: int, batches: int) -> Path:
    d = root / f"logdir-{n}"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    log, oi, ti = _segment(batches)
    leo = batches * 4
    lec = encode_leader_epoch_checkpoint([(0, 0)]).encode()
    for p in range(n):
        pd = d / f"{TOPIC}-{p}"
        pd.mkdir()
        (pd / "00000000000000000000.log").write_bytes(log)
        (pd / "00000000000000000000.index").write_bytes(oi)
        (pd / "00000000000000000000.timeindex").write_bytes(ti)
        (pd / "leader-epoch-checkpoint").write_bytes(lec)
        (pd / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
    cp = {(TOPIC, p): leo for p in range(n)}
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        (d / name).write_text(encode_offset_checkpoint(cp))
    (d / "log-start-offset-checkpoint").write_text(encode_offset_checkpoint({(TOPIC, p): 0 for p in range(n)}))
    (d / "cleaner-offset-checkpoint").write_text(encode_offset_checkpoint({}))
    (d / "meta.properties").write_text("version=1\nbroker.id=0\ncluster.id=bench\n")
    return d


COMMANDS = [
    ("info", ["info"]),
    ("verify", ["verify"]),
    ("verify --repair --dry-run", ["verify", "--repair", "--dry-run"]),
    ("rebuild-index --dry-run", ["rebuild-index", "--dry-run"]),
    ("retention --dry-run", ["retention", "--dry-run", "--retention-bytes", str(1 << 40)]),
    ("offsets", ["offsets"]),
    ("dump", ["dump"]),
    ("dump --records", ["dump", "--records"]),
    ("verify --deep", ["verify", "--deep"]),
]


def run(args: list[str]) -> tuple[float, int]:
    from kltool.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(["--quiet", *args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0
    secs = time.perf_counter() - t0
    if code not in (0, 1):
        print(f"  ! {' '.join(args)} exited {code}: {err.getvalue().strip()[:300]}", file=sys.stderr)
    return secs, code


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="1000,5000,20000", help="partition counts (comma-separated)")
    ap.add_argument("--batches", type=int, default=4, help="batches per partition")
    ap.add_argument("--dir", help="where the log dirs are generated (default: a temp dir, removed after)")
    a = ap.parse_args()
    counts = [int(c) for c in a.counts.split(",")]
    root = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="kltool-bench-partitions-"))
    results: dict[str, dict[int, float]] = {name: {} for name, _ in COMMANDS}
    try:
        for n in counts:
            t0 = time.perf_counter()
            d = generate(root, n, a.batches)
            print(f"generated {n} partitions in {time.perf_counter() - t0:.1f}s: {d}", file=sys.stderr)
            for name, cmd in COMMANDS:
                secs, _code = run([*cmd, str(d)])
                results[name][n] = secs
                print(f"  {name:28} {n:>6} partitions: {secs:8.2f} s", file=sys.stderr)
            if not a.dir:
                shutil.rmtree(d)
    finally:
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)
    head = f"{'command':28}" + "".join(f"{f'{n} parts':>14}" for n in counts) + \
        "".join(f"{f's/1k @{n}':>12}" for n in counts)
    print(f"os.cpu_count()={os.cpu_count()}; {a.batches} batches per partition")
    print(head)
    for name, _ in COMMANDS:
        row = results[name]
        print(f"{name:28}" + "".join(f"{row[n]:>12.2f} s" for n in counts)
              + "".join(f"{row[n] / n * 1000:>12.3f}" for n in counts))


if __name__ == "__main__":
    main()
