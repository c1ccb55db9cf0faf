"""The broker-judge campaign (bench/broker_campaign.py) on one fixed seed: log dirs kltool wrote (create,
append with every codec, magic 0/1/2, null/empty/large keys and values, headers, idempotent and
transactional producers, small segments) and changed (retention, compact, damage + verify --repair,
rebuild-index), judged by a real Kafka broker started once with the clean-shutdown marker and once with
recovery forced: no truncation or corruption lines, the records kltool dump shows (read_uncommitted and
read_committed), ListOffsets earliest/latest as kltool offsets, and DumpLogSegments --deep-iteration line for
line as kltool dump. `bench/broker_campaign.py SEED RUNS` runs more seeds."""

from __future__ import annotations

import importlib.util

import pytest

from ..conftest import ROOT
from .conftest import _need_broker

pytestmark = pytest.mark.slow

SEED = 1  # one run of 12 topics (~30 partitions, ~2,000 records) and three broker starts: about a minute


def _campaign():
    spec = importlib.util.spec_from_file_location("broker_campaign", ROOT / "bench" / "broker_campaign.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_broker_judges_what_kltool_wrote_and_changed(tmp_path):
    _need_broker()
    report: dict = {}
    findings = _campaign().run_once(SEED, 0, tmp_path, 12, report)
    assert findings == []
    assert report["cases"] >= 12 and report["records"] > 0
    assert len(report["start_seconds"]) == 2
