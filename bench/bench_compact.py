#!/usr/bin/env python3
"""How fast ``kltool compact`` cleans a partition, and how much memory it takes.

    .venv/bin/python bench/bench_compact.py                      # 1 GiB, 1 M keys
    .venv/bin/python bench/bench_compact.py --size 128M --keys 100000   # a quick run
    .venv/bin/python bench/bench_compact.py --runs 5 --broker --baseline ../old-kltool --rss-maps 32M,128M

The input is one partition of a compacted topic: v2 batches of ``--batch`` records (uncompressed, or
``--codec``), keys ``key-<n>`` drawn at random from ``--keys`` keys, 200-byte values, 5% tombstones, in
segments of ``--segment-bytes`` (default 128 MiB; the last one is the active segment, never cleaned). Each
round compacts a fresh copy (synced to disk first; ``--no-backup``, the old segments deleted the broker's way)
in a child process: ``kltool -q compact DIR --no-backup``. Printed: the log bytes the pass cleaned (the groups'
input, what the broker's cleaner logs as "MB of log processed"), wall time, MB/s and MiB/s, the child's own CPU
time and peak RSS (MiB), the load average, and the sizes before and after. ``--baseline DIR`` runs another
kltool checkout (its C extension built in place) the same way in each round. With ``--broker`` each round then
cleans the same input with a real Kafka broker (tests/broker/harness.py; the jars from ``make broker-jars``): a
topic made with the same settings, its partition's files replaced by the input while the broker is stopped, then
started with min.cleanable.dirty.ratio 0.01, ``log.cleaner.threads=1`` and the same offset map
(``log.cleaner.dedupe.buffer.size`` = ``--dedupe-buffer-size``, default 128 MiB); its cleaner's own log line
(``... MB of log processed in ... seconds (... MB/sec)``, MiB there) is printed beside kltool's, and the
medians side by side. ``--rss-maps`` adds one kltool run per offset map size: its peak RSS against the map.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kltool.format.batch import build_v2_batch  # noqa: E402
from kltool.format.compression import CODEC_IDS as CODECS  # noqa: E402
from kltool.storage.topic_config import TopicConfig  # noqa: E402
from kltool.storage.write.create import create_topic  # noqa: E402
from kltool.storage.write.writer import PartitionWriter  # noqa: E402

TS0 = 1_700_000_000_000


def parse_size(s: str) -> int:
    s = s.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def generate(root: Path, size: int, keys: int, batch: int, seg_bytes: int, codec: int) -> tuple[int, int]:
    config = {"cleanup.policy": "compact", "segment.bytes": str(seg_bytes)}
    create_topic(root, "t", 1, config=config)
    w = PartitionWriter(root / "t-0", config=TopicConfig(config), now_ms=TS0)
    rng = random.Random(1)
    value = rng.randbytes(200)
    off = written = 0
    while written < size:
        recs = []
        for i in range(batch):
            k = b"key-%d" % rng.randrange(keys)
            recs.append((i, TS0 + off + i, k, None if rng.random() < 0.05 else value, ()))
        data = build_v2_batch(recs, base_offset=off, compression=codec)
        w.append(data)
        off += batch
        written += len(data)
    w.close()
    return off, written


def run_once(src: Path, work: Path, extra: list[str], root: Path = ROOT) -> dict:
    """One ``kltool compact`` of a fresh copy of ``src``: wall time, the child's own CPU time and peak RSS
    (``wait4``), and its JSON summary. The copy is synced to disk first, so that its write-back does not
    run during the pass (the broker's input, too, is at rest when its cleaner starts)."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src, work)
    os.sync()
    cmd = [sys.executable, "-m", "kltool", "--json", "-q", "compact", str(work), "--no-backup", *extra]
    t0 = time.perf_counter()
    p = _Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root)
    out, err = p.communicate()
    secs = time.perf_counter() - t0
    ru = getattr(p, "rusage", None)
    if p.returncode != 0:
        raise SystemExit(f"compact failed ({p.returncode}): {err.strip()}")
    lines = [json.loads(x) for x in out.splitlines()]
    part = next(x for x in lines if x.get("type") == "partition_compaction")
    r = {"seconds": secs, "summary": lines[-1], "map_entries": part["map_entries"],
         "map_capacity": part["map_capacity"], "map_full": part["map_full"]}
    if ru is not None:
        r["cpu"], r["peak_rss_mib"] = ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024  # KiB on Linux
    return r


class _Popen(subprocess.Popen):
    """Popen that keeps the child's own rusage (os.wait4), not the sum over every child so far."""

    def _try_wait(self, wait_flags):
        try:
            pid, sts, self.rusage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            pid, sts = self.pid, 0
        return pid, sts


def _rewrite_checkpoint(path: Path, entries: dict) -> None:
    rows = {}
    if path.exists():
        for ln in path.read_text().split("\n")[2:]:
            if ln.strip():
                t, p, o = ln.split()
                rows[(t, int(p))] = int(o)
    rows.update(entries)
    path.write_text(f"0\n{len(rows)}\n" + "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(rows.items())))


CLEANED = re.compile(r"cleaned log t-0 \(dirty section = \[(\d+), (\d+)\]\)\s+([\d,.]+) MB of log processed in "
                     r"([\d,.]+) seconds \(([\d,.]+) MB/sec\)")  # "1,023.9 MB": Java's grouping


def broker_clean(src: Path, base: Path, seg_bytes: int, dedupe: int, timeout: float = 1800) -> dict:
    """The broker's cleaner on a copy of ``src``: what its log says it processed, and in how long."""
    from tests.broker import harness

    why = harness.missing()
    if why:
        raise SystemExit(f"--broker: {why}")
    work = base / "broker"
    if work.exists():
        shutil.rmtree(work)
    b = harness.Broker(work, {"log.cleaner.threads": "1", "log.cleaner.dedupe.buffer.size": str(dedupe),
                              "log.cleaner.backoff.ms": "500", "log.segment.delete.delay.ms": "0"})
    config = {"cleanup.policy": "compact", "segment.bytes": str(seg_bytes), "min.cleanable.dirty.ratio": "1.0"}
    try:
        b.start()
        b.create_topic("t", 1, config)
        b.stop()
        part = b.partition_dir("t", 0)
        for f in part.iterdir():
            if f.name.split(".")[0].isdigit():
                f.unlink()
        leo = 0
        for f in (src / "t-0").iterdir():
            if f.name.split(".")[0].isdigit():
                shutil.copy2(f, part / f.name)
        from kltool.storage.logdir import open_paths

        leo = open_paths([str(part)]).partitions[0].log_end_offset()
        for name in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint"):
            _rewrite_checkpoint(b.logdir / name, {("t", 0): leo})
        b.start()
        from kafka.admin import ConfigResource, ConfigResourceType

        a = b.admin()
        try:
            a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "t",
                                            configs={**config, "min.cleanable.dirty.ratio": "0.01"})])
        finally:
            a.close()
        t0 = time.monotonic()
        while not (m := CLEANED.search(b.log_text(since_start=True))):
            if time.monotonic() - t0 > timeout:
                raise SystemExit(f"--broker: the cleaner did not finish within {timeout}s")
            time.sleep(1)
        b.stop()
    finally:
        b.kill()
    num = [float(m.group(i).replace(",", "")) for i in (3, 4, 5)]
    return {"first": int(m.group(1)), "end": int(m.group(2)), "mb": num[0], "seconds": num[1], "mb_s": num[2],
            "wall": time.monotonic() - t0}


def _uptime() -> str:
    with open("/proc/loadavg") as f:
        return "load average " + ", ".join(f.read().split()[:3])


def _med(xs) -> float:
    return statistics.median(xs)


def _range(xs, fmt: str) -> str:
    lo, hi = min(xs), max(xs)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}-{format(hi, fmt)}"


def main() -> None:  # noqa: C901 - one report
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1G")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100, help="records per batch")
    ap.add_argument("--segment-bytes", default="128M")
    ap.add_argument("--codec", default="none", choices=sorted(CODECS))
    ap.add_argument("--runs", type=int, default=3, help="rounds: kltool once (and with --broker the broker once)")
    ap.add_argument("--dir", default=None, help="where the input goes (default: a temp dir in /tmp)")
    ap.add_argument("--dedupe-buffer-size", default=None, help="passed to kltool compact (and the broker)")
    ap.add_argument("--broker", action="store_true", help="clean the same input with a real Kafka broker too")
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="another kltool checkout (with its extension built in place) run the same way in each round")
    ap.add_argument("--rss-maps", default=None, metavar="SIZES",
                    help="also one run per offset map size (e.g. 32M,64M,128M,256M): kltool's peak RSS against it")
    a = ap.parse_args()
    base = Path(a.dir or tempfile.mkdtemp(prefix="kltool-bench-compact-"))
    src = base / "src"
    t0 = time.perf_counter()
    print(f"start: {_uptime()}", file=sys.stderr)
    if not src.exists():
        n, written = generate(src, parse_size(a.size), a.keys, a.batch, parse_size(a.segment_bytes), CODECS[a.codec])
        print(f"input: {n:,} records, {written / 1e6:,.1f} MB, {a.keys:,} keys, {a.batch} records a batch, "
              f"codec {a.codec}, written in {time.perf_counter() - t0:.1f}s ({src})", file=sys.stderr)
    extra = ["--dedupe-buffer-size", a.dedupe_buffer_size] if a.dedupe_buffer_size else []
    dedupe = parse_size(a.dedupe_buffer_size) if a.dedupe_buffer_size else 128 << 20
    runs, bruns, loads, base_runs = [], [], [], []
    for i in range(a.runs):  # rounds: kltool, then the broker, on the same input
        loads.append(_uptime())
        r = run_once(src, base / "work", extra)
        s = r["summary"]
        r["mb_s"] = s["bytes_before"] / 1e6 / r["seconds"]
        runs.append(r)
        print(f"round {i + 1} ({loads[-1]}): kltool {s['bytes_before'] / 1e6:,.1f} MB in {r['seconds']:.2f}s = "
              f"{r['mb_s']:.1f} MB/s = {r['mb_s'] / 1.048576:.1f} MiB/s (CPU {r['cpu']:.2f}s = "
              f"{s['bytes_before'] / 1e6 / r['cpu']:.1f} MB/s of CPU), peak RSS {r['peak_rss_mib']:.0f} MiB; "
              f"{s['bytes_after'] / 1e6:,.1f} MB after; {s['records_kept']:,} of {s['records_read']:,} records "
              f"kept; map {r['map_entries']:,} keys of {r['map_capacity']:,}", file=sys.stderr)
        if a.baseline:
            r0 = run_once(src, base / "work", extra, Path(a.baseline).resolve())
            r0["mb_s"] = s["bytes_before"] / 1e6 / r0["seconds"]
            base_runs.append(r0)
            print(f"round {i + 1}: baseline {a.baseline}: {r0['seconds']:.2f}s = {r0['mb_s'] / 1.048576:.1f} MiB/s "
                  f"(CPU {r0['cpu']:.2f}s), peak RSS {r0['peak_rss_mib']:.0f} MiB", file=sys.stderr)
            if r0["summary"]["bytes_after"] != s["bytes_after"]:
                raise SystemExit("the baseline's result differs in size")
        if a.broker:
            b = broker_clean(src, base, parse_size(a.segment_bytes), dedupe)
            bruns.append(b)
            print(f"round {i + 1}: Kafka's cleaner: dirty section [{b['first']}, {b['end']}], {b['mb']:,.1f} MiB "
                  f"in {b['seconds']:.2f}s = {b['mb_s']:.1f} MiB/s (its own log line)", file=sys.stderr)
    s = runs[0]["summary"]
    mb = s["bytes_before"] / 1e6
    med = _med(r["mb_s"] for r in runs)
    secs = [r["seconds"] for r in runs]
    cpus = [r["cpu"] for r in runs]
    print(f"kltool compact: {mb:,.1f} MB -> {s['bytes_after'] / 1e6:,.1f} MB, {_range(secs, '.2f')} s, median "
          f"{_med(secs):.2f}s = {med:.1f} MB/s = {med / 1.048576:.1f} MiB/s (whole process; CPU {_range(cpus, '.2f')} s, "
          f"median {mb / _med(cpus):.1f} MB/s of CPU), peak RSS {_range([r['peak_rss_mib'] for r in runs], '.0f')} MiB "
          f"with a {dedupe / (1 << 20):g} MiB offset map ({runs[0]['map_entries']:,} keys)")
    if base_runs:
        bmed = _med(r["mb_s"] for r in base_runs)
        bsecs, bcpus = [r["seconds"] for r in base_runs], [r["cpu"] for r in base_runs]
        print(f"baseline ({a.baseline}): {_range(bsecs, '.2f')} s, median {bmed:.1f} MB/s = {bmed / 1.048576:.1f} MiB/s "
              f"(CPU {_range(bcpus, '.2f')} s, median {mb / _med(bcpus):.1f} MB/s of CPU), peak RSS "
              f"{_range([r['peak_rss_mib'] for r in base_runs], '.0f')} MiB")
    if a.broker:
        bm = _med(b["mb_s"] for b in bruns)
        print(f"Kafka's cleaner: {bruns[0]['mb']:,.1f} MiB, {_range([b['seconds'] for b in bruns], '.2f')} s, median "
              f"{bm:.1f} MiB/s = {bm * 1.048576:.1f} MB/s (its own log lines; one cleaner thread in a broker JVM)")
        print(f"side by side (medians of {a.runs} rounds, {loads[0]} .. {_uptime()}): kltool "
              f"{med / 1.048576:.1f} MiB/s, Kafka 4.4's cleaner {bm:.1f} MiB/s: kltool x{med / 1.048576 / bm:.2f}")
    if a.rss_maps:
        print(f"peak RSS against the offset map size ({_uptime()}):")
        for size in a.rss_maps.split(","):
            r = run_once(src, base / "work", ["--dedupe-buffer-size", size])
            mp = parse_size(size)
            print(f"  map {mp / (1 << 20):6g} MiB ({r['map_capacity']:,} keys at most; {r['map_entries']:,} held"
                  f"{', full' if r['map_full'] else ''}): peak RSS {r['peak_rss_mib']:.0f} MiB, "
                  f"{r['seconds']:.2f}s (CPU {r['cpu']:.2f}s)")
    print(f"end: {_uptime()}", file=sys.stderr)
    if a.dir is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
