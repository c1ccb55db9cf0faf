"""Arrow rows (executor side): the records, batches, damage and segments of planned reads as
``pyarrow.RecordBatch`` chunks, with the schema of Spark's own Kafka source at the records level."""

from __future__ import annotations

import os
from array import array

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from .options import DEFAULT_ROWS_PER_BATCH, _bool, _int, normalize_options
from .planning import SegmentGroup, SegmentRead

# Spark's Kafka source (KafkaRecordToRowConverter.kafkaSchema with includeHeaders=true).
RECORD_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp_ltz, "
                 "timestampType int, headers array<struct<key: string, value: binary>>")
BATCH_SCHEMA = ("topic string, partition int, segment long, position long, size int, base_offset long, "
                "last_offset long, count int, magic int, compression string, crc_valid boolean, "
                "first_timestamp long, max_timestamp long, producer_id long, is_transactional boolean, "
                "is_control boolean, timestamp_type string, file string")
DAMAGE_SCHEMA = ("topic string, partition int, segment long, position long, length long, kind string, "
                 "message string, resumed_at long, file string")
SEGMENT_SCHEMA = ("topic string, partition int, segment long, bytes long, file string, partition_dir string, "
                  "log_start_offset long")
SCHEMAS = {"records": RECORD_SCHEMA, "batches": BATCH_SCHEMA, "damage": DAMAGE_SCHEMA, "segments": SEGMENT_SCHEMA}

TIMESTAMP_TYPE_IDS = {"create": 0, "log_append": 1, "none": -1}  # Kafka's TimestampType.id
_MAX_MS = (1 << 63) // 1000  # the largest timestamp (ms) a Spark timestamp (us, int64) holds
_TS = pa.timestamp("us", tz="UTC")  # what Spark's to_arrow_schema(timezone="UTC") gives
_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
_HEADERS = pa.list_(_HEADER)
ARROW_RECORD_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", _TS), ("timestampType", pa.int32()), ("headers", _HEADERS),
])
# Provenance of each record (option includeMetadata, or ``_metadata`` in a user schema), like the
# ``_metadata`` column of Spark's file sources: the log dir, the segment file, the batch's byte position.
METADATA_DDL = "_metadata struct<log_dir: string, file: string, position: long>"
_METADATA = pa.struct([("log_dir", pa.string()), ("file", pa.string()), ("position", pa.int64())])
METADATA_FIELD = pa.field("_metadata", _METADATA)
ARROW_BATCH_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("segment", pa.int64()), ("position", pa.int64()),
    ("size", pa.int32()), ("base_offset", pa.int64()), ("last_offset", pa.int64()), ("count", pa.int32()),
    ("magic", pa.int32()), ("compression", pa.string()), ("crc_valid", pa.bool_()),
    ("first_timestamp", pa.int64()), ("max_timestamp", pa.int64()), ("producer_id", pa.int64()),
    ("is_transactional", pa.bool_()), ("is_control", pa.bool_()), ("timestamp_type", pa.string()),
    ("file", pa.string()),
])
ARROW_DAMAGE_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("segment", pa.int64()), ("position", pa.int64()),
    ("length", pa.int64()), ("kind", pa.string()), ("message", pa.string()), ("resumed_at", pa.int64()),
    ("file", pa.string()),
])
ARROW_SEGMENT_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("segment", pa.int64()), ("bytes", pa.int64()),
    ("file", pa.string()), ("partition_dir", pa.string()), ("log_start_offset", pa.int64()),
])

ARROW_SCHEMAS = {"records": ARROW_RECORD_SCHEMA, "batches": ARROW_BATCH_SCHEMA, "damage": ARROW_DAMAGE_SCHEMA,
                 "segments": ARROW_SEGMENT_SCHEMA}

# Column buffers of a chunk, in the order of _speedups.arrow_v2's outputs: int64 offsets and
# timestamps (ms), int32 timestampType, key/value end offsets (int32, from a leading 0), bytes and
# validity (a byte per row), headers' list end offsets and validity, header keys' ends and bytes,
# header values' ends, bytes and validity.
(_OFF, _TSS, _TYPES, _KE, _KD, _KV, _VE, _VD, _VV, _HE, _HV, _HKE, _HKD, _HVE, _HVD, _HVV) = range(16)
_ZERO32 = bytes(4)


class _RecordChunk:
    """Rows as Arrow column buffers (bytearrays), turned into one pyarrow.RecordBatch: the C reader
    (``_speedups.arrow_v2``) and the Python loop (:meth:`add`) append to the same buffers, and only
    to those of the columns asked for (``want``)."""

    __slots__ = ("bufs", "rows", "nbytes", "positions")

    def __init__(self, want):
        def new(*inits):
            return [bytearray(i) for i in inits]

        b = [None] * 16
        if "offset" in want:
            b[_OFF] = bytearray()
        if "timestamp" in want:
            b[_TSS] = bytearray()
        if "timestampType" in want:
            b[_TYPES] = bytearray()
        if "key" in want:
            b[_KE:_KV + 1] = new(_ZERO32, b"", b"")
        if "value" in want:
            b[_VE:_VV + 1] = new(_ZERO32, b"", b"")
        if "headers" in want:
            b[_HE:_HVV + 1] = new(_ZERO32, b"", _ZERO32, b"", _ZERO32, b"", b"")
        self.bufs = tuple(b)
        self.rows = 0
        self.nbytes = 0
        self.positions = array("q") if "_metadata" in want else None  # each row's batch position

    def __len__(self):
        return self.rows

    def add(self, cols, idx, tt: int) -> None:
        """The records ``idx`` (a range or list of positions) of a decoded batch (RecordColumns)."""
        b = self.bufs
        n = len(idx)
        whole = isinstance(idx, range) and n == len(cols)
        buf = cols.buffer

        def pick(xs):
            return xs if whole else [xs[i] for i in idx]

        if b[_OFF] is not None:
            b[_OFF].extend(array("q", pick(cols.offsets)))
        if b[_TSS] is not None:
            b[_TSS].extend(array("q", pick(cols.timestamps)))
        if b[_TYPES] is not None:
            b[_TYPES].extend(array("i", [tt]) * n)
        if b[_KE] is not None:
            _spans(buf, pick(cols.key_starts), pick(cols.key_ends), b[_KE], b[_KD], b[_KV])
        if b[_VE] is not None:
            _spans(buf, pick(cols.value_starts), pick(cols.value_ends), b[_VE], b[_VD], b[_VV])
        if b[_HE] is not None:
            hdrs = pick(cols.headers)
            valid = bytearray(n)
            ends = array("i")
            total = len(b[_HKE]) // 4 - 1
            ks, ke, vs, ve = [], [], [], []
            for j, spans in enumerate(hdrs):
                if spans:
                    valid[j] = 1
                    total += len(spans)
                    for a, z, c, d in spans:
                        ks.append(a)
                        ke.append(z)
                        vs.append(c)
                        ve.append(d)
                ends.append(total)
            b[_HE].extend(ends)
            b[_HV].extend(valid)
            if ks:
                _spans(buf, ks, ke, b[_HKE], b[_HKD], None)
                _spans(buf, vs, ve, b[_HVE], b[_HVD], b[_HVV])
        self.rows += n
        self.nbytes += len(buf)

    def mark(self, position: int, rows_before: int) -> None:
        """The rows added since there were ``rows_before`` came from the batch at ``position``."""
        if self.positions is not None:
            self.positions.extend(array("q", [position]) * (self.rows - rows_before))

    def to_arrow(self, topic: str | None, partition: int | None, columns: list[str] | None = None,
                 where: tuple[str, str] | None = None) -> pa.RecordBatch:
        """The chunk as a RecordBatch of ``columns`` (default: all of Spark's Kafka-source schema);
        ``where``: (log dir, file) for ``_metadata``."""
        n = self.rows
        b = self.bufs

        def ints(i, t):
            return pa.Array.from_buffers(t, n, [None, pa.py_buffer(b[i])])

        make = {
            "key": lambda: _binary(pa.binary(), n, b[_KE], b[_KD], b[_KV]),
            "value": lambda: _binary(pa.binary(), n, b[_VE], b[_VD], b[_VV]),
            "topic": lambda: pa.repeat(pa.scalar(topic, pa.string()), n),
            "partition": lambda: pa.repeat(pa.scalar(partition, pa.int32()), n),
            "offset": lambda: ints(_OFF, pa.int64()),
            "timestamp": lambda: self._timestamps(ints(_TSS, pa.int64()), b[_OFF], where),
            "timestampType": lambda: ints(_TYPES, pa.int32()),
            "headers": lambda: self._headers(n) if b[_HE] is not None and len(b[_HKE]) > 4 else pa.nulls(n, _HEADERS),
            "_metadata": lambda: pa.StructArray.from_arrays(
                [pa.repeat(pa.scalar(where[0], pa.string()), n), pa.repeat(pa.scalar(where[1], pa.string()), n),
                 pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.positions)])], fields=list(_METADATA)),
        }
        if columns is None:
            return pa.RecordBatch.from_arrays([make[f.name]() for f in ARROW_RECORD_SCHEMA], schema=ARROW_RECORD_SCHEMA)
        schema = pa.schema([METADATA_FIELD if c == "_metadata" else ARROW_RECORD_SCHEMA.field(c) for c in columns])
        return pa.RecordBatch.from_arrays([make[c]() for c in columns], schema=schema)

    @staticmethod
    def _timestamps(ms: pa.Array, offsets, where) -> pa.Array:
        """Milliseconds as Spark's timestamps (microseconds): a record whose timestamp does not fit fails the
        read with one line naming it, as Spark's Kafka source fails (its ``millisToMicros`` overflows).
        ``offsets``: the chunk's int64 offsets buffer, None when the read does not keep them."""
        try:
            return pc.multiply_checked(ms, 1000).cast(_TS)
        except pa.ArrowInvalid:
            bad = pc.or_(pc.greater(ms, _MAX_MS), pc.less(ms, -_MAX_MS))
            i = pc.index(bad, True).as_py()
            from ..errors import KltoolError

            at = f"the record at offset {memoryview(offsets).cast('q')[i]}" if offsets is not None else "a record"
            raise KltoolError(f"{where[1] if where else 'a segment'}: {at} has timestamp "
                              f"{ms[i].as_py()} ms, past what a Spark timestamp holds (Spark's Kafka source fails "
                              "on it too)") from None

    def _headers(self, n: int) -> pa.Array:
        """list<struct<key string, value binary>>: null for the rows without headers."""
        b = self.bufs
        m = len(b[_HKE]) // 4 - 1
        keys = _binary(pa.binary(), m, b[_HKE], b[_HKD], None)
        try:
            keys = keys.cast(pa.string())  # validates UTF-8
        except pa.ArrowInvalid:  # like Java's new String(bytes, UTF_8): U+FFFD for bad bytes
            keys = pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string())
        struct = pa.StructArray.from_arrays([keys, _binary(pa.binary(), m, b[_HVE], b[_HVD], b[_HVV])],
                                            fields=list(_HEADER))
        return pa.Array.from_buffers(_HEADERS, n, [_validity(b[_HV], n), pa.py_buffer(b[_HE])], children=[struct])


def _spans(buf, starts, ends, out_ends: bytearray, out_data: bytearray, out_valid: bytearray | None) -> None:
    """Append the bytes ``buf[s:e]`` (null where s < 0) as Arrow binary buffers."""
    pos = len(out_data)
    offs = array("i")
    parts = []
    valid = bytearray(len(starts))
    for j, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if s >= 0:
            parts.append(buf[s:e])
            pos += e - s
            valid[j] = 1
        offs.append(pos)
    out_data.extend(b"".join(parts))
    out_ends.extend(offs)
    if out_valid is not None:
        out_valid.extend(valid)


def _validity(valid: bytearray, n: int):
    """An Arrow validity bitmap from a byte per row (None when no row is null)."""
    if valid.find(0) < 0:
        return None
    return pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(valid)]).cast(pa.bool_()).buffers()[1]


def _binary(t, n: int, ends: bytearray, data: bytearray, valid: bytearray | None) -> pa.Array:
    return pa.Array.from_buffers(t, n, [None if valid is None else _validity(valid, n), pa.py_buffer(ends),
                                        pa.py_buffer(data)])


def in_task() -> None:
    """Called as a Spark task starts reading: pyspark's daemon runs a full ``gc.collect()`` in a reused
    Python worker after every task, which walks every object the worker holds (pyspark, pyarrow, kltool:
    ~60 ms a task, a tenth of a full-row read of 4 M records in 6 tasks). What is alive when a task starts
    (modules, caches) is moved out of the collector's sight (``gc.freeze``, as pre-forking servers do), so
    that the collection after the task walks only what the task made. Only in a Spark task (TaskContext):
    a driver or test process is left alone."""
    import gc

    from pyspark import TaskContext

    if TaskContext.get() is not None:
        gc.freeze()


def executor() -> str:
    """This executor, for error messages: its host, pid and task."""
    import socket

    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        task = f", task {tc.partitionId()}.{tc.attemptNumber()} of stage {tc.stageId()}" if tc else ""
    except Exception:  # noqa: BLE001
        task = ""
    return f"executor on {socket.gethostname()} (pid {os.getpid()}{task})"


class _Source:
    """Where an executor reads a planned segment (or split): the local file itself, or the byte range
    of an object-store segment copied into a local temporary file. Errors name the path and the
    executor (a path every executor must see, but this one does not)."""

    def __init__(self, part: SegmentRead):
        self.part = part
        self.path = part.file
        self.shift = 0  # file position of self.path's byte 0
        self.start = part.position
        self.stop = part.stop
        self._tmp = None

    def _where(self) -> str:
        return executor()

    def __enter__(self):
        from ..errors import KltoolError
        from ..storage.uri import is_remote, local_path

        part = self.part
        if not is_remote(part.file):
            self.path = local_path(part.file)
            if not os.path.isfile(self.path):
                raise KltoolError(f"{part.file}: not readable on the {self._where()}: every executor must see "
                                  "the path at the same place (a shared filesystem), or give an object-store URI")
            return self
        import tempfile

        from ..storage.uri import filesystem

        try:
            fs, inner = filesystem(part.file, part.storage)
            fd, self._tmp = tempfile.mkstemp(prefix="kltool-seg-", suffix=".log")
            with os.fdopen(fd, "wb") as out, fs.open_input_file(inner) as f:
                end = f.size() if part.stop is None else min(part.stop, f.size())
                pos = part.position
                while pos < end:
                    n = min(8 << 20, end - pos)
                    buf = f.read_at(n, pos)
                    if not buf:
                        break
                    out.write(buf)
                    pos += len(buf)
        except KltoolError:
            self.close()
            raise
        except Exception as e:  # noqa: BLE001 (pyarrow's OSError/ArrowException)
            self.close()
            raise KltoolError(f"{part.file}: cannot read on the {self._where()}: "
                              f"{str(e).splitlines()[0][:300]}") from None
        self.path, self.shift, self.start, self.stop = self._tmp, part.position, 0, None
        return self

    def walk(self, **kw):
        """The walker's items from ``start`` up to the first batch at or past ``stop``; positions
        are those of ``self.path`` (add ``shift`` for the segment's own). With ``runs=True`` a
        BatchRun that starts before ``stop`` may go on past it: the caller cuts it there."""
        from ..storage.scan import walk

        for item in walk(self.path, start=self.start, **kw):
            if self.stop is not None and item.position >= self.stop:
                break
            yield item

    def close(self):
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None

    def __exit__(self, *exc):
        self.close()


def read_records(part: SegmentRead, *, include_control: bool = False, include_headers: bool = True,
                 chunk_rows: int = DEFAULT_ROWS_PER_BATCH, chunk_bytes: int = 32 << 20, columns: list[str] | None = None,
                 fail_on_data_loss: bool = True):
    """pyarrow.RecordBatches of the records of one segment in [part.start, part.end); only
    ``columns`` when given (keys, values and headers are not copied out when not asked for).
    Damaged bytes on the way (see :class:`DataLoss`) fail the read, or with ``fail_on_data_loss`` False
    are skipped with a warning."""
    want_kv = columns is None or "key" in columns or "value" in columns
    include_headers = include_headers and (columns is None or "headers" in columns)
    from ..storage.read import RecordFilter
    from ..storage.segment import Segment

    start, end = part.start, part.end
    src = _Source(part)
    if start is not None and part.segment is not None and part.position == 0 and part.stop is None \
            and part.storage is None and "://" not in part.file:
        seg = Segment(os.path.dirname(part.file), part.segment, _path(part.file))
        src.start = seg.position_for_offset(start)
    flt = RecordFilter(from_offset=start, to_offset=None if end is None else end - 1)  # end is exclusive
    with src:
        src.loss = DataLoss(part.file, fail_on_data_loss, src.shift)
        yield from _records_of(src, part, flt, start, end, include_control, include_headers, want_kv, chunk_rows,
                               chunk_bytes, columns)


def _records_of(src, part, flt, start, end, include_control, include_headers, want_kv, chunk_rows, chunk_bytes,
                columns):
    """The rows of ``src``: runs of checked v2 batches through the C reader (``arrow_v2``, compressed ones
    decompressed by :func:`_inflater`'s callable) when built, every other batch (and every batch without
    it) through :func:`_add_batch`."""
    from ..format import parse_header, speedups
    from ..storage.scan import HOLD, BatchRun

    want = set(ARROW_RECORD_SCHEMA.names if columns is None else columns)
    if not include_headers:
        want.discard("headers")
    if not want_kv:
        want -= {"key", "value"}
    C = speedups.C
    log_dir = os.path.dirname(part.partition_dir.rstrip("/")) if part.partition_dir else None
    out = _Rows(want, part.topic, part.partition, columns, chunk_rows, chunk_bytes, (log_dir, part.file))
    out.loss = getattr(src, "loss", None) or DataLoss(part.file, True, src.shift)
    out.shift = src.shift
    stop = src.stop
    out.aborted = part.aborted
    # provenance and read_committed: every batch through _add_batch
    runs = C is not None and "_metadata" not in want and not part.aborted
    inflate = _inflater() if runs else None
    for item in src.walk(with_data=True, runs=runs, hold_limit=HOLD):
        if isinstance(item, BatchRun):
            buf, i = item.window()
            first = i
            j = i + item.size
            clipped = stop is not None and item.end > stop  # a split ends inside the run
            if clipped:
                j = i + (stop - item.position)
            status = 0
            while i < j:
                chunk = out.chunk
                i, status, chunk.rows, chunk.nbytes = C.arrow_v2(buf, i, j, start, end, include_control, chunk_rows,
                                                                 chunk_bytes, chunk.rows, chunk.nbytes, chunk.bufs,
                                                                 inflate)
                if status == 2:  # this batch is for the Python loop
                    h = parse_header(buf, i, check_crc=False)
                    h.crc_valid = True  # checked by the walker
                    h.position = item.position + (i - first)
                    h.data = bytes(buf[i:i + h.size])
                    i += h.size
                    status = yield from _add_batch(out, h, flt, start, end, include_control)
                    if status != 3 and out.full():
                        status = 1
                if status == 1:
                    yield out.flush()
                elif status == 3:
                    break
            if status == 3 or clipped:
                break
            continue
        if not hasattr(item, "crc_valid"):  # Damage (see level=damage)
            out.loss.region(item)
            continue
        if (yield from _add_batch(out, item, flt, start, end, include_control)) == 3:
            break
        if out.full():
            yield out.flush()
    if len(out.chunk):
        yield out.flush()
    out.loss.warn()


def _inflater():
    """``inflate(codec, payload, count)`` for ``arrow_v2``: the decompressed records of a usual compressed
    batch, which the C reader then appends as it appends a plain batch's; None leaves the batch to
    :func:`_add_batch` (the reference path): more than ``v2_record_groups`` decodes whole (records or
    bytes: read streamed there), or anything out of the ordinary (it says how the batch is damaged, or
    reads what it can). Decompressed with the codec libraries (C), bounded by the whole-batch limit: the
    usual shapes of gzip, xerial snappy and zstd in one call of the library each (see _FAST), the rest
    through :func:`kltool.format.compression.decompress`; a missing codec library raises (never data loss)."""
    from ..errors import CorruptDataError
    from ..format.batch import WHOLE_RECORDS, whole_batch_limit
    from ..format.compression import decompress

    limit = whole_batch_limit()
    fast = {}

    def inflate(codec: int, payload: bytes, count: int):
        if count > WHOLE_RECORDS:
            return None
        try:
            f = fast.get(codec)
            if f is None and codec in _FAST:
                f = fast[codec] = _FAST[codec]()
            if f is not None:
                out = f(payload, limit)
                if out is not None:
                    return out
            return decompress(codec, payload, 2, limit)
        except CorruptDataError:  # (and TooLarge) the reference path reads it, or reports it
            return None

    return inflate


# The usual shape of a codec's payload decompressed in one library call, or None (then the streamed
# reference, compression.decompress, decides: it also takes the unusual shapes, and names the damage).
# Each gives exactly what the reference gives, or None; never more than ``limit`` bytes.

def _fast_gzip():
    from ..format.compression import fast_inflate

    z = fast_inflate()  # ISA-L's inflate when the isal package is there, else zlib's
    error = z.error

    def gzip(payload, limit):
        # A header with reserved flag bits: zlib (the reference) refuses it, ISA-L would not.
        if len(payload) < 18 or payload[3] & 0xE0:
            return None
        d = z.decompressobj(31)
        try:
            out = d.decompress(payload, limit + 1)
        except error:
            return None
        # one member, whole, nothing after it (more members, padding, a truncated one: the reference's)
        if not d.eof or d.unused_data or d.unconsumed_tail or len(out) > limit:
            return None
        return out

    return gzip


def _fast_snappy():
    from ..format.compression import XERIAL_MAGIC, _snappy, snappy_block_length

    raw_into = _snappy().decompress_raw_into

    def snappy(payload, limit):
        # xerial framing: the 16-byte header, then blocks of (int32 length, raw snappy block)
        n = len(payload)
        if n < 16 or payload[:8] != XERIAL_MAGIC:
            return None
        blocks = []
        total = 0
        p = 16
        while p < n:
            if p + 4 > n:
                return None
            blen = int.from_bytes(payload[p:p + 4], "big")
            p += 4
            if blen == 0 or blen >= 1 << 31 or p + blen > n:  # (a concatenated header: the reference's)
                return None
            size = snappy_block_length(payload, p)
            if size is None:
                return None
            total += size
            if total > limit:
                return None
            blocks.append((p, p + blen, size))
            p += blen
        out = bytearray(total)
        view = memoryview(out)
        at = 0
        for a, z, size in blocks:
            try:
                got = raw_into(payload[a:z], view[at:at + size])
            except Exception:  # noqa: BLE001 (cramjam's DecompressionError: the reference names it)
                return None
            if got != size:
                return None
            at += size
        view.release()
        return out

    return snappy


def _fast_zstd():
    from ..format.compression import _zstd

    z = _zstd()
    d = z.ZstdDecompressor()

    def zstd(payload, limit):
        if not _one_zstd_frame(payload):  # (the library would pass over what follows the first frame)
            return None
        try:
            out = d.decompress(payload, max_output_size=limit)
        except z.ZstdError:  # damaged, truncated, or larger than the limit: the reference's
            return None
        return out if len(out) <= limit else None

    return zstd


def _one_zstd_frame(b) -> bool:
    """Whether ``b`` is exactly one zstd frame (its header, blocks and checksum: no decompression)."""
    n = len(b)
    if n < 9 or b[:4] != b"\x28\xb5\x2f\xfd":
        return False
    fhd = b[4]
    if fhd & 0x08:  # reserved bit
        return False
    fcs = (0, 2, 4, 8)[fhd >> 6]
    single = fhd & 0x20
    if single and not fcs:
        fcs = 1
    p = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 0x03] + fcs
    while True:
        if p + 3 > n:
            return False
        h = b[p] | b[p + 1] << 8 | b[p + 2] << 16
        p += 3
        btype = (h >> 1) & 3
        if btype == 3:
            return False
        p += 1 if btype == 1 else h >> 3
        if h & 1:
            break
    if fhd & 0x04:
        p += 4
    return p == n


def _fast_lz4():
    from ..format.compression import _lz4

    frame = _lz4()

    def lz4(payload, limit):
        d = frame.LZ4FrameDecompressor()
        try:
            out = d.decompress(payload, max_length=limit + 1)
        except Exception:  # noqa: BLE001 (lz4's RuntimeError: the reference names it)
            return None
        # exactly one whole frame (a truncated one, data after it, or more than the limit: the reference's)
        if not d.eof or d.unused_data or len(out) > limit:
            return None
        return out

    return lz4


_FAST = {1: _fast_gzip, 2: _fast_snappy, 3: _fast_lz4, 4: _fast_zstd}


class DataLoss:
    """What a read of ``file`` could not return: unreadable regions, batches with a bad CRC and batches
    that do not decode, in the range read. Like Spark's Kafka source, ``failOnDataLoss`` (``fail``, the
    default) fails the read at the first with one line naming the file and the byte position; without
    it they are skipped and one warning (on the executor's log) gives the bytes and records lost."""

    def __init__(self, file: str, fail: bool, shift: int = 0):
        self.file, self.fail, self.shift = file, fail, shift
        self.bytes = self.records = self.batches = self.regions = 0

    def _lost(self, position: int, what: str):
        from ..errors import CorruptDataError

        raise CorruptDataError(f"{what}: data lost (failOnDataLoss=false skips it and warns)", path=self.file,
                               position=position + self.shift)

    def region(self, d) -> None:
        if self.fail:
            self._lost(d.position, f"{d.kind}, {d.length} unreadable bytes")
        self.bytes += d.length
        self.regions += 1

    def batch(self, h, why: str) -> None:
        if self.fail:
            self._lost(h.position, f"batch {h.base_offset}..{h.last_offset} {why}")
        self.bytes += h.size
        self.batches += 1
        self.records += h.count or 0

    def warn(self) -> None:
        if self.bytes:
            import logging

            logging.getLogger("kltool.spark").warning(
                "%s: skipped %d damaged bytes (%d unreadable regions, %d batches with a bad CRC or undecodable "
                "holding up to %d records) (failOnDataLoss=false)", self.file, self.bytes, self.regions,
                self.batches, self.records)


class _Rows:
    """The chunk of rows being filled, and how it becomes the next pyarrow.RecordBatch."""

    __slots__ = ("want", "topic", "partition", "columns", "max_rows", "max_bytes", "chunk", "loss", "shift", "where",
                 "aborted")

    def __init__(self, want, topic, partition, columns, max_rows, max_bytes, where=None):
        self.want, self.topic, self.partition, self.columns = want, topic, partition, columns
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.chunk = _RecordChunk(want)
        self.shift = 0
        self.where = where
        self.aborted = None

    def full(self) -> bool:
        return len(self.chunk) >= self.max_rows or self.chunk.nbytes >= self.max_bytes

    def flush(self):
        batch = self.chunk.to_arrow(self.topic, self.partition, self.columns, self.where)
        self.chunk = _RecordChunk(self.want)
        return batch


def _aborted(aborted, h) -> bool:
    pid, base = h.producer_id, h.base_offset
    return any(p == pid and first <= base <= marker for p, first, marker in aborted)


def _add_batch(out: _Rows, h, flt, start, end, include_control):
    """Add the records of batch ``h`` that the read returns to ``out``: returns 0, or 3 when the read is
    over (the batch starts at or past ``end``). A batch is read as :func:`kltool.storage.scan.records_of`
    gives it: a usual one whole, a larger one (more than ``--max-record-bytes`` decompressed, or not held
    by the walker) a bounded group of records at a time, yielding every chunk it fills on the way, so
    memory stays a chunk plus a group whatever the batch holds."""
    from ..errors import CorruptDataError
    from ..format import speedups
    from ..storage.scan import records_of

    if start is not None and h.last_offset < start:
        return 0
    if end is not None and h.magic == 2 and h.base_offset >= end:
        return 3
    if not h.crc_valid:
        out.loss.batch(h, f"has a bad CRC (stored {h.crc})")
        return 0
    if h.is_control and not include_control:
        return 0
    if out.aborted and h.is_transactional and not h.is_control and _aborted(out.aborted, h):
        return 0  # read_committed: an aborted transaction's records
    tt = TIMESTAMP_TYPE_IDS.get(h.timestamp_type, -1)
    pos = h.position + out.shift
    try:
        groups = records_of(h)
        if isinstance(groups, tuple):  # a usual batch: decoded whole
            cols = groups[0]
            if not len(cols):
                return 0
            idx = flt.indices(cols)
            if not idx:
                return 0
            C = speedups.C
            if C is not None and h.magic == 2:  # the C appender over the decoded (decompressed) records
                chunk = out.chunk
                got = C.arrow_records(cols.buffer, h.count, h.base_offset, h.first_timestamp,
                                      h.timestamp_type == "log_append", h.max_timestamp, start, end, chunk.bufs)
                if got is not None:
                    chunk.rows += got
                    chunk.nbytes += len(cols.buffer)
                    chunk.mark(pos, chunk.rows - got)
                    return 0
            before = out.chunk.rows
            out.chunk.add(cols, idx, tt)
            out.chunk.mark(pos, before)
            return 0
        for cols in groups:
            idx = flt.indices(cols) if len(cols) else None
            if idx:
                before = out.chunk.rows
                out.chunk.add(cols, idx, tt)
                out.chunk.mark(pos, before)
                if out.full():
                    yield out.flush()
    except CorruptDataError as e:  # an undecodable batch (the records before the damage are kept)
        if getattr(e, "partial", None) is None:
            out.loss.batch(h, f"does not decode ({e.message})")
        # else a v0/v1 wrapper whose inner messages end in a partial one: Kafka's deep iterator serves the
        # whole ones before it and stops there (the end of its stream), so its consumer, and Spark's Kafka
        # source, lose nothing: neither does kafka-log (verify and dump name the damage)
    return 0


def _path(p):
    from pathlib import Path

    return Path(p)


def _legacy_count(path: str, h) -> tuple[int | None, int]:
    """Records in a legacy (v0/v1) message and its exact base offset: a compressed wrapper has no
    record count in its header, so it is decoded (the one case where level=batches decompresses)."""
    if h.compression == 0:
        return 1, h.base_offset
    from ..errors import CorruptDataError
    from ..format import decode_records

    with open(path, "rb") as f:
        data = os.pread(f.fileno(), h.size, h.position)
    try:
        cols = decode_records(h, data)
    except CorruptDataError as e:
        cols = getattr(e, "partial", None)  # the whole inner messages before a partial one: Kafka's records
        if cols is None:
            return None, h.base_offset
    return len(cols), cols.offsets[0]


def read_batches(part: SegmentRead, chunk_rows: int = 65536):
    with _Source(part) as src:
        yield from _batches_of(src, part, chunk_rows)


def _batches_of(src, part, chunk_rows):
    cols: dict[str, list] = {f.name: [] for f in ARROW_BATCH_SCHEMA}
    n = 0
    start, end = part.start, part.end
    shift = src.shift
    for h in src.walk():
        if not hasattr(h, "crc_valid"):
            continue
        base, count = h.base_offset, h.count
        if h.magic < 2 and h.crc_valid:
            count, base = _legacy_count(src.path, h)
        if start is not None and h.last_offset < start:
            continue
        if end is not None and base >= end:
            continue
        for k, v in (("topic", part.topic), ("partition", part.partition), ("segment", part.segment),
                     ("position", h.position + shift), ("size", h.size), ("base_offset", base),
                     ("last_offset", h.last_offset), ("count", count), ("magic", h.magic),
                     ("compression", h.compression_name), ("crc_valid", bool(h.crc_valid)),
                     ("first_timestamp", h.first_timestamp), ("max_timestamp", h.max_timestamp),
                     ("producer_id", h.producer_id), ("is_transactional", h.is_transactional),
                     ("is_control", h.is_control), ("timestamp_type", h.timestamp_type), ("file", part.file)):
            cols[k].append(v)
        n += 1
        if n >= chunk_rows:
            yield pa.RecordBatch.from_pydict(cols, schema=ARROW_BATCH_SCHEMA)
            cols = {f.name: [] for f in ARROW_BATCH_SCHEMA}
            n = 0
    if n:
        yield pa.RecordBatch.from_pydict(cols, schema=ARROW_BATCH_SCHEMA)


def read_damage(part: SegmentRead):
    rows = []
    with _Source(part) as src:
        sh = src.shift
        for item in src.walk():
            if hasattr(item, "crc_valid"):
                if not item.crc_valid:
                    rows.append((item.position + sh, item.size, "crc_mismatch",
                                 f"stored crc {item.crc} does not match in batch {item.base_offset}..{item.last_offset}",
                                 item.end + sh))
            else:
                rows.append((item.position + sh, item.length, item.kind, item.message,
                             None if item.resumed_at is None else item.resumed_at + sh))
    if rows:
        n = len(rows)
        yield pa.RecordBatch.from_arrays([
            pa.array([part.topic] * n, pa.string()), pa.array([part.partition] * n, pa.int32()),
            pa.array([part.segment] * n, pa.int64()), pa.array([r[0] for r in rows], pa.int64()),
            pa.array([r[1] for r in rows], pa.int64()), pa.array([r[2] for r in rows], pa.string()),
            pa.array([r[3] for r in rows], pa.string()), pa.array([r[4] for r in rows], pa.int64()),
            pa.array([part.file] * n, pa.string()),
        ], schema=ARROW_DAMAGE_SCHEMA)


def read_segments(parts: list[SegmentRead]):
    if parts:
        yield pa.RecordBatch.from_pydict({
            "topic": [p.topic for p in parts], "partition": [p.partition for p in parts],
            "segment": [p.segment for p in parts], "bytes": [p.bytes for p in parts],
            "file": [p.file for p in parts], "partition_dir": [p.partition_dir for p in parts],
            "log_start_offset": [p.log_start_offset for p in parts],
        }, schema=ARROW_SEGMENT_SCHEMA)


def _project(batches, columns):
    for b in batches:
        yield b if columns is None else b.select(columns)


def read_partition_rows(opts: dict, part: SegmentGroup | SegmentRead | list, columns: list[str] | None = None):
    """What one DataFrame partition holds, for ``opts['level']`` (also usable without Spark); only
    ``columns`` (a narrower schema the user gave) when given. A package the data needs that this
    executor's Python lacks (a codec library, crc32c) fails the task with one line naming the package
    and the executor: the data is never skipped as undecodable."""
    from ..errors import MissingDependency

    try:
        yield from _partition_rows(opts, part, columns)
    except MissingDependency as e:
        raise MissingDependency(f"{e.message} (on the {executor()})") from None
    except ImportError as e:  # kltool's own dependencies, on an executor that has kltool but not them
        raise missing_package(e) from None


def missing_package(e: ImportError):
    """kltool's own dependency (crc32c, ...) missing in this worker's Python, as one line."""
    import sys

    from ..errors import MissingDependency

    return MissingDependency(f"kltool needs the {e.name} package, which the Python at {sys.executable} does "
                             f"not have: pip install {e.name} (on the {executor()})")


def _partition_rows(opts: dict, part, columns):
    opts = normalize_options(opts)
    level = (opts.get("level") or "records").lower()
    segs = part.value if isinstance(part, InputPartition) else part
    if isinstance(segs, SegmentRead):
        segs = [segs]
    if level == "segments":
        yield from _project(read_segments(segs), columns)
        return
    for seg in segs:
        if level == "records":
            yield from read_records(seg, include_control=_bool(opts.get("includecontrol"), False),
                                    include_headers=_bool(opts.get("includeheaders"), True),
                                    chunk_rows=_int(opts, "maxrecordsperbatch") or DEFAULT_ROWS_PER_BATCH, columns=columns,
                                    fail_on_data_loss=_bool(opts.get("failondataloss"), True))
        elif level == "batches":
            yield from _project(read_batches(seg), columns)
        else:
            yield from _project(read_damage(seg), columns)

