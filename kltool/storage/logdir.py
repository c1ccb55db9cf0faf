"""A log dir (one ``log.dirs`` entry): its partitions, root checkpoints and marker files.

:func:`open_path` accepts a log dir, a partition directory, a tree holding log dirs (a backup),
or single files, and returns a :class:`Selection`.
"""

from __future__ import annotations

import errno
import fnmatch
import os
from pathlib import Path

from ..errors import CorruptDataError, PathNotFound, PathNotReadable, UsageError
from ..format import names as fn
from ..plain import Plain
from .findings import Finding
from .fs import read_small_file, read_text_file
from .partition import Partition

ROOT_CHECKPOINTS = fn.ROOT_OFFSET_CHECKPOINTS
TOPICS_FILE = "kltool-topics.json"  # (topic_config.CONFIG_FILE_NAME)
ROOT_FILES = set(ROOT_CHECKPOINTS) | {
    fn.META_PROPERTIES, fn.LOCK_FILE, fn.CLEAN_SHUTDOWN_FILE, fn.BOOTSTRAP_CHECKPOINT, TOPICS_FILE,
}
IGNORED_DIRS = {"remote-log-index-cache"}

# The finding kind for a metadata file whose content is not valid, by the file's kind.
_CORRUPT_KIND = {"offset_checkpoint": "checkpoint_corrupt", "leader_epoch_checkpoint": "checkpoint_corrupt",
                 "partition_metadata": "checkpoint_corrupt", "snapshot": "snapshot_corrupt"}


def unreadable(path, e: OSError, what: str = "it was not checked") -> Finding:
    """The finding for a file or directory kltool may not or cannot read (permission, a directory where a
    file belongs, a symlink loop, an I/O error): an error, so that verify exits 1, and the run goes on."""
    reason = {errno.EACCES: "permission denied", errno.EPERM: "permission denied", errno.EISDIR: "is a directory",
              errno.ELOOP: "a symlink loop", errno.ENOTDIR: "not a directory"}.get(e.errno, e.strerror or str(e))
    return Finding("error", "unreadable", str(path), f"cannot read it: {reason}; {what}")


def check_file(path, kind: str) -> Finding | None:
    """Read and parse one metadata file (:func:`~kltool.storage.fs.read_text_file`'s kinds, and
    ``kltool_topics``) and judge it: None when it is valid or missing; else a finding: ``unreadable``,
    ``unknown_version`` (a format version kltool does not read), or ``checkpoint_corrupt`` /
    ``snapshot_corrupt`` / ``metadata_corrupt`` with Kafka's message and the byte position."""
    path = Path(path)
    try:
        if kind == "kltool_topics":
            from .topic_config import read_config_file

            if not path.exists() and not path.is_symlink():
                return None
            read_config_file(path.parent)
        else:
            read_text_file(path, kind)
    except FileNotFoundError:
        return None
    except CorruptDataError as e:
        fkind = "unknown_version" if getattr(e, "unknown_version", False) else _CORRUPT_KIND.get(kind, "metadata_corrupt")
        return Finding("error", fkind, str(path), e.message, position=e.position)
    except OSError as e:
        return unreadable(path, e)
    return None


def partition_file_findings(p: Partition) -> list[Finding]:
    """Findings for a partition's metadata files that verify does not read otherwise (``quorum-state``)."""
    f = check_file(p.path / fn.QUORUM_STATE, "json")
    return [] if f is None else [f]



def _partition_name(name: str):
    from ..format.topics import parse_partition_dir_name

    try:
        return parse_partition_dir_name(name)
    except CorruptDataError:
        return None


def looks_like_partition_dir(path: Path) -> bool:
    if _partition_name(path.name) is None:
        return False
    try:
        for e in os.scandir(path):
            n = e.name
            if fn.SEGMENT_FILE.match(n) or fn.KRAFT_SNAPSHOT.match(n) or n in (fn.PARTITION_METADATA,
                                                                        fn.LEADER_EPOCH_CHECKPOINT):
                return True
    except (NotADirectoryError, PermissionError):
        return False
    return False


class LogDir:
    def __init__(self, path):
        self.path = Path(path)
        self.partitions: list[Partition] = []
        self.unknown_dirs: list[Path] = []
        self.unknown_files: list[Path] = []
        self._checkpoints: dict[str, dict] = {}
        for e in sorted(self.path.iterdir(), key=lambda p: p.name):
            if e.is_dir():
                if e.name in IGNORED_DIRS:
                    continue
                parsed = _partition_name(e.name)
                if parsed is None:
                    self.unknown_dirs.append(e)
                    continue
                topic, part, kind, _uid = parsed
                self.partitions.append(Partition(e, self, topic=topic, partition=part, kind=kind))
            elif e.name not in ROOT_FILES and not e.name.endswith(".tmp"):
                self.unknown_files.append(e)
        self.partitions.sort(key=lambda p: (p.topic, p.partition, p.kind))

    def __repr__(self) -> str:
        return f"LogDir({self.path})"

    @property
    def lock_path(self) -> Path:
        return self.path / fn.LOCK_FILE

    @property
    def clean_shutdown(self) -> bool:
        return (self.path / fn.CLEAN_SHUTDOWN_FILE).exists()

    def checkpoint(self, name: str) -> dict:
        """A root offset checkpoint as {(topic, partition): offset}; {} when missing. CorruptDataError (file
        and byte position) when it is not valid, OSError when it cannot be read."""
        if name not in self._checkpoints:
            try:
                self._checkpoints[name] = read_text_file(self.path / name, "offset_checkpoint")
            except FileNotFoundError:
                self._checkpoints[name] = {}
        return self._checkpoints[name]

    def forget_checkpoint(self, name: str | None = None) -> None:
        """Drop the cached contents of checkpoint ``name`` (every one when None), after a command that
        wrote it, so the next :meth:`checkpoint` reads the file again."""
        if name is None:
            self._checkpoints.clear()
        else:
            self._checkpoints.pop(name, None)

    def meta_properties(self) -> dict | None:
        """``meta.properties`` (None when missing); CorruptDataError when it is not what a broker reads."""
        try:
            return read_text_file(self.path / fn.META_PROPERTIES, "meta_properties")
        except FileNotFoundError:
            return None

    def file_findings(self) -> list[Finding]:
        """Findings for the root's metadata files that verify does not read otherwise: ``meta.properties``,
        ``.kafka_cleanshutdown``, ``kltool-topics.json`` (corrupt, unknown version, unreadable), and the root
        offset checkpoints that cannot be read at all (their content is judged by the caller)."""
        out = [f for f in (check_file(self.path / fn.META_PROPERTIES, "meta_properties"),
                           check_file(self.path / fn.CLEAN_SHUTDOWN_FILE, "json"),
                           check_file(self.path / TOPICS_FILE, "kltool_topics")) if f is not None]
        for name in ROOT_CHECKPOINTS:
            try:
                read_small_file(self.path / name)
            except FileNotFoundError:
                continue
            except OSError as e:
                out.append(unreadable(self.path / name, e))
        return out


def is_log_dir(path: Path) -> bool:
    """A directory with Kafka's root files, or with at least one partition directory."""
    if not path.is_dir():
        return False
    if any((path / n).exists() for n in (fn.META_PROPERTIES, *ROOT_CHECKPOINTS)):
        return True
    try:
        return any(e.is_dir() and looks_like_partition_dir(Path(e.path)) for e in os.scandir(path))
    except PermissionError:
        return False


class Selection(Plain):
    """What a PATH argument named: log dirs, partitions (each possibly inside a log dir), and files."""

    __slots__ = _fields = ("logdirs", "partitions", "files")

    def __init__(self, logdirs: list[LogDir] | None = None, partitions: list[Partition] | None = None,
                 files: list[Path] | None = None):
        self.logdirs = [] if logdirs is None else logdirs
        self.partitions = [] if partitions is None else partitions
        self.files = [] if files is None else files

    def filter(self, topic: str | None = None, partitions: set[int] | None = None) -> Selection:
        ps = [p for p in self.partitions
              if (topic is None or fnmatch.fnmatchcase(p.topic, topic))
              and (partitions is None or p.partition in partitions)]
        return Selection(self.logdirs, ps, self.files)

    def extend(self, other: Selection) -> None:
        for ld in other.logdirs:
            if all(ld.path != x.path for x in self.logdirs):
                self.logdirs.append(ld)
        seen = {p.path for p in self.partitions}
        self.partitions.extend(p for p in other.partitions if p.path not in seen)
        self.files.extend(f for f in other.files if f not in self.files)


def _existing_dir(path) -> Path:
    """``path`` as a Path when it is a readable directory, else the typed error."""
    path = Path(path)
    if not path.exists():
        raise PathNotFound(path)
    if not path.is_dir():
        raise UsageError("not a directory", path=path)
    if not os.access(path, os.R_OK | os.X_OK):
        raise PathNotReadable(path)
    return path


def open_log_dir(path) -> LogDir:
    """A log dir (one ``log.dirs`` entry). Raises :class:`~kltool.errors.PathNotFound` (a UsageError)
    for a missing path."""
    return LogDir(_existing_dir(path))


def open_partition(path) -> Partition:
    """A partition directory (``topic-N``), inside its log dir when its parent is one."""
    path = _existing_dir(path)
    parent = path.parent
    ld = LogDir(parent) if is_log_dir(parent) else None
    if ld is not None:
        for p in ld.partitions:
            if p.path == path:
                return p
    return Partition(path)


def open_path(path, *, max_depth: int = 4) -> Selection:
    """Resolve one PATH argument. Raises UsageError for something that is not Kafka data
    (:class:`~kltool.errors.PathNotFound`, :class:`~kltool.errors.PathNotReadable` for a path that is
    missing or may not be read)."""
    path = Path(path)
    if not path.exists():
        raise PathNotFound(path)
    if path.is_file():
        return Selection(files=[path])
    if not path.is_dir():  # (a FIFO, socket or device: not "permission denied", which sends one to chmod)
        raise UsageError("not a regular file or a directory (a FIFO, socket or device)", path=path)
    if not os.access(path, os.R_OK | os.X_OK):
        raise PathNotReadable(path)
    if path.name in ("", ".."):  # "." or "..": the directory's own name says whether it is a partition
        path = Path(os.path.abspath(path))
    from . import tiered

    remote = None if looks_like_partition_dir(path) or is_log_dir(path) else tiered.open_root(path)
    if remote is not None:  # a tiered-storage root or partition directory (LocalTieredStorage's layout)
        return Selection(partitions=tiered.as_partitions(remote))
    if looks_like_partition_dir(path) or (_partition_name(path.name) is not None and not is_log_dir(path)
                                          and not any(path.iterdir())):
        return Selection(partitions=[open_partition(path)])
    if is_log_dir(path):
        ld = LogDir(path)
        return Selection(logdirs=[ld], partitions=list(ld.partitions))
    # A tree holding log dirs (a backup, several brokers): look a few levels down.
    sel = Selection()
    stack = [(path, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            subdirs = sorted((Path(e.path) for e in os.scandir(d) if e.is_dir()), reverse=True)
        except PermissionError:
            continue
        for s in subdirs:
            if is_log_dir(s):
                ld = LogDir(s)
                sel.logdirs.append(ld)
                sel.partitions.extend(ld.partitions)
            elif depth + 1 < max_depth:
                stack.append((s, depth + 1))
    if not sel.partitions and not sel.logdirs:
        from .aiven import holds_segments

        if holds_segments(path):
            raise UsageError("holds segments of Aiven's tiered-storage plugin: reassemble them first with "
                             f"`kltool tiered-fetch {path} -o DIR`, then read DIR", path=path)
        raise UsageError("not a Kafka log dir, partition directory or segment file", path=path)
    sel.logdirs.sort(key=lambda ld: ld.path)
    sel.partitions.sort(key=lambda p: (p.topic, p.partition, str(p.path)))
    return sel


def open_paths(paths, topic: str | None = None, partitions: set[int] | None = None) -> Selection:
    sel = Selection()
    for p in paths:
        sel.extend(open_path(p))
    from .tiered import merge

    sel.partitions = merge(sel.partitions)
    if topic is not None or partitions is not None:
        sel = sel.filter(topic, partitions)
    return sel
