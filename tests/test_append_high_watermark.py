"""kltool append and the root's replication-offset-checkpoint (found by bench/broker_campaign.py).

A broker stopped cleanly leaves every partition's high watermark at its log end. kltool append after that
must move it with the log end: a single-replica leader's high watermark reaches its new records as soon as
it leads, and kltool's own offline changes that stop at the high watermark (retention --before-offset,
size/time retention, compact, the last stable offset) must not treat kltool's records as unreplicated.
"""

from __future__ import annotations

from kltool.format.checkpoints import encode_offset_checkpoint, parse_offset_checkpoint

HW = "replication-offset-checkpoint"


def _hws(logdir):
    return parse_offset_checkpoint((logdir / HW).read_text())


def test_append_moves_a_committed_high_watermark(kl, tmp_path):
    d = tmp_path / "logs"
    assert kl("create", d, "t", "--partitions", "2", "--config", "segment.bytes=1024").code == 0
    (d / HW).write_text(encode_offset_checkpoint({("t", 0): 0, ("t", 1): 0, ("other", 0): 7}))
    rows = "".join(f'{{"key": "k{i}", "value": "{"v" * 100}", "partition": 0}}\n' for i in range(30))
    res = kl("append", d, "t", stdin=rows)
    assert res.code == 0, res
    assert _hws(d) == {("t", 0): 30, ("t", 1): 0, ("other", 0): 7}
    # so kltool's own DeleteRecords may move the log start past kltool's records (it refused: HW 0)
    res = kl("retention", d, "--topic", "t", "-p", "0", "--before-offset", "20", "--no-backup")
    assert res.code == 0, res
    res = kl("--json", "offsets", d / "t-0")
    assert res.json()[0]["log_start_offset"] == 20


def test_append_keeps_an_unreplicated_tail(kl, tmp_path):
    d = tmp_path / "logs"
    assert kl("create", d, "t", "--partitions", "1").code == 0
    assert kl("append", d, "t", "--value", "a").code == 0
    assert kl("append", d, "t", "--value", "b").code == 0
    (d / HW).write_text(encode_offset_checkpoint({("t", 0): 1}))  # offset 1 not replicated yet
    assert kl("append", d, "t", "--value", "c").code == 0
    assert _hws(d) == {("t", 0): 1}
    (d / HW).write_text(encode_offset_checkpoint({("t", 0): 3}))
    assert kl("append", d, "t", "--value", "d", "--dry-run").code == 1  # work to do, nothing written
    assert _hws(d) == {("t", 0): 3}
