"""Hostile input for the read commands (found by bench/read_campaign.py): what Kafka's own reader reads
kltool reads too, and damage is reported as damage, by file and position."""

from __future__ import annotations

import struct

from kltool.format import build_batch
from kltool.format.compression import GZIP, SNAPPY, compress
from kltool.format.legacy import encode_legacy_message
from kltool.format.speedups import crc32c


def _v2_batch(base_offset: int, payload: bytes, count: int, attrs: int = 0) -> bytes:
    ts = 1_700_000_000_000
    body = struct.pack(">hiqqqhii", attrs, count - 1, ts, ts, -1, -1, -1, count) + payload
    return struct.pack(">qiib", base_offset, 9 + len(body), 0, 2) + struct.pack(">I", crc32c(body)) + body


def _segment(tmp_path, data: bytes, topic: str = "t-0"):
    d = tmp_path / topic
    d.mkdir(parents=True)
    f = d / "00000000000000000000.log"
    f.write_bytes(data)
    return f


def _wrapper_with_torn_tail(magic: int, tail: bytes) -> bytes:
    """A gzip wrapper (offset 12) of three inner messages (offsets 10..12), then ``tail`` in the compressed
    data: what Kafka's iterator reads as the three messages and then the end."""
    inner = b"".join(encode_legacy_message(o if magic == 1 else 10 + o, magic, 0, 1_700_000_000_000, b"k%d" % o,
                                           b"v%d" % o) for o in range(3))
    return encode_legacy_message(12, magic, GZIP, 1_700_000_000_000, None, compress(GZIP, inner + tail, magic=magic))


def test_legacy_wrapper_inner_messages_before_a_partial_one_are_read(kl, tmp_path):
    """Kafka (kafka-clients 3.9.1, through the oracle) serves offsets 10, 11, 12 of such a wrapper and ignores
    the partial entry after them (one that claims more bytes than are left, or a torn last message). kltool
    lost all three (record_corrupt, no records, the wrapper's offset as base offset)."""
    for magic in (0, 1):
        for tail in (struct.pack(">qi", 0, 1 << 28) + bytes(20), encode_legacy_message(3, magic, 0, 0, b"k", b"v")[:20]):
            f = _segment(tmp_path / f"m{magic}-{len(tail)}", _wrapper_with_torn_tail(magic, tail))
            r = kl("--json", "dump", "--records", f)
            assert r.code == 1, r
            got = r.json()
            assert [o["offset"] for o in got if o["type"] == "record"] == [10, 11, 12], got
            (batch,) = [o for o in got if o["type"] == "batch"]
            assert batch["base_offset"] == 10 and batch["last_offset"] == 12
            (finding,) = [o for o in got if o["type"] == "finding"]
            assert finding["kind"] == "record_corrupt" and finding["position"] == 0, finding
            assert "inner message" in finding["message"]
            # the batch line alone (no --records) names the exact base offset too
            assert [o["base_offset"] for o in kl("--json", "dump", f).json() if o["type"] == "batch"] == [10]
            # verify --deep still names the damage
            v = kl("--json", "verify", "--deep", f)
            assert v.code == 1 and any(o.get("kind") == "record_corrupt" for o in v.json()), v


def test_legacy_inner_message_below_the_minimum_size_is_still_corrupt(kl, tmp_path):
    """Kafka fails the whole wrapper for an inner size below 14 (CorruptRecordException): no records."""
    f = _segment(tmp_path, _wrapper_with_torn_tail(1, struct.pack(">qi", 0, 3) + bytes(20)))
    r = kl("--json", "dump", "--records", f)
    assert r.code == 1
    assert not [o for o in r.json() if o["type"] == "record"]
    assert [o["kind"] for o in r.json() if o["type"] == "finding"] == ["record_corrupt"]


def test_snappy_garbage_claiming_a_huge_size_is_corrupt_not_too_large(kl, tmp_path):
    """A snappy payload of garbage whose length varint claims 20 GB was reported as record_too_large: dump
    exited 2 ("more than --max-record-bytes", as for a real large record). No snappy block of 62 bytes can
    hold that much (an element of 3 bytes copies at most 64): it is corrupt (exit 1, record_corrupt), and the
    batches after it are dumped."""
    garbage = b"\xaa\xbb\xcc\xd8\x4c" + bytes(range(57))
    good = build_batch([(0, 1_700_000_000_000, b"k", b"v", ())], base_offset=0)
    after = build_batch([(0, 1_700_000_000_000, b"k2", b"v2", ())], base_offset=5)
    f = _segment(tmp_path, good + _v2_batch(1, garbage, 3, attrs=SNAPPY) + after)
    r = kl("--json", "dump", "--records", f)
    assert r.code == 1, r
    (finding,) = [o for o in r.json() if o["type"] == "finding"]
    assert finding["kind"] == "record_corrupt" and finding["position"] == len(good), finding
    assert [o["offset"] for o in r.json() if o["type"] == "record"] == [0, 5]
    t = kl("dump", "--records", f)
    assert t.code == 1 and "record_corrupt" in t.out, t


def test_snappy_block_that_may_really_be_large_is_still_too_large(kl, tmp_path):
    """The limit stays: a real (highly compressible) block over --max-record-bytes is record_too_large."""
    from kltool.format.batch import encode_v2_record

    rec = encode_v2_record(0, 0, b"k", bytes(2 << 20), ())
    f = _segment(tmp_path, _v2_batch(0, compress(SNAPPY, rec), 1, attrs=SNAPPY))
    r = kl("--json", "dump", "--records", "--max-record-bytes", "1048576", f)
    assert r.code == 2, r
    assert [o["kind"] for o in r.json() if o["type"] == "finding"] == ["record_too_large"]


def test_a_partition_dir_whose_name_is_not_utf8(tmp_path):
    """A directory name that is not UTF-8 (bytes from another system's locale): --json dump --records failed
    with exit 70 (the C formatter's suffix could not be encoded), and with a strict UTF-8 stdout (the usual
    locale) every command did. Now JSON lines are valid UTF-8 with the name's JSON escape (decoded back to
    the same str, whose os.fsencode is the original name); text lines carry the original bytes."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    from .conftest import ORACLE

    root = os.fsencode(tmp_path)
    part = os.path.join(root, b"t\xff-0")
    os.makedirs(part)
    shutil.copyfile(ORACLE / "v2-none-0" / "00000000000000000000.log", os.path.join(part, b"00000000000000000000.log"))
    env = dict(os.environ, PYTHONIOENCODING="utf-8:strict")
    for args in (["--json", "dump", "--records"], ["--json", "dump"], ["--json", "info"], ["--json", "verify"],
                 ["--json", "offsets", "--count"], ["dump", "--records"], ["info"], ["verify"]):
        r = subprocess.run([sys.executable, "-m", "kltool", *args, os.fsdecode(root)], capture_output=True, env=env)
        assert r.returncode in (0, 1), (args, r.returncode, r.stderr[-500:])
        if args[0] == "--json":
            objs = [json.loads(line.decode("utf-8")) for line in r.stdout.splitlines()]
            files = {o["file"] for o in objs if "file" in o}
            if args[1] == "dump":
                assert files == {os.fsdecode(os.path.join(part, b"00000000000000000000.log"))}, files
                assert {o["topic"] for o in objs if o["type"] in ("record", "batch")} == {os.fsdecode(b"t\xff")}
        else:
            assert b"t\xff" in r.stdout or args == ["verify"], r.stdout[:300]


def test_segment_named_past_long_max(kl, tmp_path):
    """A segment named 99999999999999999999.log (its offset past Long.MAX_VALUE: Kafka's offsetFromFileName
    cannot parse it): verify exited 70 (OverflowError: the C walker got the base offset); now its batches are
    errors by position and every read command goes on."""
    import shutil

    from .conftest import ORACLE

    part = tmp_path / "t-0"
    part.mkdir()
    src = ORACLE / "v2-none-0" / "00000000000000000000.log"
    shutil.copyfile(src, part / "00000000000000000000.log")
    shutil.copyfile(src, part / "99999999999999999999.log")
    for args in (["--json", "verify"], ["verify", "--deep"], ["--json", "dump", "--records"], ["info"],
                 ["--json", "offsets", "--count"], ["transactions"], ["producers"]):
        r = kl(*args, tmp_path)
        assert r.code in (0, 1), (args, r)
    r = kl("--json", "verify", tmp_path)
    assert r.code == 1
    errors = [f for f in r.json() if f.get("severity") == "error"]
    assert errors and all(f["file"].endswith("99999999999999999999.log") and f["position"] is not None for f in errors)


def test_records_count_past_the_records_is_reported_at_the_batch(kl, tmp_path):
    """A batch whose records count (CRC made right) claims more records than it holds: Kafka's reader fails
    that batch ("premature EOF"). dump named the position where the next record would start: the end of the
    batch, i.e. the start of the (valid) batch after it; now the damaged batch's own position."""
    rec = build_batch([(0, 1_700_000_000_000, b"k", b"v", ())], base_offset=0)
    body = bytearray(rec[21:])
    struct.pack_into(">i", body, 57 - 21, 3)  # records count 3, one record present
    bad = rec[:17] + struct.pack(">I", crc32c(bytes(body))) + bytes(body)
    after = build_batch([(0, 1_700_000_000_000, b"k2", b"v2", ())], base_offset=1)
    f = _segment(tmp_path, bad + after)
    r = kl("--json", "dump", "--records", f)
    assert r.code == 1, r
    (finding,) = [o for o in r.json() if o["type"] == "finding"]
    assert finding["kind"] == "record_corrupt" and 0 <= finding["position"] < len(bad), finding
    assert [o["offset"] for o in r.json() if o["type"] == "record"][-1:] == [1]  # the batch after it is read
