"""A partition directory's segment files as a repair plan sees them: :class:`View` (final name -> current
path, after the stale-file actions :func:`plan_stale` adds), :class:`Seg` (one segment's files), and what the
plan reads from them before the scan (:func:`next_offset_of`, :func:`snapshot_open_txns`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import CorruptDataError
from ...format import names as fn
from ...format.records import BatchHeader
from ..fs import TMP_SUFFIX
from ..scan import walk
from .apply import file_size as _size
from .plan import Action

__all__ = ["INDEX_KINDS", "Seg", "View", "next_offset_of", "plan_stale", "snapshot_open_txns"]

INDEX_KINDS = ("index", "timeindex", "txnindex")


@dataclass
class Seg:
    base: int
    log: Path  # where the .log is now
    final: Path  # its name after the plan's renames
    index: Path | None = None  # current paths of the index files (None: missing)
    timeindex: Path | None = None
    txnindex: Path | None = None

    def final_of(self, kind: str) -> Path:
        return self.final.with_name(fn.segment_file(self.base, kind))


class View:
    """A partition directory's segment files as they will be after the stale-file actions:
    final name → current path."""

    def __init__(self, d: Path):
        self.dir = d
        self.entries: list[tuple[int, str, str | None, Path]] = []
        self.temps: list[Path] = []
        for e in sorted(d.iterdir(), key=lambda p: p.name):
            if e.is_dir():
                continue
            m = fn.SEGMENT_FILE.match(e.name)
            if m:
                self.entries.append((int(m.group(1)), m.group(2), m.group(3), e))
            elif e.name.endswith(TMP_SUFFIX):
                self.temps.append(e)
        self.current: dict[str, Path] = {e.name: e for _o, _k, t, e in self.entries if t is None}

    def files(self, kind: str | None = None) -> list[tuple[int, str, str, Path]]:
        """(offset, kind, final name, current path) of the files that will exist."""
        out = []
        for name, path in sorted(self.current.items()):
            m = fn.SEGMENT_FILE.match(name)
            if m and (kind is None or m.group(2) == kind):
                out.append((int(m.group(1)), m.group(2), name, path))
        return out

    def segments(self) -> list[Seg]:
        segs = []
        for off, _k, _name, path in self.files("log"):
            prefix = fn.filename_prefix(off)
            segs.append(Seg(off, path, self.dir / f"{prefix}.log",
                             self.current.get(f"{prefix}.index"), self.current.get(f"{prefix}.timeindex"),
                             self.current.get(f"{prefix}.txnindex")))
        return segs


def next_offset_of(path: Path, base: int) -> int:
    """``readNextOffset`` of a segment file: last batch's last offset + 1, or the base offset when empty."""
    last = None
    for item in walk(path):
        if isinstance(item, BatchHeader) and item.crc_valid:
            last = item.last_offset if last is None else max(last, item.last_offset)
    return base if last is None else last + 1


def plan_stale(view: View, acts: list[Action]) -> None:
    """LogLoader.removeTempFilesAndCollectSwapFiles + the swap completion (``LogLoader.load``)."""
    d = view.dir
    deleted = [(o, k, e) for o, k, t, e in view.entries if t == "deleted"]
    cleaned = [(o, k, e) for o, k, t, e in view.entries if t == "cleaned"]
    swaps = [(o, k, e) for o, k, t, e in view.entries if t == "swap"]
    for _o, _k, e in deleted:
        acts.append(Action("quarantine", e, "scheduled for deletion (.deleted): the broker deletes it at startup",
                           old_size=_size(e)))
    min_cleaned = min((o for o, _k, _e in cleaned), default=None)
    valid_swaps = []
    for o, k, e in swaps:
        if min_cleaned is not None and o >= min_cleaned:
            acts.append(Action("quarantine", e, f"swap file of an incomplete split (at or above the smallest "
                               f".cleaned offset {min_cleaned}): the broker deletes it", old_size=_size(e)))
        else:
            valid_swaps.append((o, k, e))
    for _o, _k, e in cleaned:
        acts.append(Action("quarantine", e, "leftover .cleaned file of an interrupted clean or split: the broker "
                           "deletes it", old_size=_size(e)))
    log_swaps = [(o, e) for o, k, e in valid_swaps if k == "log"]
    if log_swaps:
        lo = min(o for o, _e in log_swaps)
        hi = max(next_offset_of(e, o) for o, e in log_swaps)
        for name, path in list(view.current.items()):
            m = fn.SEGMENT_FILE.match(name)
            off = int(m.group(1))
            if lo <= off < hi:
                acts.append(Action("quarantine", path, f"replaced by the .swap files covering offsets [{lo}, {hi}) "
                                   f"(an interrupted compaction or split; the broker finishes it)",
                                   old_size=_size(path)))
                del view.current[name]
    # Rename .log.swap before the index swaps of the same base (a run killed in between converges).
    order = {"log": 0, "index": 1, "timeindex": 2, "txnindex": 3, "snapshot": 4}
    for _o, _k, e in sorted(valid_swaps, key=lambda t: (t[0], order[t[1]])):
        final_name = e.name[: -len(".swap")]
        if final_name in view.current:
            old = view.current.pop(final_name)
            acts.append(Action("quarantine", old, f"replaced by {e.name}", old_size=_size(old)))
        acts.append(Action("rename", e, "complete the interrupted swap (the broker renames .swap files into place)",
                           target=d / final_name))
        view.current[final_name] = e



def snapshot_open_txns(view: View, first_base: int | None) -> dict[int, int]:
    """Transactions open at the first segment, from the producer snapshot named after it."""
    from ..fs import read_snapshot

    if first_base is None:
        return {}
    p = view.current.get(fn.segment_file(first_base, "snapshot"))
    if p is None:
        return {}
    try:
        snap = read_snapshot(p)
    except (CorruptDataError, OSError):
        return {}
    if not snap.crc_valid:
        return {}
    return {e.producer_id: e.current_txn_first_offset for e in snap.entries if e.current_txn_first_offset >= 0}

