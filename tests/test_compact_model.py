"""kltool compact against models: a randomized check in the spirit of Kafka's ``LogCompactionTester`` (random
updates, deletes and aborted transactions over many keys; after every pass a read_committed consumer's table is
the brute-force one), and Kafka's own reader (the oracle) on what compaction writes."""

from __future__ import annotations

import base64
import random

import pytest

from kltool.format.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from kltool.storage.change import compact as cp
from kltool.storage.logdir import open_paths

from .compact_data import T0, Log, read_batches, read_records
from .conftest import run_kltool

ABORTED = b"aborted:"


def committed_table(part) -> dict:
    t: dict = {}
    for _off, k, v, _h in read_records(part):
        if v is not None and v.startswith(ABORTED):
            continue
        if v is None:
            t.pop(k, None)
        else:
            t[k] = v
    return t


def _write(log: Log, rnd: random.Random, model: dict, keys: int, ops: int) -> None:
    done = 0
    while done < ops:
        n = rnd.randint(1, 5)
        recs = []
        for _ in range(n):
            k = b"key-%d" % rnd.randrange(keys)
            v = None if rnd.random() < 0.12 else b"v%d-%d" % (log.next + len(recs), rnd.randrange(10**6))
            recs.append((k, v))
        codec = rnd.choice([NONE, NONE, GZIP, LZ4, SNAPPY, ZSTD])
        roll = rnd.random()
        if roll < 0.08:  # an aborted transaction
            pid = 100 + rnd.randrange(4)
            log.data([(k, ABORTED + b"%d" % i) for i, (k, _v) in enumerate(recs)], pid=pid, txn=True,
                     compression=codec)
            log.marker(pid, commit=False)
            continue
        if roll < 0.16:  # a committed one
            pid = 200 + rnd.randrange(4)
            log.data(recs, pid=pid, txn=True, compression=codec)
            log.marker(pid, commit=True)
        elif roll < 0.3:  # an idempotent producer
            log.data(recs, pid=300 + rnd.randrange(3), compression=codec)
        else:
            log.data(recs, compression=codec)
        for k, v in recs:
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
        done += n


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow),
                                  pytest.param(4, marks=pytest.mark.slow)])
def test_randomized_table_equals_the_model_after_every_pass(tmp_path, seed):
    rnd = random.Random(seed)
    log = Log(tmp_path / "ld", {"segment.bytes": str(rnd.choice([3000, 8000, 20000])), "delete.retention.ms": "700"})
    model: dict = {}
    now = T0 + 10**6
    ever_full = False
    for round_ in range(6):
        _write(log, rnd, model, keys=rnd.choice([20, 150, 400]), ops=rnd.randint(300, 900))
        log.close()
        buf = rnd.choice([24 * 40, 24 * 300, 1 << 20])  # small maps fill up: the pass ends early
        plan = cp.plan_compaction(open_paths([str(log.root)]), cp.Policy(now=now, dedupe_buffer_size=buf),
                                  dry_run=False)
        cp.apply_compaction(plan, backup=rnd.random() < 0.3)
        assert committed_table(log.dir) == model, (seed, round_)
        pc = plan.partitions[0]
        ever_full = ever_full or pc.map_full
        if pc.end_offset is not None and not ever_full:  # below the map's end, one record per key
            keys = [k for off, k, _v, _h in read_records(log.dir) if off < pc.end_offset]
            assert len(keys) == len(set(keys)), (seed, round_)
        now += 500
        log.reopen()
    log.close()
    assert run_kltool("verify", log.root).code == 0
    offsets = [x[0] for x in read_records(log.dir, controls=True)]
    assert offsets == sorted(set(offsets))


def test_the_map_and_the_result_do_not_depend_on_how_the_pass_is_split(tmp_path):
    """Compacting with a map that fills up (several passes) ends where one big map does."""
    rnd = random.Random(9)
    logs = []
    for name in ("a", "b"):
        log = Log(tmp_path / name, {"segment.bytes": "4000"})
        rnd2 = random.Random(7)
        _write(log, rnd2, {}, keys=120, ops=1500)
        log.close()
        logs.append(log)
    del rnd
    now = T0 + 10**6
    cp.apply_compaction(cp.plan_compaction(open_paths([str(logs[0].root)]), cp.Policy(now=now), dry_run=False),
                        backup=False)
    for _ in range(40):
        plan = cp.plan_compaction(open_paths([str(logs[1].root)]), cp.Policy(now=now, dedupe_buffer_size=24 * 60),
                                  dry_run=False)
        if not plan.has_work:
            break
        cp.apply_compaction(plan, backup=False)
    assert committed_table(logs[0].dir) == committed_table(logs[1].dir)


@pytest.mark.oracle
def test_kafkas_reader_reads_the_compacted_segments(tmp_path, kafka_oracle):
    log = Log(tmp_path / "ld", {"segment.bytes": "5000", "delete.retention.ms": "1000"})
    rnd = random.Random(4)
    _write(log, rnd, {}, keys=60, ops=1200)
    log.data([(b"tomb", None)])
    log.data([(b"gone", b"x"), (b"gone2", b"y")], pid=77, epoch=4)  # becomes an empty batch header
    log.data([(b"gone", b"z"), (b"gone2", b"w")])
    log.data([(b"lat", b"v")], log_append_time=T0 + 5)
    for i in range(100):
        log.data([(b"fill%d" % (i % 5), b"f")])
    log.close()
    now = T0 + 10**6
    cp.apply_compaction(cp.plan_compaction(open_paths([str(log.root)]), cp.Policy(now=now), dry_run=False),
                        backup=False)
    log.reopen()  # a second pass: markers whose transactions are gone get a horizon (rewritten control batches)
    _write(log, rnd, {}, keys=60, ops=600)
    log.close()
    cp.apply_compaction(cp.plan_compaction(open_paths([str(log.root)]), cp.Policy(now=now + 10), dry_run=False),
                        backup=False)
    batches = read_batches(log.dir)
    assert any(h.count == 0 and h.producer_id == 77 for h, _ in batches)
    assert any(h.has_delete_horizon and not h.is_control for h, _ in batches)
    assert any(h.has_delete_horizon and h.is_control for h, _ in batches)
    logs = sorted(log.dir.glob("*.log"))
    code, rows = kafka_oracle(logs, records=True)
    assert code == 0
    sums = [x for x in rows if x["type"] == "summary"]
    assert all(x["validBytes"] == x["fileSize"] and x["error"] is None for x in sums), sums
    theirs = [x for x in rows if x["type"] == "batch"]
    assert all(x["isValid"] for x in theirs)
    assert [(x["baseOffset"], x["lastOffset"], x["deleteHorizonMs"]) for x in theirs] == \
        [(h.base_offset, h.last_offset, h.delete_horizon_ms) for h, _ in batches]
    recs = [x for x in rows if x["type"] == "record"]
    mine = [r for _h, rs in batches for r in rs]
    assert [(x["offset"], x["timestamp"], None if x["key"] is None else base64.b64decode(x["key"]),
             None if x["value"] is None else base64.b64decode(x["value"])) for x in recs] == \
        [(r.offset, r.timestamp, r.key, r.value) for r in mine]
