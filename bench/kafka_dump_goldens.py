#!/usr/bin/env python3
"""Regenerate fixtures/kafka-dump/: what Apache Kafka's own DumpLogSegments (kafka-dump-log.sh) prints for
broker-written files, so that tests/test_dump_parity.py can compare `kltool dump` with it without Java.

    make broker-jars                                  # Kafka's jars, as the broker tests fetch them
    .venv/bin/python bench/kafka_dump_goldens.py      # rewrite fixtures/kafka-dump/*.txt and cases.json
    .venv/bin/python bench/kafka_dump_goldens.py --check   # compare only: exit 1 when a golden is stale

The jars: $KLTOOL_KAFKA_JARS, else the newest ~/.cache/kltool-kafka-broker/<version>/ (the broker tests' cache).
DumpLogSegments is org.apache.kafka.tools.DumpLogSegments from Kafka 4.3 on, kafka.tools.DumpLogSegments
before. Each case runs once with its options and files (paths relative to the repository, as given);
the golden is its standard output byte for byte, cases.json its arguments, exit code and Kafka's version.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "fixtures" / "kafka-dump"
K = "fixtures/kafka4.4-kraft"
P = f"{K}/parity-0/00000000000000000000"
META = [f"{K}/__cluster_metadata-0/00000000000000000000.log",
        f"{K}/__cluster_metadata-0/00000000000000000000-0000000000.checkpoint",
        f"{K}/__cluster_metadata-0/00000000000000000058-0000000001.checkpoint"]
W = "fixtures/real/william0423-indexed-zk"
K271 = "fixtures/real/kafka2.7.1-compacted-zk"
ORACLE = "fixtures/java-oracle"

# name -> (DumpLogSegments options, files). kltool dump takes the same options and files.
CASES: dict[str, tuple[list[str], list[str]]] = {
    # Kafka 4.4, KRaft: every kind of file a broker writes
    "kraft-files": ([], [f"{P}.log", f"{P}.index", f"{P}.timeindex", f"{P}.txnindex",
                         f"{K}/parity-0/00000000000000000085.snapshot",
                         f"{K}/__consumer_offsets-0/00000000000000000000.log",
                         f"{K}/__consumer_offsets-0/00000000000000000001.snapshot",
                         f"{K}/__transaction_state-0/00000000000000000000.log",
                         f"{K}/__transaction_state-0/00000000000000000010.snapshot", *META]),
    "kraft-deep-iteration": (["--deep-iteration"], [f"{P}.log", *META]),
    "kraft-print-data-log": (["--print-data-log"], [f"{P}.log"]),
    "kraft-skip-record-metadata": (["--print-data-log", "--skip-record-metadata"], [f"{P}.log"]),
    "kraft-value-decoder-class": (["--value-decoder-class", "org.apache.kafka.tools.api.StringDecoder",
                                   "--max-message-size", "1000000"], [f"{P}.log"]),
    "kraft-max-bytes": (["--print-data-log", "--max-bytes", "1500"], [f"{P}.log"]),
    "kraft-offsets-decoder": (["--offsets-decoder"], [f"{K}/__consumer_offsets-0/00000000000000000000.log"]),
    "kraft-transaction-log-decoder": (["--transaction-log-decoder"],
                                      [f"{K}/__transaction_state-0/00000000000000000000.log"]),
    "kraft-cluster-metadata-decoder": (["--cluster-metadata-decoder"], META),
    "kraft-index-sanity-check": (["--index-sanity-check"], [f"{P}.index", f"{P}.timeindex"]),
    "kraft-verify-index-only": (["--verify-index-only"], [f"{P}.index", f"{P}.timeindex"]),
    # older brokers (ZooKeeper era), from fixtures/real
    "zk-william": (["--print-data-log"], [f"{W}/debug_topic-0/00000000000000000000.log",
                                          f"{W}/debug_topic-0/00000000000000000000.timeindex",
                                          f"{W}/debug_topic-0/00000000000000000030.snapshot",
                                          f"{W}/__consumer_offsets-28/00000000000000000000.index",
                                          f"{W}/__consumer_offsets-28/00000000000000000000.timeindex",
                                          f"{W}/__consumer_offsets-28/00000000000000008202.snapshot"]),
    "zk-k271-offsets-decoder": (["--offsets-decoder"], [
        f"{K271}/__consumer_offsets-17/00000000000000000000.log",
        f"{K271}/__consumer_offsets-17/00000000000000000001.log",
        f"{K271}/__consumer_offsets-39/00000000000000000000.log",
        f"{K271}/__consumer_offsets-39/00000000000000000018.log"]),
    "zk-k271-snapshots": ([], [str(p.relative_to(ROOT)) for p in sorted((ROOT / K271).glob("*/*.snapshot"))]),
    "zk-biggerbrain-headers": (["--print-data-log"], ["fixtures/real/biggerbrain-gzip-headers/lsx1-0/"
                                                      "00000000000000000000.log"]),
    # v0/v1 messages (written by kafka-clients): each record line ends with its own isValid and crc
    "v0-v1-deep-iteration": (["--deep-iteration"], [f"{ORACLE}/{v}/00000000000000000000.log" for v in (
        "v0-none-0", "v0-gzip-0", "v1-none-0", "v1-snappy-0", "v1-logappend-0")]),
    # the deliberate differences (README, "kafka-dump-log parity"): each case is one of them
    "diff-torn-tail": ([], [f"{ORACLE}/damaged-v2-torn-payload-0/00000000000000000000.log"]),
    "diff-damage": ([], [f"{ORACLE}/damaged-v2-crc-0/00000000000000000000.log",
                         f"{ORACLE}/damaged-v2-zero-tail-0/00000000000000000000.log"]),
    "diff-binary-values": (["--print-data-log"], [f"{K271}/__consumer_offsets-17/00000000000000000000.log"]),
    "diff-checkpoint-files": ([], [f"{P}.log", f"{K}/parity-0/leader-epoch-checkpoint"]),
    "diff-offsets-decoder-on-another-topic": (["--offsets-decoder"], [f"{P}.log"]),
}


def jar_dir() -> Path:
    """$KLTOOL_KAFKA_JARS (or the broker harness's $KLTOOL_KAFKA_BROKER_JARS), else the newest complete
    ~/.cache/kltool-kafka-broker/<version>/ (`make broker-jars`)."""
    for var in ("KLTOOL_KAFKA_JARS", "KLTOOL_KAFKA_BROKER_JARS"):
        if os.environ.get(var):
            return Path(os.environ[var])
    found = [d for d in (Path.home() / ".cache" / "kltool-kafka-broker").glob("*/") if (d / ".complete").exists()
             and list(d.glob("kafka_2.13-*.jar"))]
    if not found:
        raise SystemExit("no Kafka jars: set KLTOOL_KAFKA_JARS or run `make broker-jars`")
    return max(found, key=lambda d: tuple(int(x) for x in d.name.split(".") if x.isdigit()))


def kafka_version(jars: Path) -> str:
    (jar,) = jars.glob("kafka_2.13-*.jar")
    return jar.stem.split("-")[-1]


def main_class(version: str) -> str:
    major, minor = (int(x) for x in version.split(".")[:2])
    return "org.apache.kafka.tools.DumpLogSegments" if (major, minor) >= (4, 3) else "kafka.tools.DumpLogSegments"


# Kafka's log lines (warnings and errors only) to stderr, never into the golden stdout
LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn"><Appenders><Console name="e" target="SYSTEM_ERR"><PatternLayout pattern="%p %m%n"/>
</Console></Appenders><Loggers><Root level="WARN"><AppenderRef ref="e"/></Root></Loggers></Configuration>
"""


def run_kafka(jars: Path, opts: list[str], files: list[str]) -> subprocess.CompletedProcess:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".xml") as conf:
        conf.write(LOG4J2)
        conf.flush()
        cmd = ["java", "-Xmx256m", f"-Dlog4j2.configurationFile={conf.name}", "-cp", f"{jars}/*",
               main_class(kafka_version(jars)), *opts, "--files", ",".join(files)]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=300)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the stored goldens, write nothing")
    ap.add_argument("cases", nargs="*", help="only these cases")
    args = ap.parse_args()
    jars = jar_dir()
    version = kafka_version(jars)
    manifest = json.loads((OUT / "cases.json").read_text()) if (OUT / "cases.json").exists() else {}
    stale = []
    for name, (opts, files) in CASES.items():
        if args.cases and name not in args.cases:
            continue
        p = run_kafka(jars, opts, files)
        golden = OUT / f"{name}.txt"
        entry = {"options": opts, "files": files, "exit_code": p.returncode, "kafka_version": version}
        if args.check:
            if not golden.exists() or golden.read_bytes() != p.stdout or manifest.get(name) != entry:
                stale.append(name)
            continue
        OUT.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(p.stdout)
        manifest[name] = entry
        print(f"{name}: {len(p.stdout.splitlines())} lines, exit {p.returncode}")
    if not args.check:
        (OUT / "cases.json").write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    if stale:
        print("stale:", ", ".join(stale), file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
