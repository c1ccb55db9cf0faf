"""The value classes on every command's import path (kltool.plain, instead of dataclasses) compare,
print and hash as the dataclasses they replace did; and that path stays free of dataclasses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kltool.format.index import AbortedTxn
from kltool.format.records import Record, RecordColumns
from kltool.storage.check.verify import VerifyStats
from kltool.storage.findings import Finding
from kltool.storage.logdir import Selection
from kltool.storage.scan import Damage
from kltool.storage.segment import TimeIndexTail

from .conftest import ROOT


def test_equal_by_fields_and_class():
    a = Record(1, 2, b"k", None, [], size=5)
    assert a == Record(offset=1, timestamp=2, key=b"k", value=None, headers=[], sequence=-1, size=5, control=None)
    assert a != Record(1, 2, b"k", None, [], size=6)
    assert Damage("garbage", 0, 3, "m") == Damage("garbage", 0, 3, "m", None)
    assert Damage("garbage", 0, 3, "m") != Damage("garbage", 0, 3, "m", 3)
    assert Finding("error", "k", "f", "m") != Damage("k", 0, 0, "m")  # another class: never equal
    assert RecordColumns(b"x") == RecordColumns(b"x", [], [], [], [], [], [], [], [])
    assert Selection() == Selection([], [], [])


def test_defaults_are_not_shared():
    a, b = RecordColumns(b""), RecordColumns(b"")
    a.offsets.append(1)
    assert b.offsets == []
    s, t = VerifyStats(), VerifyStats()
    s.segment_ends["p"] = 3
    assert t.segment_ends == {}


def test_repr_names_the_fields_in_order():
    assert repr(Damage("zero_run", 4, 5, "m")) == "Damage(kind='zero_run', position=4, length=5, message='m', resumed_at=None)"
    assert repr(TimeIndexTail(None, (1, 2), True)) == "TimeIndexTail(raw=None, last=(1, 2), untrimmed=True)"


def test_verify_stats_hold_counts_only():
    a, b = VerifyStats(batches=3), VerifyStats(batches=3)
    assert a == b and set(vars(a)) == set(VerifyStats._fields)  # (no bookkeeping: verify hands state on itself)
    assert vars(a)["batches"] == 3  # (tests read the counts with vars())


def test_frozen_ones_hash_by_value_and_the_others_do_not_hash():
    t = AbortedTxn(0, 7, 10, 20, 5)
    assert hash(t) == hash(AbortedTxn(0, 7, 10, 20, 5)) and {t, AbortedTxn(0, 7, 10, 20, 5)} == {t}
    assert str(t).startswith("AbortedTxn(version=0, producerId=7")  # Kafka's toString, kept
    with pytest.raises(TypeError):
        hash(Finding("error", "k", "f", "m"))


def test_a_finding_still_checks_its_severity():
    with pytest.raises(ValueError, match="severity"):
        Finding("fatal", "k", "f", "m")


def test_the_verify_path_imports_no_dataclasses():
    """Each dataclass costs 0.5-1 ms of every run at import: the classes every command imports are plain."""
    code = "import sys, kltool.cli, kltool.commands.verify, kltool.api; print('dataclasses' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
