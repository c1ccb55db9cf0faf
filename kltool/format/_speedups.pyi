"""Types of kltool.format._speedups, the optional C accelerator (sources: kltool/format/_speedups_c/).

Load it through :mod:`kltool.format.speedups` (``speedups.C``), which checks :data:`ABI`. Every entry
point has a pure-Python twin that stays the reference; the docstrings of the C sources say exactly what
each one takes on and when it hands back to Python (None, or a stop index).
"""

from collections.abc import Callable

from typing_extensions import Buffer

ABI: int
"""The interface version (KL_SPEEDUPS_ABI in speedups.h); kltool.format.speedups.ABI must match."""

# crc.c
def crc32c(data: Buffer, value: int = 0, /) -> int:
    """CRC-32C of ``data`` continuing from ``value`` (the crc32c package's convention)."""

def hw_crc(on: int = -1, /) -> bool:
    """Whether the SSE4.2 path is used; ``hw_crc(0)`` turns it off, ``hw_crc(1)`` on (tests)."""

# walk.c
def walk_v2(buf: Buffer, start: int, stop: int, prev_last: int | None, seg_base: int, deep: bool,
            want_cols: bool, /) -> tuple[int, int, int, int | None, bytes | None, int, int, int | None]:
    """The plain, valid v2 batches of ``buf[start:stop]`` in one call: (stop index, batches, records,
    last offset, packed native int64 (position, base, last, max_ts) per batch with ``want_cols``, the run's
    last batch's index and base offset (-1, -1: none), the last offset before that batch (None: none))."""

# decode.c
def decode_v2(data: Buffer, count: int, base_offset: int, base_ts: int, log_append_time: bool, max_ts: int,
              /) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int],
                          list[tuple[tuple[int, int, int, int], ...] | None], list[int], int, bool]:
    """The records of an uncompressed v2 payload as RecordColumns' lists, the end position and whether
    the offset deltas strictly increase. ValueError(message, relative position) on malformed data."""

# format.c
def format_v2(data: Buffer, count: int, base_offset: int, base_ts: int, log_append_time: bool, max_ts: int,
              base_seq: int, /, *, json: bool = False, encoding: int = 0, ts_name: str = "CreateTime",
              suffix: str = "}", from_offset: int | None = None, to_offset: int | None = None,
              from_time: int | None = None, to_time: int | None = None, key: bytes | None = None,
              max_records: int = -1) -> tuple[bytes, int] | None:
    """dump --records' lines (text, or JSON with ``json``) for a v2 payload and how many were written;
    None when the Python formatter must do the batch. ``encoding``: 0 text, 1 base64, 2 hex."""

# encode.c
def encode_records(records: list[tuple[int, int, bytes | None, bytes | None, object]], base_ts: int,
                   /) -> bytes | None:
    """batch._encode_v2_records(records, base_ts) in one call; None when a record is not plain."""

# jsonl.c
def parse_json_lines(block: Buffer, skip: object, stop: int = -1, /) -> tuple[list[object], int]:
    """One item per line of ``block[:stop]``: None (blank), ``skip`` (not a data record), a tuple
    (key, value, headers, timestamp, partition), or False (the Python reader must read it); and how
    many were False."""

def fill_records(items: list[object], i: int, records: list[object], lines: list[int], partition: int,
                 override: int | None, first_line: int, now: int, rec_overhead: int, batch_overhead: int,
                 est: int, batch_bytes: int, batch_records: int, headers_ok: bool, skip: object,
                 /) -> tuple[int, int, int]:
    """Appender.add() for the plain items of ``items[i:]``: (next index, estimated batch bytes, skipped)."""

# arrow.c
def arrow_v2(buf: Buffer, i: int, j: int, lo: int | None, hi: int | None, include_control: bool, limit_rows: int,
             limit_bytes: int, rows: int, nbytes: int, outs: tuple[bytearray | None, ...],
             inflate: Callable[[int, bytes, int], Buffer | None] | None = None,
             /) -> tuple[int, int, int, int]:
    """The records of the checked v2 batches at ``buf[i:j]`` appended to the 16 Arrow buffers of ``outs``:
    (next index, status 0 done / 1 chunk full / 2 Python's turn / 3 past ``hi``, rows, bytes). A compressed
    batch's records are ``inflate(codec, payload, count)``'s (None: Python's turn; no ``inflate``: always)."""

def arrow_records(data: Buffer, count: int, base_offset: int, base_ts: int, log_append_time: bool, max_ts: int,
                  lo: int | None, hi: int | None, outs: tuple[bytearray | None, ...], /) -> int | None:
    """One decoded batch's records with offsets in [lo, hi) appended to ``outs``: rows, or None."""

# offmap.c (kltool compact: storage/change/cleaner.py holds the rules; these are the mechanics)
def offmap_new(slots: int, seed: Buffer, huge: bool, /) -> object:
    """A fixed offset map of ``slots`` 24-byte cells (a SipHash-2-4-128 of the key keyed by the 16 ``seed``
    bytes, and the offset), as an opaque capsule; ``huge``: advise huge pages (a map that will fill up)."""

def offmap_len(m: object, /) -> int:
    """The distinct keys the map holds."""

def offmap_get(m: object, key: Buffer, /) -> int:
    """The key's offset, -1 when the map does not hold it."""

def offmap_put_key(m: object, key: Buffer, offset: int, /) -> None:
    """Put one key's offset (RuntimeError when no cell is free: the caller stops at its capacity)."""

def offmap_put(m: object, capacity: int, data: Buffer, count: int, base_offset: int, start: int,
               /) -> int | None:
    """The keyed records of an uncompressed v2 payload at or above ``start`` put in order: the index of the
    record before which the map held ``capacity`` keys, -1 when all went in, None when ``data`` is not
    ``count`` well-formed records (nothing put)."""

def offmap_classes(m: object, data: Buffer, count: int, base_offset: int, latest: int, /) -> bytes | None:
    """One class byte per record (cleaner.KEYLESS ... BEYOND_TOMBSTONE); None when malformed."""

def retained_records(data: Buffer, count: int, classes: Buffer, keep_mask: int, base_ts: int,
                     log_append_time: bool, max_ts: int, horizon: int | None,
                     /) -> tuple[bytes, int, int, int, int] | None:
    """The records whose class bit is in ``keep_mask`` encoded as build_v2_batch encodes them: (records,
    how many, the new base timestamp, the largest timestamp, the last one's offset delta); None: Python's turn."""

def siphash_test(data: Buffer, seed: Buffer, out16: bool, /) -> tuple[int, int]:
    """SipHash-2-4 of ``data`` (128-bit: (low, high) words; else the 64-bit hash and 0), for the tests."""
