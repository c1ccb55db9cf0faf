"""Topic-name rules (Topic.java) and partition directory names (LocalLog.parseTopicPartitionName)."""

from __future__ import annotations

import pytest

from kltool.errors import CorruptDataError, UsageError
from kltool.format.topics import (
    INTERNAL_TOPICS,
    has_collision,
    has_collision_chars,
    invalid_dir_message,
    invalid_topic_reason,
    is_internal,
    is_valid_topic,
    parse_partition_dir_name,
    partition_dir_name,
    suffixed_partition_dir_name,
    unify_collision_chars,
    validate_topic,
)

UUID = "5e3a1b2c4d5e6f708192a3b4c5d6e7f8"


# ------------------------------------------------------------------------------------------- topic names


@pytest.mark.parametrize("name", ["a", "orders", "my.topic", "my_topic", "my-topic", "A9._-", "__consumer_offsets",
                                  "x" * 249, "...", "-", "_"])
def test_valid_names(name):
    assert is_valid_topic(name)
    assert validate_topic(name) == name


@pytest.mark.parametrize(("name", "reason"), [
    ("", "the empty string is not allowed"),
    (".", "'.' is not allowed"),
    ("..", "'..' is not allowed"),
    ("x" * 250, f"the length of '{'x' * 250}' is longer than the max allowed length 249"),
    ("a b", "'a b' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
    ("a/b", "'a/b' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
    ("é", "'é' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
    ("a\n", "'a\n' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
])
def test_invalid_names_with_kafka_messages(name, reason):
    assert invalid_topic_reason(name) == reason
    assert not is_valid_topic(name)
    with pytest.raises(UsageError) as ei:
        validate_topic(name)
    assert ei.value.message == f"Topic name is invalid: {reason}"


def test_collisions():
    assert has_collision_chars("a.b") and has_collision_chars("a_b")
    assert not has_collision_chars("a-b")
    assert unify_collision_chars("a.b.c_d") == "a_b_c_d"
    assert has_collision("metrics.foo", "metrics_foo")
    assert not has_collision("metrics.foo", "metrics-foo")


def test_internal_topics():
    assert is_internal("__consumer_offsets") and is_internal("__transaction_state")
    assert is_internal("__share_group_state")
    assert not is_internal("__cluster_metadata")  # the KRaft log, not an internal topic
    assert not is_internal("orders")
    assert "__consumer_offsets" in INTERNAL_TOPICS


# --------------------------------------------------------------------------------- partition directories


@pytest.mark.parametrize(("name", "expected"), [
    ("orders-0", ("orders", 0, None, None)),
    ("__consumer_offsets-49", ("__consumer_offsets", 49, None, None)),
    ("my-topic-with-dashes-12", ("my-topic-with-dashes", 12, None, None)),
    ("a.b-3", ("a.b", 3, None, None)),
    (f"orders-3.{UUID}-delete", ("orders", 3, "delete", UUID)),
    (f"orders-3.{UUID}-future", ("orders", 3, "future", UUID)),
    (f"orders-3.{UUID}-stray", ("orders", 3, "stray", UUID)),
    (f"my.topic-7.{UUID}-delete", ("my.topic", 7, "delete", UUID)),
    (f"a-b-0.{UUID}-stray", ("a-b", 0, "stray", UUID)),
    ("t-+5", ("t", 5, None, None)),  # Integer.parseInt accepts a leading '+'
    ("topic--1", ("topic-", 1, None, None)),  # split at the LAST '-'
    ("t-2147483647", ("t", 2147483647, None, None)),
])
def test_parse_partition_dir_names(name, expected):
    assert parse_partition_dir_name(name) == expected


@pytest.mark.parametrize("name", [
    "", "lost+found", "backup", "nodash", "-0", "topic-", "topic-x", "topic-1a", "topic-0x1", "topic- 1",
    "topic-1_0", "t-2147483648", "t--", "t-+",
    "orders-3-delete",  # no ".uniqueId"
    f"orders-3.{UUID}-future-x",  # suffix not at the end → plain name, partition not an int
    f"orders 3.{UUID}-delete",  # \S+ does not match a space
    f"orders.{UUID}-delete",  # no "-" before the ".": pattern needs topic-partition.id
    f"orders-x.{UUID}-delete",  # partition not an int
    "remote-log-index-cache",  # LogManager skips it by name; the parser itself rejects it
])
def test_invalid_dir_names(name):
    with pytest.raises(CorruptDataError) as ei:
        parse_partition_dir_name(name)
    assert ei.value.message == invalid_dir_message(name)


def test_invalid_dir_message_is_kafkas():
    msg = invalid_dir_message("backup", "/var/lib/kafka/backup")
    assert msg == ("Found directory /var/lib/kafka/backup, 'backup' is not in the form of topic-partition or "
                   "topic-partition.uniqueId-delete (if marked for deletion).\n"
                   "Kafka's log directories (and children) should only contain Kafka topic data.")
    with pytest.raises(CorruptDataError) as ei:
        parse_partition_dir_name("backup", path="/var/lib/kafka/backup")
    assert ei.value.message == msg
    assert str(ei.value.path) == "/var/lib/kafka/backup"


def test_format_names_round_trip():
    assert partition_dir_name("orders", 3) == "orders-3"
    for kind in ("delete", "future", "stray"):
        name = suffixed_partition_dir_name("orders", 3, kind, UUID)
        assert name == f"orders-3.{UUID}-{kind}"
        assert parse_partition_dir_name(name) == ("orders", 3, kind, UUID)
    random_name = suffixed_partition_dir_name("orders", 1, "delete")
    topic, part, kind, uid = parse_partition_dir_name(random_name)
    assert (topic, part, kind, len(uid)) == ("orders", 1, "delete", 32)


def test_delete_and_stray_names_are_capped_at_255():
    topic = "t" * 249
    for kind in ("delete", "stray"):
        name = suffixed_partition_dir_name(topic, 123, kind, UUID)
        assert len(name) == 255
        t, p, k, u = parse_partition_dir_name(name)
        assert topic.startswith(t) and (p, k, u) == (123, kind, UUID)
    # -future names are not capped (logDirNameWithSuffix)
    assert len(suffixed_partition_dir_name(topic, 123, "future", UUID)) > 255
