"""Topic settings that kltool uses when it writes (``segment.bytes``, ``index.interval.bytes`` ...), and
where they live: ``<logdir>/kltool-topics.json``.

Why there
---------
A broker keeps topic configs in its metadata (KRaft ``__cluster_metadata`` or ZooKeeper), never in the log
dir, so an offline tool needs a place of its own that no broker reads and that no broker trips over:

* **not a directory**: every sub-directory of a log dir must parse as ``topic-partition`` or the broker
  refuses to start (``UnifiedLog.parseTopicPartitionName``);
* **not inside a partition directory**: the broker ignores unknown files there, but they travel with the
  partition (reassignment, copies) and ``kltool verify`` reports them as ``unknown_file``;
* **one file at the log dir root**: ``LogManager.loadLogs`` only looks at the root's sub-directories, so a
  root file is invisible to the broker; it is written atomically (temp file, fsync, rename, fsync dir)
  and only by ``kltool create`` (under the broker's ``.lock``).

Format (JSON, UTF-8, sorted keys)::

    {"version": 1,
     "topics": {"orders": {"partitions": 3, "topic_id": "Ck1TLvXHQzS9oAZVDYPoQw",
                           "config": {"segment.bytes": "1048576", "cleanup.policy": "delete"}}}}

``config`` holds only what was set (strings, as Kafka's configs are given); everything else takes Kafka's
default (:data:`DEFAULTS`). A missing file or topic means "all defaults". ``partitions`` is the count
given to ``kltool create``: a log dir of a multi-broker cluster may hold only some of a topic's
partitions, and the key partitioner needs the real count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptDataError, UsageError
from .fs import atomic_write, read_small_file

__all__ = [
    "CONFIG_FILE_NAME", "DEFAULTS", "INTERNAL_TOPIC_DEFAULTS", "TopicConfig", "parse_config_items", "validate_config",
    "read_config_file", "load_topic_entry", "load_topic_config", "save_topic_entry",
]

CONFIG_FILE_NAME = "kltool-topics.json"
FILE_VERSION = 1

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)

# Kafka's defaults (LogConfig / ServerLogConfigs), as strings like Kafka shows them.
DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "index.interval.bytes": "4096",
    "max.compaction.lag.ms": str(LONG_MAX),
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.ms": "604800000",
}

# What the broker creates its internal topics with (GroupCoordinator.offsetsTopicConfigs,
# TransactionStateManager.transactionTopicConfigs: offsets/transaction.state.log.segment.bytes = 100 MiB).
INTERNAL_TOPIC_DEFAULTS: dict[str, dict[str, str]] = {
    "__consumer_offsets": {"cleanup.policy": "compact", "segment.bytes": "104857600"},
    "__transaction_state": {"cleanup.policy": "compact", "segment.bytes": "104857600"},
}

_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _int_range(lo: int, hi: int, *, extra: tuple[int, ...] = ()):
    def check(key: str, value: str) -> str:
        v = value.strip()
        body = v[1:] if v[:1] in "+-" else v
        if not body.isdecimal():
            raise UsageError(f"invalid value {value!r} for configuration {key}: not a number")
        n = int(v)
        if not (lo <= n <= hi or n in extra):
            bound = f"at least {lo}" if hi in (INT_MAX, LONG_MAX) else f"in [{lo}, {hi}]"
            if extra:
                bound += " or " + ", ".join(map(str, extra))
            raise UsageError(f"invalid value {value!r} for configuration {key}: must be {bound}")
        return str(n)

    return check


def _choice(*options: str):
    def check(key: str, value: str) -> str:
        v = value.strip()
        if v not in options:
            raise UsageError(f"invalid value {value!r} for configuration {key}: must be one of {', '.join(options)}")
        return v

    return check


def _ratio(key: str, value: str) -> str:
    try:
        v = float(value.strip())
    except ValueError:
        v = -1.0
    if not 0.0 <= v <= 1.0:
        raise UsageError(f"invalid value {value!r} for configuration {key}: must be a number in [0, 1]")
    return str(v)


def _policy(key: str, value: str) -> str:
    items = [x.strip() for x in value.split(",") if x.strip()]
    if not items or any(x not in ("compact", "delete") for x in items):
        raise UsageError(f"invalid value {value!r} for configuration {key}: a list of compact, delete")
    return ",".join(dict.fromkeys(items))


# LogConfig's validators (ConfigDef ranges and valid values).
_VALIDATORS = {
    "cleanup.policy": _policy,
    "compression.type": _choice(*_COMPRESSION_TYPES),
    "compression.gzip.level": _int_range(1, 9, extra=(-1,)),
    "compression.lz4.level": _int_range(1, 17),
    "compression.zstd.level": _int_range(-131072, 22),
    "delete.retention.ms": _int_range(0, LONG_MAX),
    "index.interval.bytes": _int_range(0, INT_MAX),
    "max.compaction.lag.ms": _int_range(1, LONG_MAX),
    "max.message.bytes": _int_range(0, INT_MAX),
    "message.timestamp.type": _choice("CreateTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": _ratio,
    "min.compaction.lag.ms": _int_range(0, LONG_MAX),
    "retention.bytes": _int_range(LONG_MIN, LONG_MAX),
    "retention.ms": _int_range(-1, LONG_MAX),
    "segment.bytes": _int_range(14, INT_MAX),
    "segment.index.bytes": _int_range(4, INT_MAX),
    "segment.ms": _int_range(1, LONG_MAX),
}
assert set(_VALIDATORS) == set(DEFAULTS)


def validate_config(key: str, value: str) -> str:
    """Check one setting by Kafka's rules; returns the normalised value. UsageError otherwise."""
    check = _VALIDATORS.get(key)
    if check is None:
        raise UsageError(f"unknown or unsupported topic configuration {key!r}; kltool uses: "
                         + ", ".join(sorted(DEFAULTS)))
    return check(key, str(value))


def parse_config_items(items) -> dict[str, str]:
    """``["segment.bytes=1048576", ...]`` (``--config``) → validated ``{key: value}``."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--config takes key=value, not {item!r}")
        out[key] = validate_config(key, value)
    return out


@dataclass
class TopicConfig:
    """The settings of one topic: Kafka's defaults (``defaults``: those of the internal topics differ)
    overridden by what ``kltool create --config`` stored (``overrides``)."""

    overrides: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, str] = field(default_factory=dict)

    def get(self, key: str) -> str:
        v = self.overrides.get(key)
        if v is None:
            v = self.defaults.get(key)
        return DEFAULTS[key] if v is None else v

    def _int(self, key: str) -> int:
        return int(self.get(key))

    @property
    def segment_bytes(self) -> int:
        return self._int("segment.bytes")

    @property
    def segment_ms(self) -> int:
        return self._int("segment.ms")

    @property
    def max_segment_ms(self) -> int:
        """``UnifiedLog``'s roll time: min(max.compaction.lag.ms, segment.ms) for compacted topics."""
        if self.compact:
            return min(self._int("max.compaction.lag.ms"), self.segment_ms)
        return self.segment_ms

    @property
    def index_interval_bytes(self) -> int:
        return self._int("index.interval.bytes")

    @property
    def segment_index_bytes(self) -> int:
        return self._int("segment.index.bytes")

    @property
    def max_message_bytes(self) -> int:
        return self._int("max.message.bytes")

    @property
    def log_append_time(self) -> bool:
        return self.get("message.timestamp.type") == "LogAppendTime"

    @property
    def retention_ms(self) -> int:
        return self._int("retention.ms")

    @property
    def retention_bytes(self) -> int:
        return self._int("retention.bytes")

    @property
    def cleanup_policy(self) -> list[str]:
        return self.get("cleanup.policy").split(",")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def compression_type(self) -> str:
        return self.get("compression.type")

    def compression_level(self, codec: str) -> int | None:
        """The topic's level for ``codec`` (gzip, lz4, zstd), or None (snappy, none)."""
        key = f"compression.{codec}.level"
        return self._int(key) if key in DEFAULTS else None

    def as_dict(self) -> dict[str, str]:
        """Every setting kltool uses, defaults included."""
        return {k: self.get(k) for k in sorted(DEFAULTS)}


# ----------------------------------------------------------------------------------------------- the file


def config_path(logdir) -> Path:
    return Path(logdir) / CONFIG_FILE_NAME


def read_config_file(logdir) -> dict:
    """The whole file as ``{"version": 1, "topics": {...}}``; an empty one when it does not exist."""
    path = config_path(logdir)
    try:
        text = read_small_file(path).decode("utf-8")
    except FileNotFoundError:
        return {"version": FILE_VERSION, "topics": {}}
    except UnicodeDecodeError as e:
        raise CorruptDataError("not UTF-8 text", path=path, position=e.start) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CorruptDataError(f"invalid JSON: {e.msg}", path=path,
                               position=len(text[:e.pos].encode("utf-8", "surrogatepass"))) from None
    except RecursionError:
        raise CorruptDataError("invalid JSON: nested too deeply", path=path, position=0) from None
    if not isinstance(data, dict) or not isinstance(data.get("topics"), dict):
        raise CorruptDataError('expected an object with "version" and "topics"', path=path)
    if data.get("version") != FILE_VERSION:
        err = CorruptDataError(f"unsupported version {data.get('version')!r} (kltool reads version {FILE_VERSION})",
                               path=path)
        err.unknown_version = True
        raise err
    for topic, entry in data["topics"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("config", {}), dict):
            raise CorruptDataError(f"topic {topic!r}: expected an object with a \"config\" object", path=path)
        n = entry.get("partitions")
        if n is not None and (type(n) is not int or n < 1):
            raise CorruptDataError(f"topic {topic!r}: \"partitions\" must be a positive integer, not {n!r}", path=path)
        if not isinstance(entry.get("topic_id", ""), str):
            raise CorruptDataError(f"topic {topic!r}: \"topic_id\" must be a string", path=path)
        for k, v in entry.get("config", {}).items():
            try:
                validate_config(k, str(v))
            except UsageError as e:
                raise CorruptDataError(f"topic {topic!r}: {e.message}", path=path) from None
    return data


def load_topic_entry(logdir, topic: str) -> dict | None:
    """``{"partitions": N, "topic_id": ..., "config": {...}}`` for ``topic``, or None."""
    return read_config_file(logdir)["topics"].get(topic)


def load_topic_config(logdir, topic: str) -> TopicConfig:
    """The settings kltool applies to ``topic`` in ``logdir`` (defaults when nothing is stored)."""
    entry = load_topic_entry(logdir, topic) or {}
    return TopicConfig({k: str(v) for k, v in entry.get("config", {}).items()},
                       dict(INTERNAL_TOPIC_DEFAULTS.get(topic, {})))


def save_topic_entry(logdir, topic: str, *, partitions: int | None = None, topic_id: str | None = None,
                     config: dict[str, str] | None = None) -> None:
    """Record ``topic``'s partition count, id and settings (``config`` is merged into what is stored).
    The caller holds the broker lock."""
    data = read_config_file(logdir)
    entry = data["topics"].setdefault(topic, {})
    if partitions is not None:
        entry["partitions"] = partitions
    if topic_id is not None:
        entry["topic_id"] = topic_id
    merged = dict(entry.get("config", {}))
    merged.update(config or {})
    entry["config"] = dict(sorted(merged.items()))
    data["topics"] = dict(sorted(data["topics"].items()))
    atomic_write(config_path(logdir), json.dumps(data, indent=2, sort_keys=False) + "\n")
