"""Bounded memory on any input: decompression bombs with a valid CRC, for every codec.

A batch whose CRC is valid can still decompress to gigabytes. kltool decompresses only as far as the
batch's declared records need (then one more byte must not exist, as in Kafka's reader), and never more
than --max-record-bytes: a bomb is a one-line finding or error with exit 1 or 2, in bounded memory and
time, never a MemoryError (exit 70).
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

import pytest

from kltool.format.batch import batch_crc, build_v2_batch
from kltool.format.compression import GZIP, LZ4, SNAPPY, XERIAL_HEADER, ZSTD
from kltool.storage import open_partition
from kltool.storage.read import records

CODECS = {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
MIB = 1 << 20
# Runs kltool in a fresh interpreter, started by a small wrapper interpreter that prints its exit code and peak
# RSS (KiB) as the last line (a child forked straight from this test process would report this process's RSS:
# Linux keeps the peak across exec).
KLTOOL = ("import sys\nfrom kltool.cli import main\ncode = 0\ntry:\n    main(sys.argv[1:])\n"
          "except SystemExit as e:\n    code = e.code if isinstance(e.code, int) else 0\nsys.stdout.flush()\n"
          "sys.exit(code)\n")
RUNNER = ("import resource, subprocess, sys\ncode = subprocess.run(sys.argv[1:]).returncode\n"
          "print('RESULT', code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n")


def _stream(codec: str, pieces):
    """Compress an iterable of byte pieces as one Kafka payload, cheaply (zeros compress fast)."""
    if codec == "gzip":
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return b"".join(c.compress(p) for p in pieces) + c.flush()
    if codec == "lz4":
        import lz4.frame

        c = lz4.frame.LZ4FrameCompressor()
        return c.begin() + b"".join(c.compress(p) for p in pieces) + c.flush()
    if codec == "zstd":
        import zstandard

        c = zstandard.ZstdCompressor().compressobj()
        return b"".join(c.compress(p) for p in pieces) + c.flush()
    import cramjam

    out = bytearray(XERIAL_HEADER)
    for p in pieces:
        for i in range(0, len(p), 32 * 1024):
            blk = bytes(cramjam.snappy.compress_raw(p[i:i + 32 * 1024]))
            out += struct.pack(">i", len(blk)) + blk
    return bytes(out)


def _batch(codec: str, records: list, trailing_zero_mib: int = 0) -> bytes:
    plain = build_v2_batch(records, base_offset=0)
    body = plain[61:]
    zeros = bytes(MIB)
    payload = _stream(codec, [body, *([zeros] * trailing_zero_mib)])
    b = bytearray(plain[:61]) + payload
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">h", b, 21, CODECS[codec])
    struct.pack_into(">I", b, 17, batch_crc(b, 0, len(b)))
    return bytes(b)


def _run(tmp_path: Path, *args) -> tuple[int, int, str, str]:
    p = subprocess.run([sys.executable, "-c", RUNNER, sys.executable, "-c", KLTOOL, *map(str, args)],
                       capture_output=True, text=True, timeout=3600)
    last = p.stderr.strip().splitlines()[-1].split()
    assert last[0] == "RESULT", p.stderr[-2000:]
    return int(last[1]), int(last[2]), p.stdout, p.stderr


def _part(tmp_path: Path, name: str, data: bytes) -> Path:
    d = tmp_path / f"{name}-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(data)
    return d


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_one_record_then_zeros_is_reported_without_decompressing_them(tmp_path, codec):
    """1 record followed by 256 MiB of zeros inside the compressed stream: Kafka reads the one record, then
    finds bytes left: so does kltool, after a few steps, not 256 MiB."""
    d = _part(tmp_path, codec, _batch(codec, [(0, 1_700_000_000_000, b"k", b"v", [])], trailing_zero_mib=256))
    code, rss, out, err = _run(tmp_path, "--json", "verify", "--deep", d)
    finds = [json.loads(x) for x in out.splitlines() if x.startswith('{"type":"finding"')]
    errs = [f for f in finds if f["severity"] == "error"]
    assert code == 1 and len(errs) == 1, (out, err)
    assert errs[0]["kind"] == "record_corrupt" and "records still remaining" in errs[0]["message"]
    assert errs[0]["position"] == 0 and errs[0]["file"].endswith(".log")
    assert rss < 512 * 1024, f"peak RSS {rss} KiB"
    code, rss, out, err = _run(tmp_path, "dump", "--records", d)
    assert code == 1 and "records still remaining" in out and "Traceback" not in err
    assert rss < 512 * 1024, f"peak RSS {rss} KiB"


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_record_over_the_limit_is_a_finding_and_an_exit_2_error(tmp_path, codec):
    """A valid batch holding one 24 MiB value, with --max-record-bytes 8 MiB: verify reports it, dump prints the
    batch's metadata and exits 2 naming the file and position; neither holds the value."""
    big = [(0, 1_700_000_000_000, b"k", bytes(24 * MIB), [])]
    d = _part(tmp_path, codec, _batch(codec, big))
    code, rss, out, err = _run(tmp_path, "--json", "verify", "--deep", "--max-record-bytes", 8 * MIB, d)
    errs = [json.loads(x) for x in out.splitlines() if '"severity":"error"' in x]
    assert code == 1 and [e["kind"] for e in errs] == ["record_too_large"], (out, err)
    assert "record at offset 0 declares 25165834 bytes, more than --max-record-bytes (8388608)" in errs[0]["message"]
    assert errs[0]["position"] == 0 and errs[0]["offset"] == 0
    code, rss2, out, err = _run(tmp_path, "dump", "--records", "--max-record-bytes", 8 * MIB, d)
    assert code == 2, (out, err)
    assert "baseOffset: 0 lastOffset: 0 count: 1" in out  # the batch's metadata is printed
    assert "record_too_large" in out and "00000000000000000000.log" in out
    assert err.count("\n") <= 3 and "Traceback" not in err
    # without the limit the same batch reads fine
    code, _rss, out, err = _run(tmp_path, "verify", "--deep", d)
    assert code == 0, (out, err)
    assert max(rss, rss2) < 512 * 1024


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_gigabytes_of_zeros_after_one_record(tmp_path, codec):
    """The issue's case: 1 record followed by 4 GiB of zeros (lz4 > 2 GiB included)."""
    d = _part(tmp_path, codec, _batch(codec, [(0, 1_700_000_000_000, b"k", b"v", [])], trailing_zero_mib=4096))
    code, rss, out, err = _run(tmp_path, "verify", "--deep", d)
    assert code == 1 and "records still remaining" in out
    assert rss < 512 * 1024, f"peak RSS {rss} KiB"


# ------------------------------------------------------------------------------------------------------------
# --max-record-bytes limits ONE record: a batch whose records together exceed it is read, a record at a time.

ALL = ["none", *sorted(CODECS)]


def _write_big_batch(path: Path, codec: str, n: int, value, *, extra=()) -> int:
    """Write one v2 batch of ``n`` records (``value(i)`` each; ``extra`` = (index, value) replacements) to
    ``path`` without holding it: records are encoded and compressed piece by piece, the CRC is computed as they
    are written. Returns the file's size."""
    from kltool.format.batch import V2_HEADER, encode_v2_record
    from kltool.format.speedups import crc32c

    repl = dict(extra)
    ts = 1_700_000_000_000
    attrs = 0 if codec == "none" else CODECS[codec]
    head = bytearray(V2_HEADER.pack(0, 0, 0, 2, 0, attrs, n - 1, ts, ts + n - 1, -1, -1, -1, n))
    crc = crc32c(bytes(head[21:]))
    with open(path, "wb") as f:
        f.write(head)

        def pieces():
            for i in range(n):
                yield encode_v2_record(i, i, b"k%d" % i, repl.get(i) or value(i))

        if codec == "none":
            out = pieces()
        elif codec == "gzip":
            c = zlib.compressobj(1, zlib.DEFLATED, 31)
            out = (x for x in [*(c.compress(p) for p in pieces()), c.flush()])
        elif codec == "lz4":
            import lz4.frame

            c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
            out = (x for x in [c.begin(), *(c.compress(p) for p in pieces()), c.flush()])
        elif codec == "zstd":
            import zstandard

            c = zstandard.ZstdCompressor().compressobj()
            out = (x for x in [*(c.compress(p) for p in pieces()), c.flush()])
        else:
            import cramjam

            def snappy():
                yield XERIAL_HEADER
                for p in pieces():
                    for j in range(0, len(p), 32 * 1024):
                        blk = bytes(cramjam.snappy.compress_raw(p[j:j + 32 * 1024]))
                        yield struct.pack(">i", len(blk)) + blk
            out = snappy()
        for piece in out:
            if piece:
                f.write(piece)
                crc = crc32c(piece, crc)
        size = f.tell()
        f.seek(8)
        f.write(struct.pack(">i", size - 12))
        f.seek(17)
        f.write(struct.pack(">I", crc))
    return size


def _random_big_batch(tmp_path: Path, codec: str, seed: int):
    """A partition ``<codec>-0`` whose segment is one batch of 576 random 64 KiB records (36 MiB: more than
    the walker's 32 MiB hold, and as large on disk when compressed): (count, size, the random bytes value i
    starts at i of, the partition directory, the .log)."""
    import random

    n, size = 576, 64 << 10
    rnd = random.Random(seed).randbytes(size + n)
    d = tmp_path / f"{codec}-0"
    d.mkdir()
    log = d / "00000000000000000000.log"
    _write_big_batch(log, codec, n, lambda i: rnd[i:i + size])
    return n, size, rnd, d, log


def _format_lines(out: str) -> list[tuple[int, int]]:
    return [tuple(map(int, x.split())) for x in out.splitlines() if x and x[0].isdigit()]


@pytest.mark.parametrize("codec", ALL)
def test_a_batch_over_the_limit_is_read_a_record_at_a_time(tmp_path, codec, kafka_oracle):
    """36 MiB of 64 KiB records in one batch (more than --max-record-bytes 8 MiB, and than the 32 MiB the walker
    holds; random values, so compressed batches are that large on disk too): verify --deep, dump --records and
    the records() API read every record, as Kafka's reader does."""
    n, size, rnd, d, log = _random_big_batch(tmp_path, codec, seed=1)
    code, rss, out, err = _run(tmp_path, "--json", "verify", "--deep", "--max-record-bytes", 8 * MIB, d)
    summary = json.loads([x for x in out.splitlines() if x.strip()][-1])
    assert code == 0 and summary["records"] == n and summary["errors"] == 0, (out, err)
    code, rss2, out, err = _run(tmp_path, "dump", "--max-record-bytes", 8 * MIB, "--format", "%o %S\\n", d)
    assert code == 0 and _format_lines(out) == [(i, size) for i in range(n)], err
    assert max(rss, rss2) < 128 * 1024, f"peak RSS {max(rss, rss2)} KiB"
    rc, rows = kafka_oracle([log], records=True)
    recs = [r for r in rows if r["type"] == "record"]
    assert rc == 0 and [r["offset"] for r in recs] == list(range(n))
    assert [base64.b64decode(r["value"]) for r in recs[:3]] == [rnd[i:i + size] for i in range(3)]
    with _limit(8 * MIB):  # the records() API
        got = [(r.offset, r.value == rnd[r.offset:r.offset + size]) for r in records(open_partition(d))]
    assert got == [(i, True) for i in range(n)]


@contextmanager
def _limit(n: int):
    from kltool.format import compression

    old = compression.MAX_DECOMPRESSED
    compression.set_limit(n)
    try:
        yield
    finally:
        compression.set_limit(old)


@pytest.mark.parametrize("codec", ALL)
def test_one_record_over_the_limit_after_others(tmp_path, codec, kafka_oracle):
    """Records of 1 KiB, then one of 24 MiB, then more, with --max-record-bytes 8 MiB: verify --deep names the
    record's offset and declared size (record_too_large); dump prints the batch's metadata and the records
    before it, then exits 2 with one line naming the file, position and size; records() yields those records
    and reports the error. Kafka's reader (no such limit) reads them all."""
    d = tmp_path / f"{codec}-0"
    d.mkdir()
    log = d / "00000000000000000000.log"
    _write_big_batch(log, codec, 40, lambda i: b"v" * 1024, extra=[(30, bytes(24 * MIB))])
    code, rss, out, err = _run(tmp_path, "--json", "verify", "--deep", "--max-record-bytes", 8 * MIB, d)
    errs = [json.loads(x) for x in out.splitlines() if '"severity":"error"' in x]
    assert code == 1 and [(e["kind"], e["offset"], e["position"]) for e in errs] == [("record_too_large", 30, 0)]
    assert "record at offset 30 declares 25165836 bytes, more than --max-record-bytes (8388608)" in errs[0]["message"]
    code, rss2, out, err = _run(tmp_path, "dump", "--records", "--max-record-bytes", 8 * MIB, d)
    assert code == 2, (out[-2000:], err)
    assert "baseOffset: 0 lastOffset: 39 count: 40" in out
    assert [x.split()[2] for x in out.splitlines() if x.startswith("| offset:")] == [str(i) for i in range(30)]
    assert "!! record_too_large in batch at position 0" in out
    msg = [x for x in err.splitlines() if x.strip() and not x.startswith("RESULT")]
    assert len(msg) == 1 and str(log) in msg[0] and "at byte 0" in msg[0] and "declares 25165836 bytes" in msg[0]
    assert "Traceback" not in err
    assert max(rss, rss2) < 128 * 1024, f"peak RSS {max(rss, rss2)} KiB"
    errors: list = []
    with _limit(8 * MIB):
        got = [r.offset for r in records(open_partition(d), errors=errors)]
    assert got == list(range(30)) and len(errors) == 1 and errors[0].offset == 30
    code, _rss, out, err = _run(tmp_path, "verify", "--deep", d)  # under the default limit: all read
    assert code == 0, (out, err)
    rc, rows = kafka_oracle([log], records=True)
    assert rc == 0 and sum(r["type"] == "record" for r in rows) == 40


def test_a_truncated_zstd_frame_is_corrupt_as_kafka_says(tmp_path, kafka_oracle):
    """A CRC-valid zstd batch whose frame is cut (every record still decompresses; only the frame's end, here its
    checksum or its last block, is missing): the stream reader ends silently; kltool follows the frame's block
    headers and reports it, as Kafka's reader (zstd-jni) rejects it."""
    import zstandard

    recs = [(i, 1_700_000_000_000 + i, b"k", b"v" * 100, []) for i in range(5)]
    body = build_v2_batch(recs, base_offset=0)[61:]
    o = zstandard.ZstdCompressor().compressobj()
    cases = {"checksum": zstandard.ZstdCompressor(write_checksum=True).compress(body)[:-4],
             "last-block": o.compress(body) + o.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)}
    for name, payload in cases.items():
        b = bytearray(build_v2_batch(recs, base_offset=0)[:61]) + payload
        struct.pack_into(">i", b, 8, len(b) - 12)
        struct.pack_into(">h", b, 21, ZSTD)
        struct.pack_into(">I", b, 17, batch_crc(b, 0, len(b)))
        d = _part(tmp_path, name, bytes(b))
        code, _rss, out, err = _run(tmp_path, "--json", "verify", "--deep", d)
        errs = [json.loads(x) for x in out.splitlines() if '"severity":"error"' in x]
        assert code == 1 and [(e["kind"], e["position"]) for e in errs] == [("record_corrupt", 0)], (name, out)
        assert "zstd frame ends before its end" in errs[0]["message"]
        rc, rows = kafka_oracle([d / "00000000000000000000.log"], records=True)
        summary = rows[-1]
        assert summary["firstInvalidPosition"] == 0 and summary["records"] == 0, (name, rows)


@pytest.mark.slow
@pytest.mark.parametrize("codec", ALL)
def test_a_3_gib_batch_is_read_in_bounded_memory(tmp_path, codec):
    """One batch of 3 GiB of records (49,152 records of 64 KiB; uncompressed, 1.95 GiB on disk: a batch's length
    field is an int32), with the default --max-record-bytes (256 MiB): verify --deep and dump read every record
    with peak RSS < 300 MiB."""
    import time

    n, size = (3 * 16384 if codec != "none" else 32000), 64 << 10
    d = tmp_path / f"{codec}-0"
    d.mkdir()
    _write_big_batch(d / "00000000000000000000.log", codec, n, lambda i: (b"%08d" % i) * (size // 8))
    t0 = time.perf_counter()
    code, rss, out, err = _run(tmp_path, "--json", "verify", "--deep", d)
    t1 = time.perf_counter()
    summary = json.loads([x for x in out.splitlines() if x.strip()][-1])
    assert code == 0 and summary["records"] == n and summary["errors"] == 0, (out[-2000:], err)
    code, rss2, out, err = _run(tmp_path, "dump", "--format", "%o %S\\n", d)
    t2 = time.perf_counter()
    assert code == 0 and _format_lines(out) == [(i, size) for i in range(n)], err[-2000:]
    print(f"{codec}: verify --deep {t1 - t0:.1f}s {rss // 1024} MiB; dump --format {t2 - t1:.1f}s {rss2 // 1024} MiB")
    assert max(rss, rss2) < 300 * 1024, f"peak RSS {rss} / {rss2} KiB"


def test_offset_for_time_reads_a_batch_over_the_limit(tmp_path):
    """kltool offsets --time reads a batch's records the same bounded way (not the whole batch at once)."""
    from kltool.storage.offsets import offset_for_time

    d = tmp_path / "lz4-0"
    d.mkdir()
    _write_big_batch(d / "00000000000000000000.log", "lz4", 400, lambda i: bytes([i % 251]) * (64 << 10))
    warnings: list = []
    with _limit(8 * MIB):
        got = offset_for_time(open_partition(d), 1_700_000_000_000 + 300, warnings=warnings)
    assert (got.offset, got.timestamp, warnings) == (300, 1_700_000_000_300, [])


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_the_spark_reader_reads_a_batch_over_the_limit_in_bounded_chunks(tmp_path, codec):
    """The kafka-log source's executor read (read_records, the Spark tasks' code; no session needed) takes a
    batch over --max-record-bytes and over the walker's 32 MiB hold a group of records at a time: every
    record, in Arrow batches no larger than its chunk budget. (It used to skip such a batch silently.)"""
    from kltool.spark import datasource as ds

    n, size, rnd, _d, log = _random_big_batch(tmp_path, codec, seed=2)
    part = ds.SegmentRead(str(log), codec, 0, 0, bytes=log.stat().st_size)
    with _limit(8 * MIB):
        batches = list(ds.read_records(part, chunk_bytes=4 * MIB))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(n))
    assert len(batches) > 4 and max(b.nbytes for b in batches) < 12 * MIB
    first = batches[0]
    assert first.column("value")[0].as_py() == rnd[:size] and first.column("key")[1].as_py() == b"k1"
    pruned = list(ds.read_records(part, columns=["offset", "timestamp"]))  # the default limit: usual groups
    assert [o for b in pruned for o in b.column("offset").to_pylist()] == list(range(n))
