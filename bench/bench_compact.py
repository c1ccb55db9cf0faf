#!/usr/bin/env python3
"""How fast ``kltool compact`` cleans a partition, and how much memory it takes.

    .venv/bin/python bench/bench_compact.py                      # 1 GiB, 1 M keys
    .venv/bin/python bench/bench_compact.py --size 128M --keys 100000   # a quick run
    .venv/bin/python bench/bench_compact.py --size 256M --keys 250000 --broker   # and Kafka's cleaner beside it

The input is one partition of a compacted topic: v2 batches of ``--batch`` records (uncompressed, or
``--codec``), keys ``key-<n>`` drawn at random from ``--keys`` keys, 200-byte values, 5% tombstones, in
segments of ``--segment-bytes`` (default 128 MiB; the last one is the active segment, never cleaned). Each run
compacts a fresh copy (``--no-backup``, the old segments deleted the broker's way) in a child process:
``kltool -q compact DIR --no-backup``. Printed: the log bytes the pass cleaned (the groups' input, what the
broker's cleaner logs as "MB of log processed"), wall time, MB/s, the child's peak RSS, and the sizes
before and after. With ``--broker`` the same input is then cleaned by a real Kafka broker (tests/broker/harness.py;
the jars from ``make broker-jars``): a topic made with the same settings, its partition's files replaced by the
input while the broker is stopped, then started with min.cleanable.dirty.ratio 0.01, ``log.cleaner.threads=1``
and the same offset map (``log.cleaner.dedupe.buffer.size`` = ``--dedupe-buffer-size``, default 128 MiB); its
cleaner's own log line (``... MB of log processed in ... seconds (... MB/sec)``) is printed beside kltool's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
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


def run_once(src: Path, work: Path, extra: list[str]) -> dict:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src, work)
    cmd = [sys.executable, "-m", "kltool", "--json", "-q", "compact", str(work), "--no-backup", *extra]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"compact failed ({p.returncode}): {p.stderr.strip()}")
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    summary = lines[-1]
    return {"seconds": secs, "summary": summary}


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1G")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100, help="records per batch")
    ap.add_argument("--segment-bytes", default="128M")
    ap.add_argument("--codec", default="none", choices=sorted(CODECS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the input goes (default: a temp dir in /tmp)")
    ap.add_argument("--dedupe-buffer-size", default=None, help="passed to kltool compact (and the broker)")
    ap.add_argument("--broker", action="store_true", help="clean the same input with a real Kafka broker too")
    a = ap.parse_args()
    base = Path(a.dir or tempfile.mkdtemp(prefix="kltool-bench-compact-"))
    src = base / "src"
    t0 = time.perf_counter()
    if not src.exists():
        n, written = generate(src, parse_size(a.size), a.keys, a.batch, parse_size(a.segment_bytes), CODECS[a.codec])
        print(f"input: {n:,} records, {written / 1e6:,.1f} MB, {a.keys:,} keys, {a.batch} records a batch, "
              f"codec {a.codec}, written in {time.perf_counter() - t0:.1f}s ({src})", file=sys.stderr)
    extra = ["--dedupe-buffer-size", a.dedupe_buffer_size] if a.dedupe_buffer_size else []
    runs = []
    for i in range(a.runs):
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = run_once(src, base / "work", extra)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        r["peak_rss_mb"] = ru1.ru_maxrss / 1024  # KiB: the largest child so far
        r["cpu"] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        s = r["summary"]
        r["mb_s"] = s["bytes_before"] / 1e6 / r["seconds"]
        runs.append(r)
        print(f"run {i + 1}: {s['bytes_before'] / 1e6:,.1f} MB of log processed in {r['seconds']:.2f}s "
              f"({r['mb_s']:.1f} MB/s; CPU {r['cpu']:.2f}s = {s['bytes_before'] / 1e6 / r['cpu']:.1f} MB/s of CPU); "
              f"{s['bytes_after'] / 1e6:,.1f} MB after; {s['records_kept']:,} of "
              f"{s['records_read']:,} records kept", file=sys.stderr)
    med = statistics.median(r["mb_s"] for r in runs)
    secs = statistics.median(r["seconds"] for r in runs)
    cpu = statistics.median(r["cpu"] for r in runs)
    s = runs[0]["summary"]
    print(f"kltool compact: {s['bytes_before'] / 1e6:,.1f} MB -> {s['bytes_after'] / 1e6:,.1f} MB, median "
          f"{secs:.2f}s = {med:.1f} MB/s (whole process; CPU {cpu:.2f}s = {s['bytes_before'] / 1e6 / cpu:.1f} MB/s), "
          f"peak RSS {max(r['peak_rss_mb'] for r in runs):.0f} MB "
          f"(the largest child of the runs)")
    if a.broker:
        dedupe = parse_size(a.dedupe_buffer_size) if a.dedupe_buffer_size else 128 << 20
        r = broker_clean(src, base, parse_size(a.segment_bytes), dedupe)
        print(f"Kafka's cleaner: dirty section [{r['first']}, {r['end']}], {r['mb']:,.1f} MB of log processed in "
              f"{r['seconds']:.2f}s = {r['mb_s']:.1f} MB/s (its own log line; {r['wall']:.0f}s from the ratio change "
              f"to the line)")
        print(f"side by side: kltool {med:.1f} MB/s wall ({s['bytes_before'] / 1e6 / cpu:.1f} MB/s of CPU), "
              f"Kafka 4.4's cleaner {r['mb_s']:.1f} MB/s (one cleaner thread in a broker JVM)")
    if a.dir is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
