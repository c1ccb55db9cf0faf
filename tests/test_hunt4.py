"""Hostile input on the read and forensic side (hunt4): each case gives one line naming the file (and the
byte position or the manifest field), a non-zero exit, never exit 70 or a traceback, memory bounded."""

from __future__ import annotations

import json
import resource

import pytest

from .conftest import run_kltool

zstandard = pytest.importorskip("zstandard")


def _bad(res, *words):
    assert res.code == 2, (res.code, res.err)
    assert "Traceback" not in res.err and "internal error" not in res.err, res.err
    line = res.err.strip()
    assert "\n" not in line, line
    for w in words:
        assert w in line, (w, line)
    return line


# ------------------------------------------------------------ Aiven .rsm-manifest

def _aiven(tmp_path, compression=False):
    from .test_aiven import SRC, upload

    stem = upload(tmp_path / "bucket", SRC, 0, chunk_size=4096, compression=compression)
    mf = stem.parent / (stem.name + ".rsm-manifest")
    return mf, json.loads(mf.read_text())


def _index(m, field, value):
    m["segmentIndexes"]["offset"][field] = value


AIVEN_CASES = {
    # name: (mutation, compression, words the one error line holds)
    "chunkIndex a list": (lambda m: m.__setitem__("chunkIndex", []), False, ["rsm-manifest", "chunk index"]),
    "segmentIndexes a list": (lambda m: m.__setitem__("segmentIndexes", [1]), False, ["rsm-manifest", "segmentIndexes"]),
    "index entry a list": (lambda m: m["segmentIndexes"].__setitem__("offset", [1]), False,
                           ["rsm-manifest", "segmentIndexes.offset"]),
    "index position a string": (lambda m: _index(m, "position", "x"), False, ["rsm-manifest", "position"]),
    "index position NaN": (lambda m: _index(m, "position", float("nan")), False, ["rsm-manifest", "position"]),
    "index position negative": (lambda m: _index(m, "position", -5), False, ["rsm-manifest", "position", "-5"]),
    "index size negative": (lambda m: _index(m, "size", -5), False, ["rsm-manifest", "size"]),
    "index size 1 TiB": (lambda m: _index(m, "size", 1 << 40), False, ["rsm-manifest", "size"]),
    "index past the object": (lambda m: _index(m, "position", 1 << 62), False, [".indexes at byte 4611686018427387904"]),
    "file size 1 TiB": (lambda m: m["chunkIndex"].__setitem__("originalFileSize", 1 << 40), False,
                        ["rsm-manifest", "originalFileSize"]),
    "file size infinity": (lambda m: m["chunkIndex"].__setitem__("originalFileSize", float("inf")), False,
                           ["rsm-manifest", "originalFileSize"]),
    "chunk size 1 TiB": (lambda m: m["chunkIndex"].__setitem__("transformedChunkSize", 1 << 40), False,
                         ["rsm-manifest", "transformedChunkSize"]),
    "chunk size negative": (lambda m: m["chunkIndex"].__setitem__("transformedChunkSize", -100), False,
                            ["rsm-manifest", "transformedChunkSize"]),
    "2^31 one-byte chunks": (lambda m: m["chunkIndex"].update(originalFileSize=2**31 - 1, originalChunkSize=1),
                             False, [".log at byte 0", "chunk 0"]),
    "size table not zstd": (lambda m: m["chunkIndex"].__setitem__("transformedChunks", "AAAAAAAA"), True,
                            ["rsm-manifest", "transformedChunks"]),
    "size table not base64": (lambda m: m["chunkIndex"].__setitem__("transformedChunks", "!!!"), True,
                              ["rsm-manifest", "transformedChunks", "base64"]),
    "encryption without dataKey": (lambda m: m.__setitem__("encryption", {"x": 1}), False,
                                   ["rsm-manifest", "encryption"]),
    "encryption a list": (lambda m: m.__setitem__("encryption", [1]), False, ["rsm-manifest", "encryption"]),
    "encryption a string": (lambda m: m.__setitem__("encryption", "k:AAAA"), False, ["rsm-manifest", "encryption"]),
    "compression a string": (lambda m: m.__setitem__("compression", "yes"), False, ["rsm-manifest", "compression"]),
}


@pytest.mark.parametrize("name", list(AIVEN_CASES))
def test_hostile_aiven_manifest_one_line_error(tmp_path, name):
    mutate, compression, words = AIVEN_CASES[name]
    mf, m = _aiven(tmp_path, compression)
    mutate(m)
    mf.write_text(json.dumps(m))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, hard))  # (a 1 TiB buffer or 2^31 Chunk objects: MemoryError)
    try:
        res = run_kltool("tiered-fetch", tmp_path / "bucket", "-o", tmp_path / "out")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    _bad(res, *words)


def test_aiven_manifest_nested_arrays(tmp_path):
    mf, _m = _aiven(tmp_path)
    mf.write_text("[" * 100_000 + "]" * 100_000)
    _bad(run_kltool("tiered-fetch", tmp_path / "bucket", "-o", tmp_path / "out"), "rsm-manifest", "not JSON")


def test_aiven_base64_without_padding_is_read_as_java_reads_it(tmp_path):
    """Java's Base64 decoder takes a value without its '=' padding: so does kltool."""
    from .test_aiven import SRC

    mf, m = _aiven(tmp_path, compression=True)
    m["chunkIndex"]["transformedChunks"] = m["chunkIndex"]["transformedChunks"].rstrip("=")
    mf.write_text(json.dumps(m))
    res = run_kltool("tiered-fetch", tmp_path / "bucket", "-o", tmp_path / "out")
    assert res.code == 0, res.err
    out = tmp_path / "out" / SRC.name / "00000000000000000000.log"
    assert out.read_bytes() == (SRC / "00000000000000000000.log").read_bytes()


def test_chunk_table_is_lazy():
    from kltool.storage.aiven import _chunks

    t = _chunks({"type": "fixed", "originalChunkSize": 1, "originalFileSize": 2**31 - 1,
                 "transformedChunkSize": 9, "finalTransformedChunkSize": 3})
    assert len(t) == 2**31 - 1
    assert (t[5].original_position, t[5].original_size, t[5].position, t[5].size) == (5, 1, 45, 9)
    assert t[-1].size == 3 and t[-1].position == (2**31 - 2) * 9


# ------------------------------------------------------------ gzip reserved header flags

def test_gzip_member_with_reserved_flag_bits_read_as_kafka_reads_it(tmp_path):
    """A gzip member whose FLG byte has a reserved bit set (bits 5-7), batch CRC right: Kafka's
    GZIPInputStream ignores those bits and reads the batch's 5 records; zlib refuses the member."""
    import shutil
    import struct

    from kltool.format.speedups import crc32c

    from .conftest import ORACLE

    src = ORACLE / "v2-gzip-headers-0"
    part = tmp_path / src.name
    shutil.copytree(src, part)
    log = part / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    (size,) = struct.unpack_from(">i", data, 8)
    assert data[61:64] == b"\x1f\x8b\x08" and data[64] == 0  # the first record's gzip header
    data[64] |= 0x80
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:12 + size])))
    log.write_bytes(bytes(data))
    res = run_kltool("--json", "dump", "--records", log)
    assert res.code == 0, res.err
    recs = [json.loads(ln) for ln in res.out.splitlines()]
    assert [r["offset"] for r in recs if r["type"] == "record"][:5] == [0, 1, 2, 3, 4]
    assert not [r for r in recs if r["type"] == "finding"]


# ------------------------------------------------------------ file kinds: a FIFO under a metadata name

def _kltool_subprocess(*args, timeout=20):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", "from kltool.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def test_diff_fifo_leader_epoch_checkpoint_does_not_block(tmp_path):
    """A FIFO named leader-epoch-checkpoint: the old diff opened it for reading and waited for a writer for
    ever; now the checkpoint is unreadable (the epochs come from the batches) and the diff ends."""
    import os
    import shutil
    import subprocess

    from .conftest import FIXTURES

    src = FIXTURES / "forensics" / "kafka4.4-kraft-transactions" / "logdir" / "t-0"
    a = tmp_path / "a" / "t-0"
    shutil.copytree(src, a)
    (a / "leader-epoch-checkpoint").unlink()
    os.mkfifo(a / "leader-epoch-checkpoint")
    try:
        res = _kltool_subprocess("--json", "diff", a, src, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("kltool diff blocked on a FIFO named leader-epoch-checkpoint")
    assert res.returncode in (0, 1), res.stderr
    assert "Traceback" not in res.stderr


def test_aiven_fifo_manifest_does_not_block(tmp_path):
    import os
    import subprocess

    mf, _m = _aiven(tmp_path)
    mf.unlink()
    os.mkfifo(mf)
    try:
        res = _kltool_subprocess("tiered-fetch", tmp_path / "bucket", "-o", tmp_path / "out", timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("kltool tiered-fetch blocked on a FIFO named .rsm-manifest")
    assert res.returncode == 2 and "rsm-manifest" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_fifo_given_as_the_path_is_named_for_what_it_is(tmp_path):
    """`kltool dump FIFO` said "permission denied" (the path is neither a file nor a directory one may
    enter), which sends the user to chmod; it is a FIFO."""
    import os

    f = tmp_path / "leader-epoch-checkpoint"
    os.mkfifo(f)
    line = _bad(run_kltool("dump", f), str(f), "not a regular file")
    assert "permission denied" not in line
