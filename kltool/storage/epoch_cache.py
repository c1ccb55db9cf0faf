"""The leader-epoch cache as the broker keeps and uses it (``LeaderEpochFileCache``) and the rule by which a
follower finds where to truncate (``AbstractFetcherThread.getOffsetTruncationState`` on the leader's
OffsetsForLeaderEpoch answer, or in Kafka 4 the diverging epoch of a fetch response, which the leader
computes the same way).

A cache is a list of ``(epoch, start offset)`` pairs, ascending. :func:`leader_epoch_cache` loads it
from ``leader-epoch-checkpoint`` as the broker's load trims it; :func:`derived_cache` rebuilds it from
the batches as recovery does; :func:`end_offset_for` is ``LeaderEpochFileCache.endOffsetFor``;
:func:`follower_truncation` applies the follower's rule until it is done. (The rule for a damaged
partitionLeaderEpoch field lives in :mod:`kltool.storage.epochs`.)
"""

from __future__ import annotations

from ..errors import CorruptDataError
from ..format import names as fn

__all__ = ["UNDEFINED", "end_offset_for", "follower_truncation", "leader_epoch_cache", "derived_cache"]

UNDEFINED = -1  # UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET


def end_offset_for(cache: list[tuple[int, int]], requested: int, log_end_offset: int) -> tuple[int, int]:
    """``LeaderEpochFileCache.endOffsetFor``: (epoch, end offset) for ``requested`` on a replica whose
    cache is ``cache`` [(epoch, start offset)] ascending and whose log ends at ``log_end_offset``."""
    if requested == UNDEFINED or not cache:
        return UNDEFINED, UNDEFINED
    if cache[-1][0] == requested:
        return requested, log_end_offset
    higher = next(((e, s) for e, s in cache if e > requested), None)
    if higher is None:
        return UNDEFINED, UNDEFINED
    floor = None
    for e, s in cache:
        if e <= requested:
            floor = (e, s)
    if floor is None:
        return requested, higher[1]
    return floor[0], higher[1]


def follower_truncation(leader: list[tuple[int, int]], leader_leo: int, follower: list[tuple[int, int]],
                        follower_leo: int, follower_hw: int) -> tuple[int, str]:
    """Where the follower truncates (offset, how it was found), by the rule its fetcher applies to the
    leader's answers (``getOffsetTruncationState``), asking again with its latest epoch while the leader
    answers with an epoch the follower does not know. Where the rule keeps the follower's initial fetch
    offset (its log end, or its high watermark when it has no leader epoch) and that lies past the leader's
    log end, the fetch is out of range and the follower truncates to the leader's log end
    (``fetchOffsetAndTruncate``)."""
    cache, leo = list(follower), follower_leo
    for _ in range(len(follower) + 2):
        if not cache:
            return _out_of_range(min(follower_hw, leo), leader_leo,
                                 "the follower has no leader epoch: it truncates to its high watermark")
        asked = cache[-1][0]
        epoch, end = end_offset_for(leader, asked, leader_leo)
        if end == UNDEFINED:
            return _out_of_range(leo, leader_leo, f"the leader knows no epoch at or below {asked}: the follower "
                                                  f"keeps its initial fetch offset, its log end")
        f_epoch, f_end = end_offset_for(cache, epoch, leo)
        if f_end == UNDEFINED:
            return min(end, leo), (f"the follower tracks no epoch at or below the leader's {epoch}: "
                                   f"min(leader end offset {end}, log end)")
        if f_epoch != epoch:
            leo = min(f_end, leo)
            cache = [(e, s) for e, s in cache if s < leo]
            continue
        return min(f_end, end, leo), (f"epoch {epoch}: ends at {end} on the leader and {f_end} on the "
                                      f"follower (asked for epoch {asked})")
    return leo, "no answer"  # (unreachable: each round shortens the follower's cache)


def _out_of_range(offset: int, leader_leo: int, why: str) -> tuple[int, str]:
    if offset > leader_leo:
        return leader_leo, f"{why}; past the leader's log end {leader_leo}, the fetch is out of range: truncate there"
    return offset, why


def leader_epoch_cache(p, leo: int, log_start: int) -> tuple[list[tuple[int, int]] | None, str]:
    """The leader-epoch cache the broker loads: ``leader-epoch-checkpoint`` with entries at or past the log
    end dropped and the one covering the log start moved to it (``truncateFromEnd``/``truncateFromStart``);
    (None, why) when it is missing or unreadable."""
    from ..format.checkpoints import parse_leader_epoch_checkpoint
    from .fs import read_small_file  # (a FIFO named so: an error, not a read that waits for ever)

    path = p.path / fn.LEADER_EPOCH_CHECKPOINT
    try:
        entries = parse_leader_epoch_checkpoint(read_small_file(path).decode("utf-8"), path=str(path))
    except FileNotFoundError:
        return None, "missing"
    except (OSError, UnicodeDecodeError, CorruptDataError) as e:
        return None, f"unreadable: {e}"
    entries = [(e, s) for e, s in entries if s < leo]
    kept = [(e, s) for e, s in entries if s > log_start]
    below = [(e, s) for e, s in entries if s <= log_start]
    if below:
        kept.insert(0, (below[-1][0], log_start))
    return kept, "checkpoint"


def derived_cache(p) -> list[tuple[int, int]]:
    """The cache as recovery rebuilds it from the batches: (epoch, base offset) where the epoch rises."""
    out: list[tuple[int, int]] = []
    for seg in p.segments:
        for h in seg.batches():
            if h.crc_valid and h.magic == 2 and h.partition_leader_epoch >= 0 and \
                    (not out or h.partition_leader_epoch > out[-1][0]):
                out.append((h.partition_leader_epoch, h.base_offset))
    return out
