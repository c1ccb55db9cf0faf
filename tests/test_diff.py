"""kltool diff (storage/diff.py): divergence, what each copy lacks, the OffsetsForLeaderEpoch truncation
point, against a brute-force comparison of every batch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kltool.errors import UsageError
from kltool.format.batch import build_v2_batch
from kltool.storage import scan
from kltool.storage.diff import PartitionDiff, pair_partitions
from kltool.storage.epoch_cache import end_offset_for, follower_truncation
from kltool.storage.partition import Partition
from kltool.storage.select import select
from kltool.storage.topic_config import TopicConfig
from kltool.storage.write.create import create_topic
from kltool.storage.write.writer import PartitionWriter

TS0 = 1_700_000_000_000
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "forensics"


def append(part, n_batches: int, *, epoch: int, tag: bytes, ts: int = TS0, segment_bytes: int = 1 << 20) -> int:
    """``n_batches`` batches of 3 records at leader epoch ``epoch`` (the writer adds its checkpoint entry)."""
    w = PartitionWriter(part, config=TopicConfig({"segment.bytes": str(segment_bytes)}), leader_epoch=epoch)
    for i in range(n_batches):
        w.append(build_v2_batch([(j, ts + i, None, tag + b"-%d-%d" % (i, j), ()) for j in range(3)],
                                base_offset=w.leo, partition_leader_epoch=epoch))
    w.close()
    return w.leo


def logdir(tmp_path, name="logs", topics=("t",)):
    ld = tmp_path / name
    for t in topics:
        create_topic(ld, t, 1)
    return ld


def run(a, b) -> PartitionDiff:
    d = PartitionDiff(Partition(a), Partition(b))
    d.items = list(d.run())
    return d


def brute(a, b):
    """Every batch of both sides as (base, last, crc, epoch): the first differing offset and, for a
    truncation offset, B's batches at or after it."""
    def batches(p):
        return [(h.base_offset, h.last_offset, h.crc, h.partition_leader_epoch, h.count, h.size)
                for s in Partition(p).segments for h in scan.batches(s.log_path)]
    ba, bb = batches(a), batches(b)
    da = {x[0]: x for x in ba}
    db = {x[0]: x for x in bb}
    lo = max(ba[0][0] if ba else 0, bb[0][0] if bb else 0)
    hi = min(ba[-1][1] if ba else -1, bb[-1][1] if bb else -1)
    diverge = None
    for off in sorted(set(da) | set(db)):
        if lo <= off <= hi and da.get(off) != db.get(off):
            diverge = off
            break
    return diverge, bb


def test_unclean_election_shape(tmp_path):
    """A partition copied while the broker runs; the original goes on at epoch 0; the copy becomes leader
    at epoch 1 (kltool's writer adds its epoch entry). As the old leader follows the copy, it truncates at
    the copy's end and loses what it wrote after the copy was taken."""
    ld = logdir(tmp_path)
    orig = ld / "t-0"
    append(orig, 10, epoch=0, tag=b"a")
    copy_ld = tmp_path / "copy"
    shutil.copytree(ld, copy_ld)
    copy = copy_ld / "t-0"
    append(orig, 5, epoch=0, tag=b"late")  # produced after the copy
    append(copy, 3, epoch=1, tag=b"new-leader")
    assert (copy / "leader-epoch-checkpoint").read_text().splitlines()[2:] == ["0 0", "1 30"]
    d = run(copy, orig)  # A = the new leader (the copy), B = the old leader, now its follower
    assert d.diverge_offset == 30 and d.truncation_offset == 30
    assert (d.common.batches, d.common.records) == (10, 30)
    assert (d.only_a.batches, d.only_a.records, d.only_a.first_offset, d.only_a.last_offset) == (3, 9, 30, 38)
    assert (d.only_b.batches, d.only_b.records, d.only_b.first_offset, d.only_b.last_offset) == (5, 15, 30, 44)
    assert (d.lost.batches, d.lost.records, d.lost.first_offset, d.lost.last_offset) == (5, 15, 30, 44)
    assert d.lost.first_timestamp == TS0 and d.lost.last_timestamp == TS0 + 4
    assert d.differing_batches == 3  # 30..32, 33..35, 36..38: same offsets, other records
    assert not [x for x in d.items if getattr(x, "severity", None) == "error"]
    diverge, bb = brute(copy, orig)
    assert diverge == d.diverge_offset
    assert sum(x[4] for x in bb if x[1] >= d.truncation_offset) == d.lost.records


def test_a_follower_behind_is_not_divergence(tmp_path):
    ld = logdir(tmp_path)
    append(ld / "t-0", 4, epoch=0, tag=b"a")
    shutil.copytree(ld, tmp_path / "b")
    append(ld / "t-0", 2, epoch=0, tag=b"more")
    d = run(ld / "t-0", tmp_path / "b" / "t-0")
    assert d.diverge_offset is None and d.truncation_offset == 12 and d.lost.batches == 0
    assert (d.only_a.first_offset, d.only_a.last_offset, d.only_b.batches) == (12, 17, 0)
    same = run(ld / "t-0", ld / "t-0")
    assert same.identical and same.common.batches == 6


def test_same_epoch_divergence_is_kept_by_the_epoch_rule_and_reported(tmp_path):
    """Both sides wrote different data at the same epoch (no epoch bump, e.g. a restored backup written
    to): the epoch rule cannot see it; a finding says the follower keeps records the leader lacks."""
    ld = logdir(tmp_path)
    append(ld / "t-0", 4, epoch=0, tag=b"a")
    shutil.copytree(ld, tmp_path / "b")
    append(ld / "t-0", 2, epoch=0, tag=b"x")
    append(tmp_path / "b" / "t-0", 2, epoch=0, tag=b"y")
    d = run(ld / "t-0", tmp_path / "b" / "t-0")
    assert d.diverge_offset == 12 and d.truncation_offset == 18
    assert [x.kind for x in d.items if getattr(x, "kind", None) == "divergence_kept"] == ["divergence_kept"]


def test_kafkas_truncation_rule():
    # the leader's answer for an epoch it has, one it does not, the latest, an unknown one
    cache = [(0, 0), (1, 30), (4, 70)]
    assert end_offset_for(cache, 4, 100) == (4, 100)
    assert end_offset_for(cache, 1, 100) == (1, 70)
    assert end_offset_for(cache, 3, 100) == (1, 70)
    assert end_offset_for([(2, 10), (4, 70)], 1, 100) == (1, 10)
    assert end_offset_for(cache, 5, 100) == (-1, -1)
    assert end_offset_for([], 0, 100) == (-1, -1)
    # one round: the follower knows the epoch the leader answers with
    assert follower_truncation([(0, 0), (2, 100)], 150, [(0, 0), (1, 80)], 120, 0)[0] == 80
    # two rounds: the leader answers epoch 1, which the follower never had; it truncates to its epoch 0's end
    # (40) and asks again with epoch 0
    assert follower_truncation(cache, 100, [(0, 0), (2, 40), (3, 60)], 80, 0)[0] == 30
    # no epochs on the follower: its high watermark
    assert follower_truncation(cache, 100, [], 80, 25)[0] == 25
    # the follower's latest epoch is above all the leader knows: its log end, cut to the leader's (out of range)
    assert follower_truncation([(0, 0), (1, 30)], 60, [(0, 0), (5, 40)], 50, 0)[0] == 50
    assert follower_truncation([(0, 0), (1, 30)], 45, [(0, 0), (5, 40)], 50, 0)[0] == 45


def test_different_topic_ids_are_refused(tmp_path, kl):
    a = logdir(tmp_path, "a")
    b = logdir(tmp_path, "b")  # created apart: another topic id
    with pytest.raises(UsageError, match="topic id"):
        pair_partitions(select([str(a / "t-0")], None, None), select([str(b / "t-0")], None, None))
    r = kl("diff", a / "t-0", b / "t-0")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "partition.metadata" in r.err, r


def test_log_dirs_partition_by_partition(tmp_path, kl):
    ld = logdir(tmp_path, topics=("t", "u"))
    append(ld / "t-0", 3, epoch=0, tag=b"a")
    append(ld / "u-0", 3, epoch=0, tag=b"a")
    shutil.copytree(ld, tmp_path / "b")
    append(ld / "u-0", 1, epoch=0, tag=b"b")
    create_topic(ld, "only", 1)
    r = kl("--json", "diff", ld, tmp_path / "b")
    assert r.code == 1, r
    objs = r.json()
    div = {o["topic"]: o for o in objs if o["type"] == "divergence"}
    assert div["t"]["identical"] and not div["u"]["identical"] and div["u"]["only_a"]["records"] == 3
    assert [o["kind"] for o in objs if o["type"] == "finding"] == ["partition_missing"]
    assert objs[-1] == {"type": "summary", "partitions": 2, "differing": 2, "only_a": 1, "only_b": 0, "errors": 0}
    r = kl("diff", ld, tmp_path / "b", "--topic", "t")
    assert r.code == 0 and "identical" in r.out, r
    r = kl("diff", ld / "u-0", tmp_path / "b" / "u-0")
    assert r.code == 1 and "only A has:   offsets 9..11" in r.out and "truncates to 9" in r.out, r


def test_damage_is_a_finding_never_a_confident_answer(tmp_path, kl):
    ld = logdir(tmp_path)
    append(ld / "t-0", 4, epoch=0, tag=b"a")
    shutil.copytree(ld, tmp_path / "b")
    log = tmp_path / "b" / "t-0" / f"{0:020d}.log"
    data = bytearray(log.read_bytes())
    data[70] ^= 0xFF  # in the first batch's records: its CRC fails
    log.write_bytes(bytes(data))
    r = kl("--json", "diff", ld / "t-0", tmp_path / "b" / "t-0")
    assert r.code == 1 and "Traceback" not in r.err
    objs = r.json()
    (div,) = [o for o in objs if o["type"] == "divergence"]
    assert div["complete"] is False and not div["identical"]
    assert any(o["type"] == "finding" and o["severity"] == "error" for o in objs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(common=st.integers(0, 6), extra_a=st.integers(0, 4), extra_b=st.integers(0, 4), bump=st.booleans(),
       seg=st.sampled_from([400, 1 << 20]))
def test_property_matches_brute_force(tmp_path_factory, common, extra_a, extra_b, bump, seg):
    tmp = tmp_path_factory.mktemp("d")
    ld = logdir(tmp)
    if common:
        append(ld / "t-0", common, epoch=0, tag=b"c", segment_bytes=seg)
    shutil.copytree(ld, tmp / "b")
    if extra_a:
        append(ld / "t-0", extra_a, epoch=1 if bump else 0, tag=b"A", segment_bytes=seg)
    if extra_b:
        append(tmp / "b" / "t-0", extra_b, epoch=0, tag=b"B", segment_bytes=seg)
    d = run(ld / "t-0", tmp / "b" / "t-0")
    diverge, bb = brute(ld / "t-0", tmp / "b" / "t-0")
    assert d.diverge_offset == diverge
    assert d.lost.records == sum(x[4] for x in bb if x[1] >= d.truncation_offset)
    assert d.common.batches == common
    assert (d.only_a.batches, d.only_b.batches) == (extra_a, extra_b)
    # B follows A: it keeps its common prefix, and with A at a newer epoch loses all it wrote alone
    if bump and extra_a:
        assert d.truncation_offset == 3 * common and d.lost.batches == extra_b


def test_two_partitions_of_other_names_are_refused_unless_their_topic_id_matches(tmp_path):
    a = logdir(tmp_path, "a", topics=("t", "u"))
    (a / "u-0" / "partition.metadata").unlink()  # (an old ZooKeeper-era dir has none)
    with pytest.raises(UsageError, match="t-0 and u-0"):
        pair_partitions(select([str(a / "t-0")], None, None), select([str(a / "u-0")], None, None))
    shutil.copytree(a / "t-0", tmp_path / "renamed" / "t2-0")
    pairs, _a, _b = pair_partitions(select([str(a / "t-0")], None, None),
                                    select([str(tmp_path / "renamed" / "t2-0")], None, None))
    assert len(pairs) == 1


def test_the_brokers_own_truncation_of_a_copy_put_back_as_follower(kl):
    """fixtures/forensics/kafka4.4-epoch-truncation (two Apache Kafka 4.4.0 brokers): the leader's partition
    copied while it ran, 5 more records produced to the leader, the copy given 3 batches at a new leader
    epoch by kltool's writer, put back as the follower's replica. The follower broker logged "Truncating to
    offset 15" (follower-broker.log) and kept follower-after/: what kltool predicts, including the
    divergent records it keeps (its epoch 1 is one the leader never had)."""
    base = FIX / "kafka4.4-epoch-truncation"
    d = run(base / "leader" / "u-0", base / "follower-before" / "u-0")
    logged = (base / "follower-broker.log").read_text()
    assert f"Truncating to offset {d.truncation_offset} " in logged and d.truncation_offset == 15
    kept = [(h.base_offset, h.last_offset, h.crc) for s in Partition(base / "follower-after" / "u-0").segments
            for h in scan.batches(s.log_path)]
    before = [(h.base_offset, h.last_offset, h.crc) for s in Partition(base / "follower-before" / "u-0").segments
              for h in scan.batches(s.log_path)]
    lost = [b for b in before if b not in kept]
    assert kept == before[:len(kept)]
    assert (d.lost.batches, d.lost.first_offset, d.lost.last_offset) == (len(lost), lost[0][0], lost[-1][1])
    assert d.diverge_offset == 10 and [x.kind for x in d.items if getattr(x, "kind", "") == "divergence_kept"]
    r = kl("--json", "diff", base / "leader" / "u-0", base / "follower-before" / "u-0")
    (div,) = [o for o in r.json() if o["type"] == "divergence"]
    assert div["truncation_offset"] == 15 and div["follower_loses"]["records"] == 6


def test_a_real_unclean_election(kl):
    """fixtures/forensics/kafka4.4-unclean-election (Apache Kafka 4.4.0: a controller and two brokers, topic u
    with unclean.leader.election.enable): 10 records on both replicas, the follower stopped, 5 more on the
    leader alone, the leader stopped, the out-of-sync follower elected (epoch 2) and given 3 records, the old
    leader started again as its follower. Its broker logged "Truncating to offset 10" and ended equal to
    the new leader: kltool's truncation point, and its "loses" are exactly the 5 records only it had."""
    base = FIX / "kafka4.4-unclean-election"
    d = run(base / "new-leader" / "u-0", base / "old-leader-before" / "u-0")
    assert "Truncating to offset 10 " in (base / "follower-broker.log").read_text()
    assert (d.diverge_offset, d.truncation_offset) == (10, 10)
    assert (d.lost.records, d.lost.first_offset, d.lost.last_offset) == (5, 10, 14)
    assert (d.only_a.records, d.only_b.records, d.common.records) == (3, 5, 10)
    assert not [x for x in d.items if getattr(x, "severity", None) in ("error", "warning")]
    after = run(base / "new-leader" / "u-0", base / "old-leader-after" / "u-0")
    assert after.identical and after.common.records == 13
    diverge, bb = brute(base / "new-leader" / "u-0", base / "old-leader-before" / "u-0")
    assert diverge == 10 and sum(x[4] for x in bb if x[1] >= 10) == d.lost.records
