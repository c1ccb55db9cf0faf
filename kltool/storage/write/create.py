"""``kltool create``: a topic's partition directories with ``partition.metadata``, the way a broker
creates them (settings kept in ``kltool-topics.json``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import BrokerLockHeld, CorruptDataError, UnsafeOperation, UsageError
from ...format import names as fn
from ...format.names import filename_prefix
from ...format.topics import parse_partition_dir_name, validate_topic
from ..fs import LOCK_FILE_NAME, BrokerLock, atomic_write, fsync_dir, held_message, lock_holder_present
from ..topic_config import load_topic_entry
from .appender import topic_partition_dirs
from .writer import LEADER_EPOCH_FILE

__all__ = ["create_topic", "CreateResult", "COLLISION_WARNING", "kraft_log_dir"]

# ------------------------------------------------------------------------------------------------ create


@dataclass
class CreateResult:
    topic: str
    topic_id: str
    logdir: Path
    existed: bool  # the topic had partition directories before
    partitions_before: int
    partitions: int  # the topic's partition count afterwards
    created: list[Path]  # partition directories created (or, in a dry run, to create)
    config: dict[str, str]  # the settings stored for the topic afterwards (overrides only)
    config_changed: bool
    warnings: list[str]
    dry_run: bool


COLLISION_WARNING = ("topic names with a period ('.') or underscore ('_') could collide in Kafka's metric names; "
                     "to avoid issues it is best to use either, but not both")


def _topics_in(logdir: Path) -> set[str]:
    out = set()
    try:
        names = os.listdir(logdir)
    except FileNotFoundError:
        return out
    for name in names:
        try:
            t, _p, kind, _u = parse_partition_dir_name(name)
        except CorruptDataError:
            continue
        if kind is None and (logdir / name).is_dir():
            out.add(t)
    return out


def _existing_topic_id(dirs: dict[int, Path]) -> str | None:
    from ...format.checkpoints import parse_partition_metadata

    for _p, path in sorted(dirs.items()):
        pm = path / fn.PARTITION_METADATA
        try:
            return parse_partition_metadata(pm.read_text(encoding="utf-8"))[1]
        except FileNotFoundError:
            continue
        except (UnicodeDecodeError, CorruptDataError) as e:
            raise CorruptDataError(getattr(e, "message", str(e)), path=pm) from None
    return None


def kraft_log_dir(logdir: Path) -> str | None:
    """Why ``logdir`` belongs to a KRaft node (None when nothing says so). Kafka's ``MetaProperties``:
    ``version=1`` is what ``kafka-storage.sh format`` writes (``cluster.id`` and ``node.id``, KRaft only;
    ZooKeeper-era brokers wrote ``version=0`` with ``broker.id``); a ``__cluster_metadata-0`` directory is the
    KRaft metadata log itself."""
    from ...format.checkpoints import parse_properties
    from ...format.topics import CLUSTER_METADATA_TOPIC_NAME

    meta = logdir / fn.META_PROPERTIES
    try:
        props = parse_properties(meta.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        props = {}
    except (UnicodeDecodeError, CorruptDataError, OSError):
        props = {}
    if props.get("version", "").strip() == "1":
        ids = ", ".join(f"{k} {props[k]}" for k in ("cluster.id", "node.id") if k in props)
        return f"{meta} is KRaft's (version=1{', ' + ids if ids else ''})"
    if (logdir / f"{CLUSTER_METADATA_TOPIC_NAME}-0").is_dir():
        return f"{logdir} holds the KRaft metadata log {CLUSTER_METADATA_TOPIC_NAME}-0"
    return None


def _check_arguments(topic: str, partitions: int, topic_id: str | None) -> None:
    from ...format.checkpoints import encode_partition_metadata, uuid_from_string
    from ...format.topics import CLUSTER_METADATA_TOPIC_NAME

    validate_topic(topic)
    if topic == CLUSTER_METADATA_TOPIC_NAME:
        raise UsageError(f"{topic} is the KRaft metadata log, not a topic")
    if partitions < 1:
        raise UsageError("--partitions must be at least 1")
    if topic_id is not None:
        try:
            uuid_from_string(topic_id)
            encode_partition_metadata(topic_id)
        except ValueError as e:
            raise UsageError(f"invalid topic id {topic_id!r}: {e}") from None


def _make_partition_dirs(logdir: Path, new: list[Path], tid: str) -> None:
    """The new partition directories, each as a broker leaves a never-written partition (see create_topic)."""
    from ...format.checkpoints import encode_partition_metadata

    meta = encode_partition_metadata(tid)
    seg = filename_prefix(0)
    for d in new:
        d.mkdir()
        for name in (f"{seg}.log", f"{seg}.index", f"{seg}.timeindex", LEADER_EPOCH_FILE):
            fd = os.open(d / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        atomic_write(d / fn.PARTITION_METADATA, meta)  # fsyncs the partition directory too
    if new:
        fsync_dir(logdir)


def create_topic(logdir, topic: str, partitions: int, *, config: dict[str, str] | None = None,
                 if_not_exists: bool = False, topic_id: str | None = None, dry_run: bool = False,
                 force: bool = False) -> CreateResult:
    """Create ``topic`` with ``partitions`` partition directories in ``logdir`` (made if missing), or add
    partitions to an existing topic when ``partitions`` is larger than its count. Each new directory gets
    what a broker leaves in a new, never-written partition after a clean shutdown: an empty
    ``00000000000000000000.log`` with empty ``.index``/``.timeindex``, an empty ``leader-epoch-checkpoint``
    and ``partition.metadata`` (``version: 0`` + the topic id, written last). ``config`` (validated
    settings) is merged into ``kltool-topics.json`` (see :mod:`kltool.storage.topic_config`).

    On a KRaft log dir (:func:`kraft_log_dir`) new partition directories are refused (UnsafeOperation) unless
    ``force``: the broker's metadata does not know them, so Kafka 4.x renames them ``-stray`` at start-up
    and serves nothing of them."""
    from ...format.checkpoints import new_topic_id
    from ...format.topics import has_collision, has_collision_chars
    from ..topic_config import save_topic_entry

    logdir = Path(logdir)
    _check_arguments(topic, partitions, topic_id)
    config = dict(config or {})
    warnings = [COLLISION_WARNING] if has_collision_chars(topic) else []
    if logdir.exists() and not logdir.is_dir():
        raise UsageError("not a directory", path=logdir)
    is_new = not logdir.exists() or not any(logdir.iterdir())
    lock = None
    if dry_run:
        if logdir.exists() and lock_holder_present(logdir):
            raise BrokerLockHeld(held_message(logdir / LOCK_FILE_NAME),
                                 path=logdir / LOCK_FILE_NAME)
    else:
        logdir.mkdir(parents=True, exist_ok=True)
        lock = BrokerLock(logdir, create=True if is_new else None).acquire()
    try:
        for other in sorted(_topics_in(logdir)):
            if other != topic and has_collision(topic, other):
                raise UsageError(f"Topic '{topic}' collides with existing topic: {other}", path=logdir)
        dirs = topic_partition_dirs(logdir, topic) if logdir.exists() else {}
        entry = (load_topic_entry(logdir, topic) if logdir.exists() else None) or {}
        stored = dict(entry.get("config", {}))
        before = max(dirs) + 1 if dirs else 0
        existed = bool(dirs)
        tid = _existing_topic_id(dirs) if dirs else None
        if tid is not None and topic_id is not None and tid != topic_id:
            raise UsageError(f"topic {topic} already has topic id {tid}, not {topic_id}")
        tid = tid or topic_id or entry.get("topic_id") or new_topic_id()
        if existed and partitions <= before:
            if not if_not_exists:
                if partitions < before:
                    raise UsageError(f"The number of partitions for a topic can only be increased. Topic {topic} "
                                     f"currently has {before} partitions, {partitions} would not be an increase.")
                raise UsageError(f"Topic '{topic}' already exists (use --if-not-exists to accept that, or a "
                                 f"larger --partitions to add partitions).")
            new = []
        else:
            new = [logdir / f"{topic}-{p}" for p in range(before, partitions)]
        kraft = kraft_log_dir(logdir) if new and not force else None
        if kraft:
            raise UnsafeOperation(
                f"refusing to create {topic}-{before}..{topic}-{partitions - 1}: {kraft}, and a KRaft broker "
                f"treats a partition directory its metadata does not know as stray (renamed -stray, not served); "
                f"create the topic through the broker (kafka-topics.sh --create --topic {topic} --partitions "
                f"{partitions}), stop it, then kltool append; --force creates the directories anyway",
                path=logdir)
        merged = {**stored, **config}
        result = CreateResult(topic, tid, logdir, existed, before, max(partitions, before), new, merged,
                              merged != stored, warnings, dry_run)
        if dry_run:
            return result
        _make_partition_dirs(logdir, new, tid)
        if new or merged != stored:
            save_topic_entry(logdir, topic, partitions=max(partitions, before, int(entry.get("partitions") or 0)),
                             topic_id=tid, config=config)
        return result
    finally:
        if lock is not None:
            lock.release()
