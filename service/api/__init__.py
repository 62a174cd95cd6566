"""FastAPI front end: ``POST /triage`` and the rest of the HTTP API (:mod:`service.api.app`;
the routes in :mod:`service.api.routes`, their dependencies in :mod:`service.api.deps`)."""
