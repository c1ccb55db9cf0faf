"""Leader epochs on disk: the one rule for a damaged ``partitionLeaderEpoch`` field.

A v2 batch's partitionLeaderEpoch (bytes 12..15) is not covered by its CRC. Leader epochs never go down
in a log (LeaderEpochFileCache only ever appends a higher epoch), so one batch whose epoch differs from
the epoch both its neighbours carry, when ``leader-epoch-checkpoint`` does not name it, holds a damaged
field: at recovery the broker would add the bogus epoch to its leader epoch cache (and, for a higher
one, truncate the cache's later entries). ``verify`` reports it (:class:`EpochWatch`), ``verify
--repair`` restores the neighbours' epoch in place (``segscan.Ctx.settle_epoch``); both ask
:func:`epoch_out_of_line`.
"""

from __future__ import annotations

from .findings import Finding

EPOCH_FIELD = 12  # the partitionLeaderEpoch field's position in a v2 batch


def epoch_out_of_line(prev: int | None, epoch: int, nxt: int | None, known: set[int] | frozenset[int],
                      follows: bool) -> bool:
    """Is ``epoch``, one batch's partitionLeaderEpoch, damaged? ``prev`` is the epoch of the v2 batch before
    it, ``nxt`` that of the v2 batch after it (None: no CRC-valid v2 batch there), ``known`` the epochs
    leader-epoch-checkpoint names, ``follows`` whether the next batch's offsets follow this one's (else it
    is no witness)."""
    return prev is not None and nxt is not None and follows and epoch != prev and nxt == prev \
        and epoch not in known


def checkpoint_epochs(partition_dir) -> set[int]:
    """The leader epochs ``leader-epoch-checkpoint`` names (empty when it is missing or unreadable)."""
    from ..errors import CorruptDataError
    from ..format import names as fn
    from ..format.checkpoints import parse_leader_epoch_checkpoint
    from .fs import read_small_file

    try:
        text = read_small_file(partition_dir / fn.LEADER_EPOCH_CHECKPOINT)  # (not a FIFO's endless read)
        return {e for e, _start in parse_leader_epoch_checkpoint(text)}
    except (OSError, UnicodeDecodeError, CorruptDataError):
        return set()


class EpochWatch:
    """Follows the partitionLeaderEpoch of a partition's CRC-valid v2 batches, in log order, across its
    segments, and reports a batch whose epoch is out of line (:func:`epoch_out_of_line`).

    Feed it groups of consecutive batches that share one epoch (:meth:`batches`; a run of the C walker
    is one), and :meth:`gap` where a CRC-valid batch that is not v2 comes between. Damage and batches
    whose CRC fails are left out (a repair cuts them, and the batches around them become neighbours, as
    repair's witness is the next CRC-valid batch). A finding is returned once the batch after the
    suspect is seen."""

    __slots__ = ("known", "prev", "epoch", "single", "where")

    def __init__(self, known: set[int] | frozenset[int] = frozenset()):
        self.known = known
        self.prev: int | None = None  # the epoch of the batches before the current group
        self.epoch: int | None = None  # the current group's epoch
        self.single = False  # the current group is one batch
        self.where: tuple | None = None  # (file, position, base offset, last offset) of that one batch

    def batches(self, epoch: int, count: int, file, position: int, base: int, last: int) -> Finding | None:
        """``count`` consecutive batches of ``epoch``, the first at ``position`` of ``file`` with offsets
        ``base``..``last`` (the first batch's)."""
        if epoch == self.epoch:
            self.single = False
            return None
        found = None
        if self.single and self.where is not None:
            f, pos, b, lst = self.where
            if epoch_out_of_line(self.prev, self.epoch, epoch, self.known, base > lst):
                found = Finding("error", "leader_epoch_field", str(f),
                                f"batch at byte {pos} has partitionLeaderEpoch {self.epoch} (not covered by the CRC) "
                                f"between batches of epoch {self.prev}, and leader-epoch-checkpoint does not name "
                                f"it: leader epochs never go down in a log; kltool verify --repair restores it to "
                                f"{self.prev}", pos + EPOCH_FIELD, b)
        if found is None and self.epoch is not None:
            self.prev = self.epoch
        self.epoch, self.single, self.where = epoch, count == 1, (file, position, base, last)
        return found

    def gap(self) -> None:
        """A CRC-valid batch that is not v2: the current group has no witness after it."""
        if self.epoch is not None:
            self.prev = self.epoch
        self.epoch, self.single, self.where = None, False, None
