"""The one judge of a segment's existing ``.index`` and ``.timeindex`` (verify and repair both ask it).

It sits beside :mod:`kltool.storage.index_builder`, which writes indexes by the broker's rules; this
module checks the ones on disk, as the broker does when it opens a segment (``OffsetIndex.sanityCheck``,
``TimeIndex.sanityCheck``, ``LogLoader``'s handling of a missing index) and as DumpLogSegments'
``--index-sanity-check``/``--verify-index-only`` do, plus the invariant both the broker's append and
recovery paths keep: every offset-index entry points at the start of a batch whose last offset is the
entry's offset or more (and the previous batch's last offset below it), and every time-index entry names
the max timestamp of the batch holding its offset.

Use: build an :class:`IndexChecker` for a segment, feed it the log's valid batches in file order
(:meth:`IndexChecker.batch`, or :meth:`IndexChecker.run` for a run of batches the C walker checked), then
call :meth:`IndexChecker.finish`. Every problem is a :class:`~kltool.storage.findings.Finding`; repair
reads :attr:`IndexChecker.index_problems` / :attr:`IndexChecker.time_problems` to decide what to rebuild.
"""

from __future__ import annotations

from bisect import bisect_left
from pathlib import Path

from ...errors import CorruptDataError
from ...format import index as fidx
from ...format import names as fn
from ...format.index import MAX_LISTED, unchecked_note
from ...format.records import BatchHeader
from ...format.topics import CLUSTER_METADATA_TOPIC_NAME
from ..findings import Finding
from ..fs import read_index_file

__all__ = ["IndexChecker"]

_FAR = 1 << 62


def _err(kind, file, msg, position=None, offset=None):
    return Finding("error", kind, str(file), msg, position, offset)


def _warn(kind, file, msg, position=None, offset=None):
    return Finding("warning", kind, str(file), msg, position, offset)


def _rebuilt_at_start(path: Path | None) -> bool:
    """Whether the broker recovers the active segment beside ``path`` at its next start, rebuilding its
    indexes from the log whatever they hold: always for the KRaft metadata log (Kafka 4.x opens it with
    lastShutdownClean=false and recovery point 0), and in a log dir without ``.kafka_cleanshutdown``
    (``LogLoader.recoverLog`` recovers every segment from the recovery point, which the active segment
    holds). After a clean shutdown the broker trims the active indexes and opens them as they are
    (``AbstractIndex``: every whole entry counts, a zero tail included)."""
    if path is None:
        return False
    pdir = Path(path).parent
    if pdir.name == f"{CLUSTER_METADATA_TOPIC_NAME}-0":
        return True
    root = pdir.parent
    return (root / fn.META_PROPERTIES).exists() and not (root / fn.CLEAN_SHUTDOWN_FILE).exists()


class IndexChecker:
    """Judges a segment's ``.index`` (``index_path``) and ``.timeindex`` (``timeindex_path``) against its
    batches. A path of None, or one that does not exist, is a missing index. ``log_size`` is the ``.log``'s
    size (0 or None: no log to index); ``is_active`` exempts the active segment's preallocated zero tail: when
    the broker rebuilds that segment's indexes at its next start (:func:`_rebuilt_at_start`) the zero entries,
    an all-zero first entry included, are left out of every check and noted (severity info), as the broker's
    recovery leaves them out."""

    def __init__(self, base_offset: int, index_path: Path | None, timeindex_path: Path | None, *,
                 log_size: int | None, is_active: bool = False):
        self.base = base_offset
        self.index_path = index_path
        self.timeindex_path = timeindex_path
        self.log_size = log_size or 0
        self.findings: list[Finding] = []
        self.index_bytes = self._read(index_path)
        self.time_bytes = self._read(timeindex_path)
        self.index_missing = self.index_bytes is None
        self.time_missing = self.time_bytes is None
        self.oi: list[tuple[int, int]] = []
        self.ti: list[tuple[int, int]] = []
        if self.index_missing:
            if index_path is not None and self.log_size > 0:
                self.findings.append(_warn("missing_index", index_path, "offset index is missing: the broker will "
                                           "rebuild it by recovering the segment at startup"))
        else:
            self.oi = self._load(index_path, self.index_bytes, fidx.check_offset_index, fidx.offset_index_entries,
                                 fidx.offset_index_zero_tail, fidx.OFFSET_ENTRY, is_active)
            self._order(self.oi, index_path, "index_corrupt", lambda a, b: b[0] <= a[0] or b[1] <= a[1],
                        lambda a, b: f"index entries out of order: ({a[0]}, {a[1]}) is followed by ({b[0]}, {b[1]})",
                        offset_of=lambda e: e[0])
        if self.time_missing:
            if timeindex_path is not None and not self.index_missing and self.log_size > 0:
                # LogLoader: a missing time index beside an offset index is created empty, without recovery
                self.findings.append(_warn(
                    "missing_time_index", timeindex_path, "time index is missing while the offset index exists: "
                    "the broker creates an empty one without recovering the segment, so offset-by-time lookups and "
                    "time retention (which falls back to the file's mtime) go wrong for it; kltool verify --repair "
                    "or kltool rebuild-index rebuilds it"))
        else:
            self.ti = self._load(timeindex_path, self.time_bytes, fidx.check_time_index, fidx.time_index_entries,
                                 fidx.time_index_zero_tail, fidx.TIME_ENTRY, is_active)
            self._order(self.ti, timeindex_path, "time_index_order", lambda a, b: b[0] <= a[0] or b[1] < a[1],
                        lambda a, b: f"time index entry (timestamp {b[0]}, offset {b[1]}) follows (timestamp "
                                     f"{a[0]}, offset {a[1]}): timestamps must increase and offsets must not "
                                     f"decrease", offset_of=lambda e: e[1])
        self.j = self.k = 0
        self.prev_last: int | None = None
        self.listed = [0, 0]  # entry findings of the offset index, of the time index
        self.unchecked = [None, None]  # (entries checked, entries) when the rest was not checked
        self._by_pos: dict[int, int] | None = None
        self._next()

    # -- the files -----------------------------------------------------------------------------------------
    @staticmethod
    def _read(path: Path | None) -> bytes | None:
        if path is None:
            return None
        try:
            return read_index_file(path)  # a regular file only: a FIFO named like an index never blocks
        except FileNotFoundError:
            return None

    def _load(self, path, data, check, entries, zero_tail, size, is_active) -> list[tuple[int, int]]:
        if is_active and _rebuilt_at_start(path):
            data = self._drop_preallocated(path, data, zero_tail, size)
        for msg in check(data, self.base, path=str(path)):
            self.findings.append(_err("index_corrupt", path, msg))
        try:
            got, error = entries(data, self.base), None
        except CorruptDataError as e:
            got, error = [], e
        # (the zero tail is what the entries leave out: the file is read through once, not twice)
        zeros = zero_tail(data) if error is not None else len(data) // size - len(got)
        if zeros and not is_active:
            self.findings.append(_warn("index_untrimmed", path, f"{zeros} zero-filled entries at the end "
                                       f"(preallocated, not trimmed: the broker did not close this segment)"))
        if error is not None:
            self.findings.append(_err("index_corrupt", path, error.message, position=error.position))
        return got

    def _drop_preallocated(self, path, data, zero_tail, size):
        """The entries before the zero tail (none when the whole file is zeros), with a note."""
        n = len(data) // size
        zeros = zero_tail(data)
        if n and zeros == n - 1 and not any(data[:size]):
            zeros = n
        if not zeros:
            return data
        self.findings.append(Finding("info", "index_preallocated", str(path), f"{zeros} zero-filled entries at "
                                     f"the end (preallocated): the broker rebuilds this index when it recovers the "
                                     f"active segment at its next start"))
        return fidx.prefix(data, (n - zeros) * size)

    def _listed(self, which: int, finding: Finding, found: list) -> bool:
        """Add ``finding`` (of the offset index: ``which`` 0, of the time index: 1) to ``found``; False once
        :data:`MAX_LISTED` are listed: the rest of that index is then not checked (see :meth:`finish`)."""
        found.append(finding)
        self.listed[which] += 1
        if self.listed[which] < MAX_LISTED:
            return True
        entries = self.oi if which == 0 else self.ti
        done = (self.j if which == 0 else self.k) + 1
        self.unchecked[which] = (done, len(entries))
        if which == 0:
            self.j = len(entries)
        else:
            self.k = len(entries)
        return False

    def index_offset_at(self, position: int) -> int | None:
        """The offset of the last offset-index entry at ``position`` (None when none is): from a map of the
        entries when they are held, else read through them a chunk at a time (never a map of a huge file)."""
        if isinstance(self.oi, list):
            if self._by_pos is None:
                self._by_pos = {pos: off for off, pos in self.oi}
            return self._by_pos.get(position)
        found = None
        for off, pos in self.oi:
            if pos == position:
                found = off
        return found

    def _order(self, entries, path, kind, bad, message, offset_of) -> None:
        for a, b in zip(entries, entries[1:], strict=False):
            if bad(a, b):
                self.findings.append(_err(kind, path, message(a, b), offset=offset_of(b)))
                return

    def problems(self, path: Path | None) -> list[str]:
        """The messages of what is wrong with the file at ``path`` (a missing file is not a problem here)."""
        if path is None:
            return []
        p = str(path)
        return [f.message for f in self.findings
                if f.file == p and f.severity != "info" and f.kind not in ("missing_index", "missing_time_index")]

    @property
    def index_problems(self) -> list[str]:
        return self.problems(self.index_path)

    @property
    def time_problems(self) -> list[str]:
        return self.problems(self.timeindex_path)

    # -- against the batches ---------------------------------------------------------------------------------
    def _next(self) -> None:
        """The position of the next offset-index entry and the offset of the next time-index entry."""
        self.next_pos = self.oi[self.j][1] if self.j < len(self.oi) else _FAR
        self.next_off = self.ti[self.k][1] if self.k < len(self.ti) else _FAR

    @property
    def pending(self) -> bool:
        return self.j < len(self.oi) or self.k < len(self.ti)

    def batch(self, h: BatchHeader) -> None:
        """The next valid batch of the log, at its position in the file the indexes describe."""
        if h.position < self.next_pos and h.last_offset < self.next_off:  # the usual case: no entry here
            self.prev_last = h.last_offset
            return
        oi, ti, found = self.oi, self.ti, self.findings
        while self.j < len(oi) and oi[self.j][1] <= h.position:
            off, pos = oi[self.j]
            if pos < h.position:
                if not self._listed(0, _err("index_mismatch", self.index_path, f"index entry (offset {off}, position "
                                            f"{pos}) does not point at the start of a batch", position=pos,
                                            offset=off), found):
                    break
            elif h.last_offset > off or (self.prev_last is not None and self.prev_last >= off):
                if not self._listed(0, _err("index_mismatch", self.index_path, f"index entry (offset {off}, position "
                                            f"{pos}) points at a batch with offsets {h.base_offset}..{h.last_offset}",
                                            position=pos, offset=off), found):
                    break
            self.j += 1
        while self.k < len(ti) and ti[self.k][1] <= h.last_offset:
            ts, off = ti[self.k]
            if h.max_timestamp != ts:
                if not self._listed(1, _err("time_index_mismatch", self.timeindex_path, f"time index entry (timestamp "
                                            f"{ts}, offset {off}): the batch holding offset {off} has max timestamp "
                                            f"{h.max_timestamp}", offset=off), found):
                    break
            self.k += 1
        self.prev_last = h.last_offset
        self._next()

    def run(self, run) -> None:
        """:meth:`batch` for every batch of a :class:`~kltool.storage.scan.BatchRun`, on its columns (the same
        findings in the same order: each index entry goes to the first batch at or after it)."""
        if self.pending:
            pos, base, lasts, mts = run.columns()
            oi, ti = self.oi, self.ti
            found = []  # (batch, 0 = offset index / 1 = time index, finding)
            x = 0
            while self.j < len(oi) and oi[self.j][1] <= pos[-1]:
                off, p = oi[self.j]
                x = max(x, bisect_left(pos, p))
                prev = lasts[x - 1] if x else self.prev_last
                if p < pos[x]:
                    if not self._listed(0, (x, 0, _err("index_mismatch", self.index_path, f"index entry (offset "
                                                       f"{off}, position {p}) does not point at the start of a batch",
                                                       position=p, offset=off)), found):
                        break
                elif lasts[x] > off or (prev is not None and prev >= off):
                    if not self._listed(0, (x, 0, _err("index_mismatch", self.index_path, f"index entry (offset "
                                                       f"{off}, position {p}) points at a batch with offsets "
                                                       f"{base[x]}..{lasts[x]}", position=p, offset=off)), found):
                        break
                self.j += 1
            x = 0
            while self.k < len(ti) and ti[self.k][1] <= lasts[-1]:
                ts, off = ti[self.k]
                x = max(x, bisect_left(lasts, off))
                if mts[x] != ts:
                    if not self._listed(1, (x, 1, _err("time_index_mismatch", self.timeindex_path, f"time index "
                                                       f"entry (timestamp {ts}, offset {off}): the batch holding "
                                                       f"offset {off} has max timestamp {mts[x]}", offset=off)), found):
                        break
                self.k += 1
            found.sort(key=lambda t: (t[0], t[1]))
            self.findings.extend(f for _x, _k, f in found)
            self._next()
        self.prev_last = run.last_offset

    def finish(self) -> list[Finding]:
        """Entries left over point past the last batch. Returns every finding."""
        found = self.findings
        for off, pos in self.oi[self.j:]:
            if not self._listed(0, _err("index_mismatch", self.index_path, f"index entry (offset {off}, position "
                                        f"{pos}) points past the last batch (log size {self.log_size})",
                                        position=pos, offset=off), found):
                break
            self.j += 1
        for ts, off in self.ti[self.k:]:
            if not self._listed(1, _err("time_index_mismatch", self.timeindex_path, f"time index entry (timestamp "
                                        f"{ts}, offset {off}) names an offset after the last batch", offset=off),
                                found):
                break
            self.k += 1
        for which, path in ((0, self.index_path), (1, self.timeindex_path)):
            if self.unchecked[which] is not None:
                done, n = self.unchecked[which]
                found.append(Finding("info", "index_unchecked", str(path), unchecked_note(MAX_LISTED, done, n)))
                self.unchecked[which] = None
        self.j, self.k = len(self.oi), len(self.ti)
        self._next()
        return self.findings
