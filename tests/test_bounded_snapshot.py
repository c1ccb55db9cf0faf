"""A producer snapshot is read a chunk at a time, whatever its size.

46 bytes a producer: a busy idempotent cluster's snapshot can pass the 64 MiB kltool allows a metadata file
(~1.46 M producers), and was then refused ("not read") by verify, dump, producers and transactions. Now
:func:`kltool.storage.fs.read_snapshot` judges structure and version from the first bytes and the size, the CRC
over 4 MiB chunks, and decodes the entries after it (dump streams them out): never the file's bytes whole."""

from __future__ import annotations

import json
import random
import shutil
import struct
from pathlib import Path

import pytest

from kltool.errors import CorruptDataError
from kltool.format import snapshot as fsnap
from kltool.format.speedups import crc32c
from kltool.storage import fs

from .conftest import FIXTURES
from .test_bounded_memory import WILLIAM, _run

_ENTRY = struct.Struct(">qhiqiqiq")


def _entries(n: int, seed: int = 1) -> list[fsnap.ProducerEntry]:
    rnd = random.Random(seed)
    return [fsnap.ProducerEntry(1000 + i, rnd.randrange(100), rnd.randrange(1 << 20), rnd.randrange(1 << 40),
                                rnd.randrange(5), 1_600_000_000_000 + i, rnd.randrange(-1, 9),
                                rnd.choice((-1, rnd.randrange(1 << 40)))) for i in range(n)]


def _variants() -> dict[str, bytes]:
    good = fsnap.encode_snapshot(_entries(7))
    bad_crc = bytearray(good)
    bad_crc[20] ^= 1
    out = {f"fixture-{p.parent.name}-{p.name}": p.read_bytes() for p in sorted(FIXTURES.rglob("*.snapshot"))[:6]}
    out.update({
        "good": good, "empty": fsnap.encode_snapshot([]), "bad-crc": bytes(bad_crc), "trailing": good + b"xyz",
        "short-1": good[:1], "short-5": good[:5], "short-9": good[:9], "cut-entry": good[:-13],
        "negative-count": good[:6] + struct.pack(">i", -2) + good[10:],
        "huge-count": good[:6] + struct.pack(">i", 1 << 30) + good[10:],
        "version-2": struct.pack(">h", 2) + good[2:], "nothing": b"",
    })
    return out


def _outcome(fn):
    try:
        return fn()
    except CorruptDataError as e:
        return ("error", e.message, e.position)


@pytest.mark.parametrize("name", sorted(_variants()))
@pytest.mark.parametrize("strict", [False, True])
def test_read_snapshot_is_parse_snapshot_in_chunks(tmp_path, monkeypatch, name, strict):
    data = _variants()[name]
    f = tmp_path / "00000000000000000000.snapshot"
    f.write_bytes(data)
    want = _outcome(lambda: fsnap.parse_snapshot(data, strict=strict))
    monkeypatch.setattr(fs, "_SNAPSHOT_CHUNK", 13)  # entries cut across chunks everywhere
    assert _outcome(lambda: fs.read_snapshot(f, strict=strict)) == want
    checked = _outcome(lambda: fs.read_snapshot(f, strict=strict, entries=False))
    if isinstance(want, tuple):
        assert checked == want
    else:
        assert checked.entries == [] and (checked.crc, checked.crc_valid, checked.computed_crc,
                                          checked.trailing_bytes) == (want.crc, want.crc_valid, want.computed_crc,
                                                                      want.trailing_bytes)
        assert list(fs.snapshot_entries(f, checked)) == want.entries


def test_entries_and_crc_fed_in_pieces():
    data = fsnap.encode_snapshot(_entries(50))
    body = data[fsnap.HEADER_SIZE:]
    for cut in (1, 5, 46, 47, 100):
        dec = fsnap.EntryDecoder()
        got = []
        for i in range(0, len(body), cut):
            got += dec.feed(body[i:i + cut])
        assert got == fsnap.parse_snapshot(data).entries
        crc = 0
        for i in range(fsnap.ENTRIES_OFFSET, len(data), cut):
            crc = fsnap.snapshot_crc(data[i:i + cut], crc, start=0)
        assert crc == fsnap.snapshot_crc(data)


PRODUCERS = 1_460_000  # 46 bytes each: 67.2 MB, over the 64 MiB a metadata file may have


def _write_big_snapshot(path: Path, n: int) -> None:
    """A valid snapshot of ``n`` producers, written (and its CRC computed) a block at a time."""
    tail_crc = crc32c(struct.pack(">i", n))
    with open(path, "wb") as f:
        f.write(bytes(fsnap.HEADER_SIZE))
        for start in range(0, n, 100_000):
            block = b"".join(_ENTRY.pack(1000 + i, 3, -1, -1, 0, 1_600_000_000_000, -1, -1)
                             for i in range(start, min(n, start + 100_000)))
            tail_crc = crc32c(block, tail_crc)
            f.write(block)
        f.seek(0)
        f.write(struct.pack(">hIi", fsnap.SNAPSHOT_VERSION, tail_crc, n))


@pytest.fixture(scope="module")
def big_snapshot_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bigsnap") / "d"
    shutil.copytree(WILLIAM, d)
    _write_big_snapshot(d / "__consumer_offsets-28" / f"{8202:020d}.snapshot", PRODUCERS)
    return d


@pytest.mark.slow
def test_a_snapshot_of_a_million_and_a_half_producers_is_verified_and_dumped_streamed(big_snapshot_dir):
    # Refused before (EFBIG: "far larger than any such file ... not read"): verify reported it unreadable,
    # dump exited 2.
    snap = big_snapshot_dir / "__consumer_offsets-28" / f"{8202:020d}.snapshot"
    assert snap.stat().st_size > fs.METADATA_MAX_BYTES
    code, out, err, rss = _run("verify", snap.parent)
    assert code == 0 and "snapshot" not in out, (code, out[-2000:], err[-2000:])
    assert rss < 100 << 20, rss >> 20
    code, out, err, rss = _run("dump", snap)
    assert code == 0, err[-2000:]
    assert rss < 100 << 20, rss >> 20  # (entries streamed out, never the file whole)
    lines = out.splitlines()
    assert len(lines) == PRODUCERS
    assert json.loads(lines[-1])["producer_id"] == 1000 + PRODUCERS - 1


@pytest.mark.slow
def test_the_producer_map_of_a_huge_snapshot_costs_its_producers_not_a_copy_of_the_file(big_snapshot_dir):
    # Refused before: the snapshot was skipped as unreadable, and the broker's state not what it loads.
    code, out, err, rss = _run("producers", big_snapshot_dir / "__consumer_offsets-28", limit_as=1536 << 20)
    assert code == 0, (code, out[-2000:], err[-2000:])
    summary = json.loads(out.splitlines()[-1])
    assert summary["producers"] == PRODUCERS and summary["snapshots"] == {"__consumer_offsets-28": f"{8202:020d}.snapshot"}
    # per-producer state (~400 bytes each, the entries and the map), no 67 MB copy of the file beside it
    assert rss < 800 << 20, rss >> 20
