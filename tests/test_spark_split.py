"""How the kafka-log source cuts big segments into tasks: by default as Spark cuts splittable files
(min(maxPartitionBytes, bytes per core)), made even, in a multiple of the cores, so that no core
finishes alone; ``splitBytes`` when given. The rows are the same however a segment is cut."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from kltool.format import build_batch  # noqa: E402
from kltool.format.names import segment_file  # noqa: E402
from kltool.spark import datasource as ds  # noqa: E402

PER_BATCH = 40


@pytest.fixture(scope="module")
def big(tmp_path_factory, kl_module):
    """t-0: one segment of ~1.6 MB (400 batches of 40 records of ~100 bytes) with its .index."""
    d = tmp_path_factory.mktemp("split") / "t-0"
    d.mkdir()
    with open(d / segment_file(0, "log"), "wb") as f:
        for b in range(400):
            recs = [(i, 1_700_000_000_000 + b, b"k%d" % i, b"v" * 90 + b"%06d" % (b * PER_BATCH + i), [])
                    for i in range(PER_BATCH)]
            f.write(build_batch(recs, base_offset=b * PER_BATCH))
    r = kl_module("rebuild-index", str(d))
    assert r.code == 0, r.err
    return d


@pytest.fixture(scope="module")
def kl_module():
    from .conftest import run_kltool

    return run_kltool


def plan(d, parallelism, **opts):
    o = ds.normalize_options({"path": str(d), "openCostInBytes": "4096", **opts})
    return [g.value for g in ds.KafkaLogReader(o, None, parallelism).partitions()]


def sizes(groups):
    return [sum(r.bytes for r in g) for g in groups]


def offsets(d, groups, **opts):
    o = ds.normalize_options({"path": str(d), **opts})
    out = []
    for g in groups:
        for b in ds.read_partition_rows(o, g, ["offset"]):
            out.extend(b.column(0).to_pylist())
    return out


@pytest.mark.parametrize("cores", [2, 3, 4])
def test_a_big_segment_becomes_even_tasks_in_a_multiple_of_the_cores(big, cores):
    total = (big / segment_file(0, "log")).stat().st_size
    groups = plan(big, cores, maxPartitionBytes=str(256 << 10))
    n = len(groups)
    assert n % cores == 0 and n >= total // (256 << 10)  # pieces of at most maxPartitionBytes (+ a batch)
    assert max(sizes(groups)) - min(sizes(groups)) < 32 << 10  # even: within a few batches
    assert sum(sizes(groups)) == total
    assert offsets(big, groups) == list(range(400 * PER_BATCH))


def test_a_segment_a_bit_over_max_partition_bytes_is_read_by_every_core(big):
    # was: one task (a segment up to 1.5 x 128 MiB stayed whole), the other core idle
    total = (big / segment_file(0, "log")).stat().st_size
    groups = plan(big, 2, maxPartitionBytes=str(int(total / 1.3)))
    assert len(groups) == 2 and abs(sizes(groups)[0] - sizes(groups)[1]) < 32 << 10
    assert offsets(big, groups) == list(range(400 * PER_BATCH))


def test_split_bytes_when_given_cuts_even_pieces_of_about_that_size(big):
    total = (big / segment_file(0, "log")).stat().st_size
    groups = plan(big, 2, splitBytes=str(total // 5), maxPartitionBytes="0")
    assert len(groups) == 5 and max(sizes(groups)) - min(sizes(groups)) < 32 << 10
    assert plan(big, 2, splitBytes="0", maxPartitionBytes="0") == [[*plan(big, 2, splitBytes="0")[0]]]
    assert offsets(big, groups) == list(range(400 * PER_BATCH))
    # a range read: the same rows whatever the cut
    part = plan(big, 3, maxPartitionBytes=str(128 << 10), startingOffset="777", endingOffset="15000")
    assert offsets(big, part, startingOffset="777", endingOffset="15000") == list(range(777, 15000))


def test_small_segments_are_not_cut():
    from .conftest import ORACLE

    d = ORACLE / "v2-multi-segment-0"  # 3 segments, 110 KB: below openCostInBytes (4 MiB), nothing is cut
    o = ds.normalize_options({"path": str(d)})
    groups = [g.value for g in ds.KafkaLogReader(o, None, 2).partitions()]
    assert [(r.segment, r.position, r.stop) for g in groups for r in g] == [(0, 0, None), (400, 0, None),
                                                                           (800, 0, None)]


def test_by_default_a_task_reads_up_to_512_mib():
    # A Python source's task costs tens of ms to start: a 518 MiB segment on 2 cores is 2 tasks, not the 6
    # that Spark's 128 MiB for files gave (10% slower full-row read on local[2]); an explicit
    # maxPartitionBytes keeps its meaning.
    from kltool.spark.planning import DEFAULT_PARTITION_BYTES, SegmentRead, split_target

    assert DEFAULT_PARTITION_BYTES == 512 << 20
    seg = [SegmentRead(file="t-0/0.log", topic="t", partition=0, segment=0, bytes=518 << 20)]
    o = ds.normalize_options({"path": "t-0"})
    assert split_target(o, seg, 2) == ((518 + 4) << 20) // 2
    o = ds.normalize_options({"path": "t-0", "maxPartitionBytes": str(128 << 20)})
    assert split_target(o, seg, 2) == ((518 + 4) << 20) // 6
    four = [SegmentRead(file="t-0/0.log", topic="t", partition=0, segment=0, bytes=2100 << 20)]
    assert split_target(ds.normalize_options({"path": "t-0"}), four, 2) == ((2100 + 4) << 20) // 6
