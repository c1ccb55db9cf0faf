"""One finding type (storage/findings.py) for verify, repair, retention and dump: the same class and
the same JSON object (docs/json-lines.md) from every command."""

from __future__ import annotations

import pytest

from kltool.storage import findings
from kltool.storage.change import repair, retention
from kltool.storage.check import verify
from kltool.storage.findings import Finding

from .conftest import ORACLE
from .test_retention import WEEK
from .test_retention_append import DAY, T0, make

KEYS = {"type", "severity", "kind", "file", "message", "position", "offset", "length"}


def test_verify_repair_and_retention_share_one_type():
    assert verify.Finding is repair.Problem is retention.Finding is findings.Finding


def test_json_and_text_forms():
    f = Finding("error", "crc_mismatch", "a/0.log", "bad", position=12, offset=3, length=70)
    assert f.to_json() == {"type": "finding", "severity": "error", "kind": "crc_mismatch", "file": "a/0.log",
                           "message": "bad", "position": 12, "offset": 3, "length": 70}
    assert f.line() == "ERROR   crc_mismatch         a/0.log:12 offset 3: bad"
    assert Finding("info", "compacted", "ld", "left alone").to_json() == \
        {"type": "note", "kind": "compacted", "file": "ld", "message": "left alone"}
    with pytest.raises(ValueError):
        Finding("fatal", "x", "f", "m")


def _findings(r):
    return [o for o in r.json() if o["type"] == "finding"]


def test_every_command_writes_the_same_finding_object(kl, tmp_path, copy_fixture):
    deleted = copy_fixture("java-oracle/v2-none-0", "ld2/v2-none-0.0123456789abcdef0123456789abcdef-delete")
    got = {
        "verify": _findings(kl("--json", "verify", ORACLE / "damaged-v2-crc-0")),
        "dump": _findings(kl("--json", "dump", ORACLE / "damaged-v2-torn-payload-0")),
        "repair": _findings(kl("--json", "verify", "--repair", "--dry-run", deleted)),
    }
    ld = tmp_path / "ld"
    make(kl, ld, ts=lambda i: T0 + 40 * DAY if i == 15 else T0 + i)
    got["retention"] = _findings(kl("--json", "retention", ld, *WEEK, "--now", T0 + 20 * DAY, "--dry-run"))
    for cmd, fs in got.items():
        assert fs, cmd
        for f in fs:
            assert set(f) == KEYS, (cmd, f)
            assert f["severity"] in ("error", "warning") and f["kind"] and f["message"], (cmd, f)
