"""Partitions for the compaction tests, built with kltool's own writer, and a reader of what they hold."""

from __future__ import annotations

from pathlib import Path

from kltool.format import decode_records
from kltool.format.batch import build_end_txn_marker, build_v2_batch
from kltool.storage.scan import batches
from kltool.storage.topic_config import TopicConfig
from kltool.storage.write.create import create_topic
from kltool.storage.write.writer import PartitionWriter

T0 = 1_700_000_000_000
DAY = 86_400_000


class Log:
    """A one-partition compacted topic being written: ``data``/``marker`` append batches at the log end."""

    def __init__(self, root: Path, config: dict | None = None, topic: str = "t"):
        self.root = Path(root)
        self.config = {"cleanup.policy": "compact", **(config or {})}
        create_topic(self.root, topic, 1, config=self.config, if_not_exists=True)
        self.dir = self.root / f"{topic}-0"
        self.w = PartitionWriter(self.dir, config=TopicConfig(self.config), now_ms=T0)
        self.next = self.w.log_end_offset
        self.seq: dict[int, int] = {}

    def data(self, records, *, pid: int = -1, epoch: int = 0, txn: bool = False, ts: int | None = None,
             compression: int = 0, log_append_time: int | None = None, leader_epoch: int = 0, headers=()):
        """One batch of ``records`` = [(key, value)] at the log end."""
        ts = T0 + self.next if ts is None else ts
        recs = [(i, ts + i, k, v, list(headers)) for i, (k, v) in enumerate(records)]
        seq = -1
        if pid >= 0:
            seq = self.seq.get(pid, 0)
            self.seq[pid] = seq + len(recs)
        self.w.append(build_v2_batch(recs, base_offset=self.next, producer_id=pid, producer_epoch=epoch,
                                     base_sequence=seq, is_transactional=txn, compression=compression,
                                     log_append_time=log_append_time, partition_leader_epoch=leader_epoch))
        first = self.next
        self.next += len(recs)
        return first

    def marker(self, pid: int, commit: bool, epoch: int = 0, ts: int | None = None) -> int:
        off = self.next
        self.w.append(build_end_txn_marker(offset=off, commit=commit, producer_id=pid, producer_epoch=epoch,
                                           coordinator_epoch=0, timestamp=T0 + off if ts is None else ts,
                                           partition_leader_epoch=0))
        self.next += 1
        return off

    def close(self) -> Path:
        self.w.close()
        return self.root

    def reopen(self) -> None:
        self.w = PartitionWriter(self.dir, config=TopicConfig(self.config), now_ms=T0)
        self.next = self.w.log_end_offset


def read_batches(part: Path):
    """[(header, records)] of every segment, in order (records decoded, control records included)."""
    out = []
    for log in sorted(Path(part).glob("*.log")):
        for h in batches(log, with_data=True):
            assert h.crc_valid, (log, h)
            out.append((h, list(decode_records(h, h.data))))
    return out


def read_records(part: Path, *, controls: bool = False):
    """[(offset, key, value, headers)] of the data records (and markers with ``controls``)."""
    out = []
    for h, recs in read_batches(part):
        if h.is_control and not controls:
            continue
        for r in recs:
            out.append((r.offset, r.key, r.value, [tuple(x) for x in r.headers]) if not h.is_control
                       else (r.offset, "marker", r.control.get("type")))
    return out


def table(part: Path) -> dict:
    """What a consumer building a table from the partition ends with (tombstones delete)."""
    t: dict = {}
    for off, k, v, _h in read_records(part):
        if v is None:
            t.pop(k, None)
        else:
            t[k] = v
        del off
    return t
