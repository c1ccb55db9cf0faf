"""What kltool's own reader says (walk + decode_records), to compare the Spark data source with."""

from __future__ import annotations

from kltool.errors import CorruptDataError
from kltool.format import decode_records
from kltool.storage import Damage, open_paths, walk

TT = {"create": 0, "log_append": 1, "none": -1}


def local_spark(app: str, conf: dict | None = None, **options):
    """kltool's Spark session on ``local[2]`` named ``app``, two shuffle partitions (``conf`` and ``options``
    added); a machine without Java fails here rather than skipping (spark-report is part of the product)."""
    import shutil

    assert shutil.which("java") is not None, "Spark needs Java (a JDK or JRE on PATH)"
    from kltool.spark import session

    return session("local[2]", app, conf={"spark.sql.shuffle.partitions": "2", **(conf or {})}, **options)


def kltool_records(paths, include_control: bool = False) -> list[tuple]:
    """(topic, partition, offset, timestamp ms, timestampType, key, value, headers|None) of every
    record of every CRC-valid, decodable batch."""
    rows = []
    for p in open_paths([str(x) for x in paths]).partitions:
        for s in p.segments:
            for h in walk(s.log_path, with_data=True):
                if isinstance(h, Damage) or not h.crc_valid or (h.is_control and not include_control):
                    continue
                try:
                    cols = decode_records(h)
                except CorruptDataError:
                    continue
                for i in range(len(cols)):
                    hl = cols.header_list(i)
                    hs = tuple((k.decode("utf-8", "replace"), v) for k, v in hl) if hl else None
                    rows.append((p.topic, p.partition, cols.offsets[i], cols.timestamps[i], TT[h.timestamp_type],
                                 cols.key(i), cols.value(i), hs))
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


def kltool_batches(paths) -> list[tuple]:
    rows = []
    for p in open_paths([str(x) for x in paths]).partitions:
        for s in p.segments:
            for h in walk(s.log_path):
                if isinstance(h, Damage):
                    continue
                rows.append((p.topic, p.partition, s.base_offset, h.position, h.size, h.last_offset, h.magic,
                             h.compression_name, bool(h.crc_valid), h.max_timestamp, h.is_control))
    return sorted(rows)


def brute_offset_for_time(paths, ts: int) -> dict:
    """{(topic, partition): (offset, timestamp)} of the first record (control records too) with
    timestamp >= ts, by reading everything."""
    best: dict = {}
    for r in kltool_records(paths, include_control=True):
        key = (r[0], r[1])
        if r[3] >= ts and (key not in best or r[2] < best[key][0]):
            best[key] = (r[2], r[3])
    return best
