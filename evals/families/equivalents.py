"""Other releases that print a family incident's exception exactly: its equivalents.

A frameless log (the exception line alone, as most users post it) of a start-up check says
nothing about the release when several releases raise the same text, and replay cannot tell
them apart for the checks it does not reach (they need a device). For those, an answer
naming another release's check is right when that check can print **exactly** the
incident's message: same exception type, and the check's message template (its f-string or
literal, :func:`service.engine.message_pattern`) matches the whole printed text. Templates
with little literal text are not trusted to say so (:data:`MIN_LITERAL`).

These are static equivalents (the printed text, matched against each release's source);
the incidents' ``notes`` say so.
"""

from __future__ import annotations

from collections.abc import Sequence

from evals.incidents import Equivalent, Incident
from kb.code_types import Check
from kb.store import Store
from service.engine import MessageTemplate, message_pattern, parse_log

__all__ = [
    "MIN_LITERAL",
    "Templates",
    "printed_equivalents",
    "release_templates",
    "with_equivalents",
]

#: the least literal text (characters) a template needs to vouch for a printed message
MIN_LITERAL = 24
#: printed messages longer than this are not matched (bounded regex work)
MAX_MESSAGE = 4000


Templates = dict[str, list[tuple[Check, MessageTemplate]]]


def release_templates(store: Store, releases: Sequence[str]) -> Templates:
    """release -> (check, template) of each check whose message template can vouch."""
    out: Templates = {}
    for release in releases:
        rows = out.setdefault(release, [])
        for check in store.checks(release):
            template = message_pattern(check.message) if check.message else None
            if template is not None and template.literal_chars >= MIN_LITERAL:
                rows.append((check, template))
    return out


def printed_equivalents(incident: Incident, templates: Templates) -> list[Equivalent]:
    """Checks of other releases (``templates``: :func:`release_templates`) that print the
    incident's message exactly."""
    primary = parse_log(incident.crash_log).primary
    loc = incident.expected.location
    if primary is None or not primary.message or loc is None:
        return []
    text = " ".join(primary.message.split())[:MAX_MESSAGE]
    out: list[Equivalent] = []
    for release, rows in templates.items():
        if release == incident.expected.release:
            continue
        for check, template in rows:
            if (check.exc_type or "AssertionError") == primary.type and template.regex.fullmatch(
                text
            ):
                out.append(
                    Equivalent(
                        release=release,
                        path=check.path,
                        function=check.function,
                        start_line=check.start_line,
                        end_line=check.end_line,
                    )
                )
    return out


def with_equivalents(
    store: Store, incidents: Sequence[Incident], releases: Sequence[str]
) -> list[Incident]:
    """``incidents`` with their printed-text equivalents in ``expected.equivalents``."""
    templates = release_templates(store, releases)
    out: list[Incident] = []
    for inc in incidents:
        found = printed_equivalents(inc, templates)
        if found:
            inc = inc.model_copy(
                update={
                    "expected": inc.expected.model_copy(update={"equivalents": found}),
                    "notes": (
                        inc.notes + f" Equivalents: {len(found)} checks of other releases "
                        "print this message exactly (static: message templates)."
                    ).strip(),
                }
            )
        out.append(inc)
    return out
