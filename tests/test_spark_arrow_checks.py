"""The JVMs kltool's session() starts read Arrow without Arrow Java's per-read bounds and null checks
(a quarter of the JVM's time on a full-row read); what makes that safe is that every batch the reader
hands to Spark is validated in full first."""

from __future__ import annotations

import array

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from kltool.spark import (  # noqa: E402
    ARROW_JVM_OPTIONS,
    arrow_rows,  # noqa: E402
    java_options,
)

from .conftest import ORACLE  # noqa: E402

KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def test_driver_and_executors_get_the_arrow_options_unless_the_user_set_their_own():
    opts = java_options({}, quiet=False)
    assert set(opts) == set(KEYS) and all(v == ARROW_JVM_OPTIONS for v in opts.values())
    assert "-Darrow.enable_unsafe_memory_access=true" in ARROW_JVM_OPTIONS
    assert "-Darrow.enable_null_check_for_get=false" in ARROW_JVM_OPTIONS
    quiet = java_options({}, quiet=True)
    assert all(v.startswith(ARROW_JVM_OPTIONS + " -Dlog4j2.configurationFile=file:") for v in quiet.values())
    mine = java_options({"spark.executor.extraJavaOptions": "-Xss4m"}, quiet=True)
    assert list(mine) == ["spark.driver.extraJavaOptions"]  # the user's own executor options win, whole


def _bad_batch():
    """Offsets that pass pyarrow's cheap checks (first and last in range) but run backwards in between:
    read unchecked, the JVM would copy from outside the buffer."""
    offs = pa.py_buffer(array.array("i", [0, 50, 4, 6]).tobytes())
    value = pa.Array.from_buffers(pa.binary(), 3, [None, offs, pa.py_buffer(b"abcdef")])
    return pa.RecordBatch.from_arrays([value], names=["value"])


def test_every_batch_is_validated_in_full_before_spark_sees_it(monkeypatch):
    opts = {"path": str(ORACLE / "v2-gzip-headers-0")}
    good = list(arrow_rows.read_partition_rows(opts, [], None))  # nothing planned: no rows, no error
    assert good == []
    monkeypatch.setattr(arrow_rows, "_partition_rows", lambda *a: iter([_bad_batch()]))
    with pytest.raises(pa.ArrowInvalid, match="offset"):
        list(arrow_rows.read_partition_rows(opts, [], None))


def test_real_batches_pass_the_validation():
    from kltool.spark import datasource as ds

    for d in ("v2-gzip-headers-0", "v2-txn-0", "v1-gzip-0", "v0-snappy-0", "v2-mixed-codecs-0"):
        o = ds.normalize_options({"path": str(ORACLE / d)})
        n = 0
        for part in ds.KafkaLogReader(o, None, 2).partitions():
            for b in arrow_rows.read_partition_rows(o, part, None):
                b.validate(full=True)
                n += b.num_rows
        assert n > 0, d


def test_in_task_freezes_the_collector_only_in_a_spark_task():
    # pyspark's daemon runs gc.collect() after every task in a reused worker; in_task() freezes what is alive
    # there. Outside a Spark task (a driver, this test process) it must leave the collector alone.
    import gc

    from kltool.spark.arrow_rows import in_task

    before = gc.get_freeze_count()
    in_task()
    assert gc.get_freeze_count() == before
