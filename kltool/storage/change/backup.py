"""The backup engine: every byte a writing command removes is copied into a backup run first, with a
manifest that :func:`restore` undoes.

Repair, retention and rebuild-index all write through here. They describe what they change as
:class:`Action` objects, grouped per log dir in a :class:`ChangeSet`, and call :func:`apply_changes`:

1. a run directory ``<backup root>/<command>-<time>-<pid>-<n>/`` is made (the backup root defaults to
   ``<log dir>.kltool-backup`` beside the log dir, never inside it: a broker refuses unknown directories);
2. everything an action removes (cut byte ranges, files moved aside, the old content of rewritten
   files) is copied there and hashed;
3. ``manifest.json`` (status ``applying``) is written *before* anything changes;
4. the actions are applied one by one, each atomic per file (temp file + fsync + rename, ``ftruncate`` +
   fsync, a one-byte ``pwrite`` + fsync), and the manifest is marked ``complete``.

A run killed at any point leaves a manifest that lists what it meant to do; the next run lists it under
``follows`` and :func:`restore` undoes the whole chain. A manifest is input: :func:`restore` validates
every entry of every manifest it will use before it changes anything, and refuses (exit 2) any path that
does not resolve, after symlinks, inside the log dir the backup was made for or inside its own run
directory.
"""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import BrokerLockHeld, CorruptDataError, UnsafeOperation, UsageError
from ...format import names as fn
from ..fs import (
    BrokerLock,
    append_ranges,
    atomic_write,
    copy_range,
    fsync_dir,
    held_message,
    lock_holder_present,
    looks_like_log_dir,
    staged,
    tmp_path_for,
)

__all__ = [
    "Action", "Cut", "ChangeSet", "apply_changes", "restore", "RestoreStep", "LogDirLocks",
    "MANIFEST_NAME", "BACKUP_SUFFIX", "default_backup_root", "check_backup_root", "read_file", "file_size",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_TYPE = "kltool-backup-manifest"
BACKUP_SUFFIX = ".kltool-backup"
_HASH_LIMIT = 256 << 20  # whole files moved into the backup are hashed up to this size
_SAMPLE = 4096
_CHUNK = 4 << 20
OPS = ("truncate", "excise", "fix_magic", "fix_field", "rebuild_index", "write_checkpoint", "quarantine", "rename", "delete")


def file_size(p: Path) -> int | None:
    """The size of ``p``, or None when it does not exist."""
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


# ------------------------------------------------------------------------------------------------ the plan


@dataclass
class Cut:
    """Bytes ``[start, end)`` of a ``.log`` that leave it, and why."""

    start: int
    end: int
    kind: str
    reason: str
    first_offset: int | None = None
    last_offset: int | None = None
    records: int | None = None

    @property
    def length(self) -> int:
        return self.end - self.start

    def to_json(self) -> dict:
        return {"start": self.start, "end": self.end, "bytes": self.length, "kind": self.kind,
                "reason": self.reason, "first_offset": self.first_offset, "last_offset": self.last_offset,
                "records": self.records}


@dataclass
class Action:
    """One step of a plan. ``file`` is the path the step changes (its final name); ``source`` is where
    the content is now, when that differs (a ``.swap`` file renamed earlier in the same plan)."""

    op: str  # truncate | excise | fix_magic | rebuild_index | write_checkpoint | quarantine | rename | delete
    file: Path
    reason: str
    start: int | None = None
    end: int | None = None
    old_size: int | None = None
    new_size: int | None = None
    first_offset: int | None = None
    last_offset: int | None = None
    records_lost: int | None = None
    target: Path | None = None
    ranges: list[Cut] = field(default_factory=list)
    position: int | None = None
    old_byte: int | None = None
    new_byte: int | None = None
    data: bytes | None = None
    entries: int | None = None
    source: Path | None = None
    fixes: list[tuple[int, int, int]] = field(default_factory=list)  # (position, old, new) applied before
    applied: bool = False

    @property
    def bytes(self) -> int | None:
        if self.op in ("truncate", "excise"):
            return sum(c.length for c in self.ranges)
        if self.op in ("fix_magic", "fix_field"):
            return 1
        if self.op in ("rebuild_index", "write_checkpoint") and self.data is not None:
            return len(self.data)
        return self.old_size

    def to_json(self) -> dict:
        d: dict = {"type": "action", "op": self.op, "file": str(self.file), "reason": self.reason}
        for k in ("start", "end", "old_size", "new_size", "first_offset", "last_offset", "records_lost",
                  "position", "old_byte", "new_byte", "entries"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        b = self.bytes
        if b is not None:
            d["bytes"] = b
        if self.target is not None:
            d["target"] = str(self.target)
        if self.ranges:
            d["ranges"] = [c.to_json() for c in self.ranges]
        d["applied"] = self.applied
        return d

    def describe(self) -> str:
        """One human line."""
        f = str(self.file)
        if self.op in ("truncate", "excise"):
            if len(self.ranges) > 1:  # say which offsets each range held, not one span over all
                rng = ", ".join(f"[{c.start}, {c.end})" + (f" (offsets {'?' if c.first_offset is None else c.first_offset}"
                                                           f"..{'?' if c.last_offset is None else c.last_offset})"
                                                           if c.first_offset is not None or c.last_offset is not None
                                                           else "") for c in self.ranges)
                lost = _offsets_text(None, None, self.records_lost)
            else:
                rng = ", ".join(f"[{c.start}, {c.end})" for c in self.ranges)
                lost = _offsets_text(self.first_offset, self.last_offset, self.records_lost)
            return f"{self.op} {f} bytes {rng} ({self.bytes} bytes{lost}): {self.reason}"
        if self.op in ("fix_magic", "fix_field"):
            return f"{self.op} {f} byte {self.position}: {self.old_byte} -> {self.new_byte}: {self.reason}"
        if self.op == "quarantine":
            lost = _offsets_text(self.first_offset, self.last_offset, self.records_lost)
            size = "" if self.old_size is None else f"{self.old_size} bytes"
            detail = (f" ({size}{lost})" if size else f" ({lost[2:]})") if lost else ""
            return f"quarantine {f} (moved into the backup{detail}): {self.reason}"
        if self.op == "rename":
            return f"rename {f} -> {self.target}: {self.reason}"
        if self.op == "rebuild_index":
            return f"rebuild_index {f} ({self.entries} entries, {self.bytes} bytes): {self.reason}"
        if self.op == "write_checkpoint":
            return f"write_checkpoint {f}: {self.reason}"
        return f"{self.op} {f}: {self.reason}"


def _offsets_text(first, last, records) -> str:
    if first is None and last is None and records is None:
        return ""
    parts = []
    if first is not None or last is not None:
        a = "?" if first is None else first
        b = "?" if last is None else last
        parts.append(f"offsets {a}..{b}")
    if records is not None:
        parts.append(f"{records} records")
    return ", " + ", ".join(parts) + " lost"



@dataclass
class ChangeSet:
    """The actions for one log dir (or the directory holding the selected partitions): one lock, one
    backup run directory, one manifest. ``protect`` lists directories the backup must not be inside
    (the partition directories it changes)."""

    root: Path
    actions: list[Action] = field(default_factory=list)
    protect: list[Path] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- applying


def default_backup_root(root: Path) -> Path:
    """``<log dir>.kltool-backup`` beside the log dir (never inside it: a broker refuses unknown directories)."""
    root = Path(os.path.abspath(root))
    return root.parent / f"{root.name}{BACKUP_SUFFIX}"


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
        return True
    except ValueError:
        return False


def check_backup_root(root: Path, changes: Iterable[ChangeSet]) -> Path:
    """Refuse a backup root inside a log dir or a partition directory a change set touches."""
    r = Path(os.path.realpath(root))
    for c in changes:
        gr = Path(os.path.realpath(c.root))
        if _inside(r, gr):
            raise UsageError(f"the backup directory {root} is inside the log dir {c.root}: a broker refuses unknown "
                             f"directories there; choose one beside it")
        for p in c.protect:
            if _inside(r, Path(os.path.realpath(p))):
                raise UsageError(f"the backup directory {root} is inside the partition directory {p}")
    return root


def _now() -> str:
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


def _sha256_file(path: Path, start: int = 0, end: int | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(start)
        left = None if end is None else end - start
        while left is None or left > 0:
            chunk = f.read(_CHUNK if left is None else min(_CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            if left is not None:
                left -= len(chunk)
    return h.hexdigest()


def _sha256(data: bytes) -> str:
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


def _prepare(i: int, a: Action, run_dir: Path, root: Path) -> dict:
    """Copy what action ``a`` removes into ``run_dir`` and return its manifest entry."""
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
            cuts.append({"start": s, "end": t, "backup": str(dst.relative_to(run_dir)), "sha256": _sha256_file(dst)})
        keeps = _keeps(a)
        e["cuts"] = cuts
        e["keeps"] = [{"start": s, "end": t, "new_start": d} for s, t, d in keeps]
        n = a.new_size
        e["new_head_sha256"] = _sha256(_mapped_read(src, keeps, a.fixes, 0, min(_SAMPLE, n)))
        e["new_tail_sha256"] = _sha256(_mapped_read(src, keeps, a.fixes, max(0, n - _SAMPLE), n))
    elif a.op in ("rebuild_index", "write_checkpoint"):
        src = a.source if a.op == "rebuild_index" else a.file
        old = read_file(src)
        if old is not None:
            dst = files / stem / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dst, old)
            e["backup"] = str(dst.relative_to(run_dir))
            e["old_sha256"] = _sha256(old)
        else:
            e["backup"] = None
            e["old_sha256"] = None
            prior = read_file(a.file)
            if prior is not None:  # moved aside by an earlier action of this run: restore puts it back
                e["prior_sha256"] = _sha256(prior)
        e["new_sha256"] = _sha256(a.data)
    elif a.op == "quarantine":
        dst = files / stem / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        e["backup"] = str(dst.relative_to(run_dir))
        size = file_size(a.file)
        e["size"] = size
        e["sha256"] = _sha256_file(a.file) if size is not None and size <= _HASH_LIMIT else None
    return e


def _like(path: Path) -> Path | None:
    """The file whose owner and mode a new ``path`` should get: itself, else its segment's ``.log``, else its
    directory (a repair run as root must not leave files the broker's user cannot write)."""
    for cand in (path, path.with_name(path.name.split(".")[0] + ".log"), path.parent):
        if cand.exists():
            return cand
    return None


def _stat(p: Path | None) -> os.stat_result | None:
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


def _move(src: Path, dst: Path) -> None:
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


def _apply(a: Action, entry: dict, run_dir: Path) -> None:  # noqa: C901
    f = a.file
    if a.op == "truncate":
        size = file_size(f)
        if size == a.new_size:
            return
        if size != a.old_size:
            raise UnsafeOperation(f"expected {a.old_size} bytes, found {size}: the file changed since planning", path=f)
        fd = os.open(f, os.O_RDWR)
        try:
            os.ftruncate(fd, a.new_size)
            os.fsync(fd)
        finally:
            os.close(fd)
    elif a.op == "excise":
        size = file_size(f)
        if size != a.old_size:
            raise UnsafeOperation(f"expected {a.old_size} bytes, found {size}: the file changed since planning", path=f)
        with open(f, "rb") as src, staged(f, like=_stat(f)) as (fd, _tmp):
            append_ranges(src.fileno(), [(s, t) for s, t, _d in _keeps(a)], fd)
    elif a.op in ("fix_magic", "fix_field"):
        fd = os.open(f, os.O_RDWR)
        try:
            cur = os.pread(fd, 1, a.position)
            if cur == bytes([a.new_byte]):
                return
            if cur != bytes([a.old_byte]):
                raise UnsafeOperation(f"expected byte {a.old_byte} at {a.position}, found {cur!r}", path=f)
            os.pwrite(fd, bytes([a.new_byte]), a.position)
            os.fsync(fd)
        finally:
            os.close(fd)
    elif a.op in ("rebuild_index", "write_checkpoint"):
        like = _like(f)
        atomic_write(f, a.data, like=_stat(like), like_mode=like == f)
    elif a.op == "quarantine":
        dst = run_dir / entry["backup"]
        if not f.exists() and dst.exists():
            return
        _move(f, dst)
    elif a.op == "rename":
        if not f.exists() and a.target.exists():
            return
        if a.target.exists():
            raise UnsafeOperation(f"cannot rename {f.name}: {a.target.name} exists", path=f)
        os.rename(f, a.target)
        fsync_dir(f.parent)
    elif a.op == "delete":
        try:
            os.unlink(f)
        except FileNotFoundError:
            return
        fsync_dir(f.parent)
    else:  # pragma: no cover
        raise ValueError(f"unknown action {a.op}")


def apply_changes(changes: Sequence[ChangeSet], command: str, backup_dir=None, *,
                  on_action: Callable[[Action], None] | None = None) -> list[Path]:
    """Apply ``changes`` (their log dirs' locks must be held): per change set, back up what its actions
    remove, write the manifest, apply the actions in order. ``command`` names the run (``repair``,
    ``retention``, ``rebuild-index`` ...). Returns the manifests written."""
    manifests = []
    todo = [c for c in changes if c.actions]
    if backup_dir is not None:
        check_backup_root(Path(backup_dir), changes)
    for c in todo:
        root = Path(os.path.abspath(backup_dir)) if backup_dir is not None else default_backup_root(c.root)
        if backup_dir is None:
            check_backup_root(root, [c])
        run_dir = _new_run_dir(root, "rebuild-index" if command == "rebuild-index" else "repair")
        log_dir = Path(os.path.abspath(c.root))
        entries = [_prepare(i, a, run_dir, log_dir) for i, a in enumerate(c.actions)]
        doc = {"type": MANIFEST_TYPE, "version": 1, "created": _now(), "command": command,
               "log_dir": str(log_dir), "status": "applying",
               "follows": _incomplete_manifests(root, run_dir), "actions": entries}
        mpath = run_dir / MANIFEST_NAME
        atomic_write(mpath, json.dumps(doc, indent=1) + "\n")
        for a, e in zip(c.actions, entries, strict=True):
            _apply(a, e, run_dir)
            a.applied = True
            if on_action is not None:
                on_action(a)
        doc["status"] = "complete"
        doc["completed"] = _now()
        for e in entries:
            e["applied"] = True
        atomic_write(mpath, json.dumps(doc, indent=1) + "\n")
        manifests.append(mpath)
    return manifests


# --------------------------------------------------------------------------------------------- locking


class LogDirLocks:
    """Hold every group's ``.lock`` (or, for a dry run, only check that no broker holds it)."""

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
                    self.held.append(BrokerLock(r).acquire())
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        while self.held:
            self.held.pop().release()
        return False




# --------------------------------------------------------------------------------------------- restore


@dataclass
class RestoreStep:
    op: str
    file: str
    message: str
    done: bool = False

    def to_json(self) -> dict:
        return {"type": "action", "op": self.op, "file": self.file, "reason": self.message, "applied": self.done}


def _load_manifest(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError("no such manifest", path=path) from None
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptDataError(f"not a kltool manifest: {e}", path=path) from None
    if not isinstance(doc, dict) or doc.get("type") != MANIFEST_TYPE or doc.get("version") != 1:
        raise CorruptDataError("not a kltool backup manifest (version 1)", path=path)
    return doc


def _check_sha(path: Path, sha: str | None, what: str) -> None:
    if sha is not None and _sha256_file(path) != sha:
        raise UnsafeOperation(f"the backup of {what} does not match its sha256 in the manifest", path=path)


def _restore_entry(e: dict, run_dir: Path, dry_run: bool) -> RestoreStep | None:  # noqa: C901
    op = e["op"]
    f = Path(e["file"])
    if op == "delete":
        return None
    if op == "quarantine":
        b = run_dir / e["backup"]
        if f.exists() or not b.exists():
            return None
        step = RestoreStep("move_back", str(f), f"moved back from {b}")
        if not dry_run:
            _check_sha(b, e.get("sha256"), str(f))
            _move(b, f)
    elif op == "rename":
        t = Path(e["target"])
        if f.exists() or not t.exists():
            return None
        step = RestoreStep("rename", str(f), f"renamed back from {t.name}")
        if not dry_run:
            os.rename(t, f)
            fsync_dir(f.parent)
    elif op in ("rebuild_index", "write_checkpoint"):
        cur = read_file(f)
        cur_sha = None if cur is None else _sha256(cur)
        if cur_sha == e.get("old_sha256") or (cur_sha is not None and cur_sha == e.get("prior_sha256")):
            return None
        if cur_sha != e["new_sha256"]:
            raise UnsafeOperation("the file changed since the repair (neither its old nor its new content); "
                                  "not restored", path=f)
        if e.get("backup") is None:
            step = RestoreStep("delete", str(f), "did not exist before the repair")
            if not dry_run:
                os.unlink(f)
                fsync_dir(f.parent)
        else:
            b = run_dir / e["backup"]
            step = RestoreStep("write", str(f), f"old content put back from {b}")
            if not dry_run:
                old = b.read_bytes()
                if _sha256(old) != e["old_sha256"]:
                    raise UnsafeOperation("the backup does not match its sha256 in the manifest", path=b)
                atomic_write(f, old, like=_stat(f))
    elif op in ("fix_magic", "fix_field"):
        with open(f, "rb") as fh:
            fh.seek(e["position"])
            cur = fh.read(1)
        if cur == bytes([e["old_byte"]]):
            return None
        if cur != bytes([e["new_byte"]]):
            raise UnsafeOperation(f"byte {e['position']} changed since the repair; not restored", path=f)
        step = RestoreStep("write_byte", str(f), f"byte {e['position']} set back to {e['old_byte']}")
        if not dry_run:
            fd = os.open(f, os.O_RDWR)
            try:
                os.pwrite(fd, bytes([e["old_byte"]]), e["position"])
                os.fsync(fd)
            finally:
                os.close(fd)
    elif op == "truncate":
        step = _restore_truncate(e, f, run_dir, dry_run)
    elif op == "excise":
        step = _restore_excise(e, f, run_dir, dry_run)
    else:
        raise CorruptDataError(f"unknown action {op!r} in the manifest")
    if step is not None:
        step.done = not dry_run
    return step


def _restore_truncate(e: dict, f: Path, run_dir: Path, dry_run: bool) -> RestoreStep | None:
    (cut,) = e["cuts"]
    old_size, new_size = e["old_size"], e["new_size"]
    b = run_dir / cut["backup"]
    size = file_size(f)
    if size is None:
        raise UnsafeOperation("the file is gone; not restored", path=f)
    if size == old_size:
        return None
    if not new_size <= size < old_size:
        raise UnsafeOperation(f"the file has {size} bytes, neither the {new_size} left by the repair nor the "
                              f"{old_size} before it; not restored", path=f)
    step = RestoreStep("append", str(f), f"bytes [{new_size}, {old_size}) put back from {b}")
    if dry_run:
        return step
    _check_sha(b, cut["sha256"], f"{f} [{new_size}, {old_size})")
    with open(b, "rb") as fb, open(f, "r+b") as fh:
        done = size - new_size  # an interrupted restore appended this much already: check it, then go on
        if done:
            fh.seek(new_size)
            if fh.read(done) != fb.read(done):
                raise UnsafeOperation("the bytes after the repaired end differ from the backup; not restored", path=f)
        fh.seek(size)
        fb.seek(done)
        shutil.copyfileobj(fb, fh, _CHUNK)
        fh.flush()
        os.fsync(fh.fileno())
    return step


def _restore_excise(e: dict, f: Path, run_dir: Path, dry_run: bool) -> RestoreStep | None:
    old_size, new_size = e["old_size"], e["new_size"]
    size = file_size(f)
    if size == old_size:
        return None
    if size != new_size:
        raise UnsafeOperation(f"the file has {size} bytes, neither the {new_size} left by the repair nor the "
                              f"{old_size} before it; not restored", path=f)
    head = _sha256_file(f, 0, min(_SAMPLE, new_size))
    tail = _sha256_file(f, max(0, new_size - _SAMPLE), new_size)
    if head != e["new_head_sha256"] or tail != e["new_tail_sha256"]:
        raise UnsafeOperation("the file changed since the repair; not restored", path=f)
    step = RestoreStep("rewrite", str(f), f"{len(e['cuts'])} cut range(s) put back ({old_size - new_size} bytes)")
    if dry_run:
        return step
    pieces = [("keep", k["start"], k["end"], k["new_start"]) for k in e["keeps"]]
    pieces += [("cut", c["start"], c["end"], c) for c in e["cuts"]]
    pieces.sort(key=lambda t: t[1])
    for c in e["cuts"]:
        _check_sha(run_dir / c["backup"], c["sha256"], f"{f} [{c['start']}, {c['end']})")
    with open(f, "rb") as fs, staged(f, like=_stat(f)) as (fd, _tmp):
        for kind, s, t, extra in pieces:
            if kind == "keep":
                append_ranges(fs.fileno(), [(extra, extra + t - s)], fd)
            else:
                with open(run_dir / extra["backup"], "rb") as fb:
                    append_ranges(fb.fileno(), [(0, t - s)], fd)
        if os.fstat(fd).st_size != old_size:
            raise UnsafeOperation("the restored file has the wrong size; not restored", path=f)
    return step


# ------------------------------------------------------------------------------ a manifest is input


class _Checker:
    """Validates one manifest completely before anything is changed: types, numbers that add up, and every
    path confined to the log dir the backup was made for (``file``, ``target``) or to the run directory
    (``backup``), after symlinks; ``follows`` names manifests of the same backup root and log dir."""

    def __init__(self, mpath: Path, doc: dict):
        self.m = mpath
        self.doc = doc
        self.run_dir = Path(os.path.realpath(mpath.parent))

    def fail(self, where: str, what: str):
        raise UsageError(f"refusing to restore: {where}: {what}; nothing was changed", path=self.m)

    def log_dir(self) -> Path:
        ld = self.doc.get("log_dir")
        if not isinstance(ld, str) or not os.path.isabs(ld):
            self.fail("log_dir", f"{ld!r} is not an absolute path")
        real = Path(os.path.realpath(ld))
        if not real.is_dir():
            self.fail("log_dir", f"{ld} is not a directory")
        if real == Path(real.anchor) or _inside(self.run_dir, real):
            self.fail("log_dir", f"{ld} holds the backup itself, so it cannot be the log dir the backup was made for")
        if not looks_like_log_dir(real):
            self.fail("log_dir", f"{ld} does not look like a Kafka log dir")
        self.root = real
        return real

    def in_log_dir(self, where: str, value) -> Path:
        """A file the run changed: inside the log dir, in it or in one of its partition directories."""
        if not isinstance(value, str) or not os.path.isabs(value):
            self.fail(where, f"{value!r} is not an absolute path")
        real = Path(os.path.realpath(value))
        if not _inside(real, self.root) or real == self.root:
            self.fail(where, f"{value} is outside the log dir {self.root}")
        if len(real.relative_to(self.root).parts) > 2:
            self.fail(where, f"{value} is deeper than a partition directory of {self.root}")
        return real

    def in_run(self, where: str, value) -> None:
        if not isinstance(value, str) or not value or os.path.isabs(value):
            self.fail(where, f"{value!r} is not a path relative to the backup run {self.run_dir}")
        real = Path(os.path.realpath(self.run_dir / value))
        if not _inside(real, self.run_dir) or real == self.run_dir:
            self.fail(where, f"{value} is outside the backup run {self.run_dir}")

    def int_(self, where: str, value, lo: int = 0, hi: int | None = None) -> int:
        if type(value) is not int or value < lo or (hi is not None and value > hi):
            self.fail(where, f"{value!r} is not a whole number in range")
        return value

    def sha(self, where: str, value, optional: bool = False) -> None:
        if value is None and optional:
            return
        if not isinstance(value, str) or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
            self.fail(where, f"{value!r} is not a sha256")

    def entry(self, i: int, e) -> None:
        w = f"actions[{i}]"
        if not isinstance(e, dict):
            self.fail(w, "not an object")
        op = e.get("op")
        if op not in OPS:
            self.fail(f"{w}.op", f"unknown action {op!r}")
        self.in_log_dir(f"{w}.file", e.get("file"))
        if op == "rename":
            self.in_log_dir(f"{w}.target", e.get("target"))
        elif op == "quarantine":
            self.in_run(f"{w}.backup", e.get("backup"))
            self.sha(f"{w}.sha256", e.get("sha256"), optional=True)
        elif op in ("rebuild_index", "write_checkpoint"):
            if e.get("backup") is not None:
                self.in_run(f"{w}.backup", e.get("backup"))
                self.sha(f"{w}.old_sha256", e.get("old_sha256"))
            self.sha(f"{w}.new_sha256", e.get("new_sha256"))
            self.sha(f"{w}.prior_sha256", e.get("prior_sha256"), optional=True)
        elif op in ("fix_magic", "fix_field"):
            self.int_(f"{w}.position", e.get("position"))
            self.int_(f"{w}.old_byte", e.get("old_byte"), 0, 255)
            self.int_(f"{w}.new_byte", e.get("new_byte"), 0, 255)
        elif op in ("truncate", "excise"):
            self.cuts(w, op, e)

    def cuts(self, w: str, op: str, e: dict) -> None:
        old = self.int_(f"{w}.old_size", e.get("old_size"))
        new = self.int_(f"{w}.new_size", e.get("new_size"))
        cuts, keeps = e.get("cuts"), e.get("keeps", [])
        if not isinstance(cuts, list) or not cuts or not isinstance(keeps, list):
            self.fail(f"{w}.cuts", "missing")
        pieces = []
        for j, c in enumerate(cuts):
            if not isinstance(c, dict):
                self.fail(f"{w}.cuts[{j}]", "not an object")
            a, b = self.int_(f"{w}.cuts[{j}].start", c.get("start")), self.int_(f"{w}.cuts[{j}].end", c.get("end"))
            self.in_run(f"{w}.cuts[{j}].backup", c.get("backup"))
            self.sha(f"{w}.cuts[{j}].sha256", c.get("sha256"))
            pieces.append((a, b, None))
        for j, k in enumerate(keeps):
            if not isinstance(k, dict):
                self.fail(f"{w}.keeps[{j}]", "not an object")
            pieces.append((self.int_(f"{w}.keeps[{j}].start", k.get("start")),
                           self.int_(f"{w}.keeps[{j}].end", k.get("end")),
                           self.int_(f"{w}.keeps[{j}].new_start", k.get("new_start"))))
        pieces.sort(key=lambda t: t[0])
        pos = dst = 0
        for a, b, d in pieces:  # cuts and keeps tile [0, old_size); keeps land one after another
            if a != pos or b <= a or (d is not None and d != dst):
                self.fail(f"{w}.cuts", f"the cut and kept ranges do not tile the file's {old} bytes")
            if d is not None:
                dst += b - a
            pos = b
        if pos != old or dst != new:
            self.fail(f"{w}.cuts", f"the ranges add up to {pos} -> {dst} bytes, not {old} -> {new}")
        if op == "truncate":
            if len(cuts) != 1 or cuts[0]["end"] != old or cuts[0]["start"] != new:
                self.fail(f"{w}.cuts", "a truncation cuts exactly the tail")
        else:
            self.sha(f"{w}.new_head_sha256", e.get("new_head_sha256"))
            self.sha(f"{w}.new_tail_sha256", e.get("new_tail_sha256"))

    def check(self) -> list[Path]:
        """Validate everything; returns the manifests this one follows."""
        self.log_dir()
        actions = self.doc.get("actions", [])
        if not isinstance(actions, list):
            self.fail("actions", "not a list")
        for i, e in enumerate(actions):
            self.entry(i, e)
        follows = self.doc.get("follows", [])
        if not isinstance(follows, list):
            self.fail("follows", "not a list")
        out = []
        backup_root = self.run_dir.parent
        for j, f in enumerate(follows):
            if not isinstance(f, str) or not os.path.isabs(f):
                self.fail(f"follows[{j}]", f"{f!r} is not an absolute path")
            real = Path(os.path.realpath(f))
            if real.name != MANIFEST_NAME or real.parent.parent != backup_root:
                self.fail(f"follows[{j}]", f"{f} is not the manifest of another run in {backup_root}")
            out.append(real)
        return out


def _run_manifests(path: Path) -> list[Path]:
    """A manifest, a run directory (its manifest) or a backup directory (the manifests of its runs)."""
    p = Path(os.path.abspath(path))
    if p.is_dir():
        if (p / MANIFEST_NAME).is_file():
            return [p / MANIFEST_NAME]
        runs = sorted(d / MANIFEST_NAME for d in p.iterdir() if (d / MANIFEST_NAME).is_file())
        if not runs:
            raise UsageError("no backup runs here (no */manifest.json)", path=p)
        return runs
    return [p]


def restore(manifests, *, dry_run: bool = False, follow: bool = True,
            on_step: Callable[[RestoreStep], None] | None = None) -> list[RestoreStep]:
    """Undo backup runs: ``manifests`` is one path or several, each a ``manifest.json``, a run directory or a
    backup directory (all its runs). With ``follow``, the interrupted runs a manifest follows are undone too.
    Every manifest is read and validated before anything changes (a hostile or broken one is a UsageError,
    exit 2, naming the entry); then the runs are undone newest first, each action in reverse order. Each
    step checks the file's state first, so an interrupted restore can be run again, and an action that was
    never applied is skipped. The log dir's ``.lock`` is held meanwhile (and removed again if restore
    created it), so the tree ends byte-identical to before the runs."""
    if isinstance(manifests, (str, os.PathLike)):
        manifests = [manifests]
    queue = [m for arg in manifests for m in _run_manifests(arg)]
    runs: dict[Path, tuple[dict, Path]] = {}
    given = set(queue)
    while queue:
        m = queue.pop(0)
        key = Path(os.path.realpath(m))
        if key in runs:
            continue
        try:
            doc = _load_manifest(m)
        except UsageError:
            if m in given:
                raise
            raise UsageError(f"the manifest it follows is missing: {m}") from None
        chk = _Checker(m, doc)
        followed = chk.check()
        runs[key] = (doc, chk.root)
        if follow:
            for f in followed:
                fdoc_root = None
                try:
                    fdoc = _load_manifest(f)
                    fdoc_root = os.path.realpath(fdoc.get("log_dir", "")) if isinstance(fdoc.get("log_dir"), str) else None
                except UsageError:
                    pass
                if fdoc_root is not None and Path(fdoc_root) != chk.root:
                    chk.fail("follows", f"{f} is a backup of another log dir ({fdoc_root})")
                queue.append(f)
    order = sorted(runs.items(), key=lambda kv: (str(kv[1][0].get("created", "")), str(kv[0])), reverse=True)
    steps: list[RestoreStep] = []
    for m, (doc, root) in order:
        run_dir = m.parent
        with LogDirLocks([root], dry_run):
            for e in reversed(doc.get("actions", [])):
                step = _restore_entry(e, run_dir, dry_run)
                if step is not None:
                    steps.append(step)
                    if on_step is not None:
                        on_step(step)
            if not dry_run and doc.get("status") != "restored":
                doc["status"] = "restored"
                doc["restored"] = _now()
                atomic_write(m, json.dumps(doc, indent=1) + "\n")
    return steps
