"""A small builder of log dirs with known timestamps and sizes, for the retention and offsets tests,
and the checks that what it builds is what a broker leaves (verify clean, offsets as asked).

Segments are written batch by batch with :func:`kltool.format.build_batch` and indexed with
:class:`kltool.storage.index_builder.IndexBuilder` (the broker's recovery rule, final time-index entry as
on roll), so each segment looks like a closed one of a cleanly stopped broker.
"""

from __future__ import annotations

import os
from pathlib import Path

from kltool.format import build_batch, parse_header
from kltool.format.checkpoints import encode_leader_epoch_checkpoint, encode_offset_checkpoint
from kltool.storage import open_path
from kltool.storage.index_builder import IndexBuilder

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
H = 3_600_000


def batch(offset: int, timestamps, *, value_size: int = 100, magic: int = 2, log_append_time=None,
          offset_step: int = 1) -> bytes:
    """One batch holding one record per timestamp, offsets ``offset``, ``offset+step``, ..."""
    recs = [(i * offset_step, ts, f"k{offset + i}".encode(), b"v" * value_size, ()) for i, ts in enumerate(timestamps)]
    kw = {"partition_leader_epoch": 0} if magic == 2 else {}
    if log_append_time is not None:
        kw["log_append_time"] = log_append_time
    return build_batch(recs, base_offset=offset, magic=magic, **kw)


def write_segment(pdir: Path, base_offset: int, batches: list[bytes], *, indexes: bool = True,
                  interval: int = 4096) -> Path:
    log = pdir / f"{base_offset:020d}.log"
    data = b"".join(batches)
    log.write_bytes(data)
    if indexes:
        b = IndexBuilder(base_offset, interval)
        pos = 0
        while pos < len(data):
            h = parse_header(data, pos)
            b.on_header(h)
            pos += h.size
        b.finish()
        (pdir / f"{base_offset:020d}.index").write_bytes(b.offset_index_bytes())
        (pdir / f"{base_offset:020d}.timeindex").write_bytes(b.time_index_bytes())
    return log


def build_partition(logdir: Path, topic: str, segments, *, partition: int = 0, start: int = 0,
                    value_size: int = 100, records_per_batch: int | None = None, magic: int = 2,
                    log_append_time=None, indexes: bool = True, interval: int = 4096) -> Path:
    """``segments``: per segment, a list of batches, each a list of record timestamps (or an int: that
    many records with timestamp T0). Offsets run on from ``start``; each segment is named by its first
    offset. An empty list makes an empty segment. Returns the partition directory."""
    logdir.mkdir(parents=True, exist_ok=True)
    pdir = logdir / f"{topic}-{partition}"
    pdir.mkdir(exist_ok=True)
    off = start
    for seg in segments:
        base = off
        bs = []
        for b in seg:
            ts = [T0] * b if isinstance(b, int) else list(b)
            lat = log_append_time(off) if callable(log_append_time) else log_append_time
            bs.append(batch(off, ts, value_size=value_size, magic=magic, log_append_time=lat))
            off += len(ts)
        write_segment(pdir, base, bs, indexes=indexes, interval=interval)
    (pdir / "leader-epoch-checkpoint").write_text(encode_leader_epoch_checkpoint([(0, start)]))
    for name in ("log-start-offset-checkpoint", "recovery-point-offset-checkpoint"):
        if not (logdir / name).exists():
            (logdir / name).write_text(encode_offset_checkpoint({}))
    return pdir


def set_mtime(path: Path, ms: int) -> None:
    os.utime(path, (ms / 1000, ms / 1000))


# ------------------------------------------------------------------------------- the builder's own checks


def test_built_logdir_verifies_clean_and_has_the_offsets_asked(tmp_path, kl):
    pdir = build_partition(tmp_path / "ld", "t", [[[T0, T0 + 1]] * 3, [[T0 + 2]] * 2, []])
    names = sorted(p.name for p in pdir.iterdir())
    assert "00000000000000000000.log" in names and "00000000000000000006.log" in names
    assert "00000000000000000008.log" in names  # the empty active segment at the log end
    r = kl("--json", "verify", tmp_path / "ld")
    assert r.code == 0, r
    assert r.json()[-1]["errors"] == 0 and r.json()[-1]["warnings"] == 0
    p = open_path(tmp_path / "ld").partitions[0]
    assert [s.base_offset for s in p.segments] == [0, 6, 8]
    assert p.segments[0].time_index()[-1] == (T0 + 1, 1)  # the first batch that reached the max


def test_index_entries_are_written_for_large_segments(tmp_path):
    pdir = build_partition(tmp_path / "ld", "t", [[[T0 + i] for i in range(100)]], value_size=200)
    assert (pdir / "00000000000000000000.index").stat().st_size > 0
    p = open_path(tmp_path / "ld").partitions[0]
    assert len(p.segments[0].time_index()) > 3
