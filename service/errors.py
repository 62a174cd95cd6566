"""The service's branch of the error tree (the root, ``TriageError``, is :mod:`kb.errors`).

``LogParseError`` and its subclasses describe input we cannot read (front ends
answer 4xx), ``UnknownRelease`` evidence no ingested release matches, and
``ReplayError`` a failure of the replay harness itself (never SGLang's verdict).
The KB's errors are re-exported here so front ends catch the whole tree from
one module.
"""

from __future__ import annotations

from kb.errors import (
    AcquireError,
    ConfigError,
    KBError,
    ReleaseNotIngested,
    TriageError,
    UnsafeExpression,
    VectorStoreError,
    VersionNotFound,
)

__all__ = ["AcquireError", "BinaryInput", "ConfigError", "EmptyInput", "InputTooLarge", "KBError",
           "LogParseError", "NoCrashFound", "ReleaseNotIngested", "ReplayError", "TriageError",
           "UnknownRelease", "UnsafeExpression", "VectorStoreError", "VersionNotFound"]


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


class ReplayError(TriageError):
    """The replay harness failed for reasons of its own (never SGLang's verdict)."""
