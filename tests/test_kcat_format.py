"""kltool.kcat_format: kcat's -f format strings (dump --format), compiled once, one record's text per call.
The CLI's use of it is in test_cli_ux.py (test_dump_kcat_format*)."""

from __future__ import annotations

import pytest

from kltool.errors import UsageError
from kltool.kcat_format import compile_format, parse

REC = ("t1", 3, 42, 1_700_000_000_000, b"k", b"value", [(b"h1", b"x"), (b"h2", None)], "text")


def test_every_token():
    f = compile_format(r"%t|%p|%o|%T|%k|%K|%s|%S|%h")
    assert f(*REC) == "t1|3|42|1700000000000|k|1|value|5|h1=x,h2="


def test_null_key_value_and_no_topic():
    f = compile_format("%t[%p] %k/%K %s/%S")
    assert f(None, None, 0, 0, None, None, [], "text") == "[] /-1 /-1"


def test_escapes_percent_and_no_added_newline():
    assert compile_format(r"a\tb\nc\rd\\e\x41\x4a%%")(*REC) == "a\tb\nc\rd\\eAJ%"
    # a backslash that starts no escape, a bad \x and a % at the very end stay as they are
    assert compile_format(r"\q\x4G\x4%")(*REC) == "\\q\\x4G\\x4%"


def test_the_encoding_applies_to_keys_values_and_header_values_not_header_keys():
    f = compile_format("%k %s %h")
    assert f("t", 0, 0, 0, b"\x01\xff", b"ab", [(b"hk", b"\xff")], "hex") == "01ff 6162 hk=ff"
    assert f("t", 0, 0, 0, b"ab", b"ab", [(b"hk", b"ab")], "base64") == "YWI= YWI= hk=YWI="


def test_parse_keeps_literals_between_fields():
    assert parse("%o: %k=%s\\n") == [("o",), ": ", ("k",), "=", ("s",), "\n"]
    assert parse("") == []


@pytest.mark.parametrize("fmt,msg", [("%Z", "unknown token %Z"), ("x%R", "%R (binary value length)")])
def test_unknown_tokens_are_usage_errors(fmt, msg):
    with pytest.raises(UsageError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        compile_format(fmt)
