"""Fixes read from what a post-validation crash printed, gathered and judged in one place.

:meth:`service.engine.triage.Engine.triage` asks :func:`post_validation_verdicts` for the
candidates that come from the message rather than from the check's condition, in this
order (each list judged, then the next; an edit proposed twice is kept once):

1. **the message's own recipe** (:mod:`service.engine.fixes.recipe`): "Please use
   `--attention-backend flashinfer`", "increase --mem-fraction-static" (sized by
   :mod:`service.engine.fixes.sizing`); a recipe that says "instead" also drops the flags
   the check compares with the value it moves (:func:`_moved_from`);
2. **a supported backend** for one a layer refused (:mod:`service.engine.fixes.backends`);
3. **a registered alternative** to a registry key that missed
   (:mod:`service.engine.fixes.registry`).

Each candidate of 1 and 2 is judged like any fix: the check is re-evaluated with the
edit (the values the message printed for what the edit replaces are not pinned then); an
edit under which the check still fires is dropped; one the evaluation cannot decide is
taken to fix it on the message's word (the recipe, or the list it printed), which the fix
says; then the release's neighbouring checks are re-checked, and the rule cards judge the
fixed command later in the triage. Without the user's command the edits are proposed and
judged on the flags the raised check implies (:func:`~service.engine.fixes.implied.assumed_launch`),
each saying so. Clean candidates come first (before the proposer's);
those that trip another check come after the proposer's (``PostValidation.tripped``). A rough size (no bound printed) adds what is not known: the free
GPU memory at start-up, and which log lines would settle it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kb.catalog_types import Catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.answer import UnknownFact
from service.engine.cache import facts_signature
from service.engine.evaluate.context import CheckContext
from service.engine.evaluate.message_facts import MessageFacts, held_at_crash
from service.engine.evaluate.path_condition import PathEvaluation, evaluate_path
from service.engine.expr.interpreter import UNKNOWN, Value
from service.engine.fixes.backends import backend_edits
from service.engine.fixes.filters import sibling_trips
from service.engine.fixes.implied import assumed_launch, command_unknown
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.neighbours import recheck_neighbours
from service.engine.fixes.propose import fixes_check
from service.engine.fixes.recipe import RecipeEdit, read_recipe, recipe_edits
from service.engine.fixes.registry import registry_verdicts

__all__ = ["PostValidation", "post_validation_verdicts"]

#: candidates judged from the message (the recipe and the backends together)
MAX_CANDIDATES = 8


@dataclass
class PostValidation:
    """The judged candidates (best first), the citations they rest on, and what is not
    known about them."""

    verdicts: list[Verdict] = field(default_factory=list)
    #: candidates of the message that trip another check: listed after the proposer's
    tripped: list[Verdict] = field(default_factory=list)
    citations: list[str] = field(default_factory=list)
    unknowns: list[UnknownFact] = field(default_factory=list)


def _judge(
    store: Store,
    version: str,
    check: Check,
    edit: Edit,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    catalog: Catalog,
    replaced: set[str],
    word: str,
) -> Verdict | None:
    """The verdict of ``edit`` (see the module), None when the check still fires; ``word``
    is said on the fix when the check's own test is not decided statically."""
    kept = {
        k: v
        for k, v in facts.items()
        if not (v.provenance.kind == "message" and repr(v.value) in replaced)
    }
    sig = facts_signature(kept)
    v = fixes_check(store, version, check, edit, attrs, kept, catalog, facts_sig=sig)
    if v.fixes_check is False:
        return None
    if v.fixes_check is UNKNOWN:
        edit.notes.append(word)
    v.fixes_check = True
    if v.evaluation is not None:
        v.trips.extend(sibling_trips(check, v.evaluation))
    recheck_neighbours(store, version, check, v, attrs, kept, catalog, facts_sig=sig)
    return v


def post_validation_verdicts(
    ctx: CheckContext, printed: MessageFacts, message: str | None
) -> PostValidation:
    """The candidates of the module raising ``ctx``'s check (for ``message``, with the
    values ``printed`` in it), judged, and their citations."""
    store, version, check, catalog = ctx.store, ctx.release, ctx.check, ctx.catalog
    parsed, attrs, facts, facts_sig = ctx.parsed, ctx.attrs, ctx.facts, ctx.facts_key
    out = PostValidation()
    # no command: the candidates are judged on the flags the raised check implies
    crashed = held_at_crash(
        evaluate_path(store, version, check, attrs, facts, facts_sig=facts_sig), printed
    )
    launch = assumed_launch(
        store, version, check, crashed, attrs, parsed, catalog, facts, facts_sig=facts_sig
    )
    if launch is not None:
        attrs, parsed = launch.attrs, launch.parsed
    user_set = set(parsed.values)
    blind = launch is None and command_unknown(parsed, attrs, catalog)
    steps = read_recipe(message, catalog) or read_recipe(_literal_message(check), catalog)
    # (edit, replaced values, citation, what it rests on when the evaluation cannot tell)
    edits: list[tuple[Edit, set[str], str | None, str]] = []
    rough: list[str] = []
    by_attr = catalog.by_attr()
    for r in recipe_edits(steps, catalog, attrs, user_set, printed.bound, message):
        cite = f"{version}:{check.path}:{check.start_line}"
        moved = [] if r.remove else _moved_from(crashed, r, None if blind else user_set)
        edit = Edit(
            set={} if r.remove else {r.attr: r.value},
            remove=[r.attr, *r.also] if r.remove else moved,
            origin=f"the message's own recipe (raised at {cite}): {r.why}"
            + (f"; instead of {', '.join(by_attr[a].flags[0] for a in moved)}" if moved else ""),
            preference=0,
        )
        edits.append(
            (
                edit,
                set(),
                cite,
                "on the message's word: its own test is not decided "
                "statically" + ("; the size is a rough step" if r.rough else ""),
            )
        )
        if r.rough:
            rough.append(f"{r.step.flag} {r.value}")
    traced = {p.bound.expr: p.attr for p in printed.printed if p.role == "flag" and p.attr}
    for b in backend_edits(
        store, version, check, printed.bound, message, catalog, attrs, user_set, steps, traced
    ):
        was = f" in place of {b.old!r}" if b.old else ""
        edit = Edit(
            set={b.attr: b.value},
            origin=(
                f"supported: {b.value!r}{was} is one of {list(b.supported)}, the backends the "
                f"raising layer accepts (listed at {b.citation})"
            ),
            preference=0,
        )
        edits.append(
            (
                edit,
                {repr(b.old)} if b.old else set(),
                b.citation,
                "on the listed names: the check's own test is not decided statically",
            )
        )
    seen: set[Any] = set()
    clean: list[Verdict] = []
    tripped: list[Verdict] = []
    for edit, replaced, citation, word in edits[:MAX_CANDIDATES]:
        if edit.key() in seen or _no_op(edit, attrs):
            continue
        seen.add(edit.key())
        v = _judge(store, version, check, edit, attrs, facts, catalog, replaced, word)
        if v is None:
            continue
        (tripped if v.trips else clean).append(v)
        if citation and citation not in out.citations:
            out.citations.append(citation)
    registered, cites = registry_verdicts(
        store, version, check, printed.bound, catalog, parsed, attrs, facts, facts_sig=facts_sig
    )
    out.verdicts = clean + [v for v in registered if v.edit.key() not in seen]
    out.tripped = tripped
    if launch is not None:
        for v in [*out.verdicts, *tripped]:
            v.edit.notes.append(launch.note(catalog))
    out.citations += [c for c in cites if c not in out.citations]
    if rough:
        out.unknowns.append(
            UnknownFact(
                what="the free GPU memory at start-up",
                why=f"the message does not print it, so {', '.join(rough[:3])} is a rough step: "
                "whether it leaves room for the memory pool depends on it",
                settle='the lines SGLang logs while loading ("Load weight end ... avail mem=... GB", '
                '"KV Cache is allocated", "Memory pool end") or `nvidia-smi` on the node '
                "before the launch",
            )
        )
    return out


def _moved_from(ev: PathEvaluation, r: RecipeEdit, user_set: set[str] | None) -> list[str]:
    """For a recipe that says "instead" ("FA4 backend is only supported for prefill. Please
    use `--prefill-attention-backend fa4` instead."), the flags the launch set that the
    check compares with the value the recipe moves (``attention_backend == "fa4" or
    decode_attention_backend == "fa4"``): the edit drops them, else the check fires on.
    ``user_set`` None: the command is not known, so every such flag (whichever was set)."""
    if not isinstance(r.value, str) or not re.search(r"\binstead\b", r.step.text, re.I):
        return []
    quoted = re.compile(rf"""(['"]){re.escape(r.value)}\1""")
    out: list[str] = []
    for part in ev.parts:
        for atom in part.result.atoms:
            names = {n for n, _, _ in atom.inputs}
            if len(names) != 1 or not quoted.search(atom.text):
                continue
            (name,) = names
            if name != r.attr and (user_set is None or name in user_set) and name not in out:
                out.append(name)
    return out


def _no_op(edit: Edit, attrs: dict[str, Value]) -> bool:
    """Whether ``edit`` only sets flags to the values the launch (as known or implied) already
    has: "Cannot enable both --a and --b" read as "enable --a" asks for what crashed."""
    return (
        bool(edit.set)
        and not edit.remove
        and all(
            a in attrs
            and attrs[a].value is not UNKNOWN
            and type(attrs[a].value) is type(v)
            and attrs[a].value == v
            for a, v in edit.set.items()
        )
    )


def _literal_message(check: Check) -> str:
    """The located check's message source, for a recipe written in its literal text."""
    return (check.message or "").replace('"\n', '" ').replace("'\n", "' ")
