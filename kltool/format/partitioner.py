"""Kafka's default key partitioner: ``Utils.murmur2`` and ``Utils.toPositive``.

The Java producer (``BuiltInPartitioner.partitionForKey``, formerly ``DefaultPartitioner``) sends a record
with a non-null key to ``toPositive(murmur2(serializedKey)) % numPartitions``. ``murmur2`` is MurmurHash2
(32-bit) with seed ``0x9747b28c`` computed in Java ``int`` arithmetic, so its result is a *signed* 32-bit
int. Records without a key use the sticky partitioner, which is not a function of the record.
"""

from __future__ import annotations

import struct

__all__ = ["murmur2", "to_positive", "default_partition", "SEED"]

SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """``org.apache.kafka.common.utils.Utils.murmur2``: a signed 32-bit int (Java ``int``)."""
    data = bytes(data)
    length = len(data)
    h = (SEED ^ length) & _MASK
    n4 = length // 4
    if n4:
        for k in struct.unpack_from(f"<{n4}I", data):
            k = (k * _M) & _MASK
            k ^= k >> _R
            k = (k * _M) & _MASK
            h = (h * _M) & _MASK
            h ^= k
    tail = length & ~3
    rem = length & 3
    # Java's switch falls through: case 3 → case 2 → case 1.
    if rem == 3:
        h ^= data[tail + 2] << 16
    if rem >= 2:
        h ^= data[tail + 1] << 8
    if rem >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13  # >>> on the unsigned view = Java's unsigned shift
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """``Utils.toPositive``: ``n & 0x7fffffff`` (not ``abs``: ``Integer.MIN_VALUE`` maps to 0)."""
    return n & 0x7FFFFFFF


def default_partition(key: bytes, num_partitions: int) -> int:
    """The partition the Java producer picks for a record with this serialized (non-null) key."""
    if num_partitions <= 0:
        raise ValueError(f"number of partitions must be positive, got {num_partitions}")
    if key is None:
        raise ValueError("records without a key are spread by the sticky partitioner; pick a partition")
    return to_positive(murmur2(key)) % num_partitions
