"""The service: the triage engine, replay of the release's own validation, and the front ends.

``engine``   the triage engine (stage sub-packages; its ``__init__`` is its public API)
``replay``   SGLang's own validation on a command line, in a subprocess
``usecase``  the triage every front end runs: parse once, on-demand ingest, engine, fix
             search; then, for the front ends that keep answers, the record and the replay
``ondemand`` on-demand ingest of a release the KB lacks (the front ends' only way to ingest)
``api``      FastAPI (``POST /triage`` ...); ``web`` the page; ``slack`` the bot; ``cli``
``wiring``   the KB, engine and records the front ends share
``settings`` :class:`~service.settings.Settings`; ``errors`` the service's error branch
"""

__all__ = [
    "api",
    "cli",
    "engine",
    "errors",
    "ondemand",
    "replay",
    "settings",
    "slack",
    "usecase",
    "web",
    "wiring",
]
