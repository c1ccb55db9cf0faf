"""One finding type for every command that reports problems (verify, repair, retention, dump).

``Finding.to_json()`` is the ``finding`` object of ``--json`` (docs/json-lines.md): ``severity``
(``error`` or ``warning``), ``kind``, ``file``, ``position``, ``offset``, ``message``, and ``length``
(the damaged bytes) when known. A finding of severity ``info`` is a note, not a problem: it is written
as ``{"type": "note", "kind", "file", "message"}``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Finding", "SEVERITIES"]

SEVERITIES = ("error", "warning", "info")


@dataclass(slots=True)
class Finding:
    severity: str  # error | warning | info
    kind: str
    file: str
    message: str
    position: int | None = None  # byte position in ``file``
    offset: int | None = None  # the offset it concerns
    length: int | None = None  # bytes affected (damaged region)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"finding severity must be one of {SEVERITIES}, not {self.severity!r}")
        self.file = str(self.file)

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
