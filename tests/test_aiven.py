"""Aiven's tiered-storage-for-apache-kafka layout: segments cut into chunks, zstd-compressed and AES-GCM
encrypted as the plugin does (KafkaRemoteStorageManager.transformation: chunk, compress, encrypt; the manifest
as SegmentManifestV1 serializes it), reassembled byte for byte, locally and from S3 with ranged reads."""

from __future__ import annotations

import base64
import json
import os
import struct

import pytest

from .conftest import ORACLE, REAL, run_kltool

zstandard = pytest.importorskip("zstandard")

TOPIC_ID = "MWJ6FHTfRYy67jzwZdeqSQ"
SEG_ID = "tqimKeZwStOEOwRzT3L5oQ"
SRC = REAL / "william0423-indexed-zk" / "__consumer_offsets-28"  # 2 KiB of .index


def encode_chunk_sizes(values: list[int]) -> bytes:
    """The plugin's ChunkSizesBinaryCodec.encode."""
    if not values:
        return struct.pack(">i", 0)
    if len(values) == 1:
        return struct.pack(">ii", 1, values[0])
    base = min(values[:-1])
    width = max(1 if v - base <= 0xFF else 2 if v - base <= 0xFFFF else 3 if v - base <= 0xFFFFFF else 4
                for v in values[:-1])
    out = struct.pack(">iib", len(values), base, width)
    for v in values[:-1]:
        out += struct.pack(">i", v - base)[4 - width:]
    return out + struct.pack(">i", values[-1])


def oaep_sha3_encrypt(public_key, message: bytes) -> bytes:
    """RSA/NONE/OAEPWithSHA3-512AndMGF1Padding as BouncyCastle does it (RFC 8017 EME-OAEP, SHA3-512 for the
    label hash and MGF1, empty label), written here from the RFC: the test's independent encoder."""
    import hashlib

    n, e = public_key.public_numbers().n, public_key.public_numbers().e
    k, h = (n.bit_length() + 7) // 8, hashlib.sha3_512
    hlen = h().digest_size

    def mgf1(seed, length):
        return b"".join(h(seed + c.to_bytes(4, "big")).digest() for c in range(-(-length // hlen)))[:length]

    db = h(b"").digest() + bytes(k - len(message) - 2 * hlen - 2) + b"\x01" + message
    seed = os.urandom(hlen)
    masked_db = bytes(a ^ b for a, b in zip(db, mgf1(seed, k - hlen - 1), strict=True))
    masked_seed = bytes(a ^ b for a, b in zip(seed, mgf1(masked_db, hlen), strict=True))
    em = b"\x00" + masked_seed + masked_db
    return pow(int.from_bytes(em, "big"), e, n).to_bytes(k, "big")


def upload(dst_dir, src_dir, base: int, *, chunk_size: int, compression: bool, rsa_public=None, key_id="k1"):
    """The three objects of segment ``base`` of ``src_dir``, as the plugin writes them, under
    ``dst_dir/<topic>-<id>/<partition>/``. Returns the stem."""
    from kltool.format.names import segment_file

    log = (src_dir / segment_file(base, "log")).read_bytes()
    aes = aad = None
    manifest: dict = {}
    if rsa_public is not None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        data_key, aad = os.urandom(32), os.urandom(32)
        aes = AESGCM(data_key)
        wrapped = oaep_sha3_encrypt(rsa_public, data_key)
        manifest["encryption"] = {"dataKey": f"{key_id}:{base64.b64encode(wrapped).decode()}",
                                  "aad": base64.b64encode(aad).decode()}

    def encrypt(b: bytes) -> bytes:
        if aes is None:
            return b
        iv = os.urandom(12)
        return iv + aes.encrypt(iv, b, aad)

    chunks = []
    for i in range(0, len(log), chunk_size):
        c = log[i:i + chunk_size]
        if compression:
            c = zstandard.ZstdCompressor(write_content_size=True).compress(c)
        chunks.append(encrypt(c))
    sizes = [len(c) for c in chunks]
    if compression:
        index = {"type": "variable", "originalChunkSize": chunk_size, "originalFileSize": len(log),
                 "transformedChunks": base64.b64encode(zstandard.ZstdCompressor().compress(
                     encode_chunk_sizes(sizes))).decode()}
    else:
        index = {"type": "fixed", "originalChunkSize": chunk_size, "originalFileSize": len(log),
                 "transformedChunkSize": sizes[0] if sizes else 0, "finalTransformedChunkSize": sizes[-1] if sizes else 0}
    indexes, pos, seg_indexes = b"", 0, {}
    for name, kind in (("offset", "index"), ("timestamp", "timeindex"), ("producerSnapshot", "snapshot"),
                       ("leaderEpoch", None), ("transaction", "txnindex")):
        f = src_dir / segment_file(base, kind) if kind else src_dir / "leader-epoch-checkpoint"
        raw = f.read_bytes() if f.exists() else b""
        t = encrypt(raw) if raw else b""
        seg_indexes[name] = {"position": pos, "size": len(t)}
        indexes += t
        pos += len(t)
    d = dst_dir / f"{src_dir.name.rsplit('-', 1)[0]}-{TOPIC_ID}" / src_dir.name.rsplit("-", 1)[1]
    d.mkdir(parents=True, exist_ok=True)
    stem = d / f"{base:020d}-{SEG_ID}"
    (stem.parent / (stem.name + ".log")).write_bytes(b"".join(chunks))
    (stem.parent / (stem.name + ".indexes")).write_bytes(indexes)
    manifest = {"version": "1", "chunkIndex": index, "segmentIndexes": seg_indexes, "compression": compression,
                **manifest, "remoteLogSegmentMetadata": {"remoteLogSegmentId": {"id": SEG_ID}}}
    (stem.parent / (stem.name + ".rsm-manifest")).write_text(json.dumps(manifest))
    return stem


def test_chunk_size_codec_round_trip():
    from kltool.storage.aiven import decode_chunk_sizes

    for values in ([], [7], [5, 3], [100, 300, 70000, 12], [2**31 - 1, 0, 5], [1 << 20] * 9 + [17]):
        assert decode_chunk_sizes(encode_chunk_sizes(values)) == values


@pytest.mark.parametrize("compression", [False, True], ids=["fixed", "variable-zstd"])
@pytest.mark.parametrize("chunk_size", [1000, 4096, 1 << 20])
def test_reassembled_byte_for_byte(tmp_path, compression, chunk_size):
    from kltool.storage.aiven import find_segments, write_segment

    upload(tmp_path / "bucket", SRC, 0, chunk_size=chunk_size, compression=compression)
    (ref,) = find_segments(str(tmp_path / "bucket"))
    assert (ref.topic, ref.topic_id, ref.partition, ref.base_offset) == ("__consumer_offsets", TOPIC_ID, 28, 0)
    seg = ref.open()
    size = (SRC / "00000000000000000000.log").stat().st_size
    assert size > 100_000 and len(seg.chunks) == -(-size // chunk_size)
    written = write_segment(seg, ref, tmp_path / "out")
    for p in written:
        assert p.read_bytes() == (SRC / p.name).read_bytes(), p.name


@pytest.fixture(scope="module")
def rsa_key(tmp_path_factory):
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path_factory.mktemp("keys") / "private.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return key, pem


@pytest.mark.parametrize("compression", [False, True])
def test_encrypted_needs_the_private_key(tmp_path, rsa_key, compression):
    key, pem = rsa_key
    upload(tmp_path / "bucket", SRC, 0, chunk_size=2000, compression=compression, rsa_public=key.public_key())
    r = run_kltool("tiered-fetch", str(tmp_path / "bucket"), "-o", str(tmp_path / "none"))
    assert r.code == 2 and "--private-key" in r.err and "Traceback" not in r.err, r
    r = run_kltool("tiered-fetch", str(tmp_path / "bucket"), "-o", str(tmp_path / "out"), "--private-key", f"k1={pem}")
    assert r.code == 0, r
    got = tmp_path / "out" / "__consumer_offsets-28" / "00000000000000000000.log"
    assert got.read_bytes() == (SRC / "00000000000000000000.log").read_bytes()
    assert (got.parent / "00000000000000000000.index").read_bytes() == (SRC / "00000000000000000000.index").read_bytes()
    r = run_kltool("verify", str(tmp_path / "out"))
    assert r.code == 0, r
    # a damaged chunk: one line naming the chunk and byte, exit 2, never a traceback
    log = next((tmp_path / "bucket").rglob("*.log"))
    raw = bytearray(log.read_bytes())
    raw[40] ^= 1
    log.write_bytes(bytes(raw))
    r = run_kltool("tiered-fetch", str(tmp_path / "bucket"), "-o", str(tmp_path / "bad"), "--private-key", str(pem))
    assert r.code == 2 and "chunk 0 at byte 0" in r.err and "Traceback" not in r.err, r


def test_fetched_segments_read_with_the_log_dir(tmp_path):
    """A multi-segment partition: two segments tiered by the plugin, the last one local; fetched, the
    union reads as the whole partition."""
    src = ORACLE / "v2-multi-segment-0"
    for base in (0, 400):
        upload(tmp_path / "bucket", src, base, chunk_size=8192, compression=True)
    r = run_kltool("tiered-fetch", str(tmp_path / "bucket"), "-o", str(tmp_path / "fetched"))
    assert r.code == 0, r
    local = tmp_path / "logs" / "v2-multi-segment-0"
    local.mkdir(parents=True)
    (local / "00000000000000000800.log").write_bytes((src / "00000000000000000800.log").read_bytes())
    r = run_kltool("--json", "info", str(tmp_path / "fetched"), str(tmp_path / "logs"))
    assert r.code == 0, r
    rows = [x for x in r.json() if x.get("topic") == "v2-multi-segment"]
    assert sum(x["segments"] for x in rows) == 3


def test_s3_ranged_reads_stay_within_a_chunk(tmp_path):
    pafs = pytest.importorskip("pyarrow.fs")
    from kltool.storage import aiven

    from .s3_local import s3_server

    upload(tmp_path / "bucket", ORACLE / "v2-multi-segment-0", 0, chunk_size=4096, compression=True)
    with s3_server() as (fs, opts):
        fs.create_dir("tiered")
        pafs.copy_files(str(tmp_path / "bucket"), "tiered/prefix", destination_filesystem=fs)
        (ref,) = aiven.find_segments("s3://tiered/prefix", opts)
        reads = []
        inner = ref.read_range()
        seg = aiven.AivenSegment(ref.manifest_bytes(), lambda s, p, n: reads.append((s, p, n)) or inner(s, p, n))
        log_object = fs.get_file_info(f"{ref.stem}.log").size
        out = b"".join(seg.chunks_bytes())
        assert out == (ORACLE / "v2-multi-segment-0" / "00000000000000000000.log").read_bytes()
        assert len(reads) == len(seg.chunks) > 5
        assert max(n for _s, _p, n in reads) <= 4096 + 64 < log_object  # one chunk per read, never the object
        storage = [f"--storage-option={k}={v}" for k, v in opts.items()]
        r = run_kltool("tiered-fetch", "s3://tiered/prefix", "-o", str(tmp_path / "out"), *storage)
        assert r.code == 0, r
        assert (tmp_path / "out" / "v2-multi-segment-0" / "00000000000000000000.log").read_bytes() == out


def test_reading_commands_point_at_tiered_fetch(tmp_path):
    upload(tmp_path / "bucket", ORACLE / "v2-multi-segment-0", 0, chunk_size=8192, compression=True)
    for cmd in ("info", "dump", "verify"):
        r = run_kltool(cmd, str(tmp_path / "bucket"))
        assert r.code == 2 and "kltool tiered-fetch" in r.err and "Traceback" not in r.err, (cmd, r)
