"""Confinement: what kltool writes, moves or deletes stays inside the log dir it works on.

A partition directory, or any file in one, that resolves (after symlinks) outside its log dir, say
``logdir/evil-0 -> /some/other/dir``, is reported (an ``outside_log_dir`` finding, by verify and by every
planner, which leave that partition alone) and never written, moved or deleted: the apply engine
(:mod:`kltool.storage.change.apply`) refuses any action whose path resolves outside its log dir, and restore
refuses a manifest naming one. Reading through such a link is harmless and goes on.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .findings import Finding

__all__ = ["inside", "resolves_inside", "root_of", "escaping", "outside_findings", "logdir_outside_findings",
           "OUTSIDE", "unfit"]

OUTSIDE = "outside_log_dir"


def inside(child: Path, parent: Path) -> bool:
    """Is ``child`` ``parent`` or below it (as paths: resolve both first)?"""
    try:
        Path(child).relative_to(parent)
        return True
    except ValueError:
        return False


def resolves_inside(path, root) -> bool:
    """Does ``path`` resolve, after every symlink, to ``root`` or below it (``root`` resolved too)?"""
    return inside(Path(os.path.realpath(path)), Path(os.path.realpath(root)))


def root_of(partition) -> Path:
    """The directory a partition's changes are confined to: its log dir, else the directory holding it."""
    return partition.logdir.path if partition.logdir is not None else Path(os.path.abspath(partition.path)).parent


def escaping(pdir, root) -> list[Path]:
    """The paths of partition directory ``pdir`` that resolve outside ``root``: ``pdir`` itself, else each
    entry of it that is a symlink leading out."""
    pdir = Path(pdir)
    if not resolves_inside(pdir, root):
        return [pdir]
    out = []
    try:
        with os.scandir(pdir) as it:
            for e in it:
                if e.is_symlink() and not resolves_inside(e.path, root):
                    out.append(Path(e.path))
    except OSError:
        return out
    return sorted(out)


def outside_findings(partition) -> list[Finding]:
    """``outside_log_dir`` warnings for a partition whose directory or files resolve outside its log dir."""
    root = root_of(partition)
    return [Finding("warning", OUTSIDE, str(p), f"resolves to {os.path.realpath(p)}, outside the log dir "
                    f"{root}: kltool never writes, moves or deletes through it (the partition is left alone by "
                    f"repair, rebuild-index and retention)") for p in escaping(partition.path, root)]


def logdir_outside_findings(root) -> list[Finding]:
    """``outside_log_dir`` warnings for the files at a log dir's root (checkpoints, meta.properties ...) that
    are symlinks leading out of it (partition directories are :func:`outside_findings`' concern)."""
    out = []
    try:
        with os.scandir(root) as it:
            links = sorted(e.path for e in it if e.is_symlink() and not os.path.isdir(e.path))
    except OSError:
        return out
    for p in links:
        if not resolves_inside(p, root):
            out.append(Finding("warning", OUTSIDE, p, f"resolves to {os.path.realpath(p)}, outside the log dir "
                               f"{root}: kltool never writes, moves or deletes through it (a command that would "
                               f"change it refuses)"))
    return out


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def unfit(path, *, read: bool = False, write: bool = False) -> str | None:
    """Why kltool must not write, move or delete ``path`` (after symlinks), or None: it is there but is not a
    regular file (a directory or FIFO named like a segment, index or checkpoint), or kltool may not read
    (``read``) or write (``write``) it. A path that is not there (a dangling symlink too) is fit: nothing of
    it is lost."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return (e.strerror or str(e)).lower()
    for test, kind in _KINDS:
        if test(st.st_mode):
            return f"is {kind}, not a regular file"
    if read and not os.access(path, os.R_OK):
        return "permission denied (read)"
    if write and not os.access(path, os.W_OK):
        return "permission denied (write)"
    return None
