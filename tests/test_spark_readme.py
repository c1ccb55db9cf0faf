"""The README's PySpark example, run as a user runs it: by a venv's python given by its full path, with
the venv not on PATH (PATH's python3 has neither kltool nor pyspark) and no PYSPARK_PYTHON. pyspark
starts a registered data source's planning worker with PYSPARK_PYTHON, else python3 on PATH:
``register(spark)`` must make the example work anyway."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("From your own PySpark code")
    m = re.search(r"```python\n(.*?)```", text[start:], re.S)
    return m.group(1)


def test_the_readme_pyspark_example_runs_from_a_venv_not_on_path(tmp_path, kl):
    pytest.importorskip("pyspark")
    java = shutil.which("java")
    assert java is not None
    ld = tmp_path / "kafka-logs"
    assert kl("create", ld, "orders", "-p", "4").code == 0
    stdin = "".join(json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n" for i in range(50))
    assert kl("append", ld, "orders", "-p", "3", stdin=stdin).code == 0
    code = readme_example().replace("/opt/venv/bin/python", sys.executable).replace("/backup/kafka-logs", str(ld))
    code = code.replace("390000", "30")  # the example's offset, inside the 50 records written here
    lines = code.rstrip().splitlines()
    lines = [ln if not ln.startswith(("df.where", "spark.read")) or "\\" in ln else f"print({ln.split('  #')[0]})"
             for ln in lines]
    code = "\n".join(lines).replace(".config(\"spark.pyspark.python\"", ".master(\"local[1]\")\n         .config(\"spark.ui.enabled\", \"false\")\n         .config(\"spark.pyspark.python\"", 1)
    code += "\nprint('df', df.count())\nspark.stop()\n"
    script = tmp_path / "example.py"
    script.write_text(code)
    path = os.pathsep.join(d for d in ("/usr/bin", "/bin", os.path.dirname(os.path.realpath(java))) if d)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV"))}
    env.update(PATH=path)
    env.pop("PYTHONPATH", None)
    python3 = shutil.which("python3", path=path)
    if python3 is not None:
        probe = subprocess.run([python3, "-c", "import kltool, pyspark"], capture_output=True, env=env, cwd=tmp_path)
        assert probe.returncode != 0, "PATH's python3 must lack kltool/pyspark for this test to mean anything"
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "df 50" in r.stdout, r.stdout
