"""kltool: read, verify, repair and write Apache Kafka log directories offline.

The library API (every command is a thin wrapper over these); start from :class:`Logs`:

>>> import kltool
>>> logs = kltool.Logs("/var/lib/kafka/data")      # a log dir, partition dirs, a tree of log dirs
>>> logs.verify().clean                            # kltool verify
>>> logs.repair(dry_run=True).plan.actions         # kltool verify --repair --dry-run
>>> logs.retention(retention_ms=7 * 86400_000)     # kltool retention --dry-run (a plan)
>>> logs.compact()                                # kltool compact --dry-run (a plan); dry_run=False applies it
>>> for r in logs.records(topic="orders", from_offset=100): ...
>>> kltool.verify("/var/lib/kafka/data").clean          # one call each: verify, repair, retention, compact, restore

Lower down: ``open_path``/``open_log_dir``/``open_partition`` give the storage objects (``LogDir``,
``Partition``, ``Segment``), ``walk`` the batch walker, ``decode_records`` a batch's records (all at once),
``record_groups`` / ``records_of`` a batch of any size a bounded group of records at a time. Every
error a caller can cause is a :class:`KltoolError`. ``dir(kltool)`` lists all of it; importing kltool
loads none of it until first use.
"""

__version__ = "0.1.0"

# name -> module that defines it (imported on first use: `import kltool` stays cheap)
_EXPORTS = {
    "Logs": "api", "VerifyReport": "api", "verify": "api", "repair": "api", "retention": "api", "compact": "api",
    "restore": "api",
    "KltoolError": "errors", "CorruptDataError": "errors", "UsageError": "errors", "PathNotFound": "errors",
    "PathNotReadable": "errors", "BrokerLockHeld": "errors", "UnsafeOperation": "errors",
    "open_path": "storage.logdir", "open_paths": "storage.logdir", "open_log_dir": "storage.logdir",
    "open_partition": "storage.logdir", "LogDir": "storage.logdir", "Selection": "storage.logdir",
    "Partition": "storage.partition", "Segment": "storage.segment", "walk": "storage.scan",
    "Damage": "storage.scan", "records_of": "storage.scan", "records": "storage.read", "RecordFilter": "storage.read",
    "LogRecord": "storage.read",
    "create_topic": "storage.write.create", "Appender": "storage.write.appender", "AppendOptions": "storage.write.appender",
    "PartitionWriter": "storage.write.writer",
    "decode_records": "format", "record_groups": "format", "parse_header": "format", "build_batch": "format",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'kltool' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
