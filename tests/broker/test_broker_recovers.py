"""Issue 19, scenario e: repaired by kltool, recovered by the broker.

One source topic gets several segments of broker-written data (an idempotent producer, so producer snapshots
exist); the broker is stopped cleanly. Every damage kind kltool repairs is applied to three identical copies of
that partition, each a topic of its own the broker knows:

* ``-a``: `kltool verify --repair`, then the broker starts (clean-shutdown marker present) and must serve
  exactly what `kltool dump --records` shows; a second start without the marker and with the recovery point
  at 0 recovers every segment of it and must log no truncation of it and serve the same.
* ``-b``: the broker alone, clean-shutdown marker present: no recovery runs, the files are used as they are.
* ``-c``: the broker alone, no clean-shutdown marker and recovery point 0: its recovery runs over every
  segment (the most it can do; after a real crash it only recovers from the last flushed segment on).

Records served = what a read_uncommitted consumer reads from the log start until the log end or until it
cannot go on (an error, or no progress). kltool's copy must serve at least as many as either broker copy,
and every served record must be the original record at its offset. The table goes to README ("What kltool
saves") from ``KLTOOL_BROKER_TABLE`` when set.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from ..conftest import run_kltool
from .harness import produce_in_waves
from .test_broker_writes import _b64, _kltool_records

SRC = "src"
SRC_CONFIG = {"segment.ms": "1000", "index.interval.bytes": "512"}  # segment.bytes is 1 MiB at least
N_RECORDS = 600
WAVES = 4
TRUNCATION_WORDS = ("Corruption found", "truncating to offset", "Deleting segments as part of log recovery",
                    "Found invalid", "Deleting all segments", "Found a corrupted index")


# -- damage ---------------------------------------------------------------------------------------------------

def _segs(pdir):
    return sorted(pdir.glob("*.log"))


def _batches(log):
    res = run_kltool("--json", "dump", log)
    assert res.code == 0, res
    return [r for r in res.json() if r["type"] == "batch"]


def _patch(path, pos, data):
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def _mid(pdir, seg=1):
    """The second segment's .log and its middle batch (and the ones around it)."""
    log = _segs(pdir)[seg]
    bs = _batches(log)
    k = len(bs) // 2
    return log, bs, k


def torn_tail(pdir):
    log = _segs(pdir)[-1]
    last = _batches(log)[-1]
    os.truncate(log, last["position"] + last["size"] // 2)


def zero_hole(pdir):
    log, bs, k = _mid(pdir)
    _patch(log, bs[k]["position"], bytes(bs[k + 2]["position"] - bs[k]["position"]))


def crc_flip(pdir):
    log, bs, k = _mid(pdir)
    p = bs[k]["position"] + bs[k]["size"] - 3
    b = log.read_bytes()[p]
    _patch(log, p, bytes([b ^ 0x10]))


def garbage(pdir):
    log, bs, k = _mid(pdir)
    start, end = bs[k]["position"] + 10, bs[k + 1]["position"] + 30
    _patch(log, start, random.Random(5).randbytes(end - start))


def bad_magic(pdir):
    log, bs, k = _mid(pdir)
    _patch(log, bs[k]["position"] + 16, bytes([5]))


def base_offset(pdir):
    log, bs, k = _mid(pdir)
    _patch(log, bs[k]["position"], (bs[k]["base_offset"] + 1000).to_bytes(8, "big"))


def leader_epoch(pdir):
    log, bs, k = _mid(pdir)
    _patch(log, bs[k]["position"] + 12, (7).to_bytes(4, "big"))


def batch_length(pdir):
    log, bs, k = _mid(pdir)
    _patch(log, bs[k]["position"] + 8, (bs[k]["size"] - 12 + 9).to_bytes(4, "big"))


def missing_index(pdir):
    log = _segs(pdir)[1]
    log.with_suffix(".index").unlink()
    log.with_suffix(".timeindex").unlink()


def corrupt_index(pdir):
    """The second segment's offset index with its entries' positions shifted (each points inside a batch)."""
    ix = _segs(pdir)[1].with_suffix(".index")
    data = bytearray(ix.read_bytes())
    assert len(data) >= 16
    for i in range(0, len(data), 8):
        data[i + 4:i + 8] = (int.from_bytes(data[i + 4:i + 8], "big") + 5).to_bytes(4, "big")
    ix.write_bytes(bytes(data))


def stale_files(pdir):
    """Leftovers of an interrupted cleaner or deletion: .deleted, .cleaned and .swap copies of segments."""
    s0, s1 = _segs(pdir)[:2]
    shutil.copy(s0, s0.with_name(s0.name + ".deleted"))
    shutil.copy(s0.with_suffix(".index"), s0.with_name(s0.stem + ".index.deleted"))
    shutil.copy(s1, s1.with_name(s1.name + ".cleaned"))
    shutil.copy(s1, s1.with_name(s1.name + ".swap"))


def _leo(pdir):
    return _batches(_segs(pdir)[-1])[-1]["last_offset"] + 1


def snapshot_past_end(pdir):
    snaps = sorted(pdir.glob("*.snapshot"))
    shutil.copy(snaps[-1], pdir / f"{_leo(pdir) + 50:020d}.snapshot")


def epoch_past_end(pdir):
    f = pdir / "leader-epoch-checkpoint"
    lines = f.read_text().split("\n")
    entries = [ln for ln in lines[2:] if ln.strip()]
    entries.append(f"3 {_leo(pdir) + 40}")
    f.write_text(f"{lines[0]}\n{len(entries)}\n" + "".join(e + "\n" for e in entries))


def lso_past_end(pdir):
    """The root's log-start-offset-checkpoint says the log starts after its end."""
    _set_checkpoint(pdir.parent / "log-start-offset-checkpoint", {_tp_of(pdir): _leo(pdir) + 100})


DAMAGE = {f.__name__: f for f in (torn_tail, zero_hole, crc_flip, garbage, bad_magic, base_offset, leader_epoch,
                                   batch_length, missing_index, corrupt_index, stale_files, snapshot_past_end,
                                   epoch_past_end, lso_past_end)}


# -- checkpoints and copies -----------------------------------------------------------------------------------

def _tp_of(pdir):
    topic, _, part = pdir.name.rpartition("-")
    return topic, int(part)


def _set_checkpoint(path, values):
    lines = path.read_text().split("\n")
    rows = {}
    for ln in lines[2:]:
        if ln.strip():
            t, p, o = ln.split()
            rows[(t, int(p))] = int(o)
    rows.update(values)
    path.write_text(f"{lines[0]}\n{len(rows)}\n" + "".join(f"{t} {p} {o}\n" for (t, p), o in rows.items()))


def _copy_partition(src, dst):
    """The source partition's data files into DST (its partition.metadata, the topic id, stays)."""
    for f in dst.iterdir():
        if f.name != "partition.metadata":
            f.unlink()
    for f in src.iterdir():
        if f.suffix in (".log", ".index", ".timeindex", ".snapshot", ".txnindex") or f.name == "leader-epoch-checkpoint":
            shutil.copy2(f, dst / f.name)


# -- the broker's side ----------------------------------------------------------------------------------------

def _create_all(b, names, config):
    a = b.admin()
    try:
        a.create_topics([NewTopic(n, 1, 1, topic_configs=config) for n in names])
    finally:
        a.close()
    c = KafkaConsumer(**b.kafka_python_args())
    try:
        t0 = time.monotonic()
        while not set(names) <= c.topics():
            assert time.monotonic() - t0 < 60, "topics not created"
            time.sleep(0.3)
        c.end_offsets([TopicPartition(n, 0) for n in names])
    finally:
        c.close()


def _row(r):
    return {"offset": r.offset, "timestamp": r.timestamp, "key": _b64(r.key), "value": _b64(r.value),
            "headers": [{"key": k, "value": _b64(v)} for k, v in r.headers]}


def _produce_source(b, prod, topic: str, records: int, send, flush_every: int):
    """``records`` records into partition 0 of ``topic`` in WAVES waves (a segment each), then the broker
    stopped: (the records as consumed, the partition dir, which has at least four segments)."""
    produce_in_waves(prod, records, WAVES, send, flush_every=flush_every)
    prod.close()
    original = [_row(r) for r in b.consume_all(topic, 0)]
    assert len(original) == records
    b.stop()
    src = b.partition_dir(topic, 0)
    assert len(_segs(src)) >= 4, _segs(src)
    return original, src


def _served(b, topic, stall=6.0, timeout=40.0):
    """What a read_uncommitted consumer gets from the log start: (rows, why it stopped)."""
    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(**b.kafka_python_args(), enable_auto_commit=False, fetch_max_wait_ms=100)
    out, why = [], "end"
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        t0 = last = time.monotonic()
        while c.position(tp) < end:
            try:
                polled = c.poll(timeout_ms=500)
            except Exception as e:  # a corrupt record the client refuses: it cannot go on
                why = f"{type(e).__name__}"
                break
            for recs in polled.values():
                out.extend(_row(r) for r in recs)
                last = time.monotonic()
            now = time.monotonic()
            if now - last > stall or now - t0 > timeout:
                why = f"stalled at {c.position(tp)} of {end}"
                break
    finally:
        c.close()
    return out, why


def _serve_all(b, topics):
    with ThreadPoolExecutor(8) as ex:
        return dict(zip(topics, ex.map(lambda t: _served(b, t), topics), strict=True))


def _judge(original, rows):
    """(records served, records that differ from the original at their offset)."""
    by_off = {r["offset"]: r for r in original}
    return len(rows), sum(1 for r in rows if by_off.get(r["offset"]) != r)


def _truncation_lines(log, topic):
    return [ln for ln in log.splitlines() if f"{topic}-0" in ln and any(w in ln for w in TRUNCATION_WORDS)]


@pytest.fixture(scope="module")
def outcome(broker, tmp_path_factory):
    b = broker
    names = [f"{k}-{c}" for k in DAMAGE for c in "abc"]
    _create_all(b, [SRC, *names], SRC_CONFIG)
    prod = KafkaProducer(**b.kafka_python_args(), enable_idempotence=True, linger_ms=2, batch_size=1024,
                         compression_type="lz4")
    rng = random.Random(23)
    original, src = _produce_source(b, prod, SRC, N_RECORDS, lambda p, i: p.send(
        SRC, key=f"k{i % 13}".encode(), value=rng.randbytes(40) + f"v{i}".encode() * 4,
        headers=[("i", str(i).encode())], partition=0), flush_every=50)
    backup = tmp_path_factory.mktemp("backup")
    for kind, damage in DAMAGE.items():
        for c in "ab":
            d = b.partition_dir(f"{kind}-{c}", 0)
            _copy_partition(src, d)
            damage(d)
    # the log dir with a topic glob, not the partition dirs: see test_partition_dir_verify_sees_root_checkpoints
    lso_partition_dir = run_kltool("--json", "verify", b.partition_dir("lso_past_end-b", 0))
    repair = run_kltool("--json", "verify", "--repair", "--backup-dir", backup, "--topic", "*-a", b.logdir)
    assert repair.code in (0, 1), repair
    after = run_kltool("--json", "verify", "--topic", "*-a", b.logdir)
    kept = {k: _kltool_records(b.partition_dir(f"{k}-a", 0)) for k in DAMAGE}

    b.start()
    run1_log = b.log_text(since_start=True)
    run1 = _serve_all(b, [f"{k}-{c}" for k in DAMAGE for c in "ab"])
    b.stop()

    # run 2: no clean-shutdown marker, recovery point 0 for the kltool copies and the fresh broker-alone copies
    for kind, damage in DAMAGE.items():
        d = b.partition_dir(f"{kind}-c", 0)
        _copy_partition(src, d)
        damage(d)
    _set_checkpoint(b.logdir / "recovery-point-offset-checkpoint",
                    {(f"{k}-{c}", 0): 0 for k in DAMAGE for c in "ac"})
    b.clean_shutdown_marker().unlink()
    b.start()
    run2_log = b.log_text(since_start=True)
    run2 = _serve_all(b, [f"{k}-{c}" for k in DAMAGE for c in "ac"])
    return {"original": original, "kept": kept, "repair": repair, "after": after, "run1": run1, "run2": run2,
            "lso_partition_dir": lso_partition_dir,
            "run1_log": run1_log, "run2_log": run2_log}


def _table(o):
    rows = []
    for k in DAMAGE:
        n_b, bad_b = _judge(o["original"], o["run1"][f"{k}-b"][0])
        n_c, bad_c = _judge(o["original"], o["run2"][f"{k}-c"][0])
        n_a, bad_a = _judge(o["original"], o["run2"][f"{k}-a"][0])
        rows.append((k, n_b, bad_b, o["run1"][f"{k}-b"][1], n_c, bad_c, o["run2"][f"{k}-c"][1], n_a, bad_a))
    return rows


def test_kltool_repaired_everything(outcome):
    assert [r for r in outcome["after"].json() if r["type"] == "finding"] == []
    assert outcome["after"].code == 0


@pytest.mark.parametrize("kind", DAMAGE)
def test_broker_serves_what_kltool_kept(outcome, kind):
    """Both starts (marker, and no marker with recovery from 0) serve exactly `kltool dump --records`,
    and recovery logs no truncation of kltool's result."""
    kept = outcome["kept"][kind]
    run1, why1 = outcome["run1"][f"{kind}-a"]
    run2, why2 = outcome["run2"][f"{kind}-a"]
    assert _truncation_lines(outcome["run1_log"], f"{kind}-a") == []
    assert _truncation_lines(outcome["run2_log"], f"{kind}-a") == []
    assert (why1, why2) == ("end", "end")
    assert run1 == kept
    assert run2 == kept


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_kltool_saves_at_least_what_the_broker_does(outcome, kind):
    for k, n_b, _bad_b, _wb, n_c, _bad_c, _wc, n_a, bad_a in _table(outcome):
        if k != kind:
            continue
        assert bad_a == 0, (k, bad_a)
        assert n_a >= n_b and n_a >= n_c, (k, n_a, n_b, n_c)


def test_partition_dir_verify_sees_root_checkpoints(outcome):
    res = outcome["lso_partition_dir"]
    assert "checkpoint_beyond_end" in {r.get("kind") for r in res.json()}, res
    assert res.code == 1


def test_write_table(outcome):
    """The README table (KLTOOL_BROKER_TABLE=path writes it)."""
    rows = _table(outcome)
    path = os.environ.get("KLTOOL_BROKER_TABLE")
    if path:
        with open(path, "w") as f:
            json.dump({"original": len(outcome["original"]), "rows": rows}, f, indent=1)
    assert len(rows) == len(DAMAGE)
