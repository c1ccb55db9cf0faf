"""Files on disk: log dirs, partitions, segments, the batch walker, locks and atomic writes.
Nothing here prints."""

from .logdir import LogDir, Selection, open_log_dir, open_partition, open_path, open_paths
from .partition import Partition
from .scan import Damage, walk
from .segment import Segment

__all__ = ["LogDir", "Selection", "Partition", "Segment", "Damage", "walk", "open_path", "open_paths",
           "open_log_dir", "open_partition"]
