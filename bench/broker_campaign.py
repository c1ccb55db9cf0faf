#!/usr/bin/env python3
"""Broker-judge campaign: seeded log dirs that kltool WROTE and CHANGED, judged by a real Kafka 4.x broker.

usage: bench/broker_campaign.py SEED RUNS [--workdir DIR] [--topics N] [--json FILE] [--keep]

Per run (its own random.Random(f"{SEED}:{run}")):

1. a fresh KRaft broker (tests/broker/harness.py) makes N topics of 1-3 partitions through its admin API (a
   partition directory `kltool create` makes in a KRaft log dir is a stray to the broker: pinned by
   test_broker_serves), and is stopped cleanly; then `kltool create --if-not-exists --config ...` stores
   kltool's settings for each (small segment.bytes so segments roll, index.interval.bytes, cleanup.policy);
2. `kltool append` writes drawn records: every codec, magic 2 and 0/1 (legacy topics), keys and values
   null / empty / small / large, headers (v2), CreateTime and LogAppendTime, batch sizes, idempotent and
   transactional producers (commit and abort), keyed and explicit partitions;
3. a drawn sequence of kltool changes: retention (start offset, size, time), compact, damage + `verify
   --repair` (also --like-broker), deleted or corrupt indexes + `rebuild-index --force`, more appends;
4. kltool's view is taken (`dump --records --json` read_uncommitted and read_committed, `offsets`), and
   Kafka's DumpLogSegments --deep-iteration is compared with `kltool dump --files ... --deep-iteration`
   on every segment, line for line;
5. the broker starts ONCE on the whole log dir (clean-shutdown marker present), then again with recovery
   forced (no marker, recovery point 0 for every partition). Each start must log no truncation, corruption
   or index rebuild for these partitions, serve exactly kltool's records (kafka-python, read_uncommitted
   and read_committed), and answer ListOffsets earliest/latest as `kltool offsets`.

Every disagreement is a finding (printed, counted by kind; exit 1 when there is any).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.broker import harness  # noqa: E402
from tests.conftest import run_kltool  # noqa: E402

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
LEGACY_CODECS = ["none", "gzip", "snappy", "lz4"]  # zstd needs magic 2
try:
    import xxhash  # noqa: F401  (kafka-python reads v0/v1 lz4, Kafka 0.8-0.9's framing, only with it)
except ImportError:
    LEGACY_CODECS.remove("lz4")
KINDS = ["plain", "plain", "txn", "legacy", "compact", "big"]
PID_BASE = 10**12  # far above the producer ids a young KRaft controller hands out
# what a broker start must not log about a partition kltool wrote
# (a forced recovery logs "Recovering unflushed segment N" for each: that is the recovery asked for)
BAD_WORDS = ("Corruption found", "runcat", "orrupt", "Found invalid", "Deleting segments as part of log recovery",
             "Deleting all segments", "rebuilding index", "Rebuilding index", "stray", "Error", "ERROR", "WARN")


class Finding(Exception):
    pass


def kl(*args, ok=(0,)):
    res = run_kltool(*[str(a) for a in args])
    if res.code not in ok:
        raise Finding(f"kltool {' '.join(map(str, args))} exited {res.code}: {res.err.strip()[-800:]}")
    return res


def _b64(b):
    return None if b is None else {"base64": base64.b64encode(b).decode()}


# -- drawing ----------------------------------------------------------------------------------------------

def _bytes(rng, big, cap):
    """None, empty, text, or random bytes (large ones up to CAP: a batch must fit in a segment, or kltool
    refuses it as the broker does, RecordBatchTooLargeException)."""
    r = rng.random()
    if r < 0.12:
        return None
    if r < 0.22:
        return b""
    if r < 0.3 or big:
        return rng.randbytes(rng.randrange(cap // 4, cap + 1))
    return (f"v{rng.randrange(10**6)}-" * rng.randrange(1, 12)).encode()


def draw_topic(rng: random.Random, i: int) -> dict:
    kind = rng.choice(KINDS)
    return {"name": f"c{i:02d}-{kind}", "kind": kind, "partitions": rng.randint(1, 3),
            "segment_bytes": rng.choice([2048, 8192, 32768, 1 << 20]),
            "index_interval": rng.choice([0, 64, 512, 4096]), "pid": PID_BASE + 1000 * i}


def draw_records(rng, topic, n, magic, now):
    keys = [None, "", "k1", "k2", "k3", "x" * min(3000, topic["segment_bytes"] // 8)] if topic["kind"] == "compact" else None
    rows = []
    cap = min(60000, topic["segment_bytes"] // 8)  # key + value + headers of one record
    t0 = now - rng.randrange(0, 3_600_000)
    for j in range(n):
        if keys is not None:
            key = rng.choice(keys)
            key = None if key is None else key.encode()
        else:
            key = _bytes(rng, False, cap)
        value = _bytes(rng, topic["kind"] == "big" and rng.random() < 0.3, cap)
        row = {"key": _b64(key), "value": _b64(value)}
        if rng.random() < 0.8:
            row["timestamp"] = t0 + j * rng.choice([1, 1, 7, -3, 1000])
        if magic == 2 and rng.random() < 0.5:
            row["headers"] = [{"key": rng.choice(["h", "", "\u00fc", "dup"]), "value": _b64(_bytes(rng, False, cap))}
                              for _ in range(rng.randint(0, 3))]
        if key is None or rng.random() < 0.5:
            row["partition"] = rng.randrange(topic["partitions"])
        rows.append(row)
    return rows


def do_append(rng, topic, logdir, tmp, now, log):
    magic = rng.choice([0, 1, 2, 2]) if topic["kind"] == "legacy" else 2
    codec = rng.choice(CODECS if magic == 2 else LEGACY_CODECS)
    n = rng.choice([1, 2, 5, 20, 60, 150])
    rows = draw_records(rng, topic, n, magic, now)
    path = tmp / f"in-{topic['name']}-{rng.randrange(10**9)}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["append", logdir, topic["name"], "--input", path, "--magic", magic, "--compression", codec,
            "--batch-bytes", min(rng.choice([300, 2048, 16384, 1 << 20]), topic["segment_bytes"] // 2)]
    if rng.random() < 0.4:
        args += ["--batch-records", rng.choice([1, 3, 10])]
    if magic >= 1 and rng.random() < 0.15:
        args += ["--timestamp-type", "log-append"]
    if magic == 2 and topic["kind"] in ("txn", "compact") and rng.random() < 0.7:
        args += ["--producer-id", topic["pid"]]
        if rng.random() < 0.7:
            args += ["--transactional", "--end-transaction", rng.choice(["commit", "abort"])]
    elif magic == 2 and rng.random() < 0.2:
        args += ["--producer-id", topic["pid"] + 1]  # idempotent
    log.append(("append", [str(a) for a in args[3:]], n))
    kl(*args)


# -- damage (then verify --repair) -----------------------------------------------------------------------------

def _batches(log):
    return [r for r in kl("--json", "dump", log).json() if r["type"] == "batch"]


def _patch(path, pos, data):
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def damage(rng, pdir) -> str | None:
    logs = sorted(pdir.glob("*.log"))
    logs = [lg for lg in logs if lg.stat().st_size > 0]
    if not logs:
        return None
    log = rng.choice(logs)
    bs = _batches(log)
    if not bs:
        return None
    b = rng.choice(bs)
    kind = rng.choice(["torn_tail", "crc_flip", "zero_hole", "garbage_tail", "missing_index", "corrupt_index"])
    if kind == "torn_tail":
        last = bs[-1]
        os.truncate(log, last["position"] + max(1, last["size"] // 2))
    elif kind == "crc_flip":
        p = b["position"] + b["size"] - 1
        byte = log.read_bytes()[p]
        _patch(log, p, bytes([byte ^ 0x20]))
    elif kind == "zero_hole":
        _patch(log, b["position"], bytes(min(b["size"], 64)))
    elif kind == "garbage_tail":
        with open(log, "ab") as f:
            f.write(rng.randbytes(rng.randrange(1, 200)))
    elif kind == "missing_index":
        log.with_suffix(".index").unlink(missing_ok=True)
        log.with_suffix(".timeindex").unlink(missing_ok=True)
    else:
        ix = log.with_suffix(".index")
        data = bytearray(ix.read_bytes()) if ix.exists() else bytearray()
        if len(data) < 8:
            return None
        i = rng.randrange(len(data) // 8) * 8
        data[i + 4:i + 8] = (int.from_bytes(data[i + 4:i + 8], "big") + 5).to_bytes(4, "big")
        ix.write_bytes(bytes(data))
    return f"{kind}@{log.name}"


def do_change(rng, topic, logdir, tmp, now, log):
    name = topic["name"]
    p = rng.randrange(topic["partitions"])
    pdir = logdir / f"{name}-{p}"
    ops = ["retention_offset", "retention_bytes", "retention_time", "damage_repair", "rebuild_index", "append"]
    if topic["kind"] == "compact":
        ops += ["compact", "compact"]
    op = rng.choice(ops)
    bk = tmp / f"backup-{rng.randrange(10**9)}"
    if op == "append":
        return do_append(rng, topic, logdir, tmp, now, log)
    if op == "retention_offset":
        off = kl("--json", "offsets", pdir).json()[0]
        lo, hi = off["log_start_offset"], off["log_end_offset"]
        target = rng.randint(lo, hi) if rng.random() < 0.9 else -1
        args = ["retention", logdir, "--topic", name, "-p", p, "--before-offset", target, "--backup-dir", bk]
    elif op == "retention_bytes":
        size = sum(f.stat().st_size for f in pdir.glob("*.log"))
        args = ["retention", logdir, "--topic", name, "--retention-bytes", rng.randint(0, max(1, size)),
                "--backup-dir", bk]
    elif op == "retention_time":
        args = ["retention", logdir, "--topic", name, "--retention-ms", rng.randrange(0, 3_600_000),
                "--now", now, "--backup-dir", bk]
    elif op == "compact":
        args = ["compact", logdir, "--topic", name, "--now", now + rng.choice([0, 10**9]), "--backup-dir", bk]
        if rng.random() < 0.3:
            args += ["--config", "delete.retention.ms=0"]
    elif op == "rebuild_index":
        for f in pdir.glob("*.index"):
            if rng.random() < 0.5:
                f.unlink()
        args = ["rebuild-index", pdir, "--force", "--index-interval-bytes", topic["index_interval"], "--backup-dir", bk]
    else:
        what = damage(rng, pdir)
        if what is None:
            return None
        like = rng.random() < 0.3
        log.append(("damage", what))
        args = ["verify", "--repair", pdir, "--backup-dir", bk] + (["--like-broker"] if like else [])
        log.append((op, [str(a) for a in args[1:]]))
        kl(*args, ok=(0, 1))
        res = kl("--json", "verify", pdir, ok=(0, 1))
        if res.code != 0:
            raise Finding(f"verify after verify --repair of {pdir.name} ({what}) still finds: {res.out[-600:]}")
        return None
    log.append((op, [str(a) for a in args[1:]]))
    kl(*args, ok=(0,))
    return None


# -- kltool's view --------------------------------------------------------------------------------------------

def kltool_records(pdir, level):
    rows = kl("--json", "dump", "--records", "--encoding", "base64", "--isolation-level", level, pdir).json()
    out, control = [], False
    for row in rows:
        if row["type"] == "batch":
            control = row["is_control"]
        elif row["type"] == "record" and not control and "control" not in row:
            out.append((row["offset"], row["timestamp"],
                        None if row["key"] is None else row["key"]["base64"],
                        None if row["value"] is None else row["value"]["base64"],
                        tuple((h["key"], None if h["value"] is None else h["value"]["base64"])
                              for h in row["headers"])))
    return out


def broker_records(b, topic, p, level):
    def enc(x):
        return None if x is None else base64.b64encode(x).decode()

    # kafka-python gives a v0 record (no timestamp) None where kltool and the Java client say -1
    return [(r.offset, -1 if r.timestamp is None else r.timestamp, enc(r.key), enc(r.value), tuple((k, enc(v)) for k, v in r.headers))
            for r in b.consume_all(topic, p, level, timeout=60)]


def dump_parity(logdir, tps) -> list[str]:
    """Kafka's DumpLogSegments --deep-iteration vs kltool dump --deep-iteration, every segment."""
    files = sorted(str(f) for t, p in tps for f in (logdir / f"{t}-{p}").glob("*.log"))
    if not files:
        return []
    out = []
    for k in range(0, len(files), 40):
        chunk = files[k:k + 40]
        theirs = harness.run_tool("org.apache.kafka.tools.DumpLogSegments", "--deep-iteration", "--files",
                                  ",".join(chunk), timeout=300).stdout
        mine = kl("dump", "--deep-iteration", "--files", ",".join(chunk)).out
        if theirs != mine:
            a, b = theirs.splitlines(), mine.splitlines()
            for i in range(max(len(a), len(b))):
                la = a[i] if i < len(a) else "<none>"
                lb = b[i] if i < len(b) else "<none>"
                if la != lb:
                    out.append(f"dump_parity: line {i}: kafka {la!r} kltool {lb!r}")
                    break
    return out


# -- one run --------------------------------------------------------------------------------------------------

def run_once(seed, run, workroot: Path, n_topics: int, report: dict) -> list[str]:  # noqa: C901
    rng = random.Random(f"{seed}:{run}")
    work = workroot / f"run-{seed}-{run}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    tmp = work / "inputs"
    tmp.mkdir()
    findings: list[str] = []
    topics = [draw_topic(rng, i) for i in range(n_topics)]
    b = harness.Broker(work / "broker", {"log.cleaner.enable": "false"})
    logdir = b.logdir
    try:
        b.start()
        a = b.admin()
        from kafka.admin import NewTopic

        try:
            a.create_topics([NewTopic(t["name"], t["partitions"], 1, topic_configs={
                "retention.ms": "-1", "index.interval.bytes": str(t["index_interval"])}) for t in topics])
        finally:
            a.close()
        for t in topics:
            b.wait_for_leaders(t["name"], t["partitions"])
        b.stop()
        now = int(time.time() * 1000)
        for t in topics:
            cfg = [f"segment.bytes={t['segment_bytes']}", f"index.interval.bytes={t['index_interval']}"]
            if t["kind"] == "compact":
                cfg.append("cleanup.policy=compact")
            kl("create", logdir, t["name"], "--partitions", t["partitions"], "--if-not-exists",
               *[x for c in cfg for x in ("--config", c)])
        logs = {t["name"]: [] for t in topics}
        for t in topics:
            for _ in range(rng.randint(2, 6)):
                try:
                    do_append(rng, t, logdir, tmp, now, logs[t["name"]])
                except Finding as e:
                    findings.append(f"{t['name']}: {e}")
            for _ in range(rng.randint(0, 4)):
                try:
                    do_change(rng, t, logdir, tmp, now, logs[t["name"]])
                except Finding as e:
                    findings.append(f"{t['name']}: {e}")
        tps = [(t["name"], p) for t in topics for p in range(t["partitions"])]
        res = kl("--json", "verify", "--deep", logdir, ok=(0, 1))
        for r in res.json():
            if r["type"] == "finding" and any(r.get("file", "").find(f"/{n}-") >= 0 for n in logs):
                findings.append(f"verify --deep after the run: {r}")
        expected = {}
        for t, p in tps:
            pdir = logdir / f"{t}-{p}"
            off = kl("--json", "offsets", pdir).json()[0]
            expected[(t, p)] = {"ru": kltool_records(pdir, "read_uncommitted"),
                                "rc": kltool_records(pdir, "read_committed"),
                                "earliest": off["log_start_offset"], "latest": off["log_end_offset"]}
        findings += dump_parity(logdir, tps)
        n_records = sum(len(e["ru"]) for e in expected.values())
        n_segments = sum(len(list((logdir / f"{t}-{p}").glob("*.log"))) for t, p in tps)

        for mode in ("marker", "recovery"):
            if mode == "recovery":
                b.clean_shutdown_marker().unlink(missing_ok=True)
                rp = logdir / "recovery-point-offset-checkpoint"
                lines = rp.read_text().split("\n")
                rows = [ln for ln in lines[2:] if ln.strip()]
                rows = [f"{ln.split()[0]} {ln.split()[1]} 0" if (ln.split()[0], int(ln.split()[1])) in expected
                        else ln for ln in rows]
                rp.write_text(f"{lines[0]}\n{len(rows)}\n" + "".join(r + "\n" for r in rows))
            elif not b.clean_shutdown_marker().exists():
                findings.append("no clean-shutdown marker after kltool's writes")
            took = b.start()
            report.setdefault("start_seconds", []).append(round(took, 1))
            text = b.log_text(since_start=True)
            for ln in text.splitlines():
                if any(f"{t}-{p}" in ln for t, p in tps) and any(w in ln for w in BAD_WORDS):
                    findings.append(f"[{mode}] broker log: {ln[:400]}")
            for t, p in tps:
                e = expected[(t, p)]
                for level, key in (("read_uncommitted", "ru"), ("read_committed", "rc")):
                    try:
                        got = broker_records(b, t, p, level)
                    except Exception as ex:  # noqa: BLE001 - a consumer that cannot finish is a finding
                        findings.append(f"[{mode}] {t}-{p} {level}: consumer failed: {type(ex).__name__}: {ex}"[:600])
                        continue
                    if got != e[key]:
                        i = next((i for i, (x, y) in enumerate(zip(got, e[key], strict=False)) if x != y),
                                 min(len(got), len(e[key])))
                        findings.append(f"[{mode}] {t}-{p} {level}: broker served {len(got)} records, kltool "
                                        f"dump {len(e[key])}; first difference at #{i}: broker "
                                        f"{str(got[i:i + 1])[:300]} kltool {str(e[key][i:i + 1])[:300]}")
            for spec, key in (("-2", "earliest"), ("-1", "latest")):
                got = b.list_offsets_all(spec, "c[0-9].*")
                for t, p in tps:
                    if got.get((t, p)) != expected[(t, p)][key]:
                        findings.append(f"[{mode}] {t}-{p} ListOffsets {key}: broker {got.get((t, p))} "
                                        f"kltool {expected[(t, p)][key]}")
            b.stop()
        report["cases"] = report.get("cases", 0) + len(tps)
        report["records"] = report.get("records", 0) + n_records
        report["segments"] = report.get("segments", 0) + n_segments
        report.setdefault("runs", []).append({"seed": seed, "run": run, "topics": len(topics), "partitions": len(tps),
                                              "records": n_records, "segments": n_segments,
                                              "findings": len(findings)})
        if findings:
            (work / "ops.json").write_text(json.dumps({"topics": topics, "ops": logs}, indent=1, default=str))
            print(f"run {seed}:{run}: ops in {work / 'ops.json'}", file=sys.stderr)
    finally:
        b.kill()
    return findings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("seed", type=int)
    ap.add_argument("runs", type=int)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--topics", type=int, default=12)
    ap.add_argument("--json", type=Path, help="Write the report here.")
    ap.add_argument("--keep", action="store_true", help="Keep the work dirs of clean runs too.")
    args = ap.parse_args(argv)
    why = harness.missing()
    if why:
        print(f"broker_campaign: {why}", file=sys.stderr)
        return 2
    workroot = args.workdir or Path(tempfile.mkdtemp(prefix="kltool-broker-campaign-"))
    report: dict = {"seed": args.seed, "findings": []}
    t0 = time.monotonic()
    for run in range(args.runs):
        f = run_once(args.seed, run, workroot, args.topics, report)
        for x in f:
            print(f"FINDING run {args.seed}:{run}: {x}")
        report["findings"] += [f"{args.seed}:{run}: {x}" for x in f]
        if not f and not args.keep:
            shutil.rmtree(workroot / f"run-{args.seed}-{run}", ignore_errors=True)
    report["seconds"] = round(time.monotonic() - t0, 1)
    print(f"seed {args.seed}: {args.runs} runs, {report.get('cases', 0)} partitions judged "
          f"({report.get('records', 0)} records, {report.get('segments', 0)} segments), broker starts "
          f"{report.get('start_seconds')} s, {len(report['findings'])} findings, {report['seconds']} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if report["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
