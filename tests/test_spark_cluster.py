"""kltool on a real Spark cluster: ``local-cluster[2,1,1024]`` (a master and two workers whose
executors are separate JVMs with their own Python workers), with executors whose Python has pyspark
and pyarrow but not kltool: kltool is shipped with the job (``ship=True``: a zip via addPyFile) and
runs its pure-Python decoder there. The answers equal ``local[2]``'s and kltool's own reading."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import ORACLE, REAL, ROOT
from .test_spark_helpers import kltool_records

pytestmark = [pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("pyspark")

PATHS = [REAL / "william0423-indexed-zk", ORACLE / "v2-multi-segment-0", ORACLE / "v2-txn-0", ORACLE / "v1-gzip-0",
         ORACLE / "v2-gzip-headers-0", ORACLE / "damaged-v2-zero-tail-0"]

HIDE = '''
import importlib.machinery, sys

class _OnlyShipped:
    """kltool is not installed on these executors: only a kltool shipped as a zip can be imported."""
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "kltool" and not fullname.startswith("kltool."):
            return None
        if fullname == "kltool":
            path = [p for p in sys.path if p.endswith(".zip")]
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or ".zip" not in str(spec.origin):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return spec

sys.meta_path.insert(0, _OnlyShipped())
'''

JOB = '''
import base64, json, sys
from kltool.spark import session
from kltool.spark.reports import counts, load, sizes
from pyspark.sql import functions as F

def run(master, conf, ship):
    spark = session(master, "kltool-cluster-test", conf=conf, ship=ship)
    def where(_):
        import kltool
        from kltool.format import speedups
        yield [kltool.__file__, speedups.C is None]
    executors = spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect()
    df = load(spark, PATHS)
    recs = [[r.topic, r.partition, r.offset, r.ts, None if r.key is None else base64.b64encode(r.key).decode(),
             None if r.value is None else base64.b64encode(r.value).decode()]
            for r in df.select("topic", "partition", "offset", F.unix_millis("timestamp").alias("ts"), "key", "value")
            .collect()]
    out = {"executors": executors, "records": sorted(recs), "tasks": df.rdd.getNumPartitions(),
           "counts": [r.asDict() for r in counts(spark, PATHS).collect()],
           "sizes": [r.asDict() for r in sizes(spark, PATHS).collect()]}
    spark.stop()
    return out

PATHS = json.loads(sys.argv[1])
res = {"local": run("local[2]", {}, False),
       "cluster": run("local-cluster[2,1,1024]", {"spark.pyspark.python": sys.argv[2], "spark.executor.memory": "512m",
                                                  "spark.executor.cores": "1"}, True)}
print(json.dumps(res, default=str))
'''


def test_local_cluster_with_kltool_shipped_equals_local(tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE)
    wrapper = tmp_path / "python-without-kltool"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={hide} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    check = subprocess.run([str(wrapper), "-c", "import kltool"], capture_output=True, text=True)
    assert check.returncode != 0 and "No module named 'kltool'" in check.stderr  # really not there
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    p = subprocess.run([sys.executable, str(job), json.dumps([str(x) for x in PATHS]), str(wrapper)],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    local, cluster = res["local"], res["cluster"]
    assert all(f.startswith("./kltool.zip/") or "kltool.zip" in f for f, _pure in cluster["executors"])
    assert all(pure for _f, pure in cluster["executors"])  # no C accelerator in the zip: pure Python
    assert cluster["records"] == local["records"]
    assert cluster["counts"] == local["counts"] and cluster["sizes"] == local["sizes"]
    truth = kltool_records(PATHS)
    assert [r[:4] for r in local["records"]] == [[t[0], t[1], t[2], t[3]] for t in truth]
