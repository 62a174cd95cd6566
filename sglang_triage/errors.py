"""Every exception sglang-triage raises on purpose, in one place.

The tree, in the manner of httpx::

    TriageError                  base class; catch this to catch them all
    ├── ConfigError              a setting is missing or malformed
    ├── AcquireError             a release could not be fetched or read
    │   └── VersionNotFound      no version could be read from a source tree
    ├── KBError                  the knowledge base is unusable
    │   ├── ReleaseNotIngested   the release asked for is not in the KB
    │   └── VectorStoreError     Chroma is unreachable or failed
    ├── LogParseError            the input is not a crash log we can read
    │   ├── EmptyInput           nothing but whitespace
    │   ├── BinaryInput          NUL bytes or not UTF-8
    │   ├── InputTooLarge        over the configured size limit
    │   └── NoCrashFound         text, but no traceback / exception / argparse error
    ├── UnknownRelease           no ingested release matches the evidence
    ├── UnsafeExpression         a condition uses syntax the evaluator refuses
    └── ReplayError              the replay harness itself failed

Front ends map these to answers: ``LogParseError`` subclasses become 4xx
responses, ``ReleaseNotIngested``/``UnknownRelease`` become 404/422, and
anything else is reported with its message rather than a bare 500.
"""

from __future__ import annotations

from typing import Any


class TriageError(Exception):
    """Base class of every deliberate sglang-triage error.

    ``details`` carries structured context (what was understood so far) that
    front ends put into their error bodies.
    """

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}


class ConfigError(TriageError):
    """A setting is missing or malformed."""


class AcquireError(TriageError):
    """A release could not be downloaded, unpacked or read."""


class VersionNotFound(AcquireError):
    """A source tree carries neither package metadata nor ``sglang/version.py``."""


class KBError(TriageError):
    """The knowledge base is missing, corrupt or unreachable."""


class ReleaseNotIngested(KBError):
    """The release asked for has not been ingested into this KB."""


class VectorStoreError(KBError):
    """Chroma could not be reached or answered with an error."""


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


class UnsafeExpression(TriageError):
    """A condition uses syntax outside the evaluator's whitelist."""


class ReplayError(TriageError):
    """The replay harness failed for reasons of its own (never SGLang's verdict)."""
