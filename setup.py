"""Only for the optional C accelerator; all metadata is in pyproject.toml.

The extension is optional: when it cannot be compiled (or with KLTOOL_NO_SPEEDUPS=1), kltool uses its
pure-Python reference paths for the batch walk and CRC-32C, record decoding and encoding, dump's output
and append's JSON reader: identical results, 5-10x slower on those paths.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kltool.format._speedups", ["kltool/format/_speedups.c"], optional=True,
                             extra_compile_args=["-O2"])])
