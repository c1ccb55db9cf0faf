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
