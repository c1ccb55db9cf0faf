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


def _serve():
    """(server, fs, storage options) of a moto S3 server on loopback holding the bucket; the caller stops it."""
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
    return server, fs, opts


@pytest.fixture(scope="module")
def s3():
    server, fs, opts = _serve()
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


class _Gets:
    """The GETs the S3 server answers, by path (a WSGI wrapper around the server's app)."""

    def __init__(self, server):
        self.paths: list[str] = []
        self._srv = server
        self._inner = server.app

    def __enter__(self):
        def app(environ, start_response):
            if environ["REQUEST_METHOD"] == "GET":
                self.paths.append(environ["PATH_INFO"])
            return self._inner(environ, start_response)
        self._srv.app = app
        return self

    def __exit__(self, *exc):
        self._srv.app = self._inner

    def of(self, suffix: str) -> int:
        return sum(p.endswith(suffix) for p in self.paths)


@pytest.fixture(scope="module")
def s3_counted():
    """An S3 server on loopback, its GETs counted (``_Gets``)."""
    server, fs, opts = _serve()
    pafs.copy_files(str(WILLIAM / "__consumer_offsets-28"), f"{BUCKET}/counted/__consumer_offsets-28",
                    destination_filesystem=fs)
    yield server._server, opts
    server.stop()


@pytest.mark.parametrize("split", ["0", "100000"])
def test_planning_fetches_a_remote_index_once(s3_counted, split):
    # The first segment read from startingOffset is sought through its .index, and split at entries of the
    # same .index: it was fetched for each (2 GETs of it). Now one planning fetches it once.
    pytest.importorskip("pyspark")
    from kltool.spark import datasource as ds

    srv, opts = s3_counted
    with _Gets(srv) as gets:
        segs = ds.plan_segments({"path": f"s3://{BUCKET}/counted/__consumer_offsets-28", "startingOffset": "4000",
                                 "splitBytes": split, **{f"storage.{k}": v for k, v in opts.items()}})
    assert segs and segs[0].position > 0  # (sought through the index)
    if split != "0":
        assert len(segs) > 1  # (split at its entries)
    assert gets.of(f"{SEG0}.index") == 1, gets.paths


def test_the_end_of_a_remote_stream_fetches_its_index_once(s3_counted):
    # stream_end walks the last segment from its last index entry, and when nothing valid follows it (here a
    # torn batch there), from the start: the .index was fetched for each walk (2 GETs). Now once.
    pytest.importorskip("pyspark")
    from kltool.spark.streaming import StreamPartition, stream_end
    from kltool.storage.uri import select_remote

    srv, opts = s3_counted
    src = WILLIAM / "__consumer_offsets-28"
    index = (src / f"{SEG0}.index").read_bytes()
    last_pos = fidx.offset_index_entries(index, 0)[-1][1]
    fs = pafs.S3FileSystem(endpoint_override=opts["endpoint_override"].split("//", 1)[1], scheme="http",
                           access_key="testing", secret_key="testing", region="us-east-1")
    d = f"{BUCKET}/torn/__consumer_offsets-28"
    _put(fs, f"torn/__consumer_offsets-28/{SEG0}.log", (src / f"{SEG0}.log").read_bytes()[: last_pos + 30])
    _put(fs, f"torn/__consumer_offsets-28/{SEG0}.index", index)
    [rp] = select_remote([f"s3://{d}"], None, None, opts).partitions
    with _Gets(srv) as gets:
        end = stream_end(StreamPartition(rp.topic, rp.partition, f"s3://{d}", remote=rp, storage=opts))
    assert end > 0
    assert gets.of(f"{SEG0}.index") == 1, gets.paths
