"""Only for the optional C accelerator; all metadata is in pyproject.toml.

The extension is optional: when it cannot be compiled, kltool uses its pure-Python decoder
(identical results, about 5x slower on --deep/--records work).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kltool.format._speedups", ["kltool/format/_speedups.c"], optional=True,
                             extra_compile_args=["-O2"])])
