"""The optional C accelerator (``_speedups``, built by setup.py from ``_speedups_c/`` when a compiler is there;
``_speedups.pyi`` types its entry points).

``C`` is the compiled module, or None when it is not built or ``KLTOOL_NO_SPEEDUPS=1`` (also the older
``KLTOOL_PURE_PYTHON=1``) asks for the pure-Python reference paths. Callers look ``C`` up at call
time (``speedups.C``), so that tests can switch it off in-process. Every compiled path has a
pure-Python twin that stays the reference: tests check both give identical results.
"""

from __future__ import annotations

import os

ABI = 13  # the interface this code expects: KL_SPEEDUPS_ABI in _speedups_c/speedups.h (a stale build is not used)


def _load():
    if os.environ.get("KLTOOL_NO_SPEEDUPS") or os.environ.get("KLTOOL_PURE_PYTHON"):
        return None
    try:
        from . import _speedups
    except ImportError:  # pragma: no cover - depends on the build
        return None
    if getattr(_speedups, "ABI", 1) != ABI:  # built from an older _speedups.c: rebuild (pip install -e .)
        return None
    return _speedups


C = _load()

if C is not None:
    crc32c = C.crc32c  # SSE4.2 when the CPU has it; also spares the crc32c package's import cost
else:
    from crc32c import crc32c  # noqa: F401
