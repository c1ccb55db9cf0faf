#!/usr/bin/env python3
"""Issue 12's table: every measure, kltool beside kafka-python, aiokafka and Kafka's Java reader, measured
in the same run, as ratios; plus peak RSS on a 1 GB segment.

    .venv/bin/python bench/gen_segment.py && .venv/bin/python bench/bench_all.py     # = make bench

Runs are interleaved (each round runs every contender once, in the same order), the table shows
medians. "Whole process" means a fresh interpreter (or JVM) from exec to exit, as a user runs it;
"in-process" times the library call alone (Java: Kafka's reader in a warm JVM, after JIT warm-up,
its own median). Ratios are peer / kltool (> 1: kltool is faster). Options: --runs N, --no-java,
--no-rss, --out DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

SEG = f"{0:020d}.log"
PY = sys.executable


def kltool_exe() -> str:
    exe = Path(PY).parent / "kltool"
    return str(exe) if exe.exists() else shutil.which("kltool") or "kltool"


_RSS_WRAPPER = ("import os, resource, subprocess, sys, time; t = time.perf_counter(); "
                "c = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
                "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, c)")


def rss_proc(cmd) -> tuple[float, int]:
    """(wall seconds, peak RSS KiB) of one whole process, started from a small wrapper interpreter (a
    child forked from this big benchmark process would report this process's RSS)."""
    p = subprocess.run([PY, "-c", _RSS_WRAPPER, *map(str, cmd)], capture_output=True, text=True, check=True)
    secs, kb, code = p.stdout.split()
    if code != "0":
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {code}")
    return float(secs), int(kb)


def run_proc(cmd, *, stdout=subprocess.DEVNULL, env=None, stdin=None) -> tuple[float, int, int, bytes]:
    """(wall seconds, exit code, peak RSS KiB, stdout when captured) of one whole process."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=stdout, stderr=err, stdin=stdin, env=env)
        out = b""
        if stdout == subprocess.PIPE:
            out = p.stdout.read()
        _pid, status, ru = os.wait4(p.pid, 0)
        secs = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode not in (0,):
            err.seek(0)
            raise RuntimeError(f"{' '.join(map(str, cmd))} exited {p.returncode}: {err.read()[-500:]!r}")
    return secs, p.returncode, ru.ru_maxrss, out


# ------------------------------------------------------------------------------------------ data

def ensure_data(out: Path, rss: bool) -> dict[str, Path]:
    paths = {"small": out / "small-0" / SEG, "none": out / "none-0" / SEG}
    if not all(p.exists() for p in paths.values()):
        subprocess.run([PY, str(HERE / "gen_segment.py"), "--codecs", "none", "--out", str(out)], check=True)
    jl = out / "append-1m-v100.jsonl"  # bench_append.py's records: key "key-<i>", a 100-byte value, a timestamp
    if not jl.exists():
        from bench_append import make_records

        with open(jl, "w") as f:
            for ts, k, v in make_records(1_000_000, 100):
                f.write(json.dumps({"key": k.decode(), "value": v.decode(), "timestamp": ts}) + "\n")
    paths["jsonl"] = jl
    if rss:
        big = out / "big-0" / SEG
        if not big.exists():
            big.parent.mkdir(parents=True, exist_ok=True)
            data = paths["none"].read_bytes()
            shift = 0
            last = 0
            with open(big, "wb") as f:
                while f.tell() < (1 << 30):
                    buf = bytearray(data)
                    pos = 0
                    while pos < len(buf):  # the base offset is not covered by the CRC
                        base, size = struct.unpack_from(">qi", buf, pos)
                        struct.pack_into(">q", buf, pos, base + shift)
                        last = base + shift + struct.unpack_from(">i", buf, pos + 23)[0]
                        pos += size + 12
                    f.write(buf)
                    shift = last + 1
        paths["big"] = big
    return paths


# ------------------------------------------------------------------------------------------ contenders

def verify_cli(path, deep=False):
    cmd = [kltool_exe(), "--json", "-q", "verify", str(path)] + (["--deep"] if deep else [])
    return run_proc(cmd)


def peer_cli(which, path, deep=False):
    return run_proc([PY, str(HERE / "peer_read.py"), which, str(path)] + (["--deep"] if deep else []))


def dump_cli(path, js):
    return run_proc([kltool_exe()] + (["--json"] if js else []) + ["dump", "--records", str(path)])


def append_cli(jsonl: Path):
    with tempfile.TemporaryDirectory(dir=HERE / "out") as d:
        ld = Path(d) / "logs"
        subprocess.run([kltool_exe(), "create", str(ld), "t", "--partitions", "1"], check=True,
                       capture_output=True)
        return run_proc([kltool_exe(), "-q", "append", str(ld), "t", "--partition", "0", "-i", str(jsonl)])


def lib_verify(path, deep):
    from bench_verify import kltool_lib

    t0 = time.perf_counter()
    kltool_lib(path, deep)
    return time.perf_counter() - t0


def builders(n=500_000):
    import warnings

    from bench_append import make_records, per_batch, run_builder_cls, run_kltool_builder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from aiokafka.record.default_records import DefaultRecordBatchBuilder as Aio
        from kafka.record.default_records import DefaultRecordBatchBuilder as Kp
    recs = make_records(n, 100)
    b = per_batch(recs, 100)
    return {"kltool": lambda: run_kltool_builder(recs, 0, b), "kafka-python": lambda: run_builder_cls(Kp, recs, 0, b),
            "aiokafka": lambda: run_builder_cls(Aio, recs, 0, b)}, n


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def java_warm(launcher, path, deep):
    from bench_verify import java_bench

    runs, res = java_bench(launcher, path, deep, 10, 5)
    return statistics.median(runs), res


# ------------------------------------------------------------------------------------------ table

def s(x):
    return "—" if x is None else (f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s")


def main() -> int:  # noqa: C901
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-java", action="store_true")
    ap.add_argument("--no-rss", action="store_true")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--raw", action="store_true", help="also print every run's time (ms), to see the spread")
    args = ap.parse_args()
    # Byte-compile kltool as an installation does (PYTHONDONTWRITEBYTECODE in the environment would
    # otherwise make every kltool process compile its modules from source; the peers' are compiled).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "kltool")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    paths = ensure_data(args.out, not args.no_rss)
    for p in paths.values():
        subprocess.run(["cat", str(p)], stdout=subprocess.DEVNULL)  # page cache
    small, none, jsonl = paths["small"], paths["none"], paths["jsonl"]
    recs_none = 1_000_000

    cache = {}

    def bld():
        if not cache:
            cache["b"], cache["n"] = builders()
        return cache["b"]

    work = {
        "verify small kltool": lambda: verify_cli(small)[0],
        "verify small kafka-python": lambda: peer_cli("kafka-python", small)[0],
        "verify small aiokafka": lambda: peer_cli("aiokafka", small)[0],
        "verify none kltool": lambda: verify_cli(none)[0],
        "verify none kafka-python": lambda: peer_cli("kafka-python", none)[0],
        "verify none aiokafka": lambda: peer_cli("aiokafka", none)[0],
        "verify none lib": lambda: lib_verify(none, False),
        "deep none lib": lambda: lib_verify(none, True),
        "deep none kltool": lambda: verify_cli(none, True)[0],
        "deep none kafka-python": lambda: peer_cli("kafka-python", none, True)[0],
        "deep none aiokafka": lambda: peer_cli("aiokafka", none, True)[0],
        "dump text": lambda: dump_cli(none, False)[0],
        "dump json": lambda: dump_cli(none, True)[0],
        "append cli": lambda: append_cli(jsonl)[0],
        "builder kltool": lambda: timed(bld()["kltool"]),
        "builder kafka-python": lambda: timed(bld()["kafka-python"]),
        "builder aiokafka": lambda: timed(bld()["aiokafka"]),
    }
    times: dict[str, list[float]] = {k: [] for k in work}
    for fn in work.values():  # warm-up round (imports, page cache)
        fn()
    for _ in range(args.runs):
        for k, fn in work.items():
            times[k].append(fn())
    med = {k: statistics.median(v) for k, v in times.items()}
    if args.raw:
        for k, v in times.items():
            print(f"{k}: {' '.join(f'{x * 1000:.0f}' for x in v)} ms", file=sys.stderr)

    java = {}
    java_note = ""
    if not args.no_java:
        from bench_verify import oracle_launcher

        launcher, why = oracle_launcher()
        if launcher is None:
            java_note = f"Kafka's Java reader skipped: {why}"
        else:
            for name, path, deep in (("small", small, False), ("none", none, False), ("deep", none, True)):
                java[name] = java_warm(launcher, path, deep)[0]

    rss = {}
    if not args.no_rss:
        big = paths["big"]
        subprocess.run(["cat", str(big)], stdout=subprocess.DEVNULL)
        k = kltool_exe()
        peer = [PY, str(HERE / "peer_read.py")]
        for name, cmd in (("verify", [k, "-q", "verify", big]), ("verify --deep", [k, "-q", "verify", "--deep", big]),
                          ("dump --records", [k, "dump", "--records", big]),
                          ("kafka-python verify", peer + ["kafka-python", big]),
                          ("aiokafka verify", peer + ["aiokafka", big])):
            rss[name] = rss_proc(cmd)

    def ratio(peer, mine):
        return f"{s(peer)} ({peer / mine:.1f}×)" if peer is not None and mine else s(peer)

    rows = []
    k, kp, aio = med["verify small kltool"], med["verify small kafka-python"], med["verify small aiokafka"]
    rows.append(("verify, 200k one-record batches (whole process)", s(k), ratio(kp, k), ratio(aio, k),
                 f"{s(java.get('small'))} in-JVM" if "small" in java else "—", "≤ 0.5× aiokafka",
                 k <= 0.5 * aio))
    k, kp, aio = med["verify none kltool"], med["verify none kafka-python"], med["verify none aiokafka"]
    rows.append((f"verify, {none.stat().st_size / 1e6:.0f} MB (whole process)", s(k), ratio(kp, k), ratio(aio, k), "—",
                 "≤ 0.25× both Python peers", k <= 0.25 * min(kp, aio)))
    k = med["verify none lib"]
    jv = java.get("none")
    rows.append((f"verify, {none.stat().st_size / 1e6:.0f} MB (in-process)",
                 f"{s(k)} ({none.stat().st_size / k / 1e9:.1f} GB/s)", "—", "—",
                 f"{ratio(jv, k)} warm" if jv else "—", "≥ Java warm", None if jv is None else k <= jv))
    k = med["deep none lib"]
    jv = java.get("deep")
    rows.append(("verify --deep, 1M records (in-process)", f"{s(k)} ({recs_none / k / 1e6:.1f} M rec/s)", "—", "—",
                 f"{ratio(jv, k)} warm" if jv else "—", "≥ Java warm", None if jv is None else k <= jv))
    k, kp, aio = med["deep none kltool"], med["deep none kafka-python"], med["deep none aiokafka"]
    rows.append(("verify --deep, 1M records (whole process)", s(k), ratio(kp, k), ratio(aio, k), "—", "—", None))
    for key, label in (("dump text", "dump --records text, 1M records → /dev/null"),
                       ("dump json", "--json dump --records, 1M records → /dev/null")):
        k = med[key]
        rows.append((label + " (whole process)", f"{s(k)} ({recs_none / k / 1e6:.2f} M rec/s)", "—", "—", "—",
                     "≥ 1 M rec/s", recs_none / k >= 1e6))
    k = med["append cli"]
    rows.append(("append from JSON lines, 1M records, to disk (whole process)",
                 f"{s(k)} ({1e6 / k / 1e6:.2f} M rec/s)", "—", "—", "—", "≥ 1 M rec/s", 1e6 / k >= 1e6))
    nb = cache["n"]
    k, kp, aio = med["builder kltool"], med["builder kafka-python"], med["builder aiokafka"]
    rows.append((f"batch builder, {nb // 1000}k records (in-process)", f"{s(k)} ({nb / k / 1e6:.2f} M rec/s)",
                 ratio(kp, k), ratio(aio, k), "—", "≥ aiokafka", k <= aio))
    for name, (secs, kb) in rss.items():
        rows.append((f"peak RSS, 1.1 GB segment: {name}", f"{kb / 1024:.0f} MiB ({s(secs)})", "—", "—", "—",
                     "bounded" if not name.startswith(("kafka", "aio")) else "—", None))

    print(f"kltool speed, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
          f"median of {args.runs} interleaved runs; (n×) = peer time / kltool time")
    print()
    print("| measure | kltool | kafka-python | aiokafka | Kafka's Java reader | goal | met |")
    print("|---|---|---|---|---|---|---|")
    for label, a, b, c, d, goal, met in rows:
        print(f"| {label} | {a} | {b} | {c} | {d} | {goal} | {'' if met is None else ('yes' if met else 'NO')} |")
    if java_note:
        print(f"\n{java_note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
