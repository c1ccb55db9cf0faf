"""One discovery of segment files, over the local filesystem and pyarrow's (object stores, HDFS): a
directory's entries, by name only (no byte of a segment is read), sorted into the files of a partition
directory as the broker's loader sees them.

:func:`list_dir` lists one directory (local, or inside a pyarrow ``FileSystem``); :func:`classify_dir`
sorts a listing: segment files ``<offset>.log`` with their ``.index``/``.timeindex``/``.txnindex``,
producer snapshots, transient files (``.deleted``/``.cleaned``/``.swap``), tiered-storage copies
``<offset>-<id>.log``, KRaft snapshots, temporary files and the rest. :class:`~kltool.storage.partition.Partition`
(local partitions) and :func:`kltool.storage.uri.list_remote` (the Spark planner's object-store paths) both
read a directory through here, so a file counts as a segment by the same rule everywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..format import names as fn

KNOWN_FILES = frozenset({fn.LEADER_EPOCH_CHECKPOINT, fn.PARTITION_METADATA, fn.QUORUM_STATE})


@dataclass(frozen=True)
class Entry:
    """One directory entry: its name, full path (a local path or a path inside a pyarrow filesystem),
    whether it is a directory, and its size in bytes (None when not listed)."""

    name: str
    path: str
    is_dir: bool = False
    size: int | None = None


@dataclass
class DirListing:
    """A directory's entries, sorted by what they are (each list in name order)."""

    logs: dict[int, Entry] = field(default_factory=dict)  # <offset>.log, by base offset
    duplicate_logs: list[Entry] = field(default_factory=list)  # a second .log name for one base offset
    indexes: list[tuple[int, str, Entry]] = field(default_factory=list)  # (offset, index|timeindex|txnindex, entry)
    snapshots: list[tuple[int, Entry]] = field(default_factory=list)  # <offset>.snapshot
    stale: list[Entry] = field(default_factory=list)  # .deleted / .cleaned / .swap
    tiered: dict[tuple[int, str], Entry] = field(default_factory=dict)  # <offset>-<id>.<kind>: first by name
    kraft_snapshots: list[Entry] = field(default_factory=list)
    known: list[Entry] = field(default_factory=list)  # leader-epoch-checkpoint, partition.metadata, quorum-state
    temp: list[Entry] = field(default_factory=list)  # *.tmp, *.kltool-tmp*
    other: list[Entry] = field(default_factory=list)  # directories and every other file

    def index(self, offset: int, kind: str) -> Entry | None:
        """The ``kind`` index of the segment at ``offset``: its own name, else a tiered copy's."""
        for off, k, e in self.indexes:
            if off == offset and k == kind:
                return e
        return self.tiered.get((offset, kind))

    def segment_logs(self) -> dict[int, Entry]:
        """The ``.log`` of every segment by base offset: a plain name wins over a tiered copy."""
        out = {off: e for (off, kind), e in self.tiered.items() if kind == "log"}
        out.update(self.logs)
        return dict(sorted(out.items()))


def classify_dir(entries) -> DirListing:
    """Sort ``entries`` (:class:`Entry`, any order) into a :class:`DirListing`."""
    out = DirListing()
    for e in sorted(entries, key=lambda e: e.name):
        _classify(out, e)
    return out


def _classify(out: DirListing, e: Entry) -> None:
    if e.is_dir:
        out.other.append(e)
        return
    name = e.name
    seg = fn.parse_segment_file(name)
    if seg is not None:
        off, kind, transient = seg
        if transient:
            out.stale.append(e)
        elif kind == "log":
            if off in out.logs:
                out.duplicate_logs.append(e)
            else:
                out.logs[off] = e
        elif kind == "snapshot":
            out.snapshots.append((off, e))
        else:
            out.indexes.append((off, kind, e))
        return
    m = fn.REMOTE_SEGMENT_FILE.match(name)
    if m:  # a tiered copy (the plain names matched above)
        out.tiered.setdefault((int(m.group(1)), m.group(3)), e)
    elif fn.KRAFT_SNAPSHOT.match(name):
        out.kraft_snapshots.append(e)
    elif name in KNOWN_FILES:
        out.known.append(e)
    elif name.endswith(".tmp") or ".kltool-tmp" in name:
        out.temp.append(e)
    else:
        out.other.append(e)


def list_dir(path, fs=None) -> list[Entry]:
    """The entries of directory ``path``: on the local disk, or inside the pyarrow ``FileSystem``
    ``fs`` (with sizes there; locally a segment's size is its own stat, taken when needed)."""
    if fs is None:
        return [Entry(de.name, os.path.join(path, de.name), _is_dir(de)) for de in os.scandir(path)]
    from pyarrow import fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(str(path)))
    return [entry_of(fi) for fi in infos]


def _is_dir(de) -> bool:
    try:
        return de.is_dir()
    except OSError:  # a symlink loop: a file kltool cannot read, judged by its name
        return False


def entry_of(fi) -> Entry:
    """An :class:`Entry` from a pyarrow ``FileInfo``."""
    from pyarrow import fs as pafs

    is_dir = fi.type == pafs.FileType.Directory
    return Entry(fi.base_name, fi.path, is_dir, None if is_dir else fi.size)


def walk_tree(fs, root: str) -> dict[str, list[Entry]]:
    """Every file under ``root`` inside the pyarrow ``FileSystem`` ``fs`` (one recursive listing, as
    object stores list keys), grouped by directory: {directory path: entries}."""
    from pyarrow import fs as pafs

    by_dir: dict[str, list[Entry]] = {}
    for fi in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if fi.type != pafs.FileType.File:
            continue
        by_dir.setdefault(fi.path.rsplit("/", 1)[0] if "/" in fi.path else "", []).append(entry_of(fi))
    return by_dir
