"""An index too big to hold is read on demand, a chunk at a time, and says what its bytes say.

:func:`kltool.storage.fs.read_index_file` holds an index's bytes only up to ``INDEX_READ_WHOLE``; past that it
returns a :class:`~kltool.storage.fs.FileBytes` (alone or as a ZeroPadded's head), and the index functions
return :class:`~kltool.format.index.IndexEntries` decoded a chunk at a time. Here the limit is 0 and the chunk
3 entries, so every index of the fixtures and the damaged ones made from them go the on-demand way, chunk
boundaries everywhere: every answer must be the one the held bytes give. (The memory figures, with real 1 GiB
files of garbage, are in test_bounded_memory.py.)"""

from __future__ import annotations

import os
import random
import shutil
import struct
from pathlib import Path

import pytest

from kltool.format import index as fidx
from kltool.format.index import MAX_LISTED
from kltool.storage import fs
from kltool.storage.check.index_check import IndexChecker
from kltool.storage.scan import walk

from .conftest import FIXTURES, REAL

SEG0 = "00000000000000000000"


def _fixture_indexes() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".index", ".timeindex") and p.stat().st_size)


def _variants(data: bytes, size: int) -> dict[str, bytes]:
    """Damaged versions of an index's bytes: garbage, out of order, a partial entry, a zero tail, a zero entry
    in the middle ..."""
    rnd = random.Random(len(data))
    n = len(data) // size
    entries = [data[i * size:(i + 1) * size] for i in range(n)]
    shuffled = entries[:]
    rnd.shuffle(shuffled)
    out = {
        "as-is": data,
        "garbage": rnd.randbytes(max(len(data), 40 * size)),
        "ff": b"\xff" * max(len(data), 40 * size),
        "shuffled": b"".join(shuffled),
        "partial": data + b"\1\2\3",
        "zero-tail": data + bytes(7 * size),
        "zero-tail-partial": data + bytes(7 * size + 5),
        "zero-in-middle": b"".join(entries[: n // 2]) + bytes(size) + b"".join(entries[n // 2:]),
        "garbage-then-zeros": rnd.randbytes(17 * size + 3) + bytes(50 * size),
        "zeros-then-garbage": bytes(9 * size) + rnd.randbytes(5 * size),
    }
    return out


def _cases():
    seen = set()
    for p in _fixture_indexes():
        data = p.read_bytes()
        if data in seen:
            continue
        seen.add(data)
        size = fidx.OFFSET_ENTRY if p.suffix == ".index" else fidx.TIME_ENTRY
        for name, content in _variants(data, size).items():
            yield pytest.param(p.suffix, content, id=f"{p.parent.name}/{p.name}-{name}")


@pytest.fixture
def on_demand(monkeypatch):
    """Every index read on demand, 3 entries a chunk."""
    monkeypatch.setattr(fs, "INDEX_READ_WHOLE", 0)
    monkeypatch.setattr(fidx, "CHUNK_ENTRIES", 3)


@pytest.mark.parametrize(("suffix", "content"), list(_cases()))
def test_an_index_read_on_demand_says_what_its_bytes_say(tmp_path, on_demand, suffix, content):
    f = tmp_path / f"{SEG0}{suffix}"
    f.write_bytes(content)
    lazy = fs.read_index_file(f)
    held = fs.read_index_file(f, whole_up_to=1 << 40)
    assert (lazy[:] if isinstance(lazy, fs.FileBytes) else lazy) == content and held == content
    if content.rstrip(b"\0"):
        assert isinstance(lazy, fs.FileBytes) or isinstance(lazy.head, fs.FileBytes)
    base = 1000
    if suffix == ".index":
        fns = (fidx.offset_index_entries, fidx.parse_offset_index, fidx.offset_index_zero_tail,
               fidx.check_offset_index, fidx.lookup_offset)
    else:
        fns = (fidx.time_index_entries, fidx.parse_time_index, fidx.time_index_zero_tail, fidx.check_time_index,
               fidx.lookup_time)
    entries, every, zero_tail, check, lookup = fns
    want = entries(held, base)
    got = entries(lazy, base)
    assert isinstance(want, list) and isinstance(got, fidx.IndexEntries)
    assert list(got) == want and got == want and len(got) == len(want) and bool(got) == bool(want)
    assert [got[i] for i in range(len(want))] == want  # walking forward, chunk by chunk
    assert [got[i] for i in reversed(range(len(want)))] == want[::-1]  # one entry at a time
    assert list(got[2:]) == want[2:] and list(got[1:-1][1:]) == want[1:-1][1:] and list(got[5:2]) == []
    if want:
        assert got[-1] == want[-1]
    assert list(every(lazy, base)) == every(held, base)
    assert zero_tail(lazy) == zero_tail(held)
    assert check(lazy, base, path="x") == check(held, base, path="x")
    keys = sorted({k for e in want[:50] for k in e} | {-1, 0, base, 2**40})
    for k in keys:
        assert lookup(got, k, base) == lookup(want, k, base)
    for n in (0, 3, len(content) // 2, len(content)):
        part = fidx.prefix(lazy, n)
        assert (part[:] if isinstance(part, fs.FileBytes) else part) == content[:n]


def _segment(tmp_path: Path) -> Path:
    d = tmp_path / "p-0"
    shutil.copytree(REAL / "william0423-indexed-zk" / "__consumer_offsets-28", d)
    return d / f"{SEG0}.log"


def _judge(log: Path, *, runs: bool) -> list[tuple]:
    ic = IndexChecker(0, log.with_suffix(".index"), log.with_suffix(".timeindex"), log_size=log.stat().st_size)
    for x in walk(log, runs=runs, want_cols=runs):
        if runs and type(x).__name__ == "BatchRun":
            ic.run(x)
        elif not runs or x.crc_valid:
            ic.batch(x)
    return [(f.severity, f.kind, f.file, f.message, f.position, f.offset) for f in ic.finish()]


@pytest.mark.parametrize("which", [".index", ".timeindex"])
@pytest.mark.parametrize("variant", ["garbage", "ff", "shuffled", "partial", "zero-in-middle", "zeros-then-garbage"])
def test_the_judge_finds_the_same_in_an_index_read_on_demand(tmp_path, monkeypatch, which, variant):
    log = _segment(tmp_path)
    f = log.with_suffix(which)
    size = fidx.OFFSET_ENTRY if which == ".index" else fidx.TIME_ENTRY
    f.write_bytes(_variants(f.read_bytes(), size)[variant][: 200 * size])
    for runs in (False, True):
        held = _judge(log, runs=runs)
        monkeypatch.setattr(fs, "INDEX_READ_WHOLE", 0)
        monkeypatch.setattr(fidx, "CHUNK_ENTRIES", 7)
        assert _judge(log, runs=runs) == held
        monkeypatch.undo()


def test_a_garbage_index_lists_so_many_mismatches_then_says_the_rest_is_not_checked(tmp_path):
    # a finding per entry of garbage was unbounded (a 1 GiB file: 134 M of them); past MAX_LISTED the rest of
    # that index is not checked, and a note says so
    log = _segment(tmp_path)
    n = MAX_LISTED * 3
    log.with_suffix(".index").write_bytes(b"".join(struct.pack(">ii", 7 + i, 5 + 9 * i) for i in range(n)))
    for runs in (False, True):
        found = _judge(log, runs=runs)
        mism = [f for f in found if f[1] == "index_mismatch"]
        notes = [f for f in found if f[1] == "index_unchecked"]
        assert len(mism) == MAX_LISTED, len(mism)
        assert len(notes) == 1 and notes[0][0] == "info" and f"of {n}," in notes[0][3], notes
        assert found[-1] == notes[0]


def test_a_file_replaced_while_read_on_demand_is_an_error_not_mixed_bytes(tmp_path):
    f = tmp_path / f"{SEG0}.index"
    f.write_bytes(struct.pack(">ii", 1, 2) * 100)
    data = fs.read_index_file(f, whole_up_to=0)
    assert data[8:16] == struct.pack(">ii", 1, 2)
    tmp = tmp_path / "new"
    tmp.write_bytes(struct.pack(">ii", 3, 4) * 100)
    os.replace(tmp, f)
    with pytest.raises(OSError, match="changed while it was read"):
        data[8:16]


# ------------------------------------------------------------------------------------------- .txnindex

TXN = fidx.TXN_ENTRY
KRAFT_TXN = FIXTURES / "kafka4.4-kraft" / "parity-0" / f"{SEG0}.txnindex"


def _txn_variants() -> dict[str, bytes]:
    data = KRAFT_TXN.read_bytes() + b"".join(fidx.encode_aborted_txn(6 + i, 90 + i, 95 + i, 96) for i in range(9))
    out = _variants(data, TXN)
    out["zero-run-partial"] = data + bytes(40 * TXN + 11)
    out["zero-run-then-entry"] = data + bytes(40 * TXN) + data[:TXN]
    return out


@pytest.mark.parametrize("base", [0, 1000])
@pytest.mark.parametrize("variant", sorted(_txn_variants()))
def test_a_txnindex_read_on_demand_says_what_its_bytes_say(tmp_path, monkeypatch, variant, base):
    content = _txn_variants()[variant]
    f = tmp_path / f"{SEG0}.txnindex"
    f.write_bytes(content)
    held = fs.read_txn_index_file(f)  # (small: held)
    monkeypatch.setattr(fs, "INDEX_READ_WHOLE", 0)
    monkeypatch.setattr(fidx, "TXN_CHUNK_ENTRIES", 3)
    lazy = fs.read_txn_index_file(f)
    assert isinstance(held, bytes)
    if content.rstrip(b"\0"):
        assert isinstance(lazy, fs.FileBytes) or isinstance(lazy.head, fs.FileBytes)
    assert len(lazy) == len(held) and fidx.trailing_bytes(lazy, TXN) == fidx.trailing_bytes(held, TXN)
    assert list(fidx.iter_txn_index(lazy)) == fidx.parse_txn_index(lazy) == fidx.parse_txn_index(held)
    assert fidx.check_txn_index(lazy, base, path="x") == fidx.check_txn_index(held, base, path="x")
    assert fidx.txn_index_check(lazy, base, path="x", limit=2) == fidx.txn_index_check(held, base, path="x", limit=2)
    assert lazy == held and not lazy != held  # (compared by content)


def test_a_garbage_txnindex_lists_so_many_problems_then_says_the_rest_is_not_checked():
    # a message per bad entry was unbounded (a 1 GiB file of garbage: ~31 M of them); past MAX_LISTED the rest
    # is not checked, as the offset and time index checks do
    n = MAX_LISTED * 3
    data = b"".join(fidx.encode_aborted_txn(7, 1, 2, 3, version=0x100 * (1 + i % 2)) for i in range(n))
    problems, unchecked = fidx.txn_index_check(data, 0, path="x")
    assert len(problems) == MAX_LISTED and unchecked == (MAX_LISTED, n)
    assert fidx.check_txn_index(data, 0, path="x") == problems
    assert len(fidx.check_txn_index(data, 0, path="x", limit=None)) == n
    good = fidx.encode_aborted_txn(7, 1, 2, 3)
    assert fidx.txn_index_check(good * n, 0) == ([], None)  # (good entries are not counted)
    # exactly MAX_LISTED bad entries: all listed, nothing left unchecked
    assert fidx.txn_index_check(data[: MAX_LISTED * TXN], 0)[1] is None


HUGE = 4 << 30


def _sparse_txnindex(path: Path, tail: bytes) -> int:
    """The fixture's .txnindex grown to ~4 GiB (a hole), ``tail`` (a whole entry) written at its end: a file
    whose real bytes are few but not only before a zero tail. Its size."""
    shutil.copyfile(KRAFT_TXN, path)
    size = HUGE // TXN * TXN
    with open(path, "r+b") as f:
        f.truncate(size - len(tail))
        f.seek(size - len(tail))
        f.write(tail)
    return size


@pytest.mark.parametrize("base", [0, 5])
def test_a_sparse_4gib_txnindex_is_read_a_chunk_at_a_time(tmp_path, base):
    # Read whole up to its last non-zero byte: 4 GiB in memory, then decoded whole (~126 M entries). Now held
    # only when small, read on demand otherwise: tracemalloc's peak stays a few chunks.
    import tracemalloc

    f = tmp_path / f"{SEG0}.txnindex"
    tail = fidx.encode_aborted_txn(9, 1, 2, 3, version=0x300)  # (read as version 3)
    size = _sparse_txnindex(f, tail)
    real = fidx.parse_txn_index(KRAFT_TXN.read_bytes())
    tracemalloc.start()
    try:
        data = fs.read_txn_index_file(f)
        assert len(data) == size
        problems, unchecked = fidx.txn_index_check(data, base, path="x")
        head = []
        for t in fidx.iter_txn_index(data):
            head.append(t)
            if len(head) == len(real) + 2:
                break
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak >> 20
    assert head == [*real, fidx.ZERO_TXN, fidx.ZERO_TXN]
    if base:  # every zero entry's last offset 0 is below the base offset: listed, then the rest not checked
        assert len(problems) == MAX_LISTED and unchecked[1] == size // TXN
    else:  # the zero entries pass; the last one's version does not
        assert len(problems) == 1 and "version 3" in problems[0] and unchecked is None
