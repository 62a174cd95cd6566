"""How well each ingested release explains a traceback: the fingerprint of its sglang frames.

For every frame inside the ``sglang`` package (:func:`sglang_frames`, the
primary exception's first), :func:`score_release` asks one release: does the
file exist, does the function named by the frame enclose the reported line,
and is the printed source line the file's line at that number? A frame scores
:data:`W_FUNCTION` for the function and :data:`W_LINE` for the exact line
(:data:`W_NEAR` when the text sits within :data:`NEAR` lines). It also looks
each frame up as an *anchor* — the printed line inside the same function,
found anywhere (argument-object roots ``self.``/``server_args.``/``cfg.``
spelled alike when needed; for the crashing frame, only inside checks raising
that exception type) — and records ``offset = reported - found`` per file, so
a dev build or a patched install can be mapped onto its nearest release.
The result is a :class:`ReleaseScore`; :class:`ReleaseCandidate` is its
public summary. :mod:`service.engine.release.resolve` weighs the scores of every release.

A Python warning printed from an SGLang file (``launch_server.py:54:
UserWarning: ...``) is a line of the same kind: :func:`warning_fits` asks
whether a release has a ``warn`` call there that carries the warning's text.

A file's stripped lines, functions and checks are read with a few bounded SQL
queries and cached per (KB path, release, content hash, path).
"""

from __future__ import annotations

import functools
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from kb.store import Store
from service.engine.logparse.environment import WarningLine
from service.engine.logparse.frames import ExceptionInfo
from service.engine.logparse.parse import ParsedLog

__all__ = [
    "MAX_FRAMES",
    "NEAR",
    "W_FUNCTION",
    "W_LINE",
    "W_NEAR",
    "FrameRef",
    "ReleaseCandidate",
    "ReleaseScore",
    "describe_offsets",
    "score_release",
    "sglang_frames",
    "shorten",
    "warning_fits",
]

NEAR = 3  # lines around the reported one searched for the printed text
MAX_FRAMES = 48  # sglang frames looked at, innermost kept first
W_FUNCTION, W_LINE, W_NEAR = 0.4, 0.6, 0.3  # frame weights: function, exact line, line nearby
_SYNTHETIC = ("<lambda>", "<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")


class ReleaseCandidate(BaseModel):
    """How well one ingested release explains the traceback."""

    release: str
    score: float  # weighted fraction of frame evidence (0..1)
    matched_frames: int  # frames whose printed line is this release's line at that number
    total_frames: int  # sglang frames with a line number
    offsets: dict[str, int] = Field(default_factory=dict)  # per path: reported - this release
    evidence: list[str] = Field(default_factory=list)


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
        return sorted((f for f in self.functions if f.start <= n <= f.end), key=lambda f: -f.start)

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
        (key.release, key.path),
    )
    chks = key.store.query(
        "SELECT function, exc_type, bare, start_line, end_line FROM checks "
        "WHERE release = ? AND path = ?",
        (key.release, key.path),
    )
    return _FileIndex(
        lines=lines,
        positions={k: tuple(v) for k, v in positions.items()},
        loose={k: tuple(v) for k, v in loose.items()},
        functions=tuple(_Fn(r["name"], r["qualname"], r["start_line"], r["end_line"]) for r in fns),
        checks=tuple(
            _Check(
                r["function"],
                (r["exc_type"] or "").rsplit(".", 1)[-1],
                bool(r["bare"]),
                r["start_line"],
                r["end_line"],
            )
            for r in chks
        ),
    )


def _release_file(store: Store, rel: dict[str, Any], path: str) -> _FileIndex | None:
    """The cached :class:`_FileIndex` of ``path`` in the release row ``rel``."""
    return _file_index(
        _Key(str(store.path), rel["version"], rel.get("content_hash") or "", path, store)
    )


# ------------------------------------------------------------------------------ frames


@dataclass(frozen=True)
class FrameRef:
    """An sglang frame reduced to what the comparison needs."""

    path: str
    line: int
    function: str | None
    text: str | None  # first printed source line, stripped
    more: tuple[str, ...]  # further printed lines (Python 3.13 may print several)
    crash: ExceptionInfo | None  # set on the innermost frame of the primary exception


def sglang_frames(parsed: ParsedLog) -> list[FrameRef]:
    """sglang frames of every exception, the primary's first, de-duplicated and bounded."""
    excs = list(parsed.exceptions)
    if parsed.primary is not None:
        excs = [parsed.primary] + [e for e in excs if e is not parsed.primary]
    out: list[FrameRef] = []
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
            out.append(
                FrameRef(
                    fr.package_path,
                    fr.line,
                    fr.function,
                    printed[0] if printed else None,
                    tuple(printed[1:4]),
                    crash,
                )
            )
            if len(out) >= MAX_FRAMES:
                return out
    return out


def _fn_name(function: str | None) -> str | None:
    return function.rsplit(".", 1)[-1] if function else None


# --------------------------------------------------------------------------- per release


@dataclass
class ReleaseScore:
    """The frame evidence for one release, gathered by :func:`score_release`."""

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
        """The public summary of this score."""
        return ReleaseCandidate(
            release=self.release,
            score=self.score,
            matched_frames=self.matched,
            total_frames=self.total,
            offsets=dict(self.per_path),
            evidence=self.evidence[:8],
        )


def _function_ok(idx: _FileIndex, fr: FrameRef) -> bool:
    name = _fn_name(fr.function)
    if not name or name in _SYNTHETIC:
        return True
    enclosing = idx.enclosing(fr.line)
    if name == "<module>":
        return not enclosing
    return any(f.name == name for f in enclosing)


def _occurrences(idx: _FileIndex, fr: FrameRef) -> tuple[list[int], bool, bool]:
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
        found = [
            n for n in idx.loose.get(_loose(fr.text), ()) if any(lo <= n <= hi for lo, hi in ranges)
        ]
    if fr.more:
        follow = [n for n in found if all(idx.line(n + k + 1) == s for k, s in enumerate(fr.more))]
        found = follow or found
    if fr.crash is not None and fns:
        exc_type = fr.crash.type.rsplit(".", 1)[-1]
        quals = {f.qualname for f in fns}
        spans = [
            (c.start, c.end)
            for c in idx.checks
            if c.function in quals and c.exc_type == exc_type and (c.bare or not fr.crash.bare)
        ]
        inside = [n for n in found if any(lo <= n <= hi for lo, hi in spans)]
        found = inside or found
    return found, True, loose


def score_release(store: Store, rel: dict[str, Any], frames: list[FrameRef]) -> ReleaseScore:
    """Score the release row ``rel`` (``version``, ``content_hash``) against ``frames``."""
    version = rel["version"]
    sc = ReleaseScore(version)
    choices: list[tuple[FrameRef, list[int]]] = []
    for fr in frames:
        sc.total += 1
        idx = _release_file(store, rel, fr.path)
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
                sc.evidence.append(
                    f"{fr.path}:{fr.line}: `{shorten(fr.text)}` is in {version} "
                    "with another argument object (self./server_args./cfg.)"
                )
        elif len(sc.evidence) < 8:
            sc.evidence.append(
                f"{fr.path}:{fr.line}: no function {fr.function} in {version}"
                if not fn_found
                else f"{fr.path}:{fr.line}: `{shorten(fr.text)}` is not in {fr.function} "
                f"in {version}"
            )
    _pick_offsets(sc, choices)
    return sc


def _pick_offsets(sc: ReleaseScore, choices: list[tuple[FrameRef, list[int]]]) -> None:
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
            sc.evidence.append(
                f"{fr.path}:{fr.line} `{shorten(fr.text or '')}` is line {best} "
                f"in {sc.release} (offset {off:+d})"
            )
    if sc.exact:
        sc.evidence.insert(0, f"all {sc.matched} printed frame lines match {sc.release} exactly")
    elif sc.anchors:
        sc.evidence.insert(
            0,
            f"{sc.matched}/{sc.anchors} printed frame lines match "
            f"{sc.release} exactly; {sc.found} found nearby",
        )


_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{3,}")
_CALL_LINES = 8  # lines of a multi-line warn(...) call searched for its message


def warning_fits(store: Store, rel: dict[str, Any], warning: WarningLine) -> bool:
    """Does release ``rel`` issue ``warning`` at its reported line?

    The reported line must hold a ``warn`` call (Python 3.8 to 3.13 all report
    a multi-line ``warnings.warn(`` call at its first line; 3.7 reported its
    last), and most words of the warning's message must appear in the call's
    text.
    """
    idx = _release_file(store, rel, warning.path)
    text = idx.line(warning.line) if idx is not None else None
    if idx is None or not text or "warn" not in text:
        return False
    words = list(dict.fromkeys(w.lower() for w in _WORD_RE.findall(warning.message[:120])))[:8]
    window = " ".join(idx.lines[warning.line - 1 : warning.line - 1 + _CALL_LINES]).lower()
    return sum(w in window for w in words) >= 0.6 * len(words)


def shorten(text: str, n: int = 60) -> str:
    """``text`` cut to ``n`` characters with an ellipsis."""
    return text if len(text) <= n else text[: n - 1] + "…"


def describe_offsets(offsets: Sequence[int]) -> str:
    """``"lines 2-5 off"``, ``"lines +3 off"``, ``"lines match"`` ... for line offsets."""
    lo, hi = min(offsets), max(offsets)
    if lo == hi:
        return f"lines {lo:+d} off" if lo else "lines match"
    if lo >= 0:
        return f"lines {lo}-{hi} off"
    return f"lines {lo:+d} to {hi:+d} off"
