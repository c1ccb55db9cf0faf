"""Text files in a log dir (``OffsetCheckpointFile``, ``LeaderEpochCheckpointFile``, ``PartitionMetadataFile``, ``MetaProperties``): offset checkpoints, ``leader-epoch-checkpoint``,
``partition.metadata``, ``meta.properties``, ``.kafka_cleanshutdown`` and ``quorum-state``.

Parsers take ``str`` or UTF-8 ``bytes`` and follow Kafka's readers (``CheckpointFile``,
``OffsetCheckpointFile``, ``LeaderEpochCheckpointFile``, ``PartitionMetadataReadBuffer``,
``java.util.Properties``), including their error texts. Every error is a ``CorruptDataError`` whose
``position`` is the byte offset of the offending line (its 1-based number is in ``.line``). Messages
name the file only when a ``path`` is passed (Kafka's texts always do; callers usually add the path
to the error instead, via ``KltoolError.at``).
"""

from __future__ import annotations

import base64
import json
import re
import uuid as _uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import CorruptDataError
from .names import CLEAN_SHUTDOWN_FILE, QUORUM_STATE

CHECKPOINT_VERSION = 0  # OffsetCheckpointFile / LeaderEpochCheckpointFile CURRENT_VERSION
PARTITION_METADATA_VERSION = 0
CLEAN_SHUTDOWN_VERSION = 0

ZERO_UUID = bytes(16)
ONE_UUID = bytes(15) + b"\x01"  # Uuid.ONE_UUID = METADATA_TOPIC_ID
RESERVED_UUIDS = frozenset({ZERO_UUID, ONE_UUID})

_LINE_END = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine terminators
_WS = "[ \t\n\x0b\f\r]"  # Java regex \s (ASCII only)
_WS_RUN = re.compile(_WS + "+")
_COLON_WS = re.compile(":" + _WS + "+")

__all__ = [
    "parse_offset_checkpoint", "parse_offset_checkpoint_entries", "encode_offset_checkpoint",
    "parse_leader_epoch_checkpoint", "encode_leader_epoch_checkpoint",
    "parse_partition_metadata", "encode_partition_metadata", "new_topic_id", "uuid_from_string",
    "uuid_to_string", "parse_properties", "encode_properties", "encode_meta_properties",
    "CleanShutdown", "parse_clean_shutdown", "encode_clean_shutdown", "parse_json_file", "parse_meta_properties",
    "parse_quorum_state", "META_PROPERTIES_VERSIONS", "QUORUM_STATE_VERSIONS",
]


# ------------------------------------------------------------------------------------------------- helpers


def _error(message: str, position: int | None, line: int | None = None, *,
           unknown_version: bool = False) -> CorruptDataError:
    """The error of every parser here. ``unknown_version``: the file names a format version this code does
    not read (a newer Kafka's, or a damaged version field), rather than being malformed."""
    err = CorruptDataError(message, position=position)
    err.line = line
    err.unknown_version = unknown_version
    return err


def _text(data: str | bytes | bytearray | memoryview, what: str) -> str:
    if isinstance(data, str):
        return data
    raw = bytes(data)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:  # Java: MalformedInputException
        raise _error(f"Malformed UTF-8 input in {what} (Input length = {e.end - e.start})", e.start) from None


def _java_lines(text: str) -> list[tuple[str, int]]:
    """``BufferedReader.readLine`` lines with the byte offset where each starts."""
    out = []
    pos = start = 0
    for m in _LINE_END.finditer(text):
        line = text[start:m.start()]
        out.append((line, pos))
        pos += len(line.encode("utf-8", "surrogatepass")) + (m.end() - m.start())
        start = m.end()
    if start < len(text):
        out.append((text[start:], pos))
    return out


def _java_split(pattern: re.Pattern, s: str, limit: int = 0) -> list[str]:
    """``Pattern.split(s, limit)`` for limit 0 (drop trailing empties) or a positive limit."""
    if not pattern.search(s):
        return [s]
    parts = pattern.split(s, maxsplit=limit - 1 if limit > 0 else 0)
    if limit == 0:
        while parts and parts[-1] == "":
            parts.pop()
    return parts


def _java_number(s: str, bits: int) -> int:
    """``Integer.parseInt`` (bits=32) / ``Long.parseLong`` (bits=64); raises ValueError with Java's text."""
    body = s[1:] if s[:1] in ("+", "-") else s
    if not body or not body.isdecimal():
        raise ValueError(f'For input string: "{s}"')
    value = int(s)
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise ValueError(f'For input string: "{s}"')
    return value


def _where(kind: str, path: str | None) -> str:
    return f"{kind} [{path}]" if path is not None else kind


# -------------------------------------------------------------------------------------- CheckpointFile framing


def _read_checkpoint(data, fmt, path: str | None) -> list:
    """``CheckpointFile.CheckpointReadBuffer.read`` with ``fmt(line) -> entry | None`` (None = malformed)."""
    text = _text(data, _where("checkpoint file", path))
    lines = _java_lines(text)
    malformed = _where("Malformed line in checkpoint file", path)

    def to_int(i: int) -> int:
        line, pos = lines[i]
        try:
            return _java_number(line, 32)
        except ValueError:
            raise _error(f"{malformed}: {line}", pos, i + 1) from None

    if not lines:
        return []
    version = to_int(0)
    if version != CHECKPOINT_VERSION:
        at = f" in checkpoint file at: {path}" if path is not None else ""
        raise _error(f"Unrecognised version:{version}, expected version: {CHECKPOINT_VERSION}{at}", 0, 1,
                     unknown_version=True)
    if len(lines) < 2:
        return []
    expected = to_int(1)
    if expected < 0:  # new ArrayList<>(expectedSize)
        raise _error(f"Illegal Capacity: {expected}", lines[1][1], 2)
    entries = []
    for i in range(2, len(lines)):
        line, pos = lines[i]
        try:
            entry = fmt(line)
        except ValueError as e:  # NumberFormatException from the formatter
            raise _error(f"{malformed}: {line} (NumberFormatException: {e})", pos, i + 1) from None
        if entry is None:
            raise _error(f"{malformed}: {line}", pos, i + 1)
        entries.append(entry)
    if len(entries) != expected:
        raise _error(f"Expected [{expected}] entries in {_where('checkpoint file', path)}, but found only "
                     f"[{len(entries)}]", len(text.encode("utf-8", "surrogatepass")), len(lines))
    return entries


def _write_checkpoint(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in [str(CHECKPOINT_VERSION), str(len(lines)), *lines])


def _offset_entry(line: str) -> tuple[str, int, int] | None:
    parts = _java_split(_WS_RUN, line)
    if len(parts) != 3:
        return None
    return parts[0], _java_number(parts[1], 32), _java_number(parts[2], 64)


def parse_offset_checkpoint_entries(data, *, path: str | None = None) -> list[tuple[str, int, int]]:
    """``(topic, partition, offset)`` lines in file order, duplicates kept."""
    return _read_checkpoint(data, _offset_entry, path)


def parse_offset_checkpoint(data, *, path: str | None = None) -> dict[tuple[str, int], int]:
    """recovery-point / log-start-offset / replication-offset / cleaner-offset checkpoint →
    ``{(topic, partition): offset}`` (a repeated partition keeps its last value, as Kafka's map does)."""
    return {(t, p): o for t, p, o in parse_offset_checkpoint_entries(data, path=path)}


def _check_topic(topic: str) -> None:
    if not topic or _WS_RUN.search(topic):
        raise ValueError(f"topic {topic!r} cannot be written to a checkpoint file")


def encode_offset_checkpoint(mapping: Mapping[tuple[str, int], int]) -> str:
    """Version 0, count, then ``topic partition offset`` lines sorted by (topic, partition)."""
    for topic, _ in mapping:
        _check_topic(topic)
    return _write_checkpoint([f"{t} {p} {o}" for (t, p), o in sorted(mapping.items())])


def _epoch_entry(line: str) -> tuple[int, int] | None:
    parts = _java_split(_WS_RUN, line)
    if len(parts) != 2:
        return None
    return _java_number(parts[0], 32), _java_number(parts[1], 64)


def parse_leader_epoch_checkpoint(data, *, path: str | None = None) -> list[tuple[int, int]]:
    """``leader-epoch-checkpoint`` → ``[(epoch, start_offset), ...]`` in file order."""
    return _read_checkpoint(data, _epoch_entry, path)


def encode_leader_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> str:
    """Entries are written in the given order (Kafka keeps them ascending)."""
    return _write_checkpoint([f"{e} {o}" for e, o in entries])


# -------------------------------------------------------------------------------------- Uuid, partition.metadata


def uuid_from_string(s: str) -> bytes:
    """``Uuid.fromString``: base64url (padding optional) that decodes to exactly 16 bytes."""
    if len(s) > 24:
        raise ValueError(f"Input string with prefix `{s[:24]}` is too long to be decoded as a base64 UUID")
    m = re.fullmatch(r"([A-Za-z0-9_-]*)(=*)", s)
    if m is None:
        raise ValueError(f"Illegal base64 character in `{s}`")
    body, pad = m.groups()
    if len(body) % 4 == 1 or (pad and (len(pad) > 2 or (len(body) + len(pad)) % 4)):
        raise ValueError(f"Input string `{s}` has a wrong base64 length or padding")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    if len(raw) != 16:
        raise ValueError(f"Input string `{s}` decoded as {len(raw)} bytes, which is not equal to the expected "
                         f"16 bytes of a base64-encoded UUID")
    return raw


def uuid_to_string(raw: bytes) -> str:
    """``Uuid.toString``: 16 bytes → 22-char base64url without padding."""
    if len(raw) != 16:
        raise ValueError("a Uuid has 16 bytes")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def new_topic_id() -> str:
    """``Uuid.randomUuid``: a random v4 UUID, never ZERO/ONE, never one whose string starts with '-'."""
    while True:
        raw = _uuid.uuid4().bytes
        s = uuid_to_string(raw)
        if raw not in RESERVED_UUIDS and not s.startswith("-"):
            return s


def parse_partition_metadata(data, *, path: str | None = None) -> tuple[int, str]:
    """``partition.metadata`` → ``(version, topic_id)`` (``PartitionMetadataReadBuffer.read``)."""
    text = _text(data, _where("partition metadata file", path))
    lines = _java_lines(text)
    malformed = _where("Malformed line in partition metadata file", path)

    def parse_line(i: int, key: str) -> str:
        if i >= len(lines):
            raise _error(f"{malformed}: null", len(text.encode("utf-8", "surrogatepass")), i + 1)
        line, pos = lines[i]
        parts = _java_split(_COLON_WS, line, 2)
        if len(parts) != 2 or parts[0] != key:
            raise _error(f"{malformed}: {line}", pos, i + 1)
        return parts[1]

    value = parse_line(0, "version")
    try:
        version = _java_number(value, 32)
    except ValueError:
        raise _error(f"{malformed}: {lines[0][0]}", 0, 1) from None
    if version < PARTITION_METADATA_VERSION:
        loc = f" ({path})" if path is not None else ""
        raise _error(f"Unrecognized version of partition metadata file{loc}: {version}", 0, 1, unknown_version=True)
    value = parse_line(1, "topic_id")
    try:
        raw = uuid_from_string(value)
    except ValueError as e:
        raise _error(f"{malformed}: {lines[1][0]} ({e})", lines[1][1], 2) from None
    if raw == ZERO_UUID:
        loc = f" ({path})" if path is not None else ""
        raise _error(f"Invalid topic ID in partition metadata file{loc}", lines[1][1], 2)
    return version, uuid_to_string(raw)


def encode_partition_metadata(topic_id: str) -> str:
    """Exactly ``version: 0\\ntopic_id: <id>`` with no trailing newline (``PartitionMetadata.encode``)."""
    if uuid_from_string(topic_id) == ZERO_UUID:
        raise ValueError("the zero Uuid is not a valid topic id")
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id}"


# ------------------------------------------------------------------------------------- java.util.Properties

_PROP_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[tuple[str, int, int]]:
    """``Properties.LineReader``: skip blank and comment lines, join backslash continuations."""
    natural = _java_lines(text)
    i = 0
    while i < len(natural):
        line, pos = natural[i]
        start_no = i + 1
        i += 1
        stripped = line.lstrip(_PROP_WS)
        if not stripped or stripped[0] in "#!":
            continue
        parts = []
        cur = stripped
        while True:
            trailing = len(cur) - len(cur.rstrip("\\"))
            if trailing % 2 == 1:
                parts.append(cur[:-1])
                if i >= len(natural):
                    break
                cur = natural[i][0].lstrip(_PROP_WS)
                i += 1
            else:
                parts.append(cur)
                break
        yield "".join(parts), pos, start_no


def _unescape(s: str, pos: int, line_no: int) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        i += 1
        if c != "\\" or i >= len(s):
            if c != "\\":
                out.append(c)
            continue
        c = s[i]
        i += 1
        if c == "u":
            hexs = s[i:i + 4]
            if len(hexs) < 4 or not all(h in "0123456789abcdefABCDEF" for h in hexs):
                raise _error("Malformed \\uxxxx encoding.", pos, line_no)
            out.append(chr(int(hexs, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def parse_properties(data) -> dict[str, str]:
    """``Properties.load``: ``key=value``, ``key:value`` or ``key value``; ``#``/``!`` comments,
    backslash continuations and escapes. Values keep trailing blanks, like Java's."""
    text = _text(data, "properties file")
    props: dict[str, str] = {}
    for line, pos, line_no in _logical_lines(text):
        key_end = len(line)
        value_start = len(line)
        has_sep = False
        backslash = False
        for k, c in enumerate(line):
            if c in "=:" and not backslash:
                key_end, value_start, has_sep = k, k + 1, True
                break
            if c in _PROP_WS and not backslash:
                key_end, value_start = k, k + 1
                break
            backslash = (c == "\\") and not backslash
        while value_start < len(line):
            c = line[value_start]
            if c not in _PROP_WS:
                if not has_sep and c in "=:":
                    has_sep = True
                else:
                    break
            value_start += 1
        props[_unescape(line[:key_end], pos, line_no)] = _unescape(line[value_start:], pos, line_no)
    return props


META_PROPERTIES_VERSIONS = (0, 1)  # MetaPropertiesVersion: V0 (ZooKeeper), V1 (KRaft)


def parse_meta_properties(data) -> dict[str, str]:
    """``meta.properties`` as the broker reads it (``MetaProperties.Builder``): ``version`` 0 (also when
    missing) or 1, an integer ``node.id`` (v1: required; v0: ``broker.id``, optional), a ``cluster.id`` (v1:
    required). Returns the
    properties; raises CorruptDataError (``unknown_version`` for a version other than 0 and 1)."""
    props = parse_properties(data)
    text = _text(data, "properties file")
    m = re.search(r"[\x00-\x08\x0e-\x1f\x7f]", text)
    if m:  # Kafka writes it as text: a control byte is damage, not a key
        raise _error(f"meta.properties holds a control byte (0x{ord(m.group()):02x})",
                     len(text[:m.start()].encode("utf-8", "surrogatepass")))
    if not props.keys() & {"version", "broker.id", "node.id", "cluster.id"}:
        raise _error("meta.properties holds none of version, broker.id, node.id, cluster.id", 0)

    def where(key: str) -> int:
        m = re.search(r"(?m)^[ \t\f]*" + re.escape(key) + r"[ \t\f]*[=: \t\f]", text)
        return len(text[:m.start()].encode("utf-8", "surrogatepass")) if m else 0

    raw = props.get("version", "0")  # (MetaPropertiesVersion: a missing version is 0)
    try:
        version = _java_number(raw.strip(), 32)
    except ValueError:
        raise _error(f"meta.properties version is not an integer: {raw!r}", where("version")) from None
    if version not in META_PROPERTIES_VERSIONS:
        raise _error(f"Unknown meta.properties version {version} (kltool reads versions 0 and 1)", where("version"),
                     unknown_version=True)
    id_key = "node.id" if version == 1 else "broker.id"
    for key in ("node.id", "broker.id"):
        if key in props:
            try:
                _java_number(props[key].strip(), 32)
            except ValueError:
                raise _error(f"meta.properties {key} is not an integer: {props[key]!r}", where(key)) from None
    if version == 1:
        for key in ("cluster.id", id_key):
            if not props.get(key, "").strip():
                raise _error(f"meta.properties version 1 has no {key}", 0)
    return props


def _escape(s: str, escape_space: bool) -> str:
    """``Properties.saveConvert`` without unicode escapes (``store(Writer, ...)``)."""
    out = []
    for x, c in enumerate(s):
        if c == "\\":
            out.append("\\\\")
        elif c == " ":
            out.append("\\ " if x == 0 or escape_space else " ")
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif c in "=:#!":
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def _java_date(d: datetime) -> str:
    """``Date.toString``: ``EEE MMM dd HH:mm:ss zzz yyyy``."""
    zone = d.tzname() or "UTC"
    return d.strftime(f"%a %b %d %H:%M:%S {zone} %Y")


def encode_properties(props: Mapping[str, str], *, comment: str | None = "", date: datetime | None = None) -> str:
    """``Properties.store(writer, comment)``: ``#comment``, ``#<date>``, then ``key=value`` lines in the
    mapping's order. ``date=None`` writes no date line (keeps output deterministic)."""
    lines = []
    if comment is not None:
        lines.append("#" + comment)
    if date is not None:
        lines.append("#" + _java_date(date))
    lines += [f"{_escape(str(k), True)}={_escape(str(v), False)}" for k, v in props.items()]
    return "".join(line + "\n" for line in lines)


def encode_meta_properties(props: Mapping[str, Any], *, date: datetime | None = None) -> str:
    """``meta.properties`` as Kafka's ``PropertiesUtils.writePropertiesFile`` (``store(writer, "")``)."""
    return encode_properties({k: str(v) for k, v in props.items()}, comment="", date=date)


# ------------------------------------------------------------------------------------- JSON files


def parse_json_file(data, *, what: str = "JSON file") -> Any:
    """Parse a JSON file (``quorum-state``, ``.kafka_cleanshutdown``)."""
    text = _text(data, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        pos = len(text[:e.pos].encode("utf-8", "surrogatepass"))
        raise _error(f"Invalid {what}: {e.msg} (line {e.lineno} column {e.colno})", pos, e.lineno) from None
    except RecursionError:  # `[[[[...`: Python's parser recurses once per level
        raise _error(f"Invalid {what}: nested too deeply", 0, 1) from None


QUORUM_STATE_VERSIONS = (0, 1)  # QuorumStateData's data_version (FileQuorumStateStore)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_quorum_state(data) -> dict:
    """``quorum-state`` (``FileQuorumStateStore``): a JSON object with ``data_version`` 0 or 1 and integer
    ``leaderId``, ``leaderEpoch``, ``votedId``; returns the object."""
    obj = parse_json_file(data, what=QUORUM_STATE)
    if not isinstance(obj, dict):
        raise _error("Invalid quorum-state: not a JSON object", 0, 1)
    version = obj.get("data_version", 0)
    if not _is_int(version):
        raise _error("Invalid quorum-state: data_version is not an integer", 0, 1)
    if version not in QUORUM_STATE_VERSIONS:
        raise _error(f"Unknown quorum-state data_version {version} (kltool reads 0 and 1)", 0, 1,
                     unknown_version=True)
    for key in ("leaderId", "leaderEpoch", "votedId"):
        if key in obj and not _is_int(obj[key]):
            raise _error(f"Invalid quorum-state: {key} is not an integer", 0, 1)
    if "currentVoters" in obj and not (obj["currentVoters"] is None or isinstance(obj["currentVoters"], list)):
        raise _error("Invalid quorum-state: currentVoters is not a list", 0, 1)
    return obj


@dataclass(frozen=True, slots=True)
class CleanShutdown:
    """``.kafka_cleanshutdown`` content; brokers before 3.7 (KIP-966) wrote an empty file: both None."""

    version: int | None
    broker_epoch: int | None


def parse_clean_shutdown(data) -> CleanShutdown:
    text = _text(data, CLEAN_SHUTDOWN_FILE)
    if not text.strip():
        return CleanShutdown(None, None)
    obj = parse_json_file(text, what=CLEAN_SHUTDOWN_FILE)
    if not isinstance(obj, dict):
        raise _error("Invalid .kafka_cleanshutdown: not a JSON object", 0, 1)
    version, epoch = obj.get("version", 0), obj.get("brokerEpoch")
    if not isinstance(version, int) or isinstance(version, bool) or not (
            epoch is None or (isinstance(epoch, int) and not isinstance(epoch, bool))):
        raise _error("Invalid .kafka_cleanshutdown: version and brokerEpoch must be integers", 0, 1)
    if version != CLEAN_SHUTDOWN_VERSION:
        raise _error(f"Unknown .kafka_cleanshutdown version {version} (kltool reads {CLEAN_SHUTDOWN_VERSION})", 0, 1,
                     unknown_version=True)
    return CleanShutdown(version, epoch)


def encode_clean_shutdown(broker_epoch: int, version: int = CLEAN_SHUTDOWN_VERSION) -> str:
    """What ``CleanShutdownFileHandler.write`` writes (Jackson, no whitespace, no newline)."""
    return json.dumps({"version": version, "brokerEpoch": broker_epoch}, separators=(",", ":"))
