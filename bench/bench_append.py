"""Append throughput: kltool's v2 batch builder and its whole append path against kafka-python's and
aiokafka's batch builders, on the same records in the same run.

    .venv/bin/python bench/bench_append.py [--records N] [--runs R] [--value-size B] [--compression C]

Every contender turns the same in-memory records (key ``key-<i>``, a value of ``--value-size`` bytes,
a timestamp, no headers) into v2 batches of about 16 KiB (the producer's ``batch.size``):

* ``kltool build_v2_batch``   kltool.format.batch.build_v2_batch, one call per batch;
* ``kafka-python``            kafka.record.default_records.DefaultRecordBatchBuilder (pure Python);
* ``aiokafka``                aiokafka.record.default_records.DefaultRecordBatchBuilder (Cython if built);
* ``kltool Appender (disk)``  kltool.storage.write.appender.Appender: partition choice, checks, batching, then
                              the .log write, indexes, fsync, snapshot (a fresh topic in a temp dir);
* ``kltool CLI (JSON lines)`` ``kltool append`` in-process from a JSON-lines file (JSON parsing included).

It prints the median of the runs (records/s) and each contender's ratio to kltool's builder.
The builders' outputs are checked to hold the same records (kafka-python reads them back).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kltool.format.batch import build_v2_batch  # noqa: E402
from kltool.format.compression import CODEC_IDS  # noqa: E402

BATCH_BYTES = 16384
TS0 = 1700000000000


def make_records(n: int, value_size: int) -> list[tuple[int, bytes, bytes]]:
    pad = b"x" * value_size
    return [(TS0 + i, b"key-%d" % i, (b"%d:" % i + pad)[:value_size]) for i in range(n)]


def per_batch(records, value_size: int) -> int:
    return max(1, BATCH_BYTES // (value_size + 12 + 10))


def run_kltool_builder(records, codec: int, batch: int) -> int:
    out = 0
    for s in range(0, len(records), batch):
        chunk = records[s:s + batch]
        recs = [(i, ts, k, v, ()) for i, (ts, k, v) in enumerate(chunk)]
        out += len(build_v2_batch(recs, base_offset=s, compression=codec))
    return out


def run_builder_cls(cls, records, codec: int, batch: int) -> int:
    out = 0
    for s in range(0, len(records), batch):
        b = cls(magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
                base_sequence=-1, batch_size=1 << 30)
        app = b.append
        for i, (ts, k, v) in enumerate(records[s:s + batch]):
            app(i, ts, k, v, [])
        out += len(b.build())
    return out


def run_appender(records, codec_name: str) -> int:
    from kltool.storage.write.appender import Appender, AppendOptions
    from kltool.storage.write.create import create_topic

    with tempfile.TemporaryDirectory() as d:
        create_topic(Path(d) / "logs", "bench", 1)
        with Appender(Path(d) / "logs", "bench", AppendOptions(compression=codec_name)) as a:
            add = a.add
            for ts, k, v in records:
                add(k, v, (), ts, 0)
            r = a.commit()
        return r.bytes


def run_cli(path: Path, codec_name: str) -> int:
    from kltool.cli import main

    with tempfile.TemporaryDirectory() as d:
        ld = Path(d) / "logs"
        old = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = io.StringIO()
        try:
            for args in (["create", str(ld), "bench", "-p", "1"],
                         ["append", str(ld), "bench", "-p", "0", "-i", str(path), "--compression", codec_name]):
                try:
                    main(args)
                except SystemExit as e:
                    if e.code:
                        raise RuntimeError(f"kltool {' '.join(args)} failed") from None
        finally:
            sys.stdout, sys.stderr = old
        return sum(p.stat().st_size for p in (ld / "bench-0").glob("*.log"))


def check_same_records(records, codec: int, batch: int, cls) -> None:
    """kafka-python reads back the same keys and values from kltool's and the other builder's batches."""
    from kafka.record import MemoryRecords

    sample = records[: batch * 2]
    mine = b"".join(build_v2_batch([(i, ts, k, v, ()) for i, (ts, k, v) in enumerate(sample[s:s + batch])],
                                   base_offset=s, compression=codec) for s in range(0, len(sample), batch))
    theirs = bytearray()
    for s in range(0, len(sample), batch):
        b = cls(magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
                base_sequence=-1, batch_size=1 << 30)
        for i, (ts, k, v) in enumerate(sample[s:s + batch]):
            b.append(i, ts, k, v, [])
        theirs += b.build()

    def read(data):
        mr = MemoryRecords(bytes(data))
        out = []
        while (bt := mr.next_batch()) is not None:
            out += [(r.timestamp, r.key, r.value) for r in bt]
        return out

    assert read(mine) == read(theirs) == [(ts, k, v) for ts, k, v in sample]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--compression", default="none", choices=sorted(CODEC_IDS))
    ap.add_argument("--no-disk", action="store_true", help="Only the builders (no Appender / CLI runs).")
    args = ap.parse_args()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder
        try:
            from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
            from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy as AioPyBuilder
        except ImportError:  # pragma: no cover
            AioBuilder = AioPyBuilder = None

    codec = CODEC_IDS[args.compression]
    records = make_records(args.records, args.value_size)
    batch = per_batch(records, args.value_size)
    check_same_records(records, codec, batch, KafkaPythonBuilder)
    if AioBuilder is not None:
        check_same_records(records, codec, batch, AioBuilder)

    contenders = [("kltool build_v2_batch", lambda: run_kltool_builder(records, codec, batch)),
                  ("kafka-python builder", lambda: run_builder_cls(KafkaPythonBuilder, records, codec, batch))]
    if AioBuilder is not None:
        impl = "Cython" if AioBuilder is not AioPyBuilder else "pure Python"
        contenders.append((f"aiokafka builder ({impl})", lambda: run_builder_cls(AioBuilder, records, codec, batch)))
        if AioBuilder is not AioPyBuilder:
            contenders.append(("aiokafka builder (pure Python)",
                               lambda: run_builder_cls(AioPyBuilder, records, codec, batch)))
    jsonl = None
    if not args.no_disk:
        contenders.append(("kltool Appender (to disk)", lambda: run_appender(records, args.compression)))
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for ts, k, v in records:
                f.write(json.dumps({"key": k.decode(), "value": v.decode(), "timestamp": ts}) + "\n")
        jsonl = Path(f.name)
        contenders.append(("kltool CLI (JSON lines)", lambda: run_cli(jsonl, args.compression)))
    # Runs are interleaved (one of each contender per round), so a noisy machine hits all of them alike.
    times: dict[str, list[float]] = {name: [] for name, _fn in contenders}
    try:
        for _ in range(args.runs):
            for name, fn in contenders:
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    finally:
        if jsonl is not None:
            os.unlink(jsonl)
    rows = [(name, statistics.median(ts)) for name, ts in times.items()]
    base = rows[0][1]

    n = args.records
    print(f"append throughput: {n:,} records, key ~10 B, value {args.value_size} B, {batch} records per batch "
          f"(~16 KiB), compression {args.compression}, median of {args.runs} runs, Python {sys.version.split()[0]}")
    print(f"{'contender':34} {'records/s':>14} {'MB/s':>8} {'vs kltool builder':>18}")
    raw = sum(len(k) + len(v) for _ts, k, v in records)
    for name, secs in rows:
        print(f"{name:34} {n / secs:>14,.0f} {raw / secs / 1e6:>8.1f} {base / secs:>17.2f}x")


if __name__ == "__main__":
    main()
