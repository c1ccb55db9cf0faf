"""append's JSON input: a typo is an error, not a tombstone (unknown fields name the line and the field,
exit 2, nothing written; --ignore-unknown-fields relaxes it), dump's own output still appends back, and
input nested too deeply is a one-line error (exit 2), not an internal error."""

from __future__ import annotations

import hashlib

import pytest

import kltool
from kltool.errors import UsageError
from kltool.jsonl import RECORD_FIELDS, parse_record_line, record_json

from .conftest import FIXTURES, ORACLE


def _tree(d):
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


@pytest.fixture
def logdir(kl, tmp_path):
    d = tmp_path / "ld"
    assert kl("create", d, "t", "--partitions", "2").code == 0
    return d


TYPOS = [
    '{"key":"a","valu":"1"}',
    '{"key":"a","Value":"1"}',
    '{"kye":"a","value":"1"}',
    '{"key":"a","value":"1","timestmap":1700000000000}',
    '{"key":"a","value":"1","header":[{"key":"h","value":"x"}]}',
    '{"key":"a","value":"1","partiton":1}',
    '{"key":"a","value":"1","headers":[{"key":"h","valeu":"x"}]}',
    '{"value":"1","key ":"a"}',
    '{"key":"a","value":"1","type":"record","offst":3}',
]


@pytest.mark.parametrize("line", TYPOS)
@pytest.mark.parametrize("dry", [False, True])
def test_unknown_field_is_an_error_naming_line_and_field(kl, logdir, line, dry):
    before = _tree(logdir)
    good = '{"key":"b","value":"2"}'
    r = kl("append", logdir, "t", *(["--dry-run"] if dry else []), stdin=f"{good}\n{good}\n{line}\n{good}\n")
    assert r.code == 2, r
    err = r.err.strip()
    assert len(err.splitlines()) == 1 and "line 3" in err and "unknown" in err, err
    import json

    obj = json.loads(line)
    bad = [k for k in obj if k not in RECORD_FIELDS] or [k for h in obj.get("headers", []) for k in h
                                                         if k not in ("key", "value")]
    assert repr(bad[0]) in err, err
    assert _tree(logdir) == before


@pytest.mark.parametrize("line", TYPOS)
def test_ignore_unknown_fields_lets_them_through(kl, logdir, line):
    r = kl("append", logdir, "t", "--ignore-unknown-fields", "--partition", "0", stdin=line + "\n")
    assert r.code == 0, r
    assert "1 records" in r.out


def test_many_lines_typo_deep_in_the_input(kl, logdir):
    """The C fast path reads plain lines: a typo among 20,000 of them is still caught (line number exact)."""
    lines = [f'{{"key":"k{i}","value":"v{i}","timestamp":1700000000000}}' for i in range(20_000)]
    lines[15_321] = '{"key":"k","vale":"v","timestamp":1700000000000}'
    r = kl("append", logdir, "t", stdin="\n".join(lines) + "\n")
    assert r.code == 2 and "line 15322" in r.err and "'vale'" in r.err, r


def test_library_append_refuses_unknown_keys(tmp_path, kl, logdir):
    logs = kltool.Logs(logdir)
    before = _tree(logdir)
    with pytest.raises(UsageError, match="record 2: unknown field 'valu'"):
        logs.append("t", [{"key": "a", "value": "1"}, {"key": "a", "valu": "1"}])
    assert _tree(logdir) == before
    res = logs.append("t", [{"key": "a", "valu": "1"}], ignore_unknown_fields=True)
    assert res.records == 1


@pytest.mark.parametrize("src,args", [
    (ORACLE / "v2-txn-0", []),
    (ORACLE / "v2-gzip-headers-0", ["--encoding", "base64"]),
    (ORACLE / "v1-none-0", ["--encoding", "hex"]),
    (FIXTURES / "real" / "william0423-indexed-zk" / "__consumer_offsets-28", ["--decoder", "consumer-offsets"]),
    (FIXTURES / "sample-logdir", []),
])
def test_dump_json_still_appends_back(kl, logdir, src, args):
    d = kl("--json", "dump", "--records", *args, src)
    assert d.code == 0, d
    r = kl("append", logdir, "t", "--partition", "1", stdin=d.out)
    assert r.code == 0, r
    n = sum(1 for o in d.json() if o["type"] == "record" and o.get("control") is None)
    assert f"{n} records" in r.out, r.out


def test_every_field_dump_writes_is_known():
    rec = record_json(5, 1, "create", b"k", b"v", [(b"h", b"x")], sequence=3, size=10, batch_offset=5, topic="t",
                      partition=0, control=None, decoded={"a": 1})
    assert set(rec) <= RECORD_FIELDS
    rec["decode_error"] = "x"
    assert parse_record_line(__import__("json").dumps(rec).encode())[:2] == (b"k", b"v")


@pytest.mark.parametrize("text", [
    "[" * 100_000,
    '{"key":' + "[" * 100_000,
    '{"key":"a","value":' + "{\"a\":" * 50_000 + "1" + "}" * 50_000 + "}",
    '{"key":"a","value":' + "[" * 990 + "]" * 990 + "}",
    '{"key":"a","headers":' + "[" * 100_000 + "}",
])
def test_deep_nesting_is_a_one_line_error(kl, logdir, text):
    for dry in ([], ["--dry-run"]):
        r = kl("append", logdir, "t", *dry, stdin=text + "\n")
        assert r.code in (1, 2) and "internal error" not in r.err and "Traceback" not in r.err, r
        if r.code == 2:
            assert len(r.err.strip().splitlines()) == 1 and "line 1" in r.err, r.err
    assert kl("append", logdir, "t", stdin="[" * 100_000 + "\n").code == 2


@pytest.mark.parametrize("line", ['{"type":"recrod","key":"a","value":"1"}', '{"type":"Record","value":"1"}',
                                  '{"key":"a","type":"rec","value":"1"}'])
def test_a_typo_in_type_is_not_a_silently_skipped_record(kl, logdir, line):
    before = _tree(logdir)
    r = kl("append", logdir, "t", stdin='{"key":"b","value":"2"}\n' + line + "\n")
    assert r.code == 2 and "line 2" in r.err and "type" in r.err, r
    assert _tree(logdir) == before
    r = kl("append", logdir, "t", "--ignore-unknown-fields", stdin=line + "\n")
    assert r.code == 0 and "skipped 1 lines" in r.err, r


def test_other_kltool_lines_are_still_skipped(kl, logdir):
    """Lines of kltool's other JSON outputs (findings, summaries, offsets rows) have no key or value."""
    src = ORACLE / "damaged-v2-crc-0"
    text = kl("--json", "verify", src).out + kl("--json", "offsets", "--count", src).out + \
        kl("--json", "dump", src).out
    r = kl("append", logdir, "t", stdin=text)
    assert r.code == 0, r
