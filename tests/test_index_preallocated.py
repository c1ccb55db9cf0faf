"""The active segment's preallocated index, judged as Kafka 4.4 judges it (issue 19; tests/broker pins it
against a real broker).

The broker preallocates the active segment's .index/.timeindex (zeros after the real entries) and trims them
when it closes the segment. A log dir without .kafka_cleanshutdown, and the KRaft metadata log at every start,
is recovered from the recovery point: the active segment's indexes are rebuilt from the log, so their zero tail
is nothing to report beyond a note. After a clean shutdown the broker opens the files as they are (every whole
entry counts, the zeros too): there the zero tail stays an error.
"""

from __future__ import annotations

import pytest

from kltool.format import index as fidx

from .conftest import run_kltool


def _logdir(tmp_path, topic="t"):
    ld = tmp_path / "ld"
    assert run_kltool("create", ld, topic, "--partitions", "1").code == 0
    for i in range(6):
        res = run_kltool("append", ld, topic, "-p", "0", "--key", f"k{i}", "--value", "v" * 300,
                         "--timestamp", str(1_700_000_000_000 + i))
        assert res.code == 0, res
    (ld / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=x\n")
    return ld


def _preallocate(pdir, zero_first=False):
    ti = pdir / "00000000000000000000.timeindex"
    ix = pdir / "00000000000000000000.index"
    real_ti = b"" if zero_first else ti.read_bytes()
    ti.write_bytes(real_ti + bytes(fidx.TIME_ENTRY * 500))
    ix.write_bytes((b"" if zero_first else ix.read_bytes()) + bytes(fidx.OFFSET_ENTRY * 500))
    return ti


def _findings(res):
    return [r for r in res.json() if r["type"] in ("finding", "note")]


@pytest.mark.parametrize("zero_first", [False, True])
def test_unclean_shutdown_zero_tail_is_a_note(tmp_path, zero_first):
    ld = _logdir(tmp_path)
    ti = _preallocate(ld / "t-0", zero_first)
    assert fidx.time_index_entries(ti.read_bytes(), 0) or zero_first
    res = run_kltool("--json", "verify", ld)
    assert res.code == 0, res
    found = _findings(res)
    assert [f["type"] for f in found] == ["note", "note"], found
    assert {f["kind"] for f in found} == {"index_preallocated"}
    assert run_kltool("verify", "--strict", ld).code == 0  # a note is no warning


def test_clean_shutdown_zero_tail_stays_an_error(tmp_path):
    """The broker opens it as it is: the last entry (timestamp 0) becomes the segment's max timestamp."""
    ld = _logdir(tmp_path)
    _preallocate(ld / "t-0")
    (ld / ".kafka_cleanshutdown").write_text("")
    res = run_kltool("--json", "verify", ld)
    assert res.code == 1, res
    assert "index_corrupt" in {f["kind"] for f in _findings(res) if f.get("severity") == "error"}


def test_not_a_log_dir_root_stays_an_error(tmp_path):
    """Without meta.properties kltool cannot tell whether the broker recovers the partition: as before."""
    ld = _logdir(tmp_path)
    (ld / "meta.properties").unlink()
    _preallocate(ld / "t-0")
    res = run_kltool("--json", "verify", ld)
    assert res.code == 1, res


def test_metadata_log_all_zero_index_is_a_note(tmp_path):
    """Kafka 4.4 opens __cluster_metadata-0 with lastShutdownClean=false: recovered at every start, a clean
    shutdown marker or not; its active indexes stay preallocated after a SIGTERM."""
    ld = _logdir(tmp_path)
    (ld / ".kafka_cleanshutdown").write_text("")
    _preallocate(ld / "t-0", zero_first=True)
    (ld / "t-0").rename(ld / "__cluster_metadata-0")
    res = run_kltool("--json", "verify", ld / "__cluster_metadata-0")
    assert res.code == 0, res
    assert {f["kind"] for f in _findings(res)} == {"index_preallocated"}
