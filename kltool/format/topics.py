"""Topic names and partition directory names, by Kafka's rules (``Topic.validate``, ``UnifiedLog.parseTopicPartitionName``).

* ``Topic.validate`` / ``Topic.isValid`` (``clients/.../common/internals/Topic.java``): non-empty, not ``.``
  or ``..``, at most 249 characters, only ``[a-zA-Z0-9._-]``; messages are Kafka's.
* ``Topic.hasCollisionChars`` / ``unifyCollisionChars`` / ``hasCollision``: ``.`` and ``_`` collide in metric names.
* ``LocalLog.parseTopicPartitionName`` / ``logDirName`` / ``logDirNameWithSuffix(CappedLength)``
  (``core/src/main/scala/kafka/log/LocalLog.scala``): ``<topic>-<partition>``, plus the
  ``<topic>-<partition>.<uniqueId>-delete|-future|-stray`` forms.
"""

from __future__ import annotations

import re
import unicodedata
import uuid

from ..errors import CorruptDataError, UsageError

__all__ = [
    "MAX_NAME_LENGTH", "LEGAL_CHARS", "GROUP_METADATA_TOPIC_NAME", "TRANSACTION_STATE_TOPIC_NAME",
    "SHARE_GROUP_STATE_TOPIC_NAME", "CLUSTER_METADATA_TOPIC_NAME", "INTERNAL_TOPICS",
    "DELETE_DIR_SUFFIX", "FUTURE_DIR_SUFFIX", "STRAY_DIR_SUFFIX", "SUFFIX_KINDS",
    "invalid_topic_reason", "is_valid_topic", "validate_topic",
    "has_collision_chars", "unify_collision_chars", "has_collision", "is_internal",
    "parse_partition_dir_name", "partition_dir_name", "suffixed_partition_dir_name", "invalid_dir_message",
]

MAX_NAME_LENGTH = 249
LEGAL_CHARS = "[a-zA-Z0-9._-]"

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"
CLUSTER_METADATA_TOPIC_NAME = "__cluster_metadata"  # the KRaft metadata log (not served as a topic)
# Topic.isInternal: the internal topics a client may see.
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME, SHARE_GROUP_STATE_TOPIC_NAME})

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
SUFFIX_KINDS = ("delete", "future", "stray")
MAX_DIR_NAME_LENGTH = 255  # logDirNameWithSuffixCappedLength

_VALID = re.compile(r"[a-zA-Z0-9._-]*")
# Java's \S is [^ \t\n\x0B\f\r] (ASCII whitespace only, without UNICODE_CHARACTER_CLASS).
_S = r"[^ \t\n\x0b\f\r]"
_SUFFIXED = {kind: re.compile(rf"{_S}+-{_S}+\.{_S}+-{kind}") for kind in SUFFIX_KINDS}


# --------------------------------------------------------------------------------------------- topic names


def invalid_topic_reason(name: str) -> str | None:
    """``Topic.detectInvalidTopic``: why ``name`` is not a legal topic name, or None."""
    if not name:
        return "the empty string is not allowed"
    if name == ".":
        return "'.' is not allowed"
    if name == "..":
        return "'..' is not allowed"
    if _java_length(name) > MAX_NAME_LENGTH:
        return f"the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    if not _VALID.fullmatch(name):
        return f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def is_valid_topic(name: str) -> bool:
    return invalid_topic_reason(name) is None


def validate_topic(name: str, *, prefix: str = "Topic name") -> str:
    """``Topic.validate``: return ``name`` or raise UsageError ``"Topic name is invalid: <reason>"``."""
    reason = invalid_topic_reason(name)
    if reason is not None:
        raise UsageError(f"{prefix} is invalid: {reason}")
    return name


def has_collision_chars(name: str) -> bool:
    """``Topic.hasCollisionChars``: the name contains ``.`` or ``_``."""
    return "_" in name or "." in name


def unify_collision_chars(name: str) -> str:
    """``Topic.unifyCollisionChars``: ``.`` replaced by ``_`` (for the collision check only)."""
    return name.replace(".", "_")


def has_collision(a: str, b: str) -> bool:
    """``Topic.hasCollision``: the two names are equal once ``.`` and ``_`` are unified."""
    return unify_collision_chars(a) == unify_collision_chars(b)


def is_internal(name: str) -> bool:
    """``Topic.isInternal``."""
    return name in INTERNAL_TOPICS


def _java_length(s: str) -> int:
    """``String.length()``: UTF-16 code units."""
    return len(s) + sum(1 for c in s if ord(c) > 0xFFFF)


# ---------------------------------------------------------------------------------- partition directories


def invalid_dir_message(name: str, path=None) -> str:
    """The KafkaException message of ``LocalLog.parseTopicPartitionName`` (``path`` stands for the
    directory's canonical path; the name is used when it is not known)."""
    where = name if path is None else str(path)
    return (f"Found directory {where}, '{name}' is not in the form of topic-partition or "
            "topic-partition.uniqueId-delete (if marked for deletion).\n"
            "Kafka's log directories (and children) should only contain Kafka topic data.")


def _java_parse_int(s: str) -> int | None:
    """``Integer.parseInt(s)`` (radix 10), or None where Java throws NumberFormatException.

    Java accepts one leading ``+``/``-`` and any Unicode decimal digit (``Character.digit``); unlike
    Python's ``int`` it rejects underscores and surrounding whitespace.
    """
    if not s:
        return None
    neg = s[0] == "-"
    body = s[1:] if s[0] in "+-" else s
    if not body:
        return None
    value = 0
    for c in body:
        d = unicodedata.decimal(c, None)
        if d is None:
            return None
        value = value * 10 + d
    value = -value if neg else value
    if not -(2**31) <= value <= 2**31 - 1:
        return None
    return value


def parse_partition_dir_name(name: str, *, path=None) -> tuple[str, int, str | None, str | None]:
    """``LocalLog.parseTopicPartitionName`` → ``(topic, partition, suffix_kind, unique_id)``.

    ``suffix_kind`` is ``"delete"``, ``"future"``, ``"stray"`` or None; ``unique_id`` is the text between
    the last ``.`` and the suffix (32 hex digits when Kafka wrote it). Raises CorruptDataError with
    Kafka's message for a name the broker would refuse (which aborts its startup). The topic part is
    not validated (Kafka does not either; a ``-delete`` name may carry a truncated topic).
    """
    if not name or "-" not in name:
        raise CorruptDataError(invalid_dir_message(name, path), path=path)
    kind = None
    unique_id = None
    base = name
    for k in SUFFIX_KINDS:
        suffix = "-" + k
        if name.endswith(suffix):
            if not _SUFFIXED[k].fullmatch(name):
                raise CorruptDataError(invalid_dir_message(name, path), path=path)
            dot = name.rindex(".")
            kind = k
            unique_id = name[dot + 1 : -len(suffix)]
            base = name[:dot]
            break
    i = base.rfind("-")
    topic = base[:i] if i >= 0 else ""
    part = base[i + 1 :] if i >= 0 else ""
    if not topic or not part:
        raise CorruptDataError(invalid_dir_message(name, path), path=path)
    partition = _java_parse_int(part)
    if partition is None:
        raise CorruptDataError(invalid_dir_message(name, path), path=path)
    return topic, partition, kind, unique_id


def partition_dir_name(topic: str, partition: int) -> str:
    """``LocalLog.logDirName``: ``<topic>-<partition>``."""
    return f"{topic}-{partition}"


def suffixed_partition_dir_name(topic: str, partition: int, kind: str, unique_id: str | None = None) -> str:
    """The name Kafka renames a partition directory to: ``topic-p.<uuid>-delete|-future|-stray``.

    ``-delete`` and ``-stray`` names are capped at 255 characters by truncating the topic
    (``logDirNameWithSuffixCappedLength``); ``-future`` names are not. ``unique_id`` defaults to a
    random UUID without dashes, as Kafka makes it.
    """
    if kind not in SUFFIX_KINDS:
        raise ValueError(f"unknown partition directory suffix {kind!r}")
    if unique_id is None:
        unique_id = uuid.uuid4().hex
    full_suffix = f"-{partition}.{unique_id}-{kind}"
    if kind == "future":
        return topic + full_suffix
    return topic[: max(0, min(len(topic), MAX_DIR_NAME_LENGTH - len(full_suffix)))] + full_suffix
