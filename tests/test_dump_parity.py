"""`kltool dump` with kafka-dump-log.sh's options prints what Kafka's own DumpLogSegments prints, line for line.

Kafka's output is stored in fixtures/kafka-dump/ (one golden per case, cases.json: the options, files, exit
code and Kafka version; bench/kafka_dump_goldens.py regenerates them from the broker harness's jars), so these
tests need no Java. The files are broker-written: fixtures/kafka4.4-kraft (Apache Kafka 4.4, KRaft) and
fixtures/real (ZooKeeper-era brokers), plus kafka-clients' v0/v1 messages from fixtures/java-oracle.

The deliberate differences (README, "kafka-dump-log parity") each have a `diff-*` case and a test below that
pins exactly how kltool differs. When the jars are there (KLTOOL_KAFKA_JARS or ~/.cache/kltool-kafka-broker),
a slow test runs DumpLogSegments live and checks the goldens are still what it prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FIXTURES, ROOT

GOLDENS = FIXTURES / "kafka-dump"
CASES = json.loads((GOLDENS / "cases.json").read_text())
SAME = sorted(n for n in CASES if not n.startswith("diff-"))


def golden(name: str) -> list[str]:
    return (GOLDENS / f"{name}.txt").read_bytes().decode("utf-8", "replace").splitlines()


def kltool_dump(name: str, *extra: str) -> subprocess.CompletedProcess:
    """`kltool dump` with the case's options and files, from the repository root as Kafka was run."""
    c = CASES[name]
    return subprocess.run([sys.executable, "-m", "kltool", "dump", *extra, *c["options"], "--files",
                           ",".join(c["files"])], cwd=ROOT, capture_output=True, timeout=120)


def test_the_cases_cover_every_option_both_take_and_every_kind_of_broker_file():
    options = {o for c in CASES.values() for o in c["options"] if o.startswith("--")}
    assert options >= {"--deep-iteration", "--print-data-log", "--skip-record-metadata", "--offsets-decoder",
                       "--transaction-log-decoder", "--cluster-metadata-decoder", "--index-sanity-check",
                       "--verify-index-only", "--max-bytes", "--max-message-size", "--value-decoder-class"}
    suffixes = {Path(f).suffix for n in SAME for f in CASES[n]["files"]}
    assert suffixes >= {".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".checkpoint"}
    assert any("__cluster_metadata" in f for n in SAME for f in CASES[n]["files"])
    assert all(c["kafka_version"].startswith("4.") for c in CASES.values())


@pytest.mark.parametrize("name", SAME)
def test_identical_to_kafka_dump_log(name):
    r = kltool_dump(name)
    assert r.stdout.decode("utf-8", "replace").splitlines() == golden(name)
    assert r.returncode == CASES[name]["exit_code"] == 0


# -- the deliberate differences, one test each -----------------------------------------------------------------

def test_difference_exit_status_on_damage():
    """A torn tail: the same lines ("Found N invalid bytes at the end of FILE"), but kltool exits 1 (damage
    found) where Kafka exits 0."""
    r = kltool_dump("diff-torn-tail")
    lines = golden("diff-torn-tail")
    assert r.stdout.decode().splitlines() == lines and lines[-1].startswith("Found ")
    assert lines[-1].endswith(" invalid bytes at the end of 00000000000000000000.log")
    assert (CASES["diff-torn-tail"]["exit_code"], r.returncode) == (0, 1)


def test_difference_damage_is_reported_and_reading_goes_on():
    """Kafka stops at the first damaged batch with an exception (exit 1, a stack trace on stderr); kltool prints
    a `!!` line where the damage is and goes on with the next valid batch: Kafka's lines are all there, in
    order, and only `!!` lines are added."""
    r = kltool_dump("diff-damage")
    ours = r.stdout.decode().splitlines()
    theirs = golden("diff-damage")
    assert [ln for ln in ours if not ln.startswith("!! ")][:len(theirs)] == theirs
    extra = [ln for ln in ours if ln.startswith("!! ")]
    assert extra and all(" at position " in ln for ln in extra)
    assert (CASES["diff-damage"]["exit_code"], r.returncode) == (1, 1)


def test_difference_bytes_that_are_not_printable_text():
    """Kafka's StringDecoder prints any bytes as UTF-8 (replacement characters, raw newlines that break the
    line); kltool escapes them (`base64:...` for invalid UTF-8, \\xNN for control characters), one line per
    record. The lines are the same up to the key or payload."""
    r = kltool_dump("diff-binary-values")
    ours, theirs = r.stdout.decode().splitlines(), golden("diff-binary-values")
    assert ours != theirs
    differing = [(a, b) for a, b in zip(ours, theirs, strict=False) if a != b]
    assert differing
    for a, b in differing:
        head = a.split(" key: ")[0].split(" payload: ")[0]
        assert b.startswith(head) and (" key: base64:" in a or " payload: base64:" in a or "\\x" in a)
    assert len(ours) <= len(theirs)  # (Kafka's raw newlines make more lines)


def test_difference_checkpoint_files_are_dumped():
    """Kafka says "Ignoring unknown file" (stderr) for checkpoint and metadata files after their `Dumping`
    line; kltool prints their entries."""
    r = kltool_dump("diff-checkpoint-files")
    ours, theirs = r.stdout.decode().splitlines(), golden("diff-checkpoint-files")
    assert ours[:len(theirs)] == theirs
    assert theirs[-1].endswith("leader-epoch-checkpoint") and ours[len(theirs):] == ["epoch: 0 startOffset: 0"]


def test_difference_a_decoder_on_records_it_cannot_decode():
    """--offsets-decoder on records that are not __consumer_offsets': Kafka throws at the first record without a
    key (exit 1); kltool prints Kafka's words per record ("Unknown record type N at offset O, skipping.",
    "Error at offset O, skipping. <why>") and goes on."""
    r = kltool_dump("diff-offsets-decoder-on-another-topic")
    ours, theirs = r.stdout.decode().splitlines(), golden("diff-offsets-decoder-on-another-topic")
    assert ours[:len(theirs) - 1] == theirs[:-1]  # (Kafka's last line is the record it failed on)
    assert theirs[-1] in ours[len(theirs) - 1]
    assert "key: Error at offset 0, skipping. " in ours[len(theirs) - 1]
    assert "key: Unknown record type 27441 at offset 1, skipping." in ours[len(theirs)]
    assert (CASES["diff-offsets-decoder-on-another-topic"]["exit_code"], r.returncode) == (1, 0)


def test_kltools_own_options_keep_their_own_output():
    """Without kafka-dump-log's options, `--records` decodes internal topics by name (--decoder auto) and
    shows header values: kltool's own line, a superset of Kafka's."""
    f = FIXTURES / "kafka4.4-kraft" / "__consumer_offsets-0" / "00000000000000000000.log"
    r = subprocess.run([sys.executable, "-m", "kltool", "dump", "--records", str(f)], capture_output=True,
                       text=True, timeout=60)
    assert ' key: {"type":"1","data":{"group":"parity-group"' in r.stdout
    r = subprocess.run([sys.executable, "-m", "kltool", "dump", "--deep-iteration", "--print-data-log", str(f)],
                       capture_output=True, text=True, timeout=60)
    assert '{"type":"1"' not in r.stdout  # kafka-dump-log's options: no decoder unless one is asked for


# -- live: the goldens are still what DumpLogSegments prints ----------------------------------------------------

def _jars() -> Path | None:
    for var in ("KLTOOL_KAFKA_JARS", "KLTOOL_KAFKA_BROKER_JARS"):
        if os.environ.get(var):
            return Path(os.environ[var])
    found = sorted((Path.home() / ".cache" / "kltool-kafka-broker").glob("*/kafka_2.13-*.jar"))
    return found[-1].parent if found else None


@pytest.mark.slow
@pytest.mark.skipif(_jars() is None or shutil.which("java") is None,
                    reason="no Java or no Kafka jars (KLTOOL_KAFKA_JARS, or `make broker-jars`)")
def test_goldens_are_what_dump_log_segments_prints_live():
    env = {**os.environ, "KLTOOL_KAFKA_JARS": str(_jars())}
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "kafka_dump_goldens.py"), "--check"], env=env,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr


def test_verify_index_only_reports_an_entry_the_log_does_not_match(copy_fixture):
    d = copy_fixture("kafka4.4-kraft/parity-0")
    index = d / "00000000000000000000.index"
    data = bytearray(index.read_bytes())
    data[3] += 1  # the first entry's relative offset, one past the batch its position starts
    index.write_bytes(bytes(data))
    r = subprocess.run([sys.executable, "-m", "kltool", "dump", "--verify-index-only", str(index)],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.splitlines() == [f"Dumping {index}"]  # no entries, as Kafka's tool
    assert r.returncode == 1 and "index offset " in r.stderr and "ends at offset" in r.stderr
