"""`kltool dump --isolation-level` (a consumer's view) starts at the log start offset (found by
bench/broker_campaign.py: after `kltool retention --before-offset` inside the first segment, the broker served
from the new log start while dump showed the segment's records below it too). Without --isolation-level the
forensic view still shows every record on disk."""

from __future__ import annotations


def _records(kl, *args):
    res = kl("--json", "dump", "--records", *args)
    assert res.code == 0, res
    return [r["offset"] for r in res.json() if r["type"] == "record"]


def test_consumer_view_starts_at_the_log_start(kl, tmp_path):
    d = tmp_path / "logs"
    assert kl("create", d, "t", "--partitions", "1").code == 0
    rows = "".join(f'{{"key": "k", "value": "v{i}"}}\n' for i in range(6))
    assert kl("append", d, "t", "--batch-records", "2", stdin=rows).code == 0
    assert kl("retention", d, "--before-offset", "3", "--no-backup").code == 0  # inside the first segment
    p = d / "t-0"
    assert _records(kl, p) == [0, 1, 2, 3, 4, 5]  # forensic: every record on disk
    for level in ("read_uncommitted", "read_committed"):
        assert _records(kl, "--isolation-level", level, p) == [3, 4, 5]  # the consumer's view
        assert _records(kl, "--isolation-level", level, "--from-offset", "4", p) == [4, 5]
        assert _records(kl, "--isolation-level", level, "--from-offset", "1", p) == [3, 4, 5]
