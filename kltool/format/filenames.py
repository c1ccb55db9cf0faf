"""The names of the files Kafka keeps beside its segments, spelled once (Kafka's own constant names in
the comments). Segment files (``N.log``, ``.index`` ...) are named by :func:`kltool.storage.segment.filename_prefix`."""

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
