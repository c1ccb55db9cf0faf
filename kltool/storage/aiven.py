"""Segments tiered by Aiven's tiered-storage-for-apache-kafka plugin, reassembled into the broker's bytes.

Objects: ``<prefix><topic>-<topic id>/<partition>/<20-digit start offset>-<segment id>.{log,indexes,
rsm-manifest}``. The ``.log`` object is the segment cut into chunks of the plugin's ``chunk.size``, each
optionally zstd-compressed (a frame with its content size), then optionally AES-256-GCM encrypted (12-byte
IV in front, 128-bit tag at the end, the manifest's ``aad``). The JSON ``.rsm-manifest`` gives the chunk
index: ``fixed`` (``originalChunkSize``, ``originalFileSize``, ``transformedChunkSize``,
``finalTransformedChunkSize``) or ``variable`` (``transformedChunks``: base64 of a zstd frame of the size
table: int32 count, then for count > 1 an int32 base, one byte of bytes-per-value, count-1 big-endian values
above the base, and the last size as an int32), ``segmentIndexes`` (position and size of each index inside
``.indexes``, each one chunk, encrypted but never compressed), ``compression``, and ``encryption``
(``dataKey`` = ``<key pair id>:<base64 of the AES key wrapped with RSA-OAEP, SHA3-512 and MGF1>``, ``aad``
base64). Reference: the plugin's ``manifest/`` and ``transform/`` packages.

A segment is read chunk by chunk (:meth:`AivenSegment.chunks`) with one ranged read each, from a local file
or a pyarrow filesystem, so memory stays within one chunk. Decryption needs the RSA private key of the key
pair the data key names (``cryptography`` from PyPI: the ``tiered`` extra).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import CorruptDataError, UsageError
from ..format import names as fn

IV_SIZE = 12
TAG_SIZE = 16
# the manifest's segmentIndexes written beside the .log (the per-segment leader epoch checkpoint,
# ``leaderEpoch``, is not: a partition has one, which a reassembled segment must not replace)
INDEX_NAMES = {"offset": "index", "timestamp": "timeindex", "transaction": "txnindex", "producerSnapshot": "snapshot"}


@dataclass(frozen=True)
class Chunk:
    original_position: int
    original_size: int
    position: int  # in the .log object
    size: int  # transformed size


JAVA_INT_MAX = 2**31 - 1  # the plugin's sizes and positions in a segment are Java ints
_TABLE_LIMIT = 10 << 20  # the decompressed chunk size table (a 2 GiB segment in 4 MiB chunks: 2.5 KiB)


def _field(obj, key: str, what: str, hi: int = JAVA_INT_MAX) -> int:
    """``obj[key]`` as a JSON integer in 0..hi (no bool, float or string): a hostile manifest's numbers
    never reach a seek, a read or a list's length unchecked."""
    if not isinstance(obj, dict):
        raise CorruptDataError(f"{what}: a JSON object expected, not {type(obj).__name__}")
    v = obj.get(key)
    if type(v) is not int:
        raise CorruptDataError(f"{what}.{key}: an integer expected, not {json.dumps(v)[:40]}")
    if not 0 <= v <= hi:
        raise CorruptDataError(f"{what}.{key}: {v} is out of range (0..{hi})")
    return v


def _b64(text: str, what: str) -> bytes:
    """Base64 as Java's Base64.getDecoder() reads it (the padding may be left off); anything else is damage."""
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError:
        raise CorruptDataError(f"{what}: not base64") from None


def decode_chunk_sizes(raw: bytes) -> list[int]:
    """The plugin's ChunkSizesBinaryCodec (after its zstd frame is removed)."""
    try:
        (count,) = struct.unpack_from(">i", raw, 0)
        if count < 0:
            raise CorruptDataError(f"chunk size table: negative count {count}")
        if count == 0:
            return []
        if count == 1:
            return [struct.unpack_from(">i", raw, 4)[0]]
        base, width = struct.unpack_from(">ib", raw, 4)
        if not 1 <= width <= 4:
            raise CorruptDataError(f"chunk size table: {width} bytes per value")
        pos = 9
        if pos + (count - 1) * width + 4 != len(raw):  # (before a list of ``count`` values is built)
            raise CorruptDataError(f"chunk size table: {count} values of {width} bytes in {len(raw)} bytes")
        out = []
        for _ in range(count - 1):
            out.append(int.from_bytes(raw[pos:pos + width], "big", signed=width == 4) + base)
            pos += width
        out.append(struct.unpack_from(">i", raw, pos)[0])
        return out
    except struct.error:
        raise CorruptDataError("chunk size table: runs past the end of its data") from None


class ChunkTable(Sequence):
    """The chunks of a chunk index, computed on demand: a ``fixed`` index of 2^31 one-byte chunks costs no
    memory, a ``variable`` one two arrays of 8-byte integers."""

    def __init__(self, osize: int, fsize: int, sizes=None, fixed: tuple[int, int] = (0, 0)):
        self.osize, self.fsize, self._fixed = osize, fsize, fixed
        self._count = -(-fsize // osize)
        self._sizes = self._starts = None
        if sizes is not None:
            from array import array
            from itertools import accumulate

            self._sizes = array("q", sizes)
            self._starts = array("q", accumulate(self._sizes, initial=0))

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(i)
        o = min(self.osize, self.fsize - i * self.osize)
        if self._sizes is not None:
            return Chunk(i * self.osize, o, self._starts[i], self._sizes[i])
        size, final = self._fixed
        return Chunk(i * self.osize, o, i * size, final if i == self._count - 1 else size)


def _chunks(index: dict) -> ChunkTable:
    what = "chunk index"
    osize, fsize = _field(index, "originalChunkSize", what), _field(index, "originalFileSize", what)
    if osize == 0:
        raise CorruptDataError(f"chunk index: original chunk size 0, file size {fsize}")
    count = -(-fsize // osize)
    kind = index.get("type")
    if kind == "fixed":
        return ChunkTable(osize, fsize, fixed=(_field(index, "transformedChunkSize", what),
                                               _field(index, "finalTransformedChunkSize", what)))
    if kind != "variable":
        raise CorruptDataError(f"chunk index: unknown type {kind!r}")
    from ..format.compression import _zstd

    packed = index.get("transformedChunks")
    if not isinstance(packed, str):
        raise CorruptDataError(f"chunk index.transformedChunks: a base64 string expected, not {type(packed).__name__}")
    try:
        raw = _zstd().ZstdDecompressor().decompress(_b64(packed, "chunk index.transformedChunks"),
                                                    max_output_size=_TABLE_LIMIT)
    except CorruptDataError:
        raise
    except Exception as e:  # noqa: BLE001 (binascii.Error, zstandard.ZstdError: a damaged table)
        raise CorruptDataError(f"chunk index.transformedChunks: {e}") from None
    sizes = decode_chunk_sizes(raw)
    if len(sizes) != count:
        raise CorruptDataError(f"chunk index: {len(sizes)} chunk sizes for {count} chunks")
    if any(not 0 <= v <= JAVA_INT_MAX for v in sizes):
        raise CorruptDataError("chunk index: a negative chunk size in the table")
    return ChunkTable(osize, fsize, sizes)


def _need_cryptography() -> None:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise UsageError("an encrypted tiered segment needs the cryptography package: "
                         "pip install 'kltool[tiered]'") from None


def _rsa_unwrap(data_key: str, private_keys: dict[str, bytes] | list[bytes]) -> bytes:
    """The AES data key: ``<key pair id>:<base64>`` unwrapped with that key pair's private key (PEM)."""
    kid, sep, wrapped = data_key.partition(":")
    if not sep:
        raise CorruptDataError("encryption.dataKey: no ':' between key pair id and key")
    candidates = private_keys.get(kid) if isinstance(private_keys, dict) else None
    pems = [candidates] if candidates else list(private_keys.values() if isinstance(private_keys, dict)
                                                else private_keys)
    if not pems:
        raise UsageError(f"the segment is encrypted with key pair {kid!r}: give its private key (--private-key)")
    _need_cryptography()
    from cryptography.hazmat.primitives import serialization

    blob = _b64(wrapped, "encryption.dataKey")
    for pem in pems:
        try:
            key = serialization.load_pem_private_key(pem, password=None)
            n, d = key.public_key().public_numbers().n, key.private_numbers().d
        except (ValueError, TypeError, AttributeError):
            raise UsageError("--private-key: not an unencrypted PEM RSA private key") from None
        k = (n.bit_length() + 7) // 8
        em = pow(int.from_bytes(blob, "big"), d, n).to_bytes(k, "big") if len(blob) == k else b""
        for mgf in (hashlib.sha3_512, hashlib.sha1):  # BouncyCastle: MGF1 with the OAEP digest
            key_bytes = oaep_decode(em, k, hashlib.sha3_512, mgf)
            if key_bytes is not None:
                return key_bytes
    raise UsageError(f"no private key given unwraps the data key of key pair {kid!r}")


def _mgf1(seed: bytes, length: int, h) -> bytes:
    out = b""
    for counter in range(-(-length // h().digest_size)):
        out += h(seed + counter.to_bytes(4, "big")).digest()
    return out[:length]


def oaep_decode(em: bytes, k: int, h, mgf_hash) -> bytes | None:
    """RFC 8017 EME-OAEP decoding (empty label) of the RSA result ``em`` (``k`` bytes); None when it is not
    one. The plugin's RSA/NONE/OAEPWithSHA3-512AndMGF1Padding (BouncyCastle) has no OpenSSL counterpart
    in ``cryptography``, hence this, over the key's own numbers."""
    hlen = h().digest_size
    if len(em) != k or k < 2 * hlen + 2 or em[0] != 0:
        return None
    masked_seed, masked_db = em[1:1 + hlen], em[1 + hlen:]
    seed = bytes(a ^ b for a, b in zip(masked_seed, _mgf1(masked_db, hlen, mgf_hash), strict=True))
    db = bytes(a ^ b for a, b in zip(masked_db, _mgf1(seed, k - hlen - 1, mgf_hash), strict=True))
    if db[:hlen] != h(b"").digest():
        return None
    rest = db[hlen:]
    i = rest.find(b"\x01")
    if i < 0 or any(rest[:i]):
        return None
    return rest[i + 1:]


class AivenSegment:
    """One tiered segment: its manifest, and a ranged reader of its ``.log`` and ``.indexes`` objects.

    ``read_range(suffix, position, size)`` returns ``size`` bytes of the object ``<stem>.<suffix>`` at
    ``position`` (see :func:`local_reader` and :func:`pyarrow_reader`)."""

    def __init__(self, manifest: bytes, read_range, private_keys=None, name: str = "rsm-manifest"):
        self.name = name
        try:
            m = json.loads(manifest)
        except (ValueError, RecursionError) as e:  # (RecursionError: arrays nested thousands deep)
            raise CorruptDataError(f"not JSON: {str(e)[:200]}") from None
        if not isinstance(m, dict) or "chunkIndex" not in m or "segmentIndexes" not in m:
            raise CorruptDataError("not a segment manifest (no chunkIndex/segmentIndexes)")
        if not isinstance(m["segmentIndexes"], dict):
            raise CorruptDataError("segmentIndexes: a JSON object expected")
        self.manifest = m
        self.read_range = read_range
        comp = m.get("compression", False)
        if not isinstance(comp, bool):
            raise CorruptDataError(f"compression: true or false expected, not {json.dumps(comp)[:40]}")
        self.compression = comp
        self.chunks = _chunks(m["chunkIndex"])
        self.size = self.chunks.fsize
        enc = m.get("encryption")
        self._aes = None
        if enc:
            if not (isinstance(enc, dict) and isinstance(enc.get("dataKey"), str) and isinstance(enc.get("aad"), str)):
                raise CorruptDataError("encryption: an object with the strings dataKey and aad expected")
            aad = _b64(enc["aad"], "encryption.aad")
            _need_cryptography()
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aes = AESGCM(_rsa_unwrap(enc["dataKey"], private_keys or {}))
            self._aad = aad

    @property
    def encrypted(self) -> bool:
        return "encryption" in self.manifest and bool(self.manifest["encryption"])

    def _detransform(self, data: bytes, compressed: bool, what: str) -> bytes:
        if self._aes is not None:
            from cryptography.exceptions import InvalidTag

            try:
                data = self._aes.decrypt(data[:IV_SIZE], data[IV_SIZE:], self._aad)
            except InvalidTag:
                raise CorruptDataError(f"{what}: AES-GCM tag does not match (wrong key or damaged bytes)") from None
        if compressed:
            from ..format.compression import _zstd

            try:
                data = _zstd().ZstdDecompressor().decompress(data)
            except Exception as e:  # noqa: BLE001 (zstandard.ZstdError: damaged chunk)
                raise CorruptDataError(f"{what}: zstd: {e}") from None
        return data

    def chunk(self, i: int) -> bytes:
        """Chunk ``i`` in the broker's bytes. A damaged chunk raises CorruptDataError naming the ``.log``
        object and the chunk's byte position in it."""
        c = self.chunks[i]
        log = self.name[: -len(".rsm-manifest")] + ".log" if self.name.endswith(".rsm-manifest") else None
        try:
            raw = self.read_range("log", c.position, c.size)
            if len(raw) != c.size:
                raise CorruptDataError(f"chunk {i} at byte {c.position}: {len(raw)} of {c.size} bytes")
            data = self._detransform(raw, self.compression, f"chunk {i} at byte {c.position}")
            if len(data) != c.original_size:
                raise CorruptDataError(f"chunk {i} at byte {c.position}: {len(data)} bytes, the manifest says "
                                       f"{c.original_size}")
        except CorruptDataError as e:
            raise e.at(path=log, position=c.position) from None
        return data

    def chunks_bytes(self):
        """The segment's bytes, one chunk at a time (one ranged read each)."""
        for i in range(len(self.chunks)):
            yield self.chunk(i)

    def index(self, name: str) -> bytes | None:
        """An index (``offset``, ``timestamp``, ``producerSnapshot``, ``leaderEpoch``, ``transaction``) in the
        broker's bytes; None when the segment has none."""
        ix = self.manifest["segmentIndexes"].get(name)
        if not ix:
            return None
        what = f"segmentIndexes.{name}"
        try:
            size = _field(ix, "size", what)
            position = _field(ix, "position", what, hi=2**63 - 1 - size)
        except CorruptDataError as e:
            raise e.at(path=self.name) from None
        if not size:
            return b""
        indexes = self.name[: -len(".rsm-manifest")] + ".indexes" if self.name.endswith(".rsm-manifest") else None
        try:
            raw = self.read_range("indexes", position, size)
            if len(raw) != size:
                raise CorruptDataError(f"{name} index at byte {position}: {len(raw)} of {size} bytes")
            return self._detransform(raw, False, f"{name} index at byte {position}")
        except CorruptDataError as e:
            raise e.at(path=indexes, position=position) from None


def local_reader(stem: str):
    """A ``read_range`` over local files ``<stem>.log`` / ``<stem>.indexes``."""

    def read(suffix: str, position: int, size: int) -> bytes:
        from .scan import open_segment_file  # (a regular file only: a FIFO would block)

        with os.fdopen(open_segment_file(f"{stem}.{suffix}"), "rb") as f:
            # (never more than the object holds: a manifest's size is not a buffer to allocate)
            size = max(0, min(size, os.fstat(f.fileno()).st_size - position))
            if not size:
                return b""
            f.seek(position)
            return f.read(size)

    return read


def pyarrow_reader(fs, stem: str):
    """A ``read_range`` over a pyarrow filesystem (S3 ...): one ranged GET per call."""
    files: dict[str, object] = {}

    def read(suffix: str, position: int, size: int) -> bytes:
        f = files.get(suffix)
        if f is None:
            f = files[suffix] = fs.open_input_file(f"{stem}.{suffix}")
        n = max(0, min(size, f.size() - position))
        return f.read_at(n, position) if n else b""

    return read


def stem_of(path: str) -> str:
    """``…/<offset>-<id>`` of any of a segment's three objects."""
    for suffix in (".rsm-manifest", ".indexes", ".log"):
        if path.endswith(suffix):
            return path[: -len(suffix)]
    raise UsageError(f"{path}: not an Aiven tiered-storage object (.log, .indexes or .rsm-manifest)")


@dataclass(frozen=True)
class SegmentRef:
    """Where one tiered segment's objects are: ``stem`` (``…/<offset>-<id>``, inside ``fs`` or local)."""

    topic: str
    topic_id: str
    partition: int
    base_offset: int
    segment_id: str
    stem: str
    fs: object = None

    def read_range(self):
        return local_reader(self.stem) if self.fs is None else pyarrow_reader(self.fs, self.stem)

    def manifest_bytes(self) -> bytes:
        if self.fs is None:
            from .fs import read_small_file

            return read_small_file(f"{self.stem}.rsm-manifest")
        with self.fs.open_input_file(f"{self.stem}.rsm-manifest") as f:
            return f.read()

    def open(self, private_keys=None) -> AivenSegment:
        try:
            return AivenSegment(self.manifest_bytes(), self.read_range(), private_keys, f"{self.stem}.rsm-manifest")
        except CorruptDataError as e:
            raise e.at(path=f"{self.stem}.rsm-manifest") from None


_TOPIC_DIR = re.compile(r"^(.+)-([A-Za-z0-9_\-]{22})$")


def ref_of(path: str, fs=None) -> SegmentRef | None:
    """The segment whose ``.rsm-manifest`` is at ``path`` (``<topic>-<id>/<partition>/<offset>-<id>``);
    None for another name."""
    parts = path.replace("\\", "/").split("/")
    m = fn.AIVEN_OBJECT.match(parts[-1])
    if m is None or m.group(3) != "rsm-manifest" or len(parts) < 3 or not parts[-2].isdigit():
        return None
    t = _TOPIC_DIR.match(parts[-3])
    if t is None:
        return None
    return SegmentRef(t.group(1), t.group(2), int(parts[-2]), int(m.group(1)), m.group(2), stem_of(path), fs)


def find_segments(source: str, options: dict | None = None) -> list[SegmentRef]:
    """Every tiered segment (one per ``.rsm-manifest``) under ``source``: a local directory or an
    object-store URI (listed once, recursively)."""
    import os

    from .uri import filesystem, is_remote, local_path

    refs: list[SegmentRef] = []
    if is_remote(source):
        from pyarrow import fs as pafs

        fs, root = filesystem(source, options)
        try:
            infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
        except OSError as e:
            raise UsageError(f"{source}: cannot list: {str(e).splitlines()[0][:200]}") from None
        refs = [r for r in (ref_of(fi.path, fs) for fi in infos if fi.type == pafs.FileType.File) if r]
    else:
        root = local_path(source)
        if not os.path.isdir(root):
            raise UsageError(f"{source}: not a directory")
        for d, _dirs, files in os.walk(root):
            refs.extend(r for r in (ref_of(os.path.join(d, f)) for f in files) if r)
    return sorted(refs, key=lambda r: (r.topic, r.partition, r.base_offset, r.segment_id))


def write_segment(seg: AivenSegment, ref: SegmentRef, out_dir) -> list:
    """Reassemble ``ref``'s segment into ``out_dir/<topic>-<partition>/<offset>.{log,index,timeindex,
    txnindex,snapshot}`` (each file staged, fsynced and renamed; an existing file is refused, never
    overwritten). Memory holds one chunk at a time. Returns the paths written."""
    from pathlib import Path

    from .fs import _write_all, atomic_write, staged

    pdir = Path(out_dir) / f"{ref.topic}-{ref.partition}"
    pdir.mkdir(parents=True, exist_ok=True)
    targets = {"log": pdir / fn.segment_file(ref.base_offset, "log")}
    for name, kind in INDEX_NAMES.items():
        targets[name] = pdir / fn.segment_file(ref.base_offset, kind)
    for p in targets.values():
        if p.exists():
            raise UsageError(f"{p}: already exists (kltool never overwrites a segment file here)")
    written = []
    with staged(targets["log"]) as (fd, _tmp):
        for data in seg.chunks_bytes():
            _write_all(fd, data)
    written.append(targets["log"])
    for name, p in targets.items():
        if name == "log":
            continue
        data = seg.index(name)
        if data is not None and (data or name in ("offset", "timestamp")):
            atomic_write(p, data)
            written.append(p)
    return written


def holds_segments(root, max_depth: int = 4) -> bool:
    """Whether the local directory ``root`` holds a segment of the plugin (an ``.rsm-manifest`` named as it
    names them) within ``max_depth`` levels: for the hint of commands given such a copy as a PATH."""
    import os

    base = str(root).rstrip(os.sep).count(os.sep)
    for d, dirs, files in os.walk(root):
        if any(ref_of(os.path.join(d, f)) for f in files if f.endswith(".rsm-manifest")):
            return True
        if d.count(os.sep) - base >= max_depth:
            dirs[:] = []
    return False
