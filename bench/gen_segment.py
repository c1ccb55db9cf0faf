#!/usr/bin/env python3
"""Write benchmark segments: one partition directory per codec, one ``.log`` of N records each.

    .venv/bin/python bench/gen_segment.py                    # 1,000,000 records: none, lz4, zstd
    .venv/bin/python bench/gen_segment.py --records 50000    # a small set for a quick run

Output: ``bench/out/<codec>-0/00000000000000000000.log`` (``bench/out`` is gitignored).

Records look like what a service produces: key ``user-<id>``, a ~200-byte JSON event as the value
(a few fixed field names and small vocabularies, plus ids, numbers and a random hex event id, so
lz4 compresses it about 2.9x and zstd about 4.6x), no headers, CreateTime timestamps 10 records per
millisecond, contiguous offsets from 0. Batches are magic 2, built with ``kltool.format.build_batch``
and filled the way the Java producer fills them with ``batch.size=16384``: a batch is closed when the
next record would take its estimated size past 16 KiB, where the estimate for a compressed codec is
the uncompressed size times the codec's compression ratio (measured once on a trial batch, times
Kafka's 1.05 safety factor). So uncompressed batches hold ~70 records and compressed ones more.

Everything is derived from ``--seed``: the same arguments write byte-identical files. The records
are generated once and fed to all codecs, so every file holds the same records.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kltool.format import build_batch  # noqa: E402
from kltool.format.compression import CODEC_IDS, NONE  # noqa: E402

BATCH_SIZE = 16384  # the Java producer's default batch.size
V2_OVERHEAD = 61
RATIO_FACTOR = 1.05  # Kafka's COMPRESSION_RATE_ESTIMATION_FACTOR
TS_BASE = 1_700_000_000_000

_EVENTS = ("page_view", "add_to_cart", "checkout", "search", "login", "logout", "click", "purchase")
_COUNTRIES = ("DE", "US", "FR", "GB", "NL", "ES", "IT", "PL", "SE", "BR", "IN", "JP")
_DEVICES = ("mobile", "desktop", "tablet")
_REFERRERS = ("https://www.google.com/", "https://www.bing.com/", "direct", "https://t.co/",
              "https://news.ycombinator.com/", "email")


def records(n: int, seed: int, short: bool = False):
    """Yield ``(offset, timestamp, key, value)`` for offsets 0..n-1 (``short``: ~100-byte values, the
    event id, user, type, time, country and amount only)."""
    rng = random.Random(seed)
    rand = rng.random
    rint = rng.randrange
    bits = rng.getrandbits
    ev, co, de, rf = _EVENTS, _COUNTRIES, _DEVICES, _REFERRERS
    for i in range(n):
        uid = rint(1_000_000)
        ts = TS_BASE + i // 10
        if short:
            value = (f'{{"event_id":"{bits(64):016x}","user_id":{uid},"type":"{ev[rint(8)]}","ts":{ts},'
                     f'"country":"{co[rint(12)]}","amount":{rand() * 200:.2f}}}').encode()
            yield i, ts, b"user-%d" % uid, value
            continue
        value = (f'{{"event_id":"{bits(64):016x}","user_id":{uid},"type":"{ev[rint(8)]}","ts":{ts},'
                 f'"page":"/products/{rint(5000)}","ref":"{rf[rint(6)]}","country":"{co[rint(12)]}",'
                 f'"device":"{de[rint(3)]}","duration_ms":{rint(60000)},'
                 f'"amount":{rand() * 200:.2f}}}').encode()
        yield i, ts, b"user-%d" % uid, value


def _record_size(key: bytes, value: bytes) -> int:
    """Bytes one record takes in a v2 batch (length varint + body), close enough for batching."""
    body = 1 + 3 + 3 + 1 + len(key) + 2 + len(value) + 1  # attrs, ts delta, offset delta, key, value, headers
    return body + (1 if body < 64 else 2 if body < 8192 else 3)


class _Writer:
    """Accumulates records into producer-sized batches of one codec and appends them to a file."""

    def __init__(self, path: Path, codec: int, ratio: float):
        self.path = path
        self.codec = codec
        self.ratio = ratio
        self.f = open(path, "wb")
        self.pending: list[tuple] = []
        self.base = 0
        self.est = 0
        self.batches = 0
        self.bytes = 0

    def add(self, off, ts, key, value):
        size = _record_size(key, value)
        if self.pending and V2_OVERHEAD + (self.est + size) * self.ratio > BATCH_SIZE:
            self.flush()
        if not self.pending:
            self.base = off
        self.pending.append((off - self.base, ts, key, value, ()))
        self.est += size

    def flush(self):
        if not self.pending:
            return
        b = build_batch(self.pending, base_offset=self.base, compression=self.codec)
        self.f.write(b)
        self.batches += 1
        self.bytes += len(b)
        self.pending = []
        self.est = 0

    def close(self):
        self.flush()
        self.f.close()


def estimate_ratio(codec: int, seed: int, short: bool = False) -> float:
    """Compressed/uncompressed size of a trial batch of this data, times Kafka's safety factor."""
    if codec == NONE:
        return 1.0
    trial = [(o, ts, k, v, ()) for o, ts, k, v in records(200, seed + 1, short)]
    plain = len(build_batch(trial, base_offset=0)) - V2_OVERHEAD
    packed = len(build_batch(trial, base_offset=0, compression=codec)) - V2_OVERHEAD
    return packed / plain * RATIO_FACTOR


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="records per segment (default 1,000,000)")
    ap.add_argument("--codecs", default="none,lz4,zstd", help="comma-separated (default none,lz4,zstd)")
    ap.add_argument("--out", type=Path, default=HERE / "out", help="output directory (default bench/out)")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--small", type=int, default=200_000,
                    help="records in small-0/: one record per batch, uncompressed, the shape of "
                         "__consumer_offsets and low-traffic topics (default 200,000; 0: none)")
    ap.add_argument("--short-values", action="store_true",
                    help="~100-byte JSON values (issue 22's Spark figures) instead of ~200-byte ones")
    args = ap.parse_args(argv)

    codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    for c in codecs:
        if c not in CODEC_IDS:
            ap.error(f"unknown codec {c!r}")
    t0 = time.perf_counter()
    writers = []
    for c in codecs:
        d = args.out / f"{c}-0"
        d.mkdir(parents=True, exist_ok=True)
        for stale in d.iterdir():  # a previous run's files (another size) would confuse the reader
            stale.unlink()
        writers.append(_Writer(d / f"{0:020d}.log", CODEC_IDS[c], estimate_ratio(CODEC_IDS[c], args.seed, args.short_values)))
    for off, ts, key, value in records(args.records, args.seed, args.short_values):
        for w in writers:
            w.add(off, ts, key, value)
    for w in writers:
        w.close()
    if args.small:
        d = args.out / "small-0"
        d.mkdir(parents=True, exist_ok=True)
        for stale in d.iterdir():
            stale.unlink()
        w = _Writer(d / f"{0:020d}.log", NONE, 1.0)
        for off, ts, key, value in records(args.small, args.seed):
            w.base = off
            w.pending = [(0, ts, key, value[:40], ())]
            w.flush()
        w.close()
        print(f"{w.path}: {args.small:,} records in one-record batches, {w.bytes:,} bytes")
    secs = time.perf_counter() - t0
    for w in writers:
        print(f"{w.path}: {args.records:,} records, {w.batches:,} batches, {w.bytes:,} bytes "
              f"({w.bytes / 1e6:.1f} MB, {w.bytes / max(w.batches, 1):,.0f} B/batch, "
              f"{args.records / max(w.batches, 1):.0f} records/batch)")
    print(f"generated in {secs:.1f}s ({args.records * len(codecs) / secs / 1e3:,.0f} k records/s over all codecs)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
