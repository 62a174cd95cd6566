"""Which SGLang release raised this crash? Evidence from the traceback, the log and the user.

:func:`resolve_release` weighs, in order:

1. **An explicit release** (the ``explicit`` argument, or a release hint of
   kind ``explicit`` from a structured report). If it is ingested it wins
   with confidence 1.0; if not, the note says so and resolution goes on from
   the log, never pretending.
2. **A fingerprint of the traceback.** For every frame inside the ``sglang``
   package, each ingested release is asked: does the file exist, does the
   function named by the frame enclose the reported line, and is the printed
   source line the file's line at that number? A frame scores 0.4 for the
   function and 0.6 for the exact line (0.3 when the text sits within
   :data:`~service.engine.release.fingerprint.NEAR` lines: Python versions disagree on
   which line of a multi-line statement they report). Frames without a
   printed line can only earn the 0.4. The score is the weighted fraction
   (see :mod:`service.engine.release.fingerprint`). Release hints from the log (pip
   pins, ``check_env`` rows, ``dist-info`` paths, version strings) that name an
   ingested release break ties and add confidence; when the frames contradict
   them, the evidence says so.
3. **The nearest release by anchor lines**, when no release has every printed
   line at its reported number (a dev build or a patched install). Each frame
   is looked up as an *anchor*: the same function (by name, in the same file)
   and, inside it, the line whose stripped text equals the printed source
   (failing that, equals it once ``self.``/``server_args.``/``cfg.`` are
   spelled alike, as checks moved into 0.5.23's ``arg_groups`` hooks);
   ``offset = reported - found``. For the innermost frame of the primary
   exception only lines inside checks raising that type qualify (bare asserts
   for a bare ``AssertionError``), and further printed lines must follow. Of
   several occurrences, the one nearest the other anchors' offset in that file
   wins. Most anchors found, then the smallest total ``|offset|``, is nearest;
   :attr:`ReleaseResolution.line_offsets` lets the localizer map reported lines
   onto it. If no line is found anywhere, files and functions alone may still
   single out a release, with low confidence.

4. **The release range, without deciding frames.** A log with no usable
   frame (a message, an argparse error, a warning line, a command, a
   ``ServerArgs(...)`` dump, a version) is asked of every ingested release by
   :func:`~service.engine.release.range.infer_range`: which issue its SGLang
   warnings at their lines, which the log names, which have the dump's fields,
   which reject the command as the argparse error says, which accept every
   flag of the command, which hold a check matching the message. The pieces
   are intersected strongest first (a contradicting piece is reported, not
   used) and the answer carries the range (:attr:`ReleaseResolution.range`).
   The release analysed is then: a release the log names, if the range holds
   it (``hint``; ``warnings`` when warnings narrowed the range); for a dev
   build the newest release of the range not after it (``nearest``); else the
   newest release of the range — ``warnings`` when the warnings alone narrowed
   it, ``message`` when the message (and the warnings) did, ``range`` when the
   command, the argparse error or the dump did —, with low confidence: releases
   that were not ingested may fit too. A range that narrows nothing decides
   nothing.

5. **Releases not ingested**, from the atlas of every release
   (:mod:`service.engine.release.elsewhere`), when one was built: frames that no ingested
   release holds line for line but releases not ingested do, or a frameless message that
   releases not ingested raise clearly better than any ingested one. The answer still
   comes from the ingested release the steps above pick, at a confidence of at most
   :data:`_ELSEWHERE_CAP`, and ``elsewhere`` names the releases and the one to ingest
   (:func:`elsewhere_release`, what on-demand ingest fetches with no hint in the log).

Otherwise a single ingested release is taken with low confidence
(``only_release``), or the newest one (``none``) with a note saying which
fact would settle it.

This module holds the decision; :mod:`service.engine.release.fingerprint` scores the frames
against each release, :mod:`service.engine.release.range` weighs a frameless log, and :mod:`service.engine.release.versions` parses, orders and matches
version strings. Everything is a handful of bounded SQL queries; file lines,
the functions and the checks of a file are cached per (KB path, release,
content hash, path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import MISSING, BaseModel, Field

from kb.store import Store
from service.engine.logparse.environment import ReleaseHint
from service.engine.logparse.parse import ParsedLog
from service.engine.release.elsewhere import (
    ElsewhereFit,
    atlas_of,
    frames_elsewhere,
    message_elsewhere,
)
from service.engine.release.fingerprint import (
    ReleaseCandidate,
    ReleaseScore,
    describe_offsets,
    score_release,
    sglang_frames,
    shorten,
)
from service.engine.release.range import ReleaseRange, infer_range
from service.engine.release.versions import (
    after_reported,
    is_dev,
    match_release,
    release_sort_key,
    tie_break,
)

__all__ = ["ReleaseResolution", "elsewhere_release", "resolve_release"]

Method = Literal[
    "explicit",
    "hint",
    "fingerprint",
    "nearest",
    "warnings",
    "message",
    "range",
    "only_release",
    "none",
]

#: Releases whose best template match for the message is within this of the best
#: release's match it equally well.
_MESSAGE_TIE = 0.02

_HINT_STRENGTH = {
    "explicit": 1.0,
    "dist_info": 1.0,
    "check_env": 1.0,
    "pip": 0.9,
    "version_string": 0.7,
}
#: Release hints in the order they are believed.
HINT_ORDER = ("explicit", "dist_info", "check_env", "pip", "version_string")
_SETTLE = "pass the release, e.g. from `pip show sglang` or `python -m sglang.check_env`"


class ReleaseResolution(BaseModel):
    """The release to analyse against, how sure we are, and how reported lines map onto it."""

    release: str | None
    confidence: float
    method: Method
    dev_build: bool
    reported_version: str | None
    note: str | None
    evidence: list[str] = Field(default_factory=list)
    candidates: list[ReleaseCandidate] = Field(default_factory=list)
    line_offsets: dict[str, int] = Field(default_factory=dict)
    range: ReleaseRange | None = None  # without deciding frames: the releases that fit the log
    #: releases not ingested that explain the log (the atlas); absent when none or no atlas
    elsewhere: ElsewhereFit | MISSING = MISSING


# ------------------------------------------------------------------------------ hints


def _hints(parsed: ParsedLog, explicit: str | None) -> list[ReleaseHint]:
    hints = list(parsed.release_hints)
    if explicit:
        hints.insert(
            0, ReleaseHint(version=explicit, evidence=f"release given: {explicit}", kind="explicit")
        )
    order = {k: i for i, k in enumerate(HINT_ORDER)}
    return sorted(hints, key=lambda h: order.get(h.kind, len(order)))


# ----------------------------------------------------------------------------- resolve


@dataclass
class _Ctx:
    """What one resolution has gathered so far; :meth:`done` builds the answer."""

    ingested: list[str]
    reported: str | None
    scored: dict[str, ReleaseScore]
    hinted: dict[str, float]  # ingested release named by a log hint -> hint strength
    evidence: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    range: ReleaseRange | None = None
    elsewhere: ElsewhereFit | None = None

    def done(
        self,
        release: str | None,
        confidence: float,
        method: Method,
        dev: bool = False,
        order: Sequence[str] = (),
    ) -> ReleaseResolution:
        offsets = dict(self.scored[release].per_path) if release in self.scored else {}
        if self.elsewhere is not None:
            confidence = min(confidence, _ELSEWHERE_CAP)
        return ReleaseResolution(
            release=release,
            confidence=round(max(0.0, min(1.0, confidence)), 3),
            method=method,
            dev_build=dev or is_dev(self.reported),
            reported_version=self.reported,
            note="; ".join(self.notes) or None,
            evidence=self.evidence,
            candidates=_ordered(self.scored, release, order),
            line_offsets=offsets,
            range=self.range,
            elsewhere=self.elsewhere if self.elsewhere is not None else MISSING,
        )


def resolve_release(
    parsed: ParsedLog, store: Store, *, explicit: str | None = None
) -> ReleaseResolution:
    """Decide which ingested release to analyse ``parsed`` against (see the module docstring)."""
    rows = [r for r in store.releases() if r.get("status") in ("indexed", "complete")]
    rows.sort(key=lambda r: release_sort_key(r["version"]))
    ingested = [r["version"] for r in rows]
    hints = _hints(parsed, explicit)
    explicit_hint = next((h for h in hints if h.kind == "explicit"), None)
    reported = hints[0].version if hints else None
    if not ingested:
        return ReleaseResolution(
            release=None,
            confidence=0.0,
            method="none",
            dev_build=is_dev(reported),
            reported_version=reported,
            note="no release is ingested; run `sglang-triage ingest --release X`",
        )
    frames = sglang_frames(parsed)
    scored = {r["version"]: score_release(store, r, frames) for r in rows} if frames else {}
    ctx = _Ctx(ingested, reported, scored, {})
    for h in hints:
        if h.kind == "explicit":
            continue
        rel = match_release(h.version, ingested)
        if rel is not None:
            ctx.hinted[rel] = max(ctx.hinted.get(rel, 0.0), _HINT_STRENGTH.get(h.kind, 0.5))
            ctx.evidence.append(f"{h.kind} hint names {rel}: {shorten(h.evidence, 120)}")
        else:
            ctx.evidence.append(f"{h.kind} hint {h.version} is not an ingested release")

    if explicit_hint is not None:  # 1. explicit
        rel = match_release(explicit_hint.version, ingested)
        if rel is not None:
            _explicit_evidence(ctx, rel)
            return ctx.done(rel, 1.0, "explicit")
        ctx.notes.append(
            f"release {explicit_hint.version} was given but is not ingested "
            f"(ingested: {', '.join(ingested)}); resolved from the log instead"
        )
    if frames and not any(s.exact for s in scored.values()):
        _elsewhere(ctx, frames_elsewhere(store, frames, ingested))
    if scored:  # 2. and 3.
        res = _from_frames(ctx)
        if res is not None:
            return res
    rng = infer_range(parsed, store, rows)
    exc = parsed.primary
    if ctx.elsewhere is None and exc is not None and exc.message and parsed.argparse_error is None:
        held = max((p.score or 0.0 for p in rng.evidence if p.kind == "message"), default=0.0)
        _elsewhere(ctx, message_elsewhere(store, exc.message, exc.type, ingested, held))
    return _from_range(ctx, rng, bool(frames))


def elsewhere_release(parsed: ParsedLog, store: Store) -> str | None:
    """The release not ingested that the atlas says the log comes from (the one
    :func:`resolve_release` would name in ``elsewhere.wanted``), or None. Without an atlas
    this costs nothing; with one it resolves the log once."""
    if atlas_of(store) is None:
        return None
    fit = resolve_release(parsed, store).elsewhere
    return None if fit is MISSING or fit is None else fit.wanted


#: The confidence of an answer from an ingested release when the atlas shows the log
#: comes from a release not ingested.
_ELSEWHERE_CAP = 0.4


def _elsewhere(ctx: _Ctx, fit: ElsewhereFit | None) -> None:
    """Say that releases not ingested explain the log, and which one to ingest."""
    if fit is None:
        return
    ctx.elsewhere = fit
    ctx.evidence.append(fit.evidence)
    ctx.notes.append(
        f"the log fits {fit.wanted}, which is not ingested; this answer is from an ingested "
        f"release. For the exact answer: `sglang-triage ingest --release {fit.wanted}`"
    )


def _from_range(ctx: _Ctx, rng: ReleaseRange, frames: bool) -> ReleaseResolution:
    """Decide among the releases the frameless evidence allows (see the module docstring)."""
    ctx.range = rng
    ctx.evidence.extend(p.text for p in rng.evidence if p.kind != "hint")
    narrowing = rng.narrowing()
    order = list(reversed(rng.releases))
    named = [r for r in rng.releases if r in ctx.hinted]
    penalty = 0.0
    if ctx.hinted and not named:
        _contradicted(
            ctx.hinted, ctx.evidence, "warnings" if "warnings" in narrowing else "log's evidence"
        )
        penalty = 0.1
    if named:  # a release the log names, consistent with the stronger evidence
        pick = max(named, key=lambda r: (ctx.hinted[r], release_sort_key(r)))
        if "warnings" in narrowing:
            return ctx.done(
                pick,
                _hint_adjust(0.6, pick, ctx.hinted, ctx.evidence, "warnings"),
                "warnings",
                order=order,
            )
        return ctx.done(pick, (0.8 if frames else 0.9) * ctx.hinted[pick], "hint", order=order)
    dev = next(
        (p for p in rng.evidence if p.kind == "hint" and p.used and is_dev(ctx.reported)), None
    )
    if dev is not None and rng.releases:
        pick = rng.releases[-1]
        ctx.notes.append(
            f"dev build {ctx.reported}; nearest release {pick} by version "
            "number (no traceback lines to compare)"
        )
        return ctx.done(pick, 0.3 + 0.05 * (len(narrowing) > 1), "nearest", dev=True, order=order)
    if rng.narrowed:
        pick = tie_break(rng.releases, {}, ctx.reported)
        single = len(rng.releases) == 1
        method: Method
        if set(narrowing) == {"warnings"}:
            method, conf = "warnings", 0.6 if single else 0.4
        elif set(narrowing) <= {"warnings", "message"}:
            score = next((p.score or 0.0 for p in rng.evidence if p.kind == "message"), 0.0)
            method, conf = "message", (0.45 if single else 0.3) * min(1.0, 0.5 + score / 2)
        else:
            method, conf = "range", 0.5 if single else 0.35
        if not ctx.reported:
            said = "the log names no release"
        elif match_release(ctx.reported, ctx.ingested) is None:
            said = f"the log names {ctx.reported}, which is not ingested"
        else:  # named, but ruled out by stronger evidence
            said = f"the log's evidence rules out {ctx.reported}, the release the log names"
        why = ", ".join(dict.fromkeys(_WHY[k] for k in narrowing))
        which = (
            "the newest of them"
            if pick == rng.releases[-1]
            else f"the newest of them not after {ctx.reported}"
        )
        ctx.notes.append(
            f"{said}; the releases that fit {why}: {rng.text}; took {pick}, "
            f"{which} (releases not ingested may fit too). "
            f"To settle it, {_SETTLE}"
        )
        return ctx.done(pick, conf - penalty, method, order=order)
    if len(ctx.ingested) == 1:
        ctx.notes.append(
            f"only {ctx.ingested[0]} is ingested and the log does not name a release; {_SETTLE}"
        )
        return ctx.done(ctx.ingested[0], 0.3, "only_release")
    ctx.notes.append(
        f"nothing in the log identifies the release; analysing against the "
        f"newest ingested release {ctx.ingested[-1]}. To settle it, {_SETTLE}"
    )
    return ctx.done(ctx.ingested[-1], 0.15, "none")


_WHY = {
    "warnings": "the warnings",
    "hint": "the version named",
    "server_args": "the ServerArgs dump",
    "argparse": "the argparse error",
    "command": "the command's flags",
    "message": "the message",
}


def _explicit_evidence(ctx: _Ctx, rel: str) -> None:
    """Say where the traceback disagrees with an explicitly given release."""
    ctx.evidence.insert(0, f"release {rel} given explicitly")
    if not ctx.scored:
        return
    best = max(ctx.scored.values(), key=lambda s: (s.exact, s.score))
    mine = ctx.scored[rel]
    if best.release != rel and best.exact and not mine.exact:
        ctx.evidence.append(
            f"the traceback matches {best.release} line for line, not the given {rel}"
        )
    elif mine.anchors and not mine.exact and mine.found:
        ctx.notes.append(
            f"lines differ from release {rel} ({describe_offsets([o for _, o in mine.offsets])})"
        )


def _from_frames(ctx: _Ctx) -> ReleaseResolution | None:
    """Fingerprint, then nearest by anchors, then files and functions alone; None if undecided."""
    hinted, evidence = ctx.hinted, ctx.evidence
    ranked = sorted(
        ctx.scored.values(),
        key=lambda s: (s.exact, s.score, hinted.get(s.release, 0), release_sort_key(s.release)),
        reverse=True,
    )
    best = ranked[0]
    if best.exact:
        exact_tied = [s for s in ranked if s.exact and s.score == best.score]
        pick = tie_break([s.release for s in exact_tied], hinted, ctx.reported)
        conf = best.score * (0.97 if len(exact_tied) == 1 else 0.6 / len(exact_tied) + 0.2)
        if len(exact_tied) > 1:
            evidence.append(
                "the traceback matches "
                + ", ".join(s.release for s in exact_tied)
                + f" equally; took {pick}"
            )
        conf = _hint_adjust(conf, pick, hinted, evidence, "frames")
        return ctx.done(pick, conf, "fingerprint", order=[s.release for s in exact_tied])
    near = sorted(
        (s for s in ranked if s.found),
        key=lambda s: (
            -s.found / max(s.anchors, 1),
            s.total_offset,
            after_reported(s.release, ctx.reported),
        ),
    )
    if near:
        top = near[0]
        conf = 0.35 + 0.4 * top.found / max(top.anchors, 1)
        if len(near) > 1 and (near[1].found, near[1].total_offset) == (top.found, top.total_offset):
            conf -= 0.2
            evidence.append(f"{near[1].release} fits the anchors equally well")
        conf = _hint_adjust(conf, top.release, hinted, evidence, "anchor lines")
        what = (
            f"dev build {ctx.reported}"
            if is_dev(ctx.reported)
            else "lines match no ingested release exactly (a dev build or a patched install)"
        )
        ctx.notes.append(
            f"{what}; nearest release {top.release} "
            f"({describe_offsets([o for _, o in top.offsets])})"
        )
        return ctx.done(top.release, conf, "nearest", dev=True, order=[s.release for s in near])
    # no printed line found anywhere: the files and functions alone may single one out
    second = ranked[1].score if len(ranked) > 1 else 0.0
    if best.score > second and (not hinted or best.release in hinted):
        if any(s.anchors for s in ranked):
            ctx.notes.append(
                f"no printed frame line is in any ingested release; nearest "
                f"release {best.release} (the traceback's files and functions "
                "exist there)"
            )
            return ctx.done(best.release, 0.2 + 0.3 * best.score, "nearest", dev=True)
        evidence.append(
            f"the traceback's files and functions fit {best.release} best "
            "(no source lines were printed)"
        )
        conf = _hint_adjust(0.25 + 0.35 * best.score, best.release, hinted, evidence, "frames")
        return ctx.done(best.release, conf, "fingerprint")
    tied = sorted((s.release for s in ranked if s.score == best.score), key=release_sort_key)
    if best.score > 0 and len(tied) < len(ranked) and not any(s.anchors for s in ranked):
        # files and functions alone fit several releases equally: the newest of them
        pick = tie_break(tied, hinted, ctx.reported)
        evidence.append(
            f"the traceback's files and functions fit {', '.join(tied)} equally "
            f"(no source lines were printed); took {pick}"
        )
        conf = _hint_adjust((0.25 + 0.35 * best.score) * 0.8, pick, hinted, evidence, "frames")
        return ctx.done(pick, conf, "fingerprint", order=tied)
    if best.score > 0:
        evidence.append("the traceback's frames do not single out a release")
    return None


def _hint_adjust(
    conf: float, pick: str, hinted: dict[str, float], evidence: list[str], what: str
) -> float:
    if not hinted:
        return conf
    if pick in hinted:
        return conf + 0.05 * hinted[pick]
    _contradicted(hinted, evidence, what)
    return conf - 0.1


def _contradicted(hinted: dict[str, float], evidence: list[str], what: str) -> None:
    evidence.append(
        f"the {what} contradict the release hint(s) "
        f"{', '.join(sorted(hinted, key=release_sort_key))}; trusted the {what}"
    )


def _ordered(
    scored: dict[str, ReleaseScore], first: str | None, order: Sequence[str]
) -> list[ReleaseCandidate]:
    rank = {r: i for i, r in enumerate([first, *order] if first else order)}
    items = sorted(
        scored.values(), key=lambda s: (rank.get(s.release, len(rank)), -s.score, s.total_offset)
    )
    return [s.candidate() for s in items]
