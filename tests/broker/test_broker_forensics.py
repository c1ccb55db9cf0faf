"""Issue 21's judge, live: `kltool transactions`, `kltool producers` and `kltool diff` against a real broker.

One broker for the module. Transactions: committed, aborted, fenced by a newer epoch, and one whose producer
process is killed with SIGKILL mid-transaction; the broker is stopped long before the transaction times out
(the producer asks for 10 minutes). Kafka's own TransactionsCommand (kafka-transactions.sh) answers against
the live broker: describe-producers before a SIGTERM, after the restart and after a SIGKILL restart equals
`kltool producers --format kafka` on the stopped log dir; find-hanging names the transactions whose
coordinator no longer knows them as ongoing, which offline can only be bounded (its answer is a subset of
kltool's hanging at the same --now) until the coordinator's state is lost: then both name the same one.

Diff: the shape of an unclean election (the copy with kltool's new epoch leads, the broker's partition
follows), judged by a brute-force comparison built from Kafka's own DumpLogSegments output and the
leader-epoch-checkpoint files; and the copy put back as a follower's partition on a second, broker-only node,
where the broker's own "Truncating to offset N" is the judge.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

from kafka import KafkaProducer

from ..conftest import run_kltool
from . import harness
from .harness import run_tool

TOPIC = "ft"
TXN_TIMEOUT_MS = 600_000  # the broker's transaction.max.timeout.ms is 15 minutes: nothing expires in this test

PRODUCER = textwrap.dedent("""
    import sys, time
    from kafka import KafkaProducer
    bootstrap, tid, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, transaction_timeout_ms=TIMEOUT, linger_ms=0)
    p.init_transactions()
    p.begin_transaction()
    for i in range(n):
        p.send(topic, value=tid.encode() + b"-" + str(i).encode(), partition=0)
    p.flush()
    print("sent", flush=True)
    time.sleep(600)
""").replace("TIMEOUT", str(TXN_TIMEOUT_MS))


def _open_transaction(b, tid: str, n: int) -> subprocess.Popen:
    """A producer process with a transaction open (N records sent and acknowledged), left running."""
    p = subprocess.Popen([sys.executable, "-c", PRODUCER, b.bootstrap, tid, TOPIC, str(n)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = p.stdout.readline()
    assert line.strip() == "sent", (line, p.stderr.read() if p.poll() is not None else "")
    return p


def _kill9(p: subprocess.Popen) -> None:
    os.kill(p.pid, signal.SIGKILL)
    p.wait(30)


def _transaction(b, tid: str, n: int, commit: bool) -> None:
    p = KafkaProducer(**b.kafka_python_args(), transactional_id=tid, transaction_timeout_ms=TXN_TIMEOUT_MS,
                      linger_ms=0)
    p.init_transactions()
    p.begin_transaction()
    for i in range(n):
        p.send(TOPIC, value=b"%s-%d" % (tid.encode(), i), partition=0)
    p.flush()
    p.commit_transaction() if commit else p.abort_transaction()
    p.close()


def _txn_tool(b, *args: str) -> str:
    """TransactionsCommand against the broker; tried again for a few seconds after a start (a leader or the
    coordinator may still be loading)."""
    for attempt in range(5):
        try:
            return run_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", b.bootstrap,
                            *args).stdout
        except RuntimeError:
            if attempt == 4:
                raise
            time.sleep(2)
    raise AssertionError("unreachable")


def _describe_producers(b) -> tuple[str, int]:
    """describe-producers' table and the clock just after it (the producers it shows were alive then)."""
    out = _txn_tool(b, "describe-producers", "--topic", TOPIC, "--partition", "0")
    return out, int(time.time() * 1000)


def _find_hanging(b) -> tuple[list[list[str]], int]:
    now = int(time.time() * 1000)  # find-hanging's clock: within a second of this
    out = _txn_tool(b, "find-hanging", "--topic", TOPIC, "--max-transaction-timeout", "0")
    return [ln.split() for ln in out.splitlines()[1:] if ln.strip()], now


def _transactional_ids(b) -> dict[str, tuple[int, str]]:
    """list: transactional id -> (producer id, state)."""
    rows = [ln.split() for ln in _txn_tool(b, "list").splitlines()[1:] if ln.strip()]
    return {r[0]: (int(r[2]), r[3]) for r in rows}


def _kl_producers(part, now: int) -> str:
    r = run_kltool("producers", part, "--format", "kafka", "--now", str(now))
    assert r.code == 0, r
    return r.out


def _kl_transactions(logdir, now: int) -> tuple[list[dict], list[dict], list[list[str]]]:
    """kltool's open transactions (as the broker reads at start-up), the aborted ones (every segment) and
    find-hanging's table, at NOW with a timeout of 0."""
    def items(*extra):
        r = run_kltool("--json", "transactions", logdir, "--topic", TOPIC, "--now", str(now),
                       "--max-transaction-timeout", "0", *extra)
        assert r.code in (0, 1), r
        got = [json.loads(ln) for ln in r.out.splitlines()]
        assert [i for i in got if i["type"] == "finding" and i["severity"] != "info"] == []
        return got

    opened = [t for t in items() if t["type"] == "transaction"]
    aborted = [t for t in items("--scan-all", "--aborted") if t["type"] == "aborted_transaction"]
    r = run_kltool("transactions", logdir, "--topic", TOPIC, "--now", str(now), "--max-transaction-timeout", "0",
                   "--format", "kafka")
    assert r.code in (0, 1), r
    return opened, aborted, [ln.split() for ln in r.out.splitlines()[1:]]


def _open_starts(described: str) -> set[tuple[str, str]]:
    rows = [ln.split() for ln in described.splitlines()[1:]]
    return {(r[0], r[5]) for r in rows if r[5] != "None"}


def test_transactions_and_producers_equal_kafka_transactions(live, tmp_path):
    b = live
    b.create_topic(TOPIC, 1)
    part = b.partition_dir(TOPIC, 0)

    _transaction(b, "fx-commit", 5, commit=True)
    _transaction(b, "fx-abort", 3, commit=False)
    fenced = _open_transaction(b, "fx-fence", 3)
    _transaction(b, "fx-fence", 2, commit=True)  # init_transactions bumps the epoch: the coordinator aborts the first
    _kill9(fenced)
    hung = _open_transaction(b, "fx-hang", 4)
    _kill9(hung)  # mid-transaction: no marker will come from it
    _transaction(b, "fx-commit", 2, commit=True)  # after the open one: the LSO stays at its first offset

    ids = _transactional_ids(b)
    assert ids["fx-hang"][1] == "Ongoing" and ids["fx-fence"][1] == "CompleteCommit", ids
    pid = {t: str(v[0]) for t, v in ids.items()}
    described, now = _describe_producers(b)
    hanging, fh_now = _find_hanging(b)
    b.stop()  # SIGTERM, minutes before the transaction times out

    # producers: describe-producers just before the SIGTERM, line for line
    assert _kl_producers(part, now) == described
    starts = _open_starts(described)
    assert {p for p, _ in starts} == {pid["fx-hang"]}
    # transactions: the open ones are describe-producers' current transactions; find-hanging's answer (the
    # coordinator still has fx-hang as Ongoing, so none) is a subset of kltool's hanging at the same clock
    opened, aborted, rows = _kl_transactions(b.logdir, fh_now)
    assert {(str(t["producer_id"]), str(t["first_offset"])) for t in opened} == starts
    assert all(t["state"] == "hanging" for t in opened)
    assert {(r[2], r[5]) for r in hanging} <= {(r[2], r[5]) for r in rows}
    assert {(r[2], r[5]) for r in rows} == starts
    # aborted: fx-abort's own abort and the coordinator's abort of the fenced epoch, nothing of the committed
    assert {str(t["producer_id"]) for t in aborted} == {pid["fx-abort"], pid["fx-fence"]}
    assert len(aborted) == 2 and all(t["indexed"] for t in aborted), aborted
    # the LSO kltool gives is where a read_committed consumer stops, checked after the restart
    r = run_kltool("--json", "transactions", part, "--now", str(fh_now), "--max-transaction-timeout", "0")
    lso = [json.loads(ln) for ln in r.out.splitlines() if '"type":"partition"' in ln][0]["last_stable_offset"]

    # after the restart the broker rebuilt the same producer state (from its snapshot and the log after it)
    b.start()
    described2, now2 = _describe_producers(b)
    assert _kl_producers(part, now2) == described2
    assert described2 == described
    committed = b.consume_all(TOPIC, 0, isolation_level="read_committed")
    assert max(m.offset for m in committed) < lso and lso == int(next(iter(starts))[1])
    assert {m.value.split(b"-")[1].decode() for m in committed} == {"commit", "fence"}
    assert len(committed) == 5 + 2  # fx-commit's second transaction is past the LSO
    # the records of kltool's aborted ranges are those a read_committed consumer skips below the LSO
    everything = b.consume_all(TOPIC, 0)
    skipped = {m.offset for m in everything if m.offset < lso} - {m.offset for m in committed}
    assert skipped == {o for t in aborted for o in range(t["first_offset"], t["last_offset"] + 1)} & \
        {m.offset for m in everything}

    # after a SIGKILL: kltool reads what the broker's recovery rebuilds
    b.kill()
    killed = _kl_producers(part, now2)
    b.start()
    described3, now3 = _describe_producers(b)
    assert _kl_producers(part, now3) == described3 == killed

    # the coordinator's state is lost (its partition is deleted while the broker is stopped): the open
    # transaction is now hanging for find-hanging too, and both name the same one
    b.stop()
    shutil.rmtree(b.partition_dir("__transaction_state", 0))
    b.start()
    for _ in range(10):  # the coordinator reloads its (now empty) partition: wait until find-hanging names one
        hanging, fh_now = _find_hanging(b)
        if hanging:
            break
        time.sleep(1)
    b.stop()
    _opened, _aborted, rows = _kl_transactions(b.logdir, fh_now)
    assert [r[:7] for r in hanging] == [r[:7] for r in rows] and len(rows) == 1, (hanging, rows)
    assert rows[0][2] == pid["fx-hang"] and abs(int(rows[0][7]) - int(hanging[0][7])) <= 1


# ------------------------------------------------------------------------------------------------- diff

DUMP_BATCH = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*?partitionLeaderEpoch: (-?\d+) "
                        r".*?size: (\d+) .*?crc: (\d+)")


def _dumped_batches(part) -> list[tuple[int, int, int, int, int, int]]:
    """(base, last, count, leader epoch, size, crc) of every batch, as Kafka's DumpLogSegments prints them."""
    logs = sorted(str(p) for p in part.glob("*.log"))
    out = run_tool("org.apache.kafka.tools.DumpLogSegments", "--files", ",".join(logs)).stdout
    return [tuple(int(x) for x in m.groups()) for m in DUMP_BATCH.finditer(out)]


def _epochs(part) -> list[tuple[int, int]]:
    lines = (part / "leader-epoch-checkpoint").read_text().splitlines()
    return [tuple(int(x) for x in ln.split()) for ln in lines[2:2 + int(lines[1])]]


def _end_offset_for(epochs: list[tuple[int, int]], leo: int, epoch: int) -> tuple[int, int]:
    """The leader's answer to OffsetsForLeaderEpoch(EPOCH): the largest epoch <= EPOCH it has, and the start
    offset of the next epoch after it (its log end offset for its latest epoch)."""
    known = [e for e, _ in epochs if e <= epoch]
    if not known:
        return -1, -1
    found = max(known)
    later = [s for e, s in epochs if e > found]
    return found, (min(later) if later else leo)


def test_diff_unclean_election_shape_equals_brute_force(live, tmp_path):
    """A partition copied while the broker runs; the broker goes on at its epoch; the copy gets a new leader
    epoch from kltool's own writer (with its epoch entry): an unclean election where the copy is the new
    leader and the broker's partition the old leader that must follow it."""
    from kltool.format.batch import build_v2_batch
    from kltool.storage.topic_config import TopicConfig
    from kltool.storage.write.writer import PartitionWriter

    b = live
    b.create_topic("dv", 1)
    prod = KafkaProducer(**b.kafka_python_args(), linger_ms=0, acks="all")
    for i in range(30):
        prod.send("dv", value=b"before-%d" % i, partition=0).get(30)
    copy = tmp_path / "copy" / "dv-0"
    copy.parent.mkdir()
    shutil.copytree(b.partition_dir("dv", 0), copy, ignore=shutil.ignore_patterns("*.index", "*.timeindex", "*.lock"))
    for i in range(7):
        prod.send("dv", value=b"late-%d" % i, partition=0).get(30)
    prod.close()
    b.stop()
    old = b.partition_dir("dv", 0)

    new_epoch = max(e for e, _ in _epochs(copy)) + 1
    w = PartitionWriter(copy, config=TopicConfig({}), leader_epoch=new_epoch)
    for i in range(4):
        w.append(build_v2_batch([(j, int(time.time() * 1000), None, b"new-leader-%d-%d" % (i, j), ()) for j in range(2)],
                                base_offset=w.leo, partition_leader_epoch=new_epoch))
    w.close()
    assert _epochs(copy)[-1] == (new_epoch, 30)

    # brute force, from Kafka's own DumpLogSegments and the checkpoints
    ba, bb = _dumped_batches(copy), _dumped_batches(old)
    leo_a, leo_b = ba[-1][1] + 1, bb[-1][1] + 1
    by_a = {x[0]: x for x in ba}
    diverge = next(x[0] for x in bb if by_a.get(x[0]) != x)
    follower_epoch = max(e for e, _ in _epochs(old))
    found, leader_end = _end_offset_for(_epochs(copy), leo_a, follower_epoch)
    _f, follower_end = _end_offset_for(_epochs(old), leo_b, found)
    truncation = min(leader_end, follower_end)
    lost = [x for x in bb if x[1] >= truncation]

    r = run_kltool("--json", "diff", copy, old)
    assert r.code == 1, r
    d = [json.loads(ln) for ln in r.out.splitlines() if '"type":"divergence"' in ln][0]
    assert (d["diverge_offset"], d["truncation_offset"]) == (diverge, truncation) == (30, 30)
    assert (d["log_end_offset_a"], d["log_end_offset_b"]) == (leo_a, leo_b)
    assert d["follower_loses"]["records"] == sum(x[2] for x in lost) == 7
    assert d["follower_loses"]["batches"] == len(lost)
    assert (d["follower_loses"]["first_offset"], d["follower_loses"]["last_offset"]) == (lost[0][0], lost[-1][1])
    assert d["follower_loses"]["bytes"] == sum(x[4] for x in lost)
    assert d["only_a"]["records"] == 8 and d["common"]["records"] == 30

    # the other way round (the broker's partition leads, the copy with the unknown epoch follows):
    # the leader knows no epoch at or above the follower's; Kafka answers with its largest below it
    r = run_kltool("--json", "diff", old, copy)
    d2 = [json.loads(ln) for ln in r.out.splitlines() if '"type":"divergence"' in ln][0]
    assert d2["diverge_offset"] == diverge
    b.start()
    assert len(b.consume_all("dv", 0)) == 37  # the broker's partition, untouched by all of this


assert harness  # the module's fixture comes from conftest (one broker for both tests)


def _follower_node(leader, workdir) -> harness.Broker:
    """A broker-only node 2 in the leader's cluster (same cluster id, the leader's controller)."""
    port = harness.free_port()
    extra = {"process.roles": "broker", "node.id": "2",
             "controller.quorum.voters": leader.props["controller.quorum.voters"],
             "listeners": f"PLAINTEXT://127.0.0.1:{port}", "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
             "replica.lag.time.max.ms": "5000"}
    real = harness.random_cluster_id
    harness.random_cluster_id = lambda: leader.cluster_id  # format node 2 into the leader's cluster
    try:
        node = harness.Broker(workdir, extra)
    finally:
        harness.random_cluster_id = real
    node.port = port
    return node


def test_diff_truncation_equals_a_live_follower(live, tmp_path):
    """The copy put back as a follower's state: node 1 leads topic uv at epoch 0; a copy of its partition taken
    while it runs gets 3 batches at epoch 1 from kltool's writer and replaces node 2's partition; node 2 starts
    as follower and truncates where OffsetsForLeaderEpoch takes it. kltool diff (A = the leader, B = the copy)
    names the broker's "Truncating to offset N", and what B loses there is what node 2 no longer has."""
    from kafka.admin import NewTopic

    from kltool.format.batch import build_v2_batch
    from kltool.storage.topic_config import TopicConfig
    from kltool.storage.write.writer import PartitionWriter

    b = live
    f = _follower_node(b, tmp_path / "node2")
    try:
        f.start()
        a = b.admin()
        try:
            a.create_topics([NewTopic("uv", -1, -1, replica_assignments={0: [1, 2]})])
        finally:
            a.close()
        b.wait_for_leaders("uv", 1)
        prod = KafkaProducer(**b.kafka_python_args(), linger_ms=0, acks="all")
        for i in range(10):
            prod.send("uv", value=b"both-%d" % i, partition=0).get(30)
        f.stop()
        copy = tmp_path / "copy" / "uv-0"
        copy.parent.mkdir()
        shutil.copytree(b.partition_dir("uv", 0), copy, ignore=shutil.ignore_patterns("*.index", "*.timeindex"))
        for i in range(5):
            prod.send("uv", value=b"leader-only-%d" % i, partition=0).get(30)
        prod.close()
        new_epoch = max(e for e, _ in _epochs(copy)) + 1
        w = PartitionWriter(copy, config=TopicConfig({}), leader_epoch=new_epoch)
        for i in range(3):
            w.append(build_v2_batch([(j, 1_700_000_000_000 + i, None, b"kl-%d-%d" % (i, j), ()) for j in range(3)],
                                    base_offset=w.leo, partition_leader_epoch=new_epoch))
        w.close()

        r = run_kltool("--json", "diff", b.partition_dir("uv", 0), copy)
        assert r.code == 1, r
        d = [json.loads(ln) for ln in r.out.splitlines() if '"type":"divergence"' in ln][0]

        shutil.rmtree(f.partition_dir("uv", 0))
        shutil.copytree(copy, f.partition_dir("uv", 0))
        f.start()
        t0 = time.monotonic()
        while not (lines := [ln for ln in f.log_text(since_start=True).splitlines()
                             if "Truncating to offset" in ln and "uv-0" in ln]):
            assert time.monotonic() - t0 < 60, f.log_text(since_start=True)[-3000:]
            time.sleep(0.5)
        f.stop()
        truncated = int(re.search(r"Truncating to offset (\d+)", lines[0]).group(1))
        assert d["truncation_offset"] == truncated, (d, lines)
        assert d["diverge_offset"] == 10
        kept = _dumped_batches(f.partition_dir("uv", 0))
        before = _dumped_batches(copy)
        lost = [x for x in before if x not in kept]
        assert d["follower_loses"]["records"] == sum(x[2] for x in lost)
        assert d["follower_loses"]["batches"] == len(lost)
    finally:
        f.kill()
