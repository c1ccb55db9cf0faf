"""Value classes without :mod:`dataclasses`, for the classes every command imports.

``@dataclass`` writes and compiles the methods of each class when its module is imported: 0.5-1 ms a
class, about 5 ms of a ``kltool verify`` run for the eight on every command's path, a twentieth of the
whole run on 223 MB. Those classes write their ``__init__`` out (the fastest to call, too) and take
``__eq__`` and ``__repr__`` from :class:`Plain`, as a dataclass would have them: from the fields named
in ``_fields``, in order. Classes off that path stay dataclasses.
"""

from __future__ import annotations

__all__ = ["Plain", "FrozenPlain"]


class Plain:
    """``__eq__`` (same class, equal fields) and ``__repr__`` over ``_fields``; unhashable, as a dataclass
    with ``eq=True``."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, n) for n in self._fields)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self._fields)})"


class FrozenPlain(Plain):
    """A :class:`Plain` that is not changed after ``__init__`` (by convention), so hashable by its fields,
    as a ``frozen=True`` dataclass."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._values())
