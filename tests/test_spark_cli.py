"""spark-report's checks that run before Spark starts (no JVM here: these are fast), and its output
files' time formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import FIXTURES, ROOT

pa = pytest.importorskip("pyarrow")

SAMPLE = FIXTURES / "sample-logdir"


@pytest.mark.parametrize("args, words", [
    (["README.md"], ["README.md", "no Kafka log dir"]),
    ([str(SAMPLE), "--topic", "nomatch*"], ["--topic 'nomatch*'"]),
    ([str(SAMPLE), "-p", "99"], ["--partition 99"]),
    (["/nonexistent/logs"], ["/nonexistent/logs"]),
])
def test_a_selection_that_selects_nothing_exits_2_before_spark_starts(kl, args, words):
    res = kl("spark-report", "sizes", *[ROOT / a if a == "README.md" else a for a in args])
    assert res.code == 2, res
    assert "starting Spark" not in res.err
    assert len(res.err.strip().splitlines()) == 1
    for w in words:
        assert w in res.err, res.err


@pytest.mark.parametrize("args, word", [
    (["--conf", "spark.master"], "--conf"),
    (["--storage-option", "=x"], "--storage-option"),
])
def test_bad_pass_through_options_are_usage_errors(kl, args, word):
    res = kl("spark-report", "sizes", SAMPLE, *args)
    assert res.code == 2 and word in res.err and "starting Spark" not in res.err, res


def test_wrong_java_home_is_one_clear_line(tmp_path):
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "no-jdk"))
    p = subprocess.run([sys.executable, "-m", "kltool", "spark-report", "sizes", str(SAMPLE)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 2, p.stderr
    err = p.stderr.strip().splitlines()
    assert err[-1].startswith("kltool: error: JAVA_HOME=") and "bin/java" in err[-1], p.stderr
    assert "gateway" not in p.stderr.lower() and "Traceback" not in p.stderr


def test_output_files_give_times_as_each_format_does(tmp_path):
    import datetime as dt

    import pyarrow.parquet as pq

    from kltool.commands.spark_report import write_output

    t = pa.table({"topic": ["a", "b"], "offset": [1, None],
                  "timestamp": pa.array([dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.UTC), None],
                                        pa.timestamp("us", tz="UTC"))})
    write_output(t, str(tmp_path / "o.csv"))
    lines = (tmp_path / "o.csv").read_text().splitlines()
    assert lines[0] == '"topic","offset","timestamp"'
    assert lines[1] == '"a",1,"2024-05-01T12:00:00.123Z"'
    write_output(t, str(tmp_path / "o.json"))
    rows = [json.loads(x) for x in (tmp_path / "o.json").read_text().splitlines()]
    assert rows[0]["timestamp"] == 1714564800123 and rows[1]["timestamp"] is None
    write_output(t, str(tmp_path / "o.parquet"))
    assert pa.types.is_timestamp(pq.read_table(tmp_path / "o.parquet").schema.field("timestamp").type)


def test_an_existing_output_file_is_not_overwritten_without_force(kl, tmp_path):
    out = tmp_path / "r.csv"
    out.write_text("mine\n")
    res = kl("spark-report", "sizes", SAMPLE, "-o", out)
    assert res.code == 2, res
    assert "starting Spark" not in res.err and len(res.err.strip().splitlines()) == 1
    assert "exists; give --force to overwrite it" in res.err
    assert out.read_text() == "mine\n"
