"""verify --repair that quarantines a partition's last producer snapshots leaves an empty one at the log start
offset (found by bench/broker_campaign.py: a transaction's marker cut by the repair, its snapshot beyond the new
log end quarantined, none left; the broker started with the clean-shutdown marker then assumed no producers
(UnifiedLog.rebuildProducerState's shortcut) and served the markerless transaction to read_committed, while
kltool and the broker's own recovery see it open). tests/broker/test_broker_campaign.py checks it on a broker."""

from __future__ import annotations

import os

PID = 10**12


def _setup(kl, tmp_path):
    d = tmp_path / "logs"
    assert kl("create", d, "t", "--partitions", "1").code == 0
    rows = "".join(f'{{"key": "k{i}", "value": "v{i}"}}\n' for i in range(7))
    res = kl("append", d, "t", "--producer-id", PID, "--transactional", "--end-transaction", "commit", stdin=rows)
    assert res.code == 0, res
    p = d / "t-0"
    log = p / "00000000000000000000.log"
    marker = [r for r in kl("--json", "dump", log).json() if r["type"] == "batch"][-1]
    assert marker["is_control"]
    os.truncate(log, marker["position"] + marker["size"] // 2)  # the marker torn
    assert sorted(f.name for f in p.glob("*.snapshot")) == ["00000000000000000008.snapshot"]
    return d, p


def test_repair_leaves_an_empty_snapshot_at_the_log_start(kl, tmp_path):
    d, p = _setup(kl, tmp_path)
    res = kl("verify", "--repair", "--backup-dir", tmp_path / "bk", d)
    assert res.code in (0, 1), res
    assert sorted(f.name for f in p.glob("*.snapshot")) == ["00000000000000000000.snapshot"]
    res = kl("--json", "dump", p / "00000000000000000000.snapshot")
    assert res.code == 0, res
    assert [r for r in res.json() if r["type"] not in ("file", "summary")] == []  # no producers
    assert kl("verify", d).code == 0
    res = kl("--json", "transactions", p)
    assert [r["state"] for r in res.json() if r["type"] == "transaction"] == ["open"]
    again = kl("--json", "verify", "--repair", "--dry-run", d)
    assert again.code == 0, again  # converged: nothing more to do
