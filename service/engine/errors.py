"""The engine's branch of the error tree (the root is :class:`kb.errors.TriageError`).

``LogParseError`` and its subclasses describe input the engine cannot read (front
ends answer 4xx); ``UnknownRelease`` evidence that no ingested release matches.
"""

from __future__ import annotations

from kb.errors import TriageError

__all__ = [
    "BinaryInput",
    "EmptyInput",
    "InputTooLarge",
    "LogParseError",
    "NoCrashFound",
    "UnknownRelease",
]


class LogParseError(TriageError):
    """The input could not be read as a crash log."""


class EmptyInput(LogParseError):
    """The input is empty or only whitespace."""


class BinaryInput(LogParseError):
    """The input holds NUL bytes or is not valid UTF-8."""


class InputTooLarge(LogParseError):
    """The input is larger than the configured limit."""


class NoCrashFound(LogParseError):
    """Text was given, but it holds no traceback, exception line or argparse error."""


class UnknownRelease(TriageError):
    """No ingested release matches the evidence in the log."""
