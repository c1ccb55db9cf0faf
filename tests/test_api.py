"""kltool.Logs (api.py) is what the commands call: info, offsets, rebuild-index and restore give what the
CLI prints (the CLI goes through them), and the one-call restore."""

from __future__ import annotations

import pytest

import kltool
from kltool.errors import UsageError

from .test_repair import manifests, tree


def _objects(r, kind):
    return [o for o in r.json() if o["type"] == kind]


def test_info_and_offsets_are_what_the_cli_prints(kl, copy_fixture):
    ld = copy_fixture("java-oracle/v2-multi-segment-0", "ld/t-0").parent
    logs = kltool.Logs(ld)
    info = list(logs.info())
    r = kl("--json", "info", ld)
    assert [d for d in info if d["type"] == "partition"] == _objects(r, "partition")
    assert [d for d in info if d["type"] == "log_dir"] == _objects(r, "log_dir")
    assert list(logs.offsets()) == _objects(kl("--json", "offsets", ld), "offsets")
    counted = list(logs.offsets(count=True, latest=True))
    assert counted == _objects(kl("--json", "offsets", "--count", "--latest", ld), "offsets")
    assert counted[0]["records"] == counted[0]["log_end_offset"] == 1200
    (at,) = logs.offsets(time=0)
    assert at["offset"] == 0 and "log_start_offset" not in at


def test_rebuild_index_then_restore(tmp_path, copy_fixture):
    ld = copy_fixture("java-oracle/v2-multi-segment-0", "ld/t-0").parent
    before = tree(ld)
    logs = kltool.Logs(ld)
    plan = logs.rebuild_index().plan  # a dry run by default: the missing indexes are planned
    assert {a.op for a in plan.actions} == {"rebuild_index"} and tree(ld) == before
    done = logs.rebuild_index(dry_run=False, backup_dir=tmp_path / "bk")
    assert all(a.applied for a in done.plan.actions) and tree(ld) != before
    assert not logs.rebuild_index().plan.actions
    (m,) = manifests(tmp_path / "bk")
    assert kltool.restore(m)  # a dry run: steps planned, nothing changed
    assert tree(ld) != before
    steps = kltool.restore(m, dry_run=False)
    assert steps and all(s.done for s in steps) and tree(ld) == before


def test_logs_restore_defaults_to_the_backup_beside_the_log_dir(copy_fixture):
    ld = copy_fixture("java-oracle/damaged-v2-crc-0", "ld/t-0").parent
    before = tree(ld)
    logs = kltool.Logs(ld)
    with pytest.raises(UsageError, match="no backup directory"):
        logs.restore()
    logs.repair(dry_run=False)
    assert tree(ld) != before
    logs.restore(dry_run=False)
    assert tree(ld) == before and logs.verify().errors
