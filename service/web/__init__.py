"""The triage web page (``/``, ``/t/{id}``, ``/static/``): see :mod:`service.web.routes`."""

from __future__ import annotations

from service.web.routes import mount_web, web_router

__all__ = ["mount_web", "web_router"]
