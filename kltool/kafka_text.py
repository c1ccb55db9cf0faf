"""kafka-dump-log.sh's text, as Apache Kafka's DumpLogSegments prints it (and dump's JSON batch objects):
the batch line, what a control record adds to its record line, the key and payload texts of its decoders,
a producer snapshot entry. Formatting only: the batches and records come decoded from storage.
``kltool dump`` (commands/dump.py) prints them; tests/test_dump_parity.py compares them with Kafka's output.
"""

from __future__ import annotations

import json

from .errors import CorruptDataError
from .format.compression import CODEC_NAMES
from .format.records import CONTROL_IDS, BatchHeader, java_long
from .output import _dumps

TS_NAMES = {"create": "CreateTime", "log_append": "LogAppendTime", "none": "NoTimestampType"}


def batch_json(h: BatchHeader, file: str) -> dict:
    return {
        "type": "batch", "file": file, "position": h.position, "size": h.size, "base_offset": java_long(h.base_offset),
        "last_offset": java_long(h.last_offset), "count": h.count, "magic": h.magic, "crc": h.crc, "crc_valid": h.crc_valid,
        "compression": h.compression_name, "timestamp_type": h.timestamp_type,
        "first_timestamp": h.first_timestamp if h.magic == 2 else h.max_timestamp,
        "max_timestamp": h.max_timestamp, "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence, "last_sequence": h.last_sequence,
        "partition_leader_epoch": h.partition_leader_epoch, "is_transactional": h.is_transactional,
        "is_control": h.is_control, "delete_horizon_ms": h.delete_horizon_ms,
    }


OFFSET_KEYS = ("log_start_offset", "log_end_offset", "offset", "max_timestamp_offset")


def shown_offsets(d: dict) -> dict:
    """An info/offsets object with its offsets as Kafka shows them (a Java long: a log end offset past
    a last offset of 2^63-1 wraps negative, as the broker's nextOffset does), in --json and in text alike."""
    for k in OFFSET_KEYS:
        v = d.get(k)
        if v is not None and not -(1 << 63) <= v < (1 << 63):
            d = {**d, k: java_long(v)}
    return d


_JSON_BOOL = {True: "true", False: "false", None: "null"}


def _codec_name(h: BatchHeader) -> str:
    return CODEC_NAMES.get(h.compression) or h.compression_name
_FILE_JSON: dict[str, str] = {}


def batch_json_line(h: BatchHeader, file: str, suffix: str) -> str:
    """``_dumps(batch_json(h, file) + topic, partition)`` for a v2 batch, as one f-string (the
    dump --records fast path writes one per batch; tests check they are equal)."""
    f = _FILE_JSON.get(file)
    if f is None:
        f = _FILE_JSON[file] = _dumps(file)
    dh = h.delete_horizon_ms
    return (f'{{"type":"batch","file":{f},"position":{h.position},"size":{h.size},"base_offset":{java_long(h.base_offset)},'
            f'"last_offset":{java_long(h.last_offset)},"count":{h.count},"magic":{h.magic},"crc":{h.crc},'
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
        return (f"baseOffset: {java_long(h.base_offset)} lastOffset: {java_long(h.last_offset)} count: {h.count} "
                f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
                f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
                f"deleteHorizonMs: {dh} position: {h.position} {ts}: {h.max_timestamp} size: {h.size} "
                f"magic: {h.magic} compresscodec: {_codec_name(h)} crc: {h.crc} isvalid: {valid}")
    return (f"offset: {java_long(h.last_offset)} position: {h.position} {ts}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {h.compression_name} crc: {h.crc} isvalid: {valid}")


def json_text(o) -> str:
    return json.dumps(o, separators=(",", ":"), ensure_ascii=False)


def control_text(ctrl: dict, val) -> str:
    """What DumpLogSegments' printControlRecord adds to a control record's line."""
    t = ctrl["type"]
    if t in ("COMMIT", "ABORT"):
        return f" endTxnMarker: {t} coordinatorEpoch: {ctrl.get('coordinator_epoch')}"
    label = CONTROL_LABELS.get(t)
    if label is not None:
        from .format import internal

        try:
            return label + json_text(internal.decode_raft_control(CONTROL_IDS[t], val)["data"])
        except CorruptDataError as e:
            return f"{label}<{e.message}>"
    return f" controlType: {t}({ctrl.get('type_id', CONTROL_IDS.get(t))})"


CONTROL_LABELS = {"LEADER_CHANGE": " LeaderChange: ", "SNAPSHOT_HEADER": " SnapshotHeader ",
                   "SNAPSHOT_FOOTER": " SnapshotFooter ", "KRAFT_VERSION": " KRaftVersion ",
                   "KRAFT_VOTERS": " KRaftVoters "}


def decoded_key_payload(dec, off: int, decoded: dict | None, derr: str | None) -> tuple[str | None, str | None]:
    """The key and payload texts of kafka-dump-log's --offsets-decoder, --transaction-log-decoder and
    --cluster-metadata-decoder for one decoded record (its parsers' words for what they cannot read)."""
    from .format import internal

    if dec in (internal.decode_cluster_metadata, internal.decode_remote_log_metadata):
        # no key; the payload is the record's JSON (Kafka's RemoteLogMetadataSerde and metadata records alike)
        if derr is not None:
            return None, f"Error at {off}, skipping. {derr}"
        if decoded["type"] == "unknown":
            return None, f"Error at {off}, skipping. Unknown metadata id {decoded.get('api_key', decoded.get('record_type'))}"
        return None, json_text(decoded)
    if derr is not None:
        return f"Error at offset {off}, skipping. {derr}", None
    if decoded["type"] == "unknown":
        rtype = decoded.get("record_type", decoded.get("key_version"))
        return f"Unknown record type {rtype} at offset {off}, skipping.", None
    k, v = decoded["key"], decoded["payload"]
    if dec is internal.decode_transaction_state:  # (the decoder's shape is the console formatter's)
        k = {"type": str(k["version"]), "data": k["data"]}
        if v is not None:  # (transactionStatus by its name, as DumpLogSegments prints it)
            data = v["data"] if decoded["state"] is None else {**v["data"], "transactionStatus": decoded["state"]}
            v = {"version": str(v["version"]), "data": data}
    return json_text(k), "<DELETE>" if v is None else json_text(v)


def first_sequence(last_sequence: int, offset_delta: int) -> int:
    """BatchMetadata.firstSeq: the last sequence less the offset delta, wrapping past 0 to Integer.MAX_VALUE
    (DefaultRecordBatch.decrementSequence)."""
    if last_sequence < offset_delta:
        return 0x7FFFFFFF - (offset_delta - last_sequence) + 1
    return last_sequence - offset_delta


def snapshot_entry_text(e) -> str:
    """A producer-state snapshot entry (DumpLogSegments' dumpProducerIdSnapshot)."""
    txn = "OptionalLong.empty" if e.current_txn_first_offset < 0 else f"OptionalLong[{e.current_txn_first_offset}]"
    return (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: "
            f"{e.coordinator_epoch} currentTxnFirstOffset: {txn} lastTimestamp: {e.timestamp} "
            f"firstSequence: {first_sequence(e.last_sequence, e.offset_delta)} lastSequence: "
            f"{e.last_sequence} lastOffset: {e.last_offset} offsetDelta: {e.offset_delta} timestamp: {e.timestamp}")


def txn_entry_text(t) -> str:
    """An aborted transaction of a .txnindex (DumpLogSegments' dumpTxnIndex)."""
    return (f"version: {t.version} producerId: {t.producer_id} firstOffset: {t.first_offset} "
            f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}")
