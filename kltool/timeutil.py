"""Times as users write them and as kltool prints them: epoch milliseconds <-> ISO-8601 (UTC).

Below ``commands``, ``storage`` and ``spark`` alike, so that every layer reads and writes times the same
way (``kltool dump --from-time``, ``kltool retention --now``, the ``kafka-log`` data source's options,
retention's notes)."""

from __future__ import annotations

import datetime as _dt

from .errors import UsageError

__all__ = ["parse_time", "format_time"]


def parse_time(value: str | None) -> int | None:
    """ISO-8601 (naive = UTC), ``now`` or epoch milliseconds → epoch ms; None stays None."""
    if value is None:
        return None
    v = value.strip()
    if v.lstrip("-").isdigit():
        return int(v)
    if v.lower() == "now":
        return int(_dt.datetime.now(_dt.UTC).timestamp() * 1000)
    try:
        d = _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"cannot read time {value!r}: use ISO-8601 (2024-05-01T12:00:00Z) or epoch ms") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.UTC)
    return int(d.timestamp() * 1000)


def format_time(ms: int | None) -> str:
    """Epoch ms → ``2024-05-01T12:00:00.000Z``; ``-`` for None or a negative (no) timestamp, the bare
    number when it is out of the calendar's range."""
    if ms is None or ms < 0:
        return "-"
    try:
        return _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)
