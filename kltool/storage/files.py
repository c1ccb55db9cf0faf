"""Recognise a single file by its name, and read Kafka's small text files."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import CorruptDataError
from ..format import filenames as fn
from .partition import KRAFT_SNAPSHOT

_SEG = re.compile(r"^(\d+)\.(log|index|timeindex|txnindex|snapshot)(?:\.(deleted|cleaned|swap))?$")
OFFSET_CHECKPOINTS = set(fn.ROOT_OFFSET_CHECKPOINTS)


def classify(path: Path) -> tuple[str, int | None]:
    """(kind, base offset or None). Kinds: log, index, timeindex, txnindex, snapshot,
    kraft_snapshot, offset_checkpoint, leader_epoch_checkpoint, partition_metadata,
    meta_properties, json, unknown."""
    name = Path(path).name
    m = _SEG.match(name)
    if m:
        return m.group(2), int(m.group(1))
    m = KRAFT_SNAPSHOT.match(name)
    if m:
        return "kraft_snapshot", int(m.group(1))
    if name == fn.BOOTSTRAP_CHECKPOINT:
        return "kraft_snapshot", 0
    if name in OFFSET_CHECKPOINTS:
        return "offset_checkpoint", None
    if name == fn.LEADER_EPOCH_CHECKPOINT:
        return "leader_epoch_checkpoint", None
    if name == fn.PARTITION_METADATA:
        return "partition_metadata", None
    if name == fn.META_PROPERTIES:
        return "meta_properties", None
    if name in (fn.QUORUM_STATE, fn.CLEAN_SHUTDOWN_FILE):
        return "json", None
    if name.endswith(".log"):
        return "log", None
    return "unknown", None


def read_text_file(path: Path, kind: str):
    """Parse a small text file of ``kind``; CorruptDataError (with the path) when it is not valid."""
    from ..format import checkpoints as cp

    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptDataError("not UTF-8 text", path=path, position=e.start) from None
    try:
        if kind == "offset_checkpoint":
            return cp.parse_offset_checkpoint(text)
        if kind == "leader_epoch_checkpoint":
            return cp.parse_leader_epoch_checkpoint(text)
        if kind == "partition_metadata":
            return cp.parse_partition_metadata(text)
        if kind == "meta_properties":
            return cp.parse_properties(text)
        if kind == "json":
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                raise CorruptDataError(f"invalid JSON: {e.msg}", position=e.pos) from None
    except CorruptDataError as e:
        raise e.at(path=path) from None
    raise CorruptDataError(f"unknown file kind {kind}", path=path)
