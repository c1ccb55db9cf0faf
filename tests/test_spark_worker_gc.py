"""Spark tasks' Python workers: what kltool does as a task starts reading."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")


def test_in_task_freezes_the_collector_only_in_a_spark_task():
    # pyspark's daemon runs gc.collect() after every task in a reused worker; in_task() freezes what is alive
    # there. Outside a Spark task (a driver, this test process) it must leave the collector alone.
    import gc

    from kltool.spark.arrow_rows import in_task

    before = gc.get_freeze_count()
    in_task()
    assert gc.get_freeze_count() == before
