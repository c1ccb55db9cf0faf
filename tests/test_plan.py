"""The plan vocabulary (storage/change/plan.py): one Action class for repair, rebuild-index and retention,
and the ``action`` JSON object each gives (docs/json-lines.md)."""

from __future__ import annotations

from pathlib import Path

from kltool.storage.change import plan, repair, retention
from kltool.storage.change.plan import Action, Cut


def test_one_action_class_and_one_cut():
    assert repair.Action is retention.Action is plan.Action
    assert repair.Cut is plan.Cut
    classes = {name for mod in (repair, retention) for name, v in vars(mod).items()
               if isinstance(v, type) and v.__module__ == mod.__name__}
    assert not classes & {"Action", "Cut", "ChangeSet", "Finding", "Note", "Problem"}, classes


def test_a_file_step_as_json_and_text():
    a = Action("excise", Path("p-0/00000000000000000000.log"), "crc mismatch", old_size=300, new_size=200,
               first_offset=3, last_offset=4, records_lost=2, ranges=[Cut(100, 200, "crc_mismatch", "crc", 3, 4, 2)])
    d = a.to_json()
    assert d == {"type": "action", "op": "excise", "file": "p-0/00000000000000000000.log", "reason": "crc mismatch",
                 "old_size": 300, "new_size": 200, "first_offset": 3, "last_offset": 4, "records_lost": 2,
                 "bytes": 100, "ranges": [{"start": 100, "end": 200, "bytes": 100, "kind": "crc_mismatch",
                                           "reason": "crc", "first_offset": 3, "last_offset": 4, "records": 2}],
                 "applied": False}
    assert a.describe() == ("excise p-0/00000000000000000000.log bytes [100, 200) (100 bytes, offsets 3..4, "
                            "2 records lost): crc mismatch")


def test_a_partition_step_names_its_partition_and_facts():
    a = Action("delete", Path("ld/t-0/00000000000000000000.log"), topic="t", partition=0,
               info={"kind": "segment", "reason": "retention_ms", "bytes": 10}, paths=[Path("x")])
    assert a.to_json() == {"type": "action", "op": "delete", "file": "ld/t-0/00000000000000000000.log",
                           "topic": "t", "partition": 0, "kind": "segment", "reason": "retention_ms", "bytes": 10,
                           "applied": False}
    a.applied = True
    assert a.to_json()["applied"] is True
