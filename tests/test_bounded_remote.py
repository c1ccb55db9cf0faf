"""A remote ``.index`` is read with ranged reads (an S3 server on loopback: moto's), never whole.

Planning a split over a remote segment read its ``.index`` whole (one GET of the object) and decoded every
entry into a list: a big or garbage-filled index cost its size several times over. Now
:func:`kltool.storage.uri.read_remote_index` finds the zero tail from the end a range at a time and returns a
:class:`~kltool.storage.uri.RemoteBytes` that the index functions read a chunk at a time, as a local
:class:`~kltool.storage.fs.FileBytes` is; the entries are the local ones."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kltool.format import index as fidx
from kltool.storage import fs as lfs

from .conftest import REAL

pafs = pytest.importorskip("pyarrow.fs")

BUCKET = "bounded"
WILLIAM = REAL / "william0423-indexed-zk"
SEG0 = "00000000000000000000"


@pytest.fixture(scope="module")
def s3():
    server_mod = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server._server.server_port
    opts = {"endpoint_override": f"http://127.0.0.1:{port}", "access_key": "testing", "secret_key": "testing",
            "region": "us-east-1"}
    fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", access_key="testing",
                           secret_key="testing", region="us-east-1", allow_bucket_creation=True)
    fs.create_dir(BUCKET)
    yield fs, opts
    server.stop()


def _put(fs, key: str, data: bytes) -> str:
    with fs.open_output_stream(f"{BUCKET}/{key}") as out:
        out.write(data)
    return f"s3://{BUCKET}/{key}"


def _contents() -> dict[str, bytes]:
    real = (WILLIAM / "__consumer_offsets-28" / f"{SEG0}.index").read_bytes()
    return {"real": real, "zero-tail": real + bytes(800), "garbage": os.urandom(8 * 300) + b"\1",
            "ff": b"\xff" * 2400, "zeros": bytes(80), "empty": b"", "partial": real + b"\7\7\7"}


@pytest.mark.parametrize("name", sorted(_contents()))
def test_a_remote_index_read_in_ranges_gives_the_local_entries(s3, tmp_path, monkeypatch, name):
    fs, opts = s3
    from kltool.storage.uri import RemoteBytes, read_remote_index

    data = _contents()[name]
    uri = _put(fs, f"same/{name}/{SEG0}.index", data)
    local = tmp_path / f"{SEG0}.index"
    local.write_bytes(data)
    want = fidx.offset_index_entries(lfs.read_index_file(local), 7)
    assert fidx.offset_index_entries(read_remote_index(uri, opts), 7) == want  # (small: one range)
    monkeypatch.setattr(fidx, "CHUNK_ENTRIES", 50)
    remote = read_remote_index(uri, opts, whole_up_to=0)
    if data.rstrip(b"\0"):
        assert isinstance(remote, RemoteBytes) or isinstance(remote.head, RemoteBytes)
    got = fidx.offset_index_entries(remote, 7)
    assert list(got) == want and len(got) == len(want)
    assert fidx.offset_index_zero_tail(remote) == fidx.offset_index_zero_tail(data)
    for target in sorted({e[0] for e in want[:20]} | {0, 7, 1 << 40}):
        assert fidx.lookup_offset(got, target, 7) == fidx.lookup_offset(want, target, 7)


_PLAN = """
import sys
out, uri, endpoint = sys.argv[1:4]
from kltool.spark.planning import SegmentRead, split_segments
storage = {"endpoint_override": endpoint, "access_key": "testing", "secret_key": "testing", "region": "us-east-1"}
r = SegmentRead(uri, "t", 0, 0, bytes=1 << 20, storage=storage)
split = split_segments([r], 100_000)
with open("/proc/self/status") as f, open(out, "w") as o:
    o.write(next(line.split()[1] for line in f if line.startswith("VmHWM:")) + " " + str(len(split)))
"""


def _plan_peak(uri: str, endpoint: str) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as t:
        out = Path(t) / "peak"
        p = subprocess.run([sys.executable, "-c", _PLAN, out, uri, endpoint], capture_output=True, text=True,
                           timeout=600, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr[-3000:]
        kb, n = out.read_text().split()
        return int(kb) << 10, int(n)


@pytest.mark.slow
def test_planning_splits_over_a_remote_segment_holds_bounded_bytes_of_its_index(s3):
    # A 64 MiB .index (0xFF: 8 M entries that point nowhere, every one looked at by the split planner) beside
    # a 1 MiB segment. Before: the object read whole and decoded into a list, 878 MB peak against 74 MB with a
    # one-entry index; now its entries are read a range at a time: 79 MB.
    fs, opts = s3
    log = (WILLIAM / "__consumer_offsets-28" / f"{SEG0}.log").read_bytes()
    _put(fs, f"big/t-0/{SEG0}.index", (WILLIAM / "__consumer_offsets-28" / f"{SEG0}.index").read_bytes())
    small = _put(fs, f"small/t-0/{SEG0}.log", log)
    _put(fs, f"small/t-0/{SEG0}.index", b"\xff" * 8)
    big = _put(fs, f"big/t-0/{SEG0}.log", log)
    _put(fs, f"big/t-0/{SEG0}.index", b"\xff" * (64 << 20))
    base_peak, _n = _plan_peak(small, opts["endpoint_override"])
    peak, n = _plan_peak(big, opts["endpoint_override"])
    assert n == 1  # (no entry to split at)
    assert peak < base_peak + (48 << 20), (base_peak >> 20, peak >> 20)
