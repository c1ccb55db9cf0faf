#!/usr/bin/env python3
"""How long ``kltool verify --repair`` takes on one big damaged segment, against ``kltool verify`` alone.

    .venv/bin/python bench/bench_repair.py                 # a 1 GiB segment, 5 runs per figure
    .venv/bin/python bench/bench_repair.py --size 64M      # a quick run

The segment is v2, uncompressed, 16 KiB batches of 1 KiB records (contiguous offsets), with the indexes
a rebuild gives (as a broker would have them), in a log dir under ``--dir`` (default: a temp dir in
/tmp). Scenarios, each applied to a fresh copy of the clean segment before every run:

* ``torn tail``             the last batch cut in half (a crash during an append);
* ``zero hole (1 MiB)``     1 MiB of zero bytes in the middle (a lost write / preallocated block);
* ``garbage (64 KiB)``      64 KiB of random bytes in the middle (a bad block);

For each: ``verify`` (``kltool verify`` on the partition: batches, CRCs, indexes) and ``repair`` (the
whole ``kltool verify --repair``: lock, scan, plan, back up the cut bytes and old indexes, write the
manifest, rewrite/truncate the log, rebuild its indexes, fsyncs) — medians of ``--runs`` runs, the file
in the page cache (it was just written). The repair's backup goes beside the log dir (same file system).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kltool.format import build_batch  # noqa: E402
from kltool.storage import open_paths  # noqa: E402
from kltool.storage.change.repair import repair  # noqa: E402
from kltool.storage.check.verify import VerifyStats, verify_selection  # noqa: E402

TS0 = 1_700_000_000_000


def parse_size(s: str) -> int:
    s = s.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def write_segment(path: Path, size: int) -> tuple[int, int]:
    """A segment of about ``size`` bytes; returns (batches, batch size)."""
    rng = random.Random(1)
    recs = [(i, TS0 + i, f"key-{i}".encode(), rng.randbytes(1000), []) for i in range(16)]
    template = bytearray(build_batch(recs, base_offset=0, partition_leader_epoch=0))
    n = max(1, size // len(template))
    per = 16
    chunk = 1024
    with open(path, "wb") as f:
        buf = bytearray()
        for i in range(n):
            # only the base offset changes: the v2 CRC does not cover it (bytes 0-7)
            template[0:8] = (i * per).to_bytes(8, "big")
            buf += template
            if (i + 1) % chunk == 0:
                f.write(buf)
                buf.clear()
        f.write(buf)
    return n, len(template)


def damage(path: Path, scenario: str, batch: int) -> None:
    size = path.stat().st_size
    if scenario == "torn tail":
        with open(path, "r+b") as f:
            f.truncate(size - batch // 2)
        return
    mid = (size // 2 // batch) * batch + 100
    n = (1 << 20) if scenario.startswith("zero") else (64 << 10)
    data = bytes(n) if scenario.startswith("zero") else random.Random(2).randbytes(n)
    with open(path, "r+b") as f:
        f.seek(mid)
        f.write(data)


def time_verify(part: Path) -> float:
    t = time.perf_counter()
    stats = VerifyStats()
    for _ in verify_selection(open_paths([part]), stats=stats):
        pass
    return time.perf_counter() - t


def time_repair(part: Path, backup: Path) -> tuple[float, int]:
    t = time.perf_counter()
    res = repair(open_paths([part]), backup_dir=backup)
    secs = time.perf_counter() - t
    return secs, sum(a.bytes or 0 for a in res.plan.actions if a.op in ("truncate", "excise"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="segment size (e.g. 1G, 256M; default 1G)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per figure (median; default 5)")
    ap.add_argument("--dir", default=None, help="where to build the log dir (default: a temp dir in /tmp)")
    args = ap.parse_args()
    size = parse_size(args.size)
    base = Path(tempfile.mkdtemp(prefix="kltool-bench-repair-", dir=args.dir))
    try:
        logdir = base / "logs"
        part = logdir / "bench-0"
        part.mkdir(parents=True)
        clean = base / "clean.log"
        t = time.perf_counter()
        n, bsize = write_segment(clean, size)
        seg = part / "00000000000000000000.log"
        shutil.copyfile(clean, seg)
        repair(open_paths([part]), backup_dir=base / "setup-backup")  # the indexes, as a broker has them
        idx = {p.name: p.read_bytes() for p in part.iterdir() if p.suffix != ".log"}
        shutil.rmtree(base / "setup-backup")
        print(f"segment: {clean.stat().st_size / 1e9:.3f} GB, {n} batches of {bsize} bytes "
              f"(built in {time.perf_counter() - t:.1f}s); {args.runs} runs per figure, medians; "
              f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
        print(f"{'scenario':<20} {'verify s':>9} {'repair s':>9} {'repair/verify':>14} {'verify GB/s':>12} "
              f"{'repair GB/s':>12} {'bytes cut':>10}")
        for scenario in ("torn tail", "zero hole (1 MiB)", "garbage (64 KiB)"):
            vs, rs, cut = [], [], 0
            for _ in range(args.runs):
                shutil.copyfile(clean, seg)
                for name, data in idx.items():
                    (part / name).write_bytes(data)
                damage(seg, scenario, bsize)
                gb = seg.stat().st_size / 1e9
                vs.append(time_verify(part))
                bk = base / "backup"
                secs, cut = time_repair(part, bk)
                rs.append(secs)
                shutil.rmtree(bk)
            v, r = statistics.median(vs), statistics.median(rs)
            print(f"{scenario:<20} {v:>9.3f} {r:>9.3f} {r / v:>13.1f}x {gb / v:>12.2f} {gb / r:>12.2f} "
                  f"{cut:>10}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
