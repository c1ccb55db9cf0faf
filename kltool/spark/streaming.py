"""``spark.readStream.format("kafka-log")``: new batches of a log dir (or of a bucket of segments: object-store
URIs, as the batch source takes them) as a stream, with offsets as Spark's Kafka source checkpoints them.

An offset is Spark's Kafka-source JSON, ``{"topic": {"partition": next offset}}``: what a micro-batch has
read up to (exclusive), per partition. The end of a partition is the offset after its **last whole,
CRC-valid batch** now: a batch the broker is still writing at the end of the active segment (a torn
tail) is not read until it is whole, and nothing past it. Every micro-batch lists the log dir again, so
new segments (a roll) and new partitions are picked up. Nothing is ever written to the log dir: no lock
taken, no index rebuilt (the stream's state is Spark's checkpoint).

The rows are read by the batch source's planner and reader (:mod:`.planning`, :mod:`.arrow_rows`): a
micro-batch is the batch query ``assign`` + ``startingOffsets`` + ``endingOffsets`` of its offset range,
each partition's read stopped at the byte after its last batch (so a torn tail past it is never walked).

As Spark's Kafka source (``KafkaMicroBatchStream``):

- ``startingOffsets`` (``latest``, the default for streams, ``earliest`` or JSON with -2/-1),
  ``startingTimestamp``, ``startingOffsetsByTimestamp`` (that order of precedence) give the first
  offsets of a new query; a restarted query goes on from its checkpoint. A JSON names every partition; a
  timestamp resolves as the broker's ListOffsets answers it (:func:`.planning.list_offsets`), no offset
  being an error unless ``startingOffsetsByTimestampStrategy=latest``. A partition that appears later
  is read from its log start.
- ``maxOffsetsPerTrigger``: at most that many offsets per micro-batch, shared among the partitions in
  proportion to what each has to read (a small partition gets at least one), also under
  ``Trigger.AvailableNow``, which reads what is there when the query starts in several micro-batches.
- ``minOffsetsPerTrigger``: no micro-batch until that many offsets are new, or ``maxTriggerDelay``
  (default 15m) has passed since the last one (see :meth:`KafkaLogStreamReader.getDefaultReadLimit`).
- ``failOnDataLoss`` (default true): offsets the stream should read that are gone (retention deleted the
  segments below the log start offset, a partition vanished, a partition truncated below what was read,
  a new partition whose log does not start at 0) fail the query in one line; ``false`` warns and goes
  on from what is there.
- ``kafka.isolation.level=read_committed``: a partition ends at its last stable offset (nothing of an
  open transaction is read, nor anything after it), aborted records are skipped.
- ``endingOffsets`` and the other ending options are an error, as in Spark (a stream has no end);
  so is a ``level`` other than ``records``.

pyspark 4.3.0 gives a Python stream reader what Spark's own sources have: ``latestOffset(start, limit)`` with
admission control (``getDefaultReadLimit``: ``ReadMaxRows`` for ``maxOffsetsPerTrigger``), and
``SupportsTriggerAvailableNow`` (``prepareForTriggerAvailableNow``: the ends when the query starts are
where ``Trigger.AvailableNow`` stops). The reader lives in one Python process on the driver for the
query's life (``_target`` and ``_latest`` are kept there); ``read`` runs on the executors.
"""

from __future__ import annotations

import json
import logging
import os

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from .options import (
    EARLIEST,
    LATEST,
    _bool,
    _int,
    _spark_offsets,
    by_timestamp,
    option_paths,
    time_ms,
    topic_matcher,
)
from .planning import SegmentGroup, committed, group_reads, plan_segments

log = logging.getLogger("kltool.spark")

# Spark's Kafka source refuses these in a stream (a stream has no end); kltool's own batch-only ones too.
NOT_IN_STREAMS = {"endingoffsets": "endingOffsets", "endingoffset": "endingOffset", "endingtimestamp": "endingTimestamp",
                  "endingoffsetsbytimestamp": "endingOffsetsByTimestamp"}
LOST = ('Some data may have been lost (failOnDataLoss=false warns and goes on from the data that is there, '
        'as Spark\'s Kafka source)')


def check_stream_options(opts: dict) -> None:
    """What a stream cannot take, in one UsageError line (raised on the first call Spark makes)."""
    from ..errors import UsageError

    for k, name in NOT_IN_STREAMS.items():
        if opts.get(k) not in (None, ""):
            raise UsageError(f"kafka-log: option {name} is not valid in a stream (readStream reads on as batches are "
                             "written; use spark.read for a bounded range)")
    level = str(opts.get("level") or "records").lower()
    if level != "records":
        raise UsageError(f"kafka-log: readStream reads records only, not level {level}")
    n = _int(opts, "maxoffsetspertrigger")
    if n is not None and n <= 0:
        raise UsageError(f"kafka-log: option maxOffsetsPerTrigger must be a positive integer, not {n}")


def to_json(offsets: dict) -> dict:
    """{(topic, partition): offset} as Spark's Kafka-source offset JSON, topics and partitions in order."""
    out: dict = {}
    for (t, p) in sorted(offsets):
        out.setdefault(t, {})[str(p)] = int(offsets[(t, p)])
    return out


def from_json(spec) -> dict:
    """Spark's Kafka-source offset JSON (a dict, or its text) as {(topic, partition): offset}."""
    if spec is None:
        return {}
    if isinstance(spec, str):
        spec = json.loads(spec)
    return {(t, int(p)): int(o) for t, parts in spec.items() for p, o in parts.items()}


class StreamPartition:
    """A partition the stream reads, on the local disk (``local``: a :class:`kltool.storage.partition.Partition`)
    or on an object store (``remote``: a :class:`kltool.storage.uri.RemotePartition`, ``storage``: its options)."""

    def __init__(self, topic: str, partition: int, where: str, local=None, remote=None, storage=None):
        self.topic, self.partition, self.where = topic, partition, where
        self.local, self.remote, self.storage = local, remote, storage

    def log_start_offset(self) -> int:
        return (self.local or self.remote).log_start_offset()

    def last_segment(self):
        """(base offset, file, size, index file or None) of the last segment; None when there is none."""
        if self.local is not None:
            segs = self.local.segments
            return None if not segs else (segs[-1].base_offset, str(segs[-1].log_path), None, None)
        segs = self.remote.segments
        return None if not segs else (segs[-1].base_offset, segs[-1].log, segs[-1].size, segs[-1].index)


def headers_from(file: str, base: int, offset: int | None, storage=None, index: str | None = None, size=None,
                 indexes: dict | None = None):
    """The batch headers of segment ``file`` (base offset ``base``) from the trusted offset-index entry at or
    below ``offset`` (None: the last entry) to its end, with their positions in the segment. On an object
    store the bytes from there are copied into a local temporary file and walked there (the executors'
    way), so what is read stays the tail, not the segment. ``indexes``: remote indexes fetched already (see
    :func:`kltool.spark.planning._remote_index`)."""
    from pathlib import Path

    from ..storage.scan import batches
    from ..storage.uri import is_remote

    if not is_remote(file):
        from ..storage.segment import Segment

        seg = Segment(os.path.dirname(file), base, Path(file))
        if offset is None:
            entries = seg.offset_index()
            offset = entries[-1][0] if entries else base
        yield from seg.batches(start=seg.position_for_offset(offset))
        return
    import tempfile

    from ..storage.uri import filesystem
    from .planning import _remote_head, _remote_index, _seek

    entries = _remote_index(index, base, storage, indexes) if index else []
    if offset is None:
        offset = entries[-1][0] if entries else base
    pos = _seek(entries, base, offset, lambda at: _remote_head(file, at, storage))
    fs, inner = filesystem(file, storage)
    fd, tmp = tempfile.mkstemp(prefix="kltool-tail-", suffix=".log")
    try:
        with os.fdopen(fd, "wb") as out, fs.open_input_file(inner) as f:
            at, end = pos, f.size()
            while at < end:
                buf = f.read_at(min(8 << 20, end - at), at)
                if not buf:
                    break
                out.write(buf)
                at += len(buf)
        for h in batches(tmp):
            h.position += pos
            yield h
    finally:
        os.unlink(tmp)


def stream_end(p) -> int:
    """The offset after partition ``p``'s last whole, CRC-valid batch (the base offset of an empty last
    segment): found by a walk of its last segment from the last trusted offset-index entry. A batch still
    being written at the end of the active segment (its bytes not all there, or not yet matching its CRC)
    ends nothing: the stream stops before it until it is whole."""
    if not isinstance(p, StreamPartition):
        p = StreamPartition(p.topic, p.partition, str(p.path), local=p)
    last = p.last_segment()
    if last is None:
        return 0
    base, file, size, index = last
    indexes: dict = {}  # (a remote .index fetched once)
    end = _last_valid_end(headers_from(file, base, None, p.storage, index, size, indexes))
    if end is None:  # nothing valid after the last index entry (or a damaged index): the whole segment
        end = _last_valid_end(headers_from(file, base, base, p.storage, index, size, indexes))
    return base if end is None else end


def _last_valid_end(headers) -> int | None:
    end = None
    for h in headers:
        if h.crc_valid:
            end = h.last_offset + 1
    return end


def _batch_end_position(r, until: int) -> int | None:
    """The byte after the batch holding offset ``until - 1`` in the segment read ``r`` (None: not in it), so
    a read of [.., until) stops there and never walks what follows (a torn tail)."""
    index = None
    if r.storage is not None or "://" in r.file:
        index = (r.file[:-len(".log")] if r.file.endswith(".log") else r.file) + ".index"
    for h in headers_from(r.file, r.segment, until - 1, r.storage, index):
        if h.position < r.position:
            continue
        if h.last_offset >= until - 1:
            return h.end
        if h.base_offset >= until:
            return h.position
    return None


def rate_limit(start: dict, end: dict, limit: int) -> dict:
    """Spark's Kafka source's ``maxOffsetsPerTrigger``: ``limit`` offsets shared among the partitions in
    proportion to what each has to read (start to end), at least one each where there is something."""
    sizes = {k: max(0, end[k] - start.get(k, end[k])) for k in end}
    total = sum(sizes.values())
    if total <= limit:
        return dict(end)
    out = {}
    for k, e in end.items():
        share = limit * (sizes[k] / total)  # (as Spark computes it: the same floor at the same offsets)
        n = int(share) if share >= 1 else (1 if sizes[k] else 0)
        out[k] = min(e, start.get(k, e) + n)
    return out


def _lost(message: str, fail: bool) -> None:
    from ..errors import CorruptDataError

    if fail:
        raise CorruptDataError(f"{message}. {LOST}")
    log.warning("%s (failOnDataLoss=false: going on)", message)


class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader: offsets are ``{"topic": {"partition": offset}}``; see the module docstring.

    Errors in the options are kept and raised by the first call Spark makes (pyspark 4.3.0 hides an
    exception raised while it creates the reader behind one of its own)."""

    def __init__(self, options: dict, columns=None, aliases=None, default_min_partitions=None, one_line=None,
                 rows_one_line=None):
        self.options = options
        # the data source's wrappers that make any error one line (kltool/spark/datasource.py)
        self.one_line = one_line or (lambda f: f)
        self.rows_one_line = rows_one_line or (lambda rows: rows)
        self.columns = columns
        self.aliases = aliases
        self.default_min_partitions = default_min_partitions
        self._target: dict | None = None  # Trigger.AvailableNow: the ends when the query started
        self._latest: dict | None = None  # the last ends seen (reportLatestOffset)
        self._last_trigger = 0  # epoch ms of the last micro-batch minOffsetsPerTrigger let through (Spark's 0 at first)
        self._error = None
        try:
            check_stream_options(options)
        except Exception as e:  # noqa: BLE001 (raised on the first call, see the class docstring)
            self._error = e

    def _check(self):
        if self._error is not None:
            raise self._error

    @property
    def fail_on_data_loss(self) -> bool:
        return _bool(self.options.get("failondataloss"), True)

    # -- the partitions now ------------------------------------------------------------------------
    def _partitions(self) -> dict:
        """{(topic, partition): StreamPartition} of the paths now (listed again on every call)."""
        from ..errors import UsageError
        from ..format.names import classify
        from ..storage.uri import is_remote, local_path
        from .planning import _expand, _replicas, _selection

        opts = self.options
        paths = option_paths(opts)
        local = [q for p in paths if not is_remote(p) for q in _expand(os.path.abspath(local_path(p)), p)]
        parts, files = _selection(opts, local) if local else ([], [])
        if any(classify(f)[0] == "log" for f in files):
            raise UsageError(f"{files[0]}: readStream reads partition directories (topic-N), not lone segment "
                             "files: a stream's offsets are per topic and partition")
        wanted = topic_matcher(opts)
        if wanted is not None:
            parts = [p for p in parts if wanted(p.topic)]
        parts = _replicas(parts, str(opts.get("replicas") or "all").lower())
        found = [StreamPartition(p.topic, p.partition, str(p.path), local=p) for p in parts]
        found += self._remote([p for p in paths if is_remote(p)])
        out: dict = {}
        for p in found:
            k = (p.topic, p.partition)
            if k in out:
                raise UsageError(f"{p.topic}-{p.partition} is in two places ({out[k].where}, {p.where}): a stream "
                                 "has one offset per partition; option replicas=one reads the leader's copy")
            out[k] = p
        return out

    def _remote(self, uris: list) -> list:
        """The partitions of object-store URIs (the planner's listing, :func:`kltool.storage.uri.select_remote`)."""
        if not uris:
            return []
        from ..errors import UsageError
        from ..storage.select import parse_partitions
        from ..storage.uri import select_remote
        from .options import _assigned, storage_options

        opts = self.options
        if str(opts.get("kafka.isolation.level") or "").lower() == "read_committed":
            raise UsageError(f"{uris[0]}: kafka.isolation.level=read_committed needs local paths")
        if any(opts.get(k) not in (None, "") for k in ("startingtimestamp", "startingoffsetsbytimestamp")):
            raise UsageError(f"{uris[0]}: startingTimestamp and startingOffsetsByTimestamp need local paths")
        storage = storage_options(opts) or None
        numbers = parse_partitions(opts.get("partition")) if opts.get("partition") else None
        sel = select_remote(uris, opts.get("topic") or None, numbers, storage,
                            all_states=_bool(opts.get("allstates"), False), strict=False)
        if sel.files:
            raise UsageError(f"{sel.files[0][0]}: readStream reads partition directories (topic-N), not lone "
                             "segment files: a stream's offsets are per topic and partition")
        assigned, subscribed = _assigned(opts), topic_matcher(opts)
        return [StreamPartition(p.topic, p.partition, p.directory, remote=p, storage=storage) for p in sel.partitions
                if (assigned is None or (p.topic, p.partition) in assigned)
                and (subscribed is None or subscribed(p.topic))]

    def _ends(self, parts: dict) -> dict:
        """{(topic, partition): the offset after the last whole valid batch} (read_committed: at most the
        last stable offset)."""
        committed_only = str(self.options.get("kafka.isolation.level") or "").lower() == "read_committed"
        out = {}
        for k, p in parts.items():
            end = stream_end(p)
            if committed_only:
                end = min(end, committed(p.local)[1])
            out[k] = end
        return out

    # -- Spark's calls -----------------------------------------------------------------------------
    def initialOffset(self) -> dict:  # noqa: N802 (pyspark's names)
        self._check()
        return self._one(self._initial)

    def _initial(self) -> dict:
        from ..errors import UsageError
        from .planning import _Bounds, check_named, list_offsets, no_offset_for_time

        opts = self.options
        parts = self._partitions()
        ends = self._ends(parts)
        t_all = _int(opts, "startingtimestamp")
        t_each = by_timestamp(opts.get("startingoffsetsbytimestamp"), "startingOffsetsByTimestamp")
        spec = _spark_offsets(opts.get("startingoffsets"), "startingOffsets")
        one = _int(opts, "startingoffset")
        if one is None or t_all is not None or t_each is not None:  # (the JSON in effect names every partition)
            check_named(_Bounds(opts), parts)
        strict = str(opts.get("startingoffsetsbytimestampstrategy") or "error").lower() == "error"  # Spark's default
        committed_only = str(opts.get("kafka.isolation.level") or "").lower() == "read_committed"
        out = {}
        for k, p in parts.items():
            first, end = p.log_start_offset(), ends[k]
            if t_all is not None or t_each is not None:
                ts, name = (t_all, "startingTimestamp") if t_all is not None else (t_each[k], "startingOffsetsByTimestamp")
                # ListOffsets as Spark's Kafka source asks it (special negative timestamps; under read_committed
                # nothing at or past the last stable offset, which ends[k] is then)
                v = list_offsets(p.local, ts, end, f"{k[0]}-{k[1]}: {name}")
                if v is None:
                    if strict:
                        raise UsageError(no_offset_for_time(f"{k[0]}-{k[1]}", name, ts, committed_only))
                    v = end
            elif one is not None:
                v = one
            else:
                v = spec.get(k, EARLIEST) if isinstance(spec, dict) else (LATEST if spec is None else spec)
                v = first if v == EARLIEST else end if v == LATEST else v
            if v > end:  # Spark's Kafka source: data loss (the consumer would be reset to the end)
                _lost(f"{k[0]}-{k[1]}: the starting offset {v} is after the end of the partition ({end})",
                      self.fail_on_data_loss)
                v = end
            out[k] = v if isinstance(spec, dict) else max(v, first)  # (JSON below the log start: data lost)
        return to_json(out)

    def _one(self, f, *a):
        return self.one_line(f)(*a)

    def getDefaultReadLimit(self):  # noqa: N802
        """Spark's Kafka source's limits: ``minOffsetsPerTrigger`` (with ``maxTriggerDelay``) and
        ``maxOffsetsPerTrigger``. pyspark passes a Python reader's limit back to it as it was given (its
        ``ReadMinRows`` has no delay, and there is no composite of two limits), so the limit says only
        whether there is one: :meth:`latestOffset` takes both from the options, as Spark's composite."""
        self._check()
        lo, hi = _int(self.options, "minoffsetspertrigger"), _int(self.options, "maxoffsetspertrigger")
        if lo is not None:
            return ReadMinRows(lo)
        return ReadAllAvailable() if hi is None else ReadMaxRows(hi)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._check()
        self._target = self._one(lambda: self._ends(self._partitions()))

    def latestOffset(self, start: dict, limit) -> dict:  # noqa: N802
        self._check()
        return self._one(self._latest_offset, start, limit)

    def _latest_offset(self, start, limit) -> dict:
        begin = from_json(start)
        parts = self._partitions()
        ends = self._ends(parts)
        self._latest = to_json(ends)
        fail = self.fail_on_data_loss
        gone = sorted(k for k in begin if k not in ends)
        if gone:
            _lost(f"partitions {', '.join(f'{t}-{p}' for t, p in gone)} are gone", fail)
        if self._target is not None:  # Trigger.AvailableNow: nothing written after the query started
            ends = {k: min(e, self._target[k]) for k, e in ends.items() if k in self._target}
        out = {}
        for k, e in ends.items():
            b = begin.get(k)
            if b is not None and e < b:  # (a new partition: from its log start, see _plan)
                _lost(f"{k[0]}-{k[1]}: its end offset went from {b} back to {e} (truncated or recreated)", fail)
            out[k] = e
        if isinstance(limit, ReadAllAvailable):  # (what Spark passes when it wants everything)
            return to_json(out)
        lo = _int(self.options, "minoffsetspertrigger")
        hi = limit.max_rows if isinstance(limit, ReadMaxRows) else _int(self.options, "maxoffsetspertrigger")
        if lo is not None and self._delay(lo, out, begin):
            return start  # Spark's Kafka source: fewer new offsets than minOffsetsPerTrigger, no batch yet
        if hi is not None:
            out = rate_limit({k: begin.get(k, parts[k].log_start_offset()) for k in out}, out, hi)
        return to_json(out)

    def _delay(self, min_offsets: int, latest: dict, current: dict) -> bool:
        """Spark's Kafka source's ``minOffsetsPerTrigger``: hold the next micro-batch back while fewer than
        ``min_offsets`` offsets are new (summed over the partitions; a partition not in ``current`` counts
        from 0), unless ``maxTriggerDelay`` (default 15m) has passed since the last one let through (the
        first call always lets one through)."""
        import time

        now = int(time.time() * 1000)
        if now - self._last_trigger >= time_ms(self.options.get("maxtriggerdelay"), "maxTriggerDelay"):
            self._last_trigger = now
            return False
        if sum(e - current.get(k, 0) for k, e in latest.items()) < min_offsets:
            return True
        self._last_trigger = now
        return False

    def reportLatestOffset(self):  # noqa: N802
        return self._latest

    def partitions(self, start: dict, end: dict):
        self._check()
        return self._one(self._plan, start, end)

    def _plan(self, start: dict, end: dict):
        begin, until = from_json(start), from_json(end)
        parts = self._partitions()
        fail = self.fail_on_data_loss
        ranges = {}
        for k, u in until.items():
            p = parts.get(k)
            if p is None:
                _lost(f"{k[0]}-{k[1]} is gone", fail)
                continue
            first = p.log_start_offset()
            b = begin.get(k)
            if b is None:
                b = first
                if first != 0:
                    _lost(f"added partition {k[0]}-{k[1]} starts from {first} instead of 0", fail)
            elif b < first:
                _lost(f"{k[0]}-{k[1]}: offsets {b} to {first - 1} are gone (retention deleted them; the log starts "
                      f"at {first} in {p.where})", fail)
                b = first
            if b < u:
                ranges[k] = (b, u)
        if not ranges:
            return []
        segs = self._segments(ranges)
        return [SegmentGroup(g) for g in group_reads(self.options, segs, self.default_min_partitions)]

    def _segments(self, ranges: dict) -> list:
        """The batch planner's reads of the ranges {(topic, partition): (from, until)}, each partition's last
        read stopped after the batch holding until - 1."""
        opts = {k: v for k, v in self.options.items()
                if k not in ("startingoffsets", "startingoffset", "startingtimestamp", "startingoffsetsbytimestamp",
                             "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay", "topic", "partition",
                             "subscribe", "subscribepattern")}
        assign: dict = {}
        for t, p in ranges:
            assign.setdefault(t, []).append(p)
        opts["assign"] = json.dumps(assign)
        opts["startingoffsets"] = json.dumps(to_json({k: r[0] for k, r in ranges.items()}))
        opts["endingoffsets"] = json.dumps(to_json({k: r[1] for k, r in ranges.items()}))
        opts["respectlogstartoffset"] = "true"
        segs = plan_segments(opts, parallelism=self.default_min_partitions)
        last: dict = {}
        for i, r in enumerate(segs):
            last[(r.topic, r.partition)] = i
        for k, i in last.items():
            r = segs[i]
            stop = _batch_end_position(r, ranges[k][1])
            if stop is not None and (r.stop is None or stop < r.stop):
                r.stop = stop
                r.bytes = stop - r.position
        return segs

    def read(self, partition):
        from .arrow_rows import in_task, read_partition_rows

        in_task()
        rows = self.rows_one_line(read_partition_rows(self.options, partition, self.columns))
        if self.aliases is None:
            return rows
        return (b.rename_columns(self.aliases) for b in rows)

    def commit(self, end: dict) -> None:
        pass  # the offsets are Spark's checkpoint: nothing is written to the log dir

    def stop(self) -> None:
        pass
