"""The API's routes, one :class:`fastapi.APIRouter` per family, included by
:func:`service.api.app.create_app`:

``health``     ``GET /healthz``, ``GET /readyz`` (open)
``knowledge``  ``GET /releases``, ``GET /search``, ``POST /lint``, ``GET /rules``
``triage``     ``POST /triage`` (the triage use case), ``GET /triage/{id}``
``incidents``  ``POST /incidents/{id}/confirm``, ``GET /incidents``
"""

from __future__ import annotations

from service.api.routes import health, incidents, knowledge, triage

__all__ = ["health", "incidents", "knowledge", "triage"]
