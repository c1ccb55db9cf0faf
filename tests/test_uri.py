"""kltool.storage.uri: which paths are remote, storage options, and the listing of a tree by name
(through pyarrow's filesystem layer; here over file:// URIs, which it serves like an object store)."""

from __future__ import annotations

import shutil

import pytest

from kltool.errors import UsageError
from kltool.format import names as fn
from kltool.storage import uri

from .conftest import ORACLE

pytest.importorskip("pyarrow")


def test_what_is_remote():
    assert uri.is_remote("s3://b/x") and uri.is_remote("gs://b") and uri.is_remote("hdfs://nn/x")
    assert not uri.is_remote("/var/lib/kafka") and not uri.is_remote("file:///x")
    assert not uri.is_remote("a:b/c")  # a local directory may be named a:b
    assert uri.local_path("file:///x/a%20b") == "/x/a b"
    assert uri.local_path("rel/dir") == "rel/dir"


def test_an_unknown_s3_storage_option_is_a_usage_error():
    with pytest.raises(UsageError, match="storage option 'endpointt' is not one for s3"):
        uri.filesystem("s3://bucket/x", {"endpointt": "http://127.0.0.1:1"})


def test_hadoop_names_of_s3_options_are_understood():
    fs, path = uri.filesystem("s3://bucket/a/b/", {"fs.s3a.endpoint": "http://127.0.0.1:9", "fs.s3a.access.key": "k",
                                                  "fs.s3a.secret.key": "s"})
    assert path == "bucket/a/b" and type(fs).__name__ == "S3FileSystem"


def tree(tmp_path):
    root = tmp_path / "logdir"
    shutil.copytree(ORACLE / "v2-multi-segment-0", root / "orders-0")
    (root / "orders-0" / fn.segment_file(400, "index")).write_bytes(b"")
    (root / fn.LOG_START_OFFSET_CHECKPOINT).write_text("0\n1\norders 0 3\n")
    lone = tmp_path / "loose"
    lone.mkdir()
    (lone / fn.segment_file(7, "log")).write_bytes((root / "orders-0" / fn.segment_file(0, "log")).read_bytes())
    return root, lone


def test_list_remote_names_partitions_segments_indexes_and_the_log_start(tmp_path):
    root, _lone = tree(tmp_path)
    sel = uri.list_remote([f"file://{root}"])
    [p] = sel.partitions
    assert (p.topic, p.partition, p.kind) == ("orders", 0, "normal")
    local = sorted(x.name for x in (root / "orders-0").glob("*.log"))
    assert [s.log.rsplit("/", 1)[1] for s in p.segments] == local
    assert [s.index and s.index.rsplit("/", 1)[1] for s in p.segments] == [None, fn.segment_file(400, "index"), None]
    assert p.segments[0].size == (root / "orders-0" / local[0]).stat().st_size
    assert p.log_start_checkpoint == 3 and p.log_start_offset() == 3
    assert sel.files == []


def test_list_remote_lone_segments_and_a_missing_path(tmp_path):
    _root, lone = tree(tmp_path)
    sel = uri.list_remote([f"file://{lone}"])
    assert sel.partitions == [] and [u.rsplit("/", 1)[1] for u, _n in sel.files] == [fn.segment_file(7, "log")]
    with pytest.raises(UsageError, match="no such file or directory"):
        uri.list_remote([f"file://{tmp_path}/nope"])


def test_select_remote_names_what_a_filter_misses(tmp_path):
    root, _lone = tree(tmp_path)
    with pytest.raises(UsageError, match="--topic 'pay\\*' selects nothing .* \\(topics there: orders\\)"):
        uri.select_remote([f"file://{root}"], "pay*", None)
    assert len(uri.select_remote([f"file://{root}"], "ord*", {0}).partitions) == 1
