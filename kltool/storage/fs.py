"""Safe file writes and the broker's ``.lock`` (``LogManager.lockLogDirs``, ``FileLock``; ``Utils.atomicMoveWithFallback`` for the writes).

* :func:`atomic_write`: temp file in the same directory, fsync, ``os.replace``, fsync the directory, so a
  crash leaves either the old or the new content (never a torn file).
* :class:`BrokerLock`: the running broker holds ``FileChannel.tryLock()`` on ``<logdir>/.lock``; on Linux
  that is a POSIX (fcntl) record lock, which ``fcntl.lockf`` conflicts with (``flock`` would not).

POSIX record locks belong to the *process*: a second lock by the same process on the same file always
succeeds, and closing *any* descriptor of the file drops all of the process's locks on it. This module
therefore keeps one descriptor per locked file per process (re-entrant, counted) and never opens
and closes a second descriptor on a file it holds.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from pathlib import Path

from ..errors import BrokerLockHeld, CorruptDataError, UnsafeOperation, UsageError
from ..format import index as fidx
from ..format import names as fn
from ..format.topics import parse_partition_dir_name

__all__ = [
    "LOCK_FILE_NAME", "TMP_SUFFIX", "atomic_write", "fsync_dir", "copy_range",
    "BrokerLock", "lock_holder_present", "looks_like_log_dir",
    "METADATA_MAX_BYTES", "read_small_file", "read_index_file", "FileBytes", "INDEX_READ_WHOLE",
    "read_snapshot", "snapshot_entries",
]

LOCK_FILE_NAME = fn.LOCK_FILE
TMP_SUFFIX = ".kltool-tmp"
_CHUNK = 4 << 20

# Files that only a Kafka log dir root holds (``LogManager``'s checkpoint files, ``meta.properties``).
_ROOT_MARKERS = (fn.META_PROPERTIES, *fn.ROOT_OFFSET_CHECKPOINTS, fn.CLEAN_SHUTDOWN_FILE, fn.BOOTSTRAP_CHECKPOINT)


def tmp_path_for(path) -> Path:
    """``<dir>/.<name>.kltool-tmp``: where :func:`atomic_write` stages ``path``."""
    p = Path(path)
    return p.with_name(f".{p.name}{TMP_SUFFIX}")


def fsync_dir(path) -> None:
    """fsync a directory, so that renames and new entries in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data) -> None:
    mv = memoryview(data)
    while mv:
        n = os.write(fd, mv)
        mv = mv[n:]


@contextlib.contextmanager
def staged(path, *, mode: int = 0o644, like: os.stat_result | None = None, like_mode: bool = True):
    """Write a replacement for ``path`` safely: yields ``(fd, tmp_path)`` of a fresh temporary file
    beside it; on success the file is fsynced, renamed over ``path`` and the directory fsynced; on
    any exception the temporary file is removed and ``path`` is untouched. With ``like`` (a stat
    result) the file gets that owner (and with ``like_mode`` those permissions) before the rename."""
    path = Path(path)
    tmp = tmp_path_for(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        try:
            os.fchmod(fd, like.st_mode & 0o7777 if like is not None and like_mode else mode)
            if like is not None:
                try:
                    os.fchown(fd, like.st_uid, like.st_gid)
                except OSError:
                    pass  # not permitted (not root): the file keeps the runner's owner
            yield fd, tmp
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write(path, data: bytes | str, *, mode: int = 0o644, like: os.stat_result | None = None,
                 like_mode: bool = True) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8) atomically and durably.

    Stages into ``.<name>.kltool-tmp`` next to it (a leftover from an earlier crash is overwritten),
    fsyncs it, renames it over ``path`` and fsyncs the directory. The file gets permission ``mode``,
    or, with ``like`` (a stat result), that file's owner (and with ``like_mode`` its permissions)
    before the rename, so there is no moment where the broker's user could not read it.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    with staged(path, mode=mode, like=like, like_mode=like_mode) as (fd, _tmp):
        _write_all(fd, data)


def append_ranges(src_fd: int, ranges, dst_fd: int) -> int:
    """Append the byte ranges ``[(start, end), ...]`` of ``src_fd`` to ``dst_fd`` (copy_file_range
    when the file system allows it). Raises UnsafeOperation if the source is shorter; returns the
    number of bytes copied."""
    copy = getattr(os, "copy_file_range", None)
    total = 0
    for s, t in ranges:
        pos = s
        while pos < t:
            n = 0
            if copy is not None:
                try:
                    n = copy(src_fd, dst_fd, min(_CHUNK * 16, t - pos), pos)
                except OSError as e:  # EXDEV, ENOSYS, EINVAL on some file systems
                    if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                        raise
                    copy = None
                    continue
            else:
                chunk = os.pread(src_fd, min(_CHUNK, t - pos), pos)
                _write_all(dst_fd, chunk)
                n = len(chunk)
            if n == 0:
                raise UnsafeOperation(f"file shrank while copying bytes [{s}, {t})")
            pos += n
        total += t - s
    return total


def copy_range(src_path, start: int, end: int, dst_path, *, mode: int = 0o644,
               like: os.stat_result | None = None) -> int:
    """Copy bytes ``[start, end)`` of ``src_path`` into a new file ``dst_path`` (for backups of what a
    repair cuts or replaces, and putting them back), streamed: a sparse file's holes stay holes and
    nothing is held whole. The copy is staged and renamed like :func:`atomic_write` (``like``: that
    file's owner and permissions), and fsynced, so a copy that exists is complete. Raises
    UnsafeOperation if the source is shorter than ``end``; returns the number of bytes copied."""
    if start < 0 or end < start:
        raise ValueError(f"bad byte range [{start}, {end})")
    with open(src_path, "rb") as src:
        size = os.fstat(src.fileno()).st_size
        if end > size:
            raise UnsafeOperation(f"cannot back up bytes [{start}, {end}): the file has only {size} bytes",
                                  path=src_path)
        with staged(dst_path, mode=mode, like=like) as (fd, _tmp):
            from .scan import data_ranges

            try:
                for a, b in data_ranges(src.fileno(), start, end):  # a sparse file's holes stay holes
                    os.lseek(fd, a - start, os.SEEK_SET)
                    append_ranges(src.fileno(), [(a, b)], fd)
                os.ftruncate(fd, end - start)
            except UnsafeOperation as e:
                raise e.at(path=src_path) from None
    return end - start


# ------------------------------------------------------------------------------------------------ the lock


def looks_like_log_dir(logdir) -> bool:
    """A Kafka log dir root: it has ``.lock``, ``meta.properties``, a root checkpoint file, or a
    sub-directory named like a partition (``topic-N``, ``topic-N.<id>-delete`` ...)."""
    d = Path(logdir)
    if not d.is_dir():
        return False
    if any((d / m).exists() for m in (LOCK_FILE_NAME, *_ROOT_MARKERS)):
        return True
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    try:
                        parse_partition_dir_name(e.name)
                        return True
                    except CorruptDataError:
                        continue
    except OSError:
        return False
    return False


_registry_lock = threading.Lock()
# (st_dev, st_ino) of a .lock file → [fd, count] for the locks this process holds.
_held: dict[tuple[int, int], list[int]] = {}


def _key_of(path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _held_by_us(path) -> bool:
    key = _key_of(path)
    with _registry_lock:
        return key is not None and key in _held


def read_lock_head(lockpath, n: int) -> bytes:
    """The first ``n`` bytes of a ``.lock``. When this process holds that lock, read through the descriptor
    it holds it by: closing any other descriptor of the file would drop the lock (a POSIX record lock
    belongs to the process and the file, and ``close`` of any descriptor releases it)."""
    key = _key_of(lockpath)
    with _registry_lock:
        entry = _held.get(key) if key is not None else None
        if entry is not None:
            return os.pread(entry[0], n, 0)
    with open(lockpath, "rb") as f:
        return f.read(n)


def held_message(lockpath=None) -> str:
    """What to say when another process holds a log dir's ``.lock``: a broker, or another kltool. The
    error carries the lock's path (``path=``), which the one-line message puts first: the text does not
    name it again."""
    return "a broker or another kltool holds this lock; stop it first"


_held_message = held_message


class BrokerLock:
    """Hold the log dir's ``.lock`` exclusively, as the broker does (``LogManager.lockLogDirs``).

    ``with BrokerLock(logdir): ...`` raises BrokerLockHeld (exit code 3) when another process (a live
    broker) holds it. A missing ``.lock`` is created like the broker does (an empty file), but only
    in a directory that looks like a log dir (see :func:`looks_like_log_dir`), or when ``create=True``
    (e.g. for a new log dir). Re-entrant within a process.
    """

    def __init__(self, logdir, *, create: bool | None = None):
        self.logdir = Path(logdir)
        self.lockpath = self.logdir / LOCK_FILE_NAME
        self.create = create
        self._key: tuple[int, int] | None = None

    @property
    def held(self) -> bool:
        return self._key is not None

    def acquire(self) -> BrokerLock:
        if self._key is not None:
            return self
        if not self.lockpath.exists():
            allowed = self.create if self.create is not None else looks_like_log_dir(self.logdir)
            if not allowed:
                if not self.logdir.is_dir():
                    raise UsageError("not a directory", path=self.logdir)
                raise UsageError("does not look like a Kafka log directory (no .lock, meta.properties, "
                                 "checkpoint files or partition directories)", path=self.logdir)
        with _registry_lock:
            key = _key_of(self.lockpath)
            if key is not None and key in _held:
                _held[key][1] += 1
                self._key = key
                return self
            fd, created, key = self._lock_current_file()
            _held[key] = [fd, 1, self.lockpath if created else None]
            self._key = key
        return self

    def _lock_current_file(self) -> tuple[int, bool, tuple[int, int]]:
        """Open and lock the ``.lock`` that is at the path once it is locked. Another kltool run removes a
        ``.lock`` it created as it releases it: the file opened before that removal and locked after it is
        no longer the log dir's lock (a third run may hold a new one), so it is dropped and the lock taken
        again; so is a ``.lock`` that vanishes between the two opens."""
        while True:
            # FileLock: FileChannel.open(file, CREATE, READ, WRITE)
            try:  # a .lock that kltool itself creates in an existing log dir goes again on release
                fd = os.open(self.lockpath, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
                created = self.create is not True
            except FileExistsError:
                try:
                    fd = os.open(self.lockpath, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
                except FileNotFoundError:  # removed by its releaser in between: create it again
                    continue
                created = False
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EACCES, errno.EAGAIN):
                    raise BrokerLockHeld(_held_message(self.lockpath), path=self.lockpath) from None
                raise
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            if _key_of(self.lockpath) == key:
                return fd, created, key
            os.close(fd)  # (closing drops the lockf lock)

    def release(self) -> None:
        key, self._key = self._key, None
        if key is None:
            return
        with _registry_lock:
            entry = _held.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] == 0:
                del _held[key]
                try:
                    if entry[2] is not None:  # leave the tree as it was: remove the .lock we created (still held)
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry[2])
                        fsync_dir(entry[2].parent)
                    fcntl.lockf(entry[0], fcntl.LOCK_UN)
                finally:
                    os.close(entry[0])

    def __enter__(self) -> BrokerLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        try:
            self.release()
        except OSError:
            pass


def lock_holder_present(logdir) -> bool:
    """True when another process (a live broker) holds ``<logdir>/.lock``; the lock is tested, not kept.

    For read-only commands that only warn. A missing ``.lock`` means no broker has this dir open
    (the broker creates it at startup). Uses a shared lock on a read-only descriptor, which conflicts
    with the broker's exclusive lock and needs no write permission. Never disturbs a lock this
    process holds itself.
    """
    lockpath = Path(logdir) / LOCK_FILE_NAME
    if _held_by_us(lockpath):
        return False
    try:
        fd = os.open(lockpath, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EAGAIN):
                return True
            raise
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


# The most kltool reads of a metadata file (checkpoints, leader-epoch-checkpoint, partition.metadata,
# meta.properties, quorum-state, .kafka_cleanshutdown, topic configs): far more than any real one holds (a
# root checkpoint of a million partitions is ~60 MB at most), so a larger file is refused, not read. Producer
# snapshots are not such files (46 bytes a producer, no limit): read_snapshot reads them a chunk at a time.
METADATA_MAX_BYTES = 64 << 20


def _open_regular(path) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` and its stat, when it is a regular file: a FIFO, socket or device
    named like one would block or never end, so it is an OSError (EINVAL, "not a regular file"), as a
    directory is one (EISDIR)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _read_fd(fd: int, start: int, stop: int | None = None) -> bytes:
    """File bytes from ``start`` to ``stop`` (to the end when None), read in chunks."""
    chunks = []
    pos = start
    while stop is None or pos < stop:
        b = os.pread(fd, 1 << 20 if stop is None else min(1 << 20, stop - pos), pos)
        if not b:
            break
        chunks.append(b)
        pos += len(b)
    return b"".join(chunks)


def read_small_file(path, *, limit: int = METADATA_MAX_BYTES) -> bytes:
    """The bytes of a metadata file. Only a regular file is read (see :func:`_open_regular`); one larger
    than ``limit`` bytes is not read at all: an OSError (EFBIG) naming its size."""
    fd, st = _open_regular(path)
    try:
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"{st.st_size} bytes, far larger than any such file (kltool reads at most "
                                       f"{limit}): not read", str(path))
        return _read_fd(fd, 0)
    finally:
        os.close(fd)


def _zeros_start(fd: int, size: int) -> int:
    """Where the run of zero bytes that ends the file starts (``size`` when it ends in a non-zero byte):
    the data stretches are read backwards a chunk at a time, a sparse file's holes are skipped unread."""
    from .scan import data_ranges

    for a, b in reversed(data_ranges(fd, 0, size)):
        pos = b
        while pos > a:
            n = min(_CHUNK, pos - a)
            kept = len(os.pread(fd, n, pos - n).rstrip(b"\0"))
            if kept:
                return pos - n + kept
            pos -= n
    return 0


# The most bytes of an index read into memory at once: a larger one (a full 10 MiB index, or garbage of any
# size) is read on demand, a chunk at a time (FileBytes), so memory stays bounded whatever the file holds.
INDEX_READ_WHOLE = 1 << 20


class FileBytes(fidx.ByteSource):
    """The first ``size`` bytes of a regular file, read when sliced (:class:`kltool.format.index.ByteSource`):
    the file is opened for each read (a partition of many big indexes holds no descriptors), and a file
    that is no longer the one first opened (replaced, or changed size) is an OSError, never mixed bytes."""

    __slots__ = ("path", "_ident")

    def __init__(self, path, size: int, ident: tuple):
        self.path, self.size, self._ident = path, size, ident

    def __repr__(self) -> str:
        return f"FileBytes({str(self.path)!r}, {self.size})"

    def prefix(self, n: int) -> FileBytes:
        return FileBytes(self.path, max(0, min(n, self.size)), self._ident)

    def _read(self, start: int, stop: int) -> bytes:
        fd, st = _open_regular(self.path)
        try:
            if _ident(st) != self._ident:
                raise OSError(errno.ESTALE, "the file changed while it was read", str(self.path))
            data = _read_fd(fd, start, stop)
        finally:
            os.close(fd)
        if len(data) != stop - start:
            raise OSError(errno.ESTALE, "the file shrank while it was read", str(self.path))
        return data


    def hole_end(self, pos: int) -> int:
        """Where the hole at ``pos`` ends (``lseek(SEEK_DATA)``): ``pos`` when data is there, or when the file
        system does not say."""
        if pos >= self.size or not hasattr(os, "SEEK_DATA"):
            return pos
        fd, st = _open_regular(self.path)
        try:
            if _ident(st) != self._ident:
                raise OSError(errno.ESTALE, "the file changed while it was read", str(self.path))
            try:
                return min(os.lseek(fd, pos, os.SEEK_DATA), self.size)
            except OSError as e:
                if e.errno == errno.ENXIO:  # no data after pos: a hole to the end
                    return self.size
                return pos
        finally:
            os.close(fd)


def _ident(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def read_index_file(path, *, whole_up_to: int | None = None):
    """The content of an ``.index``, ``.timeindex`` (any file that may end in a preallocated zero-filled
    tail): bytes, or, when the file ends in zeros, a :class:`kltool.format.index.ZeroPadded` that holds
    only the bytes before them (a 1 GiB preallocated index costs what its entries do). When more than
    ``whole_up_to`` bytes (default :data:`INDEX_READ_WHOLE`) come before the zeros, they are not read here: a :class:`FileBytes` (alone or as
    the ZeroPadded's head) reads them on demand, and the index functions take it a chunk at a time.
    Regular files only, as :func:`read_small_file`."""
    from ..format.index import ZeroPadded

    if whole_up_to is None:
        whole_up_to = INDEX_READ_WHOLE
    fd, st = _open_regular(path)
    try:
        end = _zeros_start(fd, st.st_size)
        head = _read_fd(fd, 0, end) if end <= whole_up_to else FileBytes(path, end, _ident(st))
    finally:
        os.close(fd)
    if len(head) < end:  # shrank while read: what was there
        return head
    return head if end == st.st_size else ZeroPadded(head, st.st_size - end)


def read_txn_index_file(path):
    """The content of a ``.txnindex``, a trailing run of whole zero entries read as one (Kafka never
    preallocates one, so such a run is a hole or damage; its entries are all alike): what is held stays
    the size of the real entries whatever the file's size, and, as :func:`read_index_file`'s, at most
    :data:`INDEX_READ_WHOLE` of them: more (a multi-GiB garbage file) are a :class:`FileBytes` (alone or as
    a ZeroPadded's head) read on demand, a chunk at a time (:func:`kltool.format.index.iter_txn_index`).
    A partial last entry is kept (it is reported)."""
    from ..format.index import TXN_ENTRY, ZeroPadded

    data = read_index_file(path)
    if not isinstance(data, ZeroPadded):
        return data
    n, h = len(data), len(data.head)
    cut = -(-h // TXN_ENTRY) * TXN_ENTRY  # the first entry boundary in the zeros
    whole = n - n % TXN_ENTRY
    if whole - cut > TXN_ENTRY:  # the run of zero entries read as one (the partial entry after it kept)
        data = ZeroPadded(data.head, cut + TXN_ENTRY - h + n % TXN_ENTRY)
    return data if isinstance(data.head, FileBytes) else data[:]


_SNAPSHOT_CHUNK = 4 << 20  # bytes of a snapshot read at a time (~90,000 producers)


def _snapshot_chunks(fd: int, start: int, stop: int):
    pos = start
    while pos < stop:
        b = os.pread(fd, min(_SNAPSHOT_CHUNK, stop - pos), pos)
        if not b:
            raise OSError(errno.ESTALE, "the file shrank while it was read")
        yield b
        pos += len(b)


def read_snapshot(path, *, strict: bool = False, entries: bool = True):
    """A producer ``.snapshot`` (:class:`kltool.format.snapshot.Snapshot`), read a chunk at a time: no size
    limit (46 bytes a producer), and never the file's bytes whole, only the entries (``entries=False``: none,
    for a check of structure and CRC). Structure and version are judged from the first bytes and the size,
    the CRC over the chunks; the entries are decoded after it (with ``strict``, only when it holds: a corrupt
    snapshot is a ``CorruptDataError``, as :func:`~kltool.format.snapshot.parse_snapshot`'s). Regular files
    only, as :func:`read_small_file`."""
    from ..format import snapshot as fsnap

    fd, st = _open_regular(path)
    try:
        size = st.st_size
        lay = fsnap.snapshot_layout(os.pread(fd, fsnap.HEADER_SIZE, 0), size)
        computed = 0
        for b in _snapshot_chunks(fd, fsnap.ENTRIES_OFFSET, size):
            computed = fsnap.snapshot_crc(b, computed, start=0)
        if strict and computed != lay.crc:
            raise fsnap.crc_error(lay.crc, computed)
        got = []
        if entries:
            dec = fsnap.EntryDecoder()
            for b in _snapshot_chunks(fd, fsnap.HEADER_SIZE, lay.end):
                got.extend(dec.feed(b))
    finally:
        os.close(fd)
    return fsnap.Snapshot(lay.version, lay.crc, computed == lay.crc, computed, got, size - lay.end)


def snapshot_entries(path, snap):
    """The entries of the snapshot at ``path`` that :func:`read_snapshot` (``entries=False``) read as ``snap``,
    one at a time, a chunk read at a time (a dump streams them out). OSError when the file no longer has that
    header and size."""
    from ..format import snapshot as fsnap

    fd, st = _open_regular(path)
    try:
        lay = fsnap.snapshot_layout(os.pread(fd, fsnap.HEADER_SIZE, 0), st.st_size)
        if lay.crc != snap.crc or st.st_size - lay.end != snap.trailing_bytes:
            raise OSError(errno.ESTALE, "the file changed while it was read", str(path))
        dec = fsnap.EntryDecoder()
        for b in _snapshot_chunks(fd, fsnap.HEADER_SIZE, lay.end):
            yield from dec.feed(b)
    finally:
        os.close(fd)


def read_text_file(path: Path, kind: str):
    """Parse a small metadata file of ``kind`` (:func:`kltool.format.names.classify`'s kinds:
    offset_checkpoint, leader_epoch_checkpoint, partition_metadata, meta_properties, json: quorum-state or
    .kafka_cleanshutdown by name, any other JSON file as it is; snapshot). CorruptDataError (with the path
    and byte position) when its content is not valid; OSError when it cannot be read."""
    from ..format import checkpoints as cp

    if kind == "snapshot":  # (no size limit: read a chunk at a time)
        try:
            return read_snapshot(path)
        except CorruptDataError as e:
            raise e.at(path=path) from None
    data = read_small_file(path)
    try:
        if kind == "offset_checkpoint":
            return cp.parse_offset_checkpoint(data)
        if kind == "leader_epoch_checkpoint":
            return cp.parse_leader_epoch_checkpoint(data)
        if kind == "partition_metadata":
            return cp.parse_partition_metadata(data)
        if kind == "meta_properties":
            return cp.parse_meta_properties(data)
        if kind == "json":
            name = Path(path).name
            if name == fn.QUORUM_STATE:
                return cp.parse_quorum_state(data)
            if name == fn.CLEAN_SHUTDOWN_FILE:
                cp.parse_clean_shutdown(data)  # checked; dumped as the JSON it holds
                return cp.parse_json_file(data, what=name) if data.strip() else {}
            return cp.parse_json_file(data, what=name)
    except CorruptDataError as e:
        raise e.at(path=path) from None
    raise CorruptDataError(f"unknown file kind {kind}", path=path)
