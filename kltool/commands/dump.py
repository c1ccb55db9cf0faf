"""kltool dump: batches, records, indexes, snapshots and checkpoint files, as text or JSON lines."""

from __future__ import annotations

import json

import click

from ..errors import CorruptDataError, UsageError
from ..format import speedups
from ..format.batch import V2_OVERHEAD, whole_batch_limit
from ..format.records import CONTROL_IDS, BatchHeader, java_long
from ..jsonl import record_json
from ..kafka_text import (
    TS_NAMES,
    batch_json,
    batch_json_line,
    batch_text,
    control_text,
    decoded_key_payload,
    snapshot_entry_text,
    txn_entry_text,
)
from ..kcat_format import compile_format
from ..output import JSON_ERRORS, _dumps, json_text, text_bytes
from ..storage.findings import Finding
from ..storage.fs import read_index_file, read_txn_index_file
from ..storage.logdir import unreadable
from ..storage.read import RecordFilter
from ..storage.scan import HOLD, Damage, records_of, walk
from .common import parse_time, select, selection_options

_ENCODINGS = {"text": 0, "base64": 1, "hex": 2}  # _speedups.format_v2's codes


class Dumper:
    def __init__(self, out, records: bool, encoding: str, limit: int | None, flt: RecordFilter,
                 topic=None, partition=None, decoder: str = "auto", *, payload: bool = True,
                 skip_metadata: bool = False, fmt=None, max_bytes: int | None = None, tail: int | None = None,
                 index_sanity_only: bool = False, verify_index_only: bool = False):
        self.payload = payload  # text records: key/payload/headers (kafka-dump-log's --print-data-log)
        self.skip_metadata = skip_metadata
        self.fmt = fmt  # a compiled kcat-style --format
        self.max_bytes = max_bytes
        self.tail = tail  # --from-offset -N: the last N offsets of each partition/file
        self.isolation: str | None = None  # --isolation-level (partitions only)
        self.index_sanity_only = index_sanity_only
        self.verify_index_only = verify_index_only
        self.stopped = False  # --to-time passed
        self.decoder_name = decoder
        self.out = out
        self.records = records
        self.encoding = encoding
        self.limit = limit
        self.flt = flt
        self.emitted = 0
        self.topic = topic
        self.partition = partition
        self.errors = 0
        self.too_large: CorruptDataError | None = None  # the first record over --max-record-bytes

    def decoder(self):
        """The internal-topic decoder for the current topic (``--decoder``), or None."""
        key = (self.decoder_name, self.topic)
        cached = self.__dict__.get("_decoder_for")
        if cached is not None and cached[0] == key:
            return cached[1]
        dec = self._find_decoder()
        self._decoder_for = (key, dec)
        return dec

    def _find_decoder(self):
        from ..format import internal

        if self.decoder_name == "none":
            return None
        if self.decoder_name == "auto":
            return internal.decoder_for_topic(self.topic) if self.topic else None
        return internal.DECODERS[self.decoder_name]

    def decode_internal(self, dec, key, val, ctrl, cols, i):
        from ..format import internal

        try:
            if ctrl is not None:
                if dec is internal.decode_cluster_metadata:
                    ctype = ctrl.get("type_id", CONTROL_IDS.get(ctrl["type"]))
                    return internal.decode_raft_control(ctype, val), None
                return None, None
            return dec(key, val), None
        except CorruptDataError as e:
            return None, e.message

    @property
    def done(self) -> bool:
        return self.stopped or (self.limit is not None and self.emitted >= self.limit)

    @property
    def headers_shown(self) -> bool:
        """The "Dumping FILE" and batch lines (not with --json or --format)."""
        return not self.out.json_mode and self.fmt is None

    def damage(self, d: Damage, file: str) -> None:
        self.errors += 1
        if self.out.json_mode:
            self.out.emit(Finding("error", d.kind, file, d.message + ("" if d.resumed_at is None else
                                  f"; valid batches resume at byte {d.resumed_at}"),
                                  position=d.position, length=d.length).to_json())
        elif d.kind == "torn_tail" and self.fmt is None:  # (an incomplete last batch) kafka-dump-log's words
            self.out.line(f"Found {d.length} invalid bytes at the end of {file.rpartition('/')[2]}")
        else:
            resume = "end of file" if d.resumed_at is None else f"byte {d.resumed_at}"
            msg = f"{d.kind} at position {d.position}, {d.length} bytes: {d.message} (reading resumes at {resume})"
            self.out.line(f"!! {msg}") if self.fmt is None else self.out.warn(f"{file}: {msg}")

    def batch(self, h: BatchHeader, file: str) -> None:
        if not self.flt.batch_may_match(h):
            return
        if not self.records:
            self._batch_only(h, file)
            return
        if self._fast_records(h, file):
            return
        # The records, a bounded group at a time (records_of): a batch of any size is read; a record over
        # --max-record-bytes ends it with record_too_large after the records before it.
        groups = iter(())
        err = None
        cols = None
        try:
            groups = iter(records_of(h, file))
            cols = next(groups, None)
        except CorruptDataError as e:
            err = e
        if self.flt.to_time is not None and cols is not None and h.magic > 0:
            for i in range(len(cols)):  # --to-time: no header for a batch whose first record is past it
                if self.flt.from_offset is None or cols.offsets[i] >= self.flt.from_offset:
                    if cols.timestamps[i] > self.flt.to_time:
                        self.stopped = True
                        return
                    break
        if self.flt.key is None and self.fmt is None:
            self._emit_batch(h, file)
        if err is None and not h.crc_valid:
            self.errors += 1
        while cols is not None:
            if self._print_records(h, cols):
                return
            try:
                cols = next(groups, None)
            except CorruptDataError as e:
                err = e
                break
        if err is not None:
            self.errors += 1
            self._record_error(h, file, err)

    def _batch_only(self, h: BatchHeader, file: str) -> None:
        """The batch line; with record filters, only when a record matches."""
        flt = self.flt
        filtered = flt.key is not None or flt.to_time is not None or flt.from_time is not None
        if filtered or (h.magic < 2 and not h.base_offset_exact and h.crc_valid):  # (v0/v1: the exact base offset)
            matched = not filtered
            try:
                for cols in records_of(h, file):
                    if not filtered:
                        break
                    n = len(cols)
                    for i in range(n):  # --to-time: nothing after the first record stamped later
                        if flt.past_end(cols.offsets[i], cols.timestamps[i], h.magic):
                            self.stopped = True
                            n = i
                            break
                    matched = matched or any(flt.record_matches(cols.offsets[i], cols.timestamps[i], cols.key(i))
                                             for i in range(n))
                    if self.stopped:
                        break
            except CorruptDataError:
                matched = True  # undecodable: shown (verify --deep names the problem)
            if not matched:
                return
        self._emit_batch(h, file)
        self.emitted += 1

    def _print_records(self, h: BatchHeader, cols) -> bool:
        """Print the matching records of one group; True when the dump stops here (--to-time, --limit)."""
        flt = self.flt
        dec = self.decoder()
        for i in range(len(cols)):
            off = cols.offsets[i]
            ts = cols.timestamps[i]
            key = cols.key(i)
            if flt.past_end(off, ts, h.magic):
                self.stopped = True  # --to-time: stop at the first record stamped after it (as kcat's end)
                return True
            if not flt.record_matches(off, ts, key):
                continue
            if self.done:
                return True
            self.emitted += 1
            self._print_record(h, cols, i, key, dec)
        return False

    def _legacy_crcs(self, cols) -> list:
        """isValid and crc of each v0/v1 message of ``cols`` (computed once per group)."""
        cached = self.__dict__.get("_crcs")
        if cached is None or cached[0] is not cols:
            from ..format.legacy import message_crcs

            cached = self._crcs = (cols, message_crcs(cols))
        return cached[1]

    def _print_record(self, h: BatchHeader, cols, i: int, key, dec) -> None:
        """Record ``i`` of ``cols`` as a --format line, a JSON object or kafka-dump-log's text line."""
        out = self.out
        off, ts, val, hdrs = cols.offsets[i], cols.timestamps[i], cols.value(i), cols.header_list(i)
        seq = cols.sequences[i] if cols.sequences is not None else -1
        ctrl = cols.controls[i] if cols.controls is not None else None
        decoded = derr = None
        if dec is not None:
            decoded, derr = self.decode_internal(dec, key, val, ctrl, cols, i)
        if self.fmt is not None:
            if ctrl is None:  # consumers never see control records
                out.write(self.fmt(self.topic, self.partition, off, ts, key, val, hdrs, self.encoding))
        elif out.json_mode:
            out.emit(record_json(off, ts, h.timestamp_type, key, val, hdrs, encoding=self.encoding, sequence=seq,
                                 size=cols.sizes[i], batch_offset=h.base_offset, topic=self.topic,
                                 partition=self.partition, control=ctrl, decoded=decoded, decode_error=derr))
        else:
            crc = self._legacy_crcs(cols)[i] if h.magic < 2 else None
            out.line(self._record_text(h, off, ts, key, val, hdrs, seq, ctrl, decoded, derr, crc))

    def _record_text(self, h: BatchHeader, off, ts, key, val, hdrs, seq, ctrl, decoded, derr, crc=None) -> str:
        """kafka-dump-log's record line (DumpLogSegments' printRecordMetadata and printRecordContents):
        the metadata unless --skip-record-metadata, then key and payload (not for a control record)."""
        if self.skip_metadata:
            parts, prefix = [], "| "
        else:
            parts, prefix = [f"| offset: {java_long(off)} {TS_NAMES[h.timestamp_type]}: {ts} "
                             f"keySize: {-1 if key is None else len(key)} valueSize: {-1 if val is None else len(val)}"], " "
            if h.magic == 2:
                parts.append(f" sequence: {seq} headerKeys: [{','.join(text_bytes(k) for k, _ in hdrs)}]")
            if crc is not None:  # v0/v1: each message's own CRC
                parts.append(f" isValid: {'true' if crc[0] else 'false'} crc: {crc[1]}")
            if ctrl is not None:
                parts.append(control_text(ctrl, val))
        if ctrl is not None or not self.payload:
            return "".join(parts)
        if decoded is not None or derr is not None:
            k, v = decoded_key_payload(self.decoder(), java_long(off), decoded, derr)
        else:
            k = None if key is None else text_bytes(key, self.encoding)
            v = None if val is None else text_bytes(val, self.encoding)
        if k is not None:
            parts.append(f"{prefix}key: {k}")
            prefix = " "
        if v is not None:
            parts.append(f"{prefix}payload: {v}")
        return "".join(parts)

    def _fast_records(self, h: BatchHeader, file: str) -> bool:
        """The C formatter (when built) writes a whole v2 batch's record lines into one buffer,
        byte for byte what the loop in :meth:`batch` writes. False when it does not apply (a
        control batch, an internal-topic decoder, text it does not escape, malformed records):
        the Python loop then does the batch."""
        c = speedups.C
        if self.fmt is not None or self.skip_metadata or not self.payload or self.flt.to_time is not None:
            return False  # (--format, kafka-dump-log's record-line variants and --to-time's stop: the Python loop)
        if c is None or h.magic != 2 or h.is_control or h.count is None or h.count < 0 or self.decoder() is not None:
            return False
        if h.data is None:
            return False  # (a batch too large to hold: read in groups by the Python loop)
        data = memoryview(h.data)[V2_OVERHEAD:h.size]
        whole = whole_batch_limit()
        if h.compression != 0:
            from ..format.compression import decompress

            try:  # bounded: a batch that expands further (a bomb, or huge) goes through the Python loop,
                # which reads it a group of records at a time, only as far as its declared records need
                data = decompress(h.compression, data, 2, limit=min(max(1 << 20, 16 * len(data)), whole))
            except CorruptDataError:
                return False
        elif len(data) > whole:
            return False  # (its records may exceed --max-record-bytes: the Python loop checks each)
        js = self.out.json_mode
        suffix = "}"
        if js and self.topic is not None:
            cached = self.__dict__.get("_suffix")
            if cached is None or cached[0] != (self.topic, self.partition):
                cached = self._suffix = ((self.topic, self.partition), json_text(
                    f',"topic":{_dumps(self.topic)},"partition":{_dumps(self.partition)}}}'))
            suffix = cached[1]
        flt = self.flt
        if not all(v is None or -(1 << 63) <= v < (1 << 63) for v in (flt.from_offset, flt.to_offset, flt.from_time)):
            return False  # (a filter past the long range, e.g. --from-offset -N past a wrapped log end: the Python loop)
        got = c.format_v2(data, h.count, h.base_offset, h.first_timestamp, h.timestamp_type == "log_append",
                          h.max_timestamp, h.base_sequence, json=js, encoding=_ENCODINGS[self.encoding],
                          ts_name=h.timestamp_type if js else TS_NAMES[h.timestamp_type], suffix=suffix,
                          from_offset=flt.from_offset, to_offset=flt.to_offset, from_time=flt.from_time,
                          to_time=flt.to_time, key=flt.key,
                          max_records=-1 if self.limit is None else min(max(self.limit - self.emitted, 0), 1 << 62))
        if got is None:
            return False
        blob, n = got
        if flt.key is None:
            self.out.write_bytes((batch_json_line(h, file, suffix) if js else batch_text(h) + "\n")
                                 .encode("utf-8", JSON_ERRORS))
        if not h.crc_valid:
            self.errors += 1
        self.emitted += n
        self.out.write_bytes(blob)
        return True

    def _emit_batch(self, h: BatchHeader, file: str) -> None:
        if self.out.json_mode:
            d = batch_json(h, file)
            if self.topic is not None:
                d["topic"] = self.topic
                d["partition"] = self.partition
            self.out.emit(d)
        else:
            self.out.line(batch_text(h))

    def _record_error(self, h: BatchHeader, file: str, e: CorruptDataError) -> None:
        from ..format.compression import TooLarge

        kind = "record_too_large" if isinstance(e, TooLarge) else "record_corrupt"
        if kind == "record_too_large" and self.too_large is None:
            # the batch line and the records before it are printed; exit 2 at the end, naming the first
            self.too_large = CorruptDataError(f"{e.message} (the batch's metadata and the records before it "
                                              f"are printed)", path=file, position=h.position)
        if self.out.json_mode:
            self.out.emit(Finding("error", kind, file, e.message,
                                  position=e.position if e.position is not None else h.position,
                                  offset=h.base_offset if getattr(e, "offset", None) is None else e.offset,
                                  length=h.size).to_json())
        else:
            self.out.line(f"!! {kind} in batch at position {h.position} of {file}: {e.message}")


def _end_of(item) -> int:
    return item.position + (item.length if isinstance(item, Damage) else item.size)


def _dump_log(d: Dumper, path, base_offset=None, kind: str = "log") -> None:
    out = d.out
    if d.headers_shown:
        out.line(f"Dumping {path}")
        if kind == "kraft_snapshot":
            from ..format.names import kraft_snapshot_header

            out.line(kraft_snapshot_header(path.name))
            base_offset = None
        elif base_offset is not None:
            out.line(f"Log starting offset: {base_offset}")
    if d.tail is not None:  # the last N offsets of this file
        last = None
        for item in walk(path, with_data=False):
            if not isinstance(item, Damage):
                last = item.last_offset
        d.flt.from_offset = None if last is None else max(0, last + 1 - d.tail)
    start = 0
    if base_offset is not None and d.flt.from_offset is not None:
        from ..storage.segment import Segment

        start = Segment(path.parent, base_offset, path).position_for_offset(d.flt.from_offset)
    for item in walk(path, start=start, with_data=True, hold_limit=HOLD):
        if d.done:
            return
        if d.max_bytes is not None and _end_of(item) > d.max_bytes:
            return  # kafka-dump-log --max-bytes: only the first N bytes of a file
        if isinstance(item, Damage):
            d.damage(item, str(path))
        else:
            d.batch(item, str(path))
            if d.flt.to_offset is not None and item.last_offset >= d.flt.to_offset:
                return


def _dump_partition(d: Dumper, p) -> None:
    from ..storage.read import Isolation, read_partition

    out = d.out
    d.topic, d.partition = p.topic, p.partition
    if d.tail is not None:  # --from-offset -N: the last N offsets, as kcat -o -N
        d.flt.from_offset = max(p.log_start_offset(), p.log_end_offset() - d.tail)
    iso = Isolation(p, d.isolation) if d.isolation is not None else None
    if iso is not None:  # a consumer reads nothing below the log start offset (the fetch is out of range)
        d.flt.from_offset = max(p.log_start_offset(), d.flt.from_offset or 0)
    current = None
    for seg, item in read_partition(p, from_offset=d.flt.from_offset, to_offset=d.flt.to_offset,
                                    from_time=d.flt.from_time):
        if d.done:
            return
        if iso is not None and not isinstance(item, Damage):
            if iso.ends_at(item):
                return
            if iso.hides(item):
                continue
        if seg is not current:
            current = seg
            if d.headers_shown:
                out.line(f"Dumping {seg.log_path}")
                out.line(f"Log starting offset: {seg.base_offset}")
        if d.max_bytes is not None and _end_of(item) > d.max_bytes:
            continue  # kafka-dump-log --max-bytes: only the first N bytes of each segment
        if isinstance(item, Damage):
            d.damage(item, str(seg.log_path))
        else:
            d.batch(item, str(seg.log_path))


def _dump_index(d: Dumper, path, kind: str, base) -> None:
    """An .index or .timeindex: its entries as kafka-dump-log's "name: value" pairs, after what its
    sanity check finds (--index-sanity-check: only that)."""
    from ..format import index as fidx

    out, js, f = d.out, d.out.json_mode, str(path)
    # (parser, JSON type, field names)
    parse, jtype, names = ((fidx.offset_index_entries, "index_entry", ("offset", "position")) if kind == "index"
                           else (fidx.time_index_entries, "time_index_entry", ("timestamp", "offset")))
    data = read_index_file(path)  # (a preallocated zero tail not held)
    check = fidx.check_offset_index if kind == "index" else fidx.check_time_index
    problems = check(data, base or 0, path=f)
    for msg in problems:  # as verify reports them (a partial entry is corruption, not emptiness)
        d.errors += 1
        out.emit(Finding("error", "index_corrupt", f, msg).to_json()) if js else \
            out.line(f"!! index_corrupt: {msg}")
    if d.index_sanity_only:  # kafka-dump-log --index-sanity-check
        if not problems:
            out.emit({"type": "index_sanity_check", "file": f, "passed": True}) if js else \
                out.line(f"{path} passed sanity check.")
        return
    entries = parse(data, base)
    if not entries and not js and not problems:
        out.line(f"{path} is empty.")
    if d.verify_index_only:  # kafka-dump-log --verify-index-only: no entries, what does not match the log
        if kind == "index":
            _index_mismatches(d, path, entries)
        return
    for a, b in entries[: d.limit]:  # (the offset as Kafka's OffsetIndex/TimeIndex computes it: a Java long)
        a, b = (java_long(a), b) if kind == "index" else (a, java_long(b))
        out.emit({"type": jtype, "file": f, names[0]: a, names[1]: b}) if js else \
            out.line(f"{names[0]}: {a} {names[1]}: {b}")


def _index_mismatches(d: Dumper, path, entries) -> None:
    """Each offset-index entry whose position does not start a batch ending at its offset (DumpLogSegments'
    check): a finding per entry (on stderr in text mode, as Kafka's "Mismatches in" lines)."""
    from ..format.index import MAX_LISTED, unchecked_note
    from ..format.names import parse_segment_file, segment_file

    log = path.with_name(segment_file(parse_segment_file(path.name)[0], "log"))
    listed = 0
    for i, (offset, position) in enumerate(entries):
        offset = java_long(offset)
        # (a negative position, garbage, starts no batch: not a read at a negative offset, EINVAL)
        first = next(iter(walk(log, start=position, with_data=False)), None) if position >= 0 and log.exists() \
            else None
        found = -1 if first is None or isinstance(first, Damage) else java_long(first.last_offset)
        if found == offset:
            continue
        if listed == MAX_LISTED:  # garbage: as verify, the rest is not checked (a bounded time and output)
            msg = unchecked_note(MAX_LISTED, i, len(entries))
            _note_unchecked(d.out, path, msg)
            return
        listed += 1
        d.errors += 1
        msg = f"index offset {offset} points at position {position}, where the log's batch ends at offset {found}"
        if d.out.json_mode:
            d.out.emit(Finding("error", "index_mismatch", str(path), msg, position=position, offset=offset).to_json())
        else:
            d.out.warn(f"{path}: {msg}")


def _note_unchecked(out, path, msg: str) -> None:
    """The index_unchecked note of an index whose rest is not dumped: a JSON finding, or a line on stderr."""
    if out.json_mode:
        out.emit(Finding("info", "index_unchecked", str(path), msg).to_json())
    else:
        out.warn(f"{path}: {msg}")


def _dump_txnindex(d: Dumper, path, kind: str, base) -> None:
    """A .txnindex: its entries as AbortedTxn prints them, streamed (a file of any size is read a chunk at a
    time, and --limit stops the read). Garbage is bounded too: once MAX_LISTED entries that fail the
    broker's check (a version above the current, a last offset below the base offset) are dumped, the rest
    is not, and a note says so."""
    from ..format import index as fidx

    out, f = d.out, str(path)
    data = read_txn_index_file(path)
    n, bad, base = len(data) // fidx.TXN_ENTRY, 0, base or 0
    for k, t in enumerate(fidx.iter_txn_index(data)):
        if d.limit is not None and k >= d.limit:
            return
        if bad == fidx.MAX_LISTED:
            msg = fidx.unchecked_note(bad, k, n, what="are corrupt", not_done="dumped")
            _note_unchecked(out, path, msg)
            return
        bad += t.version > fidx.TXN_INDEX_VERSION or t.last_offset < base
        if out.json_mode:
            out.emit({"type": "txn_index_entry", "file": f, "version": t.version, "producer_id": t.producer_id,
                      "first_offset": t.first_offset, "last_offset": t.last_offset,
                      "last_stable_offset": t.last_stable_offset})
        else:
            out.line(txn_entry_text(t))


def _dump_snapshot(d: Dumper, path, kind: str, base) -> None:
    """A producer-state .snapshot: its entries as kafka-dump-log prints them (streamed: a snapshot of millions
    of producers is read a chunk at a time, after its CRC)."""
    from itertools import islice

    from ..storage.fs import read_snapshot, snapshot_entries

    out, js, f = d.out, d.out.json_mode, str(path)
    try:
        snap = read_snapshot(path, entries=False)
    except CorruptDataError as e:
        raise e.at(path=path) from None
    if not snap.crc_valid:
        d.errors += 1
        msg = f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {snap.crc}. Computed crc: {snap.computed_crc}"
        out.emit(Finding("error", "snapshot_corrupt", f, msg, position=2).to_json()) if js else \
            out.line(f"!! {msg}")
    for e in islice(snapshot_entries(path, snap), d.limit):
        if js:
            out.emit({"type": "producer_snapshot_entry", "file": f, "producer_id": e.producer_id,
                      "producer_epoch": e.producer_epoch, "coordinator_epoch": e.coordinator_epoch,
                      "current_txn_first_offset": e.current_txn_first_offset, "last_timestamp": e.timestamp,
                      "last_sequence": e.last_sequence, "last_offset": e.last_offset,
                      "offset_delta": e.offset_delta})
        else:
            out.line(snapshot_entry_text(e))


# the small text files: kind -> (JSON objects of the parsed value, its text lines)
_TEXT_FILES = {
    "offset_checkpoint": (
        lambda f, v: ({"type": "checkpoint_entry", "file": f, "topic": t, "partition": p, "offset": o}
                      for (t, p), o in sorted(v.items())),
        lambda v: (f"{t} {p} {o}" for (t, p), o in sorted(v.items()))),
    "leader_epoch_checkpoint": (
        lambda f, v: ({"type": "leader_epoch_entry", "file": f, "epoch": ep, "start_offset": so} for ep, so in v),
        lambda v: (f"epoch: {ep} startOffset: {so}" for ep, so in v)),
    "partition_metadata": (
        lambda f, v: [{"type": "partition_metadata", "file": f, "version": v[0], "topic_id": v[1]}],
        lambda v: [f"version: {v[0]} topic_id: {v[1]}"]),
    "meta_properties": (
        lambda f, v: [{"type": "properties", "file": f, "properties": v}],
        lambda v: (f"{k}={x}" for k, x in v.items())),
}
_JSON_FILE = (lambda f, v: [{"type": "json_file", "file": f, "content": v}],
              lambda v: [json.dumps(v)])


def _dump_text_file(d: Dumper, path, kind: str, base) -> None:
    """Checkpoints, partition.metadata, meta.properties and Kafka's small JSON files."""
    from ..storage.fs import read_text_file

    value = read_text_file(path, kind)
    objects, lines = _TEXT_FILES.get(kind, _JSON_FILE)
    if d.out.json_mode:
        for o in objects(str(path), value):
            d.out.emit(o)
    else:
        d.out.write_lines(lines(value))


_OTHER_FILES = {"index": _dump_index, "timeindex": _dump_index, "txnindex": _dump_txnindex,
                "snapshot": _dump_snapshot}


def _dump_other(d: Dumper, path, kind: str, base) -> None:
    """Index, snapshot and text files."""
    if not d.out.json_mode:
        d.out.line(f"Dumping {path}")
    _OTHER_FILES.get(kind, _dump_text_file)(d, path, kind, base)


# kafka-dump-log.sh's decoder classes: its default (what kltool prints: UTF-8 text) is accepted, others get a hint
STRING_DECODER = "org.apache.kafka.tools.api.StringDecoder"
_KAFKA_HINTS = {
    "key_decoder_class": "--key-decoder-class: kltool prints keys as UTF-8 text (Kafka's StringDecoder, the only "
                         "class accepted); use --encoding base64|hex, or --json and a decoder of your own",
    "value_decoder_class": "--value-decoder-class: kltool prints values as UTF-8 text (Kafka's StringDecoder, the "
                           "only class accepted); use --encoding base64|hex, or --json and a decoder of your own",
}


def _decoder_classes(key_decoder_class: str | None, value_decoder_class: str | None) -> bool:
    """Whether a --*-decoder-class was given (kafka-dump-log: implies --print-data-log); only StringDecoder is."""
    for name, given in (("key_decoder_class", key_decoder_class), ("value_decoder_class", value_decoder_class)):
        if given is not None and given not in ("", STRING_DECODER):
            raise UsageError(_KAFKA_HINTS[name])
    return key_decoder_class is not None or value_decoder_class is not None


def _kafka_decoder(offsets: bool, transaction_log: bool, cluster_metadata: bool, decoder: str) -> str | None:
    """The --decoder that kafka-dump-log's --*-decoder flags name (None: none given)."""
    chosen = [n for n, on in (("consumer-offsets", offsets), ("transaction-state", transaction_log),
                              ("cluster-metadata", cluster_metadata)) if on]
    if len(chosen) > 1 or (chosen and decoder != "auto"):
        raise UsageError("give one decoder (--decoder or one of kafka-dump-log's --*-decoder options)")
    return chosen[0] if chosen else None


def _dump_files(d: Dumper, files, alone: bool) -> None:
    """Single files: each by its kind (a file inside a partition directory takes its topic's decoder). One
    kltool may not read is said and the dump goes on (exit 1), unless it is the only PATH (exit 2)."""
    from ..format.names import classify
    from ..format.topics import parse_partition_dir_name

    for path in files:
        if d.limit is not None and d.emitted >= d.limit:
            break
        d.stopped = False
        kind, base = classify(path)
        d.topic = d.partition = None
        try:
            d.topic, d.partition = parse_partition_dir_name(path.resolve().parent.name)[:2]
        except CorruptDataError:
            pass
        try:
            if kind in ("log", "kraft_snapshot"):
                _dump_log(d, path, base, kind)
            elif kind == "unknown":
                d.out.warn(f"{path}: ignoring a file kltool does not know")
            else:
                _dump_other(d, path, kind, base)
        except OSError as e:
            if isinstance(e, BrokenPipeError) or alone:
                raise
            d.errors += 1
            f = unreadable(e.filename or path, e, "not dumped")
            d.out.emit(f.to_json()) if d.out.json_mode else d.out.warn(f"{f.file}: {f.message}")


@click.command("dump")
@click.argument("paths", nargs=-1, type=click.Path(path_type=str, readable=False))
@selection_options
@click.option("--records", is_flag=True, help="Print every record (decompressing), not only batch headers.")
@click.option("--from-offset", type=int, help="First offset (seeks through the offset index); -N: the last N "
              "offsets of each partition, as kcat -o -N.")
@click.option("--to-offset", type=int, help="Last offset (inclusive).")
@click.option("--from-time", help="First timestamp: ISO-8601 or epoch ms (seeks through the time index).")
@click.option("--to-time", help="Last timestamp (inclusive): the dump stops at the first record stamped after it.")
@click.option("--key", help="Only records with this key (UTF-8 text).")
@click.option("--limit", type=click.IntRange(min=1), help="Stop after this many batches (or records with --records).")
@click.option("--encoding", type=click.Choice(["text", "base64", "hex"]), default="text", show_default=True,
              help="How keys, values and header values are shown.")
@click.option("--decoder", type=click.Choice(["auto", "none", "consumer-offsets", "transaction-state",
                                              "cluster-metadata", "remote-log-metadata"]), default="auto", show_default=True,
              help="Decode Kafka's internal topics (auto: by topic name): kafka-dump-log's 'key: {...} payload: {...}' "
                   "in text, a 'decoded' field in JSON.")
@click.option("--format", "fmt", metavar="FMT", help="Records as a kcat-style format string, e.g. "
              "'%t [%p] %o: %k=%s\\n' (%t %p %o %k %K %s %S %T %h; implies --records).")
@click.option("--files", "files", multiple=True, metavar="F1,F2", help="kafka-dump-log's form of PATH (comma separated).")
@click.option("--print-data-log", is_flag=True, help="kafka-dump-log's name for --records.")
@click.option("--deep-iteration", is_flag=True, help="kafka-dump-log: record lines without key and payload.")
@click.option("--skip-record-metadata", is_flag=True, help="kafka-dump-log: record lines with key and payload only.")
@click.option("--offsets-decoder", is_flag=True, help="kafka-dump-log's --decoder consumer-offsets (implies --records).")
@click.option("--transaction-log-decoder", is_flag=True,
              help="kafka-dump-log's --decoder transaction-state (implies --records).")
@click.option("--cluster-metadata-decoder", is_flag=True,
              help="kafka-dump-log's --decoder cluster-metadata (implies --records).")
@click.option("--max-bytes", type=click.IntRange(min=0), metavar="N",
              help="Read only the first N bytes of each .log (batches that end past N are not shown).")
@click.option("--index-sanity-check", is_flag=True, help="For .index/.timeindex files: run Kafka's sanity check "
              "only ('FILE passed sanity check.').")
@click.option("--max-record-bytes", type=click.IntRange(min=1024), default=256 << 20, show_default=True,
              help="The largest record (key, value and headers) read; a record over it is reported (exit 2), "
                   "never held. Batches of any size are read.")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]), default=None,
              help="Show what a consumer at this level reads: no transaction markers; read_committed: no aborted "
                   "transactional records either, and nothing from the last stable offset on (log dirs and "
                   "partition directories). Default: neither, the forensic view: every batch and record, markers "
                   "and aborted records included.")
@click.option("--verify-index-only", is_flag=True, help="kafka-dump-log: for .index/.timeindex files, no entries; "
              "an .index entry that does not point at a batch ending at its offset is reported.")
@click.option("--max-message-size", type=click.IntRange(min=1), metavar="N", help="kafka-dump-log's option, "
              "accepted and not needed: kltool reads records of any size up to --max-record-bytes.")
@click.option("--key-decoder-class", metavar="CLASS", help=f"kafka-dump-log: only {STRING_DECODER} (UTF-8 text, "
              "the default) is accepted; implies --print-data-log.")
@click.option("--value-decoder-class", metavar="CLASS", help="kafka-dump-log: as --key-decoder-class.")
@click.pass_obj
def command(out, paths, topic, partition_spec, records, from_offset, to_offset, from_time, to_time, key, limit,
            encoding, decoder, fmt, files, print_data_log, deep_iteration, skip_record_metadata, offsets_decoder,
            transaction_log_decoder, cluster_metadata_decoder, max_bytes, index_sanity_check, max_record_bytes,
            isolation_level, verify_index_only, max_message_size, key_decoder_class, value_decoder_class):
    """Print the batches (or --records) of log dirs, partitions, or files: .log, .index,
    .timeindex, .txnindex, .snapshot, checkpoint files, partition.metadata, meta.properties.

    Unlike kafka-dump-log, damage does not stop the dump: it is reported where it is and
    reading resumes at the next valid batch. kafka-dump-log's options work too (--files,
    --print-data-log, --deep-iteration, --skip-record-metadata, --offsets-decoder,
    --transaction-log-decoder, --cluster-metadata-decoder, --max-bytes, --index-sanity-check,
    --verify-index-only, --max-message-size, --key/value-decoder-class StringDecoder), and with
    them the output is kafka-dump-log's line for line (the README lists the differences).
    """
    from ..format.compression import set_limit

    set_limit(max_record_bytes)
    print_data_log = _decoder_classes(key_decoder_class, value_decoder_class) or print_data_log
    paths = list(paths) + [f.strip() for group in files for f in group.split(",") if f.strip()]
    if not paths:
        raise UsageError("Missing argument 'PATHS...' (log dirs, partition directories or files; or --files)")
    chosen = _kafka_decoder(offsets_decoder, transaction_log_decoder, cluster_metadata_decoder, decoder)
    if chosen is None and decoder == "auto" and (deep_iteration or print_data_log):
        decoder = "none"  # kafka-dump-log's options print kafka-dump-log's lines: it decodes only when told
    decoder = chosen or decoder
    if fmt == "":
        raise UsageError("--format is empty (e.g. '%k=%s\\n')")
    if fmt is not None and out.json_mode:
        raise UsageError("--format and --json are two output formats: give one")
    # kafka-dump-log: --print-data-log and the decoders imply --deep-iteration; --deep-iteration alone
    # prints record lines without key and payload
    payload = not deep_iteration or print_data_log or chosen is not None or records
    records = records or print_data_log or deep_iteration or chosen is not None or fmt is not None
    tail = None
    if from_offset is not None and from_offset < 0:
        tail, from_offset = -from_offset, None
    flt = RecordFilter(from_offset, to_offset, parse_time(from_time), parse_time(to_time),
                       None if key is None else key.encode("utf-8"))
    if flt.from_offset is not None and flt.to_offset is not None and flt.to_offset < flt.from_offset:
        raise UsageError(f"--to-offset {to_offset} is below --from-offset {from_offset}: no offset is in that range "
                         f"(both are inclusive: --from-offset {to_offset} --to-offset {from_offset}?)")
    if flt.from_time is not None and flt.to_time is not None and flt.to_time < flt.from_time:
        raise UsageError(f"--to-time {to_time} is before --from-time {from_time}: no record is in that range "
                         f"(both are inclusive)")
    sel = select(paths, topic, partition_spec)
    d = Dumper(out, records, encoding, limit, flt, decoder=decoder, payload=payload,
               skip_metadata=skip_record_metadata, fmt=None if fmt is None else compile_format(fmt),
               max_bytes=max_bytes, tail=tail, index_sanity_only=index_sanity_check,
               verify_index_only=verify_index_only)
    if isolation_level is not None and sel.files:
        raise UsageError(f"--isolation-level reads a whole partition (its aborted transactions span segments): give "
                         f"its directory, not {sel.files[0]}")
    d.isolation = isolation_level
    for p in sel.partitions:
        if d.limit is not None and d.emitted >= d.limit:
            break
        d.stopped = False  # --to-time stops each partition on its own
        try:
            _dump_partition(d, p)
        except BrokenPipeError:
            raise
        except OSError as e:  # a file or directory it may not read: said, and the dump goes on (exit 1)
            d.errors += 1
            f = unreadable(e.filename or p.path, e, f"the rest of partition {p.name} was not dumped")
            out.emit(f.to_json()) if out.json_mode else out.warn(f"{f.file}: {f.message}")
    _dump_files(d, sel.files, alone=len(sel.files) + len(sel.partitions) == 1)
    out.flush()
    if d.too_large is not None:
        raise d.too_large
    return 1 if d.errors else 0
