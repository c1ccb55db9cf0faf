#!/usr/bin/env python3
"""Split-engine campaign: rearrange a partition's batches into runs across misnamed / permuted segment files,
then repair (salvage and like-broker). Checks: no exit 70; salvage keeps every distinct CRC-valid batch;
second verify has no errors; second dry-run plans nothing; restore gives back every byte; Kafka's reader
(kafka-oracle read) reads each repaired .log fully valid.
usage: bench/adversary_split_campaign.py SEED RUNS [OUTDIR] (seeds 7, 8 at stop 18)"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from adversary_campaign import K, batch_positions, part_valid, snap, snapdiff  # noqa: E402

ORACLE = os.path.expanduser("~/.cache/kltool-kafka-oracle/kafka-oracle")
JO = Path("/work/shared/corpus/java-oracle")
SOURCES = [d for d in sorted(JO.iterdir()) if d.is_dir() and not d.name.startswith("damaged")]


def run(args, timeout=120):
    try:
        p = subprocess.run([K, *args], capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return -999, "", "TIMEOUT"


def batches_of_dir(src):
    out = []
    for log in sorted(src.glob("*.log")):
        d = log.read_bytes()
        for s, e in batch_positions(d):
            first = struct.unpack_from(">q", d, s)[0]
            out.append((first, d[s:e]))
    return out


def build(rng, src, pdir):
    bs = batches_of_dir(src)
    if len(bs) < 3:
        return None
    n = len(bs)
    k = rng.randint(1, min(4, n - 1))
    cuts = sorted(rng.sample(range(1, n), k))
    runs = [bs[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
    style = rng.choice(["one_file_permuted", "swap_files", "misnamed_high", "reversed_files", "dup_run"])
    files = []
    if style == "one_file_permuted":
        order = runs[:]
        rng.shuffle(order)
        files = [(runs[0][0][0], order)]
    elif style == "swap_files":
        order = runs[:]
        rng.shuffle(order)
        files = [(r[0][0], [o]) for r, o in zip(runs, order, strict=True)]
    elif style == "misnamed_high":
        files = [(runs[-1][0][0] + rng.choice([0, 1, 5]), runs)]
    elif style == "reversed_files":
        files = [(runs[0][0][0], runs[::-1])]
    else:
        j = rng.randrange(len(runs))
        files = [(r[0][0], [r]) for r in runs]
        files.append((runs[-1][-1][0] + 1000, [runs[j]]))
    names = set()
    for base, rs in files:
        base = max(0, base)
        while base in names:
            base += 1
        names.add(base)
        with open(pdir / f"{base:020d}.log", "wb") as f:
            for r in rs:
                for _o, b in r:
                    f.write(b)
    return f"{style} n={n} cuts={cuts} files={[(b, [r[0][0] for r in rs]) for b, rs in files]}"


def main():  # noqa: C901
    seed, n = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    out = Path(sys.argv[3] if len(sys.argv) > 3 else f"/tmp/kltool-adversary/split-{seed}")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    fails = []
    cmds = 0
    t0 = time.time()
    for i in range(n):
        src = rng.choice(SOURCES)
        base = out / "w"
        shutil.rmtree(base, ignore_errors=True)
        ld = base / "ld"
        pdir = ld / src.name
        pdir.mkdir(parents=True)
        desc = build(rng, src, pdir)
        if desc is None:
            continue
        mutated = base / "mutated"
        shutil.copytree(ld, mutated)
        msnap = snap(ld)
        ctx = {"seed": seed, "run": i, "src": src.name, "desc": desc}

        def flag(kind, detail, ctx=ctx, **kw):
            rec = {"kind": kind, **ctx, **kw, "detail": detail[:3000]}
            fails.append(rec)
            with open(out / "failures.jsonl", "a") as f:
                f.write(json.dumps(rec) + "\n")

        for a in (["verify"], ["--json", "verify", "--deep"], ["dump", "--records"], ["offsets", "--count"],
                  ["verify", "--repair", "--dry-run"], ["verify", "--repair", "--dry-run", "--like-broker"],
                  ["transactions", "--scan-all"], ["producers", "--scan-all"]):
            rc, so, se = run([*a, str(ld)])
            cmds += 1
            if rc in (70, -999) or "Traceback" in se:
                flag("exit70", se[-1500:], args=a)
        for mode in ([], ["--like-broker"]):
            shutil.rmtree(ld)
            shutil.copytree(mutated, ld)
            bk = base / "bk"
            shutil.rmtree(bk, ignore_errors=True)
            before = part_valid(ld)
            rc, so, se = run(["verify", "--repair", *mode, "--backup-dir", str(bk), str(ld)])
            cmds += 1
            m = "lb" if mode else "salvage"
            if rc in (70, -999) or "Traceback" in se:
                flag("exit70", se[-1500:], mode=m)
                continue
            if rc != 0:
                flag("repair_rc", so[-1500:] + se[-500:], mode=m, rc=rc)
            v = run(["--json", "verify", str(ld)])
            cmds += 1
            errs = [ln for ln in v[1].splitlines() if '"severity":"error"' in ln]
            if errs and rc == 0:
                flag("post_errors", so[-1500:] + "\n---\n" + "\n".join(errs)[:1500], mode=m)
            d2 = run(["verify", "--repair", "--dry-run", *mode, str(ld)])
            cmds += 1
            if d2[0] != 0 and rc == 0 and not errs:
                flag("replans", d2[1][-1500:], mode=m)
            if not mode and rc == 0:
                lost = set(before) - set(part_valid(ld))
                if lost:
                    flag("lost_valid", f"{len(lost)} distinct valid batches missing\n" + so[-2500:], mode=m)
            if rc == 0 and os.path.exists(ORACLE):
                logs = sorted(str(p) for p in ld.rglob("*.log") if p.stat().st_size)
                if logs:
                    o = subprocess.run([ORACLE, "read", *logs], capture_output=True, text=True, timeout=120)
                    cmds += 1
                    if o.returncode != 0:
                        flag("oracle_invalid", o.stdout[-1500:], mode=m)
            if bk.exists() and any(bk.iterdir()):
                rr = run(["restore", str(bk)])
                cmds += 1
                d = snapdiff(msnap, snap(ld))
                if rr[0] != 0 or d:
                    flag("restore", json.dumps(d)[:1500] + rr[2][-500:], mode=m)
        if i % 10 == 0:
            print(f"split seed {seed} run {i} cmds {cmds} fails {len(fails)} {time.time() - t0:.0f}s", flush=True)
    kinds = {}
    for f in fails:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    print(json.dumps({"seed": seed, "runs": n, "commands": cmds, "failures": kinds, "secs": round(time.time() - t0)}))


if __name__ == "__main__":
    main()
