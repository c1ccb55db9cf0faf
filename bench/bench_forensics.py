#!/usr/bin/env python3
"""Time ``kltool transactions``, ``producers`` and ``diff`` on a generated partition of about 1 GiB.

    .venv/bin/python bench/bench_forensics.py                 # 1 GiB, 128 MiB segments
    .venv/bin/python bench/bench_forensics.py --mib 64        # a quick run
    .venv/bin/python bench/bench_forensics.py --producers 2000 --out bench/out/forensics-2000

Measured on the 2-CPU machine (1 GiB, 9 segments; wall time of a fresh process, Python start included):
8 producers: clean 0.22 s (transactions) / 0.32 s (producers), unclean 0.29 / 0.33 s, --scan-all 1.51 s,
diff 1.55 s; 2000 producers: clean 0.30 / 0.30 s, unclean 0.34 / 0.53 s, --scan-all 0.74 s, diff 1.40 s.

Writes ``bench/out/forensics/logs/txn-0`` with kltool's own writer (``bench/out`` is gitignored):
transactional producers (``--producers``, 8 by default) taking turns (16 KiB batches of 70 records, a
COMMIT or, every fifth, an ABORT after every 20 batches of a producer), plain batches between, and one
producer that never ends its transaction. Segments roll at ``--segment-mib``; the writer leaves a producer snapshot at every roll and
at the log end, as a clean broker shutdown does. Then, each in a fresh process:

* clean: the snapshot at the log end (what the broker reads after a clean shutdown);
* unclean: that snapshot removed (a crash): the last roll's snapshot and the active segment's batches;
* ``--scan-all``: every segment;
* ``diff`` of the partition against a copy whose tail differs (the last 8 MiB rewritten at a new epoch).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kltool.format.batch import build_end_txn_marker, build_v2_batch  # noqa: E402
from kltool.storage.topic_config import TopicConfig  # noqa: E402
from kltool.storage.write.create import create_topic  # noqa: E402
from kltool.storage.write.writer import PartitionWriter  # noqa: E402

TS0 = 1_700_000_000_000
KLTOOL = [sys.executable, "-m", "kltool"]


def generate(part: Path, mib: int, segment_mib: int, epoch: int = 0, tag: bytes = b"", start_ts: int = TS0,
             producers: int = 8) -> int:
    w = PartitionWriter(part, config=TopicConfig({"segment.bytes": str(segment_mib << 20)}), leader_epoch=epoch)
    value = b"x" * 200
    seqs: dict[int, int] = {}
    open_: dict[int, int] = {}
    ts = start_ts
    target = mib << 20
    written = 0
    turn = 0
    while written < target:
        turn += 1
        pid = 1000 + turn % producers
        ts += 1
        if turn % 9 == 0:  # a plain batch
            data = build_v2_batch([(i, ts, None, value, ()) for i in range(70)], base_offset=w.leo,
                                  partition_leader_epoch=epoch)
        elif open_.get(pid, 0) >= 20 and pid != 1000 + producers - 1:
            data = build_end_txn_marker(offset=w.leo, commit=turn % 5 != 0, producer_id=pid, producer_epoch=0,
                                        coordinator_epoch=3, timestamp=ts, partition_leader_epoch=epoch)
            open_[pid] = 0
        else:
            seq = seqs.get(pid, 0)
            seqs[pid] = seq + 70
            data = build_v2_batch([(i, ts, b"k%d" % i + tag, value, ()) for i in range(70)], base_offset=w.leo,
                                  producer_id=pid, producer_epoch=0, base_sequence=seq, partition_leader_epoch=epoch,
                                  is_transactional=True)
            open_[pid] = open_.get(pid, 0) + 1
        w.append(data)
        written += len(data)
    w.close()
    return w.leo


def timed(*args) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run([*KLTOOL, *map(str, args)], capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"kltool {' '.join(map(str, args))} failed: {r.stderr}")
    return secs, r.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--segment-mib", type=int, default=128)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "forensics")
    ap.add_argument("--producers", type=int, default=8, help="transactional producers taking turns")
    ap.add_argument("--keep", action="store_true", help="reuse a partition written before")
    a = ap.parse_args()
    ld = a.out / "logs"
    part = ld / "txn-0"
    if not (a.keep and part.exists()):
        shutil.rmtree(a.out, ignore_errors=True)
        create_topic(ld, "txn", 1)
        t0 = time.perf_counter()
        generate(part, a.mib, a.segment_mib, producers=a.producers)
        print(f"wrote {a.mib} MiB in {time.perf_counter() - t0:.1f}s")
        copy = a.out / "copy"
        shutil.copytree(ld, copy)
        # the copy's tail rewritten at a new epoch: drop its last segment, append 8 MiB at epoch 1
        segs = sorted((copy / "txn-0").glob("*.log"))
        base = int(segs[-1].name.split(".")[0])
        for f in (copy / "txn-0").iterdir():
            if f.name[:20].isdigit() and int(f.name[:20]) >= base:
                f.unlink()
        generate(copy / "txn-0", 8, a.segment_mib, epoch=1, tag=b"-new", start_ts=TS0 + 10**9)
    size = sum(f.stat().st_size for f in part.glob("*.log"))
    print(f"partition: {size / 2**20:.0f} MiB in {len(list(part.glob('*.log')))} segments")
    now = str(TS0 + 10**10)
    for label, args in (("transactions (clean: snapshot at log end)", ("transactions", part, "--now", now)),
                        ("producers (clean)", ("producers", part, "--now", now))):
        secs, last = timed(*args)
        print(f"{label:48} {secs:6.2f}s   {last}")
    snaps = sorted(part.glob("*.snapshot"))
    held = snaps[-1].with_suffix(".snapshot.held")
    os.rename(snaps[-1], held)
    try:
        for label, args in (("transactions (unclean: roll snapshot + tail)", ("transactions", part, "--now", now)),
                            ("producers (unclean)", ("producers", part, "--now", now))):
            secs, last = timed(*args)
            print(f"{label:48} {secs:6.2f}s   {last}")
    finally:
        os.rename(held, snaps[-1])
    secs, last = timed("transactions", part, "--now", now, "--scan-all")
    print(f"{'transactions --scan-all':48} {secs:6.2f}s   {last}")
    secs, last = timed("diff", a.out / "copy" / "txn-0", part)
    print(f"{'diff (copy with a new-epoch tail vs original)':48} {secs:6.2f}s   {last}")
    t0 = time.perf_counter()
    subprocess.run([*KLTOOL, "--help"], capture_output=True)
    print(f"{'(kltool --help: process start)':48} {time.perf_counter() - t0:6.2f}s")


if __name__ == "__main__":
    main()
