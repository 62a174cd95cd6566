"""The message's own recipe: the flag change an SGLang error message tells the user to make.

Many checks past argument validation say what to do: "Please use `--attention-backend
flashinfer`", "Use --linear-attn-prefill-backend triton instead", "try to increase
--mamba-full-memory-ratio or --max-mamba-cache-size", "Raise --mem-fraction-static above
0.873", "Please set a smaller number for `--max-running-requests`". :func:`read_recipe`
reads those steps out of the message as printed (or the located check's literal text):
only flags the release's catalog declares, each with

* its **verb**: ``set`` (use, set, pass, add, enable, specify, requires, try), ``increase``
  (increase, raise, larger, higher, bigger, more), ``decrease`` (reduce, lower, decrease,
  smaller, fewer, less) or ``remove`` (remove, unset, drop, disable, without) — the last
  verb word of the clause before the flag; a flag joined to the previous one by "or",
  "and", "," or "/" shares its verb (flags to drop joined by "and" are dropped together:
  "Disable --a and --b" is one step);
* its **value** when the message gives one: the token right after the flag (``--x y``,
  ``--x=y``, "set --x to y"), kept only when the release accepts it (one of the flag's
  choices, a number for a numeric flag, nothing for a switch); "above N" / "at least N"
  / "below N" gives a bound instead.

A clause that negates ("--x is not supported", "does not support --x", "cannot be used
with --x", "Cannot enable both --x and --y") has no verb before the flag and gives no step;
nor does a verb that states the condition of the failure ("... is not compatible with
radix cache when using --x y"). :func:`recipe_edits` turns the
steps into candidate edits: a value given is set as is, a switch is turned on, ``remove``
drops a flag the launch set, and a direction on a numeric flag is sized by
:func:`service.engine.fixes.sizing.sized_value` (the current value from the command, the
message or the release's default; the bound the message printed). Candidates are judged
by the same machinery as every other fix (:mod:`service.engine.fixes.candidates`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kb.catalog_types import Catalog, FlagSpec
from service.engine.expr.interpreter import Value
from service.engine.fixes.sizing import current_value, is_numeric, sized_value
from service.engine.locate.message import BoundValue

__all__ = ["RecipeEdit", "RecipeStep", "read_recipe", "recipe_edits"]

#: longest message read for a recipe
MAX_CHARS = 4_000
#: steps read from one message
MAX_STEPS = 6

_FLAG = re.compile(r"--[a-z][a-z0-9]{0,30}(?:[-_][a-z0-9]{1,30}){0,8}")
_VALUE = re.compile(r"[ =]`?'?\"?([A-Za-z0-9_.+\-]{1,60})")
_TO_VALUE = re.compile(r"`?'?\"? to `?'?\"?([A-Za-z0-9_.+\-]{1,60})")
_BOUND = re.compile(
    r"`?'?\"? ?(above|at least|over|greater than|below|at most|under|less than)"
    r" ~?([0-9]{1,12}(?:\.[0-9]{1,12})?)"
)
_WORD = re.compile(r"[a-z]{2,20}")
_CLAUSE_END = re.compile(r"[.;:!?](?:\s|$)|\n")
_JOIN = re.compile(r"\s{0,3}`?'?\"?\s{0,3}(?:,|/|or|and|, or|, and)\s{0,3}`?'?\"?\s{0,3}")
_VERBS = {
    "set": (
        "use",
        "set",
        "pass",
        "add",
        "enable",
        "specify",
        "require",
        "requires",
        "try",
        "using",
        "setting",
        "adding",
        "enabling",
        "choose",
        "select",
        "switch",
    ),
    "increase": (
        "increase",
        "raise",
        "larger",
        "higher",
        "bigger",
        "more",
        "increasing",
        "raising",
    ),
    "decrease": (
        "reduce",
        "lower",
        "decrease",
        "smaller",
        "fewer",
        "less",
        "reducing",
        "lowering",
        "decreasing",
    ),
    "remove": ("remove", "unset", "drop", "disable", "without", "removing", "disabling"),
}
_VERB_OF = {w: v for v, words in _VERBS.items() for w in words}
_NEGATIONS = frozenset(
    {
        "not",
        "cannot",
        "can't",
        "doesn",
        "don",
        "incompatible",
        "unsupported",
        "invalid",
        "conflicts",
        "conflict",
        "no",
    }
)
#: words that make the clause after them the condition the check refused
#: ("not compatible with radix cache when using --mamba-scheduler-strategy no_buffer")
_CONDITIONS = frozenset({"when", "if", "while", "whenever", "unless", "because", "since"})
_DIRECTION = {
    "above": "increase",
    "at least": "increase",
    "over": "increase",
    "greater than": "increase",
    "below": "decrease",
    "at most": "decrease",
    "under": "decrease",
    "less than": "decrease",
}


@dataclass(frozen=True)
class RecipeStep:
    """One step of the message's recipe: ``verb`` the flag ``attr`` (spelled ``flag`` in
    the message) to ``value`` (None when the message gives none), or past ``bound``."""

    attr: str
    flag: str
    verb: str
    value: object = None
    bound: float | None = None
    text: str = ""
    #: how the message joins this flag to the previous one whose verb it shares ("and",
    #: "or", ",", "/"; empty when it has a verb of its own)
    joined: str = ""


@dataclass(frozen=True)
class RecipeEdit:
    """A candidate fix from a step: set ``attr`` to ``value`` (or drop it when ``remove``);
    ``why`` says where the value comes from (the message, or how it was sized)."""

    step: RecipeStep
    attr: str
    value: object = None
    remove: bool = False
    why: str = ""
    rough: bool = False
    #: the other flags dropped with ``attr`` ("Disable --a and --b": both, in one edit)
    also: tuple[str, ...] = ()


def _accepts(spec: FlagSpec, token: str) -> object:
    """The value ``token`` gives ``spec``, or None when the release would not accept it."""
    token = token.strip("`'\".,;)")
    if not token or token.startswith("--"):
        return None
    if spec.choices:
        for c in spec.choices:
            if str(c) == token:
                return c
        return None
    if is_numeric(spec):
        try:
            number = float(token)
        except ValueError:
            return None
        return int(number) if spec.type == "int" and number.is_integer() else number
    return None


def _verb_before(text: str) -> str | None:
    """The last verb word of ``text`` (the clause before a flag), None when the clause
    negates after it or has none."""
    words = _WORD.findall(text.lower().replace("n't", " not"))
    for i in range(len(words) - 1, -1, -1):
        w = words[i]
        if w in _NEGATIONS:
            return None
        if w in _VERB_OF:
            # a negated verb ("cannot enable both", "do not use") asks nothing; nor does
            # one that states the condition of the failure ("... when using --x y")
            before = words[max(0, i - 2) : i]
            if _NEGATIONS.intersection(before) or _CONDITIONS.intersection(before):
                return None
            return _VERB_OF[w]
    return None


def _clause_start(message: str, end: int) -> int:
    """Where the clause holding position ``end`` starts (after the last sentence end)."""
    start = 0
    for m in _CLAUSE_END.finditer(message, 0, end):
        start = m.end()
    return start


def _negated_after(message: str, end: int) -> bool:
    """Does the text right after a flag negate it ("--x is not supported")?"""
    after = message[end : end + 40].lower()
    return (
        bool(re.match(r"[`'\"]?\s{0,2}(?:\S{1,40}\s)?(?:is|are|was)\s(?:not|only|un)", after))
        or " not supported" in after[:30]
    )


def read_recipe(message: str | None, catalog: Catalog) -> list[RecipeStep]:
    """The steps ``message`` asks for (see the module), in the order it names them."""
    if not message:
        return []
    text = message[:MAX_CHARS]
    by_flag = catalog.by_flag()
    steps: list[RecipeStep] = []
    prev: tuple[int, str] | None = None  # (end of the previous flag, its verb)
    for m in _FLAG.finditer(text):
        flag = m.group(0).replace("_", "-").rstrip("-")
        spec = by_flag.get(flag)
        if spec is None:
            prev = None
            continue
        start = _clause_start(text, m.start())
        verb = None
        joined = ""
        if prev is not None and prev[0] >= start and _JOIN.fullmatch(text[prev[0] : m.start()]):
            verb = prev[1]
            joined = next(
                (w for w in ("and", "or", ",", "/") if w in text[prev[0] : m.start()].split()),
                ",",
            )
        if verb is None:
            verb = _verb_before(text[start : m.start()])
        value: object = None
        bound: float | None = None
        end = m.end()
        if verb is not None and _negated_after(text, end) and verb != "remove":
            verb = None
        if verb is not None:
            b = _BOUND.match(text, end)
            if b and is_numeric(spec):
                bound = float(b.group(2))
                verb = _DIRECTION[b.group(1)]
            else:
                for pat in (_TO_VALUE, _VALUE):
                    v = pat.match(text, end)
                    if v:
                        value = _accepts(spec, v.group(1))
                        if value is not None:
                            break
            if value is not None and verb in ("increase", "decrease"):
                verb = "set"
        if verb is None:
            prev = None
            continue
        prev = (end, verb)
        stop = _CLAUSE_END.search(text, end)
        quote = text[start : stop.start() + 1 if stop else len(text)].strip()
        step = RecipeStep(spec.attr, flag, verb, value, bound, quote[:200], joined)
        if all((s.attr, s.verb) != (step.attr, step.verb) for s in steps):
            steps.append(step)
        if len(steps) >= MAX_STEPS:
            break
    return steps


def recipe_edits(
    steps: list[RecipeStep],
    catalog: Catalog,
    attrs: dict[str, Value],
    user_set: set[str],
    bound: list[BoundValue],
    message: str | None = None,
) -> list[RecipeEdit]:
    """Candidate edits for ``steps``: the value the message gives, a switch turned on, a
    flag the launch set dropped, or a numeric flag sized in the asked direction."""
    by_attr = catalog.by_attr()
    out: list[RecipeEdit] = []
    removals = {id(g[0]): g for g in _removals(steps)}  # by the group's first step
    for s in steps:
        spec = by_attr.get(s.attr)
        if s.verb == "remove":
            group = removals.get(id(s), [])
            dropped = [g.attr for g in group if g.attr in user_set and g.attr in by_attr]
            if dropped:
                why = f"the message says: {s.text!r}"
                out.append(RecipeEdit(s, dropped[0], remove=True, why=why, also=tuple(dropped[1:])))
            continue
        if spec is None:
            continue
        if s.value is not None:
            out.append(RecipeEdit(s, s.attr, s.value, why=f"the message says: {s.text!r}"))
            continue
        if s.verb == "set" and not spec.takes_value:
            out.append(RecipeEdit(s, s.attr, True, why=f"the message says: {s.text!r}"))
            continue
        if s.verb in ("increase", "decrease") and is_numeric(spec):
            current = current_value(spec, attrs, bound, message, user_set)
            sized = sized_value(spec, s.verb, current, s.bound)
            if sized is not None:
                value, why, rough = sized
                out.append(
                    RecipeEdit(
                        s, s.attr, value, why=f"the message says: {s.text!r}; {why}", rough=rough
                    )
                )
    return out


def _removals(steps: list[RecipeStep]) -> list[list[RecipeStep]]:
    """The ``remove`` steps, grouped: flags one verb governs, joined by "and" ("Disable
    --enable-two-batch-overlap and --enable-single-batch-overlap", or "--a, --b and --c"),
    are one step that drops them all; joined by "or", each is a step of its own."""
    groups: list[list[RecipeStep]] = []
    run: list[RecipeStep] = []

    def flush() -> None:
        if not run:
            return
        joins = [s.joined for s in run[1:] if s.joined != ","]
        if joins and joins[-1] == "and":
            groups.append(list(run))
        else:
            groups.extend([s] for s in run)
        run.clear()

    for s in steps:
        if s.verb != "remove":
            flush()
            continue
        if not s.joined:
            flush()
        run.append(s)
    flush()
    return groups
