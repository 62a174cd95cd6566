"""The located check in other ingested releases: same, moved, changed or removed.

A check found in release R (a row of the ``checks`` table) is looked up in
another ingested release X by what it *is*, not where it sits:

1. a check of X with the same normalised test (its condition, else the
   guards around a raise; argument-object roots ``self.``/``server_args.``/
   ``cfg.`` spelled alike, whitespace ignored) and the same message template, in a
   function of the same name or anywhere — *same* when its guards are the
   same too, else *changed* (its guards differ);
2. else one with the same message template (at least a few literal
   characters) in a function of the same name, or the same condition in one
   — *changed* (the condition or the message was rewritten);
3. else a check of the same kind in a function of the same name whose message
   or test is nearly the same (difflib ratio :data:`_SIMILAR_MSG` /
   :data:`_SIMILAR_TEST`) — *changed* (reworded, a term added or dropped);
4. else nothing: *removed* (no check of X has that condition or message).

Lines may move and checks may move between files (``server_args.py`` to
``arg_groups/*_hook.py`` in 0.5.19+): the match ignores both, and *moved* says
the line or file differs while the check is the same. Every change cites the
check's lines in both releases (``release:path:line``), or for a removal the
line in R and, when the function still exists in X, its first line there.

:func:`check_across` answers for a list of releases; :func:`upgrade_note`
phrases the first change among releases newer than R ("upgrading to ≥ X
removes this check"). Candidate checks come from a few SQL lookups per release,
cached per release content.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

from pydantic import BaseModel, Field

from kb.code_types import Check
from kb.store import Store
from kb.versions import version_key
from service.engine.cache import cached, release_key
from service.engine.locate.message import message_pattern

__all__ = [
    "CheckChange",
    "CheckStatus",
    "check_across",
    "ingested_releases",
    "range_differences",
    "firing_text",
    "upgrade_note",
]

CheckStatus = Literal["same", "moved", "changed", "removed"]
_MIN_LITERAL = 12  # literal characters a message needs to identify a check by itself
_SIMILAR_MSG = 0.8  # difflib ratio of a reworded message of a check of the same function
_SIMILAR_TEST = 0.85  # difflib ratio of a test that gained or lost a term


class CheckChange(BaseModel):
    """The located check as it stands in another ingested release."""

    release: str
    status: CheckStatus
    note: str
    citations: list[str] = Field(default_factory=list)  # this release's lines, then the other's
    condition: str | None = None  # the other release's condition (changed)
    path: str | None = None
    start_line: int | None = None


@dataclass(frozen=True)
class _Key:
    cond: str
    msg: str
    guards: str


_ROOTS = re.compile(r"\b(?:self|server_args|cfg|args|sa)\.")
_SPACE = re.compile(r"\s+")


def _norm(expr: str | None) -> str:
    """``expr`` with argument-object roots spelled ``args.`` and no whitespace: a cheap
    canonical text (tens of thousands of checks per release, so no AST round trip)."""
    if not expr:
        return ""
    return _SPACE.sub("", _ROOTS.sub("args.", expr)).rstrip(",")


def _norm_msg(src: str | None) -> str:
    if not src:
        return ""
    tpl = message_pattern(src)
    if tpl is None or tpl.literal_chars < _MIN_LITERAL:
        return ""
    return " ".join(" ".join(tpl.fragments).split()).lower()


def _guard_texts(check: Check) -> list[str]:
    return [
        (c if g.get("polarity", True) else f"not ({c})")
        for g in check.guards or []
        if (c := g.get("condition"))
    ]


def _guards(check: Check) -> str:
    return " and ".join(sorted(f"({_norm(t)})" for t in _guard_texts(check)))


def firing_text(check: Check) -> str | None:
    """What makes the check fire: an assert's condition, else the ``if`` guards around a raise."""
    if check.condition:
        return " ".join(str(check.condition).split())
    texts = _guard_texts(check)
    return " and ".join(" ".join(t.split()) for t in texts) or None


def _short(function: str | None) -> str:
    return (function or "").rsplit(".", 1)[-1]


def _key(check: Check) -> _Key:
    """The check's test (its condition, else its guards), message and (for a condition) guards."""
    if check.condition:
        return _Key(_norm(check.condition), _norm_msg(check.message), _guards(check))
    return _Key(_guards(check), _norm_msg(check.message), "")


@dataclass(frozen=True)
class _Index:
    rows: tuple[Check, ...]
    keys: tuple[_Key, ...]


#: files that hold ``ServerArgs`` validation: checks move between them across releases
_VALIDATION = "(path = 'sglang/srt/server_args.py' OR path LIKE 'sglang/srt/arg_groups/%')"


def _validation_index(store: Store, release: str) -> _Index:
    """Every check of ``release`` in the validation files (cached once per release: each
    located validation check's index shares these rows)."""

    def build() -> _Index:
        rows = tuple(store.checks(release, where=_VALIDATION))
        return _Index(rows, tuple(_key(r) for r in rows))

    return cached(release_key(store, release, "check-history:validation"), build)


def _index(store: Store, release: str, check: Check) -> _Index:
    """The checks of ``release`` that may be ``check``: in its file, in a function of its
    name, with its exact message source, or (for validation code) in ``server_args.py``
    and the ``arg_groups`` hooks, in file and line order. A few indexed SQL lookups
    instead of the release's tens of thousands of checks; cached per release content and
    check, the validation files' checks once per release."""
    fn = check.function or ""
    short = _short(fn)
    validation = check.path == "sglang/srt/server_args.py" or check.path.startswith(
        "sglang/srt/arg_groups/"
    )

    def build() -> _Index:
        where = "(path = ? OR function = ? OR function LIKE ? OR message = ?)"
        if validation:  # the rest are the validation files' checks, shared
            where += f" AND NOT {_VALIDATION}"
        rows = tuple(
            store.checks(
                release,
                where=where,
                params=(check.path, short, f"%.{short}", check.message or ""),
            )
        )
        own = _Index(rows, tuple(_key(r) for r in rows))
        if not validation:
            return own
        shared = _validation_index(store, release)
        pairs = sorted(
            zip((*shared.rows, *own.rows), (*shared.keys, *own.keys), strict=True),
            key=lambda p: (p[0].path, p[0].start_line),
        )
        return _Index(tuple(r for r, _ in pairs), tuple(k for _, k in pairs))

    what = f"check-history:{check.path}:{fn}:{hash(check.message)}:{validation}"
    return cached(release_key(store, release, what), build)


def _cite(release: str, row: Check) -> str:
    s, e = row.start_line, row.end_line
    return f"{release}:{row.path}:{s}" + (f"-{e}" if e and e != s else "")


def _identity(check: Check) -> tuple[object, ...]:
    """What :func:`_find` reads of ``check`` besides its key (and what picks its index)."""
    return (check.path, check.function, check.kind, check.message)


def _find(idx: _Index, check: Check, key: _Key) -> tuple[Check, str] | None:
    """The best row of ``idx`` for ``check`` and how it matched:
    exact | guards | message | cond | similar (see the module docstring)."""
    fn = _short(check.function)
    kind = check.kind
    best: tuple[int, int, float, Check, str] | None = None
    for row, k in zip(idx.rows, idx.keys, strict=True):
        same_fn = _short(row.function) == fn
        closeness = 0.0
        if key.cond and k.cond == key.cond and k.msg == key.msg:
            how, rank = ("exact", 0) if k.guards == key.guards else ("guards", 1)
        elif key.msg and k.msg == key.msg and (same_fn or row.kind == kind):
            how, rank = "message", 2
        elif key.cond and k.cond == key.cond and same_fn and row.kind == kind:
            how, rank = "cond", 3
        elif same_fn and row.kind == kind and (closeness := _similar(key, k)):
            how, rank = "similar", 4
        else:
            continue
        cand = (rank, 0 if same_fn else 1, -closeness, row, how)
        if best is None or cand[:3] < best[:3]:
            best = cand
    return None if best is None else (best[3], best[4])


def _similar(a: _Key, b: _Key) -> float:
    """How alike two checks of one function are (0: not alike): a reworded message with a
    test that kept most of its text, or the other way round (difflib ratios).

    The lengths bound each ratio from above (``real_quick_ratio``), so pairs that cannot
    pass are turned away before difflib compares them; the ratios are memoised."""
    both_msgs = bool(a.msg and b.msg)
    msg_most = _length_bound(a.msg, b.msg) if both_msgs else 0.0
    test_most = _length_bound(a.cond, b.cond) if a.cond and b.cond else 0.0
    if not _alike(msg_most, test_most, both_msgs):
        return 0.0
    msg = _ratio(a.msg, b.msg) if both_msgs else 0.0
    test = _ratio(a.cond, b.cond) if a.cond and b.cond else 0.0
    return msg + test if _alike(msg, test, both_msgs) else 0.0


def _alike(msg: float, test: float, both_msgs: bool) -> bool:
    return (msg >= _SIMILAR_MSG and test >= _SIMILAR_TEST - 0.25) or (
        test >= _SIMILAR_TEST and (msg >= _SIMILAR_MSG - 0.2 or not both_msgs)
    )


def _length_bound(a: str, b: str) -> float:
    """An upper bound of ``SequenceMatcher(None, a, b).ratio()`` (its ``real_quick_ratio``)."""
    return 2.0 * min(len(a), len(b)) / (len(a) + len(b))


@functools.lru_cache(maxsize=65536)
def _ratio(a: str, b: str) -> float:
    return SequenceMatcher(None, a, b).ratio()


def _one(store: Store, release: str, check: Check, key: _Key, other: str) -> CheckChange:
    here = _cite(release, check)
    # the scan reads every row of the other release's index: once per check and release
    found = cached(
        (*release_key(store, other, "check-history:found"), *_identity(check), key),
        lambda: _find(_index(store, other, check), check, key),
    )
    if found is None:
        cites = [here]
        fn = store.function(other, check.function) if check.function else None
        where = ""
        if fn is not None:
            cites.append(f"{other}:{fn['path']}:{fn['start_line']}")
            where = f"; {_short(check.function)} is still at {cites[-1]}"
        return CheckChange(
            release=other,
            status="removed",
            citations=cites,
            note=f"{other} has no check with this condition or message{where}",
        )
    row, how = found
    there = _cite(other, row)
    pos = (row.path, row.start_line) != (check.path, check.start_line)
    if how == "exact":
        status: CheckStatus = "moved" if pos else "same"
        note = f"the same check is at {there}" if pos else f"the same check, same lines ({there})"
        return CheckChange(
            release=other,
            status=status,
            note=note,
            citations=[here, there],
            path=row.path,
            start_line=row.start_line,
        )
    if how == "guards":
        guards = " and ".join(" ".join(t.split()) for t in _guard_texts(row)) or "none"
        note = f"the same test at {there}, under other guards: `{guards}`"
    elif how == "message":
        cond = firing_text(row) or "(no condition)"
        note = f"the check at {there} raises the same message, when `{cond}`"
    elif how == "cond":
        note = f"the check at {there} has the same condition but another message"
    else:
        note = (
            f"a similar check of the same function at {there}, when "
            f"`{firing_text(row) or '(no condition)'}`"
        )
    return CheckChange(
        release=other,
        status="changed",
        note=note,
        citations=[here, there],
        condition=firing_text(row),
        path=row.path,
        start_line=row.start_line,
    )


def check_across(
    store: Store, release: str, check: Check, others: Sequence[str]
) -> list[CheckChange]:
    """How ``check`` (a ``checks`` row of ``release``) stands in each release of ``others``."""
    key = _key(check)
    if not key.cond and not key.msg:
        return []  # nothing to recognise it by
    return [
        _one(store, release, check, key, o) for o in sorted(others, key=version_key) if o != release
    ]


def upgrade_note(release: str, changes: Sequence[CheckChange]) -> str | None:
    """The upgrade that removes or changes the check for good, as one sentence.

    ``changes`` are :func:`check_across` results; only those newer than
    ``release`` count. The answer names the oldest release X from which every
    newer ingested release lacks the check (or changed it); None when the
    newest ingested release still holds it unchanged.
    """
    key = version_key(release)
    newer = sorted(
        (c for c in changes if version_key(c.release) > key),
        key=lambda c: version_key(c.release),
    )
    start = len(newer)
    while start > 0 and newer[start - 1].status in ("removed", "changed"):
        start -= 1
    if start == len(newer):
        return None
    c = newer[start]
    if all(x.status == "removed" for x in newer[start:]):
        return f"upgrading to ≥ {c.release} removes this check ({c.note}; here: {c.citations[0]})"
    first = next(x for x in newer[start:] if x.status == "changed")
    what = f"changes its condition to `{first.condition}`" if first.condition else "changes it"
    out = (
        f"upgrading to ≥ {first.release} {what} ({first.citations[-1]}; here: {first.citations[0]})"
    )
    gone = len(newer)
    while gone > 0 and newer[gone - 1].status == "removed":
        gone -= 1
    if gone < len(newer):
        out += f"; ≥ {newer[gone].release} has no such check"
    return out


def ingested_releases(store: Store) -> list[str]:
    """Indexed releases of the KB, oldest first."""
    rows = [r["version"] for r in store.releases() if r.get("status") in ("indexed", "complete")]
    return sorted(rows, key=version_key)


def range_differences(
    release: str, changes: Sequence[CheckChange], in_range: Sequence[str]
) -> list[str]:
    """How the older releases of the range hold the check differently (line, file, condition)."""
    key = version_key(release)
    out = []
    for c in changes:
        if c.release in in_range and version_key(c.release) < key and c.status != "same":
            out.append(
                f"in {c.release}: {c.note}"
                if c.status != "removed"
                else f"in {c.release}: no such check ({c.note})"
            )
    return out
