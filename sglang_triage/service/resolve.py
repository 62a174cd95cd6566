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
   :data:`NEAR` lines: Python versions disagree on which line of a multi-line
   statement they report). Frames without a printed line can only earn the
   0.4. The score is the weighted fraction. Release hints from the log (pip
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

Without frames, a hint that names an ingested release decides; a dev version
(``0.5.19.dev410+g...``) picks the newest ingested release not after it.
Otherwise a single ingested release is taken with low confidence
(``only_release``), or the newest one (``none``) with a note saying which
fact would settle it.

Everything is a handful of bounded SQL queries; file lines, the functions
and the checks of a file are cached per (KB path, release, content hash, path).
"""

from __future__ import annotations

import functools
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, Field

from sglang_triage.kb.store import Store
from sglang_triage.service.logparse import ExceptionInfo, ParsedLog, ReleaseHint

__all__ = ["NEAR", "ReleaseCandidate", "ReleaseResolution", "release_sort_key", "resolve_release"]

Method = Literal["explicit", "hint", "fingerprint", "nearest", "only_release", "none"]

NEAR = 3  # lines around the reported one searched for the printed text
MAX_FRAMES = 48  # sglang frames looked at, innermost kept first
W_FUNCTION, W_LINE, W_NEAR = 0.4, 0.6, 0.3
_HINT_STRENGTH = {"explicit": 1.0, "dist_info": 1.0, "check_env": 1.0, "pip": 0.9,
                  "version_string": 0.7}
_HINT_ORDER = ("explicit", "dist_info", "check_env", "pip", "version_string")
_SYNTHETIC = ("<lambda>", "<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")
_SETTLE = "pass the release, e.g. from `pip show sglang` or `python -m sglang.check_env`"


class ReleaseCandidate(BaseModel):
    """How well one ingested release explains the traceback."""

    release: str
    score: float  # weighted fraction of frame evidence (0..1)
    matched_frames: int  # frames whose printed line is this release's line at that number
    total_frames: int  # sglang frames with a line number
    offsets: dict[str, int] = Field(default_factory=dict)  # per path: reported - this release
    evidence: list[str] = Field(default_factory=list)


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


# ---------------------------------------------------------------------------- versions


def _version(text: str) -> Version | None:
    try:
        return Version(text.strip().removeprefix("v"))
    except InvalidVersion:
        return None


def release_sort_key(version: str) -> tuple[int, Version, str]:
    """Sort key: PEP 440 order (dev builds before their release), unparsable ones first by text."""
    v = _version(version)
    return (1, v, "") if v is not None else (0, Version("0"), version)


def _is_dev(text: str | None) -> bool:
    """A development snapshot: ``.devN`` or a git local label (``+g1234abc``)."""
    v = _version(text) if text else None
    return v is not None and (v.is_devrelease or (v.local or "").startswith("g"))


def _match(text: str, ingested: Sequence[str]) -> str | None:
    """The ingested release ``text`` names (``"v0.5.11"``, ``"0.5.11+cu128"``), if any."""
    if text in ingested:
        return text
    v = _version(text)
    if v is None or _is_dev(text):
        return None
    for rel in ingested:
        rv = _version(rel)
        if rv is not None and (rv == v or (v.local and rv == Version(v.public))):
            return rel
    return None


# ------------------------------------------------------------------------ file indexes


@dataclass(frozen=True)
class _Fn:
    name: str
    qualname: str
    start: int
    end: int


@dataclass(frozen=True)
class _Check:
    function: str | None
    exc_type: str
    bare: bool
    start: int
    end: int


@dataclass(frozen=True)
class _FileIndex:
    """Stripped lines, line numbers by text, functions and checks of one file of one release."""

    lines: tuple[str, ...]
    positions: dict[str, tuple[int, ...]]
    loose: dict[str, tuple[int, ...]]  # by text with argument-object roots spelled ``args.``
    functions: tuple[_Fn, ...]
    checks: tuple[_Check, ...]

    def line(self, n: int) -> str | None:
        return self.lines[n - 1] if 1 <= n <= len(self.lines) else None

    def enclosing(self, n: int) -> list[_Fn]:
        """Functions whose lines include ``n``, innermost first."""
        return sorted((f for f in self.functions if f.start <= n <= f.end),
                      key=lambda f: -f.start)

    def named(self, name: str) -> list[_Fn]:
        return [f for f in self.functions if f.name == name]


_ROOT_RE = re.compile(r"\b(?:self|server_args|cfg|args|sa)\.")


def _loose(text: str) -> str:
    """``text`` with every argument-object root (``self.``, ``server_args.``, ``cfg.``)
    spelled ``args.``: releases moved checks between ``ServerArgs`` methods and
    ``arg_groups`` hooks without changing them otherwise."""
    return _ROOT_RE.sub("args.", text)


@dataclass(frozen=True)
class _Key:
    """Cache key: the KB file, the release and its content hash, the package path."""

    db: str
    release: str
    content_hash: str
    path: str
    store: Store = field(compare=False, hash=False, repr=False)


@functools.lru_cache(maxsize=256)
def _file_index(key: _Key) -> _FileIndex | None:
    text = key.store.file_text(key.release, key.path)
    if text is None:
        return None
    lines = tuple(line.strip() for line in text.split("\n"))
    positions: dict[str, list[int]] = {}
    loose: dict[str, list[int]] = {}
    for i, s in enumerate(lines, 1):
        if s:
            positions.setdefault(s, []).append(i)
            loose.setdefault(_loose(s), []).append(i)
    fns = key.store.query(
        "SELECT name, qualname, start_line, end_line FROM functions WHERE release = ? AND path = ?",
        (key.release, key.path))
    chks = key.store.query(
        "SELECT function, exc_type, bare, start_line, end_line FROM checks "
        "WHERE release = ? AND path = ?", (key.release, key.path))
    return _FileIndex(
        lines=lines,
        positions={k: tuple(v) for k, v in positions.items()},
        loose={k: tuple(v) for k, v in loose.items()},
        functions=tuple(_Fn(r["name"], r["qualname"], r["start_line"], r["end_line"]) for r in fns),
        checks=tuple(_Check(r["function"], (r["exc_type"] or "").rsplit(".", 1)[-1],
                            bool(r["bare"]), r["start_line"], r["end_line"]) for r in chks),
    )


# ------------------------------------------------------------------------------ frames


@dataclass(frozen=True)
class _FrameRef:
    """An sglang frame reduced to what the comparison needs."""

    path: str
    line: int
    function: str | None
    text: str | None  # first printed source line, stripped
    more: tuple[str, ...]  # further printed lines (Python 3.13 may print several)
    crash: ExceptionInfo | None  # set on the innermost frame of the primary exception


def _frames(parsed: ParsedLog) -> list[_FrameRef]:
    """sglang frames of every exception, the primary's first, de-duplicated and bounded."""
    excs = list(parsed.exceptions)
    if parsed.primary is not None:
        excs = [parsed.primary] + [e for e in excs if e is not parsed.primary]
    out: list[_FrameRef] = []
    seen: set[tuple[str, int, str | None]] = set()
    for exc in excs:
        frames = exc.frames
        for i in range(len(frames) - 1, -1, -1):
            fr = frames[i]
            if fr.package_path is None or fr.line is None or fr.line < 1:
                continue
            key = (fr.package_path, fr.line, fr.function)
            if key in seen:
                continue
            seen.add(key)
            printed = [s.strip() for s in (fr.source or "").split("\n") if s.strip()]
            crash = exc if exc is parsed.primary and i == len(frames) - 1 else None
            out.append(_FrameRef(fr.package_path, fr.line, fr.function,
                                 printed[0] if printed else None, tuple(printed[1:4]), crash))
            if len(out) >= MAX_FRAMES:
                return out
    return out


def _fn_name(function: str | None) -> str | None:
    return function.rsplit(".", 1)[-1] if function else None


# --------------------------------------------------------------------------- per release


@dataclass
class _Scored:
    release: str
    got: float = 0.0
    possible: float = 0.0
    matched: int = 0
    total: int = 0
    anchors: int = 0  # frames that can be anchored (function name and printed text)
    found: int = 0
    offsets: list[tuple[str, int]] = field(default_factory=list)  # (path, offset), frame order
    per_path: dict[str, int] = field(default_factory=dict)  # innermost anchor per path
    evidence: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return round(self.got / self.possible, 4) if self.possible else 0.0

    @property
    def exact(self) -> bool:
        """Every frame with a printed line has it at the reported number."""
        return self.anchors > 0 and self.matched == self.anchors

    @property
    def total_offset(self) -> int:
        return sum(abs(o) for _, o in self.offsets)

    def candidate(self) -> ReleaseCandidate:
        return ReleaseCandidate(release=self.release, score=self.score,
                                matched_frames=self.matched, total_frames=self.total,
                                offsets=dict(self.per_path), evidence=self.evidence[:8])


def _function_ok(idx: _FileIndex, fr: _FrameRef) -> bool:
    name = _fn_name(fr.function)
    if not name or name in _SYNTHETIC:
        return True
    enclosing = idx.enclosing(fr.line)
    if name == "<module>":
        return not enclosing
    return any(f.name == name for f in enclosing)


def _occurrences(idx: _FileIndex, fr: _FrameRef) -> tuple[list[int], bool, bool]:
    """Lines of the frame's function (by name) holding its printed text.

    Returns (lines, function found, loose): ``loose`` when the text was only
    found with its argument-object roots respelled (see :func:`_loose`).
    """
    assert fr.text is not None
    name = _fn_name(fr.function)
    if not name or name == "<module>" or name in _SYNTHETIC:
        ranges = [(1, len(idx.lines))]
        fns: list[_Fn] = []
    else:
        fns = idx.named(name)
        if not fns:
            return [], False, False
        ranges = [(f.start, f.end) for f in fns]
    loose = False
    found = [n for n in idx.positions.get(fr.text, ()) if any(lo <= n <= hi for lo, hi in ranges)]
    if not found:
        loose = True
        found = [n for n in idx.loose.get(_loose(fr.text), ())
                 if any(lo <= n <= hi for lo, hi in ranges)]
    if fr.more:
        follow = [n for n in found
                  if all(idx.line(n + k + 1) == s for k, s in enumerate(fr.more))]
        found = follow or found
    if fr.crash is not None and fns:
        exc_type = fr.crash.type.rsplit(".", 1)[-1]
        quals = {f.qualname for f in fns}
        spans = [(c.start, c.end) for c in idx.checks
                 if c.function in quals and c.exc_type == exc_type
                 and (c.bare or not fr.crash.bare)]
        inside = [n for n in found if any(lo <= n <= hi for lo, hi in spans)]
        found = inside or found
    return found, True, loose


def _score_release(store: Store, rel: dict[str, Any], frames: list[_FrameRef]) -> _Scored:
    version = rel["version"]
    sc = _Scored(version)
    choices: list[tuple[_FrameRef, list[int]]] = []
    for fr in frames:
        sc.total += 1
        key = _Key(str(store.path), version, rel.get("content_hash") or "", fr.path, store)
        idx = _file_index(key)
        sc.possible += W_FUNCTION + (W_LINE if fr.text else 0.0)
        if idx is None:
            sc.evidence.append(f"{fr.path} is not in {version}")
            continue
        if _function_ok(idx, fr):
            sc.got += W_FUNCTION
        if not fr.text or not fr.function:
            continue
        sc.anchors += 1
        if idx.line(fr.line) == fr.text:
            sc.got += W_LINE
            sc.matched += 1
        elif any(idx.line(fr.line + d) == fr.text for d in range(-NEAR, NEAR + 1)):
            sc.got += W_NEAR
        lines, fn_found, loose = _occurrences(idx, fr)
        if lines:
            choices.append((fr, lines))
            if loose:
                sc.evidence.append(f"{fr.path}:{fr.line}: `{_short(fr.text)}` is in {version} "
                                   "with another argument object (self./server_args./cfg.)")
        elif len(sc.evidence) < 8:
            sc.evidence.append(
                f"{fr.path}:{fr.line}: no function {fr.function} in {version}" if not fn_found
                else f"{fr.path}:{fr.line}: `{_short(fr.text)}` is not in {fr.function} "
                     f"in {version}")
    _pick_offsets(sc, choices)
    return sc


def _pick_offsets(sc: _Scored, choices: list[tuple[_FrameRef, list[int]]]) -> None:
    """Choose one occurrence per anchor: unique ones first, then nearest their file's offset."""
    fixed: dict[str, list[int]] = {}
    for fr, lines in choices:
        if len(lines) == 1:
            fixed.setdefault(fr.path, []).append(fr.line - lines[0])
    every = [o for offs in fixed.values() for o in offs]
    for fr, lines in choices:
        ref_offsets = fixed.get(fr.path) or every
        target = statistics.median(ref_offsets) if ref_offsets else 0
        best = min(lines, key=lambda n: (abs(fr.line - n - target), abs(fr.line - n)))
        off = fr.line - best
        sc.found += 1
        sc.offsets.append((fr.path, off))
        sc.per_path.setdefault(fr.path, off)  # frames come innermost first
        if off and len(sc.evidence) < 8:
            sc.evidence.append(f"{fr.path}:{fr.line} `{_short(fr.text or '')}` is line {best} "
                               f"in {sc.release} (offset {off:+d})")
    if sc.exact:
        sc.evidence.insert(0, f"all {sc.matched} printed frame lines match {sc.release} exactly")
    elif sc.anchors:
        sc.evidence.insert(0, f"{sc.matched}/{sc.anchors} printed frame lines match "
                              f"{sc.release} exactly; {sc.found} found nearby")


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _offset_range(offsets: Sequence[int]) -> str:
    lo, hi = min(offsets), max(offsets)
    if lo == hi:
        return f"lines {lo:+d} off" if lo else "lines match"
    if lo >= 0:
        return f"lines {lo}-{hi} off"
    return f"lines {lo:+d} to {hi:+d} off"


# ------------------------------------------------------------------------------ hints


def _hints(parsed: ParsedLog, explicit: str | None) -> list[ReleaseHint]:
    hints = list(parsed.release_hints)
    if explicit:
        hints.insert(0, ReleaseHint(version=explicit, evidence=f"release given: {explicit}",
                                    kind="explicit"))
    order = {k: i for i, k in enumerate(_HINT_ORDER)}
    return sorted(hints, key=lambda h: order.get(h.kind, len(order)))


def _not_after(reported: str | None, ingested: Sequence[str]) -> list[str]:
    """Ingested releases not after ``reported``, closest first (for a dev build: its base)."""
    v = _version(reported) if reported else None
    if v is None:
        return []
    older = [r for r in ingested if (rv := _version(r)) is not None and rv <= v]
    return sorted(older, key=release_sort_key, reverse=True)


# ----------------------------------------------------------------------------- resolve


@dataclass
class _Ctx:
    """What one resolution has gathered so far; :meth:`done` builds the answer."""

    ingested: list[str]
    reported: str | None
    scored: dict[str, _Scored]
    hinted: dict[str, float]  # ingested release named by a log hint -> hint strength
    evidence: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def done(self, release: str | None, confidence: float, method: Method, dev: bool = False,
             order: Sequence[str] = ()) -> ReleaseResolution:
        offsets = dict(self.scored[release].per_path) if release in self.scored else {}
        return ReleaseResolution(
            release=release, confidence=round(max(0.0, min(1.0, confidence)), 3), method=method,
            dev_build=dev or _is_dev(self.reported), reported_version=self.reported,
            note="; ".join(self.notes) or None, evidence=self.evidence,
            candidates=_ordered(self.scored, release, order), line_offsets=offsets)


def resolve_release(parsed: ParsedLog, store: Store, *,
                    explicit: str | None = None) -> ReleaseResolution:
    """Decide which ingested release to analyse ``parsed`` against (see the module docstring)."""
    rows = [r for r in store.releases() if r.get("status") in ("indexed", "complete")]
    rows.sort(key=lambda r: release_sort_key(r["version"]))
    ingested = [r["version"] for r in rows]
    hints = _hints(parsed, explicit)
    explicit_hint = next((h for h in hints if h.kind == "explicit"), None)
    reported = hints[0].version if hints else None
    if not ingested:
        return ReleaseResolution(
            release=None, confidence=0.0, method="none", dev_build=_is_dev(reported),
            reported_version=reported,
            note="no release is ingested; run `sglang-triage ingest --release X`")
    frames = _frames(parsed)
    scored = {r["version"]: _score_release(store, r, frames) for r in rows} if frames else {}
    ctx = _Ctx(ingested, reported, scored, {})
    for h in hints:
        if h.kind == "explicit":
            continue
        rel = _match(h.version, ingested)
        if rel is not None:
            ctx.hinted[rel] = max(ctx.hinted.get(rel, 0.0), _HINT_STRENGTH.get(h.kind, 0.5))
            ctx.evidence.append(f"{h.kind} hint names {rel}: {_short(h.evidence, 120)}")
        else:
            ctx.evidence.append(f"{h.kind} hint {h.version} is not an ingested release")

    if explicit_hint is not None:  # 1. explicit
        rel = _match(explicit_hint.version, ingested)
        if rel is not None:
            _explicit_evidence(ctx, rel)
            return ctx.done(rel, 1.0, "explicit")
        ctx.notes.append(f"release {explicit_hint.version} was given but is not ingested "
                         f"(ingested: {', '.join(ingested)}); resolved from the log instead")
    if scored:  # 2. and 3.
        res = _from_frames(ctx)
        if res is not None:
            return res
    if ctx.hinted:  # hints without usable frames
        rel = max(ctx.hinted, key=lambda r: (ctx.hinted[r], release_sort_key(r)))
        return ctx.done(rel, (0.8 if frames else 0.9) * ctx.hinted[rel], "hint")
    if _is_dev(reported):
        base = _not_after(reported, ingested)
        if base:
            ctx.notes.append(f"dev build {reported}; nearest release {base[0]} by version "
                             "number (no traceback lines to compare)")
            return ctx.done(base[0], 0.3, "nearest", dev=True)
    if len(ingested) == 1:
        ctx.notes.append(f"only {ingested[0]} is ingested and the log does not name a "
                         f"release; {_SETTLE}")
        return ctx.done(ingested[0], 0.3, "only_release")
    ctx.notes.append(f"nothing in the log identifies the release; analysing against the "
                     f"newest ingested release {ingested[-1]}. To settle it, {_SETTLE}")
    return ctx.done(ingested[-1], 0.15, "none")


def _explicit_evidence(ctx: _Ctx, rel: str) -> None:
    """Say where the traceback disagrees with an explicitly given release."""
    ctx.evidence.insert(0, f"release {rel} given explicitly")
    if not ctx.scored:
        return
    best = max(ctx.scored.values(), key=lambda s: (s.exact, s.score))
    mine = ctx.scored[rel]
    if best.release != rel and best.exact and not mine.exact:
        ctx.evidence.append(f"the traceback matches {best.release} line for line, "
                            f"not the given {rel}")
    elif mine.anchors and not mine.exact and mine.found:
        ctx.notes.append(f"lines differ from release {rel} "
                         f"({_offset_range([o for _, o in mine.offsets])})")


def _from_frames(ctx: _Ctx) -> ReleaseResolution | None:
    """Fingerprint, then nearest by anchors, then files and functions alone; None if undecided."""
    hinted, evidence = ctx.hinted, ctx.evidence
    ranked = sorted(ctx.scored.values(), key=lambda s: (
        s.exact, s.score, hinted.get(s.release, 0), release_sort_key(s.release)), reverse=True)
    best = ranked[0]
    if best.exact:
        tied = [s for s in ranked if s.exact and s.score == best.score]
        pick = _tie_break([s.release for s in tied], hinted, ctx.reported)
        conf = best.score * (0.97 if len(tied) == 1 else 0.6 / len(tied) + 0.2)
        if len(tied) > 1:
            evidence.append("the traceback matches " + ", ".join(s.release for s in tied)
                            + f" equally; took {pick}")
        conf = _hint_adjust(conf, pick, hinted, evidence, "frames")
        return ctx.done(pick, conf, "fingerprint", order=[s.release for s in tied])
    near = sorted((s for s in ranked if s.found), key=lambda s: (
        -s.found / max(s.anchors, 1), s.total_offset, _distance(s.release, ctx.reported)))
    if near:
        top = near[0]
        conf = 0.35 + 0.4 * top.found / max(top.anchors, 1)
        if len(near) > 1 and (near[1].found, near[1].total_offset) == (top.found,
                                                                       top.total_offset):
            conf -= 0.2
            evidence.append(f"{near[1].release} fits the anchors equally well")
        conf = _hint_adjust(conf, top.release, hinted, evidence, "anchor lines")
        what = (f"dev build {ctx.reported}" if _is_dev(ctx.reported) else
                "lines match no ingested release exactly (a dev build or a patched install)")
        ctx.notes.append(f"{what}; nearest release {top.release} "
                         f"({_offset_range([o for _, o in top.offsets])})")
        return ctx.done(top.release, conf, "nearest", dev=True, order=[s.release for s in near])
    # no printed line found anywhere: the files and functions alone may single one out
    second = ranked[1].score if len(ranked) > 1 else 0.0
    if best.score > second and (not hinted or best.release in hinted):
        if any(s.anchors for s in ranked):
            ctx.notes.append(f"no printed frame line is in any ingested release; nearest "
                             f"release {best.release} (the traceback's files and functions "
                             "exist there)")
            return ctx.done(best.release, 0.2 + 0.3 * best.score, "nearest", dev=True)
        evidence.append(f"the traceback's files and functions fit {best.release} best "
                        "(no source lines were printed)")
        conf = _hint_adjust(0.25 + 0.35 * best.score, best.release, hinted, evidence, "frames")
        return ctx.done(best.release, conf, "fingerprint")
    if best.score > 0:
        evidence.append("the traceback's frames do not single out a release")
    return None


def _distance(release: str, reported: str | None) -> int:
    """Tie-break: 0 for a release not after the reported version, else 1."""
    v, rv = (_version(reported) if reported else None), _version(release)
    return 0 if v is not None and rv is not None and rv <= v else 1


def _tie_break(tied: list[str], hinted: dict[str, float], reported: str | None) -> str:
    named = [r for r in tied if r in hinted]
    if named:
        return max(named, key=lambda r: (hinted[r], release_sort_key(r)))
    older = _not_after(reported, tied)
    return older[0] if older else max(tied, key=release_sort_key)


def _hint_adjust(conf: float, pick: str, hinted: dict[str, float], evidence: list[str],
                 what: str) -> float:
    if not hinted:
        return conf
    if pick in hinted:
        return conf + 0.05 * hinted[pick]
    evidence.append(f"the {what} contradict the release hint(s) "
                    f"{', '.join(sorted(hinted, key=release_sort_key))}; trusted the {what}")
    return conf - 0.1


def _ordered(scored: dict[str, _Scored], first: str | None,
             order: Sequence[str]) -> list[ReleaseCandidate]:
    rank = {r: i for i, r in enumerate([first, *order] if first else order)}
    items = sorted(scored.values(), key=lambda s: (rank.get(s.release, len(rank)), -s.score,
                                                   s.total_offset))
    return [s.candidate() for s in items]
