"""Compression codecs exactly as Kafka writes and reads them (Kafka's ``CompressionType``,
``KafkaLZ4BlockInputStream``, ``SnappyFactory``).

* gzip: one RFC 1952 member on write, its header as Java 16+'s GZIPOutputStream writes it (OS byte 255,
  "unknown": tests/broker/test_broker_compact.py found it in the batches Kafka 4.4's cleaner rewrites);
  concatenated members accepted on read.
* snappy: xerial framing (``\\x82SNAPPY\\0`` + versions + length-prefixed raw blocks) on write;
  on read, data without the xerial magic is decoded as one raw snappy buffer, like SnappyInputStream.
* lz4: Kafka's LZ4 frame (independent 64 KiB blocks, no checksums). Magic-0 data carries a wrong
  header checksum (KAFKA-3160): it is ignored on read and reproduced on write.
* zstd: one frame; frames without a content size are decoded by streaming.
"""

from __future__ import annotations

import struct
import zlib

from ..errors import CorruptDataError, KltoolError, MissingDependency

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {v: k for k, v in CODEC_NAMES.items()}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024
LZ4_MAGIC = b"\x04\x22\x4d\x18"

_zstd_c: dict = {}  # level -> zstandard.ZstdCompressor
_zstd_d: list = []  # the one zstandard.ZstdDecompressor, made on first use


# The codec libraries are imported on first use: most commands never meet a compressed batch, and
# importing cramjam, lz4 and zstandard costs several milliseconds of every kltool process's start.
# A missing library is an error naming the codec, the package and this Python, never corrupt data.
def _snappy():
    try:
        import cramjam
    except ImportError:
        raise _missing("snappy", "cramjam") from None
    return cramjam.snappy


def _lz4():
    try:
        import lz4.frame
    except ImportError:
        raise _missing("lz4", "lz4") from None
    return lz4.frame


def _zstd():
    try:
        import zstandard
    except ImportError:
        raise _missing("zstd", "zstandard") from None
    return zstandard


def fast_inflate():
    """The module whose ``decompressobj`` inflates gzip fastest here: ISA-L's (the optional ``isal``
    package, ``isal.isal_zlib``: zlib's API, 2-3x its inflate speed) when installed, else ``zlib``.
    ``KLTOOL_NO_ISAL=1`` asks for zlib. Only for the usual, well-formed payload (one whole member): the
    reference path (:func:`decompress`) stays on zlib, whose checks and messages are the project's."""
    import os

    if not os.environ.get("KLTOOL_NO_ISAL"):
        try:
            from isal import isal_zlib
        except ImportError:
            pass
        else:
            return isal_zlib
    return zlib


def _missing(codec: str, package: str) -> MissingDependency:
    import sys

    return MissingDependency(f"{codec}-compressed data needs the {package} package, which the Python at "
                             f"{sys.executable} does not have: pip install {package}")


def codec_name(codec_id: int) -> str:
    try:
        return CODEC_NAMES[codec_id]
    except KeyError:
        raise CorruptDataError(f"Unknown compression type id: {codec_id}") from None


def codec_id(name: str) -> int:
    try:
        return CODEC_IDS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown compression {name!r} (none, gzip, snappy, lz4, zstd)") from None


# ---------------------------------------------------------------------------------------------
# xxHash32, only for the 2..14 byte LZ4 frame descriptor (the lz4 package does not expose it).
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def xxh32(data: bytes, seed: int = 0) -> int:
    n = len(data)
    p = 0
    if n >= 16:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M
        while p + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, p)
            v1 = (_rotl((v1 + a * _P2) & _M, 13) * _P1) & _M
            v2 = (_rotl((v2 + b * _P2) & _M, 13) * _P1) & _M
            v3 = (_rotl((v3 + c * _P2) & _M, 13) * _P1) & _M
            v4 = (_rotl((v4 + d * _P2) & _M, 13) * _P1) & _M
            p += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while p + 4 <= n:
        (k,) = struct.unpack_from("<I", data, p)
        h = (_rotl((h + k * _P3) & _M, 17) * _P4) & _M
        p += 4
    while p < n:
        h = (_rotl((h + data[p] * _P5) & _M, 11) * _P1) & _M
        p += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h


def _lz4_descriptor_end(data) -> int:
    flg = data[4]
    end = 7  # magic(4) FLG BD HC
    if flg & 0x08:
        end += 8  # content size
    if flg & 0x01:
        end += 4  # dictionary id
    return end


def _fix_lz4_header_checksum(data: bytes) -> bytes:
    """Rewrite the HC byte of a frame written with Kafka's magic-0 (broken) checksum."""
    if len(data) < 7 or data[:4] != LZ4_MAGIC:
        return data
    end = _lz4_descriptor_end(data)
    if len(data) < end:
        return data
    hc = (xxh32(bytes(data[4:end - 1])) >> 8) & 0xFF
    if data[end - 1] == hc:
        return data
    fixed = bytearray(data)
    fixed[end - 1] = hc
    return bytes(fixed)


# ---------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------- bounded output
# A batch whose CRC is valid can still decompress to gigabytes (a "decompression bomb", or a huge but real
# batch): decompression is streamed, compressed input in steps of at most _IN bytes and output in steps of at
# most _STEP bytes. What is held is bounded by the caller: decode_v2_records (a whole batch's columns) stops
# with TooLarge past its limit; batch.record_groups reads any batch a record at a time and only refuses ONE
# record larger than MAX_DECOMPRESSED (--max-record-bytes).

MAX_DECOMPRESSED = 256 << 20  # --max-record-bytes: the largest record (or held v0/v1 wrapper) read
UNLIMITED = 1 << 62  # an Inflater limit for streamed reads (the caller bounds what it holds)
_STEP = 1 << 20
_IN = 1 << 20


class TooLarge(CorruptDataError):
    """A record (or a payload that would be held whole) is larger than the limit: reported, never held.
    ``size`` is the declared or reached size when known, ``offset`` the record's offset when known."""

    def __init__(self, message: str, *, path=None, position: int | None = None, size: int | None = None,
                 offset: int | None = None):
        super().__init__(message, path=path, position=position)
        self.size = size
        self.offset = offset


def set_limit(limit: int) -> None:
    """Set the process-wide limit on one record (``--max-record-bytes``)."""
    global MAX_DECOMPRESSED
    MAX_DECOMPRESSED = int(limit)


def snappy_block_length(data, pos: int = 0) -> int | None:
    """The uncompressed length a raw snappy block at ``data[pos]`` starts with (an unsigned varint of at most 5
    bytes), or None when it does not end there. (The one reader of it: the xerial decoders here and in
    kltool/spark/arrow_rows.py.)"""
    n = shift = 0
    for i in range(pos, min(pos + 5, len(data))):
        b = data[i]
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n
        shift += 7
    return None


class BytesSource:
    """``read(n)`` over a bytes-like object, without copying (memoryview slices)."""

    __slots__ = ("view", "pos")

    def __init__(self, data):
        self.view = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" \
            else data
        self.pos = 0

    def read(self, n: int = -1):
        p = self.pos
        q = len(self.view) if n is None or n < 0 else min(len(self.view), p + n)
        self.pos = q
        return self.view[p:q]


def as_source(data):
    """``data`` itself when it has ``read(n)`` (e.g. a file span the storage layer opened), else a
    :class:`BytesSource` over it."""
    return data if hasattr(data, "read") else BytesSource(data)


def _read_exact(src, n: int):
    """Up to ``n`` bytes of ``src`` (fewer only at its end)."""
    first = src.read(n)
    if len(first) >= n or not first:
        return first
    parts = [bytes(first)]
    got = len(first)
    while got < n:
        more = src.read(n - got)
        if not more:
            break
        parts.append(bytes(more))
        got += len(more)
    return b"".join(parts)


def _gzip_chunks(src, step):
    tail = src.read(_IN)
    while len(tail):
        if len(tail) >= 4 and tail[3] & 0xE0 and bytes(tail[:3]) == b"\x1f\x8b\x08":
            # reserved FLG bits: GZIPInputStream ignores them, zlib refuses the member (found by hunt4)
            tail = bytes(tail[:3]) + bytes([tail[3] & 0x1F]) + bytes(tail[4:])
        d = zlib.decompressobj(wbits=31)
        while True:
            out = d.decompress(tail, step)
            if out:
                yield out
            if d.eof:
                tail = d.unused_data
                break
            tail = d.unconsumed_tail
            if not tail:
                tail = src.read(_IN)
                if not len(tail) and not out:
                    raise CorruptDataError("gzip stream ends before its end marker")
        if len(tail) < 2:
            tail = bytes(tail) + bytes(_read_exact(src, 2 - len(tail)))
        # Trailing zero padding after the last member is tolerated, like GZIPInputStream.
        if not tail or not bytes(tail[:2]) == b"\x1f\x8b":
            return


_SNAPPY_MAX_RATIO = 22  # the most a raw snappy block expands: a 3-byte copy element gives 64 bytes


def _snappy_chunks(src, step, limit):
    def block(raw, where):
        n = snappy_block_length(raw)
        if n is not None and n > _SNAPPY_MAX_RATIO * len(raw) + 32:
            # (a snappy element of 3 bytes copies at most 64: no block expands more; garbage, not a large record)
            raise CorruptDataError(f"snappy block of {len(raw)} bytes claims to decompress to {n} bytes, more than "
                                   f"snappy can encode in it: corrupt", position=where)
        if n is not None and n > limit:
            raise TooLarge(f"snappy block decompresses to {n} bytes, more than --max-record-bytes ({limit})",
                           position=where, size=n)
        return bytes(_snappy().decompress_raw(raw))

    head = _read_exact(src, 16)
    if len(head) < 16 or not bytes(head[:8]) == XERIAL_MAGIC:
        # one raw snappy buffer (what SnappyInputStream reads without the xerial magic): read whole, within the limit
        rest = _read_exact(src, limit + 16)
        if len(rest) > limit:
            raise TooLarge(f"raw snappy data of more than {limit} bytes (--max-record-bytes)", position=0)
        yield block(bytes(head) + bytes(rest), 0)
        return
    p = 16
    while True:
        lb = _read_exact(src, 4)
        if not lb:
            return
        if len(lb) < 4:
            raise CorruptDataError("snappy (xerial) block length runs past the end of the data", position=p)
        (blen,) = struct.unpack(">i", lb)
        if blen == 0x82534E41 - (1 << 32):
            more = _read_exact(src, 12)
            if bytes(lb) + bytes(more[:4]) == XERIAL_MAGIC and len(more) == 12:
                p += 16  # concatenated stream: another header follows
                continue
            raise CorruptDataError(f"snappy (xerial) block of {blen} bytes runs past the end of the data", position=p)
        p += 4
        if blen < 0 or blen > limit + 64:
            raise CorruptDataError(f"snappy (xerial) block of {blen} bytes runs past the end of the data",
                                   position=p - 4)
        raw = _read_exact(src, blen)
        if len(raw) < blen:
            raise CorruptDataError(f"snappy (xerial) block of {blen} bytes runs past the end of the data",
                                   position=p - 4)
        yield block(raw, p)
        p += blen


def _lz4_chunks(src, magic, step):
    data = src.read(_IN)
    if magic == 0:
        if len(data) < 15:
            data = bytes(data) + bytes(_read_exact(src, 15 - len(data)))
        data = _fix_lz4_header_checksum(bytes(data))
    d = _lz4().LZ4FrameDecompressor()
    while True:
        out = d.decompress(data, max_length=step)
        data = b""
        if out:
            yield out
        if d.eof:
            return
        if d.needs_input:
            data = src.read(_IN)
            if not len(data) and not out:
                raise CorruptDataError("lz4 frame ends before its end")


_ZSTD_MAGIC = 0xFD2FB528


class ZstdFrames:
    """Follows the frame structure of a zstd stream from its compressed bytes alone (frame headers, block
    headers and sizes, the optional checksum; no decompression): :meth:`complete` says whether the bytes fed
    so far end exactly at the end of a frame. The stream reader of the zstandard package ends silently on a
    truncated frame; Kafka's reader (zstd-jni) throws, and so does kltool, with this."""

    __slots__ = ("pending", "skip", "state", "checksum", "frames", "seen")

    def __init__(self):
        self.pending = b""  # header bytes not parsed yet (at most a frame header)
        self.skip = 0  # bytes to pass over (block contents, skippable frames)
        self.state = 0  # 0: at a frame start, 1: at a block header, 2: the last block's contents/checksum
        self.checksum = 0
        self.frames = 0
        self.seen = 0  # bytes fed

    def _need(self, buf) -> int:
        """How many bytes the header being read takes: a frame header (state 0; 4 to see the magic, 8
        for a skippable frame) or a block header (3)."""
        if self.state != 0:
            return 3
        if len(buf) < 4:
            return 4
        (magic,) = struct.unpack_from("<I", buf, 0)
        if magic & 0xFFFFFFF0 == 0x184D2A50:
            return 8
        if magic != _ZSTD_MAGIC:
            raise CorruptDataError("zstd data: unknown frame magic")
        if len(buf) < 5:
            return 5
        fhd = buf[4]
        fcs = (0, 2, 4, 8)[fhd >> 6]
        single = fhd & 0x20
        if single and not fcs:
            fcs = 1
        return 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 0x03] + fcs

    def _header(self, buf) -> None:
        """A whole frame or block header read: what it says to skip, and the next state."""
        if self.state == 0:
            (magic,) = struct.unpack_from("<I", buf, 0)
            if magic != _ZSTD_MAGIC:  # a skippable frame
                self.skip = struct.unpack_from("<I", buf, 4)[0]
                self.state = 2
            else:
                self.checksum = 4 if buf[4] & 0x04 else 0
                self.state = 1
            return
        (hdr,) = struct.unpack("<I", buf + b"\x00")
        last, btype, bsize = hdr & 1, (hdr >> 1) & 3, hdr >> 3
        if btype == 3:
            raise CorruptDataError("zstd data: reserved block type")
        self.skip = 1 if btype == 1 else bsize
        if last:
            self.skip += self.checksum
            self.state = 2

    def feed(self, chunk) -> None:
        self.seen += len(chunk)
        view = memoryview(chunk).cast("B") if len(chunk) else b""
        i = 0
        n = len(view)
        while True:
            if self.skip:
                k = min(self.skip, n - i)
                self.skip -= k
                i += k
                if self.skip:
                    return
            if self.state == 2:  # the last block (and checksum) passed: a frame ended
                self.state = 0
                self.frames += 1
            buf = self.pending
            need = self._need(buf)
            if len(buf) < need:
                take = min(need - len(buf), n - i)
                if take <= 0:
                    return
                self.pending = buf = buf + bytes(view[i:i + take])
                i += take
                if len(buf) < need:
                    return
                continue
            self._header(buf)
            self.pending = b""

    def complete(self) -> bool:
        if self.state == 2 and not self.skip and not self.pending:
            self.state = 0
            self.frames += 1
        return self.state == 0 and not self.skip and not self.pending and self.frames > 0


class _Watched:
    """A source whose bytes :class:`ZstdFrames` follows as the decompressor reads them."""

    __slots__ = ("src", "frames")

    def __init__(self, src, frames):
        self.src = src
        self.frames = frames

    def read(self, n: int = -1):
        data = self.src.read(n if n is not None and 0 <= n <= _IN else _IN)
        self.frames.feed(data)
        return bytes(data)


def _zstd_chunks(src, step):
    if not _zstd_d:
        _zstd_d.append(_zstd().ZstdDecompressor())
    # Kafka's zstd frames carry no content size; the stream reader bounds each step's output (a bomb of a
    # few KiB can expand to gigabytes in one call of a decompressobj)
    frames = ZstdFrames()
    if isinstance(src, BytesSource):  # in memory: the reader takes the buffer; the frames are followed after
        data = src.read()
        reader = _zstd_d[0].stream_reader(data, read_across_frames=True)
    else:
        data = None
        reader = _zstd_d[0].stream_reader(_Watched(src, frames), read_size=_IN, read_across_frames=True)
    while True:
        out = reader.read(step)
        if not out:
            break
        yield out
    if data is not None:
        frames.feed(data)
    rest = src.read(_IN)  # (the stream reader may stop at a frame's end with input left)
    while len(rest):
        frames.feed(rest)
        rest = src.read(_IN)
    if frames.seen and not frames.complete():  # a truncated frame (the stream reader says nothing then)
        raise CorruptDataError("zstd frame ends before its end")


def _chunks(codec: int, data, magic: int, limit: int):
    src = as_source(data)
    if codec == GZIP:
        return _gzip_chunks(src, _STEP)
    if codec == SNAPPY:
        return _snappy_chunks(src, _STEP, min(limit, MAX_DECOMPRESSED))
    if codec == LZ4:
        return _lz4_chunks(src, magic, _STEP)
    if codec == ZSTD:
        if magic < 2:
            raise CorruptDataError("Invalid wrapper compressionType found in legacy deep record iterator: zstd")
        return _zstd_chunks(src, _STEP)
    raise CorruptDataError(f"Unknown compression type id: {codec}")


class Inflater:
    """Streams the decompressed bytes of a payload (``data``: bytes-like, or anything with ``read(n)``):
    :meth:`read` gives up to ``n`` more (b"" at the end), never more than ``limit`` in all (then
    :class:`TooLarge`; :data:`UNLIMITED` for a caller that bounds what it holds itself)."""

    def __init__(self, codec: int, data, magic: int = 2, limit: int | None = None):
        self.codec = codec
        self.limit = MAX_DECOMPRESSED if limit is None else limit
        self.total = 0
        self.eof = False
        self._pending = b""
        self._it = _chunks(codec, data, magic, self.limit)

    def read(self, n: int, head: bytes = b"") -> bytes:
        """Up to ``n`` more bytes (fewer only at the end), after ``head`` when given (one copy in all: a
        caller growing a buffer for a large record holds it about twice, not three times)."""
        out = [head] if head else []
        if self._pending:
            out.append(self._pending)
        have = len(self._pending)
        self._pending = b""
        while have < n and not self.eof:
            try:
                chunk = next(self._it)
            except StopIteration:
                self.eof = True
                break
            except KltoolError:  # CorruptDataError, TooLarge, MissingDependency
                raise
            except Exception as e:  # the codec libraries raise their own types
                raise CorruptDataError(f"{codec_name(self.codec)} decompression failed: {e}") from None
            self.total += len(chunk)
            if self.total > self.limit:
                raise TooLarge(f"{codec_name(self.codec)} data decompresses to more than {self.limit} bytes "
                               f"(--max-record-bytes): not held in memory", size=self.total)
            out.append(chunk)
            have += len(chunk)
        if have > n:  # keep the overshoot of the last step (at most one step) for the next read
            extra = have - n
            last = out[-1]
            out[-1] = last[:len(last) - extra]
            self._pending = last[len(last) - extra:]
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)


def decompress(codec: int, data, magic: int = 2, limit: int | None = None) -> bytes:
    """Decompress a batch payload (v2) or a wrapper message value (v0/v1), streamed, up to ``limit`` bytes
    (default :data:`MAX_DECOMPRESSED`; more raises :class:`TooLarge`)."""
    if codec == NONE:
        return bytes(data)
    limit = MAX_DECOMPRESSED if limit is None else limit
    out = []
    total = 0
    try:
        for chunk in _chunks(codec, data, magic, limit):  # (Inflater's loop, without its buffering)
            total += len(chunk)
            if total > limit:
                raise TooLarge(f"{codec_name(codec)} data decompresses to more than {limit} bytes "
                               f"(--max-record-bytes): not held in memory", size=total)
            out.append(chunk)
    except KltoolError:  # CorruptDataError, TooLarge, MissingDependency
        raise
    except Exception as e:  # the codec libraries raise their own types
        raise CorruptDataError(f"{codec_name(codec)} decompression failed: {e}") from None
    return out[0] if len(out) == 1 else b"".join(out)


def compress(codec: int, data: bytes, level: int | None = None, magic: int = 2) -> bytes:
    """Compress as Kafka's producer does (see module docstring)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        lvl = 6 if level is None or level < 0 else level
        c = zlib.compressobj(lvl, zlib.DEFLATED, 31)
        out = c.compress(data) + c.flush()
        return out[:9] + b"\xff" + out[10:]  # zlib's OS byte is the build's (3, Unix); Java's is 255
    if codec == SNAPPY:
        parts = [XERIAL_HEADER]
        for i in range(0, len(data), XERIAL_BLOCK):
            block = bytes(_snappy().compress_raw(data[i:i + XERIAL_BLOCK]))
            parts.append(struct.pack(">i", len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == LZ4:
        # Kafka: level 9 (default) uses the fast compressor, others high compression.
        clevel = 0 if level is None or level == 9 else level
        lz4f = _lz4()
        out = lz4f.compress(data, compression_level=clevel, block_size=lz4f.BLOCKSIZE_MAX64KB,
                                 block_linked=False, content_checksum=False, store_size=False)
        if magic == 0:
            # Reproduce KAFKA-3160: HC over magic+FLG+BD instead of FLG+BD.
            end = _lz4_descriptor_end(out)
            fixed = bytearray(out)
            fixed[end - 1] = (xxh32(bytes(out[0:end - 1])) >> 8) & 0xFF
            out = bytes(fixed)
        return out
    if codec == ZSTD:
        if magic < 2:
            raise ValueError("zstd needs magic 2")
        lvl = 3 if level is None else level
        c = _zstd_c.get(lvl)
        if c is None:
            c = _zstd_c[lvl] = _zstd().ZstdCompressor(level=lvl)
        return c.compress(data)
    raise ValueError(f"Unknown compression type id: {codec}")
