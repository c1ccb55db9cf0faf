"""The plan vocabulary every command that changes data speaks (repair, retention, rebuild-index; offline
compaction too): a :class:`Cut` is a byte range of a ``.log`` that leaves it, an :class:`Action` one step of
a plan, a :class:`ChangeSet` the actions of one log dir (one lock, one backup run, one manifest).

A command plans :class:`Action` objects; :func:`kltool.storage.change.apply.apply_changes` backs up what
they remove and applies them; :func:`kltool.storage.change.restore.restore` undoes a run. Repair's actions
are file steps (``truncate``, ``excise``, ``quarantine`` ...) applied as they are; a retention action names
a partition-level step (``roll``, ``write_checkpoint``, ``delete`` of a segment's files, listed in
``paths``) with its facts in ``info``, and retention turns it into file steps for the same engine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...format.topics import CLUSTER_METADATA_TOPIC_NAME

if TYPE_CHECKING:
    from ..logdir import Selection

__all__ = ["Cut", "Action", "ChangeSet", "OPS", "partition_gate", "forget_listings", "left_alone"]

# The file steps the apply engine knows (and a manifest may name).
# ``create``: a file the run makes that did not exist before (compaction's ``.cleaned`` files, written while
# planning); the manifest records its size and head/tail hashes, and restore removes it again.
OPS = ("truncate", "excise", "fix_magic", "fix_field", "rebuild_index", "write_checkpoint", "quarantine", "rename",
       "delete", "create")


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
    the content is now, when that differs (a ``.swap`` file renamed earlier in the same plan).

    A partition-level step (retention's) names its partition (``topic``, ``partition``, ``logdir``), the
    files it removes or creates (``paths``) and its facts (``info``, merged into the JSON object)."""

    op: str  # a file step (OPS), or retention's roll | write_checkpoint | delete
    file: Path
    reason: str | None = None
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
    topic: str | None = None
    partition: int | None = None
    info: dict = field(default_factory=dict)
    paths: list[Path] = field(default_factory=list, repr=False)
    logdir: Path | None = field(default=None, repr=False)
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
        d: dict = {"type": "action", "op": self.op, "file": str(self.file)}
        if self.reason is not None:
            d["reason"] = self.reason
        if self.topic is not None:
            d["topic"], d["partition"] = self.topic, self.partition
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
        d.update(self.info)
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
        if self.op == "create" and self.new_size is not None:
            return f"create {f} ({self.new_size} bytes): {self.reason}"
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


def partition_gate(p, *, not_run: str, metadata: str, needs: str) -> tuple[str, str] | None:
    """The first gates of a partition-level change (retention, compaction): the broker runs it only on a
    partition directory of a normal topic (not a ``-delete``/``-future``/stray one: ``not_run`` says so), never
    on the KRaft metadata log (``metadata``), and the change reads its log dir's checkpoint files (``needs``).
    Returns the (kind, message) of the note that skips ``p``, or None when it passes."""
    if p.kind != "normal":
        return "not_a_log", f"{p.kind} directory: {not_run}"
    if p.topic == CLUSTER_METADATA_TOPIC_NAME:
        return "not_a_log", f"the KRaft metadata log: {metadata}"
    if p.logdir is None:
        return "no_log_dir", f"not inside a log dir: {needs}"
    return None


def left_alone(p) -> list:
    """What a repair says of partition ``p`` when it leaves it alone for confinement (a symlink out of the log
    dir, :mod:`kltool.storage.confine`): nothing when it is not confined; else, per path that leads out, the
    ``outside_log_dir`` warning verify gives, made a ``not_repairable`` error when verify finds errors in the
    partition (read through the link, which is harmless). A repair that leaves damage behind must not say
    "nothing to do" and exit 0 while verify reports it (the stop-18 adversary)."""
    from ..check.verify import VerifyStats, verify_partition
    from ..confine import outside_findings, root_of
    from ..findings import Finding

    found = outside_findings(p)
    if not found:
        return []
    try:
        errors = sum(1 for f in verify_partition(p, stats=VerifyStats()) if f.severity == "error")
    except OSError:  # verify reports what it may not read as an error too
        errors = 1
    if not errors:
        return found
    return [Finding("error", "not_repairable", f.file, f"resolves to {os.path.realpath(f.file)}, outside the log dir "
                    f"{root_of(p)}: {errors} problem(s) kltool verify finds in partition {p.path.name} not repaired "
                    f"(kltool never writes, moves or deletes through a link out of the log dir; replace the link "
                    f"with what it points to, or repair the partition where it lies)") for f in found]


def forget_listings(sel: Selection) -> None:
    """Forget what ``sel`` read of its partitions' files and its log dirs' checkpoints: another run (an
    append that rolled, a repair) may have changed them before this one took the ``.lock``, and a plan
    made on that old listing would roll an "empty" segment over the other run's new one."""
    for p in sel.partitions:
        p.refresh()
        if p.logdir is not None:
            p.logdir.forget_checkpoint()
