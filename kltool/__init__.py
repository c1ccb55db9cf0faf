"""kltool: read, verify, repair and write Apache Kafka log directories offline.

The library API (every command is a thin wrapper over these):

>>> import kltool
>>> ld = kltool.open_path("/var/lib/kafka/data")          # a log dir, a partition dir or files
>>> for p in ld.partitions: print(p.name, p.log_end_offset())
"""

__version__ = "0.1.0"


_STORAGE = ("open_path", "open_paths", "open_log_dir", "open_partition", "LogDir", "Partition", "Segment", "walk")
_WRITER = {"create_topic": "create", "Appender": "appender", "AppendOptions": "appender", "PartitionWriter": "writer"}


def __getattr__(name):  # lazy re-exports keep `import kltool` cheap
    if name in _STORAGE:
        from . import storage

        return getattr(storage, name)
    if name in _WRITER:
        import importlib

        return getattr(importlib.import_module(f".storage.{_WRITER[name]}", __name__), name)
    if name in ("decode_records", "parse_header", "build_batch"):
        from . import format as _format

        return getattr(_format, name)
    raise AttributeError(name)
