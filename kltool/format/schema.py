"""The schema language of Kafka's generated messages, and the reader of their bytes.

Kafka describes each message it writes to its internal logs (``__consumer_offsets``,
``__transaction_state``, ``__cluster_metadata``, the consumer protocol, the raft control records) in a
JSON spec that its build turns into a reader and a writer. kltool writes those specs in a one-line
field notation (the reference's tables, section 1.5), parsed once at import time into :class:`Msg`,
and reads any message with :func:`read_message`: the generated readers' rules (flexible versions with
compact lengths and tagged fields, nullable fields, version ranges; versions above the newest known
are read with the newest layout) and JSON shaped as Kafka's generated JSON converters write it
(camelCase keys in declaration order, uuids as 22-char base64url, bytes as padded base64, tagged
fields only when not default). Anything that is not what Kafka writes raises
:class:`~kltool.errors.CorruptDataError`.

The tables of the messages themselves are in :mod:`kltool.format.internal`.
"""

from __future__ import annotations

import base64
import struct

from ..errors import CorruptDataError

# ----------------------------------------------------------------------------------------------
# Schema notation: `Name:type` items separated by `, `; type = primitive | [T] | {fields};
# suffixes: `?` nullable, ` vR` versions (`3+`, `1`, `0-1`), ` tagN`, ` =D` default.


class _Field:
    __slots__ = ("name", "json", "type", "nullable", "vmin", "vmax", "tag", "default")

    def __init__(self, name, typ, nullable, vmin, vmax, tag, default):
        self.name = name
        self.json = name[:1].lower() + name[1:]
        self.type = typ  # "int32" ... | ("array", elem) | ("struct", [fields])
        self.nullable = nullable
        self.vmin = vmin
        self.vmax = vmax  # None = open range
        self.tag = tag
        self.default = default

    def present(self, version: int) -> bool:
        return version >= self.vmin and (self.vmax is None or version <= self.vmax)


_NO_DEFAULT = object()
_EMPTY_STRUCT = object()


def _parse_schema(text: str) -> list[_Field]:
    text = text.strip()
    if text == "(none)":
        return []
    fields, i = _parse_fields(text, 0, None)
    if i != len(text):
        raise ValueError(f"schema parse error at {i}: {text!r}")
    return fields


def _parse_fields(s: str, i: int, close: str | None) -> tuple[list[_Field], int]:
    fields = []
    while True:
        j = s.index(":", i)
        name = s[i:j]
        typ, i = _parse_type(s, j + 1)
        nullable = False
        if i < len(s) and s[i] == "?":
            nullable, i = True, i + 1
        vmin, vmax, tag, default = 0, None, None, _NO_DEFAULT
        while i < len(s) and s[i] == " ":
            i += 1
            if s.startswith("={}", i):
                default, i = _EMPTY_STRUCT, i + 3
                continue
            if s.startswith("=[]", i):
                default, i = [], i + 3
                continue
            k = i
            while k < len(s) and s[k] not in " ,]}":
                k += 1
            tok, i = s[i:k], k
            if tok.startswith("tag"):
                tag = int(tok[3:])
            elif tok.startswith("="):
                d = tok[1:]
                default = None if d == "null" else int(d)
            elif tok.startswith("v"):
                r = tok[1:]
                if r.endswith("+"):
                    vmin = int(r[:-1])
                elif "-" in r:
                    a, b = r.split("-")
                    vmin, vmax = int(a), int(b)
                else:
                    vmin = vmax = int(r)
            else:
                raise ValueError(f"bad schema token {tok!r}")
        fields.append(_Field(name, typ, nullable, vmin, vmax, tag, default))
        if i >= len(s) or s[i] == close:
            return fields, i
        if not s.startswith(", ", i):
            raise ValueError(f"schema parse error at {i}: {s!r}")
        i += 2


def _parse_type(s: str, i: int):
    if s[i] == "{":
        fields, i = _parse_fields(s, i + 1, "}")
        return ("struct", fields), i + 1
    if s[i] == "[":
        elem, i = _parse_type(s, i + 1)
        if s[i] != "]":
            raise ValueError(f"schema parse error at {i}: {s!r}")
        return ("array", elem), i + 1
    k = i
    while k < len(s) and (s[k].isalnum()):
        k += 1
    return s[i:k], k


class Msg:
    """A message spec: name, flexible-from version (None = never), newest version, fields."""

    __slots__ = ("name", "flex", "max_version", "fields")

    def __init__(self, name: str, flex: int | None, max_version: int, schema: str):
        self.name = name
        self.flex = flex
        self.max_version = max_version
        self.fields = _parse_schema(schema)

    def flexible(self, version: int) -> bool:
        return self.flex is not None and version >= self.flex


# ----------------------------------------------------------------------------------------------
# Primitive reader (big-endian, Kafka's generated-message encoding, reference section 1)

_I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_FIXED = {"int8": _I8, "int16": I16, "uint16": _U16, "int32": _I32, "uint32": _U32,
          "int64": _I64, "float64": _F64}


class Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int, what: str) -> bytes:
        if n > self.end - self.pos:
            raise CorruptDataError(f"{what}: needs {n} byte(s), only {self.end - self.pos} left")
        p = self.pos
        self.pos = p + n
        return self.buf[p:p + n]

    def fixed(self, st: struct.Struct, what: str):
        if st.size > self.end - self.pos:
            raise CorruptDataError(f"{what}: needs {st.size} byte(s), only {self.end - self.pos} left")
        v = st.unpack_from(self.buf, self.pos)[0]
        self.pos += st.size
        return v

    def int16(self, what: str) -> int:
        return self.fixed(I16, what)

    def uvarint(self, what: str) -> int:
        """Kafka's readUnsignedVarint: at most 5 bytes, the result wraps to a Java int."""
        raw = 0
        shift = 0
        buf, end = self.buf, self.end
        while True:
            if self.pos >= end:
                raise CorruptDataError(f"{what}: unsigned varint runs past the end of the data")
            b = buf[self.pos]
            self.pos += 1
            raw |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 28:
                raise CorruptDataError(f"{what}: unsigned varint is too long (more than 5 bytes)")
        raw &= 0xFFFFFFFF
        return raw - (1 << 32) if raw >= 1 << 31 else raw


def _uuid_str(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


def b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


# ----------------------------------------------------------------------------------------------
# Generic message reader


def _length(r: Reader, f: _Field, flex: bool, wide: struct.Struct) -> int | None:
    """A string's, bytes' or array's length (compact varint + 1 when flexible, else ``wide``);
    None for a null, which only a nullable field may be."""
    n = r.uvarint(f.name) - 1 if flex else r.fixed(wide, f.name)
    if n >= 0:
        return n
    if not f.nullable:
        raise CorruptDataError(f"non-nullable field {f.name} was serialized as null")
    return None


def _read_primitive(r: Reader, f: _Field, typ: str, flex: bool):
    what = f.name
    st = _FIXED.get(typ)
    if st is not None:
        return r.fixed(st, what)
    if typ == "bool":
        return r.take(1, what)[0] != 0
    if typ == "uuid":
        return _uuid_str(r.take(16, what))
    if typ == "string":
        n = _length(r, f, flex, I16)
        if n is not None and n > 0x7FFF:
            raise CorruptDataError(f"string field {what} had invalid length {n}")
        return None if n is None else r.take(n, what).decode("utf-8", "replace")
    if typ == "bytes":
        n = _length(r, f, flex, _I32)
        return None if n is None else b64(r.take(n, what))
    raise AssertionError(f"unknown schema type {typ}")  # pragma: no cover - schema bug


def _read_array(r: Reader, f: _Field, sub, version: int, flex: bool):
    n = _length(r, f, flex, _I32)
    if n is None:
        return None
    if n > r.remaining:
        raise CorruptDataError(f"Tried to allocate a collection of size {n}, but there are only "
                               f"{r.remaining} bytes remaining.")
    st = _FIXED.get(sub) if isinstance(sub, str) else None
    if st is None:
        elem = _Field(f.name, sub, False, 0, None, None, _NO_DEFAULT)
        return [_read_value(r, elem, sub, version, flex) for _ in range(n)]
    if n * st.size > r.remaining:
        raise CorruptDataError(f"{f.name}: {n} elements need {n * st.size} bytes, only {r.remaining} left")
    vals = list(struct.unpack_from(f">{n}{st.format[-1]}", r.buf, r.pos)) if n else []
    r.pos += n * st.size
    return vals


def _read_value(r: Reader, f: _Field, typ, version: int, flex: bool, tagged: bool = False):
    if isinstance(typ, str):
        return _read_primitive(r, f, typ, flex)
    kind, sub = typ
    if kind == "array":
        return _read_array(r, f, sub, version, flex)
    # inline struct
    if f.nullable:
        if tagged:
            if r.uvarint(f.name) == 0:
                return None
        elif r.fixed(_I8, f.name) < 0:
            return None
    return read_struct(r, sub, version, flex)


def _default_json(f: _Field, version: int):
    """JSON of a tagged field's default value (for the "omit when default" rule)."""
    if f.default is _EMPTY_STRUCT:
        return {g.json: _default_json(g, version) for g in f.type[1] if g.present(version) and g.tag is None}
    if f.default is not _NO_DEFAULT:
        return f.default
    t = f.type
    if isinstance(t, tuple):
        if t[0] == "array":
            return []
        return {g.json: _default_json(g, version) for g in t[1] if g.present(version) and g.tag is None}
    return {"bool": False, "string": "", "bytes": "", "uuid": "AAAAAAAAAAAAAAAAAAAAAA"}.get(t, 0)  # (Uuid.ZERO_UUID)


def _read_tagged(r: Reader, fields: list[_Field], version: int, flex: bool) -> dict:
    """The tagged fields section of a flexible struct: json name -> value of the known tags."""
    out = {}
    count = r.uvarint("tagged field count")
    if count < 0:
        raise CorruptDataError(f"invalid tagged field count {count}")
    by_tag = {g.tag: g for g in fields if g.tag is not None}
    for _ in range(count):
        tag = r.uvarint("tag")
        size = r.uvarint("tagged field size")
        if size < 0 or size > r.remaining:
            raise CorruptDataError(f"Tag {tag}: size {size} is more than the {r.remaining} bytes left")
        start, end = r.pos, r.pos + size
        f = by_tag.get(tag)
        if f is not None:  # (an unknown tagged field is kept raw by Kafka, never shown)
            if not f.present(version):
                raise CorruptDataError(f"Tag {tag} is not valid for version {version}")
            out[f.json] = _read_value(Reader(r.buf, start, end), f, f.type, version, flex, tagged=True)
        r.pos = end
    return out


def read_struct(r: Reader, fields: list[_Field], version: int, flex: bool) -> dict:
    values = {}
    for f in fields:
        if f.tag is None and f.present(version):
            values[f.json] = _read_value(r, f, f.type, version, flex)
    if not flex:
        return values
    tagged_values = _read_tagged(r, fields, version, flex)
    if not tagged_values and all(f.tag is None for f in fields):
        return values
    out = {}
    for f in fields:  # declaration order; a tagged field only when not its default
        if not f.present(version):
            continue
        if f.tag is None:
            out[f.json] = values[f.json]
        elif f.json in tagged_values and tagged_values[f.json] != _default_json(f, version):
            out[f.json] = tagged_values[f.json]
    return out


def read_message(msg: Msg, buf: bytes, pos: int, version: int, *, exact: bool = False) -> tuple[dict, int]:
    r = Reader(buf, pos)
    data = read_struct(r, msg.fields, version, msg.flexible(version))
    if exact and r.pos != len(buf):
        raise CorruptDataError(f"Found {len(buf) - r.pos} byte(s) of garbage after {msg.name}")
    return data, r.pos
