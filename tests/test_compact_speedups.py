"""kltool compact's C offset map and record filter (offmap.c) give exactly what the pure-Python reference
gives: the same files byte for byte and the same plan, pass after pass, across codecs, tombstones and their
horizons, transactions, keyless and long keys, headers, LogAppendTime, v0/v1 messages and a full map."""

from __future__ import annotations

import contextlib
import random
import shutil
import struct

import pytest

from kltool.errors import CorruptDataError
from kltool.format import _speedups, decode_records, parse_header, speedups
from kltool.format import batch as fbatch
from kltool.format.batch import build_v2_batch
from kltool.format.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from kltool.format.legacy import build_legacy_batch
from kltool.format.speedups import crc32c
from kltool.storage.change import cleaner
from kltool.storage.change import compact as cp
from kltool.storage.logdir import open_paths

from .compact_data import DAY, T0, Log, read_records
from .test_speedups import compiled  # noqa: F401 (autouse: the compiled paths on even under KLTOOL_NO_SPEEDUPS=1)


@contextlib.contextmanager
def pure():
    saved = speedups.C, fbatch._c_decode_v2
    speedups.C = fbatch._c_decode_v2 = None
    try:
        yield
    finally:
        speedups.C, fbatch._c_decode_v2 = saved


def test_siphash_is_the_papers():
    """SipHash-2-4 (Aumasson and Bernstein): the paper's 64-bit vector and the reference 128-bit one."""
    key = bytes(range(16))
    assert _speedups.siphash_test(bytes(range(15)), key, False)[0] == 0xA129CA6149BE45E5
    h0, h1 = _speedups.siphash_test(b"", key, True)
    assert (h0.to_bytes(8, "little") + h1.to_bytes(8, "little")).hex() == "a3817f04ba25a8e66df67214c7550293"


def test_the_table_is_the_dedupe_buffer_and_holds_keys_by_their_bytes():
    m = cleaner.OffsetMap(24 * 100)
    assert m.table is not None and m.slots == 100 and m.capacity == 90
    t = m.table
    for i in range(90):
        _speedups.offmap_put_key(t, b"k%d" % i, i)
    _speedups.offmap_put_key(t, b"k3", 500)
    assert len(m) == 90 and m.get(b"k3") == 500 and m.get(b"k89") == 89 and m.get(b"nope") == -1
    assert m.get(b"") == -1
    _speedups.offmap_put_key(t, b"", 7)
    assert m.get(b"") == 7 and len(m) == 91
    for i in range(91, 99):
        _speedups.offmap_put_key(t, b"k%d" % i, i)
    with pytest.raises(RuntimeError):  # never past the last free cell (the caller stops at the capacity)
        _speedups.offmap_put_key(t, b"one more", 1)


def _random_log(root, rnd: random.Random, batches: int, keys: int, legacy: bool) -> Log:
    log = Log(root, {"segment.bytes": "3000", "delete.retention.ms": str(DAY)})
    if legacy:  # v0/v1 messages at the log's start (an upgraded topic), some compressed
        for i in range(12):
            recs = [(j, T0 + i, b"key-%d" % rnd.randrange(keys), None if rnd.random() < 0.2 else b"v%d" % i)
                    for j in range(rnd.randint(1, 3))]
            codec = rnd.choice([NONE, GZIP])
            log.w.append(build_legacy_batch(recs, base_offset=log.next, magic=1 if i % 3 else 0,
                                            compression=codec))
            log.next += len(recs)
    for _ in range(batches):
        n = rnd.randint(1, 6)
        recs = []
        for _ in range(n):
            r = rnd.random()
            k = None if r < 0.05 else b"" if r < 0.07 else (b"long-key-%d-" % rnd.randrange(keys)) * 3 if r < 0.2 \
                else b"key-%d" % rnd.randrange(keys)
            v = None if rnd.random() < 0.15 else b"v%d" % rnd.randrange(10**6)
            recs.append((k, v))
        kw = {"compression": rnd.choice([NONE, NONE, GZIP, LZ4, SNAPPY, ZSTD])}
        if rnd.random() < 0.3:
            kw["headers"] = [("h", b"x"), ("n", None)] if rnd.random() < 0.5 else [("only", b"")]
        if rnd.random() < 0.1:
            kw["log_append_time"] = T0 + log.next + 5
        roll = rnd.random()
        if roll < 0.08:
            pid = 100 + rnd.randrange(3)
            log.data(recs, pid=pid, txn=True, **kw)
            log.marker(pid, commit=False)
        elif roll < 0.16:
            pid = 200 + rnd.randrange(3)
            log.data(recs, pid=pid, txn=True, **kw)
            log.marker(pid, commit=True)
        elif roll < 0.3:
            log.data(recs, pid=300 + rnd.randrange(3), **kw)
        else:
            log.data(recs, **kw)
    log.close()
    return log


def _files(part) -> dict:
    return {p.name: p.read_bytes() for p in sorted(part.iterdir())}


def _pass(root, now, dedupe):
    policy = cp.Policy(now=now, dedupe_buffer_size=dedupe)
    plan = cp.plan_compaction(open_paths([str(root)]), policy, dry_run=False)
    out = plan.partitions[0].to_json()
    if plan.has_work:
        cp.apply_compaction(plan, backup=False)
    return {k: v for k, v in out.items() if k != "path"}


@pytest.mark.parametrize("seed,dedupe,legacy", [(1, 24 * 1000, False), (2, 24 * 1000, True), (3, 24 * 40, False),
                                                (4, 24 * 25, True), (5, 24 * 1000, False)])
def test_c_and_reference_compact_alike_pass_after_pass(tmp_path, seed, dedupe, legacy):
    rnd = random.Random(seed)
    log = _random_log(tmp_path / "src", rnd, 160, 40, legacy)
    a, b = tmp_path / "c", tmp_path / "py"
    shutil.copytree(log.root, a)
    shutil.copytree(log.root, b)
    now = T0 + 10_000
    full = 0
    for step in range(5):  # the later passes go on after a full map, then past the tombstones' horizon
        when = now + step * DAY // 2
        plan_c = _pass(a, when, dedupe)
        with pure():
            plan_py = _pass(b, when, dedupe)
        assert plan_c == plan_py, step
        assert _files(a / "t-0") == _files(b / "t-0"), step
        full += plan_c["map_full"]
    if dedupe < 24 * 100:
        assert full, "the small map should have filled"
    assert read_records(a / "t-0") == read_records(b / "t-0")


@pytest.mark.parametrize("delta", [1, -1])
def test_malformed_records_are_the_reference_decoders_error(tmp_path, delta):
    """A batch whose CRC holds but whose records are not ``count`` well-formed ones: the C walk hands it to
    the decoder, whose error (file and position) refuses the partition in both modes."""
    log = Log(tmp_path / "ld", {"segment.bytes": "1000"})
    log.data([(b"k", b"v"), (b"j", b"w")])
    for i in range(20):
        log.data([(b"k%d" % i, b"v")])
    log.close()
    seg = sorted(log.dir.glob("*.log"))[0]
    raw = bytearray(seg.read_bytes())
    struct.pack_into(">i", raw, 57, 2 + delta)  # the first batch's record count
    struct.pack_into(">I", raw, 17, crc32c(memoryview(raw)[21:parse_header(bytes(raw), 0, check_crc=False).size]))
    seg.write_bytes(bytes(raw))
    errors = []
    for mode in (contextlib.nullcontext, pure):
        with mode(), pytest.raises(CorruptDataError) as e:
            cp.plan_compaction(open_paths([str(log.root)]), cp.Policy(now=T0 + 10**6), dry_run=True)
        errors.append(str(e.value))
    assert errors[0] == errors[1]
    assert str(seg) in errors[0] and ("premature EOF" in errors[0] or "remaining" in errors[0]), errors[0]


def test_record_classes_and_kept_records_match_the_reference():
    """offmap_classes and retained_records against record_classes and the reference rebuild, batch by batch."""
    rnd = random.Random(7)
    m_c = cleaner.OffsetMap(24 * 200)
    with pure():
        m_py = cleaner.OffsetMap(24 * 200)
    for m in (m_c, m_py):
        m.latest = 60
    m_py.start = 10**9  # the map below is made up: no batch is one whose every key went into it (winners)
    for i in range(40):  # the map: key-i at offset 2 * i
        key = b"key-%d" % (i % 25)
        _speedups.offmap_put_key(m_c.table, key, 2 * i)
        m_py.entries[key] = 2 * i
    for trial in range(200):
        base = rnd.randrange(0, 80)
        recs = []
        for j in range(rnd.randint(1, 8)):
            k = None if rnd.random() < 0.1 else b"key-%d" % rnd.randrange(30)
            v = None if rnd.random() < 0.3 else b"val%d" % j
            hs = [(b"h", b"1")] if rnd.random() < 0.3 else []
            recs.append((j, T0 + rnd.randrange(-5, 50), k, v, hs))
        lat = T0 + 99 if rnd.random() < 0.2 else None
        data = build_v2_batch(recs, base_offset=base, log_append_time=lat, compression=rnd.choice([NONE, ZSTD]),
                              producer_id=5, producer_epoch=1, base_sequence=3)
        h = parse_header(data, 0)
        h.data = data
        cols = decode_records(h, data)
        c_recs = cleaner._Records(h, m_c, data_batch=True)
        expected = cleaner.record_classes(cols, m_py, h)
        assert c_recs.classes() == expected, trial
        keep = cleaner._retained(expected, rnd.random() < 0.5, cleaner.CleanStats())[0]
        if not any(keep >> c & 1 for c in expected):
            continue
        horizon = T0 + DAY if rnd.random() < 0.5 else None
        got = c_recs.rebuild(keep, horizon)
        py_recs = cleaner._Records(h, m_py, data_batch=True)
        assert py_recs.data is None
        assert got == py_recs.rebuild(keep, horizon), trial


@pytest.mark.parametrize("compiled_map", [True, False])
def test_memory_is_the_table_not_a_python_object_per_key(compiled_map):
    """A million keys in a 32 MiB map: with the C table Python allocates next to nothing and the process grows
    by at most the table; the reference's dict takes over 100 bytes a key (why it is not the default; shown
    on 100 k keys, the reference decoder being slow)."""
    import resource
    import tracemalloc

    data = [build_v2_batch([(i, T0, b"key-%07d" % (c * 1000 + i), b"1", []) for i in range(1000)],
                           base_offset=c * 1000) for c in range(1000 if compiled_map else 100)]
    headers = []
    for d in data:
        h = parse_header(d, 0)
        h.data = d
        headers.append(h)
    with contextlib.nullcontext() if compiled_map else pure():
        m = cleaner.OffsetMap(32 << 20)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    try:
        for h in headers:
            assert not m.put_batch(h, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(m) == 1000 * len(data)
    if compiled_map:
        assert peak < 1 << 20
        assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024 <= (32 << 20) + (8 << 20)
    else:
        assert peak > 100 * len(m)
