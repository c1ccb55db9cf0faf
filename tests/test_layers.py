"""Layers point one way: format <- storage <- (commands, spark). A test over every module's imports
(top level and inside functions), so a second path from a lower layer up cannot creep back in."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "kltool"

# layer -> packages/modules of kltool it must never import
FORBIDDEN = {
    "format": {"storage", "commands", "spark", "cli", "output"},
    "storage": {"commands", "spark", "cli", "output"},
    "spark": {"commands", "cli"},
    "timeutil": {"storage", "commands", "spark", "cli", "output", "format"},
}


def _kltool_imports(path: Path) -> set[str]:
    """First component below ``kltool`` of every kltool import in ``path``."""
    rel = path.relative_to(PKG).with_suffix("").parts
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel[:len(rel) - node.level])  # the package the dots name
                parts = base + (node.module.split(".") if node.module else [])
                if parts:
                    out.add(parts[0])
                else:  # "from .. import x" at the top: x is the module
                    out.update(a.name for a in node.names)
            elif node.module and node.module.split(".")[0] == "kltool":
                parts = node.module.split(".")[1:]
                out.update([parts[0]] if parts else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "kltool" and len(parts) > 1:
                    out.add(parts[1])
    return out


def _modules(layer: str) -> list[Path]:
    p = PKG / layer
    return sorted(p.rglob("*.py")) if p.is_dir() else [p.with_suffix(".py")]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_lower_layers_never_import_upper_ones(layer):
    bad = []
    for path in _modules(layer):
        up = _kltool_imports(path) & FORBIDDEN[layer]
        if up:
            bad.append(f"{path.relative_to(PKG)} imports {sorted(up)}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_relative_and_absolute_imports():
    assert {"errors", "storage"} <= _kltool_imports(PKG / "spark" / "datasource.py")
    assert {"format", "storage"} <= _kltool_imports(PKG / "storage" / "retention.py")
