"""The log's last batch with a damaged offset field (not covered by the CRC) below the log so far: repair
restores the field (the previous batch's last offset + 1, the segment's name for a segment's only batch, the
.index entry at its position when there is one) rather than cutting an intact batch. Kafka's recovery takes the
log end offset from that batch (a field of 0 after offset 4 makes the broker hand out offsets 1.. again); a copy
of an earlier batch is still cut. (Adversary campaign seed 303, runs 36 and 39.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .conftest import run_kltool

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "real"


def _copy(src: Path, tmp_path: Path) -> Path:
    part = tmp_path / "kafka-logs" / src.name
    shutil.copytree(src, part)
    for p in part.iterdir():
        p.chmod(0o644)
    return part


def _set_offset(log: Path, at: int, value: int, tail: bytes = b"") -> None:
    b = bytearray(log.read_bytes())
    b[at:at + 8] = value.to_bytes(8, "big", signed=True)
    log.write_bytes(bytes(b) + tail)


def _offsets(part: Path) -> list[int]:
    return [x["offset"] for x in run_kltool("--json", "dump", "--records", part).json() if x["type"] == "record"]


def _repair(part: Path, backup: Path) -> list[tuple]:
    before = {p.name: p.read_bytes() for p in part.iterdir()}
    r = run_kltool("--json", "verify", "--repair", "--backup-dir", backup, part)
    assert r.code == 0, r
    errs = [x for x in run_kltool("--json", "verify", part).json() if x["type"] == "finding"
            and x["severity"] == "error"]
    assert errs == []
    assert run_kltool("verify", "--repair", "--dry-run", part).code == 0
    acts = [(a["op"], a.get("reason", "")) for a in r.json() if a["type"] == "action"]
    after = {p.name: p.read_bytes() for p in part.iterdir()}
    (manifest,) = backup.rglob("manifest.json")
    assert run_kltool("restore", manifest).code == 0
    assert {p.name: p.read_bytes() for p in part.iterdir()} == before
    for name, data in after.items():
        (part / name).write_bytes(data)
    return acts


@pytest.mark.parametrize("value", [0, 1, 2])
def test_a_v1_wrapper_last_batch_offset_field_below_the_log_is_restored(tmp_path, value):
    part = _copy(FIX / "kafka-go-fetch/v1c-v1-v1c/test-breezy-0", tmp_path)
    want = _offsets(part)
    _set_offset(part / "00000000000000000000.log", 386, value)  # the last gzip wrapper: 5 -> value
    acts = _repair(part, tmp_path / "bk")
    assert [op for op, _r in acts if op in ("truncate", "excise")] == []
    assert any(op == "fix_field" and "fix it at 5: restored" in why for op, why in acts), acts
    assert _offsets(part) == want


@pytest.mark.parametrize("tail", [b"", b"\x00" * 17, bytes(range(17))])
def test_a_single_batch_segment_with_a_negative_base_offset_is_restored_at_its_name(tmp_path, tail):
    part = _copy(FIX / "connect-spooldir-2019-zk/_confluent-command-0", tmp_path)
    want = _offsets(part)
    _set_offset(part / "00000000000000000000.log", 0, -1, tail)
    acts = _repair(part, tmp_path / "bk")
    assert [op for op, _r in acts if op == "excise" or (op == "truncate" and "[0," in _r)] == []
    assert any(op == "fix_field" for op, _r in acts), acts
    assert _offsets(part) == want


def test_a_last_batch_copying_an_earlier_one_is_still_cut(tmp_path):
    part = _copy(FIX / "kafka-go-fetch/v1c-v1-v1c/test-breezy-0", tmp_path)
    log = part / "00000000000000000000.log"
    b = log.read_bytes()
    want = _offsets(part)
    log.write_bytes(b + b[133:205])  # the message at offset 2 written again at the end
    acts = _repair(part, tmp_path / "bk")
    assert any(op == "truncate" for op, _r in acts), acts
    assert not any(op == "fix_field" for op, _r in acts), acts
    assert _offsets(part) == want
