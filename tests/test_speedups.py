"""The C accelerator's paths give exactly what the pure-Python reference paths give: on every
fixture and on generated (and damaged) segments. ``pure()`` switches the accelerator off in-process,
as ``KLTOOL_NO_SPEEDUPS=1`` does for a whole run."""

from __future__ import annotations

import contextlib
import json
import os
import random
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kltool.format import _speedups, build_batch, speedups
from kltool.format import batch as fbatch
from kltool.format.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD

from .conftest import FIXTURES, ORACLE, REAL, ROOT


@pytest.fixture(autouse=True)
def compiled():
    """These tests compare the compiled paths with the reference ones: the compiled ones are on for
    them even under KLTOOL_NO_SPEEDUPS=1 (which the rest of the suite honours)."""
    saved = speedups.C, fbatch._c_decode_v2
    speedups.C, fbatch._c_decode_v2 = _speedups, _speedups.decode_v2
    try:
        yield
    finally:
        speedups.C, fbatch._c_decode_v2 = saved


@contextlib.contextmanager
def pure():
    saved = speedups.C, fbatch._c_decode_v2
    speedups.C = None
    fbatch._c_decode_v2 = None
    try:
        yield
    finally:
        speedups.C, fbatch._c_decode_v2 = saved


def _fixture_paths():
    out = [FIXTURES / "sample-logdir"]
    out += sorted(p for p in REAL.iterdir() if p.is_dir())
    out += sorted(p for p in ORACLE.iterdir() if p.is_dir())
    return out


def verify_result(path, deep):
    from kltool.storage import open_paths
    from kltool.storage.check.verify import VerifyStats, verify_selection

    stats = VerifyStats()
    findings = [f.to_json() for f in verify_selection(open_paths([path]), deep=deep, stats=stats)]
    return findings, {k: v for k, v in vars(stats).items() if k != "last_batches"}  # bookkeeping, not a result


# --- CRC-32C -----------------------------------------------------------------------------------

def test_crc32c_matches_the_package_in_hardware_and_table_modes():
    import crc32c as pkg

    rnd = random.Random(1)
    try:
        for hw in (1, 0):
            _speedups.hw_crc(hw)
            for n in (0, 1, 3, 7, 8, 9, 63, 255, 767, 768, 769, 1536, 2305, 10_000, 100_003):
                data = rnd.randbytes(n)
                for start in (0, 1, 5):
                    view = memoryview(data)[start:]
                    for value in (0, 1, 0xFFFFFFFF, 123456789):
                        assert _speedups.crc32c(view, value) == pkg.crc32c(bytes(view), value), (hw, n, start)
    finally:
        _speedups.hw_crc(1)


# --- verify ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", _fixture_paths(), ids=lambda p: p.name)
def test_verify_same_with_and_without_the_accelerator_on_every_fixture(path):
    for deep in (False, True):
        fast = verify_result(path, deep)
        with pure():
            ref = verify_result(path, deep)
        assert fast == ref


def _random_records(rnd, n, with_headers):
    texts = [b"", b"plain", b"caf\xc3\xa9", b"tab\there", b"quote\"back\\slash", b"\x00\x01\xff\xfe", b"\x7f",
             b"line\nbreak", "\u2028ünï".encode(), b"\xed\xa0\x80"]
    recs = []
    for i in range(n):
        k = rnd.choice([None, rnd.choice(texts), f"key-{i}".encode()])
        v = rnd.choice([None, rnd.choice(texts), rnd.randbytes(rnd.randint(0, 40))])
        hs = []
        if with_headers and rnd.random() < 0.4:
            hs = [(rnd.choice(["h", "ü", "a\tb"]), rnd.choice([None, b"x", rnd.choice(texts)]))
                  for _ in range(rnd.randint(1, 3))]
        recs.append((i, 1_700_000_000_000 + rnd.randint(-5, 5000), k, v, hs))
    return recs


def make_partition(tmp_path, seed, n_batches, mutate, index):
    """A partition dir whose one segment holds varied v2 batches (and sometimes v0/v1, compressed,
    transactional, control ones), optionally damaged and with an offset/time index."""
    from kltool.format.batch import build_end_txn_marker

    rnd = random.Random(seed)
    d = tmp_path / f"t-{seed % 7}"
    d.mkdir(parents=True, exist_ok=True)
    for f in d.iterdir():
        f.unlink()
    off = rnd.choice([0, 0, 5])
    data = bytearray()
    entries = []
    for _ in range(n_batches):
        kind = rnd.random()
        if kind < 0.05:
            b = build_end_txn_marker(offset=off, commit=True, producer_id=7, producer_epoch=0, coordinator_epoch=1,
                                     timestamp=1_700_000_000_000)
            k = 1
        elif kind < 0.1:
            recs = _random_records(rnd, rnd.randint(1, 3), False)
            b = build_batch(recs, base_offset=off, magic=rnd.choice([0, 1]), compression=rnd.choice([NONE, GZIP]))
            k = len(recs)
        else:
            recs = _random_records(rnd, rnd.randint(0 if rnd.random() < 0.05 else 1, 6), True)
            codec = rnd.choice([NONE, NONE, NONE, LZ4, ZSTD, SNAPPY, GZIP])
            b = build_batch(recs, base_offset=off, compression=codec, is_transactional=rnd.random() < 0.1,
                            producer_id=rnd.choice([-1, 3]), producer_epoch=0 if rnd.random() < 0.5 else -1,
                            base_sequence=rnd.choice([-1, 0, 2**31 - 2]),
                            log_append_time=1_700_000_001_000 if rnd.random() < 0.1 else None)
            k = max(len(recs), 1)
        if rnd.random() < 0.3:
            entries.append((off + k - 1, len(data), struct.unpack_from(">q", b, 35)[0] if b[16] == 2 else 0))
        data += b
        off += k + (rnd.randint(1, 3) if rnd.random() < 0.1 else 0)
    if rnd.random() < 0.1 and data:  # offsets out of order: a batch repeated
        data += data[:struct.unpack_from(">i", data, 8)[0] + 12]
    for _ in range(mutate):
        if not data:
            break
        what = rnd.random()
        p = rnd.randrange(len(data))
        if what < 0.6:
            data[p] ^= 1 << rnd.randrange(8)
        elif what < 0.8:
            data[p:p + rnd.randint(1, 50)] = bytes(rnd.randint(1, 50))
        else:
            del data[p:]
    (d / f"{0:020d}.log").write_bytes(bytes(data))
    if index and entries:
        base = 0
        oi = b"".join(struct.pack(">ii", o - base + rnd.choice([0, 0, 0, 1]), pos) for o, pos, _ts in entries)
        ti = b"".join(struct.pack(">qi", ts + rnd.choice([0, 0, 0, 1]), o - base) for o, _pos, ts in entries)
        (d / f"{0:020d}.index").write_bytes(oi)
        (d / f"{0:020d}.timeindex").write_bytes(ti)
    return d


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), n=st.integers(0, 40), mutate=st.integers(0, 3), index=st.booleans())
def test_verify_same_with_and_without_the_accelerator_on_generated_damaged_segments(tmp_path, seed, n, mutate,
                                                                                    index):
    d = make_partition(tmp_path, seed, n, mutate, index)
    for target in (d, d / f"{0:020d}.log"):
        for deep in (False, True):
            fast = verify_result(target, deep)
            with pure():
                ref = verify_result(target, deep)
            assert fast == ref


def test_offsets_at_the_end_of_int64_fall_back_to_python(kl, tmp_path):
    """A last offset past 2^63-1 (base offset + delta of a damaged or hostile batch) is left to the
    Python walker, which reports it as it always did: the same findings and dump, no crash."""
    d = tmp_path / "t-0"
    d.mkdir()
    top = 2**63 - 1
    recs = [(i, 1_700_000_000_000, b"k", b"v", ()) for i in range(3)]
    data = (build_batch(recs, base_offset=0) + build_batch(recs, base_offset=top - 1)
            + build_batch(recs, base_offset=5) + build_batch(recs, base_offset=top))
    (d / f"{0:020d}.log").write_bytes(data)
    for target in (d, d / f"{0:020d}.log"):
        for deep in (False, True):
            fast = verify_result(target, deep)
            with pure():
                assert verify_result(target, deep) == fast
        dump_both(kl, target, DUMP_VARIANTS[:2])


def test_walk_runs_hand_over_at_chunk_boundaries(tmp_path):
    """Small batches across many chunk boundaries (and one bigger than a chunk): the runs the C walker
    yields, expanded, are exactly the batches the Python walker yields."""
    from kltool.storage.scan import BatchRun, walk

    p = tmp_path / "a.log"
    batches = [build_batch([(0, 1_700_000_000_000 + i, b"k", b"v" * (i % 50 if i != 1500 else 5000), ())],
                           base_offset=i) for i in range(3000)]
    p.write_bytes(b"".join(batches))
    ref = [(h.position, h.size, h.base_offset, h.crc_valid) for h in walk(p)]
    for cs in (300, 1000, 4096, 1 << 20):
        got = []
        runs = 0
        for item in walk(p, runs=True, chunk_size=cs, want_cols=True):
            if isinstance(item, BatchRun):
                runs += 1
                hs = item.headers()
                pos, base, last, mts = item.columns()
                assert pos == [h.position for h in hs] and base == [h.base_offset for h in hs]
                assert last == [h.last_offset for h in hs] and mts == [h.max_timestamp for h in hs]
                assert item.records == sum(h.count for h in hs) and item.size == sum(h.size for h in hs)
                got += [(h.position, h.size, h.base_offset, h.crc_valid) for h in hs]
            else:
                got.append((item.position, item.size, item.base_offset, item.crc_valid))
        assert got == ref and runs > 0


# --- dump --records ------------------------------------------------------------------------------

DUMP_VARIANTS = [
    ("dump", "--records"),
    ("--json", "dump", "--records"),
    ("dump", "--records", "--encoding", "hex"),
    ("--json", "dump", "--records", "--encoding", "base64"),
    ("--json", "dump", "--records", "--encoding", "hex", "--limit", "7"),
    ("dump", "--records", "--from-offset", "3", "--to-offset", "12", "--limit", "5"),
    ("--json", "dump", "--records", "--from-time", "1700000000500", "--to-time", "1700000004000"),
    ("dump", "--records", "--key", "key-1"),
]


def dump_both(kl, path, variants=DUMP_VARIANTS):
    for args in variants:
        fast = kl(*args, path)
        with pure():
            ref = kl(*args, path)
        assert (fast.code, fast.out, fast.err) == (ref.code, ref.out, ref.err), args


@pytest.mark.parametrize("path", _fixture_paths(), ids=lambda p: p.name)
def test_dump_records_same_with_and_without_the_accelerator_on_every_fixture(kl, path):
    dump_both(kl, path, DUMP_VARIANTS[:4])
    for log in sorted(path.rglob("*.log"))[:3]:
        dump_both(kl, log, DUMP_VARIANTS[:2])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), n=st.integers(0, 25), mutate=st.integers(0, 2))
def test_dump_records_same_with_and_without_the_accelerator_on_generated_segments(kl, tmp_path, seed, n, mutate):
    d = make_partition(tmp_path, seed, n, mutate, False)
    dump_both(kl, d)


def test_dump_through_a_real_stdout_is_the_same(tmp_path):
    """The installed command writes the C formatter's blocks to stdout's binary layer, in order with
    the text lines around them (file headers, damage)."""
    d = make_partition(tmp_path, 11, 60, 2, False)
    exe = [sys.executable, "-c", "from kltool.cli import main; main()"]
    for args in (["dump", "--records"], ["--json", "dump", "--records"]):
        outs = []
        for env in ({}, {"KLTOOL_NO_SPEEDUPS": "1"}):
            p = subprocess.run(exe + args + [str(d), str(FIXTURES / "sample-logdir")], capture_output=True,
                               env=dict(os.environ, **env))
            outs.append((p.returncode, p.stdout, p.stderr))
        assert outs[0] == outs[1]
        assert outs[0][1].count(b"\n") > 60


# --- append's record encoder ---------------------------------------------------------------------

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=300))
_record = st.tuples(
    st.one_of(st.integers(-2, 20_000), st.integers(-2**31 - 2, 2**31 + 2)),
    st.one_of(st.integers(1_700_000_000_000 - 10**6, 1_700_000_000_000 + 10**9), st.integers(-2**63, 2**63 - 1)),
    _bytes_or_none, _bytes_or_none,
    st.one_of(st.just(()), st.lists(st.tuples(st.one_of(st.text(max_size=8), st.binary(max_size=8)),
                                              _bytes_or_none), max_size=3).map(tuple)))


def _encode(records, base_ts):
    try:
        return fbatch._encode_v2_records(records, base_ts)
    except (ValueError, UnicodeEncodeError) as e:
        return type(e).__name__


@settings(max_examples=300, deadline=None)
@given(records=st.lists(_record, max_size=20), base_ts=st.integers(-2**63, 2**63 - 1) | st.just(1_700_000_000_000))
def test_record_encoder_same_with_and_without_the_accelerator(records, base_ts):
    fast = _encode(records, base_ts)
    with pure():
        ref = _encode(records, base_ts)
    assert fast == ref


def test_record_encoder_builds_batches_kafka_python_reads():
    from kafka.record import MemoryRecords

    recs = [(i, 1_700_000_000_000 + i, b"k%d" % i, b"v" * i, (("h", b"x"),) if i % 3 else ()) for i in range(300)]
    data = build_batch(recs, base_offset=10)
    with pure():
        assert build_batch(recs, base_offset=10) == data
    b = MemoryRecords(data).next_batch()
    assert [(r.offset, r.key, r.value, list(r.headers)) for r in b] == [
        (10 + i, k, v, [(hk, hv) for hk, hv in hs]) for i, _ts, k, v, hs in recs]


# --- append's JSON-lines reader ------------------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("\"\\\n\t\x00\x7f\u2028"), max_size=12)
_jvalue = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | _text,
                       lambda c: st.lists(c, max_size=3) | st.dictionaries(_text, c, max_size=3), max_leaves=6)
_header = st.fixed_dictionaries({"key": st.one_of(_text, st.none())}, optional={"value": st.one_of(_text, st.none())})
_record_obj = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["record", "batch", "finding", None]) | _text,
    "offset": st.integers(0, 10**6),
    "key": st.one_of(st.none(), _text, st.just({"base64": "AAE="}), _jvalue),
    "value": st.one_of(st.none(), _text, st.just({"hex": "00ff"}), _jvalue),
    "headers": st.one_of(st.none(), st.lists(_header, max_size=3), st.just({}), st.just({"a": "b"}), _jvalue),
    "timestamp": st.one_of(st.none(), st.integers(-2, 2**64), st.just(1.0), st.just("2024-01-01T00:00:00Z"),
                           st.booleans()),
    "partition": st.one_of(st.none(), st.integers(-3, 2**40), st.just(1.5), st.booleans()),
    "control": st.one_of(st.none(), st.just({"type": "COMMIT"})),
    "sequence": _jvalue,
})


def _line(obj, how):
    text = json.dumps(obj, ensure_ascii=how % 2 == 0, separators=(",", ":") if how % 3 else (", ", ": "))
    return text.encode("utf-8", "surrogatepass")


def _reference(raw):
    from kltool.jsonl import parse_record_line as parse_json_record

    try:
        return parse_json_record(raw)
    except ValueError as e:
        return f"error: {e}"


@settings(max_examples=400, deadline=None)
@given(objs=st.lists(st.tuples(_record_obj, st.integers(0, 5)), max_size=8),
       cuts=st.lists(st.tuples(st.integers(0, 10**6), st.binary(max_size=3)), max_size=2),
       ends=st.sampled_from([b"\n", b"\r\n", b" \x1f\n", b"\n\n", b"\n \n", b"\xc2\xa0\n"]))
def test_json_lines_reader_same_as_the_reference(objs, cuts, ends):
    from kltool.jsonl import SKIP

    lines = [_line(o, how) for o, how in objs]
    for pos, junk in cuts:  # damage: bytes replaced inside a line
        if lines:
            k = pos % len(lines)
            i = pos % (len(lines[k]) + 1)
            lines[k] = lines[k][:i] + junk + lines[k][i + len(junk):]
    block = ends.join(lines)
    items, deferred = _speedups.parse_json_lines(block, SKIP)
    assert deferred == items.count(False)
    raws = block.split(b"\n")
    if block.endswith(b"\n") or not block:
        raws.pop()
    assert len(items) == len(raws)
    for item, raw in zip(items, raws, strict=True):
        if item is not False:
            assert item == _reference(raw), raw


def test_json_lines_reader_reads_dump_output_back(kl, tmp_path):
    """``dump --json --records`` lines: batch lines skipped, text records parsed in C (those with
    base64 or decoded fields go to the reference reader), all as the reference reads them."""
    from kltool.jsonl import SKIP

    for path in (FIXTURES / "sample-logdir", ORACLE / "v2-txn-0"):
        out = kl("--json", "dump", "--records", path).out.encode()
        items, _deferred = _speedups.parse_json_lines(out, SKIP)
        assert items.count(SKIP) >= 1 and sum(type(i) is tuple for i in items) >= 1
        for item, raw in zip(items, out.split(b"\n"), strict=False):
            assert item is False or item == _reference(raw)


def _append_both(kl, tmp_path, lines: bytes, *args):
    results = []
    for mode in ("fast", "pure"):
        ld = tmp_path / mode
        kl("create", ld, "t", "--partitions", "3")
        src = tmp_path / f"{mode}.jsonl"
        src.write_bytes(lines)
        if mode == "pure":
            with pure():
                r = kl("append", ld, "t", "-i", src, *args)
        else:
            r = kl("append", ld, "t", "-i", src, *args)
        logs = {p.relative_to(ld).as_posix(): p.read_bytes() for p in sorted(ld.rglob("*.log"))}
        results.append((r.code, r.err.replace(str(src), "SRC"), logs))
    assert results[0] == results[1]
    return results[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), n=st.integers(0, 300), batch=st.sampled_from(["3", "50", "100000"]),
       fixed=st.booleans())
def test_append_same_with_and_without_the_accelerator(kl, tmp_path_factory, seed, n, batch, fixed):
    """Mixed input (explicit partitions, keys, headers, blank, skipped and odd lines, sometimes an
    error): the same exit, message and segment bytes. Timestamps are given (a missing one is the
    clock's)."""
    rnd = random.Random(seed)
    out = []
    for _i in range(n):
        r = rnd.random()
        if r < 0.03:
            out.append(b"")
        elif r < 0.06:
            out.append(b'{"type":"batch","offset":1}')
        elif r < 0.08:
            out.append(b'{"key":"k","value":{"base64":"AAE="},"timestamp":1700000000000,"partition":1}')
        elif r < 0.081:
            out.append(b'{"value":"x","timestamp":1.5}')
        else:
            obj = {"value": "v" * rnd.randint(0, 300), "timestamp": 1_700_000_000_000 + rnd.randint(0, 10**6)}
            if rnd.random() < 0.5:
                obj["key"] = f"key-{rnd.randint(0, 20)}"
            if rnd.random() < 0.7:
                obj["partition"] = rnd.choice([0, 0, 0, 1, 2])
            if rnd.random() < 0.1:
                obj["headers"] = [{"key": "h", "value": "x"}]
            out.append(json.dumps(obj).encode())
    args = ["--batch-records", batch, "--partitioner", "round-robin"] + (["-p", "1"] if fixed else [])
    _append_both(kl, tmp_path_factory.mktemp("a"), b"\n".join(out) + b"\n", *args)


# --- the pure-Python fallback runs the key checks on its own -----------------------------------

@pytest.mark.slow
def test_key_checks_pass_with_the_accelerator_disabled():
    """KLTOOL_NO_SPEEDUPS=1: the reference paths alone pass the walker, format, dump, verify and
    oracle-corpus tests (CI runs this, so the fallback cannot rot)."""
    env = dict(os.environ, KLTOOL_NO_SPEEDUPS="1")
    code = ("import kltool.format.speedups as s, kltool.format.batch as b;"
            "assert s.C is None and b._c_decode_v2 is None")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    tests = ["tests/test_scan.py", "tests/test_format_core.py", "tests/test_dump.py", "tests/test_oracle_corpus.py",
             "tests/test_real_logdirs.py", "tests/test_append.py", "tests/test_writer.py", "tests/test_repair.py",
             "tests/test_jsonl.py", "tests/test_read.py"]
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", "-p", "no:cacheprovider", *tests],
                       env=env, cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]


# --- the Spark reader's record chunks ------------------------------------------------------------

SPARK_VARIANTS = [
    ({}, None),
    ({}, ["offset", "timestamp"]),
    ({"maxRecordsPerBatch": "7"}, ["key", "headers", "offset", "timestampType"]),
    ({"startingOffset": "3", "endingOffset": "12", "maxRecordsPerBatch": "4"}, None),
    ({"includeControl": "true", "includeHeaders": "false"}, None),
    ({"splitBytes": "300", "maxPartitionBytes": "0"}, ["value", "partition", "topic", "offset"]),
]


def spark_batches(path, opts, columns):
    from kltool.spark import datasource as ds

    o = ds.normalize_options({"path": str(path), "failOnDataLoss": "false", **opts})  # damaged fixtures: skipped
    out = []
    for part in ds.KafkaLogReader(o, columns, 2).partitions():
        out += list(ds.read_partition_rows(o, part, columns))
    return out


def spark_both(path, variants=SPARK_VARIANTS):
    """The Arrow batches of the records level: the C reader (arrow_v2) gives the reference loop's
    batches exactly (same rows, same cuts between batches)."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    for opts, columns in variants:
        fast = spark_batches(path, opts, columns)
        with pure():
            ref = spark_batches(path, opts, columns)
        assert [b.num_rows for b in fast] == [b.num_rows for b in ref], (opts, columns)
        for a, b in zip(fast, ref, strict=True):
            assert a.schema == b.schema and a.equals(b), (opts, columns)


@pytest.mark.parametrize("path", _fixture_paths(), ids=lambda p: p.name)
def test_spark_records_same_with_and_without_the_accelerator_on_every_fixture(path):
    spark_both(path)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), n=st.integers(0, 30), mutate=st.integers(0, 3), index=st.booleans())
def test_spark_records_same_with_and_without_the_accelerator_on_generated_segments(tmp_path, seed, n, mutate,
                                                                                  index):
    d = make_partition(tmp_path, seed, n, mutate, index)
    spark_both(d)


def test_spark_records_at_the_end_of_int64_and_in_big_runs(tmp_path):
    """Offsets next to 2^63-1 (left to the Python loop) and long runs of plain batches cut into
    many Arrow batches inside one C call."""
    d = tmp_path / "t-0"
    d.mkdir()
    top = 2**63 - 1
    recs = [(i, 1_700_000_000_000 + i, b"k%d" % i, None if i % 3 else b"v" * i, [("h", None)] if i % 4 else ())
            for i in range(5)]
    data = b"".join(build_batch(recs, base_offset=5 * i) for i in range(2000))
    data += build_batch(recs[:3], base_offset=top - 2) + build_batch(recs[:3], base_offset=7)
    (d / f"{0:020d}.log").write_bytes(data)
    spark_both(d, SPARK_VARIANTS + [({"maxRecordsPerBatch": "1000"}, None),
                                    ({"startingOffset": "4999", "endingOffset": "5001"}, ["offset"])])


CODECS = {"lz4": LZ4, "zstd": ZSTD, "snappy": SNAPPY, "gzip": GZIP}


def _codec_segment(d, codec, n_batches=40, per=25, seed=1):
    """A partition dir of ``codec`` batches of varied records (null keys and values, headers, empty
    values, log-append time in some batches), offsets with a gap."""
    rnd = random.Random(seed)
    d.mkdir(parents=True, exist_ok=True)
    data, off = bytearray(), 0
    for b in range(n_batches):
        recs = _random_records(rnd, rnd.randint(1, per), True)
        data += build_batch(recs, base_offset=off, compression=codec,
                            log_append_time=1_700_000_009_000 if b % 7 == 3 else None)
        off += len(recs) + (3 if b == 10 else 0)
    (d / f"{0:020d}.log").write_bytes(bytes(data))
    return d


@pytest.mark.parametrize("codec", list(CODECS), ids=list(CODECS))
def test_spark_records_same_with_and_without_the_accelerator_for_every_codec(tmp_path, codec):
    """Every codec's batches are decompressed and appended straight to the Arrow buffers by the C reader
    (arrow_v2 with an inflate callable): the same rows and the same cuts between Arrow batches as the
    pure-Python reference, with offset bounds and chunk limits falling inside compressed batches."""
    d = _codec_segment(tmp_path / "t-0", CODECS[codec])
    spark_both(d, SPARK_VARIANTS + [({"maxRecordsPerBatch": "10"}, None),
                                    ({"startingOffset": "40", "endingOffset": "300"}, ["offset", "value"]),
                                    ({"maxRecordsPerBatch": "1"}, ["timestamp", "timestampType"])])


@pytest.mark.parametrize("codec", list(CODECS), ids=list(CODECS))
def test_compressed_batches_go_straight_to_the_arrow_buffers(codec):
    """arrow_v2 takes a compressed batch whole through ``inflate`` (status 0, its rows appended): no
    Python columns; without ``inflate``, or when it gives None, the batch is Python's (status 2)."""
    from kltool.format.compression import decompress
    from kltool.spark.arrow_rows import _RecordChunk

    recs = [(i, 1_700_000_000_000 + i, b"k%d" % i, b"v" * i, [("h", b"x")] if i % 2 else ()) for i in range(9)]
    b = build_batch(recs, base_offset=100, compression=CODECS[codec])
    seen = []

    def inflate(c, payload, count):
        seen.append((c, count))
        return decompress(c, payload)

    for fn, status, rows in ((inflate, 0, 9), (None, 2, 0), (lambda *a: None, 2, 0)):
        chunk = _RecordChunk({"offset", "timestamp", "timestampType", "key", "value", "headers"})
        args = (b, 0, len(b), None, None, False, 1000, 1 << 20, 0, 0, chunk.bufs)
        i, st_, n, _nb = _speedups.arrow_v2(*args, fn) if fn else _speedups.arrow_v2(*args)
        assert (i, st_, n) == ((len(b) if status == 0 else 0), status, rows)
        chunk.rows = n
        if status == 0:
            got = chunk.to_arrow("t", 0)
            assert got.column("offset").to_pylist() == list(range(100, 109))
            assert got.column("value").to_pylist() == [r[3] for r in recs]
            assert [len(h or ()) for h in got.column("headers").to_pylist()] == [i % 2 for i in range(9)]
    assert seen == [(CODECS[codec], 9)]


def test_compressed_batches_past_the_whole_batch_limit_and_damaged_ones_are_the_reference_paths(tmp_path,
                                                                                                monkeypatch):
    """A compressed batch whose records decompress to more than the whole-batch limit is read streamed by
    the Python path, and an undecodable one (valid CRC, garbage payload) is skipped as data loss (or fails
    the read) exactly as the reference does."""
    from kltool.format.batch import V2_OVERHEAD

    monkeypatch.setattr(fbatch, "WHOLE_BYTES", 300)
    d = _codec_segment(tmp_path / "t-0", ZSTD, n_batches=12, per=40, seed=3)
    spark_both(d)
    log = d / f"{0:020d}.log"
    data = bytearray(log.read_bytes())
    size = struct.unpack_from(">i", data, 8)[0] + 12
    data[V2_OVERHEAD + 4:V2_OVERHEAD + 12] = b"garbage!"  # inside the zstd frame of the first batch
    struct.pack_into(">I", data, 17, _speedups.crc32c(bytes(data[21:size])))
    log.write_bytes(bytes(data))
    spark_both(d)
    for codec in CODECS:
        e = tmp_path / f"{codec}-x" / "t-0"
        _codec_segment(e, CODECS[codec], n_batches=3)
        raw = bytearray((e / f"{0:020d}.log").read_bytes())
        size = struct.unpack_from(">i", raw, 8)[0] + 12
        raw[size - 6:size] = b"\xff" * 6  # the first batch's compressed stream ends in garbage
        struct.pack_into(">I", raw, 17, _speedups.crc32c(bytes(raw[21:size])))
        (e / f"{0:020d}.log").write_bytes(bytes(raw))
        spark_both(e)


def test_the_stub_and_the_abi_describe_the_built_module():
    """kltool/format/_speedups.pyi types exactly the module's entry points, and the ABI the Python side
    expects is the one speedups.h declares and the build reports (a stale build is not loaded)."""
    import ast
    import re

    stub = ast.parse((ROOT / "kltool" / "format" / "_speedups.pyi").read_text())
    typed = {n.name for n in stub.body if isinstance(n, ast.FunctionDef)}
    built = {n for n in dir(_speedups) if not n.startswith("_") and callable(getattr(_speedups, n))}
    assert typed == built
    header = (ROOT / "kltool" / "format" / "_speedups_c" / "speedups.h").read_text()
    assert int(re.search(r"#define KL_SPEEDUPS_ABI (\d+)", header).group(1)) == speedups.ABI == _speedups.ABI


def test_format_v2_takes_its_options_by_keyword():
    """The batch's header fields are positional, how to write them keyword-only (defaults: text)."""
    recs = [(0, 1_700_000_000_000, b"k", b"v", ())]
    payload = build_batch(recs, base_offset=5)[61:]
    blob, n = _speedups.format_v2(payload, 1, 5, 1_700_000_000_000, False, 1_700_000_000_000, -1)
    assert (blob, n) == (b"| offset: 5 CreateTime: 1700000000000 keySize: 1 valueSize: 1 sequence: -1 "
                         b"headerKeys: [] key: k payload: v\n", 1)
    assert _speedups.format_v2(payload, 1, 5, 1_700_000_000_000, False, 1_700_000_000_000, -1,
                               from_offset=6) == (b"", 0)
    with pytest.raises(TypeError):
        _speedups.format_v2(payload, 1, 5, 1_700_000_000_000, False, 1_700_000_000_000, -1, True)


def _payload_shapes(codec):
    """Compressed payloads of ``codec`` in the shapes Kafka writes and in the unusual ones the reference
    decompressor takes or refuses: several members or frames, padding, truncation, garbage after."""
    import zlib

    import zstandard

    from kltool.format.compression import XERIAL_HEADER, compress

    data = b"".join(b"record %d " % i * (i % 5) for i in range(400))
    one = compress(codec, data)
    shapes = [one, one + one, one + bytes(8), one[:-3], one[:len(one) // 2], one + b"\xff\x00garbage",
              one[:20] + bytes(8) + one[28:], compress(codec, b""), compress(codec, data[:10])]
    if codec == GZIP:
        c = zlib.compressobj(1, zlib.DEFLATED, 31)
        shapes.append(c.compress(data) + c.flush())
        head, body = one[:10], one[10:]

        def flags(f, extra=b""):
            return head[:3] + bytes([f]) + head[4:] + extra + body

        hcrc = (zlib.crc32(flags(2)[:10]) & 0xFFFF).to_bytes(2, "little")
        shapes += [flags(0x20), flags(0x80), flags(8, b"name\0"), flags(4, b"\x04\x00abcd"), flags(16, b"note\0"),
                   flags(2, hcrc), flags(2, bytes(2)), flags(2), one[:2] + b"\x07" + one[3:],
                   one[:-8] + bytes(4) + one[-4:], one[:-4] + bytes(4), one[:-1], one[:10]]
    if codec == LZ4:
        import lz4.frame

        shapes += [lz4.frame.compress(data, content_checksum=True), lz4.frame.compress(data, store_size=True),
                   lz4.frame.compress(data, block_linked=True, block_size=lz4.frame.BLOCKSIZE_MAX64KB),
                   one[:4] + bytes([one[4] | 0x04]) + one[5:]]
    if codec == SNAPPY:
        import cramjam

        shapes += [bytes(cramjam.snappy.compress_raw(data)), one + XERIAL_HEADER[:16] + one[16:],
                   XERIAL_HEADER, one[:16] + bytes(4) + one[16:], one[:16] + b"\x7f\xff\xff\xff" + one[20:]]
    if codec == ZSTD:
        shapes += [zstandard.ZstdCompressor(write_content_size=False).compress(data),
                   zstandard.ZstdCompressor(write_checksum=True).compress(data),
                   b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"skip" + one]
    return shapes


FAST_CODECS = [(GZIP, "isal"), (GZIP, "zlib"), (SNAPPY, None), (LZ4, None), (ZSTD, None)]


def _fast(codec, backend, monkeypatch):
    """arrow_rows._FAST's decompressor of ``codec``; for gzip on ``backend`` (ISA-L's inflate or zlib's)."""
    from kltool.format.compression import fast_inflate
    from kltool.spark.arrow_rows import _FAST

    if backend == "isal":
        pytest.importorskip("isal")
        monkeypatch.delenv("KLTOOL_NO_ISAL", raising=False)
    elif backend == "zlib":
        monkeypatch.setenv("KLTOOL_NO_ISAL", "1")
    if backend:
        assert fast_inflate().__name__ == {"isal": "isal.isal_zlib", "zlib": "zlib"}[backend]
    return _FAST[codec]()


@pytest.mark.parametrize("codec,backend", FAST_CODECS, ids=["gzip-isal", "gzip-zlib", "snappy", "lz4", "zstd"])
def test_the_one_call_decompressors_give_the_reference_bytes_or_leave_it_to_the_reference(codec, backend,
                                                                                           monkeypatch):
    """The Spark reader's one-call decompression of the usual payload shapes (arrow_rows._FAST: gzip through
    ISA-L's inflate when the isal package is there, else zlib's) gives exactly what compression.decompress
    (zlib) gives, or None (then the reference reads the batch), never more than the limit; the usual shape
    is taken."""
    fast = _fast(codec, backend, monkeypatch)
    shapes = _payload_shapes(codec)
    assert fast(shapes[0], 1 << 20) is not None
    for i, p in enumerate(shapes):
        _same_as_reference(fast, codec, p, i)


def _same_as_reference(fast, codec, p, i):
    from kltool.errors import CorruptDataError
    from kltool.format.compression import decompress

    for limit in (1 << 20, 100):
        got = fast(p, limit)
        if got is None:
            continue
        assert len(got) <= limit, (i, limit)
        try:
            ref = decompress(codec, p, 2, limit)
        except CorruptDataError:
            ref = "refused"
        assert bytes(got) == ref, (i, limit)


@pytest.mark.parametrize("codec,backend", FAST_CODECS, ids=["gzip-isal", "gzip-zlib", "snappy", "lz4", "zstd"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3),
       cut=st.integers(0, 10**6), keep=st.booleans())
def test_damaged_payloads_give_the_reference_bytes_or_go_to_the_reference(codec, backend, monkeypatch, flips, cut,
                                                                         keep):
    """Bytes flipped anywhere in a payload (header, compressed blocks, trailer) and truncation: a one-call
    decompressor never returns bytes the reference would not (ISA-L's inflate included)."""
    from kltool.format.compression import compress

    fast = _fast(codec, backend, monkeypatch)
    p = bytearray(compress(codec, b"".join(b'{"user": %d, "event": "view"} ' % (i * 7919 % 1000) for i in range(300))))
    for at, x in flips:
        p[at % len(p)] ^= x
    if not keep:
        p = p[:cut % (len(p) + 1)]
    _same_as_reference(fast, codec, bytes(p), (flips, cut, keep))


def test_gzip_inflates_through_isal_when_it_is_installed(monkeypatch):
    """The optional accelerator: the isal package's inflate (ISA-L) for the usual gzip payload, zlib's
    without it or with KLTOOL_NO_ISAL=1; either way the same bytes."""
    import zlib

    from kltool.format.compression import compress, fast_inflate

    isal = pytest.importorskip("isal.isal_zlib")
    monkeypatch.delenv("KLTOOL_NO_ISAL", raising=False)
    assert fast_inflate() is isal
    monkeypatch.setenv("KLTOOL_NO_ISAL", "1")
    assert fast_inflate() is zlib
    data = b"abc" * 5000
    assert _fast(GZIP, "isal", monkeypatch)(compress(GZIP, data), 1 << 20) == data


def test_an_executor_without_isal_reads_gzip_through_zlib_with_the_same_rows(tmp_path):
    """isal is an optional accelerator (the spark extra installs it; a shipped kltool may meet a Python
    without it): without it the C reader inflates gzip with zlib and returns the same rows, no error."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    pytest.importorskip("isal")
    from .test_spark_executors import python_without

    d = _codec_segment(tmp_path / "t-0", GZIP, n_batches=30, per=40)
    code = ("import sys, hashlib\nfrom kltool.spark import datasource as ds\nimport kltool.format.speedups as s\n"
            "from kltool.format.compression import fast_inflate\n"
            "o = ds.normalize_options({'path': sys.argv[1]})\n"
            "h = hashlib.sha256()\nn = 0\n"
            "for p in ds.KafkaLogReader(o, None, 2).partitions():\n"
            "    for b in ds.read_partition_rows(o, p):\n"
            "        n += b.num_rows; h.update(repr(b.to_pylist()).encode())\n"
            "print(s.C is not None, fast_inflate().__name__, n, h.hexdigest())\n")
    runs = {}
    for label, py in (("with", sys.executable), ("without", python_without(_mkdir(tmp_path / "p"), "isal"))):
        r = subprocess.run([py, "-c", code, str(d)], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        runs[label] = r.stdout.split()
    assert runs["with"][:2] == ["True", "isal.isal_zlib"] and runs["without"][:2] == ["True", "zlib"]
    assert runs["with"][2:] == runs["without"][2:] and int(runs["with"][2]) > 0


def _mkdir(p):
    p.mkdir()
    return p
