"""kltool: read, verify, repair and write Apache Kafka log directories offline.

The library API (every command is a thin wrapper over these):

>>> import kltool
>>> ld = kltool.open_path("/var/lib/kafka/data")          # a log dir, a partition dir or files
>>> for p in ld.partitions: print(p.name, p.log_end_offset())
"""

__version__ = "0.1.0"


def __getattr__(name):  # lazy re-exports keep `import kltool` cheap
    if name in ("open_path", "open_log_dir", "open_partition", "LogDir", "Partition", "Segment"):
        from . import storage

        return getattr(storage, name)
    raise AttributeError(name)
