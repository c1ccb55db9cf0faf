#!/usr/bin/env python3
"""Time ``kltool verify`` and ``kltool verify --deep`` against kafka-python, aiokafka (and, when java
is available, Kafka's own Java reader) doing the same work on the same files in the same run.

    .venv/bin/python bench/gen_segment.py && .venv/bin/python bench/bench_verify.py

Readers (each one a full pass over one segment file, timed from opening the file):

  kltool-lib   kltool.storage.check.verify.verify_selection(open_paths([file]), deep=...) in this process:
               exactly what ``kltool verify FILE`` does, without interpreter start and output.
  kltool-lib-pure  the same with KLTOOL_PURE_PYTHON=1 (the pure-Python record decoder instead of the
               optional C accelerator), timed in-process in a child interpreter.
  kltool-cli   the installed ``kltool --json -q verify [--deep] FILE`` as a subprocess (includes the
               interpreter start, imports and the summary line).
  kafka-python f.read() the file, kafka.record.MemoryRecords.next_batch(), validate_crc() on every
               batch; deep also iterates every record touching offset, timestamp, key, value, headers.
  aiokafka     the same with aiokafka.record.MemoryRecords (its compiled _crecords when built).
  kafka-java   ``$ORACLE bench --repeat 15 --warmup 5 [--deep] FILE`` (FileRecords.batches(),
               ensureValid(), streamingIterator): Kafka's own reader; its median is in-JVM, after JIT
               warm-up. Skipped with a note when shared/oracle/setup.sh fails (no java).

Every reader must report the same record count (and batch count where it has one), else the run
aborts: the comparison only means something when all of them really read everything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

ORACLE_SETUP = Path("/work/shared/oracle/setup.sh")
SEGMENT = f"{0:020d}.log"

# Targets from the issue: shallow verify vs peers (x times faster), deep records/s uncompressed.
TARGET_VS = {"kafka-python": 2.0, "aiokafka": 3.0}
TARGET_DEEP_RPS = 1_000_000


class Mismatch(AssertionError):
    pass


# ---------------------------------------------------------------------------------------------
# Readers. Each returns a dict with at least "records" (and "batches" when it knows them).

def kltool_lib(path: Path, deep: bool) -> dict:
    from kltool.storage import open_paths
    from kltool.storage.check.verify import VerifyStats, verify_selection

    stats = VerifyStats()
    findings = list(verify_selection(open_paths([path]), deep=deep, stats=stats))
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise Mismatch(f"kltool found errors in {path}: {errors[:3]}")
    return {"records": stats.records, "batches": stats.batches, "bytes": stats.bytes}


def _kltool_exe() -> str:
    exe = Path(sys.executable).parent / "kltool"
    if exe.exists():
        return str(exe)
    found = shutil.which("kltool")
    if not found:
        raise SystemExit("bench_verify: the kltool command is not installed (pip install -e .)")
    return found


def kltool_cli(path: Path, deep: bool) -> dict:
    cmd = [_kltool_exe(), "--json", "-q", "verify", str(path)] + (["--deep"] if deep else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    summary = None
    for line in p.stdout.splitlines():
        obj = json.loads(line)
        if obj.get("type") == "summary":
            summary = obj
    if p.returncode != 0 or summary is None or summary["errors"]:
        raise Mismatch(f"{' '.join(cmd)} exited {p.returncode}: {p.stdout[-500:]}{p.stderr[-500:]}")
    return {"records": summary["records"], "batches": summary["batches"], "bytes": summary["bytes"],
            "inner_seconds": summary["seconds"]}


def _peer(memory_records_cls, path: Path, deep: bool) -> dict:
    with open(path, "rb") as f:
        data = f.read()
    mr = memory_records_cls(data)
    batches = records = touched = 0
    sink = 0
    nxt = mr.next_batch
    if not deep:
        while (b := nxt()) is not None:
            if not b.validate_crc():
                raise Mismatch(f"CRC mismatch in batch {b.base_offset} of {path}")
            batches += 1
            records += b.last_offset_delta + 1  # the generator writes contiguous offsets
        return {"records": records, "batches": batches}
    while (b := nxt()) is not None:
        if not b.validate_crc():
            raise Mismatch(f"CRC mismatch in batch {b.base_offset} of {path}")
        batches += 1
        for r in b:
            records += 1
            sink ^= r.offset ^ r.timestamp
            k = r.key
            if k is not None:
                touched += len(k)
            v = r.value
            if v is not None:
                touched += len(v)
            for hk, hv in r.headers:
                touched += len(hk) + (0 if hv is None else len(hv))
    return {"records": records, "batches": batches, "touched": touched}


def kafka_python(path: Path, deep: bool) -> dict:
    from kafka.record.memory_records import MemoryRecords

    return _peer(MemoryRecords, path, deep)


def aiokafka(path: Path, deep: bool) -> dict:
    from aiokafka.record.memory_records import MemoryRecords

    return _peer(MemoryRecords, path, deep)


def aiokafka_impl() -> str:
    try:
        from aiokafka.record.memory_records import MemoryRecords
    except ImportError:
        return "not installed"
    mod = MemoryRecords.__module__
    return "compiled (_crecords)" if "_crecords" in mod else f"pure Python ({mod})"


def kltool_decoder() -> str:
    try:
        from kltool.format import batch
    except ImportError as e:
        return f"unavailable ({e})"
    return "C accelerator" if getattr(batch, "_c_decode_v2", None) is not None else "pure Python"


class _Worker:
    """An interpreter started with extra environment (KLTOOL_PURE_PYTHON=1) that runs one in-process
    reader on request and reports its own timing, so its runs can be interleaved with the others."""

    def __init__(self, reader: str, env: dict):
        self.p = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--_worker", reader],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, **env})

    def __call__(self, path: Path, deep: bool) -> tuple[float, dict]:
        self.p.stdin.write(json.dumps({"path": str(path), "deep": deep}) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise Mismatch(f"worker {self.p.args} died (exit {self.p.wait()})")
        o = json.loads(line)
        if "error" in o:
            raise Mismatch(f"worker {self.p.args}: {o['error']}")
        return o["seconds"], o["result"]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def _worker(reader: str) -> int:
    fn = READERS[reader]
    for line in sys.stdin:
        req = json.loads(line)
        try:
            t0 = time.perf_counter()
            res = fn(Path(req["path"]), req["deep"])
            sec = time.perf_counter() - t0
            res["decoder"] = kltool_decoder()
            out = {"seconds": sec, "result": res}
        except Exception as e:  # reported to the parent, which aborts
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)
    return 0


READERS = {
    "kltool-lib": kltool_lib,
    "kltool-lib-pure": None,  # kltool-lib in a _Worker with KLTOOL_PURE_PYTHON=1
    "kltool-cli": kltool_cli,
    "kafka-python": kafka_python,
    "aiokafka": aiokafka,
}


# ---------------------------------------------------------------------------------------------

def _cpu_busy(interval: float = 2.0) -> float | None:
    """Share of all CPUs busy over ``interval`` seconds (Linux /proc/stat), or None."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:8]]
        return v[0] + v[1] + v[2] + v[5] + v[6], sum(v)
    try:
        b1, t1 = sample()
        time.sleep(interval)
        b2, t2 = sample()
    except (OSError, ValueError):
        return None
    return (b2 - b1) / max(t2 - t1, 1)


def wait_idle(limit: float) -> None:
    """Wait (at most ``limit`` seconds) until other processes leave the CPUs idle (< 15% busy)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        busy = _cpu_busy()
        if busy is None or busy < 0.15:
            return
        print(f"  waiting for idle CPUs ({busy:.0%} busy)", file=sys.stderr)
    print("  machine still busy: measuring anyway", file=sys.stderr)


def warm(path: Path) -> None:
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)


def timed(fn, path: Path, deep: bool) -> tuple[float, dict]:
    if isinstance(fn, _Worker):
        return fn(path, deep)
    t0 = time.perf_counter()
    r = fn(path, deep)
    return time.perf_counter() - t0, r


def measure_group(fns: dict, path: Path, deep: bool, repeat: int, warmup: int) -> dict:
    """``warmup`` untimed then ``repeat`` timed rounds; each round runs every reader once, the order
    rotating from round to round, so that load from elsewhere on the machine hits all readers alike."""
    names = list(fns)
    runs: dict[str, list[float]] = {n: [] for n in names}
    results: dict[str, dict] = {}
    for i in range(warmup + repeat):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            sec, r = timed(fns[n], path, deep)
            if n not in results:
                results[n] = r
            elif r["records"] != results[n]["records"]:
                raise Mismatch(f"{n} read {r['records']} records, earlier {results[n]['records']}")
            if i >= warmup:
                runs[n].append(sec)
    return {n: (runs[n], results[n]) for n in names}


def oracle_launcher() -> tuple[str | None, str]:
    if not ORACLE_SETUP.exists():
        return None, f"{ORACLE_SETUP} not found"
    try:
        p = subprocess.run(["bash", str(ORACLE_SETUP)], capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"setup.sh failed: {e}"
    launcher = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    if p.returncode != 0 or not launcher or not os.access(launcher, os.X_OK):
        return None, f"setup.sh failed: {(p.stderr or p.stdout).strip()[-300:]}"
    return launcher, ""


def java_bench(launcher: str, path: Path, deep: bool, repeat: int, warmup: int) -> tuple[list[float], dict]:
    cmd = [launcher, "bench", "--repeat", str(repeat + warmup), "--warmup", str(warmup), str(path)]
    if deep:
        cmd.insert(2, "--deep")
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        raise Mismatch(f"{' '.join(cmd)} exited {p.returncode}: {p.stdout[-400:]}{p.stderr[-400:]}")
    o = json.loads(lines[-1])
    if o.get("invalid_batches") or o.get("error"):
        raise Mismatch(f"kafka-java reported a problem on {path}: {o}")
    return o["runs_seconds"], {"records": o["records"], "batches": o["batches"], "bytes": o["bytes"],
                               "touched": o.get("touched"), "jvm_warmup_seconds": o.get("warmup_seconds")}


# ---------------------------------------------------------------------------------------------

def fmt_table(rows: list[dict]) -> str:
    head = ("codec", "mode", "reader", "median s", "min s", "GB/s", "M rec/s", "records", "batches",
            "x lib", "x cli")
    out = []
    for r in rows:
        out.append((r["codec"], r["mode"], r["reader"], f"{r['median_seconds']:.4f}", f"{r['min_seconds']:.4f}",
                    f"{r['gbps']:.2f}", f"{r['records_per_s'] / 1e6:.2f}", f"{r['records']:,}",
                    f"{r['batches']:,}" if r.get("batches") is not None else "-",
                    f"{r['vs_kltool_lib']:.2f}" if r.get("vs_kltool_lib") else "-",
                    f"{r['vs_kltool_cli']:.2f}" if r.get("vs_kltool_cli") else "-"))
    w = [max(len(h), *(len(o[i]) for o in out)) for i, h in enumerate(head)]
    right = {3, 4, 5, 6, 7, 8, 9, 10}

    def line(cells):
        return "  ".join(c.rjust(w[i]) if i in right else c.ljust(w[i]) for i, c in enumerate(cells)).rstrip()

    lines = [line(head), line(["-" * x for x in w])]
    prev = None
    for o in out:
        if prev is not None and (o[0], o[1]) != prev:
            lines.append("")
        prev = (o[0], o[1])
        lines.append(line(o))
    return "\n".join(lines)


def check_targets(rows: list[dict]) -> list[str]:
    notes = []
    for r in rows:
        codec, mode, reader = r["codec"], r["mode"], r["reader"]
        if reader in ("kltool-lib", "kltool-lib-pure") and mode == "deep" and codec == "none":
            ok = r["records_per_s"] >= TARGET_DEEP_RPS
            notes.append(f"{'PASS' if ok else 'MISS'}  deep {codec}: {reader} {r['records_per_s'] / 1e6:.2f} M rec/s "
                         f"(target >= {TARGET_DEEP_RPS / 1e6:.0f} M rec/s)")
        if mode == "shallow" and reader in TARGET_VS and r.get("vs_kltool_lib"):
            t = TARGET_VS[reader]
            ok = r["vs_kltool_lib"] >= t
            notes.append(f"{'PASS' if ok else 'MISS'}  shallow {codec}: kltool-lib is {r['vs_kltool_lib']:.2f}x "
                         f"{reader} (target >= {t:.0f}x)")
    return notes


def _git_rev() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else "unknown"
    except OSError:
        return "unknown"


def main(argv=None) -> int:  # noqa: C901
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_worker"]:
        return _worker(argv[1])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "out", help="where gen_segment.py wrote (default bench/out)")
    ap.add_argument("--codecs", default="none,lz4,zstd")
    ap.add_argument("--modes", default="shallow,deep")
    ap.add_argument("--readers", default=",".join([*READERS, "kafka-java"]))
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs before them (default 1)")
    ap.add_argument("--java-repeat", type=int, default=10, help="timed JVM passes (default 10)")
    ap.add_argument("--java-warmup", type=int, default=5, help="JIT warm-up passes (default 5)")
    ap.add_argument("--no-java", action="store_true", help="skip Kafka's Java reader")
    ap.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                    help="before each group, wait up to this long for the CPUs to be idle (shared machines)")
    ap.add_argument("--json", action="store_true", help="one JSON line per measurement instead of the table")
    ap.add_argument("--profile", action="store_true",
                    help="after timing, cProfile one kltool-lib run per codec and mode (to stderr)")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        ap.error("--repeat must be >= 1 and --warmup >= 0")

    codecs = [c for c in args.codecs.split(",") if c]
    modes = [m for m in args.modes.split(",") if m]
    readers = [r for r in args.readers.split(",") if r]
    for r in readers:
        if r not in READERS and r != "kafka-java":
            ap.error(f"unknown reader {r!r}")
    launcher = None
    if "kafka-java" in readers and not args.no_java:
        launcher, why = oracle_launcher()
        if launcher is None:
            print(f"note: kafka-java skipped ({why})", file=sys.stderr)
    if "aiokafka" in readers:
        print(f"note: aiokafka MemoryRecords is {aiokafka_impl()}", file=sys.stderr)

    pure = _Worker("kltool-lib", {"KLTOOL_PURE_PYTHON": "1"}) if "kltool-lib-pure" in readers else None
    rows: list[dict] = []
    for codec in codecs:
        path = args.out / f"{codec}-0" / SEGMENT
        if not path.exists():
            raise SystemExit(f"bench_verify: {path} is missing: run bench/gen_segment.py first")
        size = path.stat().st_size
        for mode in modes:
            deep = mode == "deep"
            group: list[dict] = []
            fns = {r: READERS[r] for r in readers if r not in ("kafka-java", "kltool-lib-pure")}
            if "kltool-lib-pure" in readers:
                fns["kltool-lib-pure"] = pure
            # keep the order the user gave
            fns = {r: fns[r] for r in readers if r in fns}
            if args.wait_idle:
                wait_idle(args.wait_idle)
            warm(path)
            measured = measure_group(fns, path, deep, args.repeat, args.warmup)
            if "kafka-java" in readers and launcher is not None:
                if args.wait_idle:
                    wait_idle(args.wait_idle)
                warm(path)
                measured["kafka-java"] = java_bench(launcher, path, deep, args.java_repeat, args.java_warmup)
            for reader in readers:
                if reader not in measured:
                    continue
                runs, res = measured[reader]
                if reader == "kltool-lib-pure" and res.get("decoder") != "pure Python":
                    raise Mismatch(f"KLTOOL_PURE_PYTHON=1 did not select the pure-Python decoder: {res}")
                med = statistics.median(runs)
                row = {"codec": codec, "mode": mode, "reader": reader, "file": str(path), "file_bytes": size,
                       "runs_seconds": [round(x, 6) for x in runs], "median_seconds": med, "min_seconds": min(runs),
                       "gbps": size / med / 1e9, "records_per_s": res["records"] / med, **res}
                group.append(row)
                print(f"  {codec:5} {mode:7} {reader:15} {med:8.4f}s  {res['records']:,} records",
                      file=sys.stderr)
            # Honesty check: every reader read the same records (and batches, where it counts them).
            recs = {r["reader"]: r["records"] for r in group}
            if len(set(recs.values())) > 1:
                raise Mismatch(f"{codec} {mode}: readers disagree on the record count: {recs}")
            bats = {r["reader"]: r["batches"] for r in group if r.get("batches") is not None}
            if len(set(bats.values())) > 1:
                raise Mismatch(f"{codec} {mode}: readers disagree on the batch count: {bats}")
            touched = {r["reader"]: r["touched"] for r in group if r.get("touched") is not None}
            if len(set(touched.values())) > 1:
                raise Mismatch(f"{codec} {mode}: readers touched different byte counts: {touched}")
            base = {r["reader"]: r["median_seconds"] for r in group if r["reader"].startswith("kltool")}
            for r in group:
                if "kltool-lib" in base:
                    r["vs_kltool_lib"] = r["median_seconds"] / base["kltool-lib"]
                if "kltool-cli" in base:
                    r["vs_kltool_cli"] = r["median_seconds"] / base["kltool-cli"]
            rows.extend(group)

    if pure is not None:
        pure.close()
    if args.json:
        for r in rows:
            print(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()}))
    else:
        import platform

        print(f"kltool verify benchmark: kltool {_git_rev()} (record decoder: {kltool_decoder()}), "
              f"python {platform.python_version()}, {os.cpu_count()} CPUs, "
              f"median of {args.repeat} runs after {args.warmup} warm-up (kafka-java: {args.java_repeat} after "
              f"{args.java_warmup}), page cache warm; aiokafka {aiokafka_impl()}")
        print("x lib / x cli: this reader's median / kltool's (lib or cli) median = how many times faster kltool is")
        print()
        print(fmt_table(rows))
        print()
        for n in check_targets(rows):
            print(n)

    if args.profile:
        import cProfile
        import pstats

        for codec in codecs:
            path = args.out / f"{codec}-0" / SEGMENT
            for mode in modes:
                warm(path)
                pr = cProfile.Profile()
                pr.enable()
                kltool_lib(path, mode == "deep")
                pr.disable()
                print(f"\n=== cProfile kltool-lib {codec} {mode} ===", file=sys.stderr)
                pstats.Stats(pr, stream=sys.stderr).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
