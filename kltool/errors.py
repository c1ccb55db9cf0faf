"""kltool's exceptions. Every error a user can cause is a KltoolError with an exit code."""

from __future__ import annotations

import errno as _errno

__all__ = ["KltoolError", "CorruptDataError", "UsageError", "PathNotFound", "PathNotReadable", "BrokerLockHeld",
           "UnsafeOperation"]


class KltoolError(Exception):
    """Base class: a one-line message naming the file and byte position."""

    exit_code = 2

    def __init__(self, message: str, *, path=None, position: int | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.position = position

    def at(self, path=None, position: int | None = None) -> KltoolError:
        """Fill in the location if it is not known yet; returns self (for ``raise e.at(...)``)."""
        if self.path is None and path is not None:
            self.path = path
        if position is not None:
            self.position = position if self.position is None else self.position
        return self

    def __str__(self) -> str:
        loc = "" if self.path is None else str(self.path)
        if self.position is not None:
            loc = f"{loc} at byte {self.position}" if loc else f"byte {self.position}"
        return f"{loc}: {self.message}" if loc else self.message


class CorruptDataError(KltoolError):
    """Bytes that are not what Kafka writes."""


class MissingDependency(KltoolError):
    """A package this data needs (a codec library, crc32c) is not installed in the running Python: never
    a reason to skip data as undecodable."""


class UsageError(KltoolError):
    """Bad arguments or a path that is not what the command needs."""


class PathNotFound(UsageError, FileNotFoundError):
    """A path that does not exist (also a FileNotFoundError, for code that catches that)."""

    def __init__(self, path):
        super().__init__("no such file or directory", path=path)
        self.errno, self.strerror, self.filename = _errno.ENOENT, "no such file or directory", str(path)


class PathNotReadable(UsageError, PermissionError):
    """A path kltool may not read (also a PermissionError)."""

    def __init__(self, path):
        super().__init__("permission denied", path=path)
        self.errno, self.strerror, self.filename = _errno.EACCES, "permission denied", str(path)


class BrokerLockHeld(KltoolError):
    """A live broker holds the log dir's .lock."""

    exit_code = 3


class UnsafeOperation(KltoolError):
    """A write that would lose data or cannot be done safely."""

    exit_code = 3
