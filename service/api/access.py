"""Who is asking, and what they may read and change.

Every request that passes the key check gets a :class:`Caller` (``request.state.caller``):

* with keys set (``TRIAGE_API_KEYS``, ``TRIAGE_TEAM_API_KEYS``), the owner is
  ``key:<hash>``, the first 32 hex digits of the SHA-256 of the bearer key: the key itself
  is never stored. A key listed in ``TRIAGE_TEAM_API_KEYS`` is a *team* key;
* on an open service (no keys) the owner is ``client:<address>``, the peer's address
  (behind a proxy trusted by uvicorn's ``--forwarded-allow-ips``, the forwarded one);
* the Slack bot's writes are owned by ``slack:<user id>`` (:mod:`service.slack.bot`).

The rules (:func:`may_read`, :func:`confirm_refusal`), the same for the API and Slack:

* a triage is readable by its owner and by team keys; a triage stored before owners existed
  (``owner`` NULL, a *legacy* record) by any valid key; on an open service by anyone;
* with keys, a triage may be confirmed only by its owner or a team key (a legacy triage by
  anyone who may read it); on an open service, and in Slack, anyone may make the first
  confirmation. An existing confirmation may be replaced only by whoever made it or a team
  key (a legacy confirmation, without owner, only by a team key);
* ``similar`` names (by id) only triages the caller may read; the others are shown
  without their id.

The wrong-key limit (:func:`check_key`) counts wrong keys per address, but never refuses a
request that carries a valid key: a client behind a NAT that shares an address with a
misconfigured one keeps working.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import HTTPException, Request

from kb.records import Records, owner_check
from service.api.limits import BoundedDict
from service.settings import Settings, reveal

__all__ = [
    "MAX_KEY_FAILURES",
    "Caller",
    "caller_of",
    "check_key",
    "client_address",
    "confirm_refusal",
    "key_owner",
    "keyed",
    "may_read",
    "rate_bucket",
    "readable_incidents",
    "redact_confirmation",
]

T = TypeVar("T")

#: Wrong keys one address may send in :data:`FAIL_WINDOW_S` before wrong keys get 429.
MAX_KEY_FAILURES = 10
FAIL_WINDOW_S = 60.0
#: Addresses whose wrong keys are remembered at once (least recently seen forgotten first).
MAX_FAILING_CLIENTS = 10_000


@dataclass(frozen=True)
class Caller:
    """Who sent a request: ``owner`` (stored with what they write) and whether it is a team
    key (reads and confirms everything)."""

    owner: str
    team: bool = False
    keyed: bool = False


def keyed(settings: Settings) -> bool:
    """Are keys required (``TRIAGE_API_KEYS`` or ``TRIAGE_TEAM_API_KEYS`` set)?"""
    return bool(settings.api_keys or settings.team_api_keys)


def key_owner(key: str) -> str:
    """The owner id of a bearer key: ``key:`` and 32 hex digits of its SHA-256."""
    return "key:" + hashlib.sha256(key.encode()).hexdigest()[:32]


def client_address(request: Request) -> str:
    """The peer's address (per-client limits, the owner on an open service)."""
    return request.client.host if request.client else "unknown"


def _matches(token: str, keys: list[str]) -> bool:
    """Is ``token`` one of ``keys``? Compared in constant time, every key tried."""
    given = token.encode()
    return any([hmac.compare_digest(given, k.encode()) for k in keys])


def _failures(request: Request) -> BoundedDict[str, list[float]]:
    state = request.app.state
    table = getattr(state, "key_failures", None)
    if not isinstance(table, BoundedDict):
        table = BoundedDict(MAX_FAILING_CLIENTS)
        state.key_failures = table
    return table


def check_key(request: Request, settings: Settings) -> Caller:
    """Admit the request or raise 401/429; the :class:`Caller` is also kept in
    ``request.state.caller``.

    A valid key is always admitted. A wrong one is counted against the sender's address;
    past :data:`MAX_KEY_FAILURES` in :data:`FAIL_WINDOW_S` further wrong keys get 429 (with
    ``Retry-After``) instead of 401. A missing key is 401 and not counted.
    """
    if not keyed(settings):
        caller = Caller(owner=f"client:{client_address(request)}")
        request.state.caller = caller
        return caller
    auth = request.headers.get("authorization", "")
    token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    team = [k for k in (reveal(s) for s in settings.team_api_keys) if k]
    plain = settings.api_key_values()
    is_team, is_plain = _matches(token, team), _matches(token, plain)
    if token and (is_team or is_plain):
        caller = Caller(owner=key_owner(token), team=is_team, keyed=True)
        request.state.caller = caller
        return caller
    if token:  # a wrong key counts towards the limit; a missing one does not
        failures = _failures(request)
        client = client_address(request)
        now = time.monotonic()
        recent = [t for t in failures.get(client) or [] if now - t < FAIL_WINDOW_S]
        if len(recent) >= MAX_KEY_FAILURES:
            failures[client] = recent
            wait = max(1, int(FAIL_WINDOW_S - (now - recent[0])) + 1)
            raise HTTPException(
                429,
                "too many wrong API keys from this address; wait a minute",
                headers={"Retry-After": str(wait)},
            )
        failures[client] = [*recent, now][-MAX_KEY_FAILURES:]
    raise HTTPException(
        401, "missing or wrong bearer API key", headers={"WWW-Authenticate": "Bearer"}
    )


def caller_of(request: Request, settings: Settings) -> Caller:
    """The request's :class:`Caller` (from :func:`check_key`, or worked out now)."""
    caller = getattr(request.state, "caller", None)
    if isinstance(caller, Caller):
        return caller
    return check_key(request, settings)


def may_read(caller: Caller, owner: str | None) -> bool:
    """May ``caller`` read a triage owned by ``owner`` (None: a legacy record)?"""
    return not caller.keyed or caller.team or owner is None or owner == caller.owner


def confirm_refusal(
    caller: Caller, triage_owner: str | None, confirmed: bool, confirmed_by: str | None
) -> str | None:
    """Why ``caller`` may not confirm this triage (None when it may); see the module doc."""
    check = owner_check(caller.owner, team=caller.team, any_first=not caller.keyed)
    return check(triage_owner, confirmed, confirmed_by)


def redact_confirmation(
    fix: dict[str, Any],
    note: str,
    settings: Settings,
) -> tuple[dict[str, Any], str]:
    """A confirmation's fix and note with secrets replaced by ``***`` (before they are
    stored, shown in ``similar`` and ``/incidents``, or copied into later answers): token
    shapes, the service's own keys, and the value of a secret-like flag (``--api-key``,
    ``--hf-token`` …) in ``fix.set``."""
    from service.engine import redact, redact_payload

    extra = [*settings.api_key_values(), *(k for k in map(reveal, settings.team_api_keys) if k)]
    fix = redact_payload(fix, extra)
    flags = fix.get("set")
    if isinstance(flags, dict):
        fix["set"] = {flag: _flag_value(flag, value, extra) for flag, value in flags.items()}
    return fix, str(redact(note, extra))


def _flag_value(flag: str, value: Any, extra: list[str]) -> Any:
    """``value`` of ``flag``, or ``***`` when the redactor hides it on a command line."""
    from service.engine import REDACTED, redact

    if isinstance(value, str | int | float) and not isinstance(value, bool):
        probe = f"python -m sglang.launch_server {flag} {value}"
        if REDACTED in str(redact(probe, extra)) and REDACTED not in probe:
            return REDACTED
    return value


def readable_incidents(caller: Caller, incidents: list[T], records: Records) -> list[T]:
    """The ``incidents`` (``id`` ``rec-<triage id>``) whose triage ``caller`` may read."""
    if not caller.keyed or caller.team:
        return incidents
    out = []
    for inc in incidents:
        tid = str(getattr(inc, "id", "")).removeprefix("rec-")
        owners = records.owners(tid)
        if owners is not None and may_read(caller, owners[0]):
            out.append(inc)
    return out


def rate_bucket(request: Request, settings: Settings) -> str | None:
    """The caller's ``POST /triage`` rate bucket: its owner id; None for a team key (the
    eval suite and other trusted automation are not rate-limited)."""
    caller = caller_of(request, settings)
    return None if caller.team else caller.owner
