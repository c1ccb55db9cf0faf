"""A record that --max-record-bytes lets through but the process cannot hold (issue 23): under an address-space
limit (``ulimit -v``), ``verify --deep`` and ``dump --records`` of a 1 GiB record end in one line naming the file
and the batch's position, exit 2 (an error on the input), never ``internal error: MemoryError`` (exit 70)."""

from __future__ import annotations

import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kltool.format.speedups import crc32c
from kltool.format.varint import encode_varint

RECORD = 1 << 30  # the value's bytes (zeros: a sparse file)
LIMIT = 768 << 20  # the subprocess's address space


def _sparse_batch(path: Path, n: int) -> int:
    """One v2 batch at offset 0 holding one record whose value is ``n`` zero bytes; the file is sparse.
    Returns the file's size."""
    body = bytes([0]) + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(n)
    tail = encode_varint(0)  # no headers
    record_len = len(body) + n + len(tail)
    record_head = encode_varint(record_len) + body
    total = 61 + len(record_head) + n + len(tail)
    ts = 1_700_000_000_000
    after_crc = struct.pack(">hiqqqhii", 0, 0, ts, ts, -1, -1, -1, 1)
    crc = crc32c(after_crc + record_head)
    zeros = bytes(64 << 20)
    left = n
    while left:
        k = min(left, len(zeros))
        crc = crc32c(memoryview(zeros)[:k], crc)
        left -= k
    crc = crc32c(tail, crc)
    head = struct.pack(">qiibI", 0, total - 12, 0, 2, crc) + after_crc
    with open(path, "wb") as f:
        f.write(head + record_head)
        f.seek(61 + len(record_head) + n)
        f.write(tail)
    return total


def _limited(*args) -> subprocess.CompletedProcess:
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    return subprocess.run([sys.executable, "-m", "kltool", *map(str, args)], capture_output=True, text=True,
                          preexec_fn=limit, timeout=300)


@pytest.fixture(scope="module")
def huge(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("huge") / "t-0"
    d.mkdir()
    log = d / "00000000000000000000.log"
    _sparse_batch(log, RECORD)
    return log


@pytest.mark.parametrize("command", [("verify", "--deep"), ("dump", "--records")])
def test_a_record_beyond_the_address_space_is_an_input_error(huge, command):
    r = _limited(*command, "--max-record-bytes", 3_000_000_000, huge)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1 and "internal error" not in r.stderr, r.stderr
    assert f"{huge} at byte 0:" in lines[0] and "does not fit" in lines[0], lines


def test_the_same_record_under_the_default_limit_is_a_finding(huge):
    r = _limited("verify", "--deep", huge)
    assert r.returncode == 1 and "record_too_large" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
