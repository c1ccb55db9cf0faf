"""Damaged metadata and checkpoint files never end in an internal error: every file kltool parses
(meta.properties, partition.metadata, the four offset checkpoints, leader-epoch-checkpoint, producer
snapshots, quorum-state, kltool-topics.json, .kafka_cleanshutdown) is mutated and run through every command;
none may exit 70 or print a traceback; a command that cannot go on says so in one line (exit 2) naming the
file; verify reports the damage as a finding (exit 1) and goes on."""

from __future__ import annotations

import json
import os
import random
import re
import shutil

import pytest

from .conftest import FIXTURES

QUORUM_STATE = (b'{"clusterId":"","leaderId":1,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,'
                b'"currentVoters":[{"voterId":1}],"data_version":0}')
TOPICS_JSON = b'{"version": 1, "topics": {"lsx1": {"partitions": 1, "config": {"retention.ms": "86400000"}}}}\n'
CLEAN_SHUTDOWN = b'{"version":0,"brokerEpoch":5}'

# file (relative to the log dir) -> its kind, for the mutations that change a version
FILES = {
    "meta.properties": "properties",
    "lsx1-0/partition.metadata": "partition_metadata",
    "recovery-point-offset-checkpoint": "checkpoint",
    "log-start-offset-checkpoint": "checkpoint",
    "replication-offset-checkpoint": "checkpoint",
    "cleaner-offset-checkpoint": "checkpoint",
    "lsx1-0/leader-epoch-checkpoint": "checkpoint",
    "myTopic-0/00000000000000000038.snapshot": "snapshot",
    "__cluster_metadata-0/quorum-state": "json",
    "kltool-topics.json": "json",
    ".kafka_cleanshutdown": "json",
}


def _version(kind: str, data: bytes) -> bytes:
    if kind == "snapshot":
        return b"\x00\x09" + data[2:]
    if kind == "checkpoint":
        return b"9" + data[1:]
    if kind == "partition_metadata":
        return data.replace(b"version: 0", b"version: 9")
    if kind == "properties":
        return data.replace(b"version=0", b"version=9")
    return re.sub(rb'"(version|data_version)": ?\d+', rb'"\1": 9', data)


def _flips(seed: int):
    def f(_kind, data: bytes) -> bytes:
        rnd = random.Random(seed)
        b = bytearray(data)
        for _ in range(3):
            if b:
                b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
        return bytes(b)
    return f


MUTATIONS = {
    "non_utf8": lambda k, d: d[:len(d) // 2] + b"\xff\xfe" + d[len(d) // 2:],
    "truncated": lambda k, d: d[:len(d) // 2],
    "empty": lambda k, d: b"",
    "garbage": lambda k, d: random.Random(7).randbytes(200),
    "nul": lambda k, d: b"\x00" * 64,
    "version": _version,
    "bignum": lambda k, d: re.sub(rb"\d+", b"99999999999999999999999", d),
    "negative": lambda k, d: re.sub(rb"\d+", b"-5", d),
    "deep_json": lambda k, d: b"[" * 100_000,
    "long_line": lambda k, d: d + b"\n" + b"7" * 1_000_000,
    "flips1": _flips(1),
    "flips2": _flips(2),
    "bom": lambda k, d: b"\xef\xbb\xbf" + d,
    "crlf": lambda k, d: d.replace(b"\n", b"\r\n"),
    "utf16": lambda k, d: d.decode("latin-1").encode("utf-16"),
    "dir": None,
    "loop": None,
    "fifo": None,
}
# mutations after which verify must report the file (a finding naming it, exit 1)
MUST_FLAG = {"non_utf8", "garbage", "nul", "deep_json", "dir", "loop", "fifo"}


def _logdir(tmp_path):
    d = tmp_path / "ld"
    shutil.copytree(FIXTURES / "sample-logdir", d)
    (d / "__cluster_metadata-0").mkdir()
    (d / "__cluster_metadata-0" / "00000000000000000000.log").write_bytes(b"")
    (d / "__cluster_metadata-0" / "quorum-state").write_bytes(QUORUM_STATE)
    (d / "kltool-topics.json").write_bytes(TOPICS_JSON)
    (d / ".kafka_cleanshutdown").write_bytes(CLEAN_SHUTDOWN)
    return d


def _mutate(d, rel: str, name: str) -> None:
    p = d / rel
    if name == "dir":
        p.unlink()
        p.mkdir()
        (p / "x").write_text("x")
    elif name == "loop":
        p.unlink()
        os.symlink(p.name, p)  # a symlink to itself: ELOOP for every reader, root included
    elif name == "fifo":
        p.unlink()
        os.mkfifo(p)  # reading it would block for ever: never opened as a file
    else:
        p.write_bytes(MUTATIONS[name](FILES[rel], p.read_bytes()))


COMMANDS = [
    ["info", "{d}"],
    ["verify", "{d}"],
    ["--json", "verify", "{d}"],
    ["verify", "--repair", "--dry-run", "{d}"],
    ["dump", "{d}"],
    ["dump", "{f}"],
    ["verify", "{f}"],
    ["verify", "--deep", "{d}"],
    ["dump", "--records", "{d}"],
    ["info", "{f}"],
    ["offsets", "--count", "{d}"],
    ["offsets", "--time", "earliest", "{d}"],
    ["retention", "--dry-run", "--retention-ms", "1", "{d}"],
    ["retention", "--dry-run", "--retention-bytes", "100", "{d}"],
    ["rebuild-index", "--dry-run", "{d}"],
    ["append", "--dry-run", "{d}", "lsx1"],
    ["append", "--dry-run", "{d}", "myTopic", "--partition", "0"],
]


# A FIFO named like a metadata file blocks whoever opens it for reading. kltool's readers refuse a file
# that is not regular (fs.read_small_file), except storage/change/repair.py's own reads of snapshots,
# leader-epoch-checkpoint and the root checkpoints (verify --repair and rebuild-index would wait for ever).
FIFO_UNSAFE = ("--repair", "rebuild-index")


def _skip(cmd, name: str) -> bool:
    if "{f}" in cmd and name in ("dir", "loop", "fifo"):
        return True
    return name == "fifo" and any(a in cmd for a in FIFO_UNSAFE)


def _check(r, args, rel: str, name: str) -> None:
    what = f"{' '.join(args)} with {rel} {name}: {r!r}"
    assert r.code != 70, what
    assert "Traceback" not in r.err and "internal error" not in r.err, what
    assert r.code in (0, 1, 2), what
    if r.code == 2:
        lines = [ln for ln in r.err.splitlines() if ln.startswith("kltool: error:")]
        assert len(lines) == 1, what


def _every_command(kl, d, rel: str, name: str) -> list:
    """Run each command of COMMANDS that can run on D with REL mutated by NAME, each checked by _check:
    [(args, result)]."""
    out = []
    for cmd in COMMANDS:
        if _skip(cmd, name):
            continue
        args = [a.format(d=d, f=d / rel) for a in cmd]
        r = kl(*args, stdin='{"key":"a","value":"b"}\n' if "append" in args else None)
        _check(r, args, rel, name)
        out.append((args, r))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("rel", sorted(FILES))
def test_damaged_metadata_file_every_command(kl, tmp_path, rel):
    d = _logdir(tmp_path)
    pristine = tmp_path / "pristine"
    shutil.copytree(d, pristine, symlinks=True)
    for name in MUTATIONS:
        shutil.rmtree(d)
        shutil.copytree(pristine, d, symlinks=True)
        _mutate(d, rel, name)
        for args, r in _every_command(kl, d, rel, name):
            if args[:1] == ["verify"] and len(args) == 2 and args[1] == str(d) and name in MUST_FLAG:
                assert os.path.basename(rel) in r.out, f"verify did not report {rel} {name}: {r!r}"
                assert r.code == 1 or (name == "dir" and rel.endswith(".snapshot")), r


@pytest.mark.parametrize("rel,name", [
    ("meta.properties", "non_utf8"),
    ("lsx1-0/leader-epoch-checkpoint", "non_utf8"),
    ("lsx1-0/partition.metadata", "non_utf8"),
    ("__cluster_metadata-0/quorum-state", "garbage"),
    ("kltool-topics.json", "deep_json"),
    (".kafka_cleanshutdown", "non_utf8"),
    ("recovery-point-offset-checkpoint", "loop"),
    ("myTopic-0/00000000000000000038.snapshot", "dir"),
    ("meta.properties", "fifo"),
    ("kltool-topics.json", "fifo"),
    ("lsx1-0/partition.metadata", "fifo"),
])
def test_damaged_metadata_file_quick(kl, tmp_path, rel, name):
    """The issue's cases (and a few more), in the fast loop."""
    d = _logdir(tmp_path)
    _mutate(d, rel, name)
    _every_command(kl, d, rel, name)
    r = kl("verify", d)
    assert os.path.basename(rel) in r.out, r
    r = kl("--json", "verify", d)
    found = [o for o in r.json() if o["type"] == "finding" and o["file"].endswith(os.path.basename(rel))]
    if rel.endswith(".snapshot") and name == "dir":  # a directory where a file belongs: not Kafka's
        assert found and found[0]["kind"] == "unknown_file", found
        return
    assert r.code == 1
    assert found and found[0]["kind"] in ("checkpoint_corrupt", "metadata_corrupt", "snapshot_corrupt", "unreadable",
                                          "unknown_version"), found


def test_clean_fixture_is_clean(kl, tmp_path):
    d = _logdir(tmp_path)
    r = kl("--json", "verify", d)
    errors = [o for o in r.json() if o.get("severity") == "error"]
    assert not errors, errors
    assert json.loads(TOPICS_JSON)
