"""Replay's branch of the error tree (the root is :class:`kb.errors.TriageError`)."""

from __future__ import annotations

from kb.errors import TriageError

__all__ = ["ReplayError"]


class ReplayError(TriageError):
    """The replay harness failed for reasons of its own (never SGLang's verdict)."""
