"""Only for the optional C accelerator; all metadata is in pyproject.toml.

The extension is optional: when it cannot be compiled (or with KLTOOL_NO_SPEEDUPS=1), kltool uses its
pure-Python reference paths for the batch walk and CRC-32C, record decoding and encoding, dump's output
and append's JSON reader: identical results, 5-10x slower on those paths.

It is one module, ``kltool.format._speedups``, compiled from the sources in kltool/format/_speedups_c/
(one file per concern, module.c lists the entry points; speedups.h is their private header).
"""

import glob
import os

from setuptools import Extension, setup

os.chdir(os.path.dirname(os.path.abspath(__file__)))  # setuptools wants the paths relative to the project
SRC = "kltool/format/_speedups_c"
SOURCES = sorted(glob.glob(f"{SRC}/*.c"))

setup(ext_modules=[Extension("kltool.format._speedups", SOURCES, depends=[f"{SRC}/speedups.h"], optional=True,
                             extra_compile_args=["-O2", "-fvisibility=hidden"])])
