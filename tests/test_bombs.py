"""Bounded memory on any input: decompression bombs with a valid CRC, for every codec.

A batch whose CRC is valid can still decompress to gigabytes. kltool decompresses only as far as the
batch's declared records need (then one more byte must not exist, as in Kafka's reader), and never more
than --max-record-bytes: a bomb is a one-line finding or error with exit 1 or 2, in bounded memory and
time, never a MemoryError (exit 70).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from kltool.format.batch import batch_crc, build_v2_batch
from kltool.format.compression import GZIP, LZ4, SNAPPY, XERIAL_HEADER, ZSTD

CODECS = {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
MIB = 1 << 20
# Runs kltool in a fresh interpreter and prints its exit code and peak RSS (KiB) as the last line.
RUNNER = ("import resource, sys\nfrom kltool.cli import main\ncode = 0\ntry:\n    main(sys.argv[1:])\n"
          "except SystemExit as e:\n    code = e.code if isinstance(e.code, int) else 0\n"
          "print(); print('RESULT', code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")


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
    p = subprocess.run([sys.executable, "-c", RUNNER, *map(str, args)], capture_output=True, text=True, timeout=300)
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
