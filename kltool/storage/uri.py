"""Paths as URIs: log dirs, backups and tiered-storage copies on object stores and other filesystems.

``s3://`` / ``s3a://`` / ``s3n://`` (AWS and S3-compatible endpoints), ``gs://``, ``abfs://`` /
``abfss://``, ``hdfs://`` (where the runtime has libhdfs) go through pyarrow's filesystem layer
(:mod:`pyarrow.fs`); ``file://`` URIs and plain paths (a local directory may be named ``a:b``) are
local. Credentials and endpoints come from the usual environment and configuration files
(``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``~/.aws``, ``GOOGLE_APPLICATION_CREDENTIALS``, ...)
and from *storage options* (``endpoint_override``, ``access_key``, ``secret_key``, ``region``, ...;
Hadoop's ``fs.s3a.endpoint``/``fs.s3a.access.key``/``fs.s3a.secret.key`` names are understood too).

:func:`list_remote` lists what a URI holds as Kafka partitions and segments by name only (no byte of a
segment is read): partition directories ``topic-N`` (also ``topic-N-<id>``, as tiered storage names
them), segment files ``<offset>.log`` and tiered-storage copies ``<offset>-<id>.log`` with their
``.index``/``.timeindex``, and the log dir's ``log-start-offset-checkpoint``.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse

from ..errors import KltoolError, UsageError
from ..format import names as fn
from ..format.index import ByteSource, ZeroPadded

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
# <offset>.log, and a tiered-storage copy: <offset>-<segment id>.log (KIP-405's RemoteLogSegmentFileset)

_S3_NAMES = {
    "endpoint_override": "endpoint_override", "endpoint": "endpoint_override", "endpoint_url": "endpoint_override",
    "fs.s3a.endpoint": "endpoint_override", "aws_endpoint_url": "endpoint_override",
    "access_key": "access_key", "aws_access_key_id": "access_key", "fs.s3a.access.key": "access_key",
    "secret_key": "secret_key", "aws_secret_access_key": "secret_key", "fs.s3a.secret.key": "secret_key",
    "session_token": "session_token", "aws_session_token": "session_token", "fs.s3a.session.token": "session_token",
    "region": "region", "aws_region": "region", "fs.s3a.endpoint.region": "region",
    "scheme": "scheme", "anonymous": "anonymous", "force_virtual_addressing": "force_virtual_addressing",
    "request_timeout": "request_timeout", "connect_timeout": "connect_timeout",
}
_BOOL = {"anonymous", "force_virtual_addressing"}
_FLOAT = {"request_timeout", "connect_timeout"}


def scheme(path: str) -> str | None:
    m = _SCHEME.match(str(path))
    return m.group(1).lower() if m else None


def is_remote(path) -> bool:
    """A URI that is not ``file://`` (plain paths, even with a colon, are local)."""
    s = scheme(str(path))
    return s is not None and s != "file"


def local_path(path) -> str:
    """``file:///x/y`` → ``/x/y``; a plain path as it is."""
    p = str(path)
    if scheme(p) == "file":
        return unquote(urlparse(p).path)
    return p


def _as_bool(v) -> bool:
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def filesystem(uri: str, options: dict | None = None):
    """(pyarrow FileSystem, path inside it) for ``uri``."""
    try:
        from pyarrow import fs as pafs
    except ImportError:
        raise UsageError(f"{uri}: reading object-store paths needs pyarrow: pip install 'kltool[spark]'") from None
    s = scheme(uri)
    options = {str(k).lower(): v for k, v in (options or {}).items() if v is not None}
    if s in ("s3", "s3a", "s3n"):
        u = urlparse(uri)
        path = (u.netloc + u.path).rstrip("/")
        kw = {}
        for k, v in options.items():
            name = _S3_NAMES.get(k)
            if name is None:
                raise UsageError(f"storage option {k!r} is not one for s3 (use endpoint_override, access_key, "
                                 "secret_key, session_token, region, scheme, anonymous, force_virtual_addressing)")
            kw[name] = _as_bool(v) if name in _BOOL else float(v) if name in _FLOAT else str(v)
        ep = kw.get("endpoint_override")
        if ep and "://" in ep:
            kw.setdefault("scheme", ep.split("://", 1)[0])
            kw["endpoint_override"] = ep.split("://", 1)[1].rstrip("/")
        if ep is None and os.environ.get("AWS_ENDPOINT_URL"):  # not read by every pyarrow version
            e = os.environ["AWS_ENDPOINT_URL"]
            kw.setdefault("scheme", e.split("://", 1)[0] if "://" in e else "https")
            kw["endpoint_override"] = e.split("://", 1)[-1].rstrip("/")
        if "region" not in kw and kw.get("endpoint_override"):
            kw["region"] = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        try:
            return pafs.S3FileSystem(**kw), path
        except Exception as e:  # noqa: BLE001 (pyarrow raises ArrowInvalid/OSError/TypeError)
            raise UsageError(f"{uri}: cannot set up S3 access: {e}") from None
    try:
        if options and s == "gs":
            u = urlparse(uri)
            return pafs.GcsFileSystem(**options), (u.netloc + u.path).rstrip("/")
        if options and s in ("abfs", "abfss"):
            u = urlparse(uri)
            return pafs.AzureFileSystem(**options), (u.netloc.split("@", 1)[0] + u.path).rstrip("/")
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path.rstrip("/")
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001
        raise UsageError(f"{uri}: cannot open this filesystem here ({str(e).splitlines()[0][:200]})") from None


def _join(uri: str, inner_root: str, inner: str) -> str:
    """The URI of ``inner`` (a path inside the filesystem of ``uri``, under ``inner_root``)."""
    base = uri.rstrip("/")
    rel = inner[len(inner_root):].lstrip("/") if inner.startswith(inner_root) else inner
    return f"{base}/{rel}" if rel else base


@dataclass
class RemoteSegment:
    base_offset: int
    log: str  # URI
    size: int
    index: str | None = None
    timeindex: str | None = None


@dataclass
class RemotePartition:
    topic: str
    partition: int
    kind: str  # normal | delete | future | stray
    directory: str  # URI
    segments: list[RemoteSegment] = field(default_factory=list)
    log_start_checkpoint: int | None = None

    def log_start_offset(self) -> int:
        first = self.segments[0].base_offset if self.segments else 0
        v = self.log_start_checkpoint
        return max(first, v) if v is not None else first


@dataclass
class RemoteSelection:
    partitions: list[RemotePartition]
    files: list[tuple[str, int]]  # lone .log files outside partition directories: (URI, size)
    found_any: bool


def _partition_of(dirname: str):
    from ..errors import CorruptDataError
    from ..format.topics import parse_partition_dir_name

    try:
        topic, part, kind, _u = parse_partition_dir_name(dirname)
        return topic, part, kind or "normal"
    except CorruptDataError:
        m = fn.REMOTE_PARTITION_DIR.match(dirname)
        if m:
            return m.group(1), int(m.group(2)), "normal"
        return None


def _merge_tiered(parts: list[RemotePartition]) -> list[RemotePartition]:
    """A tiered-storage partition directory (``topic-N-<topic id>``) listed beside the log dir's ``topic-N``:
    its copies become that partition's older segments (storage/tiered.py's rule), read once."""
    from .tiered import merge_segments

    plain = {(p.topic, p.partition): p for p in parts if p.kind == "normal"
             and not fn.REMOTE_PARTITION_DIR.match(p.directory.rsplit("/", 1)[-1])}
    out = []
    for p in parts:
        q = plain.get((p.topic, p.partition))
        if q is not None and q is not p and fn.REMOTE_PARTITION_DIR.match(p.directory.rsplit("/", 1)[-1]):
            q.segments = merge_segments(p.segments, q.segments)
        else:
            out.append(p)
    return out


def read_bytes(uri: str, options: dict | None = None, start: int = 0, length: int | None = None) -> bytes:
    fs, path = filesystem(uri, options)
    with fs.open_input_file(path) as f:
        if length is None:
            f.seek(start)
            return f.read()
        return f.read_at(length, start)


_RANGE = 4 << 20  # bytes of a remote index asked for at a time when its zero tail is looked for


class RemoteBytes(ByteSource):
    """The first ``size`` bytes of a remote file, read when sliced with ranged reads (a
    :class:`kltool.format.index.ByteSource`, as :class:`kltool.storage.fs.FileBytes` is of a local file)."""

    __slots__ = ("uri", "_fs", "_path")

    def __init__(self, uri: str, size: int, fs, path: str):
        self.uri, self.size, self._fs, self._path = uri, size, fs, path

    def __repr__(self) -> str:
        return f"RemoteBytes({self.uri!r}, {self.size})"

    def prefix(self, n: int) -> RemoteBytes:
        return RemoteBytes(self.uri, max(0, min(n, self.size)), self._fs, self._path)

    def _read(self, start: int, stop: int) -> bytes:
        with self._fs.open_input_file(self._path) as f:
            data = f.read_at(stop - start, start)
        if len(data) != stop - start:
            raise OSError(f"{self.uri}: the object shrank while it was read")
        return bytes(data)


def read_remote_index(uri: str, options: dict | None = None, *, whole_up_to: int | None = None):
    """A remote ``.index``/``.timeindex`` as :func:`kltool.storage.fs.read_index_file` reads a local one, with
    ranged reads: the zero tail is looked for from the end a range at a time and not held; up to
    ``whole_up_to`` bytes before it (default ``fs.INDEX_READ_WHOLE``) are read in one range, more are a
    :class:`RemoteBytes` that the index functions read a chunk at a time. Planning over remote segments
    thus reads and holds bounded bytes whatever an index holds."""
    from . import fs as lfs

    if whole_up_to is None:
        whole_up_to = lfs.INDEX_READ_WHOLE
    pfs, path = filesystem(uri, options)
    with pfs.open_input_file(path) as f:
        size = f.size()
        end = size
        first = None  # the bytes from 0 when the tail range read reached the start (not asked for twice)
        while end > 0:
            n = min(_RANGE, end)
            got = bytes(f.read_at(n, end - n)).rstrip(b"\0")
            if got:
                if n == end:
                    first = got
                end = end - n + len(got)
                break
            end -= n
        if end > whole_up_to:
            head = RemoteBytes(uri, end, pfs, path)
        else:
            head = first if first is not None else bytes(f.read_at(end, 0))
    return head if end == size else ZeroPadded(head, size - end)


def list_remote(uris, options: dict | None = None) -> RemoteSelection:
    """What the URIs hold, by name (see the module docstring; the files are sorted by
    :mod:`kltool.storage.discovery`, as local partitions are). Raises UsageError for a URI that
    does not exist."""
    parts: dict[str, RemotePartition] = {}
    files: list[tuple[str, int]] = []
    checkpoints: dict[str, str] = {}  # log dir URI -> its log-start-offset-checkpoint URI
    found_any = False
    for uri in uris:
        uri = str(uri).rstrip("/")
        uri_dir, root_dir, by_dir = _list_tree(uri, options)
        found_any = found_any or bool(by_dir)
        for d, entries in sorted(by_dir.items()):
            d_uri = _join(uri_dir, root_dir, d)
            p = _partition_in(d_uri, d, entries, checkpoints, files, lambda e, u=uri_dir, r=root_dir: _join(u, r, e.path))
            if p is not None:
                parts[d_uri] = p
    _log_start_offsets(parts.values(), checkpoints, options)
    ordered = _merge_tiered(sorted(parts.values(), key=lambda p: (p.topic, p.partition, p.directory)))
    return RemoteSelection(ordered, files, found_any)


def _list_tree(uri: str, options):
    """(URI of the listed directory, its path inside the filesystem, {directory: file entries})."""
    from pyarrow import fs as pafs

    from .discovery import entry_of, walk_tree

    fs, root = filesystem(uri, options)
    try:
        info = fs.get_file_info(root)
        if info.type == pafs.FileType.NotFound:
            raise UsageError(f"{uri}: no such file or directory")
        if info.type == pafs.FileType.File:
            d = root.rsplit("/", 1)[0]
            return uri.rsplit("/", 1)[0], root.rsplit("/", 1)[0], {d: [entry_of(info)]}
        return uri, root, walk_tree(fs, root)
    except UsageError:
        raise
    except OSError as e:
        raise UsageError(f"{uri}: cannot list: {str(e).splitlines()[0][:200]}") from None


def _partition_in(d_uri: str, d: str, entries, checkpoints: dict, files: list, uri_of) -> RemotePartition | None:
    """The partition directory ``d`` (its files ``entries``) as a RemotePartition; None for another
    directory, whose ``.log`` files are added to ``files`` as lone segments."""
    from .discovery import classify_dir

    found = classify_dir(entries)
    for e in found.known + found.other:
        if e.name == fn.LOG_START_OFFSET_CHECKPOINT:
            checkpoints[d_uri] = uri_of(e)
    tp = _partition_of(d.rsplit("/", 1)[-1])
    logs = found.segment_logs()
    if tp is None:
        lone = [e for e in (*logs.values(), *found.duplicate_logs, *found.other) if e.name.endswith(".log")]
        files.extend((uri_of(e), e.size) for e in sorted(lone, key=lambda e: e.path))
        return None
    segs = []
    for off, e in logs.items():
        ix, tx = found.index(off, "index"), found.index(off, "timeindex")
        segs.append(RemoteSegment(off, uri_of(e), e.size, ix and uri_of(ix), tx and uri_of(tx)))
    return RemotePartition(tp[0], tp[1], tp[2], d_uri, segs)


def _log_start_offsets(parts, checkpoints: dict, options) -> None:
    """Each partition's log start offset, from its log dir's checkpoint (the directory's parent)."""
    from ..format.checkpoints import parse_offset_checkpoint

    cache: dict[str, dict] = {}
    for p in parts:
        cp = checkpoints.get(p.directory.rsplit("/", 1)[0])
        if cp is None:
            continue
        if cp not in cache:
            try:
                cache[cp] = parse_offset_checkpoint(read_bytes(cp, options).decode("utf-8", "replace"))
            except Exception as e:  # noqa: BLE001 (a damaged checkpoint: named, exit 2)
                raise KltoolError(f"{cp}: {e}") from None
        p.log_start_checkpoint = cache[cp].get((p.topic, p.partition))


def select_remote(uris, topic: str | None, partitions: set[int] | None, options: dict | None = None,
                  *, all_states: bool = False, strict: bool = True) -> RemoteSelection:
    """:func:`list_remote` filtered by a topic glob and partition numbers; with ``strict``, a filter or
    URI that selects nothing is a UsageError naming it (as for local paths)."""
    sel = list_remote(uris, options)
    where = ", ".join(str(u) for u in uris)
    keep = [p for p in sel.partitions
            if (all_states or p.kind == "normal")
            and (topic is None or fnmatch.fnmatchcase(p.topic, topic))
            and (partitions is None or p.partition in partitions)]
    files = sel.files if topic is None and partitions is None else []
    if strict and not keep and not files:
        if not sel.partitions and not sel.files:
            raise UsageError(f"{where}: no Kafka log dir, partition directory or .log segment to read")
        topics = sorted({p.topic for p in sel.partitions})
        given = " ".join(x for x in ((f"--topic {topic!r}" if topic else ""),
                                     (f"--partition {','.join(map(str, sorted(partitions)))}" if partitions else "")) if x)
        raise UsageError(f"{given} selects nothing in {where} (topics there: {', '.join(topics[:10])})")
    return RemoteSelection(keep, files, sel.found_any)
