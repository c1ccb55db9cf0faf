"""kltool dump: batches, records, indexes, snapshots and checkpoint files, as text or JSON lines."""

from __future__ import annotations

import click

from ..errors import CorruptDataError
from ..format import decode_records, speedups
from ..format.records import CONTROL_IDS, BatchHeader
from ..output import _dumps, encode_bytes, text_bytes
from ..storage.scan import Damage, walk
from .common import parse_time, paths_argument, select, selection_options

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
            f'"crc_valid":{_JSON_BOOL[h.crc_valid]},"compression":{_dumps(h.compression_name)},'
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
                f"magic: {h.magic} compresscodec: {h.compression_name} crc: {h.crc} isvalid: {valid}")
    return (f"offset: {h.last_offset} position: {h.position} {ts}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {h.compression_name} crc: {h.crc} isvalid: {valid}")


class RecordFilter:
    def __init__(self, from_offset, to_offset, from_time, to_time, key: bytes | None):
        self.from_offset, self.to_offset = from_offset, to_offset
        self.from_time, self.to_time = from_time, to_time
        self.key = key

    def batch_may_match(self, h: BatchHeader) -> bool:
        if self.from_offset is not None and h.last_offset < self.from_offset:
            return False
        if self.to_offset is not None and h.base_offset_exact and h.base_offset > self.to_offset:
            return False
        if self.from_time is not None and h.magic > 0 and h.max_timestamp < self.from_time:
            return False
        return True

    def record_matches(self, offset: int, ts: int, key: bytes | None) -> bool:
        if self.from_offset is not None and offset < self.from_offset:
            return False
        if self.to_offset is not None and offset > self.to_offset:
            return False
        if self.from_time is not None and ts < self.from_time:
            return False
        if self.to_time is not None and ts > self.to_time:
            return False
        if self.key is not None and key != self.key:
            return False
        return True


class Dumper:
    def __init__(self, out, records: bool, encoding: str, limit: int | None, flt: RecordFilter,
                 topic=None, partition=None, decoder: str = "auto"):
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
        return self.limit is not None and self.emitted >= self.limit

    def damage(self, d: Damage, file: str) -> None:
        self.errors += 1
        if self.out.json_mode:
            self.out.emit({"type": "finding", "severity": "error", "kind": d.kind, "file": file,
                           "position": d.position, "offset": None, "length": d.length,
                           "message": d.message + ("" if d.resumed_at is None else
                                                   f"; valid batches resume at byte {d.resumed_at}")})
        else:
            resume = "end of file" if d.resumed_at is None else f"byte {d.resumed_at}"
            self.out.line(f"!! {d.kind} at position {d.position}, {d.length} bytes: {d.message} "
                          f"(reading resumes at {resume})")

    def batch(self, h: BatchHeader, file: str) -> None:
        if not self.flt.batch_may_match(h):
            return
        if self.records and self._fast_records(h, file):
            return
        cols = None
        err = None
        if self.records or (h.magic < 2 and not h.base_offset_exact):
            if h.crc_valid or self.records:
                try:
                    cols = decode_records(h, h.data)
                except CorruptDataError as e:
                    err = e
        if not self.records:
            if self.flt.key is not None or self.flt.to_time is not None or self.flt.from_time is not None:
                # batch-level output with record filters: show the batch if any record matches
                if cols is None:
                    try:
                        cols = decode_records(h, h.data)
                    except CorruptDataError:
                        cols = None
                if cols is not None and not any(self.flt.record_matches(cols.offsets[i], cols.timestamps[i],
                                                                        cols.key(i)) for i in range(len(cols))):
                    return
            self._emit_batch(h, file)
            self.emitted += 1
            return
        if self.flt.key is None:
            self._emit_batch(h, file)
        if err is not None:
            self.errors += 1
            self._record_error(h, file, err)
            return
        if not h.crc_valid:
            self.errors += 1
        enc = self.encoding
        out = self.out
        flt = self.flt
        dec = self.decoder()
        for i in range(len(cols)):
            off = cols.offsets[i]
            ts = cols.timestamps[i]
            key = cols.key(i)
            if not flt.record_matches(off, ts, key):
                continue
            if self.done:
                return
            self.emitted += 1
            val = cols.value(i)
            hdrs = cols.header_list(i)
            seq = cols.sequences[i] if cols.sequences is not None else -1
            ctrl = cols.controls[i] if cols.controls is not None else None
            decoded = derr = None
            if dec is not None:
                decoded, derr = self.decode_internal(dec, key, val, ctrl, cols, i)
            if out.json_mode:
                rec = {"type": "record", "offset": off, "timestamp": ts, "timestamp_type": h.timestamp_type,
                       "key": encode_bytes(key, enc), "value": encode_bytes(val, enc),
                       "headers": [{"key": encode_bytes(k, "text"), "value": encode_bytes(v, enc)} for k, v in hdrs],
                       "sequence": seq, "size": cols.sizes[i], "batch_offset": h.base_offset}
                if self.topic is not None:
                    rec["topic"] = self.topic
                    rec["partition"] = self.partition
                if ctrl is not None:
                    rec["control"] = ctrl
                if decoded is not None:
                    rec["decoded"] = decoded
                elif derr is not None:
                    rec["decode_error"] = derr
                out.emit(rec)
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
                else:
                    if hdrs:
                        parts.append(" headers: [" + ", ".join(f"{text_bytes(k)}={text_bytes(v, enc)}"
                                                               for k, v in hdrs) + "]")
                    if key is not None:
                        parts.append(f" key: {text_bytes(key, enc)}")
                    if val is not None:
                        parts.append(f" payload: {text_bytes(val, enc)}")
                out.line("".join(parts))

    def _fast_records(self, h: BatchHeader, file: str) -> bool:
        """The C formatter (when built) writes a whole v2 batch's record lines into one buffer,
        byte for byte what the loop in :meth:`batch` writes. False when it does not apply (a
        control batch, an internal-topic decoder, text it does not escape, malformed records):
        the Python loop then does the batch."""
        c = speedups.C
        if c is None or h.magic != 2 or h.is_control or h.count is None or h.count < 0 or self.decoder() is not None:
            return False
        data = memoryview(h.data)[61:h.size]
        if h.compression != 0:
            from ..format.compression import decompress

            try:
                data = decompress(h.compression, data, 2)
            except CorruptDataError:
                return False
        js = self.out.json_mode
        suffix = "}"
        if js and self.topic is not None:
            suffix = f',"topic":{_dumps(self.topic)},"partition":{_dumps(self.partition)}}}'
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
            if js:
                head = _batch_json_line(h, file, suffix)
            else:
                head = batch_text(h) + "\n"
            blob = head.encode("utf-8") + blob
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
        if self.out.json_mode:
            self.out.emit({"type": "finding", "severity": "error", "kind": "record_corrupt", "file": file,
                           "position": e.position if e.position is not None else h.position,
                           "offset": h.base_offset, "length": h.size, "message": e.message})
        else:
            self.out.line(f"!! record_corrupt in batch at position {h.position}: {e.message}")


def _dump_log(d: Dumper, path, base_offset=None) -> None:
    out = d.out
    if not out.json_mode:
        out.line(f"Dumping {path}")
        if base_offset is not None:
            out.line(f"Log starting offset: {base_offset}")
    start = 0
    if base_offset is not None and d.flt.from_offset is not None:
        from ..storage.segment import Segment

        start = Segment(path.parent, base_offset, path).position_for_offset(d.flt.from_offset)
    for item in walk(path, start=start, with_data=True):
        if d.done:
            return
        if isinstance(item, Damage):
            d.damage(item, str(path))
        else:
            d.batch(item, str(path))
            if d.flt.to_offset is not None and item.last_offset >= d.flt.to_offset:
                return


def _dump_partition(d: Dumper, p) -> None:
    from ..storage.read import read_partition

    out = d.out
    d.topic, d.partition = p.topic, p.partition
    current = None
    for seg, item in read_partition(p, from_offset=d.flt.from_offset, to_offset=d.flt.to_offset,
                                    from_time=d.flt.from_time):
        if d.done:
            return
        if seg is not current:
            current = seg
            if not out.json_mode:
                out.line(f"Dumping {seg.log_path}")
                out.line(f"Log starting offset: {seg.base_offset}")
        if isinstance(item, Damage):
            d.damage(item, str(seg.log_path))
        else:
            d.batch(item, str(seg.log_path))


def _dump_other(d: Dumper, path, kind: str, base) -> None:
    """Index, snapshot and text files."""
    from ..format import index as fidx
    from ..storage.files import read_text_file

    out = d.out
    js = out.json_mode
    f = str(path)
    if not js:
        out.line(f"Dumping {path}")
    if kind in ("index", "timeindex"):
        # (parser, JSON type, field names) — text lines are "name: value" pairs, as kafka-dump-log's
        parse, jtype, names = ((fidx.offset_index_entries, "index_entry", ("offset", "position")) if kind == "index"
                               else (fidx.time_index_entries, "time_index_entry", ("timestamp", "offset")))
        entries = parse(path.read_bytes(), base)
        if not entries and not js:
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
            out.emit({"type": "finding", "severity": "error", "kind": "snapshot_corrupt", "file": f, "position": 2,
                      "offset": None, "length": None, "message": msg}) if js else out.line(f"!! {msg}")
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


@click.command("dump")
@paths_argument
@selection_options
@click.option("--records", is_flag=True, help="Print every record (decompressing), not only batch headers.")
@click.option("--from-offset", type=int, help="First offset (seeks through the offset index).")
@click.option("--to-offset", type=int, help="Last offset (inclusive).")
@click.option("--from-time", help="First timestamp: ISO-8601 or epoch ms (seeks through the time index).")
@click.option("--to-time", help="Last timestamp (inclusive).")
@click.option("--key", help="Only records with this key (UTF-8 text).")
@click.option("--limit", type=int, help="Stop after this many batches (or records with --records).")
@click.option("--encoding", type=click.Choice(["text", "base64", "hex"]), default="text", show_default=True,
              help="How keys, values and header values are shown.")
@click.option("--decoder", type=click.Choice(["auto", "none", "consumer-offsets", "transaction-state",
                                              "cluster-metadata"]), default="auto", show_default=True,
              help="Decode Kafka's internal topics (auto: by topic name) into a 'decoded' field.")
@click.pass_obj
def command(out, paths, topic, partition_spec, records, from_offset, to_offset, from_time, to_time, key, limit,
            encoding, decoder):
    """Print the batches (or --records) of log dirs, partitions, or files: .log, .index,
    .timeindex, .txnindex, .snapshot, checkpoint files, partition.metadata, meta.properties.

    Unlike kafka-dump-log, damage does not stop the dump: it is reported where it is and
    reading resumes at the next valid batch.
    """
    from ..storage.files import classify

    flt = RecordFilter(from_offset, to_offset, parse_time(from_time), parse_time(to_time),
                       None if key is None else key.encode("utf-8"))
    sel = select(paths, topic, partition_spec)
    d = Dumper(out, records, encoding, limit, flt, decoder=decoder)
    for p in sel.partitions:
        if d.done:
            break
        _dump_partition(d, p)
    for path in sel.files:
        if d.done:
            break
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
    return 1 if d.errors else 0
