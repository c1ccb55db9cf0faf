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


# -- a selection that selects nothing is an error ---------------------------------------------

@pytest.mark.parametrize("name", ["verify", "offsets", "info", "retention", "dump", "rebuild-index"])
def test_topic_filter_matching_nothing_is_exit_2(kl, name):
    args = [name, "--topic", "nomatch*", SAMPLE]
    if name in ("retention", "rebuild-index"):
        args.insert(1, "--dry-run")
    r = kl(*args)
    assert r.code == 2, r
    err = [ln for ln in r.err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--topic 'nomatch*'" in err[0] and "lsx1" in err[0], r.err
    assert r.out == ""


@pytest.mark.parametrize("name", ["verify", "offsets", "info", "dump"])
def test_partition_filter_matching_nothing_is_exit_2(kl, name):
    r = kl(name, "--topic", "lsx*", "--partition", "7", SAMPLE)
    assert r.code == 2, r
    assert "--partition 7" in r.err and "partitions there: 0" in r.err
    r = kl(name, "-p", "3-4", SAMPLE / "lsx1-0")
    assert r.code == 2 and "--partition 3-4" in r.err


def test_verify_repair_with_empty_selection_is_exit_2(kl):
    r = kl("verify", "--repair", "--dry-run", "--topic", "typo", SAMPLE)
    assert r.code == 2 and "--topic 'typo'" in r.err


@pytest.mark.parametrize("spec", ["a-b", "x", "-3", "5-2", ","])
def test_bad_partition_spec_is_usage_error(kl, spec):
    r = kl("verify", "--partition", spec, SAMPLE)
    assert r.code == 2 and "partition numbers" in r.err and "internal" not in r.err


def test_short_p_selects_partitions_everywhere(kl):
    r = kl("--json", "info", "-p", "0", "--topic", "lsx1", SAMPLE)
    parts = [d for d in r.json() if d["type"] == "partition"]
    assert [(d["topic"], d["partition"]) for d in parts] == [("lsx1", 0)]


def test_create_short_p_still_counts_with_a_hint(kl, tmp_path):
    r = kl("create", tmp_path / "ld", "t", "-p", "2")
    assert r.code == 0 and "--partitions" in r.err
    assert (tmp_path / "ld" / "t-1").is_dir()
    r = kl("create", tmp_path / "ld", "u")
    assert r.code == 2 and "--partitions" in r.err
