"""The consistency step: a release in which the located check could not have fired is wrong.

After :func:`~service.engine.release.resolve.resolve_release` picked a release and the
check is located in it, the check's path condition is evaluated with the command's flags,
the facts (hardware, checkpoint) and the values the message itself printed
(:mod:`service.engine.evaluate.message_facts`), exactly as the triage does; a log without
a command line leaves the flags the message did not print unknown (not at their defaults,
on which most checks cannot fire). When it is
**definitely False** there, that release cannot have raised this crash, so
:func:`recheck_release` looks again among the releases the evidence left open:

* a frameless log: the other releases of the inferred range, newest first;
* a traceback: the releases it fits equally well (the same matched frames and score:
  the lines cannot tell them apart), or, for a dev build located by anchor lines, those
  nearly as close (at least :data:`NEAR_SCORE` of the pick's score).

At most :data:`MAX_LOOKED` other releases are looked at (one locate each) and at most
:data:`MAX_TRIED` evaluated: a release whose check has the same path condition as one
already evaluated (receivers such as ``self.``/``cfg.`` aside) is skipped, since the text
that could not fire there cannot fire here either. Only a release where the check is located about as well as in the pick
counts (:data:`SLACK`). The first where the check located there **fires** (True) is taken;
failing that, the first where it may fire (undecided). The answer then comes from that release,
and the resolution's evidence says why. When none can fire, the pick stays, its
confidence is lowered (times :data:`DOUBT`) and the note says so.

A release the user gave explicitly, or one the log names (``pip``/``check_env`` hints,
also when frames picked it), is never replaced: the note only says the check cannot fire
there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.cache import facts_signature
from service.engine.evaluate.message_facts import held_at_crash, message_facts, printed_flags
from service.engine.evaluate.path_condition import base_attrs, evaluate_path, unseen_defaults
from service.engine.expr.interpreter import UNKNOWN, Value
from service.engine.flags.parse import parse_argv
from service.engine.locate.localize import Located, locate_by_frames, locate_by_message
from service.engine.locate.scope import Scope
from service.engine.logparse.frames import ExceptionInfo
from service.engine.logparse.parse import ParsedLog
from service.engine.release.resolve import ReleaseResolution
from service.engine.release.versions import release_sort_key

__all__ = [
    "DOUBT",
    "MAX_LOOKED",
    "MAX_TRIED",
    "NEAR_SCORE",
    "SLACK",
    "Recheck",
    "fires_in",
    "locate_in",
    "recheck_release",
]

MAX_TRIED = 3
"""Other releases evaluated at most when the picked one cannot have fired."""
MAX_LOOKED = 8
"""Other releases the check is located in at most (locating is a few indexed queries; a
release whose check reads exactly like one already evaluated is not evaluated again)."""
NEAR_SCORE = 0.8
"""A dev build's other candidates are tried when their frame score is at least this
fraction of the pick's."""
DOUBT = 0.8
"""Factor on the release's confidence when no tried release lets the check fire."""
SLACK = 0.1
"""Another release counts only where the check is located about as well as in the pick
(its location's confidence at most this much lower): a frame that lands on a line of the
check there, not a guess by function."""
_KEEP = frozenset({"explicit", "hint"})
_RECEIVER = re.compile(
    r"\bresolved_view\((?:self|server_args)\)\.|\b(?:self|cfg|server_args|args|view)\."
)


@dataclass
class Recheck:
    """The resolution to answer from (possibly another release) and, when the check was
    located during the step, where (so the triage need not locate it again)."""

    resolution: ReleaseResolution
    located: Located | None


def locate_in(
    store: Store, exc: ExceptionInfo, release: str, offsets: dict[str, int], scope: Scope | None
) -> Located | None:
    """The check of ``release`` that raised ``exc``: by frames, else by message."""
    return locate_by_frames(exc, store, release, offsets) or locate_by_message(
        exc, store, release, scope
    )


def fires_in(
    store: Store,
    release: str,
    located: Located,
    exc: ExceptionInfo,
    parsed: ParsedLog,
    facts: dict[str, Value],
) -> object:
    """True, False or UNKNOWN: does the located check's path condition hold in ``release``
    with the command's flags, ``facts`` and the message's printed values (the triage's
    own evaluation, without fixes)? A log with no command line (nor a logged server_args
    dump) leaves every flag the message did not print unknown, not at its default."""
    check = located.check
    catalog = load_catalog(store, release)
    argv = list(parsed.command or [])
    pargs = parse_argv(argv, catalog)
    attrs = base_attrs(catalog, pargs, parsed.server_args)
    printed = message_facts(store, release, check, exc.message, attrs, set(pargs.values))
    completed = printed_flags(printed, catalog)
    if completed:
        pargs = parse_argv(argv + completed, catalog)
        attrs = base_attrs(catalog, pargs, parsed.server_args)
    attrs.update(printed.attrs)
    if parsed.command is None and not parsed.server_args:
        # no command line in the log: what the user set is unknown, not the defaults (a
        # check that cannot fire on the defaults is what a crash caused by flags looks like)
        attrs = unseen_defaults(attrs)
    merged = {**facts, **printed.facts}
    ev = held_at_crash(
        evaluate_path(store, release, check, attrs, merged, facts_sig=facts_signature(merged)),
        printed,
    )
    return ev.fired


def _alternatives(res: ReleaseResolution) -> list[tuple[str, dict[str, int]]]:
    """(release, line offsets) the evidence leaves open besides the pick, best first."""
    pick = res.release
    if res.range is not None and res.method not in ("fingerprint", "nearest"):
        rels = sorted(
            (r for r in res.range.releases if r != pick), key=release_sort_key, reverse=True
        )
        return [(r, {}) for r in rels]
    mine = next((c for c in res.candidates if c.release == pick), None)
    if mine is None:
        return []
    out = []
    for c in res.candidates:
        if c.release == pick:
            continue
        same = c.matched_frames == mine.matched_frames and abs(c.score - mine.score) < 1e-6
        near = (
            res.method == "nearest"
            and c.matched_frames == mine.matched_frames
            and c.score >= NEAR_SCORE * mine.score > 0
        )
        if same or near:
            out.append((c.release, dict(c.offsets)))
    return out


def recheck_release(
    store: Store,
    parsed: ParsedLog,
    res: ReleaseResolution,
    facts: dict[str, Value],
    scope: Scope | None = None,
) -> Recheck:
    """The consistency step (see the module docstring)."""
    exc = parsed.primary
    if exc is None or parsed.argparse_error is not None or res.release is None:
        return Recheck(res, None)
    located = locate_in(store, exc, res.release, res.line_offsets, scope)
    if located is None or fires_in(store, res.release, located, exc, parsed, facts) is not False:
        return Recheck(res, located)
    where = f"{located.check.path}:{located.check.start_line}"
    cannot = (
        f"the located check ({where}) cannot fire in {res.release} with the command's "
        "flags and the message's values"
    )
    # ``pip hint names 0.5.11: sglang==0.5.11`` (release.resolve's evidence)
    named = any(f" hint names {res.release}:" in e for e in res.evidence)
    if res.method in _KEEP or named:
        return Recheck(
            _noted(
                res,
                f"{cannot}; kept {res.release}, which "
                f"{'was given' if res.method == 'explicit' else 'the log names'}",
                DOUBT,
            ),
            located,
        )
    tried: list[str] = []
    seen = {_signature(located.check)}
    maybe: tuple[str, dict[str, int], Located] | None = None
    for rel, offsets in _alternatives(res)[:MAX_LOOKED]:
        if len(tried) >= MAX_TRIED:
            break
        there = locate_in(store, exc, rel, offsets, scope)
        if there is None or there.confidence < located.confidence - SLACK:
            continue  # located less well there: no better explanation of the log
        sig = _signature(there.check)
        if sig in seen:
            continue  # the same check as one that could not fire: no new evidence
        seen.add(sig)
        tried.append(rel)
        fired = fires_in(store, rel, there, exc, parsed, facts)
        if fired is True:
            return Recheck(_moved(res, rel, offsets, f"{cannot}; in {rel} it fires"), there)
        if fired is UNKNOWN and maybe is None:
            maybe = (rel, offsets, there)
    if maybe is not None:
        rel, offsets, there = maybe
        return Recheck(_moved(res, rel, offsets, f"{cannot}; in {rel} it may fire"), there)
    if not tried:
        return Recheck(
            _noted(
                res,
                f"{cannot}; no other release that fits the evidence has "
                "another version of the check",
                DOUBT,
            ),
            located,
        )
    return Recheck(
        _noted(
            res,
            f"{cannot}, nor in {', '.join(tried)}: the release, the "
            "command or the facts may be wrong",
            DOUBT,
        ),
        located,
    )


def _signature(check: Check) -> tuple[str, ...]:
    """The check's path condition as text, receivers (``self.``, ``cfg.``, views) and
    whitespace aside: two releases with the same signature evaluate alike."""
    parts = [check.condition or "", check.exc_type or ""]
    parts += [f"{g['condition']}:{g['polarity']}" for g in check.guards]
    return tuple(" ".join(_RECEIVER.sub("", p).split()) for p in parts)


def _noted(res: ReleaseResolution, text: str, factor: float) -> ReleaseResolution:
    return res.model_copy(
        update={
            "confidence": round(res.confidence * factor, 3),
            "note": "; ".join(x for x in (res.note, text) if x),
            "evidence": [*res.evidence, text],
        }
    )


def _moved(
    res: ReleaseResolution, rel: str, offsets: dict[str, int], text: str
) -> ReleaseResolution:
    update: dict[str, Any] = {
        "release": rel,
        "line_offsets": offsets,
        "note": "; ".join(x for x in (res.note, f"{text}: answered from {rel}") if x),
        "evidence": [*res.evidence, f"{text}: answered from {rel}, not {res.release}"],
    }
    return res.model_copy(update=update)
