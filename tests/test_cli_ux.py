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


# -- tables never lose columns ----------------------------------------------------------------

REAL_ZK = FIXTURES / "real" / "william0423-indexed-zk"


@pytest.mark.parametrize("cols", [None, "60", "80", "100"])
def test_info_never_cuts_numbers_or_names(kl, monkeypatch, cols):
    if cols is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", cols)
    r = kl("info", REAL_ZK)
    assert r.code == 0
    for must in ("__consumer_offsets", "debug_topic", "8202", "1.0 MiB", "883 B", "2018-08-15T02:16:29.611Z",
                 "2018-08-15T05:57:03.113Z", "2018-08-15T02:41:44.976Z"):
        assert must in r.out, (cols, must, r.out)
    assert "…" not in r.out
    if cols is not None:
        assert all(len(ln) <= int(cols) for ln in r.out.splitlines()[1:-1]), r.out


@pytest.mark.parametrize("cols", ["60", "80", "100", "200"])
def test_retention_preview_keeps_every_column(kl, monkeypatch, tmp_path, cols):
    from .test_retention_build import T0, H, build_partition

    ld = tmp_path / "ld"
    build_partition(ld, "orders.events.v2", [[[T0, T0 + H]], [[T0 + 2 * H]], [[T0 + 3 * H]], [[T0 + 4 * H]]])
    monkeypatch.setenv("COLUMNS", cols)
    r = kl("retention", "--dry-run", "--retention-hours", "1", ld)
    assert r.code == 1, r
    assert "…" not in r.out
    for seg, offs, size in (("00000000000000000000.log", "0..1", "286 B"), ("00000000000000000002.log", "2..2", "172 B"),
                            ("00000000000000000004.log", "4..4", "172 B")):
        line_block = r.out
        assert seg in line_block and offs in line_block and size in line_block
    assert r.out.count("orders.events.v2") >= 5 and "retention_ms" in r.out
    assert "2023-11-14T22:13:20.000Z .. 2023-11-14T23:13:20.000Z" in r.out


def test_render_table_fits_or_wraps_without_cutting():
    from kltool.output import render_table

    cols = ["topic", "part", "end"]
    rows = [["a-very-long-topic-name", 12, 123456789], ["b", 3, None]]
    wide = render_table(cols, rows, width=None, justify={"part": "right", "end": "right"})
    assert wide[0].split() == cols and set(wide[1]) == {"\u2500"}
    assert wide[2].split() == ["a-very-long-topic-name", "12", "123456789"]
    narrow = render_table(cols, rows, width=30)
    assert narrow == ["topic: a-very-long-topic-name", "  part: 12  end: 123456789", "topic: b  part: 3"]
    tiny = render_table(cols, rows, width=5)  # longer fields than the width: still whole
    assert "  end: 123456789" in tiny and "topic: a-very-long-topic-name" in tiny


def run_in_pty(args, cols: int, rows: int = 50, env_extra=None) -> str:
    """Run kltool with stdout and stderr on a pseudo-terminal of ``cols`` columns; returns what the
    terminal received (escape sequences included), with \\r\\n made \\n."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from .conftest import ROOT

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env.update({"TERM": "xterm-256color", "PYTHONPATH": str(ROOT), **(env_extra or {})})
    p = subprocess.Popen([sys.executable, "-m", "kltool", *map(str, args)], stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    p.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


@pytest.mark.parametrize("cols", [80, 100])
def test_info_on_a_real_terminal_keeps_numbers(cols):
    text = run_in_pty(["info", REAL_ZK], cols)
    assert "8202" in text and "2018-08-15T05:57:03.113Z" in text and "__consumer_offsets" in text, text
    assert "…" not in text


# -- progress never mixes with findings; one unit system ----------------------------------------

def _screen_lines(raw: str) -> list[str]:
    """What each terminal line shows at the end: escape sequences dropped, text after the last \\r."""
    import re

    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    return [ln.rsplit("\r", 1)[-1] for ln in text.split("\n")]


def test_progress_bar_never_shares_a_line_with_a_finding():
    raw = run_in_pty(["verify", FIXTURES / "java-oracle" / "damaged-v2-crc-0"], 120)
    assert "━" in raw, "the progress bar was expected on a terminal"
    lines = _screen_lines(raw)
    findings = [ln for ln in lines if "WARNING" in ln or "ERROR" in ln]
    assert len(findings) >= 2
    for ln in findings:
        assert ln.startswith(("WARNING", "ERROR")), ln
    assert any(ln.startswith("verify: PROBLEMS FOUND") for ln in lines)


def test_progress_bar_sizes_are_binary_units():
    raw = run_in_pty(["verify", REAL_ZK / "__consumer_offsets-28"], 150)
    import re

    sizes = re.findall(r"\d[\d.]* ?(?:[kKMG]i?B|bytes)\b", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw))
    assert sizes, raw
    assert not [s for s in sizes if re.search(r"[kKMG]B$", s)], sizes  # no decimal kB/MB
    assert any("MiB" in s or "KiB" in s for s in sizes), sizes
