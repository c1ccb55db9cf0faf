"""A preallocated segment (``log.preallocate=true``, or a crash on a file system that extends files sparsely)
is mostly a hole. Reading the hole costs the same as reading zeros from disk; ``SEEK_DATA`` finds the next
data without reading it. Measured by the bytes the process read (``rchar`` in ``/proc/self/io``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from .conftest import ORACLE

MIB = 1 << 20
MEASURE = textwrap.dedent("""
    import sys
    from kltool.cli import main
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
    io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
    print("RCHAR", io["rchar"], file=sys.stderr)
""")


def _no_holes():
    """tmp_path's file system keeps no holes: nothing to measure here; under CI (ext4/overlay, which keep
    them) that is a failure, not a skip."""
    why = "this file system keeps no holes"
    pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)


def read_bytes_of(*args) -> int:
    r = subprocess.run([sys.executable, "-c", MEASURE, "-q", *args], capture_output=True, text=True, timeout=600)
    return int(r.stderr.rsplit("RCHAR", 1)[1].split()[0])


@pytest.fixture
def sparse_logdir(tmp_path):
    part = tmp_path / "kafka-logs" / "orders-0"
    part.mkdir(parents=True)
    log = part / "00000000000000000000.log"
    log.write_bytes((ORACLE / "v2-none-0" / "00000000000000000000.log").read_bytes())  # 296 bytes, 7 records
    with open(log, "r+b") as f:
        f.truncate(64 * MIB)  # the rest of a preallocated segment: a hole
    return tmp_path / "kafka-logs"


@pytest.mark.parametrize("command", [["info"], ["verify"], ["offsets", "--latest"]])
def test_a_sparse_hole_is_not_read(sparse_logdir, command):
    if not _sparse(sparse_logdir / "orders-0" / "00000000000000000000.log"):
        _no_holes()
    assert read_bytes_of(*command, str(sparse_logdir)) < 8 * MIB


def _sparse(path) -> bool:
    st = os.stat(path)
    return st.st_blocks * 512 < st.st_size


BATCHES = (ORACLE / "v2-none-0" / "00000000000000000000.log").read_bytes()  # 7 records in batches, 296 bytes
BLOCK = 1 << 16  # holes are whole blocks of the file system: 64 KiB is a multiple of every usual block size


def _layouts():
    """(name, [(position, bytes)], size): data written at positions, the rest a hole (or zeros)."""
    first_len = int.from_bytes(BATCHES[8:12], "big") + 12
    return [
        ("hole at the end", [(0, BATCHES)], 5 * BLOCK),
        ("data after the hole, at a block start", [(0, BATCHES), (4 * BLOCK, BATCHES)], 6 * BLOCK + 100),
        ("data after the hole, mid-block", [(0, BATCHES), (4 * BLOCK + 777, BATCHES)], 5 * BLOCK),
        ("a hole first", [(3 * BLOCK + 5, BATCHES)], 4 * BLOCK),
        ("a torn batch runs into the hole", [(0, BATCHES[:first_len + 30]), (4 * BLOCK, BATCHES)], 5 * BLOCK),
        # a batch whose offset field (8 zero bytes) lies in the hole and whose length field starts in it
        ("offset field in the hole", [(0, BATCHES[:first_len]), (4 * BLOCK, BATCHES[first_len + 8:])], 5 * BLOCK),
        ("length field straddles", [(0, BATCHES[:first_len]), (4 * BLOCK, BATCHES[first_len + 10:])], 5 * BLOCK),
        ("length field's last byte", [(0, BATCHES[:first_len]), (4 * BLOCK, BATCHES[first_len + 11:])], 5 * BLOCK),
        ("nothing but a hole", [], 4 * BLOCK),
        ("two holes", [(0, BATCHES), (3 * BLOCK + 50, BATCHES), (7 * BLOCK + 3, BATCHES[:100])], 9 * BLOCK),
    ]


def _write(path, parts, size, sparse: bool) -> None:
    with open(path, "wb") as f:
        if not sparse:
            f.write(bytes(size))
        for at, data in parts:
            f.seek(at)
            f.write(data)
        f.truncate(size)


def _items(path, **kw):
    from kltool.storage.scan import BatchRun, Damage, walk

    out = []
    for x in walk(path, **kw):
        if isinstance(x, Damage):
            out.append(("damage", x.kind, x.position, x.length, x.message, x.resumed_at))
        elif isinstance(x, BatchRun):
            out.append(("run", x.position, x.end, x.batches, x.records, x.last_offset))
        else:
            out.append(("batch", x.position, x.size, x.base_offset, x.last_offset, x.crc_valid, x.data))
    return out


@pytest.mark.parametrize("name,parts,size", _layouts(), ids=[x[0] for x in _layouts()])
def test_a_hole_walks_as_its_zeros_do(tmp_path, name, parts, size):
    """The walk of a sparse file is the walk of the same bytes written out as zeros: every batch and every
    damaged region (kind, position, length, message, where valid data resumes), with any chunk size."""
    sparse, dense = tmp_path / "sparse.log", tmp_path / "dense.log"
    _write(sparse, parts, size, True)
    _write(dense, parts, size, False)
    assert sparse.read_bytes() == dense.read_bytes()
    if not _sparse(sparse):
        _no_holes()
    for kw in ({}, {"runs": True}, {"with_data": True}, {"resync": False}, {"chunk_size": 4096},
               {"chunk_size": 100}, {"runs": True, "chunk_size": 5000}):
        assert _items(sparse, **kw) == _items(dense, **kw), kw


@pytest.mark.parametrize("name,parts,size", _layouts(), ids=[x[0] for x in _layouts()])
def test_verify_and_repair_see_a_hole_as_its_zeros(tmp_path, name, parts, size):
    """verify's findings and repair's plan (what it cuts, what it keeps after the hole) are the same for a
    sparse segment and the same bytes written out."""
    outs = []
    for sparse in (True, False):
        part = tmp_path / str(sparse) / "orders-0"
        part.mkdir(parents=True)
        _write(part / "00000000000000000000.log", parts, size, sparse)
        if sparse and not _sparse(part / "00000000000000000000.log"):
            _no_holes()
        got = []
        for args in (["verify"], ["verify", "--repair", "--dry-run"], ["verify", "--repair"], ["dump", "--records"]):
            r = subprocess.run([sys.executable, "-m", "kltool", *args, str(part.parent)], capture_output=True,
                               text=True, timeout=120)
            got.append((r.returncode, _mask(r.stdout.replace(str(part.parent), "DIR")),
                        _mask(r.stderr.replace(str(part.parent), "DIR"))))
        got.append((part / "00000000000000000000.log").read_bytes())
        outs.append(got)
    assert outs[0] == outs[1]


def _mask(text: str) -> str:
    import re

    return re.sub(r"repair-\d{8}T\d{6}-\d+-\d+|in \d+\.\d+s|\"seconds\":[\d.]+", "X", text)


def test_the_backup_of_a_cut_hole_is_a_hole(sparse_logdir):
    """Repair cuts the hole (zero_run) and backs it up: the backup has the same bytes, and is as sparse as
    the segment was (a 64 MiB hole is not 64 MiB of backup on disk); restore gives the segment back."""
    log = sparse_logdir / "orders-0" / "00000000000000000000.log"
    if not _sparse(log):
        _no_holes()
    original = log.read_bytes()
    r = subprocess.run([sys.executable, "-m", "kltool", "verify", "--repair", str(sparse_logdir)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert log.read_bytes() == original[:296]
    backups = [p for p in sparse_logdir.parent.rglob("*") if p.is_file() and p.stat().st_size == 64 * MIB - 296]
    assert len(backups) == 1, sorted(sparse_logdir.parent.rglob("*"))
    assert backups[0].stat().st_blocks * 512 < 1 * MIB
    assert backups[0].read_bytes() == original[296:]
    manifest = next(sparse_logdir.parent.rglob("manifest.json"))
    r = subprocess.run([sys.executable, "-m", "kltool", "restore", str(manifest)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert log.read_bytes() == original


def _index_dir(root, sparse: bool, size: int = 64 * MIB, txn: bool = False):
    """orders-0 of v2-multi-segment-0 (segments 0, 400, 800) with its indexes rebuilt, then every index file
    (and with ``txn`` a .txnindex of segment 400) extended to ``size``: a sparse trailing hole, or the same zeros
    written."""
    part = root / "orders-0"
    part.mkdir(parents=True)
    for p in (ORACLE / "v2-multi-segment-0").glob("*.log"):
        (part / p.name).write_bytes(p.read_bytes())
    subprocess.run([sys.executable, "-m", "kltool", "-q", "rebuild-index", "--backup-dir", str(root.parent / "bk"),
                    str(root)], check=True, capture_output=True, timeout=120)
    if txn:
        (part / "00000000000000000400.txnindex").write_bytes(b"")
    for f in sorted(part.glob("*index")):
        with open(f, "r+b") as fh:
            if sparse:
                fh.truncate(size)
            else:
                fh.seek(0, 2)
                left = size - fh.tell()
                while left > 0:
                    fh.write(bytes(min(left, MIB)))
                    left -= MIB
    return part


INDEX_COMMANDS = [["verify"], ["--json", "verify"], ["info"], ["offsets", "--time", "1700000000500"],
                  ["dump", "--from-offset", "500", "--limit", "3"], ["transactions"], ["producers"],
                  ["verify", "--repair", "--dry-run"], ["rebuild-index", "--dry-run"]]


def test_a_preallocated_index_is_read_for_what_it_holds(tmp_path):
    """Found by the adversary campaign: an untrimmed index is a few entries and a hole as long as
    segment.index.bytes (Kafka allows up to 2 GiB). Every index reader read the whole file into memory (1 GiB
    .index and .timeindex: 2.6-3.7 GB resident and 15-50 s per command; a 1 GiB .txnindex: over 60 s and 2 GB for
    verify, transactions, producers, repair): the trailing hole is not read now (read_bytes_of) and every
    command says what it said for the same zeros written out (the entry counts of the zero tail included)."""
    sparse = _index_dir(tmp_path / "s" / "kafka-logs", True)
    if not _sparse(sparse / "00000000000000000000.index"):
        _no_holes()
    dense = _index_dir(tmp_path / "d" / "kafka-logs", False)
    for args in INDEX_COMMANDS:
        assert read_bytes_of(*args, str(sparse.parent)) < 8 * MIB, args
        outs = []
        for part in (sparse, dense):
            r = subprocess.run([sys.executable, "-m", "kltool", *args, str(part.parent)], capture_output=True,
                               text=True, timeout=300)
            outs.append((r.returncode, _mask(r.stdout.replace(str(part.parent), "DIR")),
                         _mask(r.stderr.replace(str(part.parent), "DIR"))))
        assert outs[0] == outs[1], args
    for f in sorted(sparse.glob("*index")):
        assert read_bytes_of("dump", "--index-sanity-check", str(f)) < 8 * MIB, f


def test_a_sparse_txnindex_is_read_for_what_it_holds(tmp_path):
    """The same for a .txnindex extended by a hole (Kafka never preallocates one: a damaged or hostile file).
    Its zero entries past the first are not read: one zero entry stands for them (they are all alike; the same
    zeros written out are still read one by one, one finding each)."""
    part = _index_dir(tmp_path / "kafka-logs", True, txn=True)
    txn = part / "00000000000000000400.txnindex"
    if not _sparse(txn):
        _no_holes()
    for args in [*INDEX_COMMANDS, ["dump", str(txn)]]:
        assert read_bytes_of(*args, *([] if args[0] == "dump" and len(args) == 2 else [str(part.parent)])) \
            < 8 * MIB, args
    r = subprocess.run([sys.executable, "-m", "kltool", "--json", "verify", str(part.parent)], capture_output=True,
                       text=True, timeout=300)
    found = [ln for ln in r.stdout.splitlines() if '.txnindex"' in ln]
    assert sum("less than start offset 400" in ln for ln in found) == 1, found
    assert sum("4 trailing bytes" in ln and f'"position":{64 * MIB - 4}' in ln for ln in found) == 1, found
