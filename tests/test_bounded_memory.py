"""Memory is bounded by what an index or metadata file holds, not by its size.

A preallocated ``.index``/``.timeindex`` after a crash is mostly zeros (a sparse file): kltool holds only the
bytes before its zero tail (:func:`kltool.storage.fs.read_index_file`), so a 1 GiB one costs what its entries
do, and every command says what it says of the same file with a small zero tail (only the file's size
differs in the output). A metadata file far larger than any real one (checkpoints, snapshots ...) is not
read: one error naming the file and its size. The runs are subprocesses under an address-space limit, and
each one's peak RSS (VmHWM) is compared with the run on the small file."""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kltool.format import index as fidx
from kltool.format.index import MAX_LISTED
from kltool.storage.fs import METADATA_MAX_BYTES, read_index_file, read_small_file

from .conftest import FIXTURES

BIG = 1 << 30  # the sparse file's size
SMALL = 64 << 10  # the same file with a small zero tail
LIMIT = 768 << 20  # the subprocess's address space (a normal run needs far less; reading 1 GiB needs more)
SLACK = 48 << 20  # the most a run on the big file may take over the run on the small one (peak RSS)

WILLIAM = FIXTURES / "real" / "william0423-indexed-zk"
KRAFT = FIXTURES / "kafka4.4-kraft"
SEG0 = "00000000000000000000"

COMMANDS = [
    ("verify", "--deep", "--strict"),
    ("info",),
    ("offsets", "--count"),
    ("offsets", "--earliest", "--latest", "--max-timestamp"),
    ("rebuild-index", "--dry-run"),
]


# kltool as its console command runs it, writing its peak RSS (VmHWM: this process image's own, not the
# forked pytest's, which getrusage and wait4 would count) to the file named by the first argument.
_PEAK = ("import atexit, sys\n"
         "out = sys.argv.pop(1)\n"
         "def peak():\n"
         "    with open('/proc/self/status') as f, open(out, 'w') as o:\n"
         "        o.write(next(line.split()[1] for line in f if line.startswith('VmHWM:')))\n"
         "atexit.register(peak)\n"
         "sys.argv[0] = 'kltool'\n"
         "from kltool.cli import main\n"
         "main()\n")


def _run(*args, limit_as: int = LIMIT) -> tuple[int, str, str, int]:
    """(exit code, stdout, stderr, peak RSS in bytes) of ``kltool --json ARGS`` under ``limit_as``."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    with tempfile.TemporaryDirectory() as t:
        peak = Path(t) / "peak"
        p = subprocess.run([sys.executable, "-c", _PEAK, peak, "--json", *map(str, args)], capture_output=True,
                           text=True, preexec_fn=limit, timeout=300, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr, int(peak.read_text()) * 1024


def _same(small: str, big: str, small_dir: Path, big_dir: Path) -> tuple[str, str]:
    """Both outputs with what must differ made equal: the directory, the big file's size, the run time."""
    def norm(s: str, d: Path, size: int) -> str:
        s = s.replace(str(d), "DIR").replace(str(size), "SIZE")
        s = re.sub(r"\d+ zero-filled entries", "N zero-filled entries", s)
        return re.sub(r'"seconds":[0-9.]+', '"seconds":0', s)

    return norm(small, small_dir, SMALL), norm(big, big_dir, BIG)


def _pair(tmp_path: Path, fixture: Path, files: list[str], *, drop: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """Two copies of ``fixture``: ``files`` made SMALL bytes long in one, BIG in the other (sparse)."""
    dirs = []
    for name, size in (("small", SMALL), ("big", BIG)):
        d = tmp_path / name
        shutil.copytree(fixture, d)
        for f in drop:
            (d / f).unlink()
        for f in files:
            os.truncate(d / f, size)
        dirs.append(d)
    return dirs[0], dirs[1]


CASES = {
    # a closed-shutdown ZooKeeper-era dir: an index with entries, one without
    "index": (WILLIAM, [f"__consumer_offsets-28/{SEG0}.index"], ()),
    "timeindex": (WILLIAM, [f"__consumer_offsets-28/{SEG0}.timeindex"], ()),
    "empty-index": (WILLIAM, [f"debug_topic-0/{SEG0}.index", f"debug_topic-0/{SEG0}.timeindex"], ()),
    # KRaft, no clean-shutdown file: the active segment's preallocated indexes are noted (with their count)
    "kraft-unclean": (KRAFT, [f"parity-0/{SEG0}.index", f"parity-0/{SEG0}.timeindex"], (".kafka_cleanshutdown",)),
}


@pytest.mark.parametrize("command", [*COMMANDS, ("dump",)], ids=" ".join)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_sparse_1gib_index_costs_what_its_entries_do(tmp_path, case, command):
    fixture, files, drop = CASES[case]
    small, big = _pair(tmp_path, fixture, files, drop=drop)
    if command == ("dump",):  # the files themselves
        args_s, args_b = ["dump", *(small / f for f in files)], ["dump", *(big / f for f in files)]
    else:
        args_s, args_b = [*command, small], [*command, big]
    code_s, out_s, err_s, rss_s = _run(*args_s)
    code_b, out_b, err_b, rss_b = _run(*args_b)
    assert code_b == code_s and code_s in (0, 1), (code_s, code_b, err_b[-2000:])
    o_s, o_b = _same(out_s, out_b, small, big)
    e_s, e_b = _same(err_s, err_b, small, big)
    assert o_b == o_s
    assert e_b == e_s
    assert rss_b <= rss_s + SLACK, (rss_s >> 20, rss_b >> 20)


def test_rebuilding_a_sparse_1gib_index_backs_it_up_and_restores_it_streamed(tmp_path):
    # The backup of an index (or checkpoint) the repair replaces, and putting it back, were read whole:
    # a real rebuild-index of a 1 GiB preallocated .index held ~1 GB. Now streamed, holes kept.
    _small, big = _pair(tmp_path, *CASES["index"][:2])
    idx = big / f"__consumer_offsets-28/{SEG0}.index"
    original = hashlib.sha256(idx.read_bytes()).hexdigest()
    bk = tmp_path / "bk"
    code, _out, err, rss = _run("rebuild-index", "--force", "--backup-dir", bk, big)
    assert code == 0, err[-2000:]
    assert rss < 200 << 20, rss >> 20
    assert idx.stat().st_size < 1 << 20  # rebuilt: its entries, trimmed
    saved = [p for p in bk.rglob(f"__consumer_offsets-28/{SEG0}.index") if p.is_file()]
    assert len(saved) == 1 and saved[0].stat().st_size == BIG
    assert saved[0].stat().st_blocks * 512 < 8 << 20  # the hole stayed a hole
    manifest = next(bk.rglob("manifest.json"))
    code, _out, err, rss = _run("restore", manifest)
    assert code == 0, err[-2000:]
    assert rss < 200 << 20, rss >> 20
    assert idx.stat().st_size == BIG and idx.stat().st_blocks * 512 < 8 << 20
    assert hashlib.sha256(idx.read_bytes()).hexdigest() == original


@pytest.mark.parametrize("name", ["replication-offset-checkpoint", "meta.properties",
                                  "__consumer_offsets-28/leader-epoch-checkpoint"])
def test_a_metadata_file_far_larger_than_any_real_one_is_not_read(tmp_path, name):
    d = tmp_path / "d"
    shutil.copytree(WILLIAM, d)
    os.truncate(d / name, BIG)
    code, out, err, rss = _run("verify", "--deep", d)
    assert rss < 100 << 20, rss >> 20  # (~25 MB here)
    assert code == 1 and "internal error" not in err, (code, err[-2000:])
    found = [line for line in out.splitlines() if '"unreadable"' in line]
    assert len(found) == 1 and str(d / name) in found[0] and f"{BIG} bytes" in found[0], out[-3000:]


def test_a_huge_snapshot_is_read_a_chunk_at_a_time_not_refused(tmp_path):
    # A producer snapshot has no reason to be small (46 bytes a producer): it is no longer refused past
    # METADATA_MAX_BYTES (it was "unreadable" here) but read a chunk at a time, and judged: 1 GiB of zeros
    # after its entries break its CRC, as they do for the broker. (A genuine big one: test_bounded_snapshot.py.)
    d = tmp_path / "d"
    shutil.copytree(WILLIAM, d)
    name = d / f"__consumer_offsets-28/{8202:020d}.snapshot"
    os.truncate(name, BIG)
    code, out, err, rss = _run("verify", d)
    assert rss < 100 << 20, rss >> 20
    assert code == 1 and "internal error" not in err, (code, err[-2000:])
    found = [line for line in out.splitlines() if '"finding"' in line]
    assert len(found) == 1 and '"snapshot_corrupt"' in found[0] and str(name) in found[0], out[-3000:]
    assert "CRC is no longer valid" in found[0]


def test_info_names_a_huge_meta_properties_in_one_line(tmp_path):
    d = tmp_path / "d"
    shutil.copytree(WILLIAM, d)
    os.truncate(d / "meta.properties", BIG)
    code, out, err, _rss = _run("info", d)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert str(d / "meta.properties") in lines[0] and f"{BIG} bytes" in lines[0] and "not read" in lines[0]


# ------------------------------------------------------------------------------------- the reader itself


def test_read_small_file_keeps_its_limit(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"0\n0\n")
    assert read_small_file(f) == b"0\n0\n"
    os.truncate(f, METADATA_MAX_BYTES)
    assert len(read_small_file(f)) == METADATA_MAX_BYTES  # (the limit itself is read)
    os.truncate(f, METADATA_MAX_BYTES + 1)
    with pytest.raises(OSError, match=f"{METADATA_MAX_BYTES + 1} bytes"):
        read_small_file(f)


@pytest.mark.parametrize("content", [b"", b"\0" * 20, b"\1" * 20, b"\1\2\3\0\0\0\0\0" * 3 + b"\0" * 100,
                                     b"\0" * 4096 + b"\5" + b"\0" * 7, b"\0\0\0\0\0\0\0\7" + b"\0" * 5])
def test_read_index_file_is_the_file(tmp_path, content):
    f = tmp_path / f"{SEG0}.index"
    f.write_bytes(content)
    data = read_index_file(f)
    assert data == content and len(data) == len(content)
    assert data[:] == content and data[3:17] == content[3:17] and data[-5:] == content[-5:]
    for size in (fidx.OFFSET_ENTRY, fidx.TIME_ENTRY):
        assert fidx.entry_count(data, size) == fidx.entry_count(content, size)
        assert fidx.trailing_bytes(data, size) == fidx.trailing_bytes(content, size)
    for a, b in ((fidx.offset_index_entries, fidx.time_index_entries),
                 (fidx.offset_index_zero_tail, fidx.time_index_zero_tail),
                 (fidx.check_offset_index, fidx.check_time_index)):
        args = (7,) if a is not fidx.offset_index_zero_tail else ()
        assert a(data, *args) == a(content, *args)
        assert b(data, *args) == b(content, *args)
    assert fidx.parse_offset_index(data, 7) == fidx.parse_offset_index(content, 7)
    assert fidx.parse_time_index(data, 7) == fidx.parse_time_index(content, 7)


def test_read_index_file_holds_no_zero_tail(tmp_path):
    f = tmp_path / f"{SEG0}.index"
    f.write_bytes(b"\0\0\0\1\0\0\0\2" * 3)
    os.truncate(f, BIG)
    data = read_index_file(f)
    assert isinstance(data, fidx.ZeroPadded) and len(data.head) == 24 and len(data) == BIG
    assert fidx.offset_index_entries(data, 0) == [(1, 2)] * 3
    assert fidx.offset_index_zero_tail(data) == BIG // 8 - 3
    assert data != b"\0" * 24 and data == fidx.ZeroPadded(data.head + bytes(8), BIG - 32)


# ------------------------------------------------------------------- 1 GiB of garbage in an index


@pytest.fixture(scope="module")
def garbage(tmp_path_factory) -> dict[str, Path]:
    """1 GiB files of garbage: random bytes, and 0xFF (no zero tail to skip: every byte is an entry's)."""
    d = tmp_path_factory.mktemp("garbage")
    out = {}
    for name, block in (("random", os.urandom(16 << 20)), ("ff", b"\xff" * (16 << 20))):
        out[name] = d / name
        with open(out[name], "wb") as f:
            for _ in range(BIG // len(block)):
                f.write(block)
    return out


GARBAGE_LIMIT = 100 << 20  # the peak RSS a run on a 1 GiB garbage index may reach (~20-35 MB here)


_GARBAGE_CASES = [(kind, command) for kind in ("index", "timeindex")
                  for command in [*COMMANDS, ("dump", "--limit", "5"), ("dump", "--verify-index-only")]
                  if not (command == ("dump", "--verify-index-only") and kind == "timeindex")]  # an offset index only


@pytest.mark.slow
@pytest.mark.parametrize("kind,command", _GARBAGE_CASES, ids=lambda v: v if isinstance(v, str) else " ".join(v))
@pytest.mark.parametrize("content", ["random", "ff"])
def test_a_1gib_index_of_garbage_is_read_in_bounded_memory(tmp_path, garbage, content, kind, command):
    # Held up to its last non-zero byte, then decoded whole: ~2.6-3 GB and MemoryError (exit 70) under a
    # 3 GiB limit. Now read a chunk at a time, the findings of the garbage listed up to MAX_LISTED.
    d = tmp_path / "d"
    shutil.copytree(WILLIAM, d)
    f = d / "__consumer_offsets-28" / f"{SEG0}.{kind}"
    f.unlink()
    os.link(garbage[content], f)  # (read-only commands: the file is shared)
    args = [*command, f] if command[0] == "dump" else [*command, d]
    code, out, err, rss = _run(*args)
    assert code in (0, 1) and "internal error" not in err, (code, err[-2000:])
    assert rss < GARBAGE_LIMIT, rss >> 20
    assert len(out.splitlines()) < 2 * MAX_LISTED
    if command[0] == "verify":
        assert code == 1 and f'"file":"{f}"' in out


# ------------------------------------------------------------------- a huge .txnindex

TXN_COMMANDS = [("verify", "--deep", "--strict"), ("transactions",), ("producers",), ("dump", "--limit", "5"),
                ("dump",)]
TXN_FILE = f"parity-0/{SEG0}.txnindex"


def _txn_run(d: Path, command: tuple) -> tuple[int, str, str, int]:
    f = d / TXN_FILE
    return _run(*command, f) if command[0] == "dump" else _run(*command, d / "parity-0")


@pytest.mark.parametrize("command", [c for c in TXN_COMMANDS if c != ("dump",)], ids=" ".join)
def test_a_sparse_4gib_txnindex_with_an_entry_at_its_end_is_read_in_bounded_memory(tmp_path, command):
    # Read whole up to its last non-zero byte (4 GiB), then decoded whole: MemoryError (exit 70) under the
    # limit. Now its holes are skipped unread (lseek SEEK_DATA), its entries read a chunk at a time. (Not a
    # plain dump: its ~126 M zero entries pass the broker's check at base offset 0, and are dumped, all.)
    d = tmp_path / "d"
    shutil.copytree(KRAFT, d)
    f = d / TXN_FILE
    size = (4 << 30) // fidx.TXN_ENTRY * fidx.TXN_ENTRY
    with open(f, "r+b") as fh:
        fh.truncate(size - fidx.TXN_ENTRY)
        fh.seek(size - fidx.TXN_ENTRY)
        fh.write(fidx.encode_aborted_txn(9, 1, 2, 3, version=0x300))  # (read as version 3: corrupt)
    code_s, _out, _err, rss_s = _txn_run(KRAFT, command)  # the fixture as it is: the baseline
    code, out, err, rss = _txn_run(d, command)
    assert code in (0, 1) and "internal error" not in err, (code, err[-2000:])
    assert rss <= rss_s + SLACK, (rss_s >> 20, rss >> 20)
    assert len(out.splitlines()) < 2 * MAX_LISTED
    if command[0] in ("verify", "transactions", "producers"):
        assert code == 1 and "version 3" in out, out[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("command", TXN_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("content", ["random", "ff"])
def test_a_1gib_txnindex_of_garbage_is_read_in_bounded_memory(tmp_path, garbage, content, command):
    # Read whole (1 GiB), then decoded whole (~31 M entries): MemoryError (exit 70) under the limit. Now read a
    # chunk at a time, its bad entries listed (and dumped) up to MAX_LISTED, then a note that the rest is not.
    d = tmp_path / "d"
    shutil.copytree(KRAFT, d)
    f = d / TXN_FILE
    f.unlink()
    os.link(garbage[content], f)  # (read-only commands: the file is shared)
    code, out, err, rss = _txn_run(d, command)
    assert code in (0, 1) and "internal error" not in err, (code, err[-2000:])
    assert rss < GARBAGE_LIMIT, rss >> 20
    assert len(out.splitlines()) < 2 * MAX_LISTED
    if command[0] != "dump" or command == ("dump",):
        assert '"kind":"index_unchecked"' in out, out[-2000:]


# ------------------------------------------------------------------- producers: a large snapshot


def test_the_producer_state_of_a_large_snapshot_is_held_once(tmp_path):
    # The snapshot's entries were read into a list, then the state map built from it (and copied): both held
    # at once, the peak ~1.7 times the state the command keeps. Now streamed into the state a chunk at a time:
    # the peak is the state and a chunk.
    import tracemalloc

    from kltool.format.snapshot import ProducerEntry, encode_snapshot
    from kltool.storage.partition import Partition
    from kltool.storage.transactions import partition_transactions

    d = tmp_path / "d"
    shutil.copytree(KRAFT, d)
    n = 200_000
    entries = [ProducerEntry(10_000 + i, 3, 41, 60, 0, 1_700_000_000_000 + i, 7, -1 if i % 3 else 50)
               for i in range(n)]
    (d / "parity-0" / "00000000000000000085.snapshot").write_bytes(encode_snapshot(entries))
    del entries
    tracemalloc.start()
    try:
        r = partition_transactions(Partition(d / "parity-0"), now=1_800_000_000_000)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(r.producers) == n and r.producers[10_003].current_txn_first_offset == 50
    assert any(f.kind == "snapshot_disagrees" for f in r.findings)  # (the first SNAPSHOT_CHECK_LIMIT checked)
    assert peak - held < 0.35 * held, (held >> 20, peak >> 20)


@pytest.mark.parametrize("fmt", ["table", "kafka"])
def test_the_producers_table_holds_no_cell(tmp_path, fmt):
    # The text table held every cell of every row before its first line (1.2 GB for a million producers, five
    # times the state itself); now it is walked twice, widths then lines. Its peak RSS is that of the --json run
    # (one object at a time) within SLACK.
    from kltool.format.snapshot import ProducerEntry, encode_snapshot

    d = tmp_path / "d"
    shutil.copytree(KRAFT, d)
    entries = [ProducerEntry(10_000 + i, 3, 41, 60, 0, 1_700_000_000_000 + i, 7, -1 if i % 3 else 50)
               for i in range(200_000)]
    (d / "parity-0" / "00000000000000000085.snapshot").write_bytes(encode_snapshot(entries))
    del entries
    peaks = {}
    for mode in ("--json", "--quiet"):
        args = [mode, "producers", d / "parity-0", "--now", "1700000300000"]  # (none expired)
        if mode != "--json":
            args += ["--format", fmt]
        with tempfile.TemporaryDirectory() as t, open(Path(t) / "out", "w+") as out:
            peak = Path(t) / "peak"
            p = subprocess.run([sys.executable, "-c", _PEAK, peak, *map(str, args)], stdout=out,
                               stderr=subprocess.PIPE, text=True, timeout=300, stdin=subprocess.DEVNULL)
            assert p.returncode in (0, 1) and "internal error" not in p.stderr, (p.returncode, p.stderr[-2000:])
            out.seek(0)
            lines = sum(1 for _ in out)
            peaks[mode] = int(peak.read_text()) * 1024
        assert lines >= 200_000, (mode, lines)
    assert peaks["--quiet"] < peaks["--json"] + SLACK, {k: v >> 20 for k, v in peaks.items()}
