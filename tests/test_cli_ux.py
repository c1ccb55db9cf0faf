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
    import sys

    return pty_output([sys.executable, "-m", "kltool", *map(str, args)], cols, rows, env_extra)


def pty_output(argv: list[str], cols: int, rows: int = 50, env_extra=None) -> str:
    """Run ``argv`` (from the repository root) with stdout and stderr on a pseudo-terminal of ``cols`` x
    ``rows``; returns what the terminal received (escape sequences included), with \\r\\n made \\n."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios

    from .conftest import ROOT

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env.update({"TERM": "xterm-256color", "PYTHONPATH": str(ROOT), **(env_extra or {})})
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=ROOT, env=env)
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


# -- dump: --to-time, --limit, --from-offset -N, corrupt indexes --------------------------------

V2 = FIXTURES / "java-oracle" / "v2-none-0"  # offsets 0..6; timestamps 1700000000000 + o*1000, offset 2: 1600000000000
V2_LOG = V2 / "00000000000000000000.log"


def _record_offsets(r) -> list[int]:
    return [int(ln.split()[2]) for ln in r.out.splitlines() if ln.startswith("| offset:")]


def test_dump_to_time_stops_at_the_first_later_record(kl):
    r = kl("dump", "--records", "--to-time", "1700000003000", V2)
    assert r.code == 0
    assert _record_offsets(r) == [0, 1, 2, 3]
    batches = [ln for ln in r.out.splitlines() if ln.startswith("baseOffset:")]
    assert len(batches) == 2, r.out  # no header of a later batch without its records
    rb = kl("dump", "--to-time", "1700000003000", V2)
    assert [ln.split()[1] for ln in rb.out.splitlines() if ln.startswith("baseOffset:")] == ["0", "3"]
    early = kl("dump", "--records", "--to-time", "0", V2)
    assert early.code == 0 and "baseOffset" not in early.out  # the first record is already later
    js = kl("--json", "dump", "--records", "--to-time", "2023-11-14T22:13:21Z", V2_LOG).json()
    assert [d["offset"] for d in js if d["type"] == "record"] == [0, 1, 2]


@pytest.mark.parametrize("n", ["0", "-1"])
def test_dump_limit_must_be_positive(kl, n):
    r = kl("dump", "--limit", n, V2)
    assert r.code == 2 and "--limit" in r.err and r.out == ""


@pytest.mark.parametrize("target", [V2, V2_LOG])
def test_dump_from_offset_minus_n_is_the_last_n(kl, target):
    r = kl("dump", "--records", "--from-offset", "-2", target)
    assert r.code == 0 and _record_offsets(r) == [5, 6]
    r = kl("dump", "--records", "--from-offset", "-100", target)
    assert _record_offsets(r) == list(range(7))


def test_dump_tail_is_per_partition(kl):
    r = kl("--json", "dump", "--records", "--from-offset", "-1", FIXTURES / "java-oracle" / "v2-none-0",
           FIXTURES / "java-oracle" / "v2-txn-0")
    recs = [(d["topic"], d["offset"]) for d in r.json() if d["type"] == "record"]
    assert recs == [("v2-none", 6), ("v2-txn", 14)], recs


def test_dump_three_byte_index_is_corrupt_like_verify(kl, tmp_path):
    f = tmp_path / "00000000000000000000.index"
    f.write_bytes(b"abc")
    v = kl("verify", f)
    assert v.code == 1 and "index_corrupt" in v.out
    r = kl("dump", f)
    assert r.code == 1
    assert "is empty" not in r.out and "index_corrupt" in r.out and "found 3 bytes" in r.out
    js = kl("--json", "dump", f).json()
    assert js[0]["type"] == "finding" and js[0]["kind"] == "index_corrupt"
    t = tmp_path / "00000000000000000000.timeindex"
    t.write_bytes(b"\x00" * 13)
    r = kl("dump", t)
    assert r.code == 1 and "found 13 bytes" in r.out
    empty = tmp_path / "00000000000000000010.index"
    empty.write_bytes(b"")
    r = kl("dump", empty)
    assert r.code == 0 and r.out.strip().endswith("is empty.")


# -- kafka-dump-log.sh's options ---------------------------------------------------------------

REAL_IDX = REAL_ZK / "debug_topic-0" / "00000000000000000000.index"


def test_kafka_dump_log_files_and_print_data_log(kl):
    ours = kl("dump", "--records", V2_LOG, REAL_IDX)
    theirs = kl("dump", "--print-data-log", "--files", f"{V2_LOG},{REAL_IDX}")
    assert theirs.code == 0 and theirs.out == ours.out
    assert "payload: v0" in theirs.out and "offset: " in theirs.out


def test_kafka_dump_log_deep_iteration_and_skip_record_metadata(kl):
    deep = kl("dump", "--deep-iteration", V2_LOG)
    recs = [ln for ln in deep.out.splitlines() if ln.startswith("|")]
    assert len(recs) == 7 and all("payload:" not in ln and "offset:" in ln for ln in recs)
    skip = kl("dump", "--print-data-log", "--skip-record-metadata", V2_LOG)
    lines = skip.out.splitlines()
    recs = [ln for ln in lines if ln.startswith("|")]
    assert recs[0] == "| key: k0 payload: v0" and all("offset:" not in ln for ln in recs)
    assert "| payload: no-key" in lines  # Kafka 4.4: "| " before the first field, key or payload
    txn = kl("dump", "--print-data-log", "--skip-record-metadata", FIXTURES / "java-oracle" / "v2-txn-0").out.splitlines()
    assert "" in txn and not any("endTxnMarker" in ln for ln in txn)  # a control record: an empty line
    shallow = kl("dump", "--skip-record-metadata", V2_LOG).out  # as in Kafka: alone it is still shallow
    assert "|" not in shallow and "baseOffset: 0" in shallow


def test_kafka_dump_log_decoder_flags(kl):
    co = REAL_ZK / "__consumer_offsets-28"
    a = kl("--json", "dump", "--offsets-decoder", "--limit", "3", co).json()
    b = kl("--json", "dump", "--records", "--decoder", "consumer-offsets", "--limit", "3", co).json()
    assert a == b and any("decoded" in d for d in a)
    r = kl("dump", "--offsets-decoder", "--cluster-metadata-decoder", co)
    assert r.code == 2
    r = kl("dump", "--transaction-log-decoder", "--limit", "1", V2_LOG)
    assert r.code in (0, 1) and "|" in r.out


def test_kafka_dump_log_max_bytes(kl):
    r = kl("dump", "--max-bytes", "186", V2_LOG)  # batches end at 100, 186, 296
    assert [ln.split()[1] for ln in r.out.splitlines() if ln.startswith("baseOffset:")] == ["0", "3"]
    r = kl("dump", "--max-bytes", "185", V2)
    assert [ln.split()[1] for ln in r.out.splitlines() if ln.startswith("baseOffset:")] == ["0"]


def test_kafka_dump_log_index_sanity_check(kl, tmp_path):
    r = kl("dump", "--index-sanity-check", REAL_IDX)
    assert r.code == 0 and r.out.splitlines()[-1] == f"{REAL_IDX} passed sanity check."
    bad = tmp_path / "00000000000000000000.index"
    bad.write_bytes(b"abc")
    r = kl("dump", "--index-sanity-check", bad)
    assert r.code == 1 and "passed" not in r.out and "found 3 bytes" in r.out


def test_kafka_dump_log_options_without_a_kltool_form_get_a_hint(kl):
    r = kl("dump", "--value-decoder-class", "x.Y", V2_LOG)
    assert r.code == 2 and "--encoding" in r.err and len(r.err.strip().splitlines()) == 1
    r = kl("dump", "--key-decoder-class", "x.Y", V2_LOG)
    assert r.code == 2 and "StringDecoder" in r.err
    # Kafka's default decoder and --max-message-size are kafka-dump-log's own defaults: accepted
    r = kl("dump", "--value-decoder-class", "org.apache.kafka.tools.api.StringDecoder", "--max-message-size", "10",
           V2_LOG)
    assert r.code == 0 and "payload: v0" in r.out  # (a decoder class implies --print-data-log)
    r = kl("dump", "--verify-index-only", "--files", REAL_IDX)
    assert r.code == 0 and r.out.splitlines()[-1] == f"{REAL_IDX} is empty."
    r = kl("dump")
    assert r.code == 2 and "--files" in r.err


# -- dump --format (kcat's -f) ------------------------------------------------------------------

def test_dump_kcat_format(kl):
    r = kl("dump", "--format", r"%t [%p] at offset %o: key %k (%K): %s (%S) @%T {%h}\n", V2)
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[0] == "v2-none [0] at offset 0: key k0 (2): v0 (2) @1700000000000 {}"
    assert lines[3] == "v2-none [0] at offset 3: key  (-1): no-key (6) @1700000003000 {}"
    assert len(lines) == 7 and "Dumping" not in r.out and "baseOffset" not in r.out


def test_dump_kcat_format_escapes_headers_and_no_control_records(kl):
    r = kl("dump", "--format", r"%o\t%%\x41|", FIXTURES / "java-oracle" / "v2-txn-0")
    assert r.code == 0
    cells = r.out.split("|")[:-1]
    assert cells[0] == "0\t%A"
    assert "8\t%A" not in cells and "9\t%A" not in cells  # the COMMIT/ABORT markers
    h = kl("dump", "--format", r"%h\n", FIXTURES / "sample-logdir" / "lsx1-0")
    assert h.out.splitlines()[0] == "app.name=IntellijKafkaPlugin"


@pytest.mark.parametrize("fmt,msg", [("%Z", "unknown token %Z"), ("%R", "%R"), ("", "empty")])
def test_dump_kcat_format_bad_tokens(kl, fmt, msg):
    r = kl("dump", "--format", fmt, V2)
    assert r.code == 2 and msg in r.err


def test_dump_format_and_json_conflict(kl):
    r = kl("--json", "dump", "--format", "%o", V2)
    assert r.code == 2


# -- offsets: kafka-get-offsets habits, one name for log start/end, files ------------------------

DEBUG0 = REAL_ZK / "debug_topic-0"


@pytest.mark.parametrize("spec,field,value", [("earliest", "log_start_offset", 0), ("-2", "log_start_offset", 0),
                                              ("latest", "log_end_offset", 40), ("-1", "log_end_offset", 40),
                                              ("max-timestamp", "max_timestamp_offset", 39),
                                              ("-3", "max_timestamp_offset", 39),
                                              ("earliest-local", "log_start_offset", 0)])
def test_offsets_time_names_like_kafka_get_offsets(kl, spec, field, value):
    r = kl("--json", "offsets", DEBUG0, "--time", spec)
    assert r.code == 0, r
    assert r.json()[0][field] == value


def test_offsets_tiered_times_are_refused(kl):
    r = kl("offsets", DEBUG0, "--time", "latest-tiered")
    assert r.code == 2 and "tiered" in r.err


def test_offsets_kafka_format_lines(kl):
    r = kl("offsets", "--format", "kafka", REAL_ZK, "--topic", "debug_topic")
    assert r.code == 0 and r.out == "debug_topic:0:40\n"
    r = kl("offsets", "--format", "kafka", "--time", "earliest", REAL_ZK, "--topic", "debug_topic")
    assert r.out == "debug_topic:0:0\n"
    r = kl("offsets", "--format", "kafka", "--time", "2018-08-15T02:30:00Z", DEBUG0)
    assert r.out == "debug_topic:0:30\n"
    r = kl("offsets", "--format", "kafka", "--time", "2030-01-01T00:00:00Z", DEBUG0)
    assert r.code == 0 and r.out == ""  # no offset: no line, as kafka-get-offsets
    r = kl("offsets", "--format", "kafka", "--time", "-3", DEBUG0)
    assert r.out == "debug_topic:0:39\n"


def test_offsets_kafka_format_sorts_like_kafka(kl):
    r = kl("offsets", "--format", "kafka", "--topic", "__consumer_offsets", "--partition", "2,10,28", REAL_ZK)
    assert [ln.rsplit(":", 1)[0] for ln in r.out.splitlines()] == ["__consumer_offsets:10", "__consumer_offsets:2",
                                                                   "__consumer_offsets:28"]


def test_offsets_kafka_format_needs_one_kind(kl):
    assert kl("offsets", "--format", "kafka", "--earliest", "--latest", DEBUG0).code == 2
    assert kl("offsets", "--format", "kafka", "--count", DEBUG0).code == 2
    assert kl("--json", "offsets", "--format", "kafka", DEBUG0).code == 2


def test_info_and_offsets_use_the_same_names(kl):
    info = [d for d in kl("--json", "info", DEBUG0).json() if d["type"] == "partition"][0]
    offs = kl("--json", "offsets", DEBUG0).json()[0]
    assert info["log_start_offset"] == offs["log_start_offset"] == 0
    assert info["log_end_offset"] == offs["log_end_offset"] == 40
    assert "log start" in kl("info", DEBUG0).out and "log start" in kl("offsets", DEBUG0).out


@pytest.mark.parametrize("name", ["info", "offsets"])
def test_info_and_offsets_take_a_segment_file(kl, name):
    f = DEBUG0 / "00000000000000000000.log"
    whole = kl("--json", name, DEBUG0).json()
    one = kl("--json", name, f)
    assert one.code == 0, one
    assert one.json() == whole and "its partition" in one.err
    idx = kl("--json", name, DEBUG0 / "00000000000000000000.index")
    assert idx.json() == whole


def test_retention_on_a_file_names_the_partition_directory(kl, copy_fixture):
    d = copy_fixture("real/william0423-indexed-zk/debug_topic-0")
    r = kl("retention", "--dry-run", d / "00000000000000000000.log")
    assert r.code == 2 and str(d) in r.err and "whole partitions" in r.err


# -- shell completion ------------------------------------------------------------------------

def _complete(words: str, cword: int) -> list[str]:
    import os
    import subprocess
    import sys

    from .conftest import ROOT

    env = dict(os.environ, _KLTOOL_COMPLETE="bash_complete", COMP_WORDS=words, COMP_CWORD=str(cword),
               PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "kltool"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


@pytest.mark.parametrize("shell,marker", [("bash", "complete -o nosort -F _kltool_completion kltool"),
                                          ("zsh", "#compdef kltool"), ("fish", "complete --no-files --command kltool")])
def test_completion_prints_the_script(kl, shell, marker):
    r = kl("completion", shell)
    assert r.code == 0 and marker in r.out and "_KLTOOL_COMPLETE" in r.out


def test_completion_unknown_shell(kl):
    r = kl("completion", "tcsh")
    assert r.code == 2


def test_completion_completes_commands_options_and_choices():
    assert "plain,verify" in _complete("kltool ve", 1)
    assert "plain,completion" in _complete("kltool comp", 1)
    assert "plain,--decoder" in _complete("kltool dump --dec", 2)
    assert {"plain,consumer-offsets", "plain,cluster-metadata"} <= set(_complete("kltool dump --decoder ", 3))


def test_completion_script_loads_in_bash(tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    from .conftest import ROOT

    bash = shutil.which("bash")
    assert bash
    script = subprocess.run([sys.executable, "-m", "kltool", "completion", "bash"], capture_output=True, text=True,
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout
    (tmp_path / "c.sh").write_text(script)
    p = subprocess.run([bash, "-c", f"source {tmp_path / 'c.sh'} && complete -p kltool"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and "_kltool_completion" in p.stdout, p.stderr


# -- retention --offset-json-file (kafka-delete-records.sh) -------------------------------------

def _two_topics(tmp_path):
    from .test_retention_build import T0, build_partition

    ld = tmp_path / "ld"
    for t in ("a", "b"):
        build_partition(ld, t, [[[T0 + 1000 * (s * 10 + i)] for i in range(10 if s < 2 else 5)] for s in range(3)])
    return ld


def _lso(ld):
    from kltool.format.checkpoints import parse_offset_checkpoint

    f = ld / "log-start-offset-checkpoint"
    return parse_offset_checkpoint(f.read_text()) if f.exists() else {}


def _logs(pdir):
    return sorted(int(p.name.split(".")[0]) for p in pdir.glob("*.log"))


def test_offset_json_file_moves_each_partition_start(kl, tmp_path):
    ld = _two_topics(tmp_path)
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "a", "partition": 0, "offset": 15},
                                               {"topic": "b", "partition": 0, "offset": 20}], "version": 1}))
    dry = kl("retention", "--dry-run", "--offset-json-file", spec, ld)
    assert dry.code == 1, dry
    r = kl("--json", "retention", "--offset-json-file", spec, ld)
    assert r.code == 0, r
    # b's start 20 is its first segment's base: no entry there, as Kafka 4.4 writes the checkpoint
    assert _lso(ld) == {("a", 0): 15}
    assert _logs(ld / "a-0") == [10, 20] and _logs(ld / "b-0") == [20]
    assert kl("verify", ld).code == 0


def test_offset_json_file_minus_one_and_untouched_partitions(kl, tmp_path):
    ld = _two_topics(tmp_path)
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "b", "partition": 0, "offset": -1}]}))
    r = kl("retention", "--offset-json-file", spec, ld)
    assert r.code == 0, r
    lso = _lso(ld)
    assert lso.get(("b", 0)) == 25 and lso.get(("a", 0), 0) == 0
    assert _logs(ld / "a-0") == [0, 10, 20]


@pytest.mark.parametrize("content,msg", [
    ("not json", "not JSON"),
    ('{"partitions": [{"topic": "a", "partition": 0}]}', "partitions[0]"),
    ('{"partitions": [{"topic": "a", "partition": 0, "offset": 1}, {"topic": "a", "partition": 0, "offset": 2}]}',
     "appears twice"),
    ('{"partitions": [{"topic": "zz", "partition": 3, "offset": 1}]}', "zz-3"),
    ('{"partitions": []}', "names no partitions"),
    ('[1]', "partitions"),
])
def test_offset_json_file_bad_input(kl, tmp_path, content, msg):
    ld = _two_topics(tmp_path)
    spec = tmp_path / "delete.json"
    spec.write_text(content)
    r = kl("retention", "--offset-json-file", spec, ld)
    assert r.code == 2 and msg in r.err and "delete.json" in r.err, r
    assert len(r.err.strip().splitlines()) == 1


def test_offset_json_file_excludes_before_offset(kl, tmp_path):
    ld = _two_topics(tmp_path)
    spec = tmp_path / "delete.json"
    spec.write_text('{"partitions": [{"topic": "a", "partition": 0, "offset": 1}]}')
    assert kl("retention", "--offset-json-file", spec, "--before-offset", "3", ld).code == 2


@pytest.mark.parametrize("name", ["verify", "dump", "rebuild-index", "info", "offsets"])
def test_a_non_kafka_file_alone_is_exit_2(kl, name):
    from .conftest import ROOT

    r = kl(name, ROOT / "README.md")
    assert r.code == 2 and "README.md" in r.err and r.out == "", r


def test_dot_paths_inside_a_partition_directory(kl, monkeypatch):
    monkeypatch.chdir(DEBUG0)
    v = kl("--json", "verify", ".")
    assert v.code == 0 and v.json()[-1]["partitions"] == 1, v
    i = kl("--json", "info", "00000000000000000000.log")
    assert i.code == 0 and [d["log_end_offset"] for d in i.json() if d["type"] == "partition"] == [40], i
    up = kl("--json", "info", "..")
    assert up.code == 0 and up.json()[-1]["partitions"] == 52
