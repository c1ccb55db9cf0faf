"""Issue 18's smaller habits: an empty --from/--to range is an error that says why, a bare time that
looks like seconds gets a warning, a damaged file repair cannot take is said (exit 1), a repair counts the
records a damaged range's offsets span, the lock message names the lock once."""

from __future__ import annotations

import shutil

import pytest

from .conftest import ORACLE

TXN = ORACLE / "v2-txn-0"


@pytest.mark.parametrize("args,words", [
    (["--from-offset", "50", "--to-offset", "10"], ["--to-offset 10", "--from-offset 50"]),
    (["--records", "--from-offset", "7", "--to-offset", "6"], ["--to-offset 6", "--from-offset 7"]),
    (["--from-time", "2024-01-02", "--to-time", "2024-01-01"], ["--to-time", "--from-time"]),
])
def test_dump_empty_range_is_an_error(kl, args, words):
    r = kl("dump", *args, TXN)
    assert r.code == 2 and r.out == "", r
    assert len(r.err.splitlines()) == 1
    for w in words:
        assert w in r.err


def test_dump_single_offset_range_still_works(kl):
    r = kl("dump", "--records", "--from-offset", "7", "--to-offset", "7", TXN)
    assert r.code == 0 and "offset: 7 " in r.out


@pytest.mark.parametrize("cmd", [
    ["dump", "--from-time", "1700006400", str(TXN)],
    ["dump", "--to-time", "1700006400", str(TXN)],
    ["offsets", "--time", "1700006400", str(TXN)],
    ["retention", "--dry-run", "--before-time", "1700006400", str(TXN)],
])
def test_seconds_given_as_a_time_get_a_warning(kl, cmd):
    r = kl(*cmd)
    assert r.code in (0, 1), r
    warn = [ln for ln in r.err.splitlines() if ln.startswith("kltool: warning: time 1700006400")]
    assert warn and "milliseconds" in warn[0] and "1700006400000" in warn[0] and "2023-11-15T00:00:00" in warn[0], r.err


@pytest.mark.parametrize("value", ["1700006400000", "2023-11-15T00:00:00Z", "0", "-1", "now"])
def test_no_warning_for_milliseconds_iso_or_zero(kl, value):
    r = kl("dump", "--from-time", value, TXN) if value != "-1" else kl("offsets", "--time", value, TXN)
    assert "warning: time" not in r.err, r.err


def test_repair_of_a_loose_damaged_file_says_what_to_do(kl, tmp_path):
    f = tmp_path / "damaged.log"
    shutil.copy(ORACLE / "damaged-v2-crc-0" / "00000000000000000000.log", f)
    before = f.read_bytes()
    assert kl("verify", f).code == 1
    for dry in ([], ["--dry-run"]):
        r = kl("verify", "--repair", *dry, f)
        assert r.code == 1, r
        assert "not_repairable" in r.out and "fix/t-0/00000000000000000000.log" in r.out, r.out
        assert "nothing to do" not in r.out or "not repairable" in r.out
    j = kl("--json", "verify", "--repair", "--dry-run", f)
    assert j.code == 1 and j.json()[-1]["errors"] == 1
    assert f.read_bytes() == before
    ok = tmp_path / "clean.log"
    shutil.copy(TXN / "00000000000000000000.log", ok)
    assert kl("verify", "--repair", ok).code == 0  # a clean file it skips: nothing to say but the skip


def test_repair_summary_counts_records_of_a_damaged_range(kl, tmp_path):
    """A range whose batches cannot be read but whose offsets the batches around it give (30..49): its
    records count, not "0 record(s) cut" beside "offsets 30..49 lost"."""
    ld = tmp_path / "ld"
    assert kl("create", ld, "t", "--partitions", "1").code == 0
    lines = "".join(f'{{"key":"k{i}","value":"v{i}","timestamp":{1700000000000 + i}}}\n' for i in range(80))
    assert kl("append", ld, "t", "--batch-records", "10", "--compression", "lz4", stdin=lines).code == 0
    log = ld / "t-0" / "00000000000000000000.log"
    batches = [o for o in kl("--json", "dump", log).json() if o["type"] == "batch"]
    start = batches[3]["position"] + 70
    with open(log, "r+b") as fh:
        fh.seek(start)
        fh.write(b"Z" * (batches[4]["position"] + 30 - start))  # batch 30..39 and the header of 40..49
    r = kl("verify", "--repair", "--dry-run", ld)
    assert "offsets 30..49 lost" in r.out, r.out
    assert "20 record(s) would be cut" in r.out, r.out
    j = kl("--json", "verify", "--repair", "--dry-run", ld)
    s = j.json()[-1]
    assert s["records_lost"] == 20 and s["ranges_with_unknown_records"] == 0, s
