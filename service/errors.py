"""The whole error tree in one module, for the front ends.

The root and the KB's errors live in :mod:`kb.errors`, the engine's input errors
in :mod:`service.engine.errors`, replay's own failure in
:mod:`service.replay.errors`; see ``docs/architecture.md`` for the tree.
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
from service.engine import (
    BinaryInput,
    EmptyInput,
    InputTooLarge,
    LogParseError,
    NoCrashFound,
    UnknownRelease,
)
from service.replay.errors import ReplayError

__all__ = [
    "AcquireError",
    "BinaryInput",
    "ConfigError",
    "EmptyInput",
    "InputTooLarge",
    "KBError",
    "LogParseError",
    "NoCrashFound",
    "ReleaseNotIngested",
    "ReplayError",
    "TriageError",
    "UnknownRelease",
    "UnsafeExpression",
    "VectorStoreError",
    "VersionNotFound",
]
