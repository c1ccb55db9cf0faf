"""Every file name Kafka uses in a log dir, parsed and formatted here once (Kafka's ``LogFileUtils``; its own
constant names in the comments): segment files (``<20 digits>.log``, ``.index`` ... with their transient
suffixes), KRaft snapshots, tiered (remote) segment copies, and the files beside the segments. Pure
string functions: no file is opened here."""

from __future__ import annotations

import re
from pathlib import PurePath

LOCK_FILE = ".lock"  # LogManager.LockFileName
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"  # LogLoader.CleanShutdownFile
META_PROPERTIES = "meta.properties"  # MetaPropertiesEnsemble.META_PROPERTIES_NAME
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"  # BootstrapDirectory.BINARY_BOOTSTRAP_FILENAME
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"  # LogManager.RecoveryPointCheckpointFile
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"  # LogManager.LogStartOffsetCheckpointFile
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"  # ReplicaManager.HighWatermarkFilename
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # LogCleanerManager.offsetCheckpointFile
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"  # LeaderEpochCheckpointFile.LEADER_EPOCH_CHECKPOINT_FILENAME
PARTITION_METADATA = "partition.metadata"  # PartitionMetadataFile
QUORUM_STATE = "quorum-state"  # FileQuorumStateStore.DEFAULT_FILE_NAME

# The offset checkpoints of a log dir's root, in the order kltool lists them.
ROOT_OFFSET_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT,
                           CLEANER_OFFSET_CHECKPOINT)

SEGMENT_SUFFIXES = ("log", "index", "timeindex", "txnindex")  # the files of one segment
TRANSIENT_SUFFIXES = ("deleted", "cleaned", "swap")  # LogFileUtils.DELETED/CLEANED/SWAP_FILE_SUFFIX

# <offset>.<type>[.<transient suffix>] (Kafka writes 20 digits; any count is read, as Kafka's offsetFromFileName)
SEGMENT_FILE = re.compile(r"^(\d+)\.(log|index|timeindex|txnindex|snapshot)(?:\.(deleted|cleaned|swap))?$")
# <end offset, 20 digits>-<epoch, 10 digits>.checkpoint[.deleted|.part] (KRaft's Snapshots)
KRAFT_SNAPSHOT = re.compile(r"^(\d{20})-(\d{10})\.checkpoint(?:\.(deleted|part))?$")
# a tiered copy: <offset>[-<segment id>].<type> (LocalTieredStorage's RemoteLogSegmentFileset)
REMOTE_SEGMENT_FILE = re.compile(r"^(\d{1,20})(?:-([A-Za-z0-9_\-]+))?\.(log|index|timeindex|txnindex)$")
# the other files of a tiered copy: <offset>-<segment id>.{snapshot,leader_epoch_checkpoint} (RemoteLogSegmentFileset)
REMOTE_SEGMENT_EXTRA = re.compile(r"^(\d{1,20})-([A-Za-z0-9_\-]+)\.(snapshot|leader_epoch_checkpoint)$")
# Aiven's tiered-storage plugin: <20-digit start offset>-<segment id>.{log,indexes,rsm-manifest} (ObjectKeyFactory)
AIVEN_OBJECT = re.compile(r"^(\d{20})-([A-Za-z0-9_\-]{22})\.(log|indexes|rsm-manifest)$")
# LocalTieredStorage's partition directory: <topic>-<partition>-<topic id, 22 base64 characters>
REMOTE_PARTITION_DIR = re.compile(r"^(.+)-(\d+)-[A-Za-z0-9_\-]{22}$")

OFFSET_CHECKPOINTS = frozenset(ROOT_OFFSET_CHECKPOINTS)


def filename_prefix(offset: int) -> str:
    """Kafka's 20-digit zero-padded file-name prefix (LogFileUtils.filenamePrefixFromOffset)."""
    return f"{offset:020d}"


def segment_file(offset: int, kind: str, suffix: str = "") -> str:
    """``<20 digits>.<kind>[.<suffix>]``: the name of a segment's ``kind`` file (log, index, timeindex,
    txnindex, snapshot), with a transient ``suffix`` (deleted, cleaned, swap) when given."""
    return f"{offset:020d}.{kind}" + (f".{suffix}" if suffix else "")


def parse_segment_file(name: str) -> tuple[int, str, str | None] | None:
    """(offset, kind, transient suffix or None) of a segment file name, or None."""
    m = SEGMENT_FILE.match(name)
    return (int(m.group(1)), m.group(2), m.group(3)) if m else None


def kraft_snapshot_header(name: str) -> str | None:
    """What kafka-dump-log prints before the batches of a KRaft snapshot file (``Snapshots.parse``'s
    end offset and epoch; the bootstrap file's own line), or None for another file."""
    if name == BOOTSTRAP_CHECKPOINT:
        return "KRaft bootstrap snapshot"
    m = KRAFT_SNAPSHOT.match(name)
    return None if m is None else f"Snapshot end offset: {int(m.group(1))}, epoch: {int(m.group(2))}"


def classify(path) -> tuple[str, int | None]:
    """(kind, base offset or None) of a single file, by its name. Kinds: log, index, timeindex, txnindex,
    snapshot, kraft_snapshot, offset_checkpoint, leader_epoch_checkpoint, partition_metadata,
    meta_properties, json, unknown."""
    name = PurePath(path).name
    m = SEGMENT_FILE.match(name)
    if m:
        return m.group(2), int(m.group(1))
    m = KRAFT_SNAPSHOT.match(name)
    if m:
        return "kraft_snapshot", int(m.group(1))
    if name == BOOTSTRAP_CHECKPOINT:
        return "kraft_snapshot", 0
    if name in OFFSET_CHECKPOINTS:
        return "offset_checkpoint", None
    if name == LEADER_EPOCH_CHECKPOINT:
        return "leader_epoch_checkpoint", None
    if name == PARTITION_METADATA:
        return "partition_metadata", None
    if name == META_PROPERTIES:
        return "meta_properties", None
    if name in (QUORUM_STATE, CLEAN_SHUTDOWN_FILE):
        return "json", None
    if name.endswith(".log"):
        return "log", None
    return "unknown", None
