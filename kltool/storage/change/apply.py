"""The apply engine: every byte a writing command removes is copied into a backup run first, with a
manifest that :func:`kltool.storage.change.restore.restore` undoes.

Repair, retention and rebuild-index all write through here. They describe what they change as
:class:`~kltool.storage.change.plan.Action` objects, grouped per log dir in a
:class:`~kltool.storage.change.plan.ChangeSet`, and call :func:`apply_changes`:

1. a run directory ``<backup root>/<command>-<time>-<pid>-<n>/`` is made (the backup root defaults to
   ``<log dir>.kltool-backup`` beside the log dir, never inside it: a broker refuses unknown directories);
2. everything an action removes (cut byte ranges, files moved aside, the old content of rewritten
   files) is copied there and hashed;
3. ``manifest.json`` (status ``applying``) is written *before* anything changes;
4. the actions are applied one by one, each atomic per file (temp file + fsync + rename, ``ftruncate`` +
   fsync, a one-byte ``pwrite`` + fsync), and the manifest is marked ``complete``.

A run killed at any point leaves a manifest that lists what it meant to do; the next run lists it under
``follows`` and :func:`~kltool.storage.change.restore.restore` undoes the whole chain.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ...errors import BrokerLockHeld, UnsafeOperation, UsageError
from ...format import names as fn
from ..confine import inside, resolves_inside, unfit
from ..fs import (
    BrokerLock,
    append_ranges,
    atomic_write,
    copy_range,
    fsync_dir,
    held_message,
    lock_holder_present,
    looks_like_log_dir,
    read_lock_head,
    staged,
    tmp_path_for,
)
from .plan import Action, ChangeSet

__all__ = [
    "apply_changes", "LogDirLocks", "MANIFEST_NAME", "MANIFEST_TYPE", "BACKUP_SUFFIX", "default_backup_root",
    "check_backup_root", "check_changes", "check_files", "read_file", "file_size",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_TYPE = "kltool-backup-manifest"
BACKUP_SUFFIX = ".kltool-backup"
_HASH_LIMIT = 256 << 20  # whole files moved into the backup are hashed up to this size
SAMPLE = 4096  # bytes hashed at each end of an excised file (restore checks them)
CHUNK = 4 << 20


def file_size(p: Path | None) -> int | None:
    """The size of ``p``, or None when it does not exist (or there is no ``p``)."""
    if p is None:
        return None
    try:
        return p.stat().st_size
    except FileNotFoundError:
        return None


def read_file(p: Path | None) -> bytes | None:
    """The bytes of ``p``, or None when it does not exist."""
    if p is None:
        return None
    try:
        return p.read_bytes()
    except FileNotFoundError:
        return None


# --------------------------------------------------------------------------------------------- applying


def default_backup_root(root: Path) -> Path:
    """``<log dir>.kltool-backup`` beside the log dir (never inside it: a broker refuses unknown directories)."""
    root = Path(os.path.abspath(root))
    return root.parent / f"{root.name}{BACKUP_SUFFIX}"


def check_backup_root(root: Path, changes: Iterable[ChangeSet], *, default: bool = False) -> Path:
    """Refuse a backup root inside a log dir or a partition directory a change set touches, and a default one
    (``<log dir>.kltool-backup``) that is a symlink: whoever made it chose where kltool's copies go, not the
    operator (an explicit ``--backup-dir`` may be one)."""
    if default and os.path.islink(root):
        raise UnsafeOperation(f"the backup directory {root} is a symlink (to {os.path.realpath(root)}): refused as "
                              f"a backup location; remove the link or choose a directory with --backup-dir", path=root)
    r = Path(os.path.realpath(root))
    for c in changes:
        gr = Path(os.path.realpath(c.root))
        if inside(r, gr):
            raise UsageError(f"the backup directory {root} is inside the log dir {c.root}: a broker refuses unknown "
                             f"directories there; choose one beside it")
        for p in c.protect:
            if inside(r, Path(os.path.realpath(p))):
                raise UsageError(f"the backup directory {root} is inside the partition directory {p}")
    return root


def run_name(command: str) -> str:
    """What a run is called in its directory's name and in restore's messages: ``retention``,
    ``rebuild-index``, ``compact``, else ``repair`` (whose modes are ``salvage`` and ``like-broker``)."""
    return command if command in ("retention", "rebuild-index", "compact") else "repair"


def now_text() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _new_run_dir(root: Path, kind: str) -> Path:
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the backup directory {root}: {e.strerror or e}; choose one with "
                         f"--backup-dir") from None
    n = 0
    while True:
        d = root / f"{kind}-{stamp}-{os.getpid()}-{n}"
        try:
            d.mkdir()
            fsync_dir(root)
            return d
        except FileExistsError:
            n += 1


def sha256_file(path: Path, start: int = 0, end: int | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(start)
        left = None if end is None else end - start
        while left is None or left > 0:
            chunk = f.read(CHUNK if left is None else min(CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            if left is not None:
                left -= len(chunk)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rel(path: Path, root: Path) -> str:
    p = Path(os.path.abspath(path))
    try:
        return str(p.relative_to(root))
    except ValueError:
        return p.name


def _incomplete_manifests(backup_root: Path, exclude: Path) -> list[str]:
    """Manifests of interrupted runs in ``backup_root`` that no other manifest follows yet."""
    found, followed = [], set()
    try:
        runs = sorted(backup_root.iterdir())
    except FileNotFoundError:
        return []
    for d in runs:
        m = d / MANIFEST_NAME
        if d == exclude or not m.is_file():
            continue
        try:
            doc = json.loads(m.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        followed.update(doc.get("follows", []))
        if doc.get("status") == "applying":
            found.append(str(m))
    return [m for m in found if m not in followed]


def _lock_file_before(root: Path, follows: list[str]) -> bool:
    """Had the log dir a ``.lock`` before kltool's first run? The oldest interrupted run this one follows
    recorded it; else a ``.lock`` now that kltool did not make was there before."""
    for m in sorted(follows, key=_created):
        try:
            doc = json.loads(Path(m).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc.get("lock_file_before"), bool):
            return doc["lock_file_before"]
    return (Path(root) / fn.LOCK_FILE).exists() and not kltool_made_lock(root)


def _created(manifest: str) -> str:
    try:
        return str(json.loads(Path(manifest).read_text(encoding="utf-8")).get("created", ""))
    except (OSError, ValueError):
        return ""


def _keeps(a: Action) -> list[tuple[int, int, int]]:
    """(src start, src end, dst start) of the bytes an excise/truncate keeps."""
    out, pos, dst = [], 0, 0
    for c in sorted(a.ranges, key=lambda c: c.start):
        if c.start > pos:
            out.append((pos, c.start, dst))
            dst += c.start - pos
        pos = max(pos, c.end)
    if pos < a.old_size:
        out.append((pos, a.old_size, dst))
    return out


def _merged_cuts(a: Action) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for c in sorted(a.ranges, key=lambda c: c.start):
        if out and c.start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], c.end)
        else:
            out.append([c.start, c.end])
    return [(s, e) for s, e in out]


def _copies(a: Action) -> list[tuple[int, int, int]]:
    """(src start, src end, dst start) of a ``create`` made of byte ranges of ``a.source``."""
    out, dst = [], 0
    for c in a.ranges:
        out.append((c.start, c.end, dst))
        dst += c.end - c.start
    return out


def _mapped_read(path: Path, keeps, fixes, a: int, b: int) -> bytes:
    """Bytes ``[a, b)`` of the file an excise will produce, read from the current file."""
    out = bytearray()
    with open(path, "rb") as f:
        for s, e, d in keeps:
            lo, hi = max(a, d), min(b, d + e - s)
            if lo >= hi:
                continue
            src = s + lo - d
            f.seek(src)
            chunk = bytearray(f.read(hi - lo))
            for pos, _old, new in fixes:
                if src <= pos < src + len(chunk):
                    chunk[pos - src] = new
            out += chunk
    return bytes(out)


def _prepare(i: int, a: Action, run_dir: Path, root: Path, renamed: dict | None = None) -> dict:
    """Copy what action ``a`` removes into ``run_dir`` and return its manifest entry. ``renamed``: {target:
    file} of the run's renames (a source that an earlier step renames into place is read where it is now)."""
    files = run_dir / "files"
    rel = _rel(a.file, root)
    stem = f"{i:04d}-{a.op}"
    e = a.to_json()
    del e["type"]
    e.pop("applied", None)
    e["file"] = os.path.abspath(a.file)
    if a.target is not None:
        e["target"] = os.path.abspath(a.target)
    if a.op in ("truncate", "excise"):
        src = a.source or a.file
        cuts = []
        for s, t in _merged_cuts(a):
            dst = files / stem / f"{rel}.{s}-{t}"
            dst.parent.mkdir(parents=True, exist_ok=True)
            copy_range(src, s, t, dst)
            cuts.append({"start": s, "end": t, "backup": str(dst.relative_to(run_dir)), "sha256": sha256_file(dst)})
        keeps = _keeps(a)
        e["cuts"] = cuts
        e["keeps"] = [{"start": s, "end": t, "new_start": d} for s, t, d in keeps]
        n = a.new_size
        e["new_head_sha256"] = sha256_bytes(_mapped_read(src, keeps, a.fixes, 0, min(SAMPLE, n)))
        e["new_tail_sha256"] = sha256_bytes(_mapped_read(src, keeps, a.fixes, max(0, n - SAMPLE), n))
    elif a.op in ("rebuild_index", "write_checkpoint"):
        src = a.source if a.op == "rebuild_index" else a.file
        old = file_size(src)
        if old is not None:  # streamed: a 1 GiB preallocated index is not held (and its holes stay holes)
            dst = files / stem / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            copy_range(src, 0, old, dst)
            e["backup"] = str(dst.relative_to(run_dir))
            e["old_sha256"] = sha256_file(dst)
        else:
            e["backup"] = None
            e["old_sha256"] = None
            if file_size(a.file) is not None:  # moved aside by an earlier action of this run: restore puts it back
                e["prior_sha256"] = sha256_file(a.file)
        e["new_sha256"] = sha256_bytes(a.data)
    elif a.op == "create" and a.data is None and a.source is not None:  # byte ranges of a file (a split)
        copies = _copies(a)
        n = sum(t - s for s, t, _d in copies)
        src = a.source if a.source.exists() else (renamed or {}).get(a.source, a.source)
        e["new_size"] = n
        e["new_head_sha256"] = sha256_bytes(_mapped_read(src, copies, a.fixes, 0, min(SAMPLE, n)))
        e["new_tail_sha256"] = sha256_bytes(_mapped_read(src, copies, a.fixes, max(0, n - SAMPLE), n))
    elif a.op == "create":
        if a.data is not None:
            n = len(a.data)
            head, tail = a.data[:min(SAMPLE, n)], a.data[max(0, n - SAMPLE):]
        else:  # made already (by the planner, under the lock): recorded as it is now
            n = file_size(a.file)
            if n is None:
                raise UnsafeOperation("the file this run was to create is missing", path=a.file)
            head, tail = sha256_file(a.file, 0, min(SAMPLE, n)), sha256_file(a.file, max(0, n - SAMPLE), n)
        if a.data is not None:
            head, tail = sha256_bytes(head), sha256_bytes(tail)
        e["new_size"] = n
        e["new_head_sha256"], e["new_tail_sha256"] = head, tail
    elif a.op == "quarantine":
        dst = files / stem / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        e["backup"] = str(dst.relative_to(run_dir))
        size = file_size(a.file)
        e["size"] = size
        e["sha256"] = sha256_file(a.file) if size is not None and size <= _HASH_LIMIT else None
    return e


def _like(path: Path) -> Path | None:
    """The file whose owner and mode a new ``path`` should get: itself, else its segment's ``.log``, else its
    directory (a repair run as root must not leave files the broker's user cannot write)."""
    for cand in (path, path.with_name(path.name.split(".")[0] + ".log"), path.parent):
        if cand.exists():
            return cand
    return None


def stat_or_none(p: Path | None) -> os.stat_result | None:
    try:
        return None if p is None else os.stat(p)
    except OSError:
        return None


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def move(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` durably; across file systems copy, fsync, then unlink."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        tmp = tmp_path_for(dst)
        shutil.copyfile(src, tmp)
        _fsync_file(tmp)
        os.replace(tmp, dst)
        fsync_dir(dst.parent)
        os.unlink(src)
    fsync_dir(dst.parent)
    fsync_dir(src.parent)


def _changed(a: Action, size: int | None) -> UnsafeOperation:
    return UnsafeOperation(f"expected {a.old_size} bytes, found {size}: the file changed since planning", path=a.file)


def _apply_truncate(a: Action, entry: dict, run_dir: Path) -> None:
    size = file_size(a.file)
    if size == a.new_size:
        return
    if size != a.old_size:
        raise _changed(a, size)
    fd = os.open(a.file, os.O_RDWR)
    try:
        os.ftruncate(fd, a.new_size)
        os.fsync(fd)
    finally:
        os.close(fd)


def _apply_excise(a: Action, entry: dict, run_dir: Path) -> None:
    size = file_size(a.file)
    if size != a.old_size:
        raise _changed(a, size)
    with open(a.file, "rb") as src, staged(a.file, like=stat_or_none(a.file)) as (fd, _tmp):
        append_ranges(src.fileno(), [(s, t) for s, t, _d in _keeps(a)], fd)


def _apply_fix_byte(a: Action, entry: dict, run_dir: Path) -> None:
    fd = os.open(a.file, os.O_RDWR)
    try:
        cur = os.pread(fd, 1, a.position)
        if cur == bytes([a.new_byte]):
            return
        if cur != bytes([a.old_byte]):
            raise UnsafeOperation(f"expected byte {a.old_byte} at {a.position}, found {cur!r}", path=a.file)
        os.pwrite(fd, bytes([a.new_byte]), a.position)
        os.fsync(fd)
    finally:
        os.close(fd)


def _apply_write(a: Action, entry: dict, run_dir: Path) -> None:
    like = _like(a.file)
    atomic_write(a.file, a.data, like=stat_or_none(like), like_mode=like == a.file)


def _apply_create(a: Action, entry: dict, run_dir: Path) -> None:
    """Write ``data`` as a new file (or, with a ``source``, the byte ranges ``ranges`` of that file, with its
    modification time, as the broker's split does); a file made before the run (``data`` None) only has to be
    there as recorded."""
    size = file_size(a.file)
    if a.data is None and a.source is not None and size is None:
        with open(a.source, "rb") as src, staged(a.file, like=stat_or_none(_like(a.file)), like_mode=False) as (fd, _t):
            append_ranges(src.fileno(), [(c.start, c.end) for c in a.ranges], fd)
            for s, t, d in _copies(a) if a.fixes else ():  # bytes mended in the copy (a split's, split.py)
                for pos, _old, new in a.fixes:
                    if s <= pos < t:
                        os.pwrite(fd, bytes([new]), d + pos - s)
            st = os.fstat(src.fileno())
        os.utime(a.file, ns=(st.st_atime_ns, st.st_mtime_ns))
        return
    if a.data is None or size == len(a.data):
        if size != entry["new_size"]:
            raise UnsafeOperation(f"expected {entry['new_size']} bytes, found {size}: the file changed since planning",
                                  path=a.file)
        return
    if size is not None:
        raise UnsafeOperation("exists already: not created", path=a.file)
    like = _like(a.file)
    atomic_write(a.file, a.data, like=stat_or_none(like), like_mode=False)


def _apply_quarantine(a: Action, entry: dict, run_dir: Path) -> None:
    dst = run_dir / entry["backup"]
    if not a.file.exists() and dst.exists():
        return
    move(a.file, dst)


def _apply_rename(a: Action, entry: dict, run_dir: Path) -> None:
    f = a.file
    if not f.exists() and a.target.exists():
        return
    if a.target.exists():
        raise UnsafeOperation(f"cannot rename {f.name}: {a.target.name} exists", path=f)
    os.rename(f, a.target)
    fsync_dir(f.parent)


def _apply_delete(a: Action, entry: dict, run_dir: Path) -> None:
    try:
        os.unlink(a.file)
    except FileNotFoundError:
        return
    fsync_dir(a.file.parent)


_APPLY = {"truncate": _apply_truncate, "excise": _apply_excise, "fix_magic": _apply_fix_byte,
          "fix_field": _apply_fix_byte, "rebuild_index": _apply_write, "write_checkpoint": _apply_write,
          "quarantine": _apply_quarantine, "rename": _apply_rename, "delete": _apply_delete,
          "create": _apply_create}


def _apply(a: Action, entry: dict, run_dir: Path) -> None:
    """Carry out one action; each step finds an action already done (a re-run) and leaves it."""
    step = _APPLY.get(a.op)
    if step is None:  # pragma: no cover
        raise ValueError(f"unknown action {a.op}")
    step(a, entry, run_dir)


def confine(c: ChangeSet) -> None:
    """Refuse (before anything changes) an action whose file, target or source resolves, after symlinks,
    outside its change set's log dir (``logdir/evil-0 -> /elsewhere``): kltool never writes, moves or deletes
    there. The planners leave such partitions alone with a finding; this is the engine's own check."""
    for a in c.actions:
        for p in (a.file, a.target, a.source, *a.paths):
            if p is not None and not resolves_inside(p, c.root):
                raise UnsafeOperation(f"resolves to {os.path.realpath(p)}, outside the log dir {c.root}: not "
                                      f"{a.op} (kltool never writes, moves or deletes outside the log dir); "
                                      f"nothing was changed", path=p)


# the ops that read the old bytes of their file (to back them up, hash them or keep a part) and write in place
_READS = {"truncate", "excise", "fix_magic", "fix_field", "rebuild_index", "write_checkpoint", "quarantine", "create"}
_IN_PLACE = {"truncate", "fix_magic", "fix_field"}


def _refuse(a: Action, p: Path, what: str) -> UsageError:
    return UsageError(f"{what}: not {a.op} (kltool writes, moves and deletes regular files it may read and "
                      f"write); nothing was changed", path=p)


def check_files(c: ChangeSet) -> None:
    """Refuse (before anything changes, and for a dry run the same way) an action over a path that is there but
    is not a regular file (a directory or FIFO named like a segment, index or checkpoint), that kltool may not
    read (the backup copies it) or write in place, or whose directory it may not change. A dangling symlink is
    a file that is not there (confinement is :func:`confine`'s)."""
    for a in c.actions:
        for p in (a.file, a.source, a.target, *a.paths):
            why = None if p is None else unfit(p, read=a.op in _READS and p != a.target,
                                                write=a.op in _IN_PLACE and p == a.file)
            if why is not None:
                raise _refuse(a, p, why)
        for p in (a.file, a.target):
            if p is not None and not os.access(Path(p).parent, os.W_OK | os.X_OK):
                raise _refuse(a, Path(p).parent, "permission denied (the directory)")


def _backup_root_ok(root: Path) -> None:
    """The backup root, or the nearest directory above it that exists, must be one kltool may write in (a dry
    run says so as the real run does when it comes to make it)."""
    p = Path(os.path.abspath(root))
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    if not os.path.isdir(p) or not os.access(p, os.W_OK | os.X_OK):
        why = "not a directory" if not os.path.isdir(p) else "permission denied"
        raise UsageError(f"cannot create the backup directory {root}: {why} ({p}); choose one with --backup-dir")


def check_changes(changes: Sequence[ChangeSet], backup_dir=None, *, backup: bool = True) -> dict[int, Path]:
    """Every check :func:`apply_changes` makes before it changes anything, and nothing else, so that a dry run
    (which calls this on its plan) refuses what the real run refuses, with the same line and exit code: no
    tiered copy, every path confined to its log dir and a regular file kltool may read and change, every
    backup root allowed (``backup=False``: a run without backup, no root checked). Returns each change set's
    backup root (by ``id``)."""
    todo = [c for c in changes if c.actions]
    from ..tiered import is_tiered_copy

    roots = {}
    for a in (a for c in todo for a in c.actions):
        for p in (a.file, getattr(a, "source", None), *(getattr(a, "paths", None) or ())):
            if p is not None and is_tiered_copy(p):
                raise UsageError(f"{a.op} of a tiered-storage copy: kltool changes no remote segment "
                                 "(give the log dir without the tiered root)", path=p)
    for c in todo:
        confine(c)
    for c in todo:
        check_files(c)
    if not backup:
        return roots
    if backup_dir is not None:
        check_backup_root(Path(backup_dir), changes)
    for c in todo:
        roots[id(c)] = Path(os.path.abspath(backup_dir)) if backup_dir is not None else default_backup_root(c.root)
        if backup_dir is None:
            check_backup_root(roots[id(c)], [c], default=True)
        _backup_root_ok(roots[id(c)])
    return roots


def _backed_up(c: ChangeSet, command: str, root: Path, run_dir: Path) -> tuple[list[dict], dict]:
    """Copy into ``run_dir`` what ``c``'s actions remove and write the manifest (status ``applying``): its
    entries and document."""
    log_dir = Path(os.path.abspath(c.root))
    renamed: dict = {}
    for a in c.actions:  # the first rename onto each name
        if a.op == "rename":
            renamed.setdefault(a.target, a.file)
    entries = [_prepare(i, a, run_dir, log_dir, renamed) for i, a in enumerate(c.actions)]
    follows = _incomplete_manifests(root, run_dir)
    doc = {"type": MANIFEST_TYPE, "version": 1, "created": now_text(), "command": command,
           "log_dir": str(log_dir), "status": "applying",
           "follows": follows, "lock_file_before": _lock_file_before(c.root, follows), "actions": entries}
    if not doc["lock_file_before"] and (Path(c.root) / fn.LOCK_FILE).exists():
        remove_lock_on_release(c.root)
    atomic_write(run_dir / MANIFEST_NAME, json.dumps(doc, indent=1) + "\n")
    return entries, doc


def _discard_run_dir(run_dir: Path, made_root: Path | None) -> None:
    """Remove a run directory whose manifest was never written (and the backup root, when this run made it
    and it is empty now)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        fsync_dir(run_dir.parent)
    if made_root is not None:
        with contextlib.suppress(OSError):
            made_root.rmdir()
            fsync_dir(made_root.parent)


def apply_changes(changes: Sequence[ChangeSet], command: str, backup_dir=None, *,
                  on_action: Callable[[Action], None] | None = None) -> list[Path]:
    """Apply ``changes`` (their log dirs' locks must be held): per change set, back up what its actions
    remove, write the manifest, apply the actions in order. ``command`` names the run (``repair``,
    ``retention``, ``rebuild-index`` ...). Every check is made before anything changes
    (:func:`check_changes`, which a dry run makes too); a run that fails before its manifest is written
    leaves no run directory behind. Returns the manifests written."""
    manifests = []
    todo = [c for c in changes if c.actions]
    roots = check_changes(changes, backup_dir)
    for c in todo:
        root = roots[id(c)]
        made_root = not os.path.lexists(root)
        run_dir = _new_run_dir(root, run_name(command))
        try:
            entries, doc = _backed_up(c, command, root, run_dir)
        except BaseException:  # nothing changed yet, and no manifest: the run leaves nothing behind
            _discard_run_dir(run_dir, root if made_root else None)
            raise
        mpath = run_dir / MANIFEST_NAME
        for a, e in zip(c.actions, entries, strict=True):
            _apply(a, e, run_dir)
            a.applied = True
            if on_action is not None:
                on_action(a)
        doc["status"] = "complete"
        doc["completed"] = now_text()
        for e in entries:
            e["applied"] = True
        atomic_write(mpath, json.dumps(doc, indent=1) + "\n")
        manifests.append(mpath)
    return manifests


# --------------------------------------------------------------------------------------------- locking


# A ``.lock`` that kltool creates says so (the broker never reads or writes its ``.lock``'s content; its own is
# empty), so that one left behind by a run killed with SIGKILL, at any step, is known as kltool's: the run
# that completes it and ``restore`` remove it, and the tree ends as it was.
LOCK_MARK = b"kltool\n"
_remove_on_release: set[Path] = set()  # log dirs whose .lock goes when kltool releases it (see lock_file_before)


def kltool_made_lock(root: Path) -> bool:
    """Is ``root``'s ``.lock`` one that kltool created (it carries :data:`LOCK_MARK`)?"""
    try:
        return read_lock_head(Path(root) / fn.LOCK_FILE, len(LOCK_MARK) + 1) == LOCK_MARK
    except OSError:
        return False


def remove_lock_on_release(root: Path) -> None:
    """The ``.lock`` of ``root`` was not there before kltool's first run (a manifest says so): it goes when
    kltool releases it."""
    _remove_on_release.add(Path(os.path.realpath(root)))


def _create_marked_lock(root: Path) -> bool:
    """Create ``root``'s missing ``.lock`` carrying :data:`LOCK_MARK`; True when this call created it."""
    try:
        fd = os.open(root / fn.LOCK_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, LOCK_MARK)
    finally:
        os.close(fd)
    return True


def _lock_created(root: Path) -> BrokerLock:
    """Take the ``.lock`` this run just created. Between its creation and its mark another kltool run may
    have taken it, seen no mark and so left it on release: given up at once, this run would leave a marked
    ``.lock`` no run removes. So the lock is asked again for a moment (a kltool run holds it briefly);
    held longer (a broker that started right then), the run is refused as always."""
    deadline = time.monotonic() + 2.0
    while True:
        try:
            return BrokerLock(root).acquire()
        except BrokerLockHeld:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.002)


class LogDirLocks:
    """Hold every group's ``.lock`` (or, for a dry run, only check that no broker holds it). A missing
    ``.lock`` of a log dir is created, marked as kltool's, and removed again on release; so is one a killed
    kltool run left, or one a manifest says was not there before (:func:`remove_lock_on_release`)."""

    def __init__(self, roots: Iterable[Path], dry_run: bool):
        self.roots = list(roots)
        self.dry_run = dry_run
        self.held: list[BrokerLock] = []

    def __enter__(self):
        try:
            for r in self.roots:
                if self.dry_run:
                    if lock_holder_present(r):
                        raise BrokerLockHeld(held_message(r / fn.LOCK_FILE), path=r / fn.LOCK_FILE)
                    continue
                if (r / fn.LOCK_FILE).exists() or looks_like_log_dir(r):
                    self.held.append(_lock_created(r) if _create_marked_lock(r) else BrokerLock(r).acquire())
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        while self.held:
            lock = self.held.pop()
            root = Path(os.path.realpath(lock.logdir))
            if kltool_made_lock(root) or root in _remove_on_release:
                _remove_on_release.discard(root)
                with contextlib.suppress(FileNotFoundError):  # still held: gone before anyone can take it
                    os.unlink(lock.lockpath)
                fsync_dir(lock.lockpath.parent)
            lock.release()
        return False
