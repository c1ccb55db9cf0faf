"""Decoders for the records of Kafka's internal logs (reference: ``internal-topics.md``).

* ``__consumer_offsets``  -> :func:`decode_consumer_offsets`
* ``__transaction_state`` -> :func:`decode_transaction_state`
* ``__cluster_metadata``  -> :func:`decode_cluster_metadata` (and :func:`decode_raft_control`
  for the values of its control records)

Pure functions: ``bytes`` in, JSON-able ``dict`` out. The ``data`` objects are exactly what
Kafka's generated JSON converters write (camelCase keys in declaration order, uuids as 22-char
base64url, bytes as padded base64, tagged fields only when not default), so the dump can print
the same ``key:`` / ``payload:`` text as ``kafka-dump-log.sh``. Anything that is not what Kafka
writes raises :class:`~kltool.errors.CorruptDataError` and nothing else.

Versions above the newest one known here are read with the newest layout, as Kafka's own
generated readers do (fields with open version ranges are read, closed ranges are not).

Schemas are written below in the field notation of the reference (section 1.5), parsed once at
import time.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable

from ..errors import CorruptDataError

__all__ = [
    "decode_consumer_offsets",
    "decode_transaction_state",
    "decode_cluster_metadata",
    "decode_raft_control",
    "decode_message",
    "decoder_for_topic",
    "DECODERS",
    "TRANSACTION_STATES",
    "METADATA_RECORD_TYPES",
    "OFFSETS_RECORD_TYPES",
]


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


class _Msg:
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
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_FIXED = {"int8": _I8, "int16": _I16, "uint16": _U16, "int32": _I32, "uint32": _U32,
          "int64": _I64, "float64": _F64}


class _Reader:
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
        return self.fixed(_I16, what)

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


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


# ----------------------------------------------------------------------------------------------
# Generic message reader


def _read_value(r: _Reader, f: _Field, typ, version: int, flex: bool, tagged: bool = False):  # noqa: C901
    what = f.name
    if isinstance(typ, str):
        st = _FIXED.get(typ)
        if st is not None:
            return r.fixed(st, what)
        if typ == "bool":
            return r.take(1, what)[0] != 0
        if typ == "uuid":
            return _uuid_str(r.take(16, what))
        if typ == "string":
            n = r.uvarint(what) - 1 if flex else r.int16(what)
            if n < 0:
                if not f.nullable:
                    raise CorruptDataError(f"non-nullable field {what} was serialized as null")
                return None
            if n > 0x7FFF:
                raise CorruptDataError(f"string field {what} had invalid length {n}")
            return r.take(n, what).decode("utf-8", "replace")
        if typ == "bytes":
            n = r.uvarint(what) - 1 if flex else r.fixed(_I32, what)
            if n < 0:
                if not f.nullable:
                    raise CorruptDataError(f"non-nullable field {what} was serialized as null")
                return None
            return _b64(r.take(n, what))
        raise AssertionError(f"unknown schema type {typ}")  # pragma: no cover - schema bug
    kind, sub = typ
    if kind == "array":
        n = r.uvarint(what) - 1 if flex else r.fixed(_I32, what)
        if n < 0:
            if not f.nullable:
                raise CorruptDataError(f"non-nullable field {what} was serialized as null")
            return None
        if n > r.remaining:
            raise CorruptDataError(f"Tried to allocate a collection of size {n}, but there are only "
                                   f"{r.remaining} bytes remaining.")
        if isinstance(sub, str) and sub in _FIXED:
            st = _FIXED[sub]
            if n * st.size > r.remaining:
                raise CorruptDataError(f"{what}: {n} elements need {n * st.size} bytes, only {r.remaining} left")
            if n:
                vals = list(struct.unpack_from(f">{n}{st.format[-1]}", r.buf, r.pos))
            else:
                vals = []
            r.pos += n * st.size
            return vals
        elem = _Field(f.name, sub, False, 0, None, None, _NO_DEFAULT)
        return [_read_value(r, elem, sub, version, flex) for _ in range(n)]
    # inline struct
    if f.nullable:
        if tagged:
            marker = r.uvarint(what)
            if marker == 0:
                return None
        elif r.fixed(_I8, what) < 0:
            return None
    return _read_struct(r, sub, version, flex)


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
    return {"bool": False, "string": "", "bytes": ""}.get(t, 0)


def _read_struct(r: _Reader, fields: list[_Field], version: int, flex: bool) -> dict:  # noqa: C901
    values = {}
    for f in fields:
        if f.tag is None and f.present(version):
            values[f.json] = _read_value(r, f, f.type, version, flex)
    if not flex:
        return values
    tagged_values = {}
    count = r.uvarint("tagged field count")
    if count < 0:
        raise CorruptDataError(f"invalid tagged field count {count}")
    for _ in range(count):
        tag = r.uvarint("tag")
        size = r.uvarint("tagged field size")
        if size < 0 or size > r.remaining:
            raise CorruptDataError(f"Tag {tag}: size {size} is more than the {r.remaining} bytes left")
        start, end = r.pos, r.pos + size
        f = None
        for g in fields:
            if g.tag == tag:
                f = g
                break
        if f is None:  # unknown tagged field: kept raw by Kafka, never shown
            r.pos = end
            continue
        if not f.present(version):
            raise CorruptDataError(f"Tag {tag} is not valid for version {version}")
        sub = _Reader(r.buf, start, end)
        tagged_values[f.json] = _read_value(sub, f, f.type, version, flex, tagged=True)
        r.pos = end
    if not tagged_values and all(f.tag is None for f in fields):
        return values
    out = {}
    for f in fields:
        if not f.present(version):
            continue
        if f.tag is None:
            out[f.json] = values[f.json]
        elif f.json in tagged_values:
            v = tagged_values[f.json]
            if v != _default_json(f, version):
                out[f.json] = v
    return out


def _read_message(msg: _Msg, buf: bytes, pos: int, version: int, *, exact: bool = False) -> tuple[dict, int]:
    r = _Reader(buf, pos)
    data = _read_struct(r, msg.fields, version, msg.flexible(version))
    if exact and r.pos != len(buf):
        raise CorruptDataError(f"Found {len(buf) - r.pos} byte(s) of garbage after {msg.name}")
    return data, r.pos


def decode_message(msg_name: str, data: bytes, version: int) -> dict:
    """Decode one message of a schema below by name (e.g. ``"TopicRecord"``) at ``version``."""
    msg = _BY_NAME.get(msg_name)
    if msg is None:
        raise KeyError(msg_name)
    return _read_message(msg, bytes(data), 0, version)[0]


# ----------------------------------------------------------------------------------------------
# __consumer_offsets (reference section 2)

_TP = "{TopicId:uuid, Partitions:[int32]}"
_PART_META = "[{TopicId:uuid, TopicName:string, NumPartitions:int32, PartitionMetadata:[{Partition:int32, Racks:[string]}]}]"

# record type -> (kltool name, key message, value message or None = not decoded here)
_OFFSETS: dict[int, tuple[str, _Msg, _Msg | None]] = {}


def _offsets(rtype, name, key_name, key_schema, value_name=None, value_flex=0, value_max=0, value_schema=None):
    key = _Msg(key_name, None, rtype, key_schema)
    value = None if value_name is None else _Msg(value_name, value_flex, value_max, value_schema)
    _OFFSETS[rtype] = (name, key, value)


_OCK = "group:string, topic:string, partition:int32"
_OCV = ("offset:int64, leaderEpoch:int32 v3+, metadata:string, commitTimestamp:int64, "
        "expireTimestamp:int64 v1")
_GMV = ("protocolType:string, generation:int32, protocol:string?, leader:string?, "
        "currentStateTimestamp:int64 v2+, members:[{memberId:string, groupInstanceId:string? v3+, "
        "clientId:string, clientHost:string, rebalanceTimeout:int32 v1+, sessionTimeout:int32, "
        "subscription:bytes, assignment:bytes}]")
_offsets(0, "offset_commit", "OffsetCommitKey", _OCK, "OffsetCommitValue", 4, 4, _OCV)
_offsets(1, "offset_commit", "OffsetCommitKey", _OCK, "OffsetCommitValue", 4, 4, _OCV)
_offsets(2, "group_metadata", "GroupMetadataKey", "group:string", "GroupMetadataValue", 4, 4, _GMV)
# KIP-848 consumer groups (new coordinator, Kafka 4.0)
_offsets(3, "consumer_group_metadata", "ConsumerGroupMetadataKey", "GroupId:string",
         "ConsumerGroupMetadataValue", 0, 0, "Epoch:int32")
_offsets(4, "consumer_group_partition_metadata", "ConsumerGroupPartitionMetadataKey", "GroupId:string",
         "ConsumerGroupPartitionMetadataValue", 0, 0, f"Topics:{_PART_META}")
_offsets(5, "consumer_group_member_metadata", "ConsumerGroupMemberMetadataKey",
         "GroupId:string, MemberId:string", "ConsumerGroupMemberMetadataValue", 0, 0,
         "InstanceId:string?, RackId:string?, ClientId:string, ClientHost:string, "
         "SubscribedTopicNames:[string], SubscribedTopicRegex:string?, RebalanceTimeoutMs:int32, "
         "ServerAssignor:string?, ClassicMemberMetadata:{SessionTimeoutMs:int32, "
         "SupportedProtocols:[{Name:string, Metadata:bytes}]}? tag0 ={}")
_offsets(6, "consumer_group_target_assignment_metadata", "ConsumerGroupTargetAssignmentMetadataKey",
         "GroupId:string", "ConsumerGroupTargetAssignmentMetadataValue", 0, 0, "AssignmentEpoch:int32")
_offsets(7, "consumer_group_target_assignment_member", "ConsumerGroupTargetAssignmentMemberKey",
         "GroupId:string, MemberId:string", "ConsumerGroupTargetAssignmentMemberValue", 0, 0,
         f"TopicPartitions:[{_TP}]")
_offsets(8, "consumer_group_current_member_assignment", "ConsumerGroupCurrentMemberAssignmentKey",
         "GroupId:string, MemberId:string", "ConsumerGroupCurrentMemberAssignmentValue", 0, 0,
         f"MemberEpoch:int32, PreviousMemberEpoch:int32, State:int8, AssignedPartitions:[{_TP}], "
         f"PartitionsPendingRevocation:[{_TP}]")
# KIP-932 share groups (early access in 4.0)
_offsets(9, "share_group_partition_metadata", "ShareGroupPartitionMetadataKey", "GroupId:string",
         "ShareGroupPartitionMetadataValue", 0, 0, f"Topics:{_PART_META}")
_offsets(10, "share_group_member_metadata", "ShareGroupMemberMetadataKey", "GroupId:string, MemberId:string",
         "ShareGroupMemberMetadataValue", 0, 0,
         "RackId:string?, ClientId:string, ClientHost:string, SubscribedTopicNames:[string]")
_offsets(11, "share_group_metadata", "ShareGroupMetadataKey", "GroupId:string",
         "ShareGroupMetadataValue", 0, 0, "Epoch:int32")
_offsets(12, "share_group_target_assignment_metadata", "ShareGroupTargetAssignmentMetadataKey",
         "GroupId:string", "ShareGroupTargetAssignmentMetadataValue", 0, 0, "AssignmentEpoch:int32")
_offsets(13, "share_group_target_assignment_member", "ShareGroupTargetAssignmentMemberKey",
         "GroupId:string, MemberId:string", "ShareGroupTargetAssignmentMemberValue", 0, 0,
         f"TopicPartitions:[{_TP}]")
_offsets(14, "share_group_current_member_assignment", "ShareGroupCurrentMemberAssignmentKey",
         "GroupId:string, MemberId:string", "ShareGroupCurrentMemberAssignmentValue", 0, 0,
         f"MemberEpoch:int32, PreviousMemberEpoch:int32, State:int8, AssignedPartitions:[{_TP}]")
_offsets(15, "share_group_state_partition_metadata", "ShareGroupStatePartitionMetadataKey", "GroupId:string",
         "ShareGroupStatePartitionMetadataValue", 0, 0,
         "InitializedTopics:[{TopicId:uuid, TopicName:string, Partitions:[int32]}], "
         "DeletingTopics:[{TopicId:uuid, TopicName:string}]")
# Newer than the reference snapshot (apache/kafka trunk, 4.1+: regex subscriptions, KIP-1071
# streams groups). Still changing upstream: only the key is decoded, the value is kept raw.
_offsets(16, "consumer_group_regular_expression", "ConsumerGroupRegularExpressionKey",
         "GroupId:string, RegularExpression:string")
_offsets(17, "streams_group_metadata", "StreamsGroupMetadataKey", "GroupId:string")
_offsets(18, "streams_group_partition_metadata", "StreamsGroupPartitionMetadataKey", "GroupId:string")
_offsets(19, "streams_group_member_metadata", "StreamsGroupMemberMetadataKey", "GroupId:string, MemberId:string")
_offsets(20, "streams_group_target_assignment_metadata", "StreamsGroupTargetAssignmentMetadataKey",
         "GroupId:string")
_offsets(21, "streams_group_target_assignment_member", "StreamsGroupTargetAssignmentMemberKey",
         "GroupId:string, MemberId:string")
_offsets(22, "streams_group_current_member_assignment", "StreamsGroupCurrentMemberAssignmentKey",
         "GroupId:string, MemberId:string")
_offsets(23, "streams_group_topology", "StreamsGroupTopologyKey", "GroupId:string")
_offsets(24, "streams_group_target_assignment_resolved_topic_ids",
         "StreamsGroupTargetAssignmentResolvedTopicIdsKey", "GroupId:string")

OFFSETS_RECORD_TYPES = {t: (name, key.name, None if value is None else value.name)
                        for t, (name, key, value) in _OFFSETS.items()}

# Embedded consumer protocol (reference 2.4), non-flexible, versions above 3 read as 3.
_SUBSCRIPTION = _Msg("ConsumerProtocolSubscription", None, 3,
                     "Topics:[string], UserData:bytes?, OwnedPartitions:[{Topic:string, Partitions:[int32]}] v1+, "
                     "GenerationId:int32 v2+, RackId:string? v3+")
_ASSIGNMENT = _Msg("ConsumerProtocolAssignment", None, 3,
                   "AssignedPartitions:[{Topic:string, Partitions:[int32]}], UserData:bytes?")


def _consumer_protocol(msg: _Msg, b64: str):
    """Kafka replaces a consumer member's subscription/assignment bytes by their JSON; if the
    parse throws, the base64 string stays."""
    raw = base64.b64decode(b64)
    try:
        r = _Reader(raw)
        version = r.int16("version")
        if version < 0:
            return b64
        return _read_struct(r, msg.fields, min(version, msg.max_version), False)
    except CorruptDataError:
        return b64


def decode_consumer_offsets(key: bytes | None, value: bytes | None) -> dict:
    """Decode one ``__consumer_offsets`` record (skip control batches before calling this).

    Returns ``{"type": <kltool name>, "key": K, "payload": V}`` where ``K`` and ``V`` are what
    ``kafka-dump-log.sh --offsets-decoder`` (Kafka >= 3.8) prints: ``K = {"type": "<record type>",
    "data": {...}}``, ``V = {"version": "<value version>", "data": {...}}`` (both numbers as JSON
    strings, like Kafka), or ``None`` for a tombstone (Kafka prints ``<DELETE>``). The kltool name
    is ``offset_commit``, ``group_metadata``, ``consumer_group_member_metadata`` ...
    For value types not decoded here ``V = {"version": "<v>", "raw": "<base64>"}``.
    An unknown record type gives ``{"type": "unknown", "record_type": N, "key": <base64 of
    the key>, "payload": <base64 of the value> | None}``.
    """
    if key is None:
        raise CorruptDataError("Failed to decode message using offset topic decoder (message had a missing key)")
    key = bytes(key)
    if len(key) < 2:
        raise CorruptDataError(f"Could not read record type from key's buffer: only {len(key)} byte(s)")
    rtype = _I16.unpack_from(key, 0)[0]
    entry = _OFFSETS.get(rtype)
    if entry is None:
        return {"type": "unknown", "record_type": rtype, "key": _b64(key),
                "payload": None if value is None else _b64(bytes(value))}
    name, kmsg, vmsg = entry
    try:
        kdata, _ = _read_message(kmsg, key, 2, rtype)
    except CorruptDataError as e:
        raise CorruptDataError(f"Could not read record with version {rtype} from key's buffer due to: "
                               f"{e.message}.") from None
    out = {"type": name, "key": {"type": str(rtype), "data": kdata}, "payload": None}
    if value is None:
        return out
    value = bytes(value)
    if len(value) < 2:
        raise CorruptDataError(f"Could not read value version from value's buffer: only {len(value)} byte(s)")
    version = _I16.unpack_from(value, 0)[0]
    if version < 0:
        raise CorruptDataError(f"Invalid value version {version} in {name} record")
    if vmsg is None:
        out["payload"] = {"version": str(version), "raw": _b64(value[2:])}
        return out
    try:
        vdata, _ = _read_message(vmsg, value, 2, version)
    except CorruptDataError as e:
        raise CorruptDataError(f"Could not read record with version {version} from value's buffer due to: "
                               f"{e.message}.") from None
    if rtype == 2 and vdata.get("protocolType") == "consumer":
        for m in vdata.get("members") or ():
            m["subscription"] = _consumer_protocol(_SUBSCRIPTION, m["subscription"])
            m["assignment"] = _consumer_protocol(_ASSIGNMENT, m["assignment"])
    out["payload"] = {"version": str(version), "data": vdata}
    return out


# ----------------------------------------------------------------------------------------------
# __transaction_state (reference section 3)

TRANSACTION_STATES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
                      5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}

_TXN_KEY = _Msg("TransactionLogKey", None, 0, "TransactionalId:string")
_TXN_VALUE = _Msg("TransactionLogValue", 1, 1,
                  "ProducerId:int64, PreviousProducerId:int64 v1+ tag0 =-1, NextProducerId:int64 v1+ tag1 =-1, "
                  "ProducerEpoch:int16, TransactionTimeoutMs:int32, TransactionStatus:int8, "
                  "TransactionPartitions:[{Topic:string, PartitionIds:[int32]}]?, "
                  "TransactionLastUpdateTimestampMs:int64, TransactionStartTimestampMs:int64, "
                  "ClientTransactionVersion:int16 v1+ tag2 =0")


def decode_transaction_state(key: bytes | None, value: bytes | None) -> dict:
    """Decode one ``__transaction_state`` record.

    Returns ``{"type": "transaction_metadata", "key": {"version": 0, "data": {"transactionalId":
    ...}}, "payload": {"version": V, "data": {...}} | None, "state": "<name>" | None}``: key and
    payload as Kafka's ``TransactionLogMessageFormatter`` writes them (versions are numbers there);
    ``state`` names ``transactionStatus`` (``Empty``, ``Ongoing``, ``PrepareCommit`` ...;
    ``Unknown(N)`` for an id Kafka does not know). ``payload`` is None for a tombstone; a value
    version Kafka does not know gives ``{"version": V, "data": "unknown"}`` (like the formatter).
    A key version other than 0 gives ``{"type": "unknown", "key_version": v, "key": <base64>,
    "payload": <base64> | None}``.
    """
    if key is None:
        raise CorruptDataError("transaction log record has no key")
    key = bytes(key)
    if len(key) < 2:
        raise CorruptDataError(f"Could not read key version from key's buffer: only {len(key)} byte(s)")
    kver = _I16.unpack_from(key, 0)[0]
    if kver != 0:
        return {"type": "unknown", "key_version": kver, "key": _b64(key),
                "payload": None if value is None else _b64(bytes(value))}
    kdata, _ = _read_message(_TXN_KEY, key, 2, 0)
    out = {"type": "transaction_metadata", "key": {"version": 0, "data": kdata}, "payload": None, "state": None}
    if value is None:
        return out
    value = bytes(value)
    if len(value) < 2:
        raise CorruptDataError(f"Could not read value version from value's buffer: only {len(value)} byte(s)")
    version = _I16.unpack_from(value, 0)[0]
    if not 0 <= version <= _TXN_VALUE.max_version:
        out["payload"] = {"version": version, "data": "unknown"}
        return out
    data, _ = _read_message(_TXN_VALUE, value, 2, version)
    status = data["transactionStatus"]
    out["payload"] = {"version": version, "data": data}
    out["state"] = TRANSACTION_STATES.get(status, f"Unknown({status})")
    return out


# ----------------------------------------------------------------------------------------------
# __cluster_metadata (reference section 4)

_EP = "EndPoints:[{Name:string, Host:string, Port:uint16, SecurityProtocol:int16}]"
_FEAT = "Features:[{Name:string, MinSupportedVersion:int16, MaxSupportedVersion:int16}]"

# api key -> (TYPE, message)
_METADATA: dict[int, tuple[str, _Msg]] = {}


def _meta(api_key: int, type_name: str, msg_name: str, max_version: int, schema: str):
    _METADATA[api_key] = (type_name, _Msg(msg_name, 0, max_version, schema))


_meta(0, "REGISTER_BROKER_RECORD", "RegisterBrokerRecord", 3,
      f"BrokerId:int32, IsMigratingZkBroker:bool v2+, IncarnationId:uuid, BrokerEpoch:int64, {_EP}, {_FEAT}, "
      "Rack:string?, Fenced:bool, InControlledShutdown:bool v1+, LogDirs:[uuid] v3+ tag0 =[]")
_meta(1, "UNREGISTER_BROKER_RECORD", "UnregisterBrokerRecord", 0, "BrokerId:int32, BrokerEpoch:int64")
_meta(2, "TOPIC_RECORD", "TopicRecord", 0, "Name:string, TopicId:uuid")
_meta(3, "PARTITION_RECORD", "PartitionRecord", 2,
      "PartitionId:int32, TopicId:uuid, Replicas:[int32], Isr:[int32], RemovingReplicas:[int32], "
      "AddingReplicas:[int32], Leader:int32, LeaderRecoveryState:int8 tag0 =0, LeaderEpoch:int32, "
      "PartitionEpoch:int32, Directories:[uuid] v1+, EligibleLeaderReplicas:[int32]? v2+ tag1 =null, "
      "LastKnownElr:[int32]? v2+ tag2 =null")
_meta(4, "CONFIG_RECORD", "ConfigRecord", 0, "ResourceType:int8, ResourceName:string, Name:string, Value:string?")
_meta(5, "PARTITION_CHANGE_RECORD", "PartitionChangeRecord", 2,
      "PartitionId:int32, TopicId:uuid, Isr:[int32]? tag0 =null, Leader:int32 tag1 =-2, "
      "Replicas:[int32]? tag2 =null, RemovingReplicas:[int32]? tag3 =null, AddingReplicas:[int32]? tag4 =null, "
      "LeaderRecoveryState:int8 tag5 =-1, Directories:[uuid]? v1+ tag8 =null, "
      "EligibleLeaderReplicas:[int32]? v2+ tag6 =null, LastKnownElr:[int32]? v2+ tag7 =null")
_meta(7, "FENCE_BROKER_RECORD", "FenceBrokerRecord", 0, "Id:int32, Epoch:int64")
_meta(8, "UNFENCE_BROKER_RECORD", "UnfenceBrokerRecord", 0, "Id:int32, Epoch:int64")
_meta(9, "REMOVE_TOPIC_RECORD", "RemoveTopicRecord", 0, "TopicId:uuid")
_meta(10, "DELEGATION_TOKEN_RECORD", "DelegationTokenRecord", 0,
      "Owner:string, Requester:string, Renewers:[string], IssueTimestamp:int64, MaxTimestamp:int64, "
      "ExpirationTimestamp:int64, TokenId:string")
_meta(11, "USER_SCRAM_CREDENTIAL_RECORD", "UserScramCredentialRecord", 0,
      "Name:string, Mechanism:int8, Salt:bytes, StoredKey:bytes, ServerKey:bytes, Iterations:int32")
_meta(12, "FEATURE_LEVEL_RECORD", "FeatureLevelRecord", 0, "Name:string, FeatureLevel:int16")
_meta(14, "CLIENT_QUOTA_RECORD", "ClientQuotaRecord", 0,
      "Entity:[{EntityType:string, EntityName:string?}], Key:string, Value:float64, Remove:bool")
_meta(15, "PRODUCER_IDS_RECORD", "ProducerIdsRecord", 0, "BrokerId:int32, BrokerEpoch:int64, NextProducerId:int64")
_meta(17, "BROKER_REGISTRATION_CHANGE_RECORD", "BrokerRegistrationChangeRecord", 2,
      "BrokerId:int32, BrokerEpoch:int64, Fenced:int8 tag0 =0, InControlledShutdown:int8 v1+ tag1 =0, "
      "LogDirs:[uuid] v2+ tag2 =[]")
_meta(18, "ACCESS_CONTROL_ENTRY_RECORD", "AccessControlEntryRecord", 0,
      "Id:uuid, ResourceType:int8, ResourceName:string, PatternType:int8, Principal:string, Host:string, "
      "Operation:int8, PermissionType:int8")
_meta(19, "REMOVE_ACCESS_CONTROL_ENTRY_RECORD", "RemoveAccessControlEntryRecord", 0, "Id:uuid")
_meta(20, "NO_OP_RECORD", "NoOpRecord", 0, "(none)")
_meta(21, "ZK_MIGRATION_STATE_RECORD", "ZkMigrationStateRecord", 0, "ZkMigrationState:int8")
_meta(22, "REMOVE_USER_SCRAM_CREDENTIAL_RECORD", "RemoveUserScramCredentialRecord", 0,
      "Name:string, Mechanism:int8")
_meta(23, "BEGIN_TRANSACTION_RECORD", "BeginTransactionRecord", 0, "Name:string? tag0 =null")
_meta(24, "END_TRANSACTION_RECORD", "EndTransactionRecord", 0, "(none)")
_meta(25, "ABORT_TRANSACTION_RECORD", "AbortTransactionRecord", 0, "Reason:string? tag0 =null")
_meta(26, "REMOVE_DELEGATION_TOKEN_RECORD", "RemoveDelegationTokenRecord", 0, "TokenId:string")
_meta(27, "REGISTER_CONTROLLER_RECORD", "RegisterControllerRecord", 0,
      f"ControllerId:int32, IncarnationId:uuid, ZkMigrationReady:bool, {_EP}, {_FEAT}")
# Newer than the reference snapshot (apache/kafka trunk).
_meta(28, "CLEAR_ELR_RECORD", "ClearElrRecord", 0, "TopicName:string")
_meta(29, "UNREGISTER_CONTROLLER_RECORD", "UnregisterControllerRecord", 0, "ControllerId:int32")

METADATA_RECORD_TYPES = {k: (t, m.name) for k, (t, m) in _METADATA.items()}


def decode_cluster_metadata(key: bytes | None, value: bytes | None) -> dict:
    """Decode one KRaft metadata record (``__cluster_metadata``, snapshots, ``bootstrap.checkpoint``;
    data records only: control records go to :func:`decode_raft_control`). The key is ignored.

    Returns what ``kafka-dump-log.sh --cluster-metadata-decoder`` prints after ``payload:``:
    ``{"type": "TOPIC_RECORD", "version": 0, "data": {...}}``. An unknown api key gives
    ``{"type": "unknown", "api_key": n, "version": v, "payload": <base64 of the message bytes>}``;
    so does a version newer than known here whose bytes do not fit the newest known layout (then
    with ``"name": "<TYPE>"`` too).
    """
    if value is None:
        raise CorruptDataError("metadata record has a null value")
    value = bytes(value)
    r = _Reader(value)
    frame = r.uvarint("frame version")
    if frame != 1:
        if frame == 0:
            raise CorruptDataError("Could not deserialize metadata record with frame version 0. "
                                   "Note that upgrades from the preview release of KRaft in 2.8 to newer versions "
                                   "are not supported.")
        raise CorruptDataError(f"Could not deserialize metadata record due to unknown frame version {frame}")
    api_key = r.uvarint("api key")
    version = r.uvarint("version")
    if not 0 <= version <= 0x7FFF:
        raise CorruptDataError(f"Invalid metadata record version {version}")
    entry = _METADATA.get(api_key)
    if entry is None:
        return {"type": "unknown", "api_key": api_key, "version": version, "payload": _b64(value[r.pos:])}
    type_name, msg = entry
    try:
        data, _ = _read_message(msg, value, r.pos, version, exact=True)
    except CorruptDataError:
        if version <= msg.max_version:
            raise
        return {"type": "unknown", "name": type_name, "api_key": api_key, "version": version,
                "payload": _b64(value[r.pos:])}
    return {"type": type_name, "version": version, "data": data}


# Raft control records (reference 4.3): values read at version 0, no version prefix.
_CONTROL: dict[int, tuple[str, _Msg | None]] = {
    0: ("ABORT", _Msg("EndTransactionMarker", None, 0, "Version:int16, CoordinatorEpoch:int32")),
    1: ("COMMIT", _Msg("EndTransactionMarker", None, 0, "Version:int16, CoordinatorEpoch:int32")),
    2: ("LEADER_CHANGE", _Msg("LeaderChangeMessage", 0, 1,
                              "Version:int16, LeaderId:int32, Voters:[{VoterId:int32, VoterDirectoryId:uuid v1+}], "
                              "GrantingVoters:[{VoterId:int32, VoterDirectoryId:uuid v1+}]")),
    3: ("SNAPSHOT_HEADER", _Msg("SnapshotHeaderRecord", 0, 0, "Version:int16, LastContainedLogTimestamp:int64")),
    4: ("SNAPSHOT_FOOTER", _Msg("SnapshotFooterRecord", 0, 0, "Version:int16")),
    5: ("KRAFT_VERSION", _Msg("KRaftVersionRecord", 0, 0, "Version:int16, KRaftVersion:int16")),
    6: ("KRAFT_VOTERS", _Msg("VotersRecord", 0, 0,
                             "Version:int16, Voters:[{VoterId:int32, VoterDirectoryId:uuid, "
                             "Endpoints:[{Name:string, Host:string, Port:uint16}], "
                             "KRaftVersionFeature:{MinSupportedVersion:int16, MaxSupportedVersion:int16}}]")),
}


def decode_raft_control(control_type: int, value: bytes | None) -> dict:
    """Decode the value of a control record of type ``control_type`` (the int16 after the key's
    version): ``{"type": "LEADER_CHANGE", "data": {"version": 0, "leaderId": 1, ...}}``.
    Unknown control types give ``{"type": "UNKNOWN", "control_type": n, "payload": <base64>}``."""
    entry = _CONTROL.get(control_type)
    if entry is None:
        return {"type": "UNKNOWN", "control_type": control_type,
                "payload": None if value is None else _b64(bytes(value))}
    if value is None:
        raise CorruptDataError(f"{entry[0]} control record has a null value")
    data, _ = _read_message(entry[1], bytes(value), 0, 0)
    return {"type": entry[0], "data": data}


# ----------------------------------------------------------------------------------------------

_BY_NAME: dict[str, _Msg] = {}
for _name, _k, _v in _OFFSETS.values():
    _BY_NAME[_k.name] = _k
    if _v is not None:
        _BY_NAME[_v.name] = _v
for _t, _m in _METADATA.values():
    _BY_NAME[_m.name] = _m
for _t, _m in _CONTROL.values():
    _BY_NAME[_m.name] = _m
for _m in (_SUBSCRIPTION, _ASSIGNMENT, _TXN_KEY, _TXN_VALUE):
    _BY_NAME[_m.name] = _m

DECODERS: dict[str, Callable[[bytes | None, bytes | None], dict]] = {
    "consumer-offsets": decode_consumer_offsets,
    "transaction-state": decode_transaction_state,
    "cluster-metadata": decode_cluster_metadata,
}

_AUTO = {
    "__consumer_offsets": decode_consumer_offsets,
    "__transaction_state": decode_transaction_state,
    "__cluster_metadata": decode_cluster_metadata,
}


def decoder_for_topic(topic: str) -> Callable[[bytes | None, bytes | None], dict] | None:
    """The decoder ``--decoder auto`` uses for ``topic`` (None for ordinary topics)."""
    return _AUTO.get(topic)
