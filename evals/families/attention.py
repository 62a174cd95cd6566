"""The ``layer_attention_backend`` family: a layer or model refuses the attention backend
it was given and lists (or registers) the ones it takes.

Cases come from each release's own raises under ``sglang/srt/layers/attention/`` whose
message mentions a backend, rendered (:func:`~evals.families.messages.render_source`)
with a supported set the release's source defines and a refused name outside it:

``printed``        a formatted message printing a literal collection assigned in the
                   raising function (``Only {allowed} backends are supported ...``)
``registry``       a formatted message printing a registry's keys (``Available
                   backends: [...]``); the refused name is one no registry holds
``condition``      a literal "only supported" message: the names the check's condition
                   compares with
``file registry``  a literal message quoting a name the raising file's registry holds
                   (``The 'fa3' backend is not supported on Blackwell GPUs``): the
                   file's other registered names

The refused name is one the deciding flag (:func:`deciding_flag`) accepts outside the
set: the first of :data:`USUAL_REFUSED` (backends users pass on NVIDIA GPUs) it accepts,
else the first in name order. A correct fix sets the deciding flag to a name of the set
that flag accepts (:func:`acceptable_backends`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

from evals.families.messages import literal_text, local_names, render_source
from kb.catalog_types import FlagSpec
from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.store import Store

__all__ = [
    "ROOT",
    "USUAL_REFUSED",
    "AttentionCase",
    "acceptable_backends",
    "attention_cases",
    "deciding_flag",
    "position_of",
]

ROOT = "sglang/srt/layers/attention/"
#: refused names preferred, in order (what users pass on NVIDIA GPUs)
USUAL_REFUSED = ("fa3", "flashinfer", "triton", "fa4", "trtllm_mha", "flashmla", "torch_native")
#: words naming the position a backend flag decides
POSITIONS = ("prefill", "decode", "mm")
_SET_LITERAL = r"^\s*{name}\s*=\s*([\[{{(].*[\]}})])\s*$"


@dataclass(frozen=True)
class AttentionCase:
    """One rendered refusal."""

    release: str
    check: Check
    exc: str
    message: str
    supported: frozenset[str]
    #: the refused name per position word ("prefill", "decode", "mm", "mamba", "")
    refused: tuple[tuple[str, str], ...]
    kind: str
    #: the supported names in the order the release lists them
    listed: tuple[str, ...] = ()


def _literal_sets(store: Store, release: str, check: Check, name: str) -> list[tuple[str, ...]]:
    """Literal collections of names assigned to ``name`` in the raising function, each in
    source order."""
    fn = store.functions_at(release, check.path, check.start_line)
    start = fn[0]["start_line"] if fn else check.start_line - 50
    out = []
    pat = re.compile(_SET_LITERAL.format(name=re.escape(name)))
    for text in store.file_lines(release, check.path, start, check.start_line):
        m = pat.match(text)
        if not m:
            continue
        try:
            node = ast.parse(m.group(1), mode="eval").body
        except SyntaxError:
            continue
        elts = getattr(node, "elts", None) or []
        items = [e.value for e in elts if isinstance(e, ast.Constant)]
        if items and len(items) == len(elts) and all(isinstance(v, str) for v in items):
            out.append(tuple(dict.fromkeys(items)))
    return out


def _refusable(supported: frozenset[str], flags: Sequence[FlagSpec], text: str) -> list[str]:
    """Names outside ``supported`` the flag deciding it accepts (:func:`deciding_flag`),
    usual ones first."""
    spec = deciding_flag(flags, supported, text, "")
    if spec is None:
        return []
    rest = sorted(set(spec.choices or ()) - supported)
    return sorted(
        rest, key=lambda n: USUAL_REFUSED.index(n) if n in USUAL_REFUSED else len(USUAL_REFUSED)
    )


def deciding_flag(
    flags: Sequence[FlagSpec], supported: frozenset[str], text: str, position: str
) -> FlagSpec | None:
    """The backend flag whose choices cover ``supported``: the position's own flag
    (``--mm-attention-backend`` for ``mm``), else one the message spells, else one
    naming no position, fewest choices first."""
    covering = [s for s in flags if s.choices and supported <= set(s.choices)]

    def words(s: FlagSpec) -> set[str]:
        return {w for f in s.flags for w in POSITIONS if f"-{w}-" in f"-{f[2:]}-"}

    if position in POSITIONS and position not in ("prefill", "decode"):
        covering = [s for s in covering if position in words(s)]
    covering.sort(
        key=lambda s: (not any(f in text for f in s.flags), bool(words(s)), len(s.choices or ()))
    )
    return covering[0] if covering else None


def position_of(expr: str) -> str:
    """The position a local name stands for (``prefill_be`` -> ``prefill``)."""
    for word in ("prefill", "decode"):
        if word in expr:
            return word
    return ""


def _formatted(
    store: Store, release: str, c: Check, flags: Sequence[FlagSpec]
) -> list[AttentionCase]:
    """Cases of a formatted message: a set it prints, names it refuses."""
    src = c.message or ""
    names = local_names(src)
    out = []
    for name in names:
        regs = store.registrations(release, registry=name)
        sets = (
            [tuple(dict.fromkeys(r["keys"][0] for r in regs))]
            if regs
            else _literal_sets(store, release, c, name)
        )
        others = [n for n in names if n != name]
        for listed in sets[:2]:
            supported = frozenset(listed)
            refusable = _refusable(supported, flags, src) if not regs else ["no_such_backend"]
            if not refusable or not others:
                continue
            refused = refusable[0]
            values: dict[str, object] = {n: refused for n in others}
            values[name] = dict.fromkeys(listed) if regs else listed
            message = render_source(src, values)
            if message is None:
                continue
            out.append(
                AttentionCase(
                    release,
                    c,
                    c.exc_type,
                    message,
                    supported,
                    tuple((position_of(n), refused) for n in others),
                    "registry" if regs else "printed",
                    listed,
                )
            )
    return out


def _literal(
    store: Store, release: str, c: Check, flags: Sequence[FlagSpec]
) -> list[AttentionCase]:
    """Cases of a literal message (names compared in the condition, or quoted ones the
    raising file registers)."""
    src = c.message or ""
    text = literal_text(src) or ""
    if "only supported" in src:
        cond = ast.parse(c.condition or "0", mode="eval")
        listed = tuple(
            dict.fromkeys(
                n.value
                for n in ast.walk(cond)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            )
        )
        refusable = _refusable(frozenset(listed), flags, src)
        if listed and refusable and "not (" not in (c.condition or ""):
            return [
                AttentionCase(
                    release,
                    c,
                    c.exc_type,
                    text,
                    frozenset(listed),
                    (("", refusable[0]),),
                    "condition",
                    listed,
                )
            ]
        return []
    out = []
    for q in re.findall(r"'([a-z0-9_]{1,30})'", text):
        regs = [r for r in store.registrations(release, key=q) if r["path"] == c.path]
        if regs:
            reg = regs[0]["registry"]
            keys = dict.fromkeys(
                r["keys"][0]
                for r in store.registrations(release, registry=reg)
                if r["path"] == c.path
            )
            keys.pop(q, None)
            out.append(
                AttentionCase(
                    release,
                    c,
                    c.exc_type,
                    text,
                    frozenset(keys),
                    (("mm", q),),
                    "file registry",
                    tuple(sorted(keys)),
                )
            )
    return out


def attention_cases(store: Store, releases: Sequence[str]) -> list[AttentionCase]:
    """Every case of ``releases`` the KB holds (releases it lacks are skipped), by release,
    path and line."""
    out: list[AttentionCase] = []
    have = {r["version"] for r in store.releases()}
    for release in releases:
        if release not in have:
            continue
        flags = load_catalog(store, release).flags
        for c in sorted(store.checks(release), key=lambda c: (c.path, c.start_line)):
            src = c.message or ""
            if not c.path.startswith(ROOT) or "backend" not in src.lower():
                continue
            out += (
                _formatted(store, release, c, flags)
                if literal_text(src) is None
                else _literal(store, release, c, flags)
            )
    return out


def acceptable_backends(
    case: AttentionCase, flags: Sequence[FlagSpec]
) -> tuple[FlagSpec, list[str]] | None:
    """The flag that decides ``case``'s refused positions and the supported names it
    accepts, in the release's order (None: no flag takes one)."""
    position = next((p for p, _ in case.refused if p), "")
    spec = deciding_flag(
        flags, case.supported, case.check.message or "", position
    ) or deciding_flag(
        [s for s in flags if s.choices and case.refused[0][1] in s.choices],
        frozenset(),
        case.check.message or "",
        position,
    )
    if spec is None:
        return None
    names = [n for n in case.listed if n in (spec.choices or ())]
    return (spec, names) if names else None
