#!/usr/bin/env python3
"""Adversary campaign: mutate real partition dirs, run every kltool command, check invariants.

usage: bench/adversary_campaign.py SEED RUNS [OUTDIR] [--only I,J] [--keep]   (the adversary campaign of stop 18;
seeds 101, 202, 303; --only runs just those runs, the others mutated but not run, so the random stream stays the
same; --keep saves each run's mutated log dir as OUTDIR/mutated-RUN, to replay by hand; the environment variable
KLTOOL_BIN runs another kltool executable, e.g. an older build, to count its failures on the same seed;
--repair-only runs only the salvage repair and its checks (lost_valid, post-repair errors, replans, restore), the
same mutations, several times faster)
Invariants: no exit 70 / traceback / timeout; outside file untouched; writes restored byte for byte;
after a repair a second verify has no errors and a second dry-run plans nothing; salvage repair keeps every
CRC-valid batch (reported as 'lost_valid' for triage).
"""
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

WT = Path(__file__).resolve().parent.parent
K = os.environ.get("KLTOOL_BIN") or str(WT / ".venv/bin/kltool")  # KLTOOL_BIN: another build, to compare
sys.path.insert(0, str(WT))
from kltool.format.speedups import crc32c  # noqa: E402

SRC_ROOTS = [Path("/work/shared/corpus/real"), Path("/work/shared/corpus/java-oracle"), WT / "fixtures"]


def catalogue():
    parts = []
    for root in SRC_ROOTS:
        for log in root.rglob("*.log"):
            if log.stat().st_size == 0 or not log.name[:20].isdigit():
                continue
            d = log.parent
            if d not in parts:
                parts.append(d)
    return sorted(parts)


# ---------- batch walking (independent of kltool) ----------

def batch_ok(b, pos):
    if pos + 17 > len(b):
        return None
    length = struct.unpack_from(">i", b, pos + 8)[0]
    end = pos + 12 + length
    if length < 14 or end > len(b):
        return None
    magic = b[pos + 16]
    if magic == 2:
        if length < 49:
            return None
        crc = struct.unpack_from(">I", b, pos + 17)[0]
        if crc32c(bytes(b[pos + 21:end])) != crc:
            return None
        return end
    if magic in (0, 1):
        crc = struct.unpack_from(">I", b, pos + 12)[0]
        if zlib.crc32(bytes(b[pos + 16:end])) & 0xffffffff != crc:
            return None
        return end
    return None


def valid_batches(b):
    """CRC-valid batches: walk by length, resync byte by byte after damage. Key: CRC-covered bytes."""
    out = []
    pos = 0
    n = len(b)
    while pos + 12 <= n:
        end = batch_ok(b, pos)
        if end is not None:
            magic = b[pos + 16]
            out.append(bytes(b[pos + (21 if magic == 2 else 12):end]))
            pos = end
        else:
            pos += 1
    return out


def part_valid(dirpath):
    c = Counter()
    for p in Path(dirpath).rglob("*.log"):
        if p.is_symlink() or not p.is_file():
            continue
        try:
            data = p.read_bytes()
        except OSError:
            continue
        if len(data) > 64 << 20:
            continue
        c.update(valid_batches(data))
    return c


def batch_positions(b):
    pos, out = 0, []
    while pos + 17 <= len(b):
        length = struct.unpack_from(">i", b, pos + 8)[0]
        if length < 14 or pos + 12 + length > len(b):
            break
        out.append((pos, pos + 12 + length))
        pos += 12 + length
    return out


# ---------- tree snapshot ----------

def snap(root):
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("dir",)
            elif os.path.isfile(p):
                st = os.stat(p)
                if st.st_size > 256 << 20:
                    out[rel] = ("bigfile", st.st_size)
                else:
                    with open(p, "rb") as f:
                        out[rel] = ("file", hashlib.sha1(f.read()).hexdigest(), st.st_size)
            else:
                out[rel] = ("other",)
    return out


def snapdiff(a, b):
    keys = sorted(set(a) | set(b))
    return [(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]


# ---------- mutations ----------

def seg_logs(pdir):
    return sorted(p for p in pdir.glob("*.log") if p.name[:20].isdigit() and p.is_file() and not p.is_symlink())


def mut(rng, pdir, outside):  # noqa: C901
    logs = seg_logs(pdir)
    allf = sorted(p for p in pdir.iterdir() if p.is_file() and not p.is_symlink())
    kinds = ["flip", "flip_hdr", "flip_hdr", "trunc", "zero", "app_zeros", "app_garbage", "sparse", "huge_len",
             "dup_seg", "misname", "swap", "hostile_index", "hostile_snapshot", "hostile_lec", "hostile_pm",
             "symlink", "leftover", "set_offset", "set_offset", "dup_batch", "drop_batch", "swap_batches",
             "set_epoch", "empty_seg", "dir_as_file", "hostile_parent_ckpt", "set_count", "set_attr",
             "flip_recompute", "neg_len", "overflow_off", "txnindex"]
    k = rng.choice(kinds)
    desc = [k]
    if not logs:
        return "nolog"
    log = rng.choice(logs)
    data = bytearray(log.read_bytes())
    bps = batch_positions(data)

    def w(d=data, p=log):
        p.write_bytes(bytes(d))

    if k == "flip":
        f = rng.choice(allf) if rng.random() < 0.4 else log
        d = bytearray(f.read_bytes())
        if d:
            i = rng.randrange(len(d))
            bit = rng.randrange(8)
            d[i] ^= 1 << bit
            f.write_bytes(bytes(d))
            desc += [f.name, i, bit]
    elif k in ("flip_hdr", "flip_recompute") and bps:
        s, e = rng.choice(bps)
        i = s + rng.randrange(min(61, e - s))
        bit = rng.randrange(8)
        data[i] ^= 1 << bit
        if k == "flip_recompute" and data[s + 16] == 2 and i >= s + 21:
            struct.pack_into(">I", data, s + 17, crc32c(bytes(data[s + 21:e])))
        w()
        desc += [log.name, i, bit]
    elif k == "trunc":
        n = rng.randrange(len(data) + 1)
        w(data[:n])
        desc += [log.name, n]
    elif k == "zero":
        a = rng.randrange(len(data) + 1)
        b = min(len(data), a + rng.choice([1, 4, 12, 61, 500, 5000]))
        data[a:b] = bytes(b - a)
        w()
        desc += [log.name, a, b]
    elif k == "app_zeros":
        n = rng.choice([1, 11, 12, 61, 4096, 100000])
        w(data + bytes(n))
        desc += [log.name, n]
    elif k == "app_garbage":
        n = rng.choice([1, 12, 17, 61, 300])
        w(data + rng.randbytes(n))
        desc += [log.name, n]
    elif k == "sparse":
        with open(log, "r+b") as f:
            f.truncate(len(data) + rng.choice([1 << 20, 8 << 20, 64 << 20]))
            if rng.random() < 0.5 and bps:
                s, e = rng.choice(bps)
                f.seek(len(data) + rng.choice([4096, 1 << 19, 3 << 20]))
                f.write(bytes(data[s:e]))
        desc += [log.name]
    elif k in ("huge_len", "neg_len") and bps:
        s, e = rng.choice(bps)
        v = rng.choice([0x7fffffff, 0x40000000, 1 << 24, e - s - 12 + 1, e - s - 12 - 1]) if k == "huge_len" \
            else rng.choice([-1, -0x80000000, 0, 13])
        struct.pack_into(">i", data, s + 8, v)
        w()
        desc += [log.name, s, v]
    elif k == "dup_seg":
        base = int(log.name[:20])
        nb = max(0, base + rng.choice([0, 1, -1, 5, 1000, 2**31, 2**40]))
        dst = pdir / f"{nb:020d}.log"
        if dst.exists():
            dst = pdir / f"{base + 7:020d}.log"
        shutil.copyfile(log, dst)
        desc += [log.name, dst.name]
    elif k == "misname":
        base = int(log.name[:20])
        nb = max(0, base + rng.choice([1, -1, 3, 100, -100, 2**31 + 5, 2**33]))
        if not (pdir / f"{nb:020d}.log").exists():
            for ext in (".log", ".index", ".timeindex", ".txnindex"):
                src = pdir / f"{base:020d}{ext}"
                if src.exists():
                    src.rename(pdir / f"{nb:020d}{ext}")
        desc += [log.name, nb]
    elif k == "swap" and len(logs) > 1:
        a, b = rng.sample(logs, 2)
        da, db = a.read_bytes(), b.read_bytes()
        a.write_bytes(db)
        b.write_bytes(da)
        desc += [a.name, b.name]
    elif k in ("hostile_index", "txnindex"):
        ext = ".txnindex" if k == "txnindex" else rng.choice([".index", ".timeindex"])
        f = log.with_suffix(ext)
        style = rng.choice(["random", "huge_sparse", "odd_len", "zeros", "descending", "beyond"])
        if style == "random":
            f.write_bytes(rng.randbytes(rng.choice([8, 12, 40, 4096, 12 * 100])))
        elif style == "huge_sparse":
            with open(f, "wb") as fh:
                fh.truncate(rng.choice([10 << 20, 1 << 30]))
        elif style == "odd_len":
            f.write_bytes(rng.randbytes(rng.choice([1, 7, 13, 23])))
        elif style == "zeros":
            f.write_bytes(bytes(rng.choice([8, 12, 4096, 40])))
        elif style == "descending":
            ent = b"".join(struct.pack(">ii", 100 - i, 1000 - i * 10) if ext == ".index"
                           else struct.pack(">qi", 10**12 - i, 100 - i) for i in range(10))
            if ext == ".txnindex":
                ent = b"".join(struct.pack(">hqqqi", 0, 7, 100 - i, 50 - i, 99 - i) for i in range(5))
            f.write_bytes(ent)
        else:
            if ext == ".index":
                ent = struct.pack(">ii", 0x7ffffff0, 0x7ffffff0)
            elif ext == ".timeindex":
                ent = struct.pack(">qi", 2**62, 0x7ffffff0)
            else:
                ent = struct.pack(">hqqqi", 0, 7, 2**62, 2**62 + 5, 2**62)
            f.write_bytes(ent * rng.choice([1, 3]))
        desc += [f.name, style]
    elif k == "hostile_snapshot":
        snaps = sorted(pdir.glob("*.snapshot"))
        f = rng.choice(snaps) if snaps and rng.random() < 0.6 else pdir / f"{rng.choice([0, 5, 10**6]):020d}.snapshot"
        if f.exists() and rng.random() < 0.6:
            d = bytearray(f.read_bytes())
            if d:
                d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
            else:
                d = bytearray(rng.randbytes(30))
            f.write_bytes(bytes(d))
        else:
            # version 1, crc (bad or good), huge entry count claim
            body = struct.pack(">i", 0x7fffffff) + rng.randbytes(rng.choice([0, 10, 70]))
            f.write_bytes(struct.pack(">hI", 1, crc32c(body) if rng.random() < 0.5 else 0) + body)
        desc += [f.name]
    elif k == "hostile_lec":
        f = pdir / "leader-epoch-checkpoint"
        f.write_bytes(rng.choice([
            b"0\n2\n5 100\n3 50\n", b"0\n1\n-1 -5\n", b"0\n99999999999\n", b"0\n2\n0 0\n", b"1\n0\n",
            b"0\n1\n2147483648 0\n", b"0\n3\n0 0\n1 9223372036854775807\n2 5\n", rng.randbytes(40), b"",
            b"0\n1\n0 0", b"0\r\n1\r\n0 0\r\n"]))
        desc += [f.name]
    elif k == "hostile_pm":
        f = pdir / "partition.metadata"
        f.write_bytes(rng.choice([b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n", b"version: 9\n", b"\xff\xfe",
                                  b"version: 0\ntopic_id: !!!\n", rng.randbytes(20)]))
        desc += [f.name]
    elif k == "hostile_parent_ckpt":
        name = rng.choice(["log-start-offset-checkpoint", "recovery-point-offset-checkpoint",
                           "replication-offset-checkpoint", "cleaner-offset-checkpoint"])
        f = pdir.parent / name
        t, p = pdir.name.rsplit("-", 1)
        v = rng.choice([-5, 0, 3, 10**6, 2**63 - 1, 2**40])
        f.write_text(rng.choice([f"0\n1\n{t} {p} {v}\n", f"0\n2\n{t} {p} {v}\n", f"0\n1\n{t} {p}\n", "7\n0\n"]))
        desc += [name, v]
    elif k == "symlink":
        what = rng.choice(["log", "index", "dir", "snapshot", "lec"])
        if what == "log":
            shutil.copyfile(log, outside / "victim.log")
            log.unlink()
            log.symlink_to(outside / "victim.log")
        elif what == "index":
            f = log.with_suffix(".index")
            if f.exists():
                shutil.copyfile(f, outside / "victim.index")
                f.unlink()
            else:
                (outside / "victim.index").write_bytes(b"")
            f.symlink_to(outside / "victim.index")
        elif what == "dir":
            # a partition dir that is a symlink to a copy outside
            cp = outside / "victimdir"
            shutil.copytree(pdir, cp)
            shutil.rmtree(pdir)
            pdir.symlink_to(cp)
        elif what == "snapshot":
            (outside / "victim.snapshot").write_bytes(b"\x00\x01" + bytes(20))
            (pdir / f"{int(log.name[:20]):020d}.snapshot").unlink(missing_ok=True)
            (pdir / f"{int(log.name[:20]):020d}.snapshot").symlink_to(outside / "victim.snapshot")
        else:
            (outside / "victim-lec").write_bytes(b"0\n1\n0 0\n")
            (pdir / "leader-epoch-checkpoint").unlink(missing_ok=True)
            (pdir / "leader-epoch-checkpoint").symlink_to(outside / "victim-lec")
        desc += [what]
    elif k == "leftover":
        ext = rng.choice([".log.swap", ".log.cleaned", ".log.deleted", ".index.swap", ".timeindex.cleaned",
                          ".snapshot.deleted", ".log.tmp"])
        base = int(log.name[:20]) + rng.choice([0, 1, 10])
        f = pdir / f"{base:020d}{ext}"
        f.write_bytes(bytes(data[: rng.randrange(len(data) + 1)]) if rng.random() < 0.7 else rng.randbytes(50))
        desc += [f.name]
    elif k == "set_offset" and bps:
        s, e = rng.choice(bps)
        old = struct.unpack_from(">q", data, s)[0]
        v = rng.choice([old + 1, old - 1, old + 1000, old ^ (1 << rng.randrange(63)), -1, 0, 2**62, old + 2**31,
                        old ^ (1 << 63)])
        struct.pack_into(">q", data, s, v)
        w()
        desc += [log.name, s, old, v]
    elif k == "overflow_off" and bps:
        s, e = bps[-1]
        old = struct.unpack_from(">q", data, s)[0]
        struct.pack_into(">q", data, s, old + 2**31 + rng.randrange(100))
        w()
        desc += [log.name, s]
    elif k == "dup_batch" and bps:
        s, e = rng.choice(bps)
        data[e:e] = data[s:e]
        w()
        desc += [log.name, s]
    elif k == "drop_batch" and bps:
        s, e = rng.choice(bps)
        del data[s:e]
        w()
        desc += [log.name, s]
    elif k == "swap_batches" and len(bps) > 1:
        i = rng.randrange(len(bps) - 1)
        (s1, e1), (s2, e2) = bps[i], bps[i + 1]
        data[s1:e2] = data[s2:e2] + data[s1:e1]
        w()
        desc += [log.name, s1]
    elif k == "set_epoch" and bps:
        s, e = rng.choice(bps)
        if data[s + 16] == 2:
            v = rng.choice([-1, 0, 1, 99, 2**31 - 1, -2**31])
            struct.pack_into(">i", data, s + 12, v)
            w()
            desc += [log.name, s, v]
    elif k == "set_count" and bps:
        s, e = rng.choice(bps)
        if data[s + 16] == 2:
            v = rng.choice([0, -1, 2**31 - 1, 1, 1000000])
            struct.pack_into(">i", data, s + 57, v)
            struct.pack_into(">I", data, s + 17, crc32c(bytes(data[s + 21:e])))
            w()
            desc += [log.name, s, v]
    elif k == "set_attr" and bps:
        s, e = rng.choice(bps)
        if data[s + 16] == 2:
            v = rng.choice([0x7, 0x5, 0x10, 0x20, 0x30, 0x40, 0xff, 0x8000, 0x28])
            struct.pack_into(">h", data, s + 21, v)
            if rng.random() < 0.7:
                struct.pack_into(">I", data, s + 17, crc32c(bytes(data[s + 21:e])))
            w()
            desc += [log.name, s, hex(v)]
    elif k == "empty_seg":
        base = int(log.name[:20])
        nb = base + rng.choice([1, 10**6, 0])
        f = pdir / f"{nb:020d}.log"
        if not f.exists():
            f.write_bytes(b"")
        else:
            log.write_bytes(b"")
        desc += [f.name]
    elif k == "dir_as_file":
        f = log.with_suffix(rng.choice([".index", ".timeindex", ".snapshot"]))
        if f.exists():
            f.unlink()
        f.mkdir()
        desc += [f.name]
    else:
        desc.append("noop")
    return " ".join(map(str, desc))


# ---------- running ----------

class Runner:
    def __init__(self, out):
        self.out = out
        self.runs = 0
        self.cmds = 0
        self.fail = []
        self.by_kind = Counter()
        self.skip = False
        self.keep = False
        self.repair_only = False

    def run(self, args, cwd=None, timeout=90):
        if self.skip:  # replaying the rng stream up to the runs asked for (--only): nothing run
            return 0, "", "", 0.0
        self.cmds += 1
        t = time.time()
        try:
            p = subprocess.run([K, *args], capture_output=True, timeout=timeout, cwd=cwd,
                               env={**os.environ, "KLTOOL_DEBUG": ""})
            rc, so, se = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            rc, so, se = -999, b"", b"TIMEOUT"
        dt = time.time() - t
        return rc, so.decode("utf-8", "replace"), se.decode("utf-8", "replace"), dt

    def flag(self, kind, ctx, detail):
        if self.skip:
            return
        self.by_kind[kind] += 1
        rec = {"kind": kind, **ctx, "detail": detail[:3000]}
        self.fail.append(rec)
        with open(self.out / "failures.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")


def check_cmd(r, ctx, args, res, ok=(0, 1, 2, 3)):
    rc, so, se, dt = res
    c = {**ctx, "args": args, "rc": rc, "secs": round(dt, 2)}
    if rc == -999:
        r.flag("timeout", c, "")
    elif rc == 70 or "Traceback" in se or "internal error" in se:
        r.flag("exit70", c, se[-2000:])
    elif rc not in ok:
        r.flag("bad_rc", c, se[-1000:])
    elif dt > 30:
        r.flag("slow", c, se[-300:])


def one_run(r, rng, parts, seed, i):  # noqa: C901
    base = r.out / "w"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    outside = base / "outside"
    outside.mkdir()
    ld = base / "ld"
    ld.mkdir()
    chosen = rng.sample(parts, 1 if rng.random() < 0.8 else min(3, len(parts)))
    names = set()
    for src in chosen:
        name = src.name if src.name not in names else src.name.rsplit("-", 1)[0] + "x-" + src.name.rsplit("-", 1)[1]
        if "-" not in name or not name.rsplit("-", 1)[1].isdigit():
            name = "t-0"
        names.add(name)
        shutil.copytree(src, ld / name, symlinks=True)
        for mp in ("meta.properties",):
            if (src.parent / mp).exists() and not (ld / mp).exists():
                shutil.copyfile(src.parent / mp, ld / mp)
    for dp, _dns, fns in os.walk(ld):
        os.chmod(dp, 0o755)
        for n in fns:
            os.chmod(os.path.join(dp, n), 0o644)
        for n in list(fns):
            if n in ("expected.jsonl", ".lock", "README.md"):
                os.unlink(os.path.join(dp, n))
    pristine = base / "pristine"
    shutil.copytree(ld, pristine, symlinks=True)
    pdirs = sorted(p for p in ld.iterdir() if p.is_dir())
    muts = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        pd = rng.choice([p for p in ld.iterdir() if p.is_dir() and not p.is_symlink()] or pdirs)
        try:
            muts.append(mut(rng, pd, outside))
        except Exception as e:  # harness problem
            muts.append(f"mutfail {e!r}")
    ctx = {"seed": seed, "run": i, "src": [str(c) for c in chosen], "muts": muts}
    r.runs += 1
    outside_snap = snap(outside)
    mutated = base / "mutated"
    shutil.copytree(ld, mutated, symlinks=True)
    if r.keep and not r.skip:
        shutil.rmtree(r.out / f"mutated-{i}", ignore_errors=True)
        shutil.copytree(ld, r.out / f"mutated-{i}", symlinks=True)
    mutated_snap = snap(ld)
    pd0 = next((p for p in sorted(ld.iterdir()) if p.is_dir()), ld)
    files = sorted(str(p) for p in pd0.iterdir() if p.is_file())[:8] if pd0.is_dir() else []

    ro = [
        ["info", str(ld)], ["info", "--all", str(ld)], ["--json", "info", str(ld)],
        ["dump", str(ld)], ["--json", "dump", "--records", str(ld)],
        ["dump", "--records", "--isolation-level", "read_committed", "--encoding", "hex", str(ld)],
        ["dump", "--records", "--from-offset", str(rng.choice([0, 1, 3, 50, 10**6])), "--limit", "20", str(ld)],
        ["dump", "--from-time", str(rng.choice([0, 1600000000000, 1700000000000, 1750000000000])), str(ld)],
        ["dump", "--print-data-log", "--files", ",".join(files)] if files else ["info", str(ld)],
        ["dump", "--index-sanity-check", *files] if files else ["info", str(ld)],
        ["--json", "dump", "--records", "--deep-iteration", *files] if files else ["info", str(ld)],
        ["verify", str(ld)], ["--json", "verify", "--deep", "--strict", str(ld)],
        ["offsets", "--count", str(ld)], ["offsets", "--earliest", str(ld)], ["offsets", "--latest", str(ld)],
        ["offsets", "--max-timestamp", str(ld)],
        ["offsets", "--time", str(rng.choice([0, 1600000000000, 1700000000000, 2000000000000])), str(ld)],
        ["transactions", "--aborted", "--scan-all", "--now", "1800000000000", str(ld)],
        ["transactions", str(ld)],
        ["producers", "--scan-all", "--now", "1800000000000", str(ld)], ["producers", str(ld)],
        ["diff", str(pristine), str(ld)],
        ["verify", "--repair", "--dry-run", str(ld)], ["verify", "--repair", "--dry-run", "--like-broker", str(ld)],
        ["retention", "--dry-run", "--retention-bytes", str(rng.choice([0, 100, 5000, 10**6])), str(ld)],
        ["retention", "--dry-run", "--retention-ms", "1000", "--now", "1800000000000", str(ld)],
        ["retention", "--dry-run", "--before-offset", str(rng.choice([1, 5, 100, 10**9])), str(ld)],
        ["compact", "--dry-run", "--force", "--now", "1800000000000", str(ld)],
        ["rebuild-index", "--dry-run", str(ld)],
    ]
    for a in ([] if r.repair_only else ro):
        res = r.run(a)
        check_cmd(r, ctx, a, res)
    if snapdiff(mutated_snap, snap(ld)):
        r.flag("readonly_changed", ctx, json.dumps(snapdiff(mutated_snap, snap(ld)))[:2000])
        shutil.rmtree(ld)
        shutil.copytree(mutated, ld, symlinks=True)

    writes = [
        ("repair", ["verify", "--repair"]),
        ("repair_lb", ["verify", "--repair", "--like-broker"]),
        ("rebuild", ["rebuild-index"]),
        ("retention", ["retention", "--retention-bytes", str(rng.choice([0, 100, 5000, 10**5]))]),
        ("retention_off", ["retention", "--before-offset", str(rng.choice([1, 3, 10, 100]))]),
        ("compact", ["compact", "--force", "--now", "1800000000000"]),
        ("append", ["append", "--key", "k", "--value", "v"]),
    ]
    pre = r.run(["--json", "verify", str(ld)])
    pre_errs = '"severity":"error"' in pre[1]
    for name, cmd in writes:
        shutil.rmtree(ld)
        shutil.copytree(mutated, ld, symlinks=True)
        bk = base / f"bk-{name}"
        shutil.rmtree(bk, ignore_errors=True)
        before_valid = part_valid(ld) if name == "repair" else None
        args = list(cmd)
        if name != "append":
            args += ["--backup-dir", str(bk)]
        target = str(ld)
        if name == "append":
            pds = [p for p in ld.iterdir() if p.is_dir()]
            if not pds:
                continue
            target = str(rng.choice(pds))
        if r.repair_only and name != "repair":
            continue
        res = r.run([*args, target])
        c = {**ctx, "write": name}
        check_cmd(r, c, args, res)
        rc = res[0]
        if snap(outside) != outside_snap:
            r.flag("outside_changed", c, json.dumps(snapdiff(outside_snap, snap(outside))))
        if rc in (70, -999):
            continue
        if name in ("repair", "repair_lb", "compact") and rc == 0:
            v = r.run(["--json", "verify", str(ld)])
            check_cmd(r, {**c, "phase": "post_verify"}, ["verify"], v)
            errs = [ln for ln in v[1].splitlines() if '"severity":"error"' in ln.replace(" ", "")]
            if errs and (name != "compact" or not pre_errs):
                r.flag(f"post_{name}_errors", c, res[1][-1500:] + "\n---\n" + "\n".join(errs)[:1500])
            if name != "compact":
                d2 = r.run(["verify", "--repair", "--dry-run", *( ["--like-broker"] if name == "repair_lb" else []),
                            str(ld)])
                check_cmd(r, {**c, "phase": "second_dry"}, ["dry"], d2)
                if d2[0] != 0 and not errs:
                    r.flag(f"post_{name}_replans", c, d2[1][-1500:] + d2[2][-500:])
        if name == "repair" and rc == 0 and before_valid is not None:
            after = part_valid(ld)
            lost = set(before_valid) - set(after)
            if lost:
                r.flag("lost_valid", c, f"{len(lost)} distinct valid batches missing; plan:\n" + res[1][-2500:])
        if name == "append":
            if rc == 0:
                # every file that existed keeps its bytes as a prefix (logs) -- indexes may be rewritten
                for rel, st in mutated_snap.items():
                    if rel.endswith(".log") and st[0] == "file":
                        p = ld / rel
                        old = (mutated / rel).read_bytes()
                        if not p.exists() or p.read_bytes()[:len(old)] != old:
                            r.flag("append_altered", c, rel)
            continue
        if bk.exists() and any(bk.iterdir()):
            rr = r.run(["restore", str(bk)])
            check_cmd(r, {**c, "phase": "restore"}, ["restore"], rr, ok=(0,))
            d = snapdiff(mutated_snap, snap(ld))
            if d:
                r.flag("restore_differs", c, json.dumps(d)[:2000] + "\n" + res[1][-800:] + rr[2][-500:])
        elif rc == 0:
            d = snapdiff(mutated_snap, snap(ld))
            # changes without a backup
            if d and name in ("repair", "repair_lb", "retention", "retention_off", "compact", "rebuild"):
                r.flag("changed_no_backup", c, json.dumps(d)[:1500])


def main():
    argv = sys.argv[1:]
    only = None
    if "--only" in argv:
        k = argv.index("--only")
        only = {int(x) for x in argv[k + 1].split(",")}
        del argv[k:k + 2]
    keep = "--keep" in argv
    if keep:
        argv.remove("--keep")
    repair_only = "--repair-only" in argv
    if repair_only:
        argv.remove("--repair-only")
    seed = int(argv[0])
    n = int(argv[1])
    out = Path(argv[2] if len(argv) > 2 else f"/tmp/kltool-adversary/out-{seed}")
    out.mkdir(parents=True, exist_ok=True)
    parts = catalogue()
    r = Runner(out)
    r.keep = keep
    r.repair_only = repair_only
    rng = random.Random(seed)
    t0 = time.time()
    for i in range(n):
        r.skip = only is not None and i not in only
        try:
            one_run(r, rng, parts, seed, i)
        except Exception as e:
            import traceback
            r.flag("harness", {"seed": seed, "run": i}, traceback.format_exc())
            print("harness error", e, file=sys.stderr)
        if i % 5 == 0 and not r.skip:
            print(f"seed {seed} run {i} cmds {r.cmds} fails {dict(r.by_kind)} {time.time() - t0:.0f}s", flush=True)
    summ = {"seed": seed, "runs": r.runs, "commands": r.cmds, "failures": dict(r.by_kind),
            "secs": round(time.time() - t0)}
    print(json.dumps(summ))
    (out / "summary.json").write_text(json.dumps(summ))


if __name__ == "__main__":
    main()
