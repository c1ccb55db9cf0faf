"""Issue 10: one vocabulary, output that never misleads, Kafka tool habits."""

from __future__ import annotations

import json

import pytest

from .conftest import FIXTURES

SAMPLE = FIXTURES / "sample-logdir"


# -- global options before and after the subcommand ---------------------------------------------

@pytest.mark.parametrize("where", ["before", "after", "end"])
def test_json_flag_before_or_after_subcommand(kl, where):
    args = {"before": ["--json", "verify", SAMPLE], "after": ["verify", "--json", SAMPLE],
            "end": ["verify", SAMPLE, "--json"]}[where]
    r = kl(*args)
    assert r.code == 0, r
    lines = [json.loads(x) for x in r.out.splitlines()]
    assert lines[-1]["type"] == "summary"


def test_quiet_after_subcommand_silences_info(kl, tmp_path):
    loud = kl("verify", FIXTURES / "java-oracle" / "damaged-v2-crc-0")
    assert "next:" in loud.err
    quiet = kl("verify", "-q", FIXTURES / "java-oracle" / "damaged-v2-crc-0")
    assert quiet.code == 1 and "next:" not in quiet.err
    quiet2 = kl("verify", FIXTURES / "java-oracle" / "damaged-v2-crc-0", "--quiet", "--no-color")
    assert quiet2.code == 1 and "next:" not in quiet2.err


@pytest.mark.parametrize("name", ["info", "dump", "verify", "offsets", "retention", "rebuild-index", "restore",
                                  "create", "append"])
def test_every_subcommand_takes_global_options(kl, name):
    r = kl(name, "--help")
    assert r.code == 0
    assert "--json" in r.out and "--quiet" in r.out and "--no-color" in r.out
