"""Compression codecs exactly as Kafka writes and reads them (Kafka's ``CompressionType``,
``KafkaLZ4BlockInputStream``, ``SnappyFactory``).

* gzip: one RFC 1952 member on write; concatenated members accepted on read.
* snappy: xerial framing (``\\x82SNAPPY\\0`` + versions + length-prefixed raw blocks) on write;
  on read, data without the xerial magic is decoded as one raw snappy buffer, like SnappyInputStream.
* lz4: Kafka's LZ4 frame (independent 64 KiB blocks, no checksums). Magic-0 data carries a wrong
  header checksum (KAFKA-3160): it is ignored on read and reproduced on write.
* zstd: one frame; frames without a content size are decoded by streaming.
"""

from __future__ import annotations

import struct
import zlib

from ..errors import CorruptDataError

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
def _snappy():
    import cramjam

    return cramjam.snappy


def _lz4():
    import lz4.frame

    return lz4.frame


def _zstd():
    import zstandard

    return zstandard


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
# batch): decompression is streamed, in steps of at most _STEP bytes, and stops with TooLarge once more
# than the limit would come out. Callers that know how much they need (decode_v2_records: the declared
# record count) read only that much, as Kafka's reader does.

MAX_DECOMPRESSED = 256 << 20  # the default limit on what one batch may decompress to (--max-record-bytes)
_STEP = 1 << 20


class TooLarge(CorruptDataError):
    """A payload decompresses to more than the limit: reported, never held in memory."""


def set_limit(limit: int) -> None:
    """Set the process-wide limit on the bytes one batch or wrapper message may decompress to."""
    global MAX_DECOMPRESSED
    MAX_DECOMPRESSED = int(limit)


def _varint_len(data: bytes) -> int | None:
    """The uncompressed length at the start of a raw snappy block (a varint), or None."""
    n = shift = 0
    for i in range(min(5, len(data))):
        b = data[i]
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n
        shift += 7
    return None


def _gzip_chunks(data, step):
    buf = bytes(data)
    while buf:
        d = zlib.decompressobj(wbits=31)
        src = buf
        while True:
            out = d.decompress(src, step)
            if out:
                yield out
            if d.eof:
                break
            src = d.unconsumed_tail
            if not src and not out:
                raise CorruptDataError("gzip stream ends before its end marker")
        buf = d.unused_data
        # Trailing zero padding after the last member is tolerated, like GZIPInputStream.
        if buf and not buf.startswith(b"\x1f\x8b"):
            break


def _snappy_chunks(data, step, limit):
    data = bytes(data)

    def block(raw, where):
        n = _varint_len(raw)
        if n is not None and n > limit:
            raise TooLarge(f"snappy block decompresses to {n} bytes, more than the limit of {limit}", position=where)
        return bytes(_snappy().decompress_raw(raw))

    if len(data) < 16 or not data.startswith(XERIAL_MAGIC):
        yield block(data, 0)
        return
    p = 16
    n = len(data)
    while p < n:
        if p + 4 > n:
            raise CorruptDataError("snappy (xerial) block length runs past the end of the data", position=p)
        (blen,) = struct.unpack_from(">i", data, p)
        if blen == 0x82534E41 - (1 << 32) and data[p:p + 8] == XERIAL_MAGIC:
            p += 16  # concatenated stream: another header follows
            continue
        p += 4
        if blen < 0 or p + blen > n:
            raise CorruptDataError(f"snappy (xerial) block of {blen} bytes runs past the end of the data",
                                   position=p - 4)
        yield block(data[p:p + blen], p)
        p += blen


def _lz4_chunks(data, magic, step):
    data = bytes(data)
    if magic == 0:
        data = _fix_lz4_header_checksum(data)
    d = _lz4().LZ4FrameDecompressor()
    src = data
    while True:
        out = d.decompress(src, max_length=step)
        src = b""
        if out:
            yield out
        if d.eof:
            return
        if d.needs_input and not out:
            raise CorruptDataError("lz4 frame ends before its end")


def _zstd_chunks(data, step):
    if not _zstd_d:
        _zstd_d.append(_zstd().ZstdDecompressor())
    # Kafka's zstd frames carry no content size; the stream reader bounds each step's output (a bomb of a
    # few KiB can expand to gigabytes in one call of a decompressobj)
    reader = _zstd_d[0].stream_reader(bytes(data), read_across_frames=True)
    got = False
    while True:
        out = reader.read(step)
        if not out:
            break
        got = True
        yield out
    if not got and len(data):  # an empty frame, or a truncated one (the stream reader says nothing then)
        d = _zstd_d[0].decompressobj()
        if d.decompress(bytes(data)[:1 << 16]) or not d.eof:
            raise CorruptDataError("zstd frame ends before its end")


def _chunks(codec: int, data, magic: int, limit: int):
    if codec == GZIP:
        return _gzip_chunks(data, _STEP)
    if codec == SNAPPY:
        return _snappy_chunks(data, _STEP, limit)
    if codec == LZ4:
        return _lz4_chunks(data, magic, _STEP)
    if codec == ZSTD:
        if magic < 2:
            raise CorruptDataError("Invalid wrapper compressionType found in legacy deep record iterator: zstd")
        return _zstd_chunks(data, _STEP)
    raise CorruptDataError(f"Unknown compression type id: {codec}")


class Inflater:
    """Streams the decompressed bytes of a payload: :meth:`read` gives up to ``n`` more (b"" at the end),
    never more than ``limit`` in all (then :class:`TooLarge`)."""

    def __init__(self, codec: int, data, magic: int = 2, limit: int | None = None):
        self.codec = codec
        self.limit = MAX_DECOMPRESSED if limit is None else limit
        self.total = 0
        self.eof = False
        self._pending = b""
        self._it = _chunks(codec, data, magic, self.limit)

    def read(self, n: int) -> bytes:
        out = [self._pending] if self._pending else []
        have = len(self._pending)
        self._pending = b""
        while have < n and not self.eof:
            try:
                chunk = next(self._it)
            except StopIteration:
                self.eof = True
                break
            except CorruptDataError:
                raise
            except Exception as e:  # the codec libraries raise their own types
                raise CorruptDataError(f"{codec_name(self.codec)} decompression failed: {e}") from None
            self.total += len(chunk)
            if self.total > self.limit:
                raise TooLarge(f"{codec_name(self.codec)} data decompresses to more than {self.limit} bytes "
                               f"(the limit, --max-record-bytes): not held in memory")
            out.append(chunk)
            have += len(chunk)
        data = b"".join(out)
        if len(data) > n:
            data, self._pending = data[:n], data[n:]
        return data

    def at_end(self) -> bool:
        """True when nothing more comes out (reads one more step to find out)."""
        if self._pending:
            return False
        more = self.read(1)
        if more:
            self._pending = more
            return False
        return True


def decompress(codec: int, data, magic: int = 2, limit: int | None = None) -> bytes:
    """Decompress a batch payload (v2) or a wrapper message value (v0/v1), streamed, up to ``limit`` bytes
    (default :data:`MAX_DECOMPRESSED`; more raises :class:`TooLarge`)."""
    if codec == NONE:
        return bytes(data)
    inf = Inflater(codec, data, magic, limit)
    out = []
    while True:
        chunk = inf.read(_STEP)
        if not chunk:
            return b"".join(out)
        out.append(chunk)


def compress(codec: int, data: bytes, level: int | None = None, magic: int = 2) -> bytes:
    """Compress as Kafka's producer does (see module docstring)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        lvl = 6 if level is None or level < 0 else level
        c = zlib.compressobj(lvl, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
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
