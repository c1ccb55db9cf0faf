"""kltool rebuild-index: the broker's recovery rule (IndexBuilder), dry run, backups, damaged logs skipped."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from kltool.format import index as fidx
from kltool.storage.index_builder import check_offset_index_invariant

from .conftest import REAL
from .test_repair import batches_of, manifests, tree


def test_builds_missing_indexes_by_the_recovery_rule(kl, copy_fixture, tmp_path):
    part = copy_fixture("java-oracle/v2-multi-segment-0", name="logs/v2-multi-segment-0")
    before = tree(part)
    dry = kl("--json", "rebuild-index", "--dry-run", part)
    assert dry.code == 1
    planned = [o for o in dry.json() if o["type"] == "action"]
    assert len(planned) == 6 and {o["op"] for o in planned} == {"rebuild_index"}
    assert tree(part) == before
    r = kl("--json", "rebuild-index", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 0, r
    for log in sorted(part.glob("*.log")):
        base = int(log.name[:20])
        hs = batches_of(log)
        entries = fidx.offset_index_entries(log.with_suffix(".index").read_bytes(), base)
        assert entries and not check_offset_index_invariant(entries, hs)
        # LogSegment.recover: an entry for the first batch more than 4096 bytes past the previous entry
        anchor, want = 0, []
        for h in hs:
            if h.position - anchor > 4096:
                want.append((h.last_offset, h.position))
                anchor = h.position
        assert entries == want
        times = fidx.time_index_entries(log.with_suffix(".timeindex").read_bytes(), base)
        assert times[-1] == (max(h.max_timestamp for h in hs), hs[-1].last_offset)
    assert kl("--json", "verify", part).code == 0
    again = kl("rebuild-index", "--backup-dir", tmp_path / "bk", part)
    assert again.code == 0 and "every index is valid" in again.out
    (m,) = manifests(tmp_path / "bk")
    assert json.loads(m.read_text())["command"] == "rebuild-index"
    assert kl("restore", m).code == 0
    assert tree(part) == before


def test_index_interval_option(kl, copy_fixture, tmp_path):
    part = copy_fixture("java-oracle/v2-none-0", name="logs/v2-none-0")
    r = kl("rebuild-index", "--index-interval-bytes", "0", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 0, r
    log = part / "00000000000000000000.log"
    entries = fidx.offset_index_entries((part / "00000000000000000000.index").read_bytes(), 0)
    assert entries == [(h.last_offset, h.position) for h in batches_of(log)[1:]]


def test_rewrites_broker_indexes_that_differ_and_restores_them(kl, tmp_path):
    root = tmp_path / "w"
    shutil.copytree(REAL / "william0423-indexed-zk", root)
    before = tree(root)
    part = root / "__consumer_offsets-28"
    # the broker's indexes are valid: left alone (dry run plans nothing, a run writes nothing) ...
    d = kl("--json", "rebuild-index", "--dry-run", root)
    assert d.code == 0 and not [o for o in d.json() if o["type"] == "action"]
    n = kl("rebuild-index", "--backup-dir", tmp_path / "bk", root)
    assert n.code == 0 and "every index is valid" in n.out and tree(root) == before
    assert not (tmp_path / "bk").exists()
    # ... unless --force, which rewrites those that differ from the recovery rule's
    r = kl("--json", "rebuild-index", "--force", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 0, r
    files = sorted(Path(o["file"]).name for o in r.json() if o["type"] == "action")
    assert files == ["00000000000000000000.index", "00000000000000000000.timeindex"]
    assert kl("verify", root).code == 0
    (m,) = manifests(tmp_path / "bk")
    assert kl("restore", m).code == 0
    assert tree(root) == before


def test_damaged_log_is_skipped(kl, copy_fixture, tmp_path):
    part = copy_fixture("java-oracle/damaged-v2-crc-0", name="logs/damaged-v2-crc-0")
    r = kl("rebuild-index", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 1
    assert "damaged" in r.out and "verify --repair" in r.out
    assert not (part / "00000000000000000000.index").exists()


def test_single_index_file_and_txnindex(kl, copy_fixture, tmp_path):
    part = copy_fixture("java-oracle/v2-txn-0", name="logs/v2-txn-0")
    (part / "00000000000000000000.index").write_bytes(struct.pack(">ii", 3, 999))
    r = kl("--json", "rebuild-index", "--force", "--backup-dir", tmp_path / "bk", part / "00000000000000000000.index")
    assert r.code == 0, r
    names = sorted(Path(o["file"]).name for o in r.json() if o["type"] == "action")
    assert names == ["00000000000000000000.index", "00000000000000000000.timeindex",
                     "00000000000000000000.txnindex"]
    txns = fidx.parse_txn_index((part / "00000000000000000000.txnindex").read_bytes())
    assert [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in txns] == [(2001, 3, 9, 10)]


def test_refuses_a_locked_log_dir(kl, tmp_path):
    from .test_repair import _hold_lock

    root = tmp_path / "w"
    shutil.copytree(REAL / "william0423-indexed-zk", root)
    holder = _hold_lock(root / ".lock")
    try:
        r = kl("rebuild-index", "--backup-dir", tmp_path / "bk", root)
        assert r.code == 3 and "a broker or another kltool holds" in r.err
    finally:
        holder.kill()
        holder.wait()


def test_only_the_broken_index_is_rebuilt_without_force(kl, copy_fixture, tmp_path):
    part = copy_fixture("java-oracle/v2-none-0", name="logs/v2-none-0")
    assert kl("rebuild-index", "--backup-dir", tmp_path / "bk", part).code == 0  # writes both (missing)
    ti = (part / "00000000000000000000.timeindex").read_bytes()
    (part / "00000000000000000000.index").write_bytes(struct.pack(">ii", 3, 999))
    r = kl("--json", "rebuild-index", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 0, r
    assert [Path(o["file"]).name for o in r.json() if o["type"] == "action"] == ["00000000000000000000.index"]
    assert (part / "00000000000000000000.timeindex").read_bytes() == ti
    assert kl("verify", part).code == 0


def test_a_missing_time_index_beside_an_index_is_reported_and_rebuilt(kl, tmp_path):
    """The broker creates an empty .timeindex without recovery when only it is missing: kltool says so, and
    both verify --repair and rebuild-index rebuild it (by the recovery rule, like the broker's own)."""
    for how in (["verify", "--repair"], ["rebuild-index"]):
        root = tmp_path / how[0]
        shutil.copytree(REAL / "william0423-indexed-zk", root)
        part = root / "__consumer_offsets-28"
        ti = part / "00000000000000000000.timeindex"
        ti.unlink()
        v = kl("--json", "verify", root)
        found = [o for o in v.json() if o["type"] == "finding"]
        assert v.code == 0 and [(f["kind"], f["severity"], Path(f["file"]).name) for f in found] == \
            [("missing_time_index", "warning", ti.name)]
        r = kl("--json", *how, "--backup-dir", tmp_path / f"bk-{how[0]}", root)
        assert r.code == 0, r
        assert [Path(o["file"]).name for o in r.json() if o["type"] == "action"] == [ti.name]
        assert ti.exists() and kl("verify", root).code == 0
