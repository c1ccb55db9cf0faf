"""meta.properties, quorum-state and .kafka_cleanshutdown are judged as the broker reads them; a version
kltool does not read is marked (unknown_version), not mistaken for damage."""

from __future__ import annotations

import pytest

from kltool.errors import CorruptDataError
from kltool.format import checkpoints as cp
from kltool.storage.fs import read_small_file

from .conftest import FIXTURES


def test_real_meta_properties():
    props = cp.parse_meta_properties((FIXTURES / "sample-logdir" / "meta.properties").read_bytes())
    assert props["broker.id"] == "0" and props["version"] == "0"
    assert cp.parse_meta_properties("cluster.id=abc\nnode.id=3\nversion=1\n")["node.id"] == "3"
    assert cp.parse_meta_properties("broker.id=4\n")["broker.id"] == "4"  # no version: 0


@pytest.mark.parametrize("text,unknown,where", [
    ("version=9\nbroker.id=0\n", True, 0),
    ("version=x\n", False, 0),
    ("version=1\nnode.id=1\n", False, None),
    ("version=1\ncluster.id=c\n", False, None),
    ("version=0\nbroker.id=zero\n", False, 10),
    ("\x00\x00\x00", False, 0),
    ("# only a comment\n", False, 0),
    (b"version=0\nbroker.id=\xff1\n", False, 20),
])
def test_bad_meta_properties(text, unknown, where):
    with pytest.raises(CorruptDataError) as ei:
        cp.parse_meta_properties(text)
    assert ei.value.unknown_version is unknown
    if where is not None:
        assert ei.value.position == where


def test_quorum_state():
    good = '{"clusterId":"","leaderId":1,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,"currentVoters":[],' \
           '"data_version":0}'
    assert cp.parse_quorum_state(good)["leaderEpoch"] == 3
    for bad, unknown in [('{"data_version":7}', True), ('{"leaderEpoch":"3"}', False), ("[]", False),
                         ("[" * 100_000, False), ('{"currentVoters":3}', False)]:
        with pytest.raises(CorruptDataError) as ei:
            cp.parse_quorum_state(bad)
        assert ei.value.unknown_version is unknown, bad


def test_clean_shutdown_version():
    with pytest.raises(CorruptDataError) as ei:
        cp.parse_clean_shutdown('{"version":3,"brokerEpoch":1}')
    assert ei.value.unknown_version


def test_only_regular_files_are_read(tmp_path):
    import os

    fifo = tmp_path / "meta.properties"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        read_small_file(fifo)  # (opening it for reading would wait for a writer for ever)
    with pytest.raises(IsADirectoryError):
        read_small_file(tmp_path)
