"""One finding type for every command that reports problems (verify, repair, retention, dump).

``Finding.to_json()`` is the ``finding`` object of ``--json`` (docs/json-lines.md): ``severity``
(``error`` or ``warning``), ``kind``, ``file``, ``position``, ``offset``, ``message``, and ``length``
(the damaged bytes) when known. A finding of severity ``info`` is a note, not a problem: it is written
as ``{"type": "note", "kind", "file", "message"}``.
"""

from __future__ import annotations

from ..plain import Plain

__all__ = ["Finding", "SEVERITIES"]

SEVERITIES = ("error", "warning", "info")


class Finding(Plain):
    """``severity``: error, warning or info; ``position``: the byte position in ``file``; ``offset``: the
    offset it concerns; ``length``: the bytes affected (a damaged region)."""

    __slots__ = _fields = ("severity", "kind", "file", "message", "position", "offset", "length")

    def __init__(self, severity: str, kind: str, file: str, message: str, position: int | None = None,
                 offset: int | None = None, length: int | None = None):
        if severity not in SEVERITIES:
            raise ValueError(f"finding severity must be one of {SEVERITIES}, not {severity!r}")
        self.severity = severity
        self.kind = kind
        self.file = str(file)
        self.message = message
        self.position = position
        self.offset = offset
        self.length = length

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def to_json(self) -> dict:
        if self.severity == "info":
            return {"type": "note", "kind": self.kind, "file": self.file, "message": self.message}
        return {"type": "finding", "severity": self.severity, "kind": self.kind, "file": self.file,
                "message": self.message, "position": self.position, "offset": self.offset, "length": self.length}

    def line(self) -> str:
        """The text form: ``ERROR   kind   file:position offset N: message``."""
        loc = self.file + (f":{self.position}" if self.position is not None else "")
        off = f" offset {self.offset}" if self.offset is not None else ""
        return f"{self.severity.upper():7} {self.kind:20} {loc}{off}: {self.message}"
