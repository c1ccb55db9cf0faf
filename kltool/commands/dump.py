"""kltool dump: batches, records, indexes, snapshots and checkpoint files, as text or JSON lines."""

from __future__ import annotations

import click

from ..errors import CorruptDataError, UsageError
from ..format import speedups
from ..format.batch import V2_OVERHEAD, whole_batch_limit
from ..format.compression import CODEC_NAMES
from ..format.records import CONTROL_IDS, BatchHeader
from ..jsonl import record_json
from ..output import _dumps, text_bytes
from ..storage.findings import Finding
from ..storage.read import RecordFilter
from ..storage.scan import HOLD, Damage, records_of, walk
from .common import parse_time, select, selection_options

TS_NAMES = {"create": "CreateTime", "log_append": "LogAppendTime", "none": "NoTimestampType"}
_ENCODINGS = {"text": 0, "base64": 1, "hex": 2}  # _speedups.format_v2's codes


def batch_json(h: BatchHeader, file: str) -> dict:
    return {
        "type": "batch", "file": file, "position": h.position, "size": h.size, "base_offset": h.base_offset,
        "last_offset": h.last_offset, "count": h.count, "magic": h.magic, "crc": h.crc, "crc_valid": h.crc_valid,
        "compression": h.compression_name, "timestamp_type": h.timestamp_type,
        "first_timestamp": h.first_timestamp if h.magic == 2 else h.max_timestamp,
        "max_timestamp": h.max_timestamp, "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence, "last_sequence": h.last_sequence,
        "partition_leader_epoch": h.partition_leader_epoch, "is_transactional": h.is_transactional,
        "is_control": h.is_control, "delete_horizon_ms": h.delete_horizon_ms,
    }


_JSON_BOOL = {True: "true", False: "false", None: "null"}


def _codec_name(h: BatchHeader) -> str:
    return CODEC_NAMES.get(h.compression) or h.compression_name
_FILE_JSON: dict[str, str] = {}


def _batch_json_line(h: BatchHeader, file: str, suffix: str) -> str:
    """``_dumps(batch_json(h, file) + topic, partition)`` for a v2 batch, as one f-string (the
    dump --records fast path writes one per batch; tests check they are equal)."""
    f = _FILE_JSON.get(file)
    if f is None:
        f = _FILE_JSON[file] = _dumps(file)
    dh = h.delete_horizon_ms
    return (f'{{"type":"batch","file":{f},"position":{h.position},"size":{h.size},"base_offset":{h.base_offset},'
            f'"last_offset":{h.last_offset},"count":{h.count},"magic":{h.magic},"crc":{h.crc},'
            f'"crc_valid":{_JSON_BOOL[h.crc_valid]},"compression":"{_codec_name(h)}",'
            f'"timestamp_type":"{h.timestamp_type}","first_timestamp":{h.first_timestamp},'
            f'"max_timestamp":{h.max_timestamp},"producer_id":{h.producer_id},"producer_epoch":{h.producer_epoch},'
            f'"base_sequence":{h.base_sequence},"last_sequence":{h.last_sequence},'
            f'"partition_leader_epoch":{h.partition_leader_epoch},"is_transactional":{_JSON_BOOL[h.is_transactional]},'
            f'"is_control":{_JSON_BOOL[h.is_control]},"delete_horizon_ms":{"null" if dh is None else dh}'
            f'{suffix}\n')


def batch_text(h: BatchHeader) -> str:
    ts = TS_NAMES[h.timestamp_type]
    valid = "true" if h.crc_valid else "false"
    if h.magic == 2:
        dh = "OptionalLong.empty" if h.delete_horizon_ms is None else f"OptionalLong[{h.delete_horizon_ms}]"
        return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.count} "
                f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
                f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
                f"deleteHorizonMs: {dh} position: {h.position} {ts}: {h.max_timestamp} size: {h.size} "
                f"magic: {h.magic} compresscodec: {_codec_name(h)} crc: {h.crc} isvalid: {valid}")
    return (f"offset: {h.last_offset} position: {h.position} {ts}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {h.compression_name} crc: {h.crc} isvalid: {valid}")


class Dumper:
    def __init__(self, out, records: bool, encoding: str, limit: int | None, flt: RecordFilter,
                 topic=None, partition=None, decoder: str = "auto", *, payload: bool = True,
                 skip_metadata: bool = False, fmt=None, max_bytes: int | None = None, tail: int | None = None,
                 index_sanity_only: bool = False):
        self.payload = payload  # text records: key/payload/headers (kafka-dump-log's --print-data-log)
        self.skip_metadata = skip_metadata
        self.fmt = fmt  # a compiled kcat-style --format
        self.max_bytes = max_bytes
        self.tail = tail  # --from-offset -N: the last N offsets of each partition/file
        self.isolation: str | None = None  # --isolation-level (partitions only)
        self.index_sanity_only = index_sanity_only
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

    def _print_records(self, h: BatchHeader, cols) -> bool:  # noqa: C901
        """Print the matching records of one group; True when the dump stops here (--to-time, --limit)."""
        enc = self.encoding
        out = self.out
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
            val = cols.value(i)
            hdrs = cols.header_list(i)
            seq = cols.sequences[i] if cols.sequences is not None else -1
            ctrl = cols.controls[i] if cols.controls is not None else None
            decoded = derr = None
            if dec is not None:
                decoded, derr = self.decode_internal(dec, key, val, ctrl, cols, i)
            if self.fmt is not None:
                if ctrl is None:  # consumers never see control records
                    out.write(self.fmt(self.topic, self.partition, off, ts, key, val, hdrs, enc))
                continue
            if out.json_mode:
                out.emit(record_json(off, ts, h.timestamp_type, key, val, hdrs, encoding=enc, sequence=seq,
                                     size=cols.sizes[i], batch_offset=h.base_offset, topic=self.topic,
                                     partition=self.partition, control=ctrl, decoded=decoded, decode_error=derr))
            else:
                if self.skip_metadata:
                    # kafka-dump-log --skip-record-metadata, quirks included: "| key: K payload: V", but
                    # " payload: V" without the "|" when the key is null, and an empty line for a control record
                    if ctrl is not None:
                        out.line("")
                        continue
                    parts = ["|"] if key is not None else []
                else:
                    parts = [f"| offset: {off} {TS_NAMES[h.timestamp_type]}: {ts} "
                             f"keySize: {-1 if key is None else len(key)} valueSize: {-1 if val is None else len(val)}"]
                    if h.magic == 2:
                        parts.append(f" sequence: {seq} headerKeys: [{','.join(text_bytes(k) for k, _ in hdrs)}]")
                if ctrl is not None:
                    extra = f" coordinatorEpoch: {ctrl['coordinator_epoch']}" if "coordinator_epoch" in ctrl else ""
                    if ctrl["type"] in ("COMMIT", "ABORT"):
                        parts.append(f" endTxnMarker: {ctrl['type']}{extra}")
                    else:
                        parts.append(f" controlType: {ctrl['type']}")
                elif decoded is not None or derr is not None:
                    import json as _json

                    parts.append(f" decoded: {_json.dumps(decoded, separators=(',', ':'))}" if derr is None
                                 else f" decode_error: {derr}")
                elif self.payload:
                    if hdrs and not self.skip_metadata:
                        parts.append(" headers: [" + ", ".join(f"{text_bytes(k)}={text_bytes(v, enc)}"
                                                               for k, v in hdrs) + "]")
                    if key is not None:
                        parts.append(f" key: {text_bytes(key, enc)}")
                    if val is not None:
                        parts.append(f" payload: {text_bytes(val, enc)}")
                out.line("".join(parts))
        return False

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
                cached = self._suffix = ((self.topic, self.partition),
                                         f',"topic":{_dumps(self.topic)},"partition":{_dumps(self.partition)}}}')
            suffix = cached[1]
        flt = self.flt
        got = c.format_v2(data, h.count, h.base_offset, h.first_timestamp, h.timestamp_type == "log_append",
                          h.max_timestamp, h.base_sequence, js, _ENCODINGS[self.encoding],
                          h.timestamp_type if js else TS_NAMES[h.timestamp_type], suffix, flt.from_offset,
                          flt.to_offset, flt.from_time, flt.to_time, flt.key,
                          -1 if self.limit is None else max(self.limit - self.emitted, 0))
        if got is None:
            return False
        blob, n = got
        if flt.key is None:
            self.out.write_bytes((_batch_json_line(h, file, suffix) if js else batch_text(h) + "\n").encode("utf-8"))
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


def _dump_log(d: Dumper, path, base_offset=None) -> None:
    out = d.out
    if d.headers_shown:
        out.line(f"Dumping {path}")
        if base_offset is not None:
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


def _dump_other(d: Dumper, path, kind: str, base) -> None:  # noqa: C901
    """Index, snapshot and text files."""
    from ..format import index as fidx
    from ..storage.fs import read_text_file

    out = d.out
    js = out.json_mode
    f = str(path)
    if not js:
        out.line(f"Dumping {path}")
    if kind in ("index", "timeindex"):
        # (parser, JSON type, field names) — text lines are "name: value" pairs, as kafka-dump-log's
        parse, jtype, names = ((fidx.offset_index_entries, "index_entry", ("offset", "position")) if kind == "index"
                               else (fidx.time_index_entries, "time_index_entry", ("timestamp", "offset")))
        data = path.read_bytes()
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
        for a, b in entries[: d.limit]:
            out.emit({"type": jtype, "file": f, names[0]: a, names[1]: b}) if js else \
                out.line(f"{names[0]}: {a} {names[1]}: {b}")
    elif kind == "txnindex":
        for t in fidx.parse_txn_index(path.read_bytes())[: d.limit]:
            if js:
                out.emit({"type": "txn_index_entry", "file": f, "version": t.version, "producer_id": t.producer_id,
                          "first_offset": t.first_offset, "last_offset": t.last_offset,
                          "last_stable_offset": t.last_stable_offset})
            else:
                out.line(f"version: {t.version} producerId: {t.producer_id} firstOffset: {t.first_offset} "
                         f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}")
    elif kind == "snapshot":
        from ..format.snapshot import parse_snapshot

        try:
            snap = parse_snapshot(path.read_bytes())
        except CorruptDataError as e:
            raise e.at(path=path) from None
        if not snap.crc_valid:
            d.errors += 1
            msg = f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {snap.crc}. Computed crc: {snap.computed_crc}"
            out.emit(Finding("error", "snapshot_corrupt", f, msg, position=2).to_json()) if js else \
                out.line(f"!! {msg}")
        for e in snap.entries[: d.limit]:
            if js:
                out.emit({"type": "producer_snapshot_entry", "file": f, "producer_id": e.producer_id,
                          "producer_epoch": e.producer_epoch, "coordinator_epoch": e.coordinator_epoch,
                          "current_txn_first_offset": e.current_txn_first_offset, "last_timestamp": e.timestamp,
                          "last_sequence": e.last_sequence, "last_offset": e.last_offset,
                          "offset_delta": e.offset_delta})
            else:
                txn = "OptionalLong.empty" if e.current_txn_first_offset < 0 else f"OptionalLong[{e.current_txn_first_offset}]"
                out.line(f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: "
                         f"{e.coordinator_epoch} currentTxnFirstOffset: {txn} lastTimestamp: {e.timestamp} "
                         f"lastSequence: {e.last_sequence} lastOffset: {e.last_offset} offsetDelta: {e.offset_delta}")
    else:
        value = read_text_file(path, kind)
        if kind == "offset_checkpoint":
            for (t, p), o in sorted(value.items()):
                out.emit({"type": "checkpoint_entry", "file": f, "topic": t, "partition": p, "offset": o}) if js \
                    else out.line(f"{t} {p} {o}")
        elif kind == "leader_epoch_checkpoint":
            for ep, so in value:
                out.emit({"type": "leader_epoch_entry", "file": f, "epoch": ep, "start_offset": so}) if js \
                    else out.line(f"epoch: {ep} startOffset: {so}")
        elif kind == "partition_metadata":
            out.emit({"type": "partition_metadata", "file": f, "version": value[0], "topic_id": value[1]}) if js \
                else out.line(f"version: {value[0]} topic_id: {value[1]}")
        elif kind == "meta_properties":
            out.emit({"type": "properties", "file": f, "properties": value}) if js else \
                out.write_lines(f"{k}={v}" for k, v in value.items())
        else:
            import json as _json

            out.emit({"type": "json_file", "file": f, "content": value}) if js else out.line(_json.dumps(value))


def compile_format(fmt: str):  # noqa: C901
    """A kcat-style ``-f`` format: %t topic, %p partition, %o offset, %k key, %K key length, %s value,
    %S value length (-1 for null), %T timestamp (epoch ms), %h headers (k=v,...), %% a percent sign;
    \\n \\r \\t \\\\ and \\xHH escapes. No newline is added (end the format with \\n), as in kcat.
    Returns ``f(topic, partition, offset, ts, key, value, headers, encoding) -> str``."""
    parts: list = []  # str literals and field names
    lit = []
    i, n = 0, len(fmt)
    while i < n:
        c = fmt[i]
        if c == "%" and i + 1 < n:
            t = fmt[i + 1]
            if t == "%":
                lit.append("%")
            elif t in "tpokKsSTh":
                if lit:
                    parts.append("".join(lit))
                    lit = []
                parts.append((t,))
            elif t == "R":
                raise UsageError("--format: %R (binary value length) is not supported on a text stream; use %S")
            else:
                raise UsageError(f"--format: unknown token %{t} (kcat's: %t %p %o %k %K %s %S %T %h)")
            i += 2
        elif c == "\\" and i + 1 < n:
            t = fmt[i + 1]
            if t in "nrt\\":
                lit.append({"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}[t])
                i += 2
            elif t == "x" and len(fmt[i + 2:i + 4]) == 2 and all(ch in "0123456789abcdefABCDEF"
                                                                   for ch in fmt[i + 2:i + 4]):
                lit.append(chr(int(fmt[i + 2:i + 4], 16)))
                i += 4
            else:
                lit.append(c)
                i += 1
        else:
            lit.append(c)
            i += 1
    if lit:
        parts.append("".join(lit))

    def render(topic, partition, offset, ts, key, value, headers, encoding) -> str:
        out = []
        for p in parts:
            if isinstance(p, str):
                out.append(p)
                continue
            t = p[0]
            if t == "t":
                out.append("" if topic is None else topic)
            elif t == "p":
                out.append("" if partition is None else str(partition))
            elif t == "o":
                out.append(str(offset))
            elif t == "T":
                out.append(str(ts))
            elif t == "k":
                out.append("" if key is None else text_bytes(key, encoding))
            elif t == "s":
                out.append("" if value is None else text_bytes(value, encoding))
            elif t == "K":
                out.append(str(-1 if key is None else len(key)))
            elif t == "S":
                out.append(str(-1 if value is None else len(value)))
            elif t == "h":
                out.append(",".join(f"{text_bytes(k)}={'' if v is None else text_bytes(v, encoding)}"
                                    for k, v in headers))
        return "".join(out)

    return render


# kafka-dump-log.sh options kltool has no form for: a one-line hint instead of "no such option"
_KAFKA_HINTS = {
    "verify_index_only": "--verify-index-only: use `kltool verify PATH`, which checks every index entry against its "
                         "log (and `kltool dump FILE.index` prints the entries)",
    "key_decoder_class": "--key-decoder-class: kltool prints keys as UTF-8 text; use --encoding base64|hex, or "
                         "--json and a decoder of your own",
    "value_decoder_class": "--value-decoder-class: kltool prints values as UTF-8 text; use --encoding base64|hex, "
                           "or --json and a decoder of your own",
}


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
                                              "cluster-metadata"]), default="auto", show_default=True,
              help="Decode Kafka's internal topics (auto: by topic name) into a 'decoded' field.")
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
@click.option("--verify-index-only", is_flag=True, hidden=True)
@click.option("--key-decoder-class", hidden=True)
@click.option("--value-decoder-class", hidden=True)
@click.pass_obj
def command(out, paths, topic, partition_spec, records, from_offset, to_offset, from_time, to_time, key, limit,  # noqa: C901
            encoding, decoder, fmt, files, print_data_log, deep_iteration, skip_record_metadata, offsets_decoder,
            transaction_log_decoder, cluster_metadata_decoder, max_bytes, index_sanity_check, max_record_bytes,
            isolation_level, verify_index_only, key_decoder_class, value_decoder_class):
    """Print the batches (or --records) of log dirs, partitions, or files: .log, .index,
    .timeindex, .txnindex, .snapshot, checkpoint files, partition.metadata, meta.properties.

    Unlike kafka-dump-log, damage does not stop the dump: it is reported where it is and
    reading resumes at the next valid batch. kafka-dump-log's options work too (--files,
    --print-data-log, --deep-iteration, --skip-record-metadata, --offsets-decoder,
    --transaction-log-decoder, --cluster-metadata-decoder, --max-bytes, --index-sanity-check).
    """
    from ..format.compression import set_limit

    set_limit(max_record_bytes)
    from ..format.names import classify

    for name, given in (("verify_index_only", verify_index_only), ("key_decoder_class", key_decoder_class),
                        ("value_decoder_class", value_decoder_class)):
        if given:
            raise UsageError(_KAFKA_HINTS[name])
    paths = list(paths) + [f.strip() for group in files for f in group.split(",") if f.strip()]
    if not paths:
        raise UsageError("Missing argument 'PATHS...' (log dirs, partition directories or files; or --files)")
    chosen = [n for n, on in (("consumer-offsets", offsets_decoder), ("transaction-state", transaction_log_decoder),
                              ("cluster-metadata", cluster_metadata_decoder)) if on]
    if len(chosen) > 1 or (chosen and decoder != "auto"):
        raise UsageError("give one decoder (--decoder or one of kafka-dump-log's --*-decoder options)")
    if chosen:
        decoder = chosen[0]
    if fmt == "":
        raise UsageError("--format is empty (e.g. '%k=%s\\n')")
    if fmt is not None and out.json_mode:
        raise UsageError("--format and --json are two output formats: give one")
    # kafka-dump-log: --print-data-log and the decoders imply --deep-iteration; --deep-iteration alone
    # prints record lines without key and payload
    payload = not deep_iteration or print_data_log or bool(chosen) or records
    records = records or print_data_log or deep_iteration or bool(chosen) or fmt is not None
    tail = None
    if from_offset is not None and from_offset < 0:
        tail, from_offset = -from_offset, None
    flt = RecordFilter(from_offset, to_offset, parse_time(from_time), parse_time(to_time),
                       None if key is None else key.encode("utf-8"))
    sel = select(paths, topic, partition_spec)
    d = Dumper(out, records, encoding, limit, flt, decoder=decoder, payload=payload,
               skip_metadata=skip_record_metadata, fmt=None if fmt is None else compile_format(fmt),
               max_bytes=max_bytes, tail=tail, index_sanity_only=index_sanity_check)
    if isolation_level is not None and sel.files:
        raise UsageError(f"--isolation-level reads a whole partition (its aborted transactions span segments): give "
                         f"its directory, not {sel.files[0]}")
    d.isolation = isolation_level
    for p in sel.partitions:
        if d.limit is not None and d.emitted >= d.limit:
            break
        d.stopped = False  # --to-time stops each partition on its own
        _dump_partition(d, p)
    for path in sel.files:
        if d.limit is not None and d.emitted >= d.limit:
            break
        d.stopped = False
        kind, base = classify(path)
        d.topic = d.partition = None
        from ..format.topics import parse_partition_dir_name

        try:  # a file inside a partition directory: its topic picks the decoder
            d.topic, d.partition = parse_partition_dir_name(path.resolve().parent.name)[:2]
        except CorruptDataError:
            pass
        if kind in ("log", "kraft_snapshot"):
            _dump_log(d, path, base)
        elif kind == "unknown":
            out.warn(f"{path}: ignoring a file kltool does not know")
        else:
            _dump_other(d, path, kind, base)
    out.flush()
    if d.too_large is not None:
        raise d.too_large
    return 1 if d.errors else 0
