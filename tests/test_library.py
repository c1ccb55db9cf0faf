"""The library API: dir(kltool), typed errors, kltool.Logs (verify, repair, retention, records, append
with their locking), and the README's Python examples, run as written."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import kltool
from kltool.errors import BrokerLockHeld, KltoolError, PathNotFound, UsageError

from .conftest import ROOT


def test_dir_lists_the_api_and_every_name_resolves():
    names = dir(kltool)
    for name in ("Logs", "verify", "repair", "retention", "open_path", "open_log_dir", "KltoolError", "PathNotFound", "records", "Appender",
                 "create_topic", "decode_records", "Segment"):
        assert name in names and name in kltool.__all__, name
    for name in kltool.__all__:
        assert getattr(kltool, name) is not None, name
    with pytest.raises(AttributeError):
        kltool.no_such_thing  # noqa: B018


def test_import_kltool_loads_nothing_heavy():
    code = "import sys, kltool; print(sorted(m for m in sys.modules if m.startswith('kltool')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['kltool']"


@pytest.mark.parametrize("opener", ["open_path", "open_log_dir", "open_partition", "Logs"])
def test_a_missing_path_is_a_kltool_error(opener, tmp_path):
    missing = tmp_path / "nonexistent"
    with pytest.raises(PathNotFound) as e:
        getattr(kltool, opener)(missing)
    assert isinstance(e.value, KltoolError) and isinstance(e.value, UsageError)
    assert isinstance(e.value, FileNotFoundError) and e.value.filename == str(missing)
    assert str(e.value) == f"{missing}: no such file or directory" and e.value.exit_code == 2


def test_logs_verify_repair_and_records(copy_fixture):
    ld = copy_fixture("java-oracle/damaged-v2-crc-0", "ld/damaged-v2-crc-0").parent
    logs = kltool.Logs(ld)
    report = logs.verify()
    assert not report.clean and {f.kind for f in report.errors} == {"crc_mismatch"}
    before = [r.offset for r in logs.records()]
    assert logs.repair(dry_run=True).plan.actions and not logs.verify().clean  # a plan changes nothing
    assert not kltool.verify(ld).clean and kltool.repair(ld).plan.actions  # the one-call forms
    result = logs.repair(dry_run=False)
    assert result.manifests and logs.verify().clean and kltool.verify(ld, deep=True).clean
    assert [r.offset for r in logs.records()] == before  # only the damaged batch's records were unreadable


def test_logs_append_then_records_and_retention(tmp_path):
    kltool.create_topic(tmp_path, "t", 2)
    logs = kltool.Logs(tmp_path)
    res = logs.append("t", [{"key": "k", "value": "v1", "timestamp": 1000, "partition": 1},
                            {"key": b"k", "value": b"v2", "headers": [("h", "x")], "timestamp": 2000,
                             "partition": 1}], compression="lz4")
    assert res.records == 2
    got = [(r.partition, r.offset, r.key, r.value, r.headers) for r in logs.records(topic="t")]
    assert got == [(1, 0, b"k", b"v1", []), (1, 1, b"k", b"v2", [(b"h", b"x")])]
    assert [r.offset for r in logs.records(from_time=1500)] == [1]
    plan = logs.retention(retention_ms=1000, now=5000)
    assert plan.has_work and [r.offset for r in logs.records()] == [0, 1]  # dry run by default
    logs.retention(retention_ms=1000, now=5000, dry_run=False)  # all expired: the broker rolls an empty segment
    assert [r.offset for r in logs.records()] == [] and logs.partition("t", 1).log_end_offset() == 2
    with pytest.raises(UsageError, match="AppendOptions|unexpected keyword"):
        logs.append("t", [("k", "v")], no_such_option=1)
    with pytest.raises(UsageError, match="record 2: expected a dict"):
        logs.append("t", [("k", "v"), "just text"])
    with pytest.raises(UsageError, match="no partition t-7"):
        logs.partition("t", 7)
    assert logs.partition("t", 1).log_end_offset() == 2  # nothing was written by the refused appends


def test_retention_locks_like_repair_and_append(tmp_path):
    kltool.create_topic(tmp_path, "t", 1)
    logs = kltool.Logs(tmp_path)
    logs.append("t", [{"key": "k", "value": "v", "timestamp": 1000}] * 3)
    from .test_repair import _hold_lock

    holder = _hold_lock(tmp_path / ".lock")  # as a live broker does
    try:
        assert logs.retention(retention_ms=0).has_work  # planning only reads
        for write in (lambda: logs.retention(retention_ms=0, dry_run=False),
                      lambda: logs.repair(dry_run=False),
                      lambda: logs.append("t", [("k", "v")])):
            with pytest.raises(BrokerLockHeld):
                write()
        assert [r.offset for r in logs.records()] == [0, 1, 2]
    finally:
        holder.kill()
        holder.wait()


def _readme_python_blocks():
    text = (ROOT / "README.md").read_text()
    return [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "kltool.Logs" in b]


def test_readme_library_examples_run_as_written(monkeypatch, capsys):
    blocks = _readme_python_blocks()
    assert len(blocks) >= 2
    monkeypatch.chdir(ROOT)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
        out = capsys.readouterr().out
        want = [m.group(1) for m in re.finditer(r"^\s*print\(.*\)\s+# (.+)$", block, re.M)]
        assert want and out.splitlines() == want  # each print's comment is exactly what it prints
