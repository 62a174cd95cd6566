"""The root of every exception sglang-triage raises on purpose, and the KB's own errors.

One tree, in the manner of httpx; each part owns its branch and the root is here,
in the lowest layer::

    TriageError                  base class; catch this to catch them all    (kb.errors)
    ├── ConfigError              a setting is missing or malformed           (kb.errors)
    │   └── DevBuildNeedsGit     a dev build, and TRIAGE_SGLANG_GIT unset    (ingest.acquire.git)
    ├── AcquireError             a release could not be fetched or read      (kb.errors)
    │   ├── VersionNotFound      no version could be read from a source tree
    │   └── GitFetchError        a dev build's commit could not be fetched   (ingest.acquire.git)
    ├── KBError                  the knowledge base is unusable              (kb.errors)
    │   ├── ReleaseNotIngested   the release asked for is not in the KB
    │   └── VectorStoreError     Chroma is unreachable or failed
    ├── UnsafeExpression         a condition uses syntax the reader refuses  (kb.errors)
    ├── LogParseError            the input is not a crash log we can read    (service.engine.errors)
    │   ├── EmptyInput           nothing but whitespace
    │   ├── BinaryInput          NUL bytes or not UTF-8
    │   ├── InputTooLarge        over the configured size limit
    │   └── NoCrashFound         text, but no traceback / exception / argparse error
    ├── UnknownRelease           no ingested release matches the evidence    (service.engine.errors)
    └── ReplayError              the replay harness itself failed            (service.replay.errors)

Front ends map these to answers: ``LogParseError`` subclasses become 4xx
responses, ``ReleaseNotIngested``/``UnknownRelease`` become 404/422, and
anything else is reported with its message rather than a bare 500.
The whole tree is documented in ``docs/errors.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AcquireError",
    "ConfigError",
    "KBError",
    "ReleaseNotIngested",
    "TriageError",
    "UnsafeExpression",
    "VectorStoreError",
    "VersionNotFound",
]


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


class UnsafeExpression(TriageError):
    """A condition uses syntax outside the evaluator's whitelist."""
