"""Control characters in file names and topics never reach the terminal raw (output.visible, the one home):
a hostile name cannot recolour the terminal, set its title, or forge a line of kltool's output. Text lines
on stdout and error lines on stderr show them escaped (``\\x1b``, ``\\n``); --json lines keep JSON's escapes
(the decoded value is the name itself)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kltool.format.batch import build_v2_batch
from kltool.output import render_table

HOSTILE_DIR = "dir\x1b[31mRED\nkltool: forged line\r\t\x7f\u009b\u202e"
HOSTILE_TOPIC = "to\x1b]0;title\x07pic"
RAW = ("\x1b", "\n", "\r", "\t", "\x7f", "\u009b", "\u202e", "\x07")
SHOWN_DIR = "dir\\x1b[31mRED\\nkltool: forged line\\r\\t\\x7f\\x9b\\u202e"
SHOWN_TOPIC = "to\\x1b]0;title\\x07pic"


def test_visible():
    from kltool.output import visible

    assert visible("plain ünïcödé ─") == "plain ünïcödé ─"
    assert visible(HOSTILE_DIR) == SHOWN_DIR
    assert visible("a\x00b\x1fc\x85d\u2028e\u2066") == "a\\x00b\\x1fc\\x85d\\u2028e\\u2066"
    assert visible("\udc9b\udcff") == "\\x9b\udcff"  # (a non-UTF-8 byte that is a C1 control: escaped)
    lines = render_table(["topic"], [[HOSTILE_TOPIC]])
    assert lines[2] == SHOWN_TOPIC and len(lines[1]) == len(SHOWN_TOPIC)  # (widths of what is shown)


@pytest.fixture
def hostile(tmp_path):
    root = tmp_path / HOSTILE_DIR
    part = root / f"{HOSTILE_TOPIC}-0"
    part.mkdir(parents=True)
    b = build_v2_batch([(0, 1000, b"k", b"v", ())], base_offset=0, producer_id=5, producer_epoch=0,
                       base_sequence=0, is_transactional=True)
    (part / "00000000000000000000.log").write_bytes(b + b"\0" * 30)  # (damage: a finding naming the file)
    return root


def _no_raw(text: str) -> None:
    lines = text.splitlines()
    for ch in RAW:
        assert all(ch not in ln for ln in lines), (ch, text)
    assert not any(ln.startswith("kltool: forged") for ln in lines), text


@pytest.mark.parametrize("args", [["dump"], ["dump", "--records"], ["info"], ["verify"], ["offsets"],
                                  ["producers"], ["transactions"], ["dump", "--format", "%t %o\\n"]])
def test_text_output_escapes_control_characters(kl, hostile, args):
    r = kl(*args, hostile)
    assert r.code in (0, 1), r
    _no_raw(r.out)
    _no_raw(r.err)
    assert SHOWN_TOPIC in r.out + r.err
    if args[0] not in ("info", "offsets", "transactions"):  # (these name the topic, not the file)
        assert SHOWN_DIR in r.out + r.err


def test_kafka_tab_tables_keep_their_tabs(kl, hostile):
    log = hostile / f"{HOSTILE_TOPIC}-0" / "00000000000000000000.log"
    log.write_bytes(log.read_bytes()[:-30])  # (no damage: the open transaction hangs)
    r = kl("transactions", "--format", "kafka", hostile)
    header, row = r.out.splitlines()[:2]
    assert header.startswith("Topic") and "\t" in header  # kafka-transactions.sh's tab-separated table
    assert row.split("\t")[0].rstrip() == SHOWN_TOPIC and row.count("\t") == header.count("\t"), r


def test_error_line_escapes_the_path(kl, hostile):
    r = kl("dump", hostile / "nope\x1b[2J.log")
    assert r.code == 2
    assert r.err.count("\n") == 1 and "\\x1b[2J" in r.err and SHOWN_DIR in r.err
    _no_raw(r.err)


def test_json_keeps_the_name(kl, hostile):
    rows = kl("--json", "dump", hostile).json()
    batch = [x for x in rows if x["type"] == "batch"][0]
    assert batch["topic"] == HOSTILE_TOPIC and HOSTILE_DIR in batch["file"]


def test_non_utf8_c1_byte_in_a_real_terminal_line(tmp_path):
    """A directory name holding the byte 0x9b (CSI in an 8-bit terminal) and ESC, through the installed
    command and a real stdout: shown escaped; other non-UTF-8 bytes are written back as they are."""
    root = os.path.join(os.fsencode(tmp_path), b"d\x9b\x1b[2J\xff")
    part = os.path.join(root, b"t-0")
    os.makedirs(part)
    with open(os.path.join(part, b"00000000000000000000.log"), "wb") as f:
        f.write(build_v2_batch([(0, 1000, b"k", b"v", ())], base_offset=0))
    kltool = os.path.join(os.path.dirname(sys.executable), "kltool")
    r = subprocess.run([kltool, "dump", root], capture_output=True)
    assert r.returncode == 0, r
    first = r.stdout.splitlines()[0]
    assert first.endswith(b"/d\\x9b\\x1b[2J\xff/t-0/00000000000000000000.log"), first
