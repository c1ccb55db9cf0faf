#!/usr/bin/env python3
"""A peer reader as a whole process (for bench_all.py): ``peer_read.py kafka-python|aiokafka [--deep] FILE``.

It does what bench_verify.py's in-process peers do (read the file, check every batch's CRC; --deep also
touches every record's offset, timestamp, key, value and headers) and prints one JSON line of counts.
"""

from __future__ import annotations

import json
import sys
import warnings


def main(argv: list[str]) -> int:
    which, *rest = argv
    deep = "--deep" in rest
    path = [a for a in rest if a != "--deep"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if which == "kafka-python":
            from kafka.record.memory_records import MemoryRecords
        else:
            from aiokafka.record.memory_records import MemoryRecords
    with open(path, "rb") as f:
        data = f.read()
    mr = MemoryRecords(data)
    batches = records = touched = 0
    nxt = mr.next_batch
    while (b := nxt()) is not None:
        if not b.validate_crc():
            print(json.dumps({"error": f"CRC mismatch in batch {b.base_offset}"}))
            return 1
        batches += 1
        if not deep:
            records += b.last_offset_delta + 1
            continue
        for r in b:
            records += 1
            k = r.key
            v = r.value
            touched += (0 if k is None else len(k)) + (0 if v is None else len(v)) + (r.offset & 0) + (r.timestamp & 0)
            for hk, hv in r.headers:
                touched += len(hk) + (0 if hv is None else len(hv))
    print(json.dumps({"batches": batches, "records": records, "touched": touched}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
