"""Which ingested releases fit a log without SGLang frames: the release *range*.

A log that carries no ``File ".../sglang/..."`` frame still says a lot about
the release that printed it. :func:`infer_range` asks every ingested release
about each piece of evidence the log holds and keeps, per piece, the releases
that fit it (a :class:`RangePiece`):

``warnings``
    every Python warning printed from an SGLang file has a ``warn`` call at its
    line carrying its words (:func:`~service.engine.release.fingerprint.warning_fits`).
``hint``
    a version named by the log: the release it names, or for a dev build the
    releases not after it. A version that is not ingested narrows nothing.
``server_args``
    every field of a ``ServerArgs(...)`` dump is a field the release declares,
    and (when the dump is complete) no release declares fewer fields the dump
    lacks.
``argparse``
    the release rejects the command as the argparse error says: no spelling
    (nor unambiguous prefix) of an unrecognized flag; for an invalid choice, the
    choices argparse listed are the release's (else: its choices exclude the
    value); otherwise the flag exists.
``command``
    the release's parser accepts every flag of the launch command with its
    value (unknown flags and invalid choices reject; flags named by an argparse
    error are left out).
``message``
    the release holds a check whose message template matches the primary
    exception's message best (:func:`~service.engine.locate.message.match_message`,
    at least :data:`~service.engine.locate.message.MESSAGE_MIN`, within a small tie).

The pieces are intersected in the order above, strongest first; a piece that
would leave no release is kept in the evidence with ``used=False`` (it
contradicts the stronger ones) and does not narrow. The result is a
:class:`ReleaseRange`: first and last release, the list, and the evidence,
each piece citing ``release:path:line`` of the KB where it can.

Pure reads of the store (a few bounded queries per release; catalogs and
message indexes are cached by their modules).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from kb.catalogs import load_catalog
from kb.store import Store
from service.engine.flags.parse import parse_argv
from service.engine.locate.message import MESSAGE_MIN, MessageMatch, match_message
from service.engine.logparse.parse import ParsedLog
from service.engine.release.fingerprint import shorten, warning_fits
from service.engine.release.versions import is_dev, match_release, not_after, release_sort_key

__all__ = [
    "MESSAGE_TIE",
    "PieceKind",
    "RangePiece",
    "ReleaseRange",
    "best_message_matches",
    "infer_range",
    "span",
]

PieceKind = Literal["warnings", "hint", "server_args", "argparse", "command", "message"]

#: Releases whose best template match is within this of the best release's match it equally.
MESSAGE_TIE = 0.02
_ORDER: tuple[PieceKind, ...] = (
    "warnings",
    "hint",
    "server_args",
    "argparse",
    "command",
    "message",
)


class RangePiece(BaseModel):
    """One piece of evidence and the ingested releases it allows."""

    kind: PieceKind
    releases: list[str]
    text: str
    citations: list[str] = Field(default_factory=list)
    score: float | None = None  # message: the best template match's score
    used: bool = True  # False: it would leave no release with the stronger pieces
    narrowed: bool = False  # it removed releases that the stronger pieces allowed


class ReleaseRange(BaseModel):
    """The ingested releases that fit every usable piece of evidence of a frameless log."""

    first: str | None
    last: str | None
    releases: list[str]
    ingested: list[str]
    text: str  # e.g. "0.5.16–0.5.21 (of 0.5.5–0.5.23)"
    evidence: list[RangePiece] = Field(default_factory=list)
    differences: list[str] = Field(default_factory=list)  # filled by the triage (older releases)

    @property
    def narrowed(self) -> bool:
        return 0 < len(self.releases) < len(self.ingested)

    def narrowing(self) -> list[PieceKind]:
        """Kinds of the pieces that removed releases, strongest first."""
        return [p.kind for p in self.evidence if p.used and p.narrowed]


def span(releases: Sequence[str], ingested: Sequence[str]) -> str:
    """``"0.5.16–0.5.21"`` for consecutive ingested releases, ``"0.5.9"`` for one, else a list."""
    rels = sorted(releases, key=release_sort_key)
    if not rels:
        return "no ingested release"
    if len(rels) == len(ingested) and len(rels) > 1:
        return "every ingested release"
    if len(rels) == 1:
        return rels[0]
    pos = [ingested.index(r) for r in rels if r in ingested]
    if len(pos) == len(rels) and pos == list(range(pos[0], pos[0] + len(pos))):
        return f"{rels[0]}–{rels[-1]}"
    return ", ".join(rels)


def _says(releases: Sequence[str], ingested: Sequence[str], one: str, many: str) -> str:
    """``"0.5.9 holds"`` / ``"0.5.9–0.5.11 hold"``: the span and the verb agreeing with it."""
    one_ = len(releases) == 1 or (len(releases) == len(ingested) and len(releases) > 1)
    return f"{span(releases, ingested)} {one if one_ else many}"


# ------------------------------------------------------------------------------ pieces


def _warnings(parsed: ParsedLog, store: Store, rows: list[dict[str, Any]]) -> RangePiece | None:
    if not parsed.warnings:
        return None
    ingested = [r["version"] for r in rows]
    fit = [r["version"] for r in rows if all(warning_fits(store, r, w) for w in parsed.warnings)]
    where = ", ".join(f"{w.path}:{w.line}" for w in parsed.warnings[:3])
    what = "the warning at " if len(parsed.warnings) == 1 else "the warnings at "
    if not fit:
        text = f"{what}{where} fit no ingested release"
    elif len(fit) == len(ingested):
        text = f"{what}{where} fit every ingested release"
    else:
        text = f"{what}{where} fit {span(fit, ingested)} and no other ingested release"
    cites = [f"{v}:{w.path}:{w.line}" for v in fit[-2:] for w in parsed.warnings[:2]]
    return RangePiece(kind="warnings", releases=fit, citations=cites, text=text)


def _hint(parsed: ParsedLog, ingested: list[str]) -> RangePiece | None:
    hints = [h for h in parsed.release_hints if h.kind != "explicit"]
    named = {rel: h for h in reversed(hints) if (rel := match_release(h.version, ingested))}
    if named:
        rels = sorted(named, key=release_sort_key)
        first = named[rels[-1]]
        return RangePiece(
            kind="hint",
            releases=rels,
            text=f"the log names {span(rels, ingested)} "
            f"({first.kind}: {shorten(first.evidence, 80)})",
        )
    for h in hints:
        if is_dev(h.version):
            base = sorted(not_after(h.version, ingested), key=release_sort_key)
            if base:
                return RangePiece(
                    kind="hint",
                    releases=base,
                    text=f"dev build {h.version}: {span(base, ingested)} are not after it",
                )
    if hints:
        return RangePiece(
            kind="hint",
            releases=list(ingested),
            text=f"the log names {hints[0].version}, which is not ingested",
        )
    return None


def _server_args(parsed: ParsedLog, store: Store, ingested: list[str]) -> RangePiece | None:
    """Releases declaring every field of the dump, and of those the ones missing the fewest
    (a field declared with ``repr=False`` is missing from every release's dump alike)."""
    dump = parsed.server_args
    if not dump or len(dump) < 5:
        return None
    cut = any("ServerArgs(...) line is cut" in n for n in parsed.notes)
    missing: dict[str, int] = {}
    cites: dict[str, str] = {}
    for rel in ingested:
        decls = load_catalog(store, rel).declarations  # ServerArgs and its field groups
        fields = {d.attr for d in decls}
        if not fields or set(dump) - fields:
            continue
        missing[rel] = 0 if cut else len(fields - set(dump))
        cites[rel] = f"{rel}:{decls[0].path}:{decls[0].line}"
    fewest = min(missing.values(), default=0)
    fit = [r for r in ingested if r in missing and missing[r] == fewest]
    what = f"the ServerArgs(...) dump's {len(dump)} fields"
    return RangePiece(
        kind="server_args",
        releases=fit,
        citations=[cites[r] for r in fit[-2:]],
        text=(
            f"{what} are {span(fit, ingested)}'s fields"
            if fit
            else f"{what} are no ingested release's fields"
        ),
    )


def _argparse(parsed: ParsedLog, store: Store, ingested: list[str]) -> RangePiece | None:
    err = parsed.argparse_error
    if err is None or not err.flags:
        return None
    fit: list[str] = []
    cites: list[str] = []
    if err.kind == "unrecognized_arguments":
        names = [f.split("=", 1)[0] for f in err.flags]
        for rel in ingested:
            unknown = parse_argv(names, load_catalog(store, rel)).unknown
            if all(n in unknown for n in names):
                fit.append(rel)
        what = ", ".join(f"`{n}`" for n in names[:4])
        text = (
            f"{_says(fit, ingested, 'has', 'have')} no flag {what}"
            if fit
            else f"every ingested release has {what}"
        )
    else:
        flag = err.flags[0]
        value = err.values[0] if err.values else None
        listed = set(err.choices or [])
        for rel in ingested:
            spec = load_catalog(store, rel).by_flag().get(flag)
            if spec is None:
                continue
            if err.kind == "invalid_choice" and spec.choices is not None:
                choices = {str(c) for c in spec.choices}
                if (listed and choices != listed) or (value is not None and value in choices):
                    continue
            fit.append(rel)
            if spec.path and spec.line:
                cites.append(f"{rel}:{spec.path}:{spec.line}")
        if err.kind == "invalid_choice":
            text = f"{_says(fit, ingested, 'refuses', 'refuse')} {value!r} for `{flag}`" + (
                " with exactly the choices argparse listed" if listed else ""
            )
        else:
            text = f"{_says(fit, ingested, 'has', 'have')} `{flag}`"
    return RangePiece(kind="argparse", releases=fit, citations=cites[-2:], text=text)


def _command(parsed: ParsedLog, store: Store, ingested: list[str]) -> RangePiece | None:
    argv = list(parsed.command or [])
    if not any(a.startswith("--") for a in argv):
        return None
    err = parsed.argparse_error
    skip = {f.split("=", 1)[0] for f in (err.flags if err is not None else [])}
    fit: list[str] = []
    refused: dict[str, str] = {}
    for rel in ingested:
        pa = parse_argv(argv, load_catalog(store, rel))
        bad = [u for u in pa.unknown if u.startswith("-") and u.split("=", 1)[0] not in skip]
        bad += [
            e
            for e in pa.errors
            if "invalid choice" in e and not any(f"{s}" in e.split(":", 1)[0] for s in skip)
        ]
        if bad:
            refused[rel] = shorten(bad[0], 60)
        else:
            fit.append(rel)
    n = sum(a.startswith("--") for a in argv)
    text = (
        f"{_says(fit, ingested, 'accepts', 'accept')} every flag of the command ({n} flags)"
        if fit
        else "no ingested release accepts every flag of the command"
    )
    if refused:
        no = sorted(refused, key=release_sort_key)
        text += f"; {_says(no, ingested, 'refuses', 'refuse')} it ({no[0]}: `{refused[no[0]]}`)"
    return RangePiece(kind="command", releases=fit, text=text)


def best_message_matches(
    parsed: ParsedLog, store: Store, releases: Sequence[str]
) -> dict[str, MessageMatch]:
    """The best check match (at least :data:`MESSAGE_MIN`) of the primary message per release."""
    exc = parsed.primary
    if exc is None or not exc.message or parsed.argparse_error is not None:
        return {}
    best: dict[str, MessageMatch] = {}
    for rel in releases:
        found = match_message(store, rel, exc.message, exc_type=exc.type, limit=1)
        if found and found[0].score >= MESSAGE_MIN:
            best[rel] = found[0]
    return best


def _message(parsed: ParsedLog, store: Store, ingested: list[str]) -> RangePiece | None:
    best = best_message_matches(parsed, store, ingested)
    if not best:
        return None
    top = max(m.score for m in best.values())
    tied = sorted(
        (r for r, m in best.items() if m.score >= top - MESSAGE_TIE), key=release_sort_key
    )
    m = best[tied[-1]]
    where = f"`{shorten(m.template, 80)}` ({m.path}:{m.start_line} in {tied[-1]})"
    kind = f" ({m.match_kind} match, score {m.score})" if m.match_kind != "full" else ""
    if len(tied) == len(ingested):
        text = f"the message matches {where}{kind}, and alike in every ingested release"
    else:
        text = (
            f"{_says(tied, ingested, 'holds', 'hold')} a check matching the message: {where}{kind}"
        )
    lesser = [r for r in ingested if r in best and r not in tied]
    absent = [r for r in ingested if r not in best]
    if lesser:
        text += f"; {_says(lesser, ingested, 'matches', 'match')} it less well"
    if absent:
        text += f"; {_says(absent, ingested, 'holds', 'hold')} no such check"
    cites = [f"{r}:{best[r].path}:{best[r].start_line}" for r in (tied[0], tied[-1])]
    return RangePiece(
        kind="message",
        releases=tied,
        text=text,
        score=m.score,
        citations=list(dict.fromkeys(cites)),
    )


# ------------------------------------------------------------------------------ range


def infer_range(parsed: ParsedLog, store: Store, rows: list[dict[str, Any]]) -> ReleaseRange:
    """Intersect the evidence of ``parsed`` over the ingested release rows ``rows``
    (sorted oldest first; ``version`` and ``content_hash`` each)."""
    ingested = [r["version"] for r in rows]
    pieces = [
        p
        for p in (
            _warnings(parsed, store, rows),
            _hint(parsed, ingested),
            _server_args(parsed, store, ingested),
            _argparse(parsed, store, ingested),
            _command(parsed, store, ingested),
            _message(parsed, store, ingested),
        )
        if p is not None
    ]
    pieces.sort(key=lambda p: _ORDER.index(p.kind))
    current = list(ingested)
    for p in pieces:
        if not p.releases:
            p.used = False
            continue
        allowed = set(p.releases)
        kept = [r for r in current if r in allowed]
        if not kept:
            p.used = False
            p.text += " (contradicts the stronger evidence; not used)"
            continue
        p.narrowed = len(kept) < len(current)
        current = kept
    text = span(current, ingested)
    if len(ingested) > 1:
        text += f" (of {ingested[0]}–{ingested[-1]})"
    return ReleaseRange(
        first=current[0] if current else None,
        last=current[-1] if current else None,
        releases=current,
        ingested=ingested,
        text=text,
        evidence=pieces,
    )
