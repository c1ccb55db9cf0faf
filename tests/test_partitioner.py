"""Kafka's murmur2 partitioner against Kafka's own vectors and kafka-python's implementation."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kltool.format.partitioner import default_partition, murmur2, to_positive

with warnings.catch_warnings():  # kafka-python's protocol loader uses deprecated importlib APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    kp_murmur2 = pytest.importorskip("kafka.partitioner.default").murmur2

# clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2 (apache/kafka).
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_kafka_utils_test_vectors(key, expected):
    assert murmur2(key) == expected


def test_every_tail_length():
    # lengths 0..3 mod 4 exercise each fall-through branch of the switch; results are Java ints
    for n in range(0, 13):
        h = murmur2(bytes(range(n)))
        assert -(2**31) <= h < 2**31


def test_high_bytes_are_unsigned():
    # Java masks each byte with 0xff; bytes >= 0x80 must not sign-extend
    for key in (b"\xff", b"\x80\x81", b"\xfe\xfd\xfc", b"\xff\xff\xff\xff", b"\x80" * 7):
        assert murmur2(key) & 0xFFFFFFFF == kp_murmur2(key)


def test_to_positive():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0  # not abs(): Integer.MIN_VALUE → 0
    assert to_positive(5) == 5


def test_default_partition_known_keys():
    # toPositive(murmur2("foobar")) = -790332482 & 0x7fffffff = 1357151166
    assert to_positive(-790332482) == 1357151166
    assert default_partition(b"foobar", 1) == 0
    assert default_partition(b"foobar", 3) == 1357151166 % 3
    assert default_partition(b"21", 10) == (-973932308 & 0x7FFFFFFF) % 10
    for key, expected in KAFKA_VECTORS:
        for n in (1, 2, 3, 6, 12, 50, 100):
            assert default_partition(key, n) == (expected & 0x7FFFFFFF) % n


def test_default_partition_rejects_bad_input():
    with pytest.raises(ValueError):
        default_partition(b"k", 0)
    with pytest.raises(ValueError):
        default_partition(None, 3)


@settings(max_examples=500)
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_matches_kafka_python(key, n):
    """kafka-python's pure-Python port (unsigned result) is an independent implementation."""
    h = murmur2(key)
    assert -(2**31) <= h < 2**31
    assert h & 0xFFFFFFFF == kp_murmur2(key)
    assert default_partition(key, n) == (kp_murmur2(key) & 0x7FFFFFFF) % n
