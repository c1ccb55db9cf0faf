"""kltool verify: every finding kind it can emit, each produced from a real file here or named in another
test module; and verify and repair judge indexes with the one checker (storage/check/index_check.py)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from kltool.format import build_batch
from kltool.format.batch import batch_crc

ROOT = Path(__file__).resolve().parents[1]
TS = 1_700_000_000_000


def _batch(base: int, n: int = 3, ts: int = TS) -> bytes:
    return build_batch([(i, ts + i, f"k{base + i}".encode(), b"v" * 40, []) for i in range(n)], base_offset=base)


def _recrc(b: bytearray, pos: int = 0) -> None:
    size = struct.unpack_from(">i", b, pos + 8)[0] + 12
    struct.pack_into(">I", b, pos + 17, batch_crc(b, pos, size))


def _part(tmp_path: Path, log: bytes, name: str = "t-0") -> Path:
    d = tmp_path / "logs" / name
    d.mkdir(parents=True)
    (d / "00000000000000000000.log").write_bytes(log)
    return d


def _kinds(kl, *args) -> set[str]:
    r = kl("--json", "verify", *args)
    assert r.code in (0, 1), r
    return {o["kind"] for o in r.json() if o["type"] == "finding"}


def test_invalid_batch_negative_last_offset_delta(kl, tmp_path):
    b = bytearray(_batch(0))
    struct.pack_into(">i", b, 23, -2)  # lastOffsetDelta: CRC-covered, so recompute the CRC
    _recrc(b)
    d = _part(tmp_path, bytes(b))
    assert "invalid_batch" in _kinds(kl, d)


def test_record_corrupt_only_with_deep(kl, tmp_path):
    b = bytearray(_batch(0))
    b[-30:] = b"\xff" * 30  # varints that run past the batch, with a valid CRC
    _recrc(b)
    d = _part(tmp_path, bytes(b))
    assert "record_corrupt" not in _kinds(kl, d)
    assert "record_corrupt" in _kinds(kl, "--deep", d)


def test_invalid_size_field(kl, tmp_path):
    good = _batch(0)
    bad = bytearray(_batch(3))
    struct.pack_into(">i", bad, 8, 5)  # a batch length no batch can have
    d = _part(tmp_path, good + bytes(bad) + _batch(6))
    r = kl("--json", "verify", d)
    (f,) = [o for o in r.json() if o["type"] == "finding" and o["severity"] == "error"]
    assert (f["kind"], f["position"]) == ("invalid_size", len(good))
    assert "resume at byte" in f["message"]


def test_time_index_mismatch(kl, tmp_path):
    log = _batch(0) + _batch(3, ts=TS + 100)
    d = _part(tmp_path, log)
    assert kl("rebuild-index", "--backup-dir", tmp_path / "bk", d).code == 0
    ti = d / "00000000000000000000.timeindex"
    ts, off = struct.unpack(">qi", ti.read_bytes()[-12:])
    ti.write_bytes(ti.read_bytes()[:-12] + struct.pack(">qi", ts + 1, off))
    assert "time_index_mismatch" in _kinds(kl, d)


def test_time_index_order_and_index_corrupt_from_the_one_checker(kl, tmp_path):
    from kltool.storage.check.index_check import IndexChecker

    d = _part(tmp_path, _batch(0) + _batch(3, ts=TS + 100))
    (d / "00000000000000000000.timeindex").write_bytes(struct.pack(">qiqi", TS + 5, 2, TS + 4, 5))
    (d / "00000000000000000000.index").write_bytes(struct.pack(">ii", 3, 10 ** 6) + b"abc")
    kinds = _kinds(kl, d)
    assert {"time_index_order", "index_corrupt"} <= kinds
    ic = IndexChecker(0, d / "00000000000000000000.index", d / "00000000000000000000.timeindex",
                      log_size=(d / "00000000000000000000.log").stat().st_size)
    assert ic.index_problems and ic.time_problems  # what repair reads: the same judgement
    plan = kl("--json", "verify", "--repair", "--dry-run", d)
    rebuilt = {Path(o["file"]).suffix for o in plan.json() if o["type"] == "action" and o["op"] == "rebuild_index"}
    assert rebuilt == {".index", ".timeindex"}


def test_offset_overflow_is_a_warning(kl, tmp_path):
    d = _part(tmp_path, _batch(0) + _batch(2**31 + 10))
    r = kl("--json", "verify", d)
    (f,) = [o for o in r.json() if o["type"] == "finding" and o["kind"] == "offset_overflow"]
    assert f["severity"] == "warning" and f["offset"] == 2**31 + 12


def test_checkpoint_corrupt(kl, tmp_path):
    d = _part(tmp_path, _batch(0))
    (d / "leader-epoch-checkpoint").write_text("0\n2\n5 0\n")  # says 2 entries, holds 1
    assert "checkpoint_corrupt" in _kinds(kl, d)


def test_unknown_and_temp_files(kl, tmp_path):
    d = _part(tmp_path, _batch(0))
    (d / "notes.txt").write_text("hello")
    (d / "00000000000000000000.log.kltool-tmp").write_bytes(b"partial")
    kinds = _kinds(kl, d)
    assert {"unknown_file", "stale_file"} <= kinds


def _verify_kinds() -> set[str]:
    """Every finding kind verify can emit, read from its sources."""
    src = "".join((ROOT / "kltool" / "storage" / f).read_text()
                  for f in ("check/verify.py", "check/index_check.py", "scan.py", "epochs.py", "logdir.py"))
    kinds = set(re.findall(r'_(?:err|warn)\(\s*"([a-z_]+)"', src))
    kinds |= set(re.findall(r'Finding\(\s*"(?:error|warning)",\s*"([a-z_]+)"', src))
    kinds |= set(re.findall(r'Damage\([^)]*?"([a-z_]+)"', src))
    kinds |= set(re.findall(r'_CORRUPT_KIND\.get\([^)]*"([a-z_]+)"\)', src))
    kinds |= {"time_index_order", "missing_time_index", "torn_tail", "zero_run", "bad_magic", "garbage",
              "invalid_size", "record_corrupt", "record_too_large"}
    return kinds


def test_every_finding_kind_verify_emits_is_named_in_a_test():
    kinds = _verify_kinds()
    tests = "".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py") if p.name != "test_verify.py")
    tests += Path(__file__).read_text().split("def test_every_finding_kind")[0]
    missing = sorted(k for k in kinds if f'"{k}"' not in tests)
    assert len(kinds) >= 25, kinds
    assert not missing, f"finding kinds no test names: {missing}"


def test_the_man_page_names_every_finding_kind():
    man = (ROOT / "man" / "kltool-verify.1").read_text().replace("\\-", "-")
    missing = sorted(k for k in _verify_kinds() if k not in man)
    assert not missing, f"kinds man/kltool-verify.1 does not name: {missing}"
