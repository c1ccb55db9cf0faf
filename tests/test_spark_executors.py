"""What an executor's Python needs. An executor whose Python has pyspark, pyarrow and crc32c but not a
codec library must fail the job with one line naming the codec's package and the executor, never count
the compressed batches as 0 records. The Python here is a real one without those packages: this venv's
interpreter run with ``-S`` over a copy of its site-packages (as symlinks) that leaves them out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ORACLE
from .test_spark_helpers import kltool_records

REPO = Path(__file__).resolve().parents[1]
CODECS = ("lz4", "zstandard", "cramjam")


def python_without(tmp_path: Path, *packages: str, kltool: str = str(REPO)) -> str:
    """A script that runs this Python with every installed package but ``packages`` (and kltool from
    ``kltool``: the repository, or a shipped zip): an executor's interpreter that lacks them."""
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    farm = tmp_path / "site"
    farm.mkdir()
    for entry in site.iterdir():
        name = entry.name.split("-")[0].split(".")[0].lower()
        if name in packages or name.startswith("__editable__") or entry.suffix == ".pth":
            continue
        (farm / entry.name).symlink_to(entry)
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{farm}:{kltool}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" -S "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_the_python_without_codecs_lacks_them_and_has_the_rest(tmp_path):
    py = python_without(tmp_path, *CODECS)
    r = subprocess.run([py, "-c", "import pyarrow, crc32c, kltool; import lz4"], capture_output=True, text=True)
    assert "No module named 'lz4'" in r.stderr


@pytest.mark.parametrize(("name", "package"), [("v0-lz4-0", "lz4"), ("v2-mixed-codecs-0", "")])
def test_reading_compressed_records_without_the_codec_is_an_error_naming_it(tmp_path, name, package):
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    py = python_without(tmp_path, *CODECS)
    code = ("import sys\nfrom kltool.spark import datasource as ds\nfrom kltool.errors import KltoolError\n"
            "r = ds.KafkaLogReader(ds.normalize_options({'path': sys.argv[1]}))\n"
            "try:\n    print(sum(b.num_rows for p in r.partitions() for b in r.read(p)))\n"
            "except KltoolError as e:\n    print(type(e).__name__, e)\n")
    r = subprocess.run([py, "-c", code, str(ORACLE / name)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    assert out.startswith("MissingDependency "), out
    assert "compressed data needs the " in out and "(on the executor on " in out and "pip install" in out
    if package:
        assert f"needs the {package} package" in out


def test_a_shipped_kltool_without_crc32c_is_an_error_naming_it(tmp_path):
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from kltool.spark import kltool_zip

    zipped = kltool_zip(str(tmp_path))  # no C accelerator: crc32c comes from the crc32c package
    py = python_without(tmp_path, "crc32c", kltool=zipped)
    code = ("import sys\nfrom kltool.spark import datasource as ds\nfrom kltool.errors import KltoolError\n"
            "r = ds.KafkaLogReader(ds.normalize_options({'path': sys.argv[1]}))\n"
            "try:\n    print(sum(b.num_rows for p in r.partitions() for b in r.read(p)))\n"
            "except KltoolError as e:\n    print(type(e).__name__, e)\n")
    r = subprocess.run([py, "-c", code, str(ORACLE / "v2-gzip-headers-0")], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("MissingDependency kltool needs the crc32c package"), r.stdout
    assert "pip install crc32c" in r.stdout and "(on the executor on " in r.stdout


def test_dump_without_the_codec_fails_in_one_line(tmp_path):
    py = python_without(tmp_path, *CODECS)
    r = subprocess.run([py, "-m", "kltool", "dump", "--records", str(ORACLE / "v0-lz4-0")], capture_output=True,
                       text=True)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "lz4-compressed data needs the lz4 package" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.spark
@pytest.mark.slow
def test_spark_executors_without_the_codec_fail_the_job_naming_it(tmp_path):
    pytest.importorskip("pyspark")
    assert shutil.which("java") is not None
    from kltool.errors import KltoolError
    from kltool.spark import session, spark_error

    os.environ.pop("PYSPARK_PYTHON", None)
    py = python_without(tmp_path, *CODECS)
    spark = session("local[1]", "kltool-executors", conf={"spark.pyspark.python": py})
    try:
        df = spark.read.format("kafka-log").load(str(ORACLE / "v0-lz4-0"))
        with pytest.raises(Exception) as ei:
            df.count()
        err = spark_error(ei.value)
        assert isinstance(err, KltoolError)
        assert "lz4-compressed data needs the lz4 package" in str(err) and "executor on" in str(err)
        gzip = str(ORACLE / "v1-gzip-0")  # zlib: in every Python
        assert spark.read.format("kafka-log").load(gzip).count() == len(kltool_records([gzip])) > 0
    finally:
        spark.stop()
        os.environ.pop("PYSPARK_PYTHON", None)
