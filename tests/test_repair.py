"""verify --repair: every damage kind built from real / Kafka-written fixtures plus byte edits, each checked for

* the repaired files verify clean (and Kafka's own reader accepts them, when the Java oracle is installed);
* every batch that was valid before is still there, byte for byte (salvage mode);
* a second repair does nothing;
* ``restore`` gives back the original files exactly (so backup + repaired files = the original bytes).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kltool.storage.scan import walk

from .conftest import REAL, find_oracle

ORACLE_LAUNCHER = find_oracle()

# verify warnings that a repair must leave behind none of
FIXED_WARNINGS = {"missing_index", "index_untrimmed", "stale_file", "orphan_index", "snapshot_beyond_end",
                  "checkpoint_beyond_end", "snapshot_corrupt"}


# ------------------------------------------------------------------------------------------------ helpers


def tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file under ``root`` (relative path → bytes), without ``.lock`` (the lock repair takes creates it)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and p.name != ".lock" and not any(rel.startswith(s) for s in skip):
            out[rel] = p.read_bytes()
    return out


def valid_batches(root: Path) -> Counter:
    """(partition dir, batch bytes) of every CRC-valid batch whose offsets increase, in every .log under root."""
    out: Counter = Counter()
    for pdir in sorted({p.parent for p in root.rglob("*.log")}):
        last = None
        for log in sorted(pdir.glob("*.log")):
            for item in walk(log, with_data=True):
                if getattr(item, "crc_valid", False):
                    lo = item.base_offset if item.magic == 2 else item.last_offset
                    if last is not None and lo <= last:
                        continue
                    last = item.last_offset
                    out[(pdir.relative_to(root).as_posix(), item.data)] += 1
    return out


def oracle_read(*paths: Path) -> int:
    """Kafka's own reader (FileRecords, kafka-clients): exit 0 only when every file is fully valid."""
    r = subprocess.run([str(ORACLE_LAUNCHER), "read", *map(str, paths)], capture_output=True, timeout=120)
    return r.returncode


def manifests(backup: Path) -> list[Path]:
    return sorted(backup.glob("*/manifest.json"), key=lambda p: p.stat().st_mtime_ns)


def check_repair(kl, logroot: Path, target: Path, backup: Path, *, like_broker: bool = False,
                 extra=(), expect_ops: set[str] | None = None, check=None, may_lose=()) -> list[dict]:
    """Run the whole repair cycle on ``target`` (inside ``logroot``) and check every property.
    ``may_lose``: the bytes of CRC-valid batches the broker cannot load either (they may go)."""
    before = tree(logroot)
    vb = valid_batches(logroot)
    mode = ["--like-broker"] if like_broker else []
    # 1. the plan: exit 1, every action listed, nothing changed
    dry = kl("--json", "verify", "--repair", "--dry-run", *mode, *extra, target)
    assert dry.code == 1, dry
    planned = [o for o in dry.json() if o["type"] == "action"]
    assert planned and all(not a["applied"] for a in planned)
    if expect_ops is not None:
        assert expect_ops <= {a["op"] for a in planned}, planned
    assert tree(logroot) == before
    # 2. apply
    r = kl("--json", "verify", "--repair", "--backup-dir", backup, *mode, *extra, target)
    assert r.code == 0, r
    objs = r.json()
    done = [o for o in objs if o["type"] == "action"]
    assert [(a["op"], a["file"]) for a in done] == [(a["op"], a["file"]) for a in planned]
    assert all(a["applied"] for a in done)
    summary = objs[-1]
    assert summary["type"] == "summary" and len(summary["manifests"]) == 1
    manifest = Path(summary["manifests"][0])
    assert manifest.parent.parent == backup and not str(manifest).startswith(str(logroot) + "/")
    # 3. verify clean
    v = kl("--json", "verify", target)
    assert v.code == 0, v
    left = [f for f in v.json() if f["type"] == "finding" and f["kind"] in FIXED_WARNINGS]
    assert not left, left
    # 4. every valid batch is still there, byte for byte
    if not like_broker:
        missing = vb - valid_batches(logroot)
        assert not [k for k in missing if k[1] not in may_lose], list(missing)[:3]
    # 5. Kafka's reader sees the repaired segments as fully valid
    if ORACLE_LAUNCHER is not None:
        logs_ = sorted(target.rglob("*.log") if target.is_dir() else [target])
        assert oracle_read(*logs_) == 0, logs_
    if check is not None:
        assert check() is not False
    # 6. a second repair does nothing
    again = kl("--json", "verify", "--repair", "--backup-dir", backup, *mode, *extra, target)
    assert again.code == 0, again
    assert [o for o in again.json() if o["type"] == "action"] == []
    assert manifests(backup) == [manifest]
    # 7. restore gives back the original files exactly
    rs = kl("restore", manifest)
    assert rs.code == 0, rs
    assert tree(logroot) == before
    rs2 = kl("restore", manifest)
    assert rs2.code == 0 and "nothing to do" in rs2.out
    return done


def batches_of(log: Path):
    return [h for h in walk(log) if hasattr(h, "crc_valid")]


@pytest.fixture
def logs(tmp_path, copy_fixture):
    """A log dir ``tmp_path/logs`` holding copies of fixtures; backups go to ``tmp_path/backup``."""

    def make(*rels: str) -> Path:
        for rel in rels:
            copy_fixture(rel, name=f"logs/{Path(rel).name}")
        return tmp_path / "logs"

    return make


@pytest.fixture
def backup(tmp_path):
    return tmp_path / "backup"


@pytest.fixture
def william(tmp_path):
    dst = tmp_path / "william"
    shutil.copytree(REAL / "william0423-indexed-zk", dst)
    return dst


SEG0 = "00000000000000000000.log"


# ---------------------------------------------------------------------------------------------- log damage


@pytest.mark.parametrize("variant,cut", [("damaged-v2-torn-payload-0", (657, 727)),
                                         ("damaged-v2-torn-header-0", (657, 667)),
                                         ("damaged-v2-zero-tail-0", (657, 4753))])
def test_tail_damage_is_truncated(kl, logs, backup, variant, cut):
    root = logs(f"java-oracle/{variant}")
    done = check_repair(kl, root, root / variant, backup, expect_ops={"truncate", "rebuild_index"})
    (t,) = [a for a in done if a["op"] == "truncate"]
    assert (t["start"], t["end"], t["bytes"]) == (cut[0], cut[1], cut[1] - cut[0])
    assert t["first_offset"] == 9


def test_torn_tail_reports_the_records_of_the_partial_batch(kl, logs):
    root = logs("java-oracle/damaged-v2-torn-payload-0")
    r = kl("--json", "verify", "--repair", "--dry-run", root)
    (t,) = [o for o in r.json() if o.get("op") == "truncate"]
    assert (t["first_offset"], t["last_offset"], t["records_lost"]) == (9, 11, 3)


def test_preallocated_zero_tail_after_real_data(kl, william, tmp_path):
    part = william / "__consumer_offsets-28"
    log = part / SEG0
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(bytes(1 << 20))
    done = check_repair(kl, william, part, tmp_path / "backup")
    (t,) = [a for a in done if a["op"] == "truncate"]
    assert (t["start"], t["end"]) == (size, size + (1 << 20))
    assert "zero" in t["reason"]


@pytest.mark.parametrize("variant,rng,offsets", [("damaged-v2-crc-0", (219, 438), (3, 5)),
                                                 ("damaged-v2-crc-compressed-0", (324, 486), (6, 8)),
                                                 ("damaged-v1-crc-0", (79, 158), (1, 1))])
def test_crc_mismatch_is_excised_and_later_batches_kept(kl, logs, backup, variant, rng, offsets):
    root = logs(f"java-oracle/{variant}")
    n_before = len(batches_of(root / variant / SEG0))
    done = check_repair(kl, root, root / variant, backup, expect_ops={"excise"})
    (x,) = [a for a in done if a["op"] == "excise"]
    assert (x["start"], x["end"]) == rng
    assert (x["first_offset"], x["last_offset"]) == offsets
    assert x["ranges"][0]["kind"] == "crc_mismatch"
    assert n_before == 4 or variant == "damaged-v1-crc-0"


def test_bad_magic_with_valid_crc_gets_its_magic_back(kl, logs, backup):
    root = logs("java-oracle/damaged-v2-bad-magic-0")
    part = root / "damaged-v2-bad-magic-0"
    original = (part / SEG0).read_bytes()

    def check():
        data = (part / SEG0).read_bytes()
        assert len(data) == len(original)
        diff = [i for i in range(len(data)) if data[i] != original[i]]
        assert diff == [438 + 16] and data[438 + 16] == 2
        hs = batches_of(part / SEG0)
        assert len(hs) == 4 and all(h.crc_valid and h.magic == 2 for h in hs)

    done = check_repair(kl, root, part, backup, expect_ops={"fix_magic"}, check=check)
    assert not [a for a in done if a["op"] in ("truncate", "excise")]
    (fx,) = [a for a in done if a["op"] == "fix_magic"]
    assert (fx["position"], fx["old_byte"], fx["new_byte"]) == (454, 7, 2)


def test_bad_magic_and_bad_crc_is_excised(kl, logs, backup):
    root = logs("java-oracle/damaged-v2-bad-magic-0")
    log = root / "damaged-v2-bad-magic-0" / SEG0
    data = bytearray(log.read_bytes())
    data[438 + 100] ^= 0x10
    log.write_bytes(bytes(data))
    done = check_repair(kl, root, log.parent, backup, expect_ops={"excise"})
    (x,) = [a for a in done if a["op"] == "excise"]
    assert (x["start"], x["end"]) == (438, 657)


def test_flipped_magic_2_to_0_is_fixed(kl, logs, backup):
    root = logs("java-oracle/damaged-v2-crc-0")
    log = root / "damaged-v2-crc-0" / SEG0
    data = bytearray(log.read_bytes())
    assert data[16] == 2
    data[16] = 0  # batch 0 now reads as a v0 message with a bad CRC-32
    log.write_bytes(bytes(data))
    done = check_repair(kl, root, log.parent, backup, expect_ops={"fix_magic", "excise"})
    (fx,) = [a for a in done if a["op"] == "fix_magic"]
    assert (fx["position"], fx["old_byte"], fx["new_byte"]) == (16, 0, 2)


@pytest.mark.parametrize("size_field", [0x7FFFFFF0, 5, -3])
def test_impossible_length_field_in_the_middle(kl, william, tmp_path, size_field):
    """The length field is not covered by the CRC: the CRC over the span up to the next whole batch proves
    the batch intact, so the field is restored in place and nothing is cut."""
    part = william / "__consumer_offsets-28"
    log = part / SEG0
    original = log.read_bytes()
    hs = batches_of(log)
    victim = hs[len(hs) // 2]
    data = bytearray(original)
    struct.pack_into(">i", data, victim.position + 8, size_field)
    log.write_bytes(bytes(data))
    done = check_repair(kl, william, part, tmp_path / "backup", expect_ops={"fix_field"})
    assert {a["op"] for a in done} == {"fix_field"}
    assert all(victim.position + 8 <= a["position"] < victim.position + 12 for a in done)
    assert not [a for a in done if a["op"] in ("excise", "truncate")]


def test_length_field_that_cannot_be_proven_costs_only_its_batch(kl, william, tmp_path):
    """A length field AND a CRC-covered byte of the same batch damaged: nothing proves the length, so only
    that batch's bytes are cut, and every batch after it stays."""
    part = william / "__consumer_offsets-28"
    log = part / SEG0
    hs = batches_of(log)
    victim = hs[len(hs) // 2]
    data = bytearray(log.read_bytes())
    struct.pack_into(">i", data, victim.position + 8, 5)
    data[victim.position + 30] ^= 0xFF
    log.write_bytes(bytes(data))
    done = check_repair(kl, william, part, tmp_path / "backup", expect_ops={"excise", "rebuild_index"})
    (x,) = [a for a in done if a["op"] == "excise"]
    assert x["start"] == victim.position and x["end"] == victim.end
    assert (x["first_offset"], x["last_offset"]) == (victim.base_offset, victim.last_offset)
    # the snapshots and checkpoints stay: the log end offset did not move
    assert not [a for a in done if a["op"] == "write_checkpoint" or a["file"].endswith(".snapshot")]
    # the old offset index moves aside before the log changes and is rewritten after it
    ops = [(a["op"], Path(a["file"]).suffix) for a in done]
    assert ops.index(("quarantine", ".index")) < ops.index(("excise", ".log")) < ops.index(("rebuild_index", ".index"))


def test_garbage_after_the_last_batch(kl, william, tmp_path):
    part = william / "debug_topic-0"
    log = part / SEG0
    with open(log, "ab") as f:
        f.write(random.Random(7).randbytes(3000))
    done = check_repair(kl, william, part, tmp_path / "backup", expect_ops={"truncate"})
    (t,) = [a for a in done if a["op"] == "truncate"]
    assert (t["start"], t["end"]) == (883, 3883)


@pytest.mark.parametrize("kind", ["zero", "garbage"])
def test_damaged_region_in_the_middle_keeps_everything_after_it(kl, william, tmp_path, kind):
    part = william / "__consumer_offsets-28"
    log = part / SEG0
    hs = batches_of(log)
    a, b = hs[100], hs[140]
    data = bytearray(log.read_bytes())
    n = b.position - a.position - 7  # the region ends inside batch b-1: it goes too
    data[a.position:a.position + n] = bytes(n) if kind == "zero" else random.Random(3).randbytes(n)
    log.write_bytes(bytes(data))
    done = check_repair(kl, william, part, tmp_path / "backup", expect_ops={"excise", "rebuild_index"})
    (x,) = [a2 for a2 in done if a2["op"] == "excise"]
    assert (x["start"], x["end"]) == (a.position, b.position)
    assert (x["first_offset"], x["last_offset"]) == (a.base_offset, b.base_offset - 1)
    after = batches_of(log)
    assert len(after) == len(hs) - 40 and after[-1].last_offset == hs[-1].last_offset
    ops = {(a2["op"], Path(a2["file"]).name) for a2 in done}
    assert ("rebuild_index", "00000000000000000000.index") in ops
    assert ("rebuild_index", "00000000000000000000.timeindex") in ops


def test_several_damaged_ranges_and_a_torn_tail_in_one_segment(kl, logs, backup):
    root = logs("java-oracle/v2-multi-segment-0")
    part = root / "v2-multi-segment-0"
    log = part / SEG0
    hs = batches_of(log)
    data = bytearray(log.read_bytes())
    for h in (hs[3], hs[10], hs[11]):
        data[h.position + 40] ^= 0xFF
    data = data[: hs[-1].position + 30]
    log.write_bytes(bytes(data))
    done = check_repair(kl, root, part, backup)
    (x,) = [a for a in done if a["op"] == "excise"]
    assert [(c["start"], c["end"]) for c in x["ranges"]] == [
        (hs[3].position, hs[3].end), (hs[10].position, hs[10].end), (hs[11].position, hs[11].end),
        (hs[-1].position, hs[-1].position + 30)]


def test_offsets_going_backwards_are_excised(kl, logs, backup):
    root = logs("java-oracle/v2-none-0")
    log = root / "v2-none-0" / SEG0
    hs = batches_of(log)
    data = bytearray(log.read_bytes())
    data += data[hs[0].position:hs[0].end]  # a copy of batch 0 (offsets 0..2) after the last batch
    log.write_bytes(bytes(data))
    before = log.read_bytes()
    r = kl("--json", "verify", "--repair", "--backup-dir", backup, root)
    assert r.code == 0, r
    (t,) = [o for o in r.json() if o.get("op") == "truncate"]
    assert t["ranges"][0]["kind"] == "offset_order"
    assert log.read_bytes() == before[: hs[-1].end]
    assert kl("verify", root).code == 0


def test_damage_at_the_start_of_a_segment(kl, william, tmp_path):
    part = william / "debug_topic-0"
    log = part / SEG0
    data = bytearray(log.read_bytes())
    data[0:100] = bytes(100)
    log.write_bytes(bytes(data))
    done = check_repair(kl, william, part, tmp_path / "backup")
    (x,) = [a for a in done if a["op"] == "excise"]
    assert (x["start"], x["end"], x["first_offset"], x["last_offset"]) == (0, 401, 0, 19)
    assert not [a for a in done if a["op"] == "write_checkpoint" or a["file"].endswith(".snapshot")]


def test_a_wholly_damaged_last_segment_becomes_empty(kl, logs, backup):
    root = logs("java-oracle/v2-multi-segment-0")
    part = root / "v2-multi-segment-0"
    log = part / "00000000000000000800.log"
    log.write_bytes(random.Random(5).randbytes(3000))
    (part / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n3 900\n")

    def check():
        assert log.stat().st_size == 0
        assert (part / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"

    done = check_repair(kl, root, part, backup, check=check)
    (t,) = [a for a in done if a["op"] == "truncate"]
    assert (t["start"], t["end"], t["first_offset"]) == (0, 3000, 800)


def _set_crc(data: bytearray, pos: int, size: int) -> None:
    from crc32c import crc32c

    struct.pack_into(">I", data, pos + 17, crc32c(bytes(data[pos + 21:pos + size])))


@pytest.mark.parametrize("version,ctype", [(-1, 0), (0, 5)])
def test_a_transaction_marker_the_broker_cannot_load_is_excised(kl, logs, backup, version, ctype):
    """A negative key version is an InvalidRecordException (recovery truncates there); a control type other
    than ABORT/COMMIT in a producer's control batch makes the broker's load fail."""
    root = logs("java-oracle/v2-txn-0")
    log = root / "v2-txn-0" / SEG0
    marker = [h for h in batches_of(log) if h.is_control and h.base_offset == 9][0]
    data = bytearray(log.read_bytes())
    rec = marker.position + 61  # the record: length, attributes, timestamp delta, offset delta, key length
    key = rec + 5
    assert struct.unpack_from(">hh", data, key) == (0, 0)  # version 0, ABORT
    struct.pack_into(">hh", data, key, version, ctype)
    _set_crc(data, marker.position, marker.size)
    log.write_bytes(bytes(data))
    done = check_repair(kl, root, log.parent, backup, may_lose=[bytes(data[marker.position:marker.end])])
    (x,) = [a for a in done if a["op"] == "excise"]
    assert (x["start"], x["end"]) == (marker.position, marker.end)
    assert x["ranges"][0]["kind"] == "invalid_control"


# ------------------------------------------------------------------------------------------------ indexes


def _with_indexes(kl, logs, backup) -> Path:
    """v2-multi-segment-0 with indexes built by a first repair (then the backup is forgotten)."""
    root = logs("java-oracle/v2-multi-segment-0")
    assert kl("verify", "--repair", "--backup-dir", backup / "first", root).code == 0
    shutil.rmtree(backup / "first")
    return root


@pytest.mark.parametrize("damage", ["missing", "truncated", "corrupt", "inconsistent", "untrimmed",
                                    "time_missing", "time_corrupt", "time_inconsistent"])
def test_index_damage_is_rebuilt(kl, logs, backup, damage):
    root = _with_indexes(kl, logs, backup)
    part = root / "v2-multi-segment-0"
    idx, tix = part / "00000000000000000000.index", part / "00000000000000000000.timeindex"
    good_idx, good_tix = idx.read_bytes(), tix.read_bytes()
    assert len(good_idx) >= 16
    if damage == "missing":
        idx.unlink()
    elif damage == "truncated":
        idx.write_bytes(good_idx[:-3])
    elif damage == "corrupt":
        idx.write_bytes(b"  ")
    elif damage == "inconsistent":
        idx.write_bytes(good_idx[:8] + struct.pack(">ii", struct.unpack_from(">i", good_idx, 8)[0], 12345))
    elif damage == "untrimmed":
        idx.write_bytes(good_idx + bytes(80))
    elif damage == "time_missing":
        tix.unlink()
    elif damage == "time_corrupt":
        tix.write_bytes(good_tix[12:24] + good_tix[:12])
    elif damage == "time_inconsistent":
        tix.write_bytes(struct.pack(">qi", 1, 7) + good_tix[12:])

    def check():
        assert idx.read_bytes() == good_idx and tix.read_bytes() == good_tix

    done = check_repair(kl, root, part, backup, expect_ops={"rebuild_index"}, check=check)
    assert {a["op"] for a in done} == {"rebuild_index"}


def test_broker_written_indexes_are_left_alone(kl, william, tmp_path):
    r = kl("--json", "verify", "--repair", "--dry-run", william)
    assert r.code == 0, r
    assert [o for o in r.json() if o["type"] == "action"] == []


def test_corrupt_txnindex_is_rebuilt(kl, logs, backup):
    root = logs("java-oracle/v2-txn-0")
    part = root / "v2-txn-0"
    assert kl("verify", "--repair", "--backup-dir", backup / "first", root).code == 0
    shutil.rmtree(backup / "first")
    txn = part / "00000000000000000000.txnindex"
    good = txn.read_bytes()
    assert len(good) == 34  # producer 2001 aborted offsets 3..9
    bad = bytearray(good)
    bad[0] = 5  # unknown version
    txn.write_bytes(bytes(bad) + b"\x00\x01")
    done = check_repair(kl, root, part, backup, check=lambda: txn.read_bytes() == good)
    assert [(a["op"], Path(a["file"]).suffix) for a in done] == [("rebuild_index", ".txnindex")]


def test_txnindex_entry_of_a_cut_marker_is_dropped(kl, logs, backup):
    root = logs("java-oracle/v2-txn-0")
    part = root / "v2-txn-0"
    assert kl("verify", "--repair", "--backup-dir", backup / "first", root).code == 0
    shutil.rmtree(backup / "first")
    log = part / SEG0
    marker = [h for h in batches_of(log) if h.is_control and h.base_offset == 9][0]
    data = bytearray(log.read_bytes())
    data[marker.position + 70] ^= 1
    log.write_bytes(bytes(data))
    check_repair(kl, root, part, backup,
                 check=lambda: (part / "00000000000000000000.txnindex").read_bytes() == b"")


def test_orphan_index_files_are_quarantined(kl, logs, backup):
    root = logs("java-oracle/v2-none-0")
    part = root / "v2-none-0"
    (part / "00000000000000099999.index").write_bytes(bytes(16))
    (part / "00000000000000099999.timeindex").write_bytes(bytes(24))
    done = check_repair(kl, root, part, backup, check=lambda: not list(part.glob("*99999*")))
    q = sorted(Path(a["file"]).name for a in done if a["op"] == "quarantine")
    assert q == ["00000000000000099999.index", "00000000000000099999.timeindex"]


# -------------------------------------------------------------------------------------------- stale files


def test_swap_cleaned_and_deleted_files_by_the_brokers_rules(kl, logs, backup):
    root = logs("java-oracle/v2-multi-segment-0")
    part = root / "v2-multi-segment-0"
    seg400 = part / "00000000000000000400.log"
    hs = batches_of(seg400)
    compacted = seg400.read_bytes()[: hs[-2].end]  # the "cleaned" segment: its last batch compacted away
    (part / "00000000000000000400.log.swap").write_bytes(compacted)
    (part / "00000000000000000000.log.deleted").write_bytes(b"old bytes scheduled for deletion")
    (part / "00000000000000000000.timeindex.deleted").write_bytes(bytes(12))
    (part / "00000000000000000800.log.cleaned").write_bytes(b"half-written cleaner output")
    (part / "00000000000000000900.log.swap").write_bytes(b"swap of an incomplete split")
    (part / "00000000000000000400.snapshot").write_bytes(bytes(10))
    before = tree(root)
    r = kl("--json", "verify", "--repair", "--backup-dir", backup, root)
    assert r.code == 0, r
    acts = [o for o in r.json() if o["type"] == "action"]
    q = [Path(a["file"]).name for a in acts if a["op"] == "quarantine"]
    assert sorted(q) == sorted(["00000000000000000000.log.deleted", "00000000000000000000.timeindex.deleted",
                                "00000000000000000800.log.cleaned", "00000000000000000900.log.swap",
                                "00000000000000000400.log", "00000000000000000400.snapshot"])
    (rn,) = [a for a in acts if a["op"] == "rename"]
    assert Path(rn["file"]).name == "00000000000000000400.log.swap"
    assert Path(rn["target"]).name == "00000000000000000400.log"
    assert seg400.read_bytes() == compacted
    assert not [p for p in part.iterdir() if p.suffix in (".swap", ".cleaned", ".deleted")]
    assert kl("verify", root).code == 0
    assert kl("--json", "verify", "--repair", "--dry-run", root).code == 0
    m = json.loads(r.out.splitlines()[-1])["manifests"][0]
    assert kl("restore", m).code == 0
    assert tree(root) == before


# ------------------------------------------------------------------------ snapshots, epochs, checkpoints


def test_truncation_fixes_snapshots_epochs_and_checkpoints(kl, william, tmp_path):
    part = william / "debug_topic-0"
    log = part / SEG0
    (part / "leader-epoch-checkpoint").write_text("0\n3\n0 0\n1 25\n2 38\n")
    with open(log, "r+b") as f:
        f.truncate(401 + 100)  # batch 20..29 torn: the log end offset becomes 20

    def check():
        assert sorted(p.name for p in part.glob("*.snapshot")) == []
        assert (part / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
        for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
            lines = (william / name).read_text().splitlines()
            assert "debug_topic 0 20" in lines
            assert "__consumer_offsets 28 8202" in lines

    done = check_repair(kl, william, part, tmp_path / "backup", check=check)
    ops = [(a["op"], Path(a["file"]).name) for a in done]
    assert ("quarantine", "00000000000000000030.snapshot") in ops
    assert ("quarantine", "00000000000000000040.snapshot") in ops
    assert ("write_checkpoint", "leader-epoch-checkpoint") in ops
    assert ("write_checkpoint", "recovery-point-offset-checkpoint") in ops
    assert ("write_checkpoint", "replication-offset-checkpoint") in ops


def test_checkpoints_past_the_log_end_without_damage(kl, william, tmp_path):
    """A log start offset past the end is dropped, not clamped to the log end (Kafka 4.4 would load
    logStartOffset = LEO and serve none of the kept records): the log starts at its first segment."""
    cp = william / "log-start-offset-checkpoint"
    cp.write_text("0\n1\ndebug_topic 0 77\n")
    clean = william / "cleaner-offset-checkpoint"
    clean.write_text("0\n2\ndebug_topic 0 99\n__consumer_offsets 28 5\n")
    r = kl("--json", "verify", "--repair", "--dry-run", william / "debug_topic-0")
    assert r.code == 1
    done = check_repair(kl, william, william / "debug_topic-0", tmp_path / "backup",
                        check=lambda: (cp.read_text(), clean.read_text()) == (
                            "0\n0\n", "0\n1\n__consumer_offsets 28 5\n"))
    assert sorted(Path(a["file"]).name for a in done) == ["cleaner-offset-checkpoint",
                                                          "log-start-offset-checkpoint"]


def test_corrupt_snapshot_and_leader_epoch_checkpoint(kl, william, tmp_path):
    part = william / "debug_topic-0"
    snap = part / "00000000000000000030.snapshot"
    snap.write_bytes(snap.read_bytes()[:6] + b"\x00\x00\x00\x07")  # entry count 7, no entries
    (part / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n")  # says 2 entries, holds 1

    def check():
        assert not snap.exists()
        assert (part / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"

    check_repair(kl, william, part, tmp_path / "backup", check=check)


@pytest.mark.parametrize("text", ["version: 0\ntopic_id: !!!\n", "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA"])
def test_a_corrupt_partition_metadata_is_not_repairable_not_nothing_to_do(kl, william, tmp_path, text):
    """Found by the adversary campaign (seeds 101, 202): verify reports a corrupt partition.metadata as an error
    (Kafka's PartitionMetadataFile.read takes the whole log dir offline over it), yet verify --repair said
    "nothing to do" and exited 0. Repair cannot rebuild the topic id it holds, so it says so: the error, exit 1,
    nothing changed, with or without --dry-run."""
    part = william / "debug_topic-0"
    (part / "partition.metadata").write_text(text)
    before = tree(william)
    for extra in (["--dry-run"], ["--backup-dir", tmp_path / "bk"], ["--like-broker", "--dry-run"]):
        r = kl("--json", "verify", "--repair", *extra, part)
        assert r.code == 1, r
        errs = [o for o in r.json() if o["type"] == "finding" and o["severity"] == "error"]
        assert [(o["kind"], Path(o["file"]).name) for o in errs] == [("checkpoint_corrupt", "partition.metadata")]
        assert "not repaired" in errs[0]["message"]
        assert tree(william) == before


# ------------------------------------------------------------------------------------------ like-broker


def test_like_broker_truncates_and_drops_later_segments(kl, logs, backup):
    root = logs("java-oracle/v2-multi-segment-0")
    part = root / "v2-multi-segment-0"
    log = part / "00000000000000000400.log"
    hs = batches_of(log)
    data = bytearray(log.read_bytes())
    data[hs[5].position:hs[5].position + 200] = bytes(200)
    log.write_bytes(bytes(data))
    vb = valid_batches(root)

    def check():
        assert not (part / "00000000000000000800.log").exists()
        assert log.stat().st_size == hs[5].position
        kept = valid_batches(root)
        assert not (kept - vb)
        assert sum(kept.values()) < sum(vb.values())

    done = check_repair(kl, root, part, backup, like_broker=True, check=check)
    (t,) = [a for a in done if a["op"] == "truncate"]
    assert (t["start"], t["end"]) == (hs[5].position, len(data))
    assert t["records_lost"] > 0 and t["last_offset"] == hs[-1].last_offset
    assert ("quarantine", "00000000000000000800.log") in [(a["op"], Path(a["file"]).name) for a in done]
    # the default keeps segment 800 and every batch after the hole
    r = kl("--json", "verify", "--repair", "--dry-run", root)
    assert {o["op"] for o in r.json() if o["type"] == "action"} >= {"excise"}
    assert "quarantine" not in {o["op"] for o in r.json() if o["type"] == "action"}


# ------------------------------------------------------------------------------- safety, options, output


def _hold_lock(path: Path):
    code = ("import fcntl,sys,time\nf=open(sys.argv[1],'a+')\nfcntl.lockf(f,fcntl.LOCK_EX|fcntl.LOCK_NB)\n"
            "print('locked',flush=True)\ntime.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_refuses_while_a_broker_holds_the_lock(kl, william, tmp_path):
    log = william / "debug_topic-0" / SEG0
    with open(log, "ab") as f:
        f.write(b"garbage!" * 10)
    before = tree(william)
    holder = _hold_lock(william / ".lock")
    try:
        for extra in (["--dry-run"], ["--backup-dir", str(tmp_path / "b")]):
            r = kl("verify", "--repair", *extra, william)
            assert r.code == 3, r
            assert "a broker or another kltool holds" in r.err and r.err.count("\n") <= 2
    finally:
        holder.kill()
        holder.wait()
    assert tree(william) == before
    assert not (tmp_path / "b").exists()


def test_backup_dir_inside_the_log_dir_is_refused(kl, william):
    r = kl("verify", "--repair", "--backup-dir", william / "bk", william)
    assert r.code == 2 and "inside the log dir" in r.err


def test_default_backup_dir_is_beside_the_log_dir(kl, logs, tmp_path):
    root = logs("java-oracle/damaged-v2-crc-0")
    r = kl("--json", "verify", "--repair", root)
    assert r.code == 0, r
    (m,) = r.json()[-1]["manifests"]
    assert Path(m).parent.parent == tmp_path / "logs.kltool-backup"
    assert json.loads(Path(m).read_text())["status"] == "complete"


def test_backup_dir_needs_repair(kl, logs, tmp_path):
    root = logs("java-oracle/damaged-v2-crc-0")
    r = kl("verify", "--backup-dir", tmp_path / "b", root)
    assert r.code == 2 and "--repair" in r.err


def test_text_output_and_dry_run_exit_codes(kl, logs):
    root = logs("java-oracle/damaged-v2-crc-0")
    r = kl("verify", "--repair", "--dry-run", root)
    assert r.code == 1
    assert "PLAN  excise" in r.out and "bytes [219, 438)" in r.out and "offsets 3..5, 3 records lost" in r.out
    assert "dry run, nothing changed" in r.out
    r = kl("verify", "--repair", "--backup-dir", root.parent / "b", root)
    assert r.code == 0 and "DONE  excise" in r.out and "kltool restore" in r.out
    r = kl("verify", "--repair", "--dry-run", root)
    assert r.code == 0 and "nothing to do" in r.out


def test_single_segment_file(kl, logs, backup):
    root = logs("java-oracle/v2-multi-segment-0")
    part = root / "v2-multi-segment-0"
    for name in ("00000000000000000400.log", "00000000000000000800.log"):
        with open(part / name, "ab") as f:
            f.write(bytes(100))
    r = kl("--json", "verify", "--repair", "--backup-dir", backup, part / "00000000000000000400.log")
    assert r.code == 0, r
    files = {Path(o["file"]).name for o in r.json() if o["type"] == "action"}
    assert files == {"00000000000000000400.log", "00000000000000000400.index", "00000000000000000400.timeindex"}
    assert (part / "00000000000000000800.log").stat().st_size % 2 == 0  # untouched
    assert kl("verify", part / "00000000000000000800.log").code == 1


def test_library_api(logs):
    from kltool.storage import open_paths
    from kltool.storage.change.repair import plan_repair

    root = logs("java-oracle/damaged-v2-crc-0")
    plan = plan_repair(open_paths([root]))
    ops = [a.op for a in plan.actions]
    assert ops == ["rebuild_index", "excise", "rebuild_index"]  # .timeindex, the log, .index last
    j = plan.actions[1].to_json()
    assert j["type"] == "action" and j["applied"] is False and j["ranges"][0]["start"] == 219
    assert plan.actions[1].records_lost == 3


def test_unrepairable_problems_are_reported(kl, william, tmp_path):
    (william / "lost+found").mkdir()
    r = kl("--json", "verify", "--repair", "--dry-run", william)
    assert r.code == 1
    (f,) = [o for o in r.json() if o["type"] == "finding"]
    assert f["kind"] == "unknown_dir"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_files_keep_the_brokers_owner_and_mode(kl, logs, backup):
    root = logs("java-oracle/damaged-v2-crc-0")
    part = root / "damaged-v2-crc-0"
    for p in [part, *part.iterdir()]:
        os.chown(p, 4321, 4322)
    (part / SEG0).chmod(0o640)
    r = kl("--json", "verify", "--repair", "--backup-dir", backup, root)
    assert r.code == 0, r
    for name in (SEG0, "00000000000000000000.index", "00000000000000000000.timeindex"):
        st = (part / name).stat()
        assert (st.st_uid, st.st_gid) == (4321, 4322), name
    assert (part / SEG0).stat().st_mode & 0o777 == 0o640
    (m,) = r.json()[-1]["manifests"]
    assert kl("restore", m).code == 0
    st = (part / SEG0).stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (4321, 4322, 0o640)


def test_backups_are_never_repaired(kl, logs, tmp_path):
    """A path holding both a log dir and its backup: the backup's copies are left alone."""
    root = logs("java-oracle/damaged-v2-torn-payload-0")
    r = kl("verify", "--repair", root)  # default backup: tmp_path/logs.kltool-backup
    assert r.code == 0, r
    shutil.copytree(REAL / "william0423-indexed-zk" / "debug_topic-0", tmp_path / "logs.kltool-backup" / "x-0")
    with open(tmp_path / "logs.kltool-backup" / "x-0" / SEG0, "ab") as f:
        f.write(bytes(50))
    before = tree(tmp_path / "logs.kltool-backup")
    r = kl("--json", "verify", "--repair", "--dry-run", tmp_path)
    assert [o for o in r.json() if o["type"] == "action"] == []
    assert {o["kind"] for o in r.json() if o["type"] == "finding"} == {"skipped"}
    r = kl("verify", "--repair", tmp_path / "logs.kltool-backup")
    assert r.code == 2 and "backup" in r.err
    assert tree(tmp_path / "logs.kltool-backup") == before


def test_like_broker_counts_the_later_segments_it_deletes(kl, logs):
    """A --like-broker plan's loss includes every record of the segments it deletes after the truncation,
    not only the truncated batches; the default plan loses only the damaged batch."""
    root = logs("java-oracle/v2-multi-segment-0")
    part = root / "v2-multi-segment-0"
    log = part / "00000000000000000400.log"
    hs = batches_of(log)
    data = bytearray(log.read_bytes())
    data[hs[5].position + 40] ^= 0xFF  # inside the CRC-covered part: one damaged batch
    log.write_bytes(bytes(data))
    later = [h for p in sorted(part.glob("*.log")) if p.name > log.name for h in batches_of(p)]
    assert later
    truncated = sum(h.count for h in hs[5:])
    r = kl("--json", "verify", "--repair", "--like-broker", "--dry-run", root)
    (summary,) = [o for o in r.json() if o["type"] == "summary"]
    assert summary["records_lost"] == truncated + sum(h.count for h in later)
    gone = [o for o in r.json() if o["type"] == "action" and o["op"] == "quarantine" and o["file"].endswith(".log")]
    assert sum(o["records_lost"] for o in gone) == sum(h.count for h in later)
    assert gone[0]["first_offset"] == later[0].base_offset
    text = kl("verify", "--repair", "--like-broker", "--dry-run", root).out
    assert f"{truncated + sum(h.count for h in later)} record(s) would be cut" in text
    d = kl("--json", "verify", "--repair", "--dry-run", root)
    (s2,) = [o for o in d.json() if o["type"] == "summary"]
    assert s2["records_lost"] == hs[5].count


def test_log_start_checkpoint_past_the_end_of_an_empty_log_is_removed(kl, william, tmp_path):
    """A log start offset past the end of a partition whose log end is its first segment's base: the entry
    goes (Kafka 4.4 writes log-start-offset-checkpoint entries only above the first segment's base)."""
    empty = sorted(d for d in william.iterdir() if d.is_dir() and d.name.startswith("debug_topic") is False
                   and (d / "00000000000000000000.log").exists()
                   and (d / "00000000000000000000.log").stat().st_size == 0)[0]
    topic, part = empty.name.rsplit("-", 1)
    cp = william / "log-start-offset-checkpoint"
    cp.write_text(f"0\n2\ndebug_topic 0 77\n{topic} {part} 9\n")
    check_repair(kl, william, empty, tmp_path / "backup", check=lambda: cp.read_text() == "0\n1\ndebug_topic 0 77\n")


def test_a_partition_dir_alone_checks_and_repairs_only_its_own_root_checkpoint_entries(kl, william, tmp_path):
    """`verify PARTITION_DIR` looks at the partition's own entries in its parent log dir's offset checkpoints
    (a bad log start offset was unseen unless the whole log dir was given); `--repair` on the partition dir
    changes that partition's entries only."""
    cp = william / "log-start-offset-checkpoint"
    cp.write_text("0\n2\ndebug_topic 0 77\n__consumer_offsets 28 9999\n")
    rp = william / "recovery-point-offset-checkpoint"
    rp.write_text(rp.read_text().replace("debug_topic 0 40", "debug_topic 0 55"))
    assert "debug_topic 0 55" in rp.read_text()
    v = kl("--json", "verify", william / "debug_topic-0")
    assert v.code == 1
    found = sorted((Path(f["file"]).name, f["offset"]) for f in v.json() if f["type"] == "finding")
    assert found == [("log-start-offset-checkpoint", 77), ("recovery-point-offset-checkpoint", 55)]
    other = kl("--json", "verify", william / "__consumer_offsets-28")
    assert [(Path(f["file"]).name, f["offset"]) for f in other.json() if f["type"] == "finding"] == [
        ("log-start-offset-checkpoint", 9999)]
    assert kl("verify", william / "test_topic-0").code == 0  # no bad entry of its own

    def check():
        assert cp.read_text() == "0\n1\n__consumer_offsets 28 9999\n"  # the other partition's line is kept
        assert "debug_topic 0 40" in rp.read_text().splitlines()

    check_repair(kl, william, william / "debug_topic-0", tmp_path / "backup", check=check)
