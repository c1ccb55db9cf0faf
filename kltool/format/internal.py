"""Decoders for the records of Kafka's internal logs (reference: ``internal-topics.md``).

* ``__consumer_offsets``  -> :func:`decode_consumer_offsets`
* ``__transaction_state`` -> :func:`decode_transaction_state`
* ``__cluster_metadata``  -> :func:`decode_cluster_metadata` (and :func:`decode_raft_control`
  for the values of its control records)
* ``__remote_log_metadata`` -> :func:`decode_remote_log_metadata` (tiered storage's topic-based metadata
  manager, KIP-405)

Pure functions: ``bytes`` in, JSON-able ``dict`` out. The ``data`` objects are exactly what
Kafka's generated JSON converters write (camelCase keys in declaration order, uuids as 22-char
base64url, bytes as padded base64, tagged fields only when not default), so the dump can print
the same ``key:`` / ``payload:`` text as ``kafka-dump-log.sh``. Anything that is not what Kafka
writes raises :class:`~kltool.errors.CorruptDataError` and nothing else.

Versions above the newest one known here are read with the newest layout, as Kafka's own
generated readers do (fields with open version ranges are read, closed ranges are not).

The tables below are written in the field notation of :mod:`kltool.format.schema` (the reference's
section 1.5), which parses them once at import time and reads their bytes.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from ..errors import CorruptDataError
from .schema import I16, Msg, Reader, b64, read_message, read_struct

__all__ = [
    "decode_consumer_offsets",
    "decode_transaction_state",
    "decode_cluster_metadata",
    "decode_raft_control",
    "decode_remote_log_metadata",
    "REMOTE_LOG_METADATA_RECORD_TYPES",
    "REMOTE_SEGMENT_STATES",
    "REMOTE_PARTITION_DELETE_STATES",
    "decode_message",
    "decoder_for_topic",
    "DECODERS",
    "TRANSACTION_STATES",
    "METADATA_RECORD_TYPES",
    "OFFSETS_RECORD_TYPES",
]


def _no_int16(buf: bytes, what: str, side: str) -> CorruptDataError:
    """The error for a record's ``side`` (key or value) too short for the int16 at its start that names its
    ``what`` (record type, key version, value version). (Callers test the length inline: a call per record
    would cost the decoders.)"""
    return CorruptDataError(f"Could not read {what} from {side}'s buffer: only {len(buf)} byte(s)")


def decode_message(msg_name: str, data: bytes, version: int) -> dict:
    """Decode one message of a schema below by name (e.g. ``"TopicRecord"``) at ``version``."""
    msg = _BY_NAME.get(msg_name)
    if msg is None:
        raise KeyError(msg_name)
    return read_message(msg, bytes(data), 0, version)[0]


# ----------------------------------------------------------------------------------------------
# __consumer_offsets (reference section 2)

_TP = "{TopicId:uuid, Partitions:[int32]}"
_PART_META = "[{TopicId:uuid, TopicName:string, NumPartitions:int32, PartitionMetadata:[{Partition:int32, Racks:[string]}]}]"

# record type -> (kltool name, key message, value message or None = not decoded here)
_OFFSETS: dict[int, tuple[str, Msg, Msg | None]] = {}


def _offsets(rtype, name, key_name, key_schema, value_name=None, value_flex=0, value_max=0, value_schema=None):
    key = Msg(key_name, None, rtype, key_schema)
    value = None if value_name is None else Msg(value_name, value_flex, value_max, value_schema)
    _OFFSETS[rtype] = (name, key, value)


_OCK = "group:string, topic:string, partition:int32"
_OCV = ("offset:int64, leaderEpoch:int32 v3+, metadata:string, commitTimestamp:int64, "
        "expireTimestamp:int64 v1, topicId:uuid v4+ tag0")  # (topicId: Kafka 4.4, newer than the reference)
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


def _assignments(first: int, kind: str, current: str) -> None:
    """Record types FIRST.. FIRST+2 of a group protocol (consumer groups and share groups have the same three):
    <Kind>GroupTargetAssignmentMetadata, <Kind>GroupTargetAssignmentMember and <Kind>GroupCurrentMemberAssignment
    (value: CURRENT)."""
    k = kind.capitalize()
    _offsets(first, f"{kind}_group_target_assignment_metadata", f"{k}GroupTargetAssignmentMetadataKey",
             "GroupId:string", f"{k}GroupTargetAssignmentMetadataValue", 0, 0, "AssignmentEpoch:int32")
    _offsets(first + 1, f"{kind}_group_target_assignment_member", f"{k}GroupTargetAssignmentMemberKey",
             "GroupId:string, MemberId:string", f"{k}GroupTargetAssignmentMemberValue", 0, 0,
             f"TopicPartitions:[{_TP}]")
    _offsets(first + 2, f"{kind}_group_current_member_assignment", f"{k}GroupCurrentMemberAssignmentKey",
             "GroupId:string, MemberId:string", f"{k}GroupCurrentMemberAssignmentValue", 0, 0, current)


_assignments(6, "consumer", f"MemberEpoch:int32, PreviousMemberEpoch:int32, State:int8, AssignedPartitions:[{_TP}], "
                            f"PartitionsPendingRevocation:[{_TP}]")
# KIP-932 share groups (early access in 4.0)
_offsets(9, "share_group_partition_metadata", "ShareGroupPartitionMetadataKey", "GroupId:string",
         "ShareGroupPartitionMetadataValue", 0, 0, f"Topics:{_PART_META}")
_offsets(10, "share_group_member_metadata", "ShareGroupMemberMetadataKey", "GroupId:string, MemberId:string",
         "ShareGroupMemberMetadataValue", 0, 0,
         "RackId:string?, ClientId:string, ClientHost:string, SubscribedTopicNames:[string]")
_offsets(11, "share_group_metadata", "ShareGroupMetadataKey", "GroupId:string",
         "ShareGroupMetadataValue", 0, 0, "Epoch:int32")
_assignments(12, "share", f"MemberEpoch:int32, PreviousMemberEpoch:int32, State:int8, AssignedPartitions:[{_TP}]")
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
_SUBSCRIPTION = Msg("ConsumerProtocolSubscription", None, 3,
                     "Topics:[string], UserData:bytes?, OwnedPartitions:[{Topic:string, Partitions:[int32]}] v1+, "
                     "GenerationId:int32 v2+, RackId:string? v3+")
_ASSIGNMENT = Msg("ConsumerProtocolAssignment", None, 3,
                   "AssignedPartitions:[{Topic:string, Partitions:[int32]}], UserData:bytes?")


def _consumer_protocol(msg: Msg, b64: str):
    """Kafka replaces a consumer member's subscription/assignment bytes by their JSON; if the
    parse throws, the base64 string stays."""
    raw = base64.b64decode(b64)
    try:
        r = Reader(raw)
        version = r.int16("version")
        if version < 0:
            return b64
        return read_struct(r, msg.fields, min(version, msg.max_version), False)
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
        raise _no_int16(key, "record type", "key")
    rtype = I16.unpack_from(key, 0)[0]
    entry = _OFFSETS.get(rtype)
    if entry is None:
        return {"type": "unknown", "record_type": rtype, "key": b64(key),
                "payload": None if value is None else b64(bytes(value))}
    name, kmsg, vmsg = entry
    try:
        kdata, _ = read_message(kmsg, key, 2, rtype)
    except CorruptDataError as e:
        raise CorruptDataError(f"Could not read record with version {rtype} from key's buffer due to: "
                               f"{e.message}.") from None
    out = {"type": name, "key": {"type": str(rtype), "data": kdata}, "payload": None}
    if value is None:
        return out
    value = bytes(value)
    if len(value) < 2:
        raise _no_int16(value, "value version", "value")
    version = I16.unpack_from(value, 0)[0]
    if version < 0:
        raise CorruptDataError(f"Invalid value version {version} in {name} record")
    if vmsg is None:
        out["payload"] = {"version": str(version), "raw": b64(value[2:])}
        return out
    try:
        vdata, _ = read_message(vmsg, value, 2, version)
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

_TXN_KEY = Msg("TransactionLogKey", None, 0, "TransactionalId:string")
_TXN_VALUE = Msg("TransactionLogValue", 1, 1,
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
        raise _no_int16(key, "key version", "key")
    kver = I16.unpack_from(key, 0)[0]
    if kver != 0:
        return {"type": "unknown", "key_version": kver, "key": b64(key),
                "payload": None if value is None else b64(bytes(value))}
    kdata, _ = read_message(_TXN_KEY, key, 2, 0)
    out = {"type": "transaction_metadata", "key": {"version": 0, "data": kdata}, "payload": None, "state": None}
    if value is None:
        return out
    value = bytes(value)
    if len(value) < 2:
        raise _no_int16(value, "value version", "value")
    version = I16.unpack_from(value, 0)[0]
    if not 0 <= version <= _TXN_VALUE.max_version:
        out["payload"] = {"version": version, "data": "unknown"}
        return out
    data, _ = read_message(_TXN_VALUE, value, 2, version)
    status = data["transactionStatus"]
    out["payload"] = {"version": version, "data": data}
    out["state"] = TRANSACTION_STATES.get(status, f"Unknown({status})")
    return out


# ----------------------------------------------------------------------------------------------
# __cluster_metadata (reference section 4)

_EP = "EndPoints:[{Name:string, Host:string, Port:uint16, SecurityProtocol:int16}]"
_FEAT = "Features:[{Name:string, MinSupportedVersion:int16, MaxSupportedVersion:int16}]"

# api key -> (TYPE, message)
_METADATA: dict[int, tuple[str, Msg]] = {}


def _meta(api_key: int, type_name: str, msg_name: str, max_version: int, schema: str):
    _METADATA[api_key] = (type_name, Msg(msg_name, 0, max_version, schema))


_meta(0, "REGISTER_BROKER_RECORD", "RegisterBrokerRecord", 4,
      f"BrokerId:int32, IsMigratingZkBroker:bool v2+, IncarnationId:uuid, BrokerEpoch:int64, {_EP}, {_FEAT}, "
      "Rack:string?, Fenced:bool, InControlledShutdown:bool v1+, LogDirs:[uuid] v3+ tag0 =[], "
      "CordonedLogDirs:[uuid]? v4+ tag1 =null")  # (v4: Kafka 4.4, newer than the reference)
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
_meta(17, "BROKER_REGISTRATION_CHANGE_RECORD", "BrokerRegistrationChangeRecord", 3,
      "BrokerId:int32, BrokerEpoch:int64, Fenced:int8 tag0 =0, InControlledShutdown:int8 v1+ tag1 =0, "
      "LogDirs:[uuid] v2+ tag2 =[], CordonedLogDirs:[uuid]? v3+ tag3 =null")  # (v3: Kafka 4.4)
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
    return _read_framed(value, "metadata record", _METADATA, version_check=True,
                        frame0="Could not deserialize metadata record with frame version 0. Note that upgrades "
                               "from the preview release of KRaft in 2.8 to newer versions are not supported.")


def _read_framed(value: bytes | None, what: str, table: dict[int, tuple[str, Msg]], *, frame0: str | None = None,
                 version_check: bool = False) -> dict:
    """A record framed as the KRaft metadata records are (unsigned varints: frame version 1, api key, version;
    then the message; ``table``: api key -> (type name, schema)): ``{"type", "version", "data"}``. An unknown
    api key, or a version newer than the schema whose bytes do not fit it, gives ``{"type": "unknown",
    "api_key", "version", "payload": <base64 of the message bytes>}`` (the latter with ``"name"`` too).
    ``what`` names the record in the errors; ``frame0``: the error for frame version 0 when it has one of its
    own; ``version_check``: a version above int16 is an error."""
    if value is None:
        raise CorruptDataError(f"{what} has a null value")
    value = bytes(value)
    r = Reader(value)
    frame = r.uvarint("frame version")
    if frame != 1:
        if frame == 0 and frame0 is not None:
            raise CorruptDataError(frame0)
        raise CorruptDataError(f"Could not deserialize {what} due to unknown frame version {frame}")
    api_key = r.uvarint("api key")
    version = r.uvarint("version")
    if version_check and not 0 <= version <= 0x7FFF:
        raise CorruptDataError(f"Invalid {what} version {version}")
    pos = r.pos
    entry = table.get(api_key)
    if entry is None:
        return {"type": "unknown", "api_key": api_key, "version": version, "payload": b64(value[pos:])}
    type_name, msg = entry
    try:
        data, _ = read_message(msg, value, pos, version, exact=True)
    except CorruptDataError:
        if version <= msg.max_version:
            raise
        return {"type": "unknown", "name": type_name, "api_key": api_key, "version": version,
                "payload": b64(value[pos:])}
    return {"type": type_name, "version": version, "data": data}


# Raft control records (reference 4.3): values read at version 0, no version prefix.
_CONTROL: dict[int, tuple[str, Msg | None]] = {
    0: ("ABORT", Msg("EndTransactionMarker", None, 0, "Version:int16, CoordinatorEpoch:int32")),
    1: ("COMMIT", Msg("EndTransactionMarker", None, 0, "Version:int16, CoordinatorEpoch:int32")),
    2: ("LEADER_CHANGE", Msg("LeaderChangeMessage", 0, 1,
                              "Version:int16, LeaderId:int32, Voters:[{VoterId:int32, VoterDirectoryId:uuid v1+}], "
                              "GrantingVoters:[{VoterId:int32, VoterDirectoryId:uuid v1+}]")),
    3: ("SNAPSHOT_HEADER", Msg("SnapshotHeaderRecord", 0, 0, "Version:int16, LastContainedLogTimestamp:int64")),
    4: ("SNAPSHOT_FOOTER", Msg("SnapshotFooterRecord", 0, 0, "Version:int16")),
    5: ("KRAFT_VERSION", Msg("KRaftVersionRecord", 0, 0, "Version:int16, KRaftVersion:int16")),
    6: ("KRAFT_VOTERS", Msg("VotersRecord", 0, 0,
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
                "payload": None if value is None else b64(bytes(value))}
    if value is None:
        raise CorruptDataError(f"{entry[0]} control record has a null value")
    data, _ = read_message(entry[1], bytes(value), 0, 0)
    return {"type": entry[0], "data": data}


# ----------------------------------------------------------------------------------------------
# __remote_log_metadata (tiered storage, KIP-405: the topic-based RemoteLogMetadataManager; Kafka's
# storage/src/main/resources/message/RemoteLog*Record.json, framed by RemoteLogMetadataSerde as the
# metadata records are: frame version 1, api key, version, message)

_TIP = "TopicIdPartition:{Name:string, Id:uuid, Partition:int32}"
_EPOCHS = "SegmentLeaderEpochs:[{LeaderEpoch:int32, Offset:int64}]"
_REMOTE: dict[int, tuple[str, Msg]] = {
    0: ("REMOTE_LOG_SEGMENT_METADATA_RECORD", Msg("RemoteLogSegmentMetadataRecord", 0, 0,
        f"RemoteLogSegmentId:{{{_TIP}, Id:uuid}}, StartOffset:int64, EndOffset:int64, BrokerId:int32, "
        f"MaxTimestampMs:int64, EventTimestampMs:int64, {_EPOCHS}, SegmentSizeInBytes:int32, "
        "CustomMetadata:bytes?, RemoteLogSegmentState:int8")),
    1: ("REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD", Msg("RemoteLogSegmentMetadataUpdateRecord", 0, 0,
        f"RemoteLogSegmentId:{{{_TIP}, Id:uuid}}, BrokerId:int32, EventTimestampMs:int64, CustomMetadata:bytes?, "
        "RemoteLogSegmentState:int8")),
    2: ("REMOTE_PARTITION_DELETE_METADATA_RECORD", Msg("RemotePartitionDeleteMetadataRecord", 0, 0,
        f"{_TIP}, BrokerId:int32, EventTimestampMs:int64, RemotePartitionDeleteState:int8")),
    3: ("REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_RECORD", Msg("RemoteLogSegmentMetadataSnapshotRecord", 0, 0,
        f"SegmentId:uuid, StartOffset:int64, EndOffset:int64, BrokerId:int32, MaxTimestampMs:int64, "
        f"EventTimestampMs:int64, {_EPOCHS}, SegmentSizeInBytes:int32, CustomMetadata:bytes?, "
        "RemoteLogSegmentState:int8")),
}
REMOTE_LOG_METADATA_RECORD_TYPES = {k: (t, m.name) for k, (t, m) in _REMOTE.items()}
# RemoteLogSegmentState, RemotePartitionDeleteState (storage-api)
REMOTE_SEGMENT_STATES = {0: "COPY_SEGMENT_STARTED", 1: "COPY_SEGMENT_FINISHED", 2: "DELETE_SEGMENT_STARTED",
                         3: "DELETE_SEGMENT_FINISHED"}
REMOTE_PARTITION_DELETE_STATES = {0: "DELETE_PARTITION_MARKED", 1: "DELETE_PARTITION_STARTED",
                                  2: "DELETE_PARTITION_FINISHED"}


def decode_remote_log_metadata(key: bytes | None, value: bytes | None) -> dict:
    """Decode one ``__remote_log_metadata`` record (the key is ignored): ``{"type":
    "REMOTE_LOG_SEGMENT_METADATA_RECORD", "version": 0, "data": {...}, "state": "COPY_SEGMENT_FINISHED"}``
    (``state`` named from the record's state byte). An unknown api key, or a newer version whose bytes do not
    fit the known layout, gives ``{"type": "unknown", "api_key": n, "version": v, "payload": <base64>}``."""
    out = _read_framed(value, "remote log metadata record", _REMOTE)
    data = out.get("data")
    if data is None:
        return out
    if "remotePartitionDeleteState" in data:
        st = data["remotePartitionDeleteState"]
        out["state"] = REMOTE_PARTITION_DELETE_STATES.get(st, f"Unknown({st})")
    else:
        st = data["remoteLogSegmentState"]
        out["state"] = REMOTE_SEGMENT_STATES.get(st, f"Unknown({st})")
    return out


# ----------------------------------------------------------------------------------------------

_BY_NAME: dict[str, Msg] = {}
for _name, _k, _v in _OFFSETS.values():
    _BY_NAME[_k.name] = _k
    if _v is not None:
        _BY_NAME[_v.name] = _v
for _table in (_METADATA, _CONTROL, _REMOTE):
    for _t, _m in _table.values():
        _BY_NAME[_m.name] = _m
for _m in (_SUBSCRIPTION, _ASSIGNMENT, _TXN_KEY, _TXN_VALUE):
    _BY_NAME[_m.name] = _m

# (--decoder name, the internal topic --decoder auto gives it to, decoder)
_DECODER_TABLE: list[tuple[str, str, Callable[[bytes | None, bytes | None], dict]]] = [
    ("consumer-offsets", "__consumer_offsets", decode_consumer_offsets),
    ("transaction-state", "__transaction_state", decode_transaction_state),
    ("cluster-metadata", "__cluster_metadata", decode_cluster_metadata),
    ("remote-log-metadata", "__remote_log_metadata", decode_remote_log_metadata),
]
DECODERS: dict[str, Callable[[bytes | None, bytes | None], dict]] = {n: f for n, _t, f in _DECODER_TABLE}
_AUTO = {t: f for _n, t, f in _DECODER_TABLE}


def decoder_for_topic(topic: str) -> Callable[[bytes | None, bytes | None], dict] | None:
    """The decoder ``--decoder auto`` uses for ``topic`` (None for ordinary topics)."""
    return _AUTO.get(topic)
