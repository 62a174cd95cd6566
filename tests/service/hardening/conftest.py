"""Reuse the loopback server fixtures of the API tests."""

from __future__ import annotations

from ..api.conftest import api_settings, client, server  # noqa: F401
