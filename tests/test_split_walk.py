"""The parallel walk (``scan._split_walk``, verify's path over a large file on more than one CPU) yields
exactly what the sequential walk yields, batch for batch and in order: on every fixture, on generated and
damaged segments, where a part's start is not a batch start, where offsets do not follow at a part's
start, when a part's thread holds its most items, and when the reader stops early (no thread or open
file is left).

Here the parts are made small (``SPLIT_PART``) so that small files are split; the CPU count is set so
that up to four threads run, whatever the machine has."""

from __future__ import annotations

import contextlib
import os
import random
import struct
import subprocess
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kltool.format import build_batch, speedups
from kltool.storage import scan
from kltool.storage.scan import BatchRun, Damage, walk

from .conftest import FIXTURES, ORACLE, REAL
from .test_speedups import compiled, make_partition, verify_result  # noqa: F401 (compiled: autouse, the C walker on)

TS = 1_700_000_000_000


@contextlib.contextmanager
def split(cpus=4, part=1, items=None):
    """Split every walk with runs into up to ``cpus`` parts of at least ``part`` bytes (None: the shipped
    size), a part's thread holding up to ``items`` items."""
    assert speedups.C is not None  # (the parallel walk needs the C walker: else both walks are one pass)
    saved = scan._CPUS, scan.SPLIT_PART, scan._PART_ITEMS
    scan._CPUS = cpus
    if part is not None:
        scan.SPLIT_PART = part
    if items is not None:
        scan._PART_ITEMS = items
    try:
        yield
    finally:
        scan._CPUS, scan.SPLIT_PART, scan._PART_ITEMS = saved


def _items(x, out, totals):
    """Batch for batch: which items hold a batch depends on where the walker's window ends (a batch across
    it goes the Python way, as a header; a part's start is such an end), not what is walked. So a run is
    its batches (from its columns) and a plain valid v2 header is the same tuple; the rest as they are."""
    if type(x) is BatchRun:
        pos, base, last, mts = x.columns()
        epoch = x.first()[2]  # (a run's first() reads the walker's buffer: now, before the walk resumes)
        assert len(pos) == x.batches and base[0] == x.first()[0] and last[-1] == x.last_offset
        out += [("batch", *t, epoch) for t in zip(pos, base, last, mts, strict=True)]
        totals[0] += x.batches
        totals[1] += x.records
        totals[2] += x.size
    elif type(x) is Damage:
        out.append(("damage", x.kind, x.position, x.length, x.message, x.resumed_at))
    else:
        if x.magic == 2 and x.crc_valid and not x.is_control:
            out.append(("batch", x.position, x.base_offset, x.last_offset, x.max_timestamp, x.partition_leader_epoch))
        else:
            out.append(("other", *(getattr(x, a) for a in type(x).__slots__)))
        totals[0] += 1
        totals[1] += x.count or 0
        totals[2] += x.size


def walked(path, **kw):
    """(batches, totals, bytes of progress) of walk(path, runs=True, **kw)."""
    done = [0]

    def progress(n):
        done[0] += n

    out = []
    totals = [0, 0, 0]
    for x in walk(path, runs=True, progress=progress, want_cols=True, **kw):
        _items(x, out, totals)
    return out, totals, done[0]


def parts(path, cpus=4, part=1, **kw) -> int:
    """How many parts the walk of ``path`` is split into."""
    with split(cpus=cpus, part=part):
        return len(scan._split_points(path, 0, path.stat().st_size, scan.CHUNK)) - 1


def same_both_ways(path, expect_split=None, items=None, cpus=4, part=1, **kw):
    """The walk split as asked gives what the sequential walk gives; whether it was split."""
    with split(cpus=1):
        ref = walked(path, **kw)
    with split(cpus=cpus, part=part, items=items):
        got = walked(path, **kw)
    assert got == ref
    assert not [t for t in threading.enumerate() if t.name == "kltool-walk"]
    was_split = parts(path, cpus, part) > 1
    if expect_split is not None:
        assert was_split == expect_split
    return was_split


def _logs():
    out = []
    for root in (FIXTURES / "sample-logdir", REAL, ORACLE):
        out += sorted(p for p in root.rglob("*.log") if p.stat().st_size > 200)
    return out


LOGS = _logs()


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_split_walk_same_as_sequential_on_every_fixture(path):
    base = int(path.stem) if path.stem.isdigit() else None
    same_both_ways(path, base_offset=base)
    same_both_ways(path, base_offset=base, prev_last=base - 1 if base else None, chunk_size=4096, items=2)


def test_most_fixtures_are_split():
    """The comparison above is not vacuous: most fixtures are split (not those of v0/v1 messages, whose
    parts would be Python's work in each thread)."""
    split_ones = sum(parts(p) > 1 for p in LOGS)
    assert split_ones >= len(LOGS) * 3 // 5


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), n=st.integers(1, 60), mutate=st.integers(0, 4), cpus=st.integers(2, 4),
       items=st.sampled_from([1, 3, 4096]), chunk=st.sampled_from([512, 4096, 1 << 20]))
def test_split_walk_same_as_sequential_on_generated_damaged_segments(tmp_path, seed, n, mutate, cpus, items, chunk):
    d = make_partition(tmp_path, seed, n, mutate, index=False)
    same_both_ways(d / f"{0:020d}.log", cpus=cpus, items=items, chunk_size=chunk, base_offset=0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), n=st.integers(1, 40), mutate=st.integers(0, 3), index=st.booleans())
def test_verify_findings_same_split_or_not(tmp_path, seed, n, mutate, index):
    d = make_partition(tmp_path, seed, n, mutate, index)
    with split(cpus=1):
        ref = verify_result(d, False)
    with split():
        assert verify_result(d, False) == ref


def _batches(first, n, value=b"v" * 40):
    return b"".join(build_batch([(0, TS + i, b"k", value, ())], base_offset=first + i) for i in range(n))


def test_a_part_found_inside_a_batch_goes_back_to_the_sequential_walk(tmp_path):
    """A record's value holds a whole valid batch: the place found for the second part is inside the
    batch that holds it. The first part then ends in a batch cut short, and the walk goes on
    sequentially from that batch: the same items, the outer batch read whole."""
    inner = build_batch([(0, TS, b"inner", b"x" * 100, ())], base_offset=10_000)
    outer = build_batch([(0, TS, b"k", b"\xff" * 100_000 + inner + b"\xff" * 1000, ())], base_offset=20)
    data = _batches(0, 20) + outer + _batches(21, 20)
    p = tmp_path / f"{0:020d}.log"
    p.write_bytes(data)
    outer_at = len(_batches(0, 20))
    with split(cpus=2, part=len(data) // 2):
        points = scan._split_points(p, 0, len(data), scan.CHUNK)
    assert len(points) == 3 and outer_at < points[1] < outer_at + len(outer)  # inside the outer batch
    assert data[points[1]:points[1] + len(inner)] == inner
    same_both_ways(p, cpus=2, base_offset=0)
    with split(cpus=2, part=len(data) // 2):
        items, totals, _ = walked(p, base_offset=0)
    assert {x[0] for x in items} == {"batch"} and totals[0] == 41  # all 41 batches, none damaged


def test_offsets_that_do_not_follow_at_a_part_start(tmp_path):
    """The second half repeats the first half's offsets: the sequential walk hands those batches to
    Python (an offset_order finding each); the part's thread, which starts without a previous offset,
    saw runs. The walk notices at the join and goes on sequentially: the same items and findings."""
    half = _batches(0, 300)
    p = tmp_path / f"{0:020d}.log"
    p.write_bytes(half + half)
    assert same_both_ways(p, cpus=2, expect_split=True, base_offset=0)
    with split(cpus=1):
        ref = verify_result(p, False)
    with split(cpus=2):
        got = verify_result(p, False)
    assert got == ref and any(f["kind"] == "offset_order" for f in got[0])


def test_damage_in_each_part(tmp_path):
    """A flipped bit, a zero run and a cut in different parts; each one's Damage or failing batch is where
    the sequential walk puts it, and so is everything after it."""
    data = bytearray(_batches(0, 800, value=b"v" * 200))
    rnd = random.Random(5)
    for lo, hi in ((0.1, 0.2), (0.4, 0.5), (0.7, 0.8)):
        at = rnd.randrange(int(len(data) * lo), int(len(data) * hi))
        data[at] ^= 0x10
    z = int(len(data) * 0.6)
    data[z:z + 3000] = bytes(3000)
    p = tmp_path / f"{0:020d}.log"
    p.write_bytes(bytes(data[:-77]))
    for cpus in (2, 3, 4):
        assert same_both_ways(p, cpus=cpus, expect_split=True, base_offset=0)
        same_both_ways(p, cpus=cpus, items=1, chunk_size=2048, base_offset=0)


def _open_on(p) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            n += os.readlink(f"/proc/self/fd/{fd}") == str(p)
    return n


def test_a_walk_left_early_leaves_no_thread_and_no_open_file(tmp_path):
    """The reader stops after the first item: the parts' threads (paused after one item each, their files
    open) are ended and their files closed."""
    p = tmp_path / f"{0:020d}.log"
    p.write_bytes(_batches(0, 2000))
    assert parts(p) == 4
    with split(cpus=4, items=1):
        it = walk(p, runs=True, chunk_size=4096)
        assert type(next(it)) is BatchRun
        assert _open_on(p) >= 2  # the first part's walk and the paused later ones
        it.close()
    assert _open_on(p) == 0
    assert not [t for t in threading.enumerate() if t.name == "kltool-walk"]


def test_a_large_file_is_split_at_the_default_sizes(tmp_path):
    """At the shipped sizes (SPLIT_PART), a file of twice that is walked in two parts on two CPUs."""
    p = tmp_path / f"{0:020d}.log"
    one = bytearray(build_batch([(i, TS, b"k", b"v" * 1000, ()) for i in range(1000)], base_offset=0))
    with open(p, "wb") as f:
        for k in range(2 * scan.SPLIT_PART // len(one) + 2):
            struct.pack_into(">q", one, 0, k * 1000)  # (the base offset is not under the CRC)
            f.write(one)
    with split(cpus=2, part=None):
        assert len(scan._split_points(p, 0, p.stat().st_size, scan.CHUNK)) == 3
    assert same_both_ways(p, cpus=2, part=None, expect_split=True, base_offset=0)


def test_one_cpu_allowed_is_one_pass():
    """`taskset -c 0 kltool verify` (the man page's advice beside a busy broker): the walk counts the CPUs
    the process may run on, so it does not split."""
    code = "from kltool.storage import scan; print(scan._CPUS)"
    one = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    assert one.stdout.strip() == "1"


def test_a_failing_batch_that_ends_just_before_a_part(tmp_path):
    """A batch failing its CRC ends a few bytes before the next part's start. Within its part (which ends
    there) the walk takes those few bytes for a short tail and yields the batch; the whole file's walk
    sees garbage after it and yields one damaged region up to the next part's batch. The failing batch
    sends the walk back to one pass, so it reports the region."""
    big = bytearray(build_batch([(0, TS, b"k", b"x" * 20_000, ())], base_offset=50))
    big[5000] ^= 0x01  # in its records: the CRC fails
    head = _batches(0, 50)
    data = head + bytes(big) + b"\xff" * 10 + _batches(51, 50)
    p = tmp_path / f"{0:020d}.log"
    p.write_bytes(data)
    nxt = len(head) + len(big) + 10
    with split(cpus=2, part=len(data) // 2):
        assert scan._split_points(p, 0, len(data), scan.CHUNK) == [0, nxt, len(data)]
    assert same_both_ways(p, cpus=2, part=len(data) // 2, expect_split=True, base_offset=0)
    with split(cpus=1):
        items = walked(p, base_offset=0)[0]
    assert ("damage", "garbage") in {x[:2] for x in items}
