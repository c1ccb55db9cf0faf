#!/usr/bin/env python3
"""Read campaign: hostile and unusual input for kltool's READ commands, judged by invariants and by
Kafka's own reader (the oracle at /work/shared/oracle).

usage: bench/read_campaign.py SEED RUNS [OUTDIR] [--no-oracle] [--no-intact] [--jobs N]

Inputs: every partition dir under /work/shared/corpus/real, /work/shared/corpus/java-oracle and fixtures/,
and RUNS seeded mutations of them (truncation at each batch-header field boundary, bit flips in headers
and records, flips with the CRC made right again (Kafka reads those batches as valid), huge/negative
lengths and counts, crafted v2 records (varint overflow, lying header counts, key/value lengths that
overrun, negative lengths), compressed payloads of garbage or a bomb, nested v0/v1 wrappers with bad inner
offsets, control batches with bad types, markers of unknown producers, empty segments, zero-filled tails,
odd file and directory names).

Commands: dump (text, --json, --records, --decoder ...), info, offsets (--time, --count), verify,
transactions, producers, diff, compact --dry-run.

Invariants (each violation is a finding, printed and counted by kind):
  exit70      exit code 70 (an internal error)
  traceback   "Traceback" on stderr
  timeout     a command over its time budget (linear cost: 20 s for these small inputs)
  memory      a command's peak RSS over 600 MB (bombs must stay bounded)
  badjson     a --json stdout line that is not a JSON object with a "type"
  noposition  an error line on stderr (exit 2) without a byte position, or a log-damage finding without
              "file" and "position"
  oracle      intact input: kltool's batch/record read-out differs from Kafka's (expected.jsonl or a live
              oracle read); damaged input: a batch Kafka reads before the damage is missing or different,
              or the damage is not reported at Kafka's first invalid position
Exit 0 when there are no findings.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WT = Path(__file__).resolve().parent.parent
K = str(WT / ".venv/bin/kltool")
sys.path.insert(0, str(WT))
from adversary_campaign import batch_positions  # noqa: E402 - one home for walking a log's batch frames

from kltool.format.speedups import crc32c  # noqa: E402

SRC_ROOTS = [Path("/work/shared/corpus/real"), Path("/work/shared/corpus/java-oracle"), WT / "fixtures"]
ORACLE_DIR = Path("/work/shared/oracle")
TIMEOUT = 20.0
MAX_RSS_KB = 600 * 1024
LOG_KINDS = {"torn_tail", "zero_run", "invalid_size", "bad_magic", "garbage", "crc_mismatch", "record_corrupt",
             "record_too_large", "invalid_control"}  # (byte damage: always with a position)


# ---------------------------------------------------------------- running kltool

class Result:
    __slots__ = ("args", "code", "out", "err", "secs", "rss_kb")

    def __init__(self, args, code, out, err, secs, rss_kb):
        self.args, self.code, self.out, self.err, self.secs, self.rss_kb = args, code, out, err, secs, rss_kb


def run(args, timeout=TIMEOUT) -> Result:
    t0 = time.monotonic()
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    import tempfile

    fd, rss_file = tempfile.mkstemp(prefix="rc-rss-")
    os.close(fd)
    # (GNU time reports the command's own peak RSS; the rusage of a forked child counts this process's image)
    p = subprocess.Popen(["/usr/bin/time", "-q", "-f", "%M", "-o", rss_file, K, *map(str, args)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    killed = []

    def kill():
        killed.append(1)
        try:
            os.killpg(p.pid, 9)  # (time and the kltool it runs: the group this run started)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    out_chunks, err_chunks = [], []

    def drain(stream, sink, cap=64 << 20):
        n = 0
        for chunk in iter(lambda: stream.read(1 << 16), b""):
            if n < cap:
                sink.append(chunk)
            n += len(chunk)

    te = threading.Thread(target=drain, args=(p.stderr, err_chunks))
    te.start()
    drain(p.stdout, out_chunks)
    te.join()
    p.wait()
    timer.cancel()
    try:
        rss = int(Path(rss_file).read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        rss = 0
    os.unlink(rss_file)
    code = "timeout" if killed else p.returncode
    return Result(args, code, b"".join(out_chunks).decode("utf-8", "replace"),
                  b"".join(err_chunks).decode("utf-8", "replace"), time.monotonic() - t0, rss)


def check(res: Result, json_mode: bool) -> list[tuple[str, str]]:
    out = []
    cmd = " ".join(map(str, res.args))
    if res.code == "timeout":
        out.append(("timeout", cmd))
        return out
    if res.code == 70:
        out.append(("exit70", f"{cmd}: {res.err.strip()[-400:]}"))
    if "Traceback" in res.err:
        out.append(("traceback", f"{cmd}: {res.err.strip()[-600:]}"))
    if res.rss_kb > MAX_RSS_KB:
        out.append(("memory", f"{cmd}: {res.rss_kb // 1024} MB"))
    if res.code == 2:
        lines = [ln for ln in res.err.splitlines() if ln.strip()]
        data_words = ("corrupt", "invalid", "truncat", "bad ", "malformed", "overrun", "unexpected", "damage",
                      "decode", "varint", "length", "too large", "short", "garbage")
        if (lines and any(w in lines[-1].lower() for w in data_words)
                and not any(w in lines[-1] for w in ("position", "byte", "offset", "line "))):
            out.append(("noposition", f"{cmd}: {lines[-1][:300]}"))
    if json_mode:
        for ln in res.out.splitlines():
            try:
                o = json.loads(ln)
            except ValueError:
                out.append(("badjson", f"{cmd}: {ln[:200]}"))
                break
            if not isinstance(o, dict) or "type" not in o:
                out.append(("badjson", f"{cmd}: {ln[:200]}"))
                break
            if o["type"] == "finding" and o.get("kind") in LOG_KINDS and o.get("severity") == "error":
                if not o.get("file") or o.get("position") is None:
                    out.append(("noposition", f"{cmd}: {ln[:300]}"))
                    break
    return out


def jlines(res: Result) -> list[dict]:
    out = []
    for ln in res.out.splitlines():
        try:
            out.append(json.loads(ln))
        except ValueError:
            pass
    return out


# ---------------------------------------------------------------- crafting bytes

def v2_batch(base_offset, records: bytes, count, *, lod=None, attrs=0, pid=-1, epoch=-1, seq=-1, ts=1_700_000_000_000,
             max_ts=None, ple=0, magic=2) -> bytes:
    lod = count - 1 if lod is None else lod
    body = struct.pack(">hiqqqhii", attrs, lod, ts, ts if max_ts is None else max_ts, pid, epoch, seq, count) + records
    crc = crc32c(body)
    head = struct.pack(">qiib", base_offset, 4 + 1 + 4 + len(body), ple, magic) + struct.pack(">I", crc)
    return head + body


def zz(n: int) -> bytes:
    """A zigzag varint (may be any size: overflow tests give large n)."""
    u = (n << 1) ^ (n >> 63) if -(1 << 63) <= n < (1 << 63) else n << 1
    u &= (1 << 70) - 1
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def v2_record(od, key: bytes | None, value: bytes | None, headers=(), td=0, *, klen=None, vlen=None, hcount=None,
              length=None, attrs=0) -> bytes:
    body = bytes([attrs]) + zz(td) + zz(od)
    body += zz(-1 if key is None else len(key)) if klen is None else zz(klen)
    body += key or b""
    body += zz(-1 if value is None else len(value)) if vlen is None else zz(vlen)
    body += value or b""
    body += zz(len(headers) if hcount is None else hcount)
    for hk, hv in headers:
        body += zz(len(hk)) + hk + zz(-1 if hv is None else len(hv)) + (hv or b"")
    return zz(len(body) if length is None else length) + body


def legacy_msg(offset, magic, attrs, key, value, ts=1_700_000_000_000) -> bytes:
    body = bytes([magic, attrs]) + (struct.pack(">q", ts) if magic == 1 else b"")
    body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
    body += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def fix_crc(b: bytearray, pos: int) -> None:
    """Make the CRC of the batch at pos right again (v2: CRC-32C of attributes.., v0/v1: CRC-32)."""
    size = struct.unpack_from(">i", b, pos + 8)[0]
    end = pos + 12 + size
    if size < 14 or end > len(b):
        return
    if b[pos + 16] == 2 and size >= 49:
        struct.pack_into(">I", b, pos + 17, crc32c(bytes(b[pos + 21:end])))
    elif b[pos + 16] in (0, 1):
        struct.pack_into(">I", b, pos + 12, zlib.crc32(bytes(b[pos + 16:end])) & 0xFFFFFFFF)


def next_offset(b) -> int:
    nxt = 0
    for pos, _end in batch_positions(b):
        if b[pos + 16] == 2:
            base, lod = struct.unpack_from(">q", b, pos)[0], struct.unpack_from(">i", b, pos + 23)[0]
            nxt = max(nxt, base + lod + 1)
        else:
            nxt = max(nxt, struct.unpack_from(">q", b, pos)[0] + 1)
    return nxt


_BOMB: dict[str, bytes] = {}


def bomb(codec: str) -> bytes:
    """~1 GiB of zeros, compressed (built once per process, streamed: never held whole)."""
    if codec in _BOMB:
        return _BOMB[codec]
    chunk = bytes(1 << 20)
    if codec == "gzip":
        co = zlib.compressobj(9, zlib.DEFLATED, 31)
        parts = [co.compress(chunk) for _ in range(1024)]
        parts.append(co.flush())
        data = b"".join(parts)
    elif codec == "zstd":
        import zstandard

        cobj = zstandard.ZstdCompressor(level=3).compressobj()
        parts = [cobj.compress(chunk) for _ in range(1024)]
        parts.append(cobj.flush())
        data = b"".join(parts)
    else:  # lz4 frame
        import lz4.frame

        c = lz4.frame.LZ4FrameCompressor()
        parts = [c.begin()] + [c.compress(chunk) for _ in range(256)] + [c.flush()]
        data = b"".join(parts)
    _BOMB[codec] = data
    return data


CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# v2 header field boundaries (from the batch start)
V2_FIELDS = [0, 8, 12, 16, 17, 21, 23, 27, 35, 43, 51, 53, 57, 61]
V0_FIELDS = [0, 8, 12, 16, 17, 18, 22, 26]
V1_FIELDS = [0, 8, 12, 16, 17, 18, 26, 30, 34]


def crafted_records(rng, nxt: int) -> tuple[str, bytes]:
    """A v2 batch (CRC right) whose records lie, at offset ``nxt``."""
    good = v2_record(0, b"k0", b"v0")
    kinds = {
        "varint_overflow_length": lambda: b"\xff" * 11 + b"\x01",
        "varint_overflow_key": lambda: zz(20) + b"\x00\x00\x00" + b"\xff" * 10 + b"\x01" + b"x" * 5,
        "key_overrun": lambda: v2_record(0, b"k", b"v", klen=1 << 20),
        "value_overrun": lambda: v2_record(0, b"k", b"v", vlen=1 << 20),
        "key_negative": lambda: v2_record(0, b"k", b"v", klen=-7),
        "value_negative": lambda: v2_record(0, b"k", b"v", vlen=-2),
        "headers_count_lying": lambda: v2_record(0, b"k", b"v", [(b"h", b"x")], hcount=1000),
        "headers_count_huge": lambda: v2_record(0, b"k", b"v", [], hcount=(1 << 31) - 1),
        "headers_count_negative": lambda: v2_record(0, b"k", b"v", [], hcount=-5),
        "header_key_negative": lambda: v2_record(0, b"k", b"v", [], hcount=1)[:-0 or None] + zz(-3) + zz(1) + b"x",
        "record_length_short": lambda: v2_record(0, b"key", b"value", length=3),
        "record_length_long": lambda: v2_record(0, b"key", b"value", length=500),
        "record_length_negative": lambda: v2_record(0, b"key", b"value", length=-1),
        "offset_delta_backwards": lambda: good + v2_record(0, b"k1", b"v1"),
        "offset_delta_past_lod": lambda: v2_record(50, b"k", b"v"),
        "offset_delta_negative": lambda: v2_record(-3, b"k", b"v"),
        "timestamp_delta_huge": lambda: v2_record(0, b"k", b"v", td=(1 << 62)),
        "trailing_bytes": lambda: good + b"\x00\x01\x02",
        "header_key_not_utf8": lambda: v2_record(0, b"k", b"v", [(b"\xff\xfe", b"x")]),
        "record_attrs_set": lambda: v2_record(0, b"k", b"v", attrs=0x7F),
    }
    name = rng.choice(sorted(kinds))
    recs = kinds[name]()
    count = 2 if name == "offset_delta_backwards" else 1
    lod = {"offset_delta_backwards": 1, "offset_delta_past_lod": 0}.get(name, count - 1)
    if name == "record_length_negative" or rng.random() < 0.3:
        count_field = rng.choice([count, count + 5, -1, 1 << 30]) if rng.random() < 0.5 else count
    else:
        count_field = count
    return name, v2_batch(nxt, recs, count_field, lod=lod)


def compressed_junk(rng, nxt: int) -> tuple[str, bytes]:
    codec = rng.choice(sorted(CODECS))
    from kltool.format.compression import compress

    choice = rng.choice(["garbage", "truncated", "garbage_records", "bomb", "empty"])
    if choice == "garbage":
        payload = rng.randbytes(rng.randint(1, 300))
    elif choice == "empty":
        payload = b""
    elif choice == "truncated":
        payload = compress(CODECS[codec], v2_record(0, b"k", b"v" * 200) * 3)
        payload = payload[: rng.randint(1, max(1, len(payload) - 1))]
    elif choice == "garbage_records":
        payload = compress(CODECS[codec], rng.randbytes(rng.randint(1, 400)))
    else:
        codec = rng.choice(["gzip", "zstd", "lz4"])
        payload = bomb(codec)
    count = rng.choice([1, 3, 1000, 1 << 20])
    return f"compressed_{choice}_{codec}", v2_batch(nxt, payload, count, attrs=CODECS[codec])


def nested_legacy(rng, nxt: int) -> tuple[str, bytes]:
    magic = rng.choice([0, 1])
    from kltool.format.compression import compress

    codec = rng.choice(["gzip", "snappy", "lz4"])
    shape = rng.choice(["bad_inner_offsets", "nested_wrapper", "inner_garbage", "inner_torn", "inner_magic_mismatch"])
    inner_offsets = [0, 1, 2]
    if shape == "bad_inner_offsets":
        inner_offsets = rng.choice([[5, 2, 9], [-4, 0, 1], [0, 0, 0], [1 << 40, 1, 2], [0, 1, 1 << 62]])
    inner = b"".join(legacy_msg(o, magic, 0, b"k%d" % i, b"v%d" % i) for i, o in enumerate(inner_offsets))
    if shape == "nested_wrapper":
        inner = legacy_msg(0, magic, CODECS[codec], None, compress(CODECS[codec], inner, magic=magic)) + inner
    elif shape == "inner_garbage":
        inner = inner + rng.randbytes(rng.randint(1, 40))
    elif shape == "inner_torn":
        inner = inner[: rng.randint(1, len(inner) - 1)]
    elif shape == "inner_magic_mismatch":
        inner = legacy_msg(0, 1 - magic, 0, b"k", b"v") + inner
    wrapper = legacy_msg(nxt + 2, magic, CODECS[codec], None, compress(CODECS[codec], inner, magic=magic))
    return f"legacy_{shape}_v{magic}_{codec}", wrapper


def control_batch(rng, nxt: int) -> tuple[str, bytes]:
    kind = rng.choice(["bad_type", "short_key", "bad_key_version", "unknown_producer", "bad_value", "null_key",
                       "two_records", "no_records", "leader_change_junk"])
    ctype = {"bad_type": rng.choice([7, 99, -1, 32767]), "leader_change_junk": 2}.get(kind, rng.choice([0, 1]))
    key = struct.pack(">hh", 1 if kind == "bad_key_version" else 0, ctype)
    value = struct.pack(">hi", 0, 7)
    if kind == "short_key":
        key = b"\x00"
    elif kind == "bad_value":
        value = b"\x00"
    elif kind == "null_key":
        key = None
    elif kind == "leader_change_junk":
        value = rng.randbytes(9)
    recs = v2_record(0, key, value)
    count = 1
    if kind == "two_records":
        recs += v2_record(1, key, value)
        count = 2
    elif kind == "no_records":
        recs, count = b"", 0
    attrs = 0x30 if kind != "leader_change_junk" else 0x20  # control (+ transactional)
    pid = rng.choice([424242, 7, -1]) if kind == "unknown_producer" else 424242
    return f"control_{kind}", v2_batch(nxt, recs, count, attrs=attrs, pid=pid, epoch=0, lod=max(count - 1, 0))


def mutate(rng, data: bytes) -> tuple[str, bytes]:  # noqa: C901 - one choice per mutation
    b = bytearray(data)
    pos_list = batch_positions(b)
    op = rng.choice(["trunc_field", "flip_header", "flip_record", "flip_fixcrc", "flip_fixcrc", "size_field",
                     "count_fixcrc", "crafted", "crafted", "compressed", "legacy", "control", "zero_tail",
                     "offset_field", "garbage_tail", "dup_batch", "swap_batches"])
    if not pos_list and op not in ("crafted", "compressed", "legacy", "control", "zero_tail", "garbage_tail"):
        op = "crafted"
    nxt = next_offset(b)
    if pos_list:
        pos, end = rng.choice(pos_list)
        magic = b[pos + 16]
    else:
        pos, end, magic = 0, 0, 2
    if op == "trunc_field":
        fields = V2_FIELDS if magic == 2 else V1_FIELDS if magic == 1 else V0_FIELDS
        k = rng.choice(fields + [rng.randint(0, end - pos - 1)])
        return f"trunc_field_{k}", bytes(b[: pos + k])
    if op == "flip_header":
        k = rng.randrange(0, 61 if magic == 2 else 22)
        k = min(k, end - pos - 1)
        b[pos + k] ^= 1 << rng.randrange(8)
        return f"flip_header_{k}", bytes(b)
    if op in ("flip_record", "flip_fixcrc"):
        lo = pos + (61 if magic == 2 else 22 if magic == 1 else 14)
        if lo >= end:
            lo = pos + 17
        k = rng.randrange(lo, end)
        b[k] ^= 1 << rng.randrange(8)
        if op == "flip_fixcrc":
            fix_crc(b, pos)
        return f"{op}_m{magic}", bytes(b)
    if op == "size_field":
        v = rng.choice([0x7FFFFFFF, -1, -(1 << 31), 0, 13, 48, 1 << 30, end - pos - 12 + 1, end - pos - 12 - 1])
        struct.pack_into(">i", b, pos + 8, v)
        return f"size_field_{v}", bytes(b)
    if op == "count_fixcrc" and magic == 2:
        field, fmt = rng.choice([(57, ">i"), (23, ">i"), (53, ">i")])
        struct.pack_into(fmt, b, pos + field, rng.choice([-1, -(1 << 31), (1 << 31) - 1, 0, 1 << 20]))
        fix_crc(b, pos)
        return f"count_fixcrc_{field}", bytes(b)
    if op == "offset_field":
        struct.pack_into(">q", b, pos, rng.choice([-1, 1 << 62, (1 << 63) - 1, 0, nxt + 1000]))
        return "offset_field", bytes(b)
    if op == "zero_tail":
        return "zero_tail", bytes(b) + bytes(rng.choice([1, 11, 12, 17, 61, 4096, 1 << 20]))
    if op == "garbage_tail":
        return "garbage_tail", bytes(b) + rng.randbytes(rng.randint(1, 200))
    if op == "dup_batch" and pos_list:
        return "dup_batch", bytes(b[:end]) + bytes(b[pos:end]) + bytes(b[end:])
    if op == "swap_batches" and len(pos_list) >= 2:
        (p1, e1), (p2, e2) = pos_list[0], pos_list[-1]
        return "swap_batches", bytes(b[p2:e2]) + bytes(b[e1:p2]) + bytes(b[p1:e1]) + bytes(b[e2:])
    maker = {"crafted": crafted_records, "compressed": compressed_junk, "legacy": nested_legacy,
             "control": control_batch}.get(op, crafted_records)
    name, extra = maker(rng, nxt)
    return name, bytes(b) + extra


# ---------------------------------------------------------------- the oracle

def oracle_launcher() -> str | None:
    try:
        r = subprocess.run(["bash", str(ORACLE_DIR / "setup.sh")], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    return path if r.returncode == 0 and os.path.exists(path) else None


def oracle_read(launcher: str, files: list[Path]) -> list[list[dict]]:
    """Kafka's read-out of each file: its batch and record lines and its summary (one list per file)."""
    out: list[list[dict]] = []
    for i in range(0, len(files), 150):
        group = files[i:i + 150]
        r = subprocess.run([launcher, "read", "--records", *map(str, group)], capture_output=True, text=True,
                           timeout=600)
        cur: list[dict] = []
        for ln in r.stdout.splitlines():
            try:
                o = json.loads(ln)
            except ValueError:
                continue
            cur.append(o)
            if o.get("type") == "summary":
                out.append(cur)
                cur = []
        while len(out) < i + len(group):
            out.append([{"type": "summary", "error": "oracle gave nothing", "oracle_failed": True}])
    return out


def b64(v):
    if v is None:
        return None
    if isinstance(v, dict):
        return v.get("base64")
    return base64.b64encode(v.encode("utf-8")).decode()


def hkey(k):
    """A header key as Kafka's reader gives it (UTF-8, bad bytes replaced)."""
    if isinstance(k, dict):
        return base64.b64decode(k["base64"]).decode("utf-8", "replace")
    return k


def compare(expected: list[dict], got: list[dict], label: str) -> list[tuple[str, str]]:  # noqa: C901
    """Kafka's read-out of ONE file (``expected``) against kltool's --json dump --records --encoding base64
    of that file (``got``)."""
    out = []
    summary = expected[-1] if expected and expected[-1].get("type") == "summary" else {}
    if summary.get("oracle_failed"):
        return out
    valid_bytes = summary.get("validBytes")
    file_size = summary.get("fileSize")
    kb = {g["position"]: g for g in got if g.get("type") == "batch"}
    findings = [g for g in got if g.get("type") == "finding" and g.get("severity") == "error"]
    recs_by_batch: dict[int, list[dict]] = {}
    cur = None
    for g in got:
        if g.get("type") == "batch":
            cur = g["position"]
            recs_by_batch[cur] = []
        elif g.get("type") == "record" and cur is not None:
            recs_by_batch[cur].append(g)
    # Kafka's batches, with their records
    kbatches = []
    for e in expected:
        if e.get("type") == "batch":
            kbatches.append([e, []])
        elif e.get("type") == "record" and kbatches:
            kbatches[-1][1].append(e)
    for e, erecs in kbatches:
        p = e["position"]
        if valid_bytes is not None and p >= valid_bytes:
            break  # past Kafka's recovery point: kltool may read on (resync), Kafka's view ends
        if not e.get("isValid") or e.get("headerError"):
            continue
        g = kb.get(p)
        if g is None:
            out.append(("oracle", f"{label}: Kafka reads a valid batch at {p} ({e['baseOffset']}..{e['lastOffset']}),"
                                  f" kltool has none"))
            continue
        diffs = [n for n, a, b_ in (("size", g["size"], e["sizeInBytes"]), ("base_offset", g["base_offset"], e["baseOffset"]),
                                    ("last_offset", g["last_offset"], e["lastOffset"]),
                                    ("count", g["count"], e["countOrNull"]), ("crc_valid", g["crc_valid"], e["isValid"]),
                                    ("max_timestamp", g["max_timestamp"], e["maxTimestamp"]),
                                    ("producer_id", g["producer_id"], e["producerId"]),
                                    ("is_control", g["is_control"], e["isControl"]),
                                    ("compression", g["compression"], e["compression"])) if a != b_]
        if diffs:
            out.append(("oracle", f"{label}: batch at {p}: {diffs} differ: kltool "
                                  f"{[g.get(d) for d in diffs]}"))
            continue
        grecs = recs_by_batch.get(p, [])
        rec_err = e.get("recordsError")
        if rec_err or e.get("count") is None:
            if not any(f.get("position") is not None and p <= f["position"] < p + e["sizeInBytes"] for f in findings):
                out.append(("oracle", f"{label}: Kafka cannot read the records of the batch at {p} ({rec_err}); "
                                      f"kltool reports no error there"))
            continue
        # (kltool may name damage Kafka's iterator passes over in silence, e.g. a partial inner message after a
        # v0/v1 wrapper's last whole one, as long as it reads every record Kafka reads)
        if len(grecs) != len(erecs):
            out.append(("oracle", f"{label}: batch at {p}: Kafka {len(erecs)} records, kltool {len(grecs)}"))
            continue
        for gr, er in zip(grecs, erecs, strict=True):
            ours = (gr["offset"], gr["timestamp"], b64(gr["key"]), b64(gr["value"]),
                    [(hkey(h["key"]), b64(h["value"])) for h in gr["headers"]])
            theirs = (er["offset"], er["timestamp"], er["key"], er["value"],
                      [(h["key"], h["value"]) for h in er["headers"]])
            if ours != theirs:
                out.append(("oracle", f"{label}: record at offset {er['offset']} of batch {p} differs: kltool "
                                      f"{str(ours)[:200]} Kafka {str(theirs)[:200]}"))
                break
    if valid_bytes is not None and file_size is not None and valid_bytes < file_size:
        problems = sorted([f["position"] for f in findings if f.get("position") is not None]
                          + [g["position"] for g in got if g.get("type") == "batch" and not g["crc_valid"]])
        # (a record's damage is reported at the record's position, inside the batch Kafka stops at)
        stop_batch = next((e for e in expected if e.get("type") == "batch" and e["position"] == valid_bytes), None)
        stop_end = valid_bytes + (stop_batch["sizeInBytes"] if stop_batch else 1)
        if not problems or not valid_bytes <= problems[0] < max(stop_end, valid_bytes + 1):
            out.append(("oracle", f"{label}: Kafka's reading stops at byte {valid_bytes} of {file_size} "
                                  f"({summary.get('error') or 'invalid batch'}); kltool's first reported problem: "
                                  f"{problems[:1] or 'none'}"))
    elif valid_bytes is not None and valid_bytes == file_size:
        bad = [f for f in findings if f.get("kind") in ("torn_tail", "zero_run", "invalid_size", "bad_magic",
                                                        "garbage", "crc_mismatch")]
        if bad:
            out.append(("oracle", f"{label}: Kafka reads the whole file; kltool reports {bad[0]['kind']} at "
                                  f"{bad[0].get('position')}"))
    return out


# ---------------------------------------------------------------- sources and commands

def catalogue():
    parts = []
    for root in SRC_ROOTS:
        for log in sorted(root.rglob("*.log")):
            if not (log.name[:20].isdigit() and log.name[20:] == ".log"):
                continue
            d = log.parent
            if d not in parts:
                parts.append(d)
    return parts


def read_commands(root: Path, part: Path, log: Path | None, other: Path | None, topic: str):
    """(args, json_mode) of the read commands over a log dir ``root`` holding partition ``part``."""
    cmds = [
        (["dump", part], False),
        (["--json", "dump", part], True),
        (["--json", "dump", "--records", "--encoding", "base64", part], True),
        (["dump", "--records", part], False),
        (["--json", "info", root], True),
        (["info", root], False),
        (["--json", "offsets", root, "--time", "earliest"], True),
        (["--json", "offsets", root, "--time", "1700000005000"], True),
        (["offsets", root, "--time", "latest"], False),
        (["--json", "offsets", root, "--count"], True),
        (["--json", "verify", root], True),
        (["verify", "--deep", part], False),
        (["--json", "transactions", root], True),
        (["producers", root], False),
        (["--json", "producers", root], True),
        (["--json", "compact", "--dry-run", root], True),
        (["--json", "dump", "--records", "--isolation-level", "read_committed", part], True),
    ]
    if log is not None:
        cmds += [
            (["--json", "dump", "--records", "--decoder", "auto", log], True),
            (["dump", "--records", "--decoder", random.choice(["consumer-offsets", "transaction-state",
                                                                 "cluster-metadata", "remote-log-metadata"]), log], False),
            (["--json", "dump", "--records", "--decoder", random.choice(["consumer-offsets", "transaction-state",
                                                                         "cluster-metadata", "remote-log-metadata"]), log],
             True),
            (["dump", "--print-data-log", "--files", str(log)], False),
            (["--json", "dump", "--records", "--from-offset", "3", "--to-offset", "7", log], True),
        ]
    if other is not None:
        cmds.append((["--json", "diff", other, part], True))
        cmds.append((["diff", other, part], False))
    for f in sorted(part.iterdir()) if part.is_dir() else []:
        if f.suffix in (".index", ".timeindex", ".txnindex", ".snapshot") or f.name.endswith("checkpoint"):
            cmds.append((["--json", "dump", f], True))
            cmds.append((["dump", f], False))
    return cmds


ODD_TOPICS = ["topic", "__consumer_offsets", "__transaction_state", "__cluster_metadata", "__remote_log_metadata",
              "we.ird_topic", "t%20x", "tøpic", "a-b-c", "x" * 200, os.fsdecode(b"t\xff\xfe"), "new\nline"]
ODD_FILE_NAMES = ["123.log", "abc.log", "00000000000000000000.log.deleted", "00000000000000000000.log.swap",
                  "000000000000000000001.log", "-0000000000000000001.log", "00000000000000000000.LOG",
                  "99999999999999999999.log"]


def prepare(rng, src_part: Path, work: Path, k: int):
    """One mutated copy of a partition dir under a fresh log dir. Returns (root, part, log, orig_part, label,
    mutated log file or None)."""
    logs = sorted(p for p in src_part.glob("*.log") if p.is_file() and p.stat().st_size <= (4 << 20))
    topic = rng.choice(ODD_TOPICS) if rng.random() < 0.4 else src_part.name.rpartition("-")[0] or "topic"
    root = work / f"run{k}"
    part = root / f"{topic}-{rng.randrange(0, 3)}"
    part.mkdir(parents=True)
    for f in src_part.iterdir():
        if f.is_file() and f.stat().st_size <= (4 << 20) and not f.name.endswith(".jsonl"):
            shutil.copyfile(f, part / f.name)
    orig = root.with_name(f"run{k}-orig") / part.name
    shutil.copytree(part, orig)
    label = f"run{k} {src_part}"
    aux = [f for f in part.iterdir() if not f.name.endswith(".log")]
    if aux and rng.random() < 0.2:  # an index, snapshot or checkpoint file damaged too
        f = rng.choice(aux)
        b = bytearray(f.read_bytes())
        how = rng.choice(["trunc", "flip", "garbage", "neg", "empty"])
        if how == "trunc" and b:
            b = b[:rng.randrange(len(b))]
        elif how == "flip" and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif how == "garbage":
            b += rng.randbytes(rng.randint(1, 64))
        elif how == "neg" and len(b) >= 4:
            struct.pack_into(">i", b, rng.randrange(0, len(b) - 3), rng.choice([-1, -(1 << 31), (1 << 31) - 1]))
        else:
            b = bytearray()
        f.write_bytes(bytes(b))
        label += f" aux:{how}:{f.name}"
    if rng.random() < 0.06:
        name = rng.choice(ODD_FILE_NAMES)
        src = logs[0] if logs else None
        if src is not None:
            shutil.copyfile(src, part / name)
        return root, part, None, orig, label + f" oddname:{name}", None
    if rng.random() < 0.05 or not logs:
        target = part / (logs[-1].name if logs else "00000000000000000000.log")
        kind = rng.choice(["empty", "zeros", "sparse"])
        if kind == "empty":
            target.write_bytes(b"")
        elif kind == "zeros":
            target.write_bytes(bytes(rng.choice([1, 12, 4096, 1 << 20])))
        else:
            with open(target, "ab") as f:
                f.truncate(target.stat().st_size + (64 << 20))
        return root, part, target, orig, label + f" {kind}", target
    target = part / rng.choice(logs).name
    name, data = mutate(rng, target.read_bytes())
    if rng.random() < 0.05:
        with open(target, "wb") as f:  # a preallocated (sparse) tail after the damage
            f.write(data)
            f.truncate(len(data) + (8 << 20))
    else:
        target.write_bytes(data)
    return root, part, target, orig, f"{label} {name} ({target.name})", target


def main() -> int:  # noqa: C901
    argv = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    seed = int(argv[0]) if argv else 1
    runs = int(argv[1]) if len(argv) > 1 else 50
    work = Path(argv[2]) if len(argv) > 2 else Path(f"/tmp/read_campaign_{seed}")
    jobs = 2
    for f in flags:
        if f.startswith("--jobs="):
            jobs = int(f.split("=", 1)[1])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rng = random.Random(seed)
    random.seed(seed)
    launcher = None if "--no-oracle" in flags else oracle_launcher()
    findings: list[tuple[str, str]] = []
    by_kind: Counter = Counter()
    n_cmds = 0
    t0 = time.monotonic()

    def note(fs, tag=""):
        for kind, msg in fs:
            findings.append((kind, f"{tag}{msg}"))
            by_kind[kind] += 1
            print(f"FINDING {kind}: {tag}{msg}", flush=True)

    sources = catalogue()
    pool = ThreadPoolExecutor(jobs)

    # 1. intact inputs against Kafka's read-out
    if "--no-intact" not in flags:
        oracle_cases = sorted(p for p in Path("/work/shared/corpus/java-oracle").iterdir() if (p / "expected.jsonl").exists())
        intact_logs: list[Path] = []
        for case in oracle_cases:
            expected = [json.loads(x) for x in (case / "expected.jsonl").read_text().splitlines()]
            per_file: list[list[dict]] = []
            cur: list[dict] = []
            for e in expected:
                cur.append(e)
                if e["type"] == "summary":
                    per_file.append(cur)
                    cur = []
            logs = sorted(case.glob("*.log"))
            for log, exp in zip(logs, per_file, strict=False):
                r = run(["--json", "dump", "--records", "--encoding", "base64", log])
                n_cmds += 1
                note(check(r, True))
                note(compare(exp, jlines(r), f"intact {log}"))
        if launcher:
            for d in sources:
                if "java-oracle" in str(d):
                    continue
                intact_logs += [p for p in sorted(d.glob("*.log")) if p.stat().st_size <= (16 << 20)]
            reads = oracle_read(launcher, intact_logs)

            def one(args):
                log, exp = args
                r = run(["--json", "dump", "--records", "--encoding", "base64", log])
                return check(r, True) + compare(exp, jlines(r), f"intact {log}")

            for fs in pool.map(one, zip(intact_logs, reads, strict=True)):
                n_cmds += 1
                note(fs)
        # every read command over each source log dir / partition
        def cmds_of(d):
            root = d.parent
            logs = sorted(d.glob("*.log"))
            return [(a, j) for a, j in read_commands(root, d, logs[0] if logs else None, None, d.name)
                    if a[:2] != ["--json", "compact"] or d.stat().st_size < (1 << 20)]

        intact_cmds = [c for d in sources[:: max(1, len(sources) // 60)] for c in cmds_of(d)]
        for fs in pool.map(lambda c: check(run(c[0]), c[1]), intact_cmds):
            n_cmds += 1
            note(fs, "intact ")
        print(f"intact: {n_cmds} commands, {len(findings)} findings, {time.monotonic() - t0:.0f}s", flush=True)

    # 2. mutations
    candidates = [d for d in sources if any(p.stat().st_size for p in d.glob("*.log"))
                  and sum(p.stat().st_size for p in d.glob("*.log")) <= (4 << 20)]
    mutated: list[tuple[Path, str, list[dict]]] = []
    mutation_kinds: Counter = Counter()
    for k in range(runs):
        src = rng.choice(candidates)
        root, part, log, orig, label, target = prepare(rng, src, work, k)
        mutation_kinds[label.split(" ")[2] if len(label.split(" ")) > 2 else "?"] += 1
        cmds = read_commands(root, part, log, orig, part.name)
        results = list(pool.map(lambda c: (c, run(c[0])), cmds))
        for (args, js), r in results:
            n_cmds += 1
            note(check(r, js), f"[{label}] ")
            if target is not None and args[:5] == ["--json", "dump", "--records", "--encoding", "base64"]:
                pass
        if target is not None and target.stat().st_size <= (16 << 20):
            r = run(["--json", "dump", "--records", "--encoding", "base64", target])
            n_cmds += 1
            note(check(r, True), f"[{label}] ")
            mutated.append((target, label, jlines(r)))
    if launcher and mutated:
        reads = oracle_read(launcher, [m[0] for m in mutated])
        for (_target, label, got), exp in zip(mutated, reads, strict=True):
            note(compare(exp, got, f"[{label}]"))
    pool.shutdown()

    secs = time.monotonic() - t0
    print(json.dumps({"seed": seed, "runs": runs, "commands": n_cmds, "findings": len(findings),
                      "by_kind": dict(by_kind), "oracle": bool(launcher), "seconds": round(secs, 1),
                      "mutations": dict(mutation_kinds.most_common())}))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
