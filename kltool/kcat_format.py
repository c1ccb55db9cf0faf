"""kcat's ``-f`` format strings for ``dump --format``: compiled once into a function that writes one
record's text. Formatting, not byte parsing: the records come decoded from storage, their bytes are shown
through :func:`kltool.output.text_bytes` as every other text line is.

Tokens: %t topic, %p partition, %o offset, %k key, %K key length, %s value, %S value length (-1 for
null), %T timestamp (epoch ms), %h headers (k=v,...), %% a percent sign; escapes \\n \\r \\t \\\\ and
\\xHH. No newline is added (end the format with \\n), as in kcat.
"""

from __future__ import annotations

from .errors import UsageError
from .format.records import java_long
from .output import text_bytes, visible

TOKENS = "tpokKsSTh"
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}
_HEX = frozenset("0123456789abcdefABCDEF")


def _text(b, encoding) -> str:
    return "" if b is None else text_bytes(b, encoding)


def _length(b) -> str:
    return str(-1 if b is None else len(b))


# token -> f(topic, partition, offset, ts, key, value, headers, encoding) -> str
_FIELDS = {
    "t": lambda t, p, o, ts, k, v, h, e: "" if t is None else visible(t),
    "p": lambda t, p, o, ts, k, v, h, e: "" if p is None else str(p),
    "o": lambda t, p, o, ts, k, v, h, e: str(java_long(o)),
    "T": lambda t, p, o, ts, k, v, h, e: str(ts),
    "k": lambda t, p, o, ts, k, v, h, e: _text(k, e),
    "s": lambda t, p, o, ts, k, v, h, e: _text(v, e),
    "K": lambda t, p, o, ts, k, v, h, e: _length(k),
    "S": lambda t, p, o, ts, k, v, h, e: _length(v),
    "h": lambda t, p, o, ts, k, v, h, e: ",".join(f"{text_bytes(hk)}={_text(hv, e)}" for hk, hv in h),
}


def _percent(fmt: str, i: int) -> str:
    """The token after the ``%`` at ``i``: ``%`` for a literal percent sign, else a field letter."""
    t = fmt[i + 1]
    if t == "%" or t in TOKENS:
        return t
    if t == "R":
        raise UsageError("--format: %R (binary value length) is not supported on a text stream; use %S")
    raise UsageError(f"--format: unknown token %{t} (kcat's: %t %p %o %k %K %s %S %T %h)")


def _escape(fmt: str, i: int) -> tuple[str, int]:
    """The text of the backslash escape at ``i`` and its length (a lone backslash stays itself)."""
    t = fmt[i + 1]
    if t in _ESCAPES:
        return _ESCAPES[t], 2
    digits = fmt[i + 2:i + 4]
    if t == "x" and len(digits) == 2 and set(digits) <= _HEX:
        return chr(int(digits, 16)), 4
    return "\\", 1


def parse(fmt: str) -> list[str | tuple[str]]:
    """``fmt`` as a list of literal strings and ``(token,)`` fields. UsageError for an unknown token."""
    parts: list = []
    lit: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        c = fmt[i]
        if c == "%" and i + 1 < n:
            t = _percent(fmt, i)
            if t == "%":
                lit.append("%")
            else:
                if lit:
                    parts.append("".join(lit))
                    lit = []
                parts.append((t,))
            i += 2
        elif c == "\\" and i + 1 < n:
            text, k = _escape(fmt, i)
            lit.append(text)
            i += k
        else:
            lit.append(c)
            i += 1
    if lit:
        parts.append("".join(lit))
    return parts


def compile_format(fmt: str):
    """A kcat-style ``-f`` format compiled: ``f(topic, partition, offset, ts, key, value, headers, encoding)
    -> str``. UsageError for an unknown token."""
    steps = [(lambda *_, s=p: s) if isinstance(p, str) else _FIELDS[p[0]] for p in parse(fmt)]

    def render(topic, partition, offset, ts, key, value, headers, encoding) -> str:
        return "".join([f(topic, partition, offset, ts, key, value, headers, encoding) for f in steps])

    return render
