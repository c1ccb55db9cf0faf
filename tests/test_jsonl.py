"""The JSON-lines record schema: what dump writes (kltool.jsonl.record_json), append reads back
(kltool.jsonl.parse_record_line), for every --encoding and any bytes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kltool import jsonl
from kltool.format import build_batch, decode_records, parse_header
from kltool.format.compression import NONE

maybe_bytes = st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=20).map(str.encode))
header = st.tuples(st.text(max_size=10).map(str.encode), maybe_bytes)


@settings(max_examples=300, deadline=None)
@given(key=maybe_bytes, value=maybe_bytes, headers=st.lists(header, max_size=3), ts=st.integers(-1, 2**50),
       encoding=st.sampled_from(["text", "base64", "hex"]), topic=st.sampled_from([None, "t"]))
def test_what_dump_writes_append_reads_back(key, value, headers, ts, encoding, topic):
    rec = jsonl.record_json(7, ts, "create", key, value, headers, encoding=encoding, topic=topic,
                            partition=None if topic is None else 3)
    line = json.dumps(rec, ensure_ascii=False).encode("utf-8")
    got = jsonl.parse_record_line(line)
    assert got == (key, value, tuple(headers), ts, None if topic is None else 3)


def test_lines_that_are_not_records_are_skipped():
    assert jsonl.parse_record_line(b'{"type": "batch", "base_offset": 0}') is jsonl.SKIP
    ctrl = jsonl.record_json(5, 1, "create", None, None, [], control={"type": "COMMIT"})
    assert jsonl.parse_record_line(json.dumps(ctrl).encode()) is jsonl.SKIP
    assert jsonl.parse_record_line(b"   \n") is None
    with pytest.raises(ValueError, match="invalid JSON"):
        jsonl.parse_record_line(b'{"key": ')


def test_the_record_of_a_real_batch():
    raw = build_batch([(0, 1000, b"k", b"\xff\x00", ((b"h", b"v"),))], base_offset=40, compression=NONE)
    h = parse_header(raw, 0)
    cols = decode_records(h, raw)
    rec = jsonl.record_json(cols.offsets[0], cols.timestamps[0], h.timestamp_type, cols.key(0), cols.value(0),
                            cols.header_list(0), size=cols.sizes[0], batch_offset=h.base_offset)
    assert rec == {"type": "record", "offset": 40, "timestamp": 1000, "timestamp_type": "create", "key": "k",
                   "value": {"base64": "/wA="}, "headers": [{"key": "h", "value": "v"}], "sequence": -1,
                   "size": cols.sizes[0], "batch_offset": 40}


class _ReadOnly:
    """A stream with read() alone (no readinto), reading at most ``step`` bytes a call."""

    def __init__(self, data: bytes, step: int):
        self._f = __import__("io").BytesIO(data)
        self._step = step

    def read(self, n: int) -> bytes:
        return self._f.read(min(n, self._step))


class _Trickle(_ReadOnly):
    """The same with readinto(), as a pipe gives: short reads."""

    def readinto(self, b) -> int:
        data = self._f.read(min(len(b), self._step))
        b[:len(data)] = data
        return len(data)


def _blocks(stream, fmt="json", sep=None):
    out = []
    try:
        for first, items, _n in jsonl.record_blocks(stream, fmt, sep):
            assert first == len(out) + 1
            out.extend(items)
    except jsonl.LineError as e:
        return [("error", e.lineno, e.message)]  # the first bad line is what counts
    return out


def _one_by_one(data: bytes, fmt="json", sep=None):
    lines = data.split(b"\n")
    if not lines[-1]:
        lines.pop()
    out = []
    for n, raw in enumerate(lines, 1):
        try:
            if fmt == "json":
                out.append(jsonl.parse_record_line(raw))
            else:
                out.append(jsonl.parse_text_record(raw[:-1] if raw.endswith(b"\r") else raw, sep, n))
        except ValueError as e:
            return [("error", n, str(e))]
    return out


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.one_of(st.just(""), st.text(max_size=300)), max_size=12),
       blank=st.integers(0, 12), bad=st.integers(0, 40), crlf=st.booleans(), last_nl=st.booleans(),
       block=st.sampled_from([16, 64, 1 << 20]), step=st.sampled_from([1, 7, 100, 1 << 20]))
def test_record_blocks_read_lines_as_one_by_one(values, blank, bad, crlf, last_nl, block, step):
    """Blocks of whole lines, whatever the block size (lines longer than a block, lines cut by short
    reads, no line end at the end), with and without readinto, C reader or not: the items and errors
    of parsing each line alone."""
    from kltool.format import speedups

    end = b"\r\n" if crlf else b"\n"
    lines = [json.dumps({"key": "k", "value": v, "timestamp": i}).encode() for i, v in enumerate(values)]
    if blank < len(lines):
        lines.insert(blank, b"  ")
    if bad < len(lines):
        lines.insert(bad, b"{oops")
    data = end.join(lines) + (end if last_nl and lines else b"")
    want = _one_by_one(data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jsonl, "BLOCK_BYTES", block)
        for accel in (speedups.C, None):
            mp.setattr(speedups, "C", accel)
            assert _blocks(_Trickle(data, step)) == want
            assert _blocks(_ReadOnly(data, step)) == want
        text_want = _one_by_one(data, "text", b":")
        assert _blocks(_Trickle(data, step), "text", b":") == text_want
