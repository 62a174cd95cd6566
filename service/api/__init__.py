"""FastAPI front end: ``POST /triage`` and the rest of the HTTP API (:mod:`service.api.app`)."""
