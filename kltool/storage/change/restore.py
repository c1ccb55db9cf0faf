"""Undo backup runs from their manifests (``kltool restore``).

A manifest is input: :func:`restore` validates every entry of every manifest it will use before it changes
anything, and refuses (exit 2) any path that does not resolve, after symlinks, inside the log dir the backup
was made for or inside its own run directory.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import CorruptDataError, UnsafeOperation, UsageError
from ...format import names as fn
from ..confine import inside, unfit
from ..fs import append_ranges, atomic_write, copy_range, fsync_dir, looks_like_log_dir, staged, tmp_path_for
from .apply import (
    CHUNK,
    MANIFEST_NAME,
    MANIFEST_TYPE,
    SAMPLE,
    LogDirLocks,
    file_size,
    move,
    now_text,
    remove_lock_on_release,
    run_name,
    sha256_file,
    stat_or_none,
)
from .plan import OPS

__all__ = ["restore", "RestoreStep"]



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
    if sha is not None and sha256_file(path) != sha:
        raise UnsafeOperation(f"the backup of {what} does not match its sha256 in the manifest", path=path)


def _restore_quarantine(e: dict, f: Path, run_dir: Path, dry_run: bool, what: str) -> RestoreStep | None:
    b = run_dir / e["backup"]
    if f.exists() or not b.exists():
        return None
    step = RestoreStep("move_back", str(f), f"moved back from {b}")
    if not dry_run:
        _check_sha(b, e.get("sha256"), str(f))
        move(b, f)
    return step


def _restore_rename(e: dict, f: Path, run_dir: Path, dry_run: bool, what: str) -> RestoreStep | None:
    t = Path(e["target"])
    if f.exists() or not t.exists():
        return None
    step = RestoreStep("rename", str(f), f"renamed back from {t.name}")
    if not dry_run:
        os.rename(t, f)
        fsync_dir(f.parent)
    return step


def _restore_write(e: dict, f: Path, run_dir: Path, dry_run: bool, what: str) -> RestoreStep | None:
    cur_sha = None if file_size(f) is None else sha256_file(f)
    if cur_sha == e.get("old_sha256") or (cur_sha is not None and cur_sha == e.get("prior_sha256")):
        return None
    if cur_sha != e["new_sha256"]:
        raise UnsafeOperation(f"the file changed since the {what} (neither its old nor its new content); "
                              "not restored", path=f)
    if e.get("backup") is None:
        step = RestoreStep("delete", str(f), f"did not exist before the {what}")
        if not dry_run:
            os.unlink(f)
            fsync_dir(f.parent)
        return step
    b = run_dir / e["backup"]
    step = RestoreStep("write", str(f), f"old content put back from {b}")
    if not dry_run:  # streamed, as the backup was made: a sparse index stays sparse
        _check_sha(b, e["old_sha256"], str(f))
        copy_range(b, 0, b.stat().st_size, f, like=stat_or_none(f))
    return step


def _restore_byte(e: dict, f: Path, run_dir: Path, dry_run: bool, what: str) -> RestoreStep | None:
    with open(f, "rb") as fh:
        fh.seek(e["position"])
        cur = fh.read(1)
    if cur == bytes([e["old_byte"]]):
        return None
    if cur != bytes([e["new_byte"]]):
        raise UnsafeOperation(f"byte {e['position']} changed since the {what}; not restored", path=f)
    step = RestoreStep("write_byte", str(f), f"byte {e['position']} set back to {e['old_byte']}")
    if not dry_run:
        fd = os.open(f, os.O_RDWR)
        try:
            os.pwrite(fd, bytes([e["old_byte"]]), e["position"])
            os.fsync(fd)
        finally:
            os.close(fd)
    return step


def _restore_create(e: dict, f: Path, run_dir: Path, dry_run: bool, what: str) -> RestoreStep | None:
    """A file the run made goes again (when it is still as the run left it)."""
    size = file_size(f)
    if size is None:
        return None
    n = e["new_size"]
    if size != n or sha256_file(f, 0, min(SAMPLE, n)) != e["new_head_sha256"] \
            or sha256_file(f, max(0, n - SAMPLE), n) != e["new_tail_sha256"]:
        raise UnsafeOperation(f"the file changed since the {what} created it; not removed", path=f)
    step = RestoreStep("delete", str(f), f"created by the {what}")
    if not dry_run:
        os.unlink(f)
        fsync_dir(f.parent)
    return step


def _restore_nothing(e: dict, f: Path, run_dir: Path, dry_run: bool, what: str) -> None:
    return None  # a deleted file was never backed up (a .deleted leftover, removed the broker's way)


def _restore_entry(e: dict, run_dir: Path, dry_run: bool, what: str = "repair") -> RestoreStep | None:
    undo = _RESTORE.get(e["op"])
    if undo is None:
        raise CorruptDataError(f"unknown action {e['op']!r} in the manifest")
    step = undo(e, Path(e["file"]), run_dir, dry_run, what)
    if step is not None:
        step.done = not dry_run
    return step


def _restore_truncate(e: dict, f: Path, run_dir: Path, dry_run: bool, what: str) -> RestoreStep | None:
    (cut,) = e["cuts"]
    old_size, new_size = e["old_size"], e["new_size"]
    b = run_dir / cut["backup"]
    size = file_size(f)
    if size is None:
        raise UnsafeOperation("the file is gone; not restored", path=f)
    if size == old_size:
        return None
    if not new_size <= size < old_size:
        raise UnsafeOperation(f"the file has {size} bytes, neither the {new_size} left by the {what} nor the "
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
                raise UnsafeOperation(f"the bytes after the end the {what} left differ from the backup; not restored", path=f)
        fh.seek(size)
        fb.seek(done)
        shutil.copyfileobj(fb, fh, CHUNK)
        fh.flush()
        os.fsync(fh.fileno())
    return step


def _restore_excise(e: dict, f: Path, run_dir: Path, dry_run: bool, what: str) -> RestoreStep | None:
    old_size, new_size = e["old_size"], e["new_size"]
    size = file_size(f)
    if size == old_size:
        return None
    if size != new_size:
        raise UnsafeOperation(f"the file has {size} bytes, neither the {new_size} left by the {what} nor the "
                              f"{old_size} before it; not restored", path=f)
    head = sha256_file(f, 0, min(SAMPLE, new_size))
    tail = sha256_file(f, max(0, new_size - SAMPLE), new_size)
    if head != e["new_head_sha256"] or tail != e["new_tail_sha256"]:
        raise UnsafeOperation(f"the file changed since the {what}; not restored", path=f)
    step = RestoreStep("rewrite", str(f), f"{len(e['cuts'])} cut range(s) put back ({old_size - new_size} bytes)")
    if dry_run:
        return step
    pieces = [("keep", k["start"], k["end"], k["new_start"]) for k in e["keeps"]]
    pieces += [("cut", c["start"], c["end"], c) for c in e["cuts"]]
    pieces.sort(key=lambda t: t[1])
    for c in e["cuts"]:
        _check_sha(run_dir / c["backup"], c["sha256"], f"{f} [{c['start']}, {c['end']})")
    with open(f, "rb") as fs, staged(f, like=stat_or_none(f)) as (fd, _tmp):
        for kind, s, t, extra in pieces:
            if kind == "keep":
                append_ranges(fs.fileno(), [(extra, extra + t - s)], fd)
            else:
                with open(run_dir / extra["backup"], "rb") as fb:
                    append_ranges(fb.fileno(), [(0, t - s)], fd)
        if os.fstat(fd).st_size != old_size:
            raise UnsafeOperation("the restored file has the wrong size; not restored", path=f)
    return step


def _undo_actions(doc: dict, run_dir: Path, dry_run: bool):
    """Undo a run's actions, last first; yields the steps taken."""
    acts = doc.get("actions", [])
    moved_out = _moved_out(acts)
    for i in range(len(acts) - 1, -1, -1):
        if _rename_not_applied(acts[i], i, moved_out, run_dir):
            continue
        step = _restore_entry(acts[i], run_dir, dry_run, _what(str(doc.get("command", ""))))
        if step is not None:
            yield step
    yield from _remove_leftover_tmp(acts, dry_run)


def _remove_leftover_tmp(acts: list, dry_run: bool):
    """A run killed while it staged a file (``.NAME.kltool-tmp`` beside it, see :func:`atomic_write`) left that
    partial copy: kltool's own, never the broker's, it goes with the run (the files are as before the run)."""
    seen = set()
    for e in acts:
        for key in ("file", "target"):
            name = e.get(key)
            if not isinstance(name, str) or name in seen:
                continue
            seen.add(name)
            tmp = tmp_path_for(name)
            if tmp.is_file() and not tmp.is_symlink():
                step = RestoreStep("delete", str(tmp), "leftover temporary file of the interrupted run", done=not dry_run)
                if not dry_run:
                    os.unlink(tmp)
                    fsync_dir(tmp.parent)
                yield step


def _moved_out(acts: list) -> dict[str, tuple[int, str]]:
    """{file: (index, backup)} of the first quarantine of each file in a run's actions."""
    out: dict[str, tuple[int, str]] = {}
    for i, e in enumerate(acts):
        if isinstance(e, dict) and e.get("op") == "quarantine" and e.get("file") not in out:
            out[e["file"]] = (i, e["backup"])
    return out


def _rename_not_applied(e: dict, i: int, moved_out: dict, run_dir: Path) -> bool:
    """A rename onto a name an earlier quarantine of the same run moves out (a ``.swap`` file taking an old
    segment's name, as a split or a compaction does) was applied only if that quarantine was: while the
    quarantine's backup is absent (a run killed before it), the file under that name is the old one, kept."""
    if e.get("op") != "rename":
        return False
    q = moved_out.get(e.get("target"))
    return q is not None and q[0] < i and not (run_dir / q[1]).exists()


def _what(command: str) -> str:
    """The run as restore's messages name it ("since the compaction", "since the repair")."""
    name = run_name(command)
    return "compaction" if name == "compact" else name


_RESTORE = {"delete": _restore_nothing, "quarantine": _restore_quarantine, "rename": _restore_rename,
            "rebuild_index": _restore_write, "write_checkpoint": _restore_write, "fix_magic": _restore_byte,
            "fix_field": _restore_byte, "truncate": _restore_truncate, "excise": _restore_excise,
            "create": _restore_create}


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
        if real == Path(real.anchor) or inside(self.run_dir, real):
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
        if not inside(real, self.root) or real == self.root:
            self.fail(where, f"{value} is outside the log dir {self.root}")
        if len(real.relative_to(self.root).parts) > 2:
            self.fail(where, f"{value} is deeper than a partition directory of {self.root}")
        why = unfit(value, read=True, write=True)  # a directory or FIFO named like the file, one it may not change
        if why is not None:
            self.fail(where, f"{value} {why}")
        return real

    def in_run(self, where: str, value) -> None:
        if not isinstance(value, str) or not value or os.path.isabs(value):
            self.fail(where, f"{value!r} is not a path relative to the backup run {self.run_dir}")
        real = Path(os.path.realpath(self.run_dir / value))
        if not inside(real, self.run_dir) or real == self.run_dir:
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
        elif op == "create":
            self.int_(f"{w}.new_size", e.get("new_size"))
            self.sha(f"{w}.new_head_sha256", e.get("new_head_sha256"))
            self.sha(f"{w}.new_tail_sha256", e.get("new_tail_sha256"))

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
    never applied is skipped. The log dir's ``.lock`` is held meanwhile and removed again if kltool made it
    (restore, or a run killed before it could remove it) or the manifest says there was none before the
    runs, so the tree ends byte-identical to before them."""
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
            for step in _undo_actions(doc, run_dir, dry_run):
                steps.append(step)
                if on_step is not None:
                    on_step(step)
            if not dry_run and doc.get("lock_file_before") is False and (root / fn.LOCK_FILE).exists():
                # no .lock before the run: none after
                remove_lock_on_release(root)
            if not dry_run and doc.get("status") != "restored":
                doc["status"] = "restored"
                doc["restored"] = now_text()
                atomic_write(m, json.dumps(doc, indent=1) + "\n")
    return steps
