"""The JSON-lines record schema (DESIGN's ``record``), written and read in one place.

``kltool dump --records --json`` writes one object per record with :func:`record_json` (and, for whole
plain v2 batches, ``_speedups.format_v2``, which writes the same bytes: tests/test_dump.py compares
them); ``kltool append`` reads such lines back with :func:`parse_record_line`, so a dump appends back
unchanged. Bytes are :func:`encode_bytes`'d: a string when they are valid UTF-8 (``text``), else
``{"base64": ...}``; ``{"hex": ...}`` with ``--encoding hex``; null stays null.

The functions take and return plain values (bytes, ints, dicts) so that a faster implementation (C
formatting, orjson parsing) can sit behind the same names. :func:`record_blocks` reads append's input
(JSON lines, or text lines with :func:`parse_text_record`) in blocks of whole lines; for JSON the C
accelerator parses the plain lines of a block in one call and :func:`parse_record_line` (the
reference) the others, so results and error messages are the reference's."""

from __future__ import annotations

import json
from binascii import b2a_base64  # (base64.b64encode without importing base64)
from typing import Any

from .errors import KltoolError
from .format import speedups
from .format.records import java_long  # (record offsets as Kafka shows them: a Java long's wrap)
from .timeutil import parse_time

__all__ = ["encode_bytes", "decode_bytes", "record_json", "parse_record_line", "parse_text_record", "record_blocks",
           "LineError", "SKIP", "INPUT_FIELDS", "RECORD_FIELDS", "unknown_fields"]

# What append reads from a record line, and every field of dump's ``record`` (record_json): the others are
# read back and not used. A field in neither is a typo (``valu``) unless the caller lets unknown fields
# through: it is never silently a null value. (_speedups.c's json_line defers a line with any other
# field to parse_record_line.)
INPUT_FIELDS = ("key", "value", "headers", "timestamp", "partition")
RECORD_FIELDS = frozenset(INPUT_FIELDS) | {"type", "offset", "timestamp_type", "sequence", "size", "batch_offset",
                                          "topic", "control", "decoded", "decode_error"}
_HEADER_FIELDS = frozenset({"key", "value"})


def unknown_fields(obj, known=RECORD_FIELDS) -> list[str]:
    """The names in dict ``obj`` that are not ``known``, in the order given."""
    return [k for k in obj if k not in known]


def unknown_field_message(names: list[str], what: str = "field",
                          expected: str = f"a record has {', '.join(INPUT_FIELDS)} (and dump's other fields)",
                          relax: str = "--ignore-unknown-fields") -> str:
    """``unknown field 'valu' (a record has key, value, ...; --ignore-unknown-fields lets others through)``."""
    s = "s" if len(names) > 1 else ""
    listed = ", ".join(repr(n) for n in names)
    return f"unknown {what}{s} {listed} ({expected}; {relax} lets others through)"


def encode_bytes(b: bytes | None, encoding: str = "text") -> Any:
    """Bytes for JSON: null stays null; ``text`` gives a str when the bytes are valid UTF-8,
    else ``{"base64": ...}``; ``base64``/``hex`` always give ``{"base64": ...}``/``{"hex": ...}``."""
    if b is None:
        return None
    if encoding == "text":
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": b2a_base64(b, newline=False).decode("ascii")}
    if encoding == "hex":
        return {"hex": b.hex()}
    return {"base64": b2a_base64(b, newline=False).decode("ascii")}


def decode_bytes(v: Any) -> bytes | None:
    """Inverse of :func:`encode_bytes` (used by ``append`` to read ``dump --json`` output back)."""
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, dict):
        if "base64" in v:
            from base64 import b64decode

            return b64decode(v["base64"], validate=True)
        if "hex" in v:
            return bytes.fromhex(v["hex"])
        if "text" in v:
            return str(v["text"]).encode("utf-8")
    raise ValueError(f"cannot read bytes from {v!r}: expected a string, null, or {{\"base64\": ...}}")


def record_json(offset: int, timestamp: int, timestamp_type: str, key: bytes | None, value: bytes | None,
                headers, *, encoding: str = "text", sequence: int = -1, size: int | None = None,
                batch_offset: int | None = None, topic: str | None = None, partition: int | None = None,
                control: dict | None = None, decoded: Any = None, decode_error: str | None = None) -> dict:
    """One ``record`` object: ``headers`` is a list of (key, value) bytes pairs; header keys are always
    ``text``-encoded, as Kafka's header keys are strings."""
    rec = {"type": "record", "offset": java_long(offset), "timestamp": timestamp, "timestamp_type": timestamp_type,
           "key": encode_bytes(key, encoding), "value": encode_bytes(value, encoding),
           "headers": [{"key": encode_bytes(k, "text"), "value": encode_bytes(v, encoding)} for k, v in headers],
           "sequence": sequence, "size": size,
           "batch_offset": batch_offset if batch_offset is None else java_long(batch_offset)}
    if topic is not None:
        rec["topic"] = topic
        rec["partition"] = partition
    if control is not None:
        rec["control"] = control
    if decoded is not None:
        rec["decoded"] = decoded
    elif decode_error is not None:
        rec["decode_error"] = decode_error
    return rec


SKIP = object()
_BYTES_FORMS = ({"base64"}, {"hex"}, {"text"})


def _bytes_field(v, what: str) -> bytes | None:
    """A key, value or header value of the JSON input: text (UTF-8), null, ``{"base64": ...}``,
    ``{"hex": ...}`` (the dump schema), or any other JSON value, written as its compact JSON text."""
    if v is None:
        return None
    if isinstance(v, str):
        try:
            return v.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what} is not valid Unicode text (a lone surrogate?)") from None
    if isinstance(v, dict) and set(v) in _BYTES_FORMS:
        try:
            return decode_bytes(v)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{what}: {e}") from None
    try:
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except RecursionError:
        raise ValueError(f"{what}: nested too deeply") from None


def _headers_field(v, ignore_unknown: bool = False) -> tuple:
    if v is None:
        return ()
    if isinstance(v, dict):
        items = list(v.items())
    elif isinstance(v, list):
        items = []
        for h in v:
            if isinstance(h, dict) and "key" in h:
                if not ignore_unknown and len(h) > 1 and (bad := unknown_fields(h, _HEADER_FIELDS)):
                    raise ValueError(unknown_field_message(bad, "header field", "a header has key and value"))
                items.append((h["key"], h.get("value")))
            elif isinstance(h, list | tuple) and len(h) == 2:
                items.append((h[0], h[1]))
            else:
                raise ValueError('headers must be a list of {"key": ..., "value": ...}, or an object')
    else:
        raise ValueError('headers must be a list of {"key": ..., "value": ...}, or an object')
    out = []
    for k, val in items:
        kb = _bytes_field(k, "header key")
        if kb is None:
            raise ValueError("a header key must not be null")
        out.append((kb, _bytes_field(val, "header value")))
    return tuple(out)


def _timestamp_field(v) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool):
        raise ValueError("timestamp must be epoch milliseconds or ISO-8601 text")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return parse_time(v)
        except KltoolError as e:
            raise ValueError(e.message) from None
    raise ValueError("timestamp must be epoch milliseconds or ISO-8601 text")


_DECODER = json.JSONDecoder()


def parse_record_line(raw: bytes, ignore_unknown: bool = False):
    """One input line → ``(key, value, headers, timestamp, partition)``, or SKIP for lines that are not
    records (``dump --json`` batch, finding and summary lines, control records), or None (blank). A field
    that is not in :data:`RECORD_FIELDS` is an error unless ``ignore_unknown``."""
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError("invalid JSON: not UTF-8") from None
    if not text:
        return None
    try:
        obj, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON: {e.msg} (column {e.colno})") from None
    except RecursionError:  # `[[[[...`: Python's parser recurses once per level
        raise ValueError("invalid JSON: nested too deeply (arrays or objects more than about 900 levels deep)") \
            from None
    if end != len(text):
        raise ValueError(f"invalid JSON: Extra data (column {end + 1})")
    if type(obj) is not dict:
        raise ValueError("expected a JSON object with key, value, headers, timestamp, partition")
    get = obj.get
    t = get("type")
    if t is not None and t != "record" and not ignore_unknown and ("key" in obj or "value" in obj):
        raise ValueError(f"type {t!r} with a key or value: a record's type is \"record\" (or none), and kltool's "
                         f"other lines carry no key or value (a typo?; --ignore-unknown-fields skips such lines)")
    if (t is not None and t != "record") or get("control") is not None:
        return SKIP
    if not ignore_unknown and len(obj) > 1 and (bad := unknown_fields(obj)):
        raise ValueError(unknown_field_message(bad))
    partition = get("partition")
    if partition is not None and type(partition) is not int:
        raise ValueError("partition must be an integer")
    key = get("key")
    value = get("value")
    headers = get("headers")
    ts = get("timestamp")
    try:
        return (key.encode("utf-8") if type(key) is str else _bytes_field(key, "key"),
                value.encode("utf-8") if type(value) is str else _bytes_field(value, "value"),
                _headers_field(headers, ignore_unknown) if headers else (),
                ts if type(ts) is int else _timestamp_field(ts), partition)
    except UnicodeEncodeError:
        raise ValueError("a key or value is not valid Unicode text (a lone surrogate escape?)") from None


def parse_text_record(raw: bytes, sep: bytes | None, lineno: int):
    """A text line (without its line end) → ``(key, value, (), None, None)``: the line is the value, or
    KEY SEP VALUE with a separator (like kafka-console-producer)."""
    if sep is None:
        return None, raw, (), None, None
    i = raw.find(sep)
    if i < 0:
        raise ValueError(f"No key separator found on line number {lineno}: '{raw.decode('utf-8', 'replace')}'")
    return raw[:i], raw[i + len(sep):], (), None, None


class LineError(ValueError):
    """An input line that cannot be read: ``lineno`` (1-based) and the message."""

    def __init__(self, lineno: int, message: str):
        super().__init__(message)
        self.lineno = lineno
        self.message = message


BLOCK_BYTES = 1 << 20


def record_blocks(stream, fmt: str = "json", key_separator: bytes | None = None, ignore_unknown: bool = False):
    """Append's input from a binary stream, in blocks of about 1 MiB of whole lines: yields
    ``(first_line, items, nbytes)``, where ``items[j]`` is input line ``first_line + j`` read as
    :func:`parse_record_line` (``fmt="json"``) or :func:`parse_text_record` (``fmt="text"``) read it:
    a ``(key, value, headers, timestamp, partition)`` tuple, None for a blank JSON line, SKIP for a
    line that is not a data record. A line end is "\n" or "\r\n". Raises :class:`LineError` (an unknown
    field too, unless ``ignore_unknown``)."""
    c = speedups.C if fmt == "json" else None
    parse = parse_record_line if not ignore_unknown else _lenient
    lineno = 1
    for block, cut in _line_blocks(stream):
        if c is not None:
            items, deferred = c.parse_json_lines(block, SKIP, cut)
            if deferred:
                raws = bytes(block[:cut]).split(b"\n")
                for j, it in enumerate(items):
                    if it is False:
                        items[j] = _parse_line(parse, raws[j], lineno + j)
        else:
            raws = bytes(block[:cut]).split(b"\n")
            if not raws[-1]:  # the block ends with a line end
                raws.pop()
            if fmt == "json":
                items = [_parse_line(parse, raw, lineno + j) for j, raw in enumerate(raws)]
            else:
                items = [_parse_line(parse_text_record, raw[:-1] if raw.endswith(b"\r") else raw, lineno + j,
                                     key_separator) for j, raw in enumerate(raws)]
        yield lineno, items, cut
        lineno += len(items)


def _lenient(raw: bytes):
    return parse_record_line(raw, True)


def _line_blocks(stream):
    """``(block, cut)``: ``block[:cut]`` is the next whole lines of ``stream`` (the last one may lack its
    "\n" at the end of the input); ``block`` is only valid until the next step. With ``readinto`` one
    buffer is reused (no new 1 MiB object, no concatenation per block)."""
    readinto = getattr(stream, "readinto", None)
    if readinto is None:
        rest = b""
        while True:
            chunk = stream.read(BLOCK_BYTES)
            if not chunk:
                if rest:
                    yield rest, len(rest)
                return
            block = rest + chunk if rest else chunk
            cut = block.rfind(b"\n") + 1
            rest = block[cut:]
            if cut:
                yield block, cut
    buf = bytearray(BLOCK_BYTES)
    have = 0  # bytes at the start of buf: the rest of a line not yet ended
    while True:
        if have == len(buf):  # a line longer than the buffer
            buf.extend(bytes(len(buf)))
        with memoryview(buf) as mv, mv[have:] as free:
            n = readinto(free)
        if not n:
            if have:
                yield buf, have
            return
        end = have + n
        cut = buf.rfind(b"\n", 0, end) + 1
        if cut:
            yield buf, cut
            rest = buf[cut:end]
            buf[:len(rest)] = rest
            have = len(rest)
        else:
            have = end


def _parse_line(parse, raw: bytes, lineno: int, *sep):
    try:
        return parse(raw, *sep, lineno) if sep else parse(raw)
    except ValueError as e:
        raise LineError(lineno, str(e)) from None
