"""Evaluate a check's full path condition against the flags and facts.

The *path condition* of a check is what must hold for it to fire:

    call-site guards  AND  guards inside the function  AND  NOT test   (assert)
    call-site guards  AND  guards inside the function                 (raise)

It is evaluated with three-valued logic (:mod:`service.engine.expr.interpreter`) over an environment
built from, in increasing precedence: declared defaults, values in a logged
``server_args=ServerArgs(...)`` line, the user's flags (parsed with the
release's own catalog), and the writes of earlier validation steps whose
guards hold (``NEXTN`` → ``EAGLE``, say). A write whose guard cannot be
decided is reported as "may be changed at path:line when …" and its value
becomes unknown rather than guessed. Local variables of the checking function
(``model_arch = ...``) are substituted symbolically before evaluation.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kb.catalog_types import Catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.cache import LRUCache, cached, facts_signature, release_key
from service.engine.evaluate import chain, params, resolution, source
from service.engine.evaluate.context import CheckContext
from service.engine.evaluate.fold import apply_earlier_writes, fold_earlier_writes, fold_plan
from service.engine.evaluate.guard_memo import sorted_reads
from service.engine.evaluate.memo_keys import value_key, value_signature
from service.engine.evaluate.pieces import PiecePart, all_hold, piece_holds
from service.engine.evaluate.source import substitute
from service.engine.expr.interpreter import (
    UNKNOWN,
    Env,
    Provenance,
    Result,
    Value,
    evaluate,
    referenced_names,
)
from service.engine.expr.trace import FactsTrace, Reads, reads_match
from service.engine.flags.parse import ParsedArgs

#: its own names, and those of its neighbours the rule cards import from here
__all__ = [
    "PathEvaluation",
    "base_attrs",
    "evaluate_check",
    "evaluate_path",
    "fold_earlier_writes",
    "path_fires",
    "fold_plan",
    "piece_kinds",
    "prepared_pieces",
    "substitute",
    "value_signature",
]

# (condition, facts, inputs read with their provenance) -> its Result; (condition, None,
# inputs) when its evaluation asked the facts nothing
_PIECES: LRUCache[Result] = LRUCache("evaluation.pieces", 30_000)
# (condition, values of the attributes it reads) -> its truth, per way the facts answered
# what it asked them (by value)
_TRUTHS: LRUCache[tuple[tuple[Reads, object], ...]] = LRUCache("evaluation.piece_truths", 30_000)
_TRUTH_VARIANTS = 8


@dataclass
class PathEvaluation:
    fired: object  # True / False / UNKNOWN
    parts: list[PiecePart]
    attrs: set[str]
    caveats: list[str] = field(default_factory=list)
    write_notes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def test(self) -> PiecePart | None:
        """The check's own test (an assert's test, else a raise's innermost ``if``)."""
        return next((p for p in reversed(self.parts) if p.own_test), None)

    @property
    def test_attrs(self) -> frozenset[str]:
        """The attributes the check's own test reads (what a fix should be about)."""
        t = self.test
        return frozenset(t.result.names) if t is not None else frozenset()

    @property
    def test_unknown(self) -> bool:
        """The check's own test could not be decided."""
        t = self.test
        return t is not None and t.holds is UNKNOWN


def base_attrs(
    catalog: Catalog, parsed: ParsedArgs, server_args_log: dict[str, Any] | None = None
) -> dict[str, Value]:
    """Defaults < logged resolved values < the user's flags.

    The defaults part is built once per catalog (catalogs are cached and read-only)
    and copied, so the dict, its order and its values are those of a fresh build.
    """
    attrs = dict(_catalog_defaults(catalog))
    for key, value in (server_args_log or {}).items():
        attrs[key] = Value(value, Provenance("derived", "value in the logged server_args line"))
    for attr, pf in parsed.values.items():
        attrs[attr] = Value(pf.value, Provenance("flag", " ".join(pf.raw)))
    return attrs


#: a flag whose value the log does not show (no command line, not printed, not implied)
UNSEEN = Value(UNKNOWN, Provenance("unknown", "the log shows no command line"))


def unseen_defaults(attrs: dict[str, Value]) -> dict[str, Value]:
    """``attrs`` with every value that is only a default made unknown: for a log without a
    command line, what the user set is unknown, not the defaults."""
    return {k: UNSEEN if v.provenance.kind == "default" else v for k, v in attrs.items()}


def _catalog_defaults(catalog: Catalog) -> dict[str, Value]:
    """attr -> its default: the flags' first, then the declarations' (read-only).

    Built once per KB catalog (:class:`~kb.catalogs.IndexedCatalog`, read-only and
    shared), every time for any other catalog.
    """
    from kb.catalogs import IndexedCatalog

    def build() -> dict[str, Value]:
        attrs: dict[str, Value] = {}
        for spec in catalog.flags:
            if spec.default_known and spec.attr not in attrs:
                attrs[spec.attr] = Value(
                    spec.default,
                    Provenance("default", f"default {spec.default!r} ({spec.path}:{spec.line})"),
                )
        for decl in catalog.declarations:
            if decl.default_known:
                attrs[decl.attr] = Value(
                    decl.default,
                    Provenance("default", f"default {decl.default!r} ({decl.path}:{decl.line})"),
                )
        return attrs

    return catalog.cached("_defaults", build) if isinstance(catalog, IndexedCatalog) else build()


def _locals_before(
    store: Store, version: str, fn: dict[str, Any] | None, line: int
) -> dict[str, ast.expr]:
    """Simple ``name = expr`` assignments in ``fn`` before ``line`` (see :mod:`.source`)."""
    return source.locals_before(store, version, fn, line)


def prepared_pieces(
    store: Store, version: str, check: Check, fact_names: frozenset[str]
) -> tuple[list[tuple[str, str, bool, int | None]], set[str]]:
    """The pieces of ``check``'s path condition with locals substituted (cached per check)."""
    key = release_key(store, version, f"pieces:{check.id}:{hash(fact_names)}")
    return cached(key, lambda: _prepare(store, version, check, fact_names))


def _prepare(
    store: Store, version: str, check: Check, fact_names: frozenset[str]
) -> tuple[list[tuple[str, str, bool, int | None]], set[str]]:
    fns = store.functions_at(version, check.path, check.start_line)
    fn = fns[0] if fns else None
    local = _locals_before(store, version, fn, check.start_line)
    local.update(params.flag_params(store, version, fn, check.path, local, fact_names))
    pieces: list[tuple[str, str, bool, int | None]] = []
    if fn is not None:
        for site in chain.call_site_guards(store, version, fn["qualname"], check.path):
            for g in site.guards:
                pieces.append(("call_site", g.condition, g.polarity, g.line))
            break  # the first call site (several are ORed; one is enough to reach the check)
    for guard in check.guards:
        pieces.append(("guard", guard["condition"], guard["polarity"], guard["line"]))
    if check.kind == "assert" and check.condition:
        pieces.append(("test", check.condition, False, check.test_start))
    param = resolution.args_param(store, version, fn)
    fb = resolution.fallbacks(store, version)
    texts = [
        (
            role,
            source.inline_helpers(
                store,
                version,
                resolution.rewrite(
                    params.rename_fields(
                        store, version, fn, check, substitute(cond, local, fact_names)
                    ),
                    param,
                    fb,
                ),
                fact_names,
            ),
            pol,
            line,
        )
        for role, cond, pol, line in pieces
    ]
    names: set[str] = set()
    for _, cond, _, _ in texts:
        try:
            names |= set(referenced_names(cond))
        except Exception:  # unparsable text is evaluated as unknown below
            continue
    return texts, names


def piece_kinds(store: Store, version: str, check: Check) -> list[str]:
    """The kind (:data:`~service.engine.evaluate.pieces.PIECE_KINDS`) of each piece of :func:`prepared_pieces`, in order
    (cached per check). An early exit is an ``exit_raise`` when its ``if`` body raises."""

    def build() -> list[str]:
        fns = store.functions_at(version, check.path, check.start_line)
        fn = fns[0] if fns else None
        kinds: list[str] = []
        if fn is not None:
            for site in chain.call_site_guards(store, version, fn["qualname"], check.path):
                kinds += ["call_site"] * len(site.guards)
                break
        raising = _raising_ifs(store, version, fn)
        for g in check.guards:
            if g.get("kind") == "early_exit":
                kinds.append("exit_raise" if g.get("line") in raising else "exit_return")
            else:
                kinds.append("if")
        if check.kind == "assert" and check.condition:
            kinds.append("test")
        return kinds

    return cached(release_key(store, version, f"piece-kinds:{check.id}"), build)


def _raising_ifs(store: Store, version: str, fn: dict[str, Any] | None) -> frozenset[int]:
    """Lines of the ``if`` statements of ``fn`` whose body raises directly."""
    node = chain.function_ast(store, version, fn) if fn is not None else None
    if node is None or fn is None:
        return frozenset()
    offset = fn["start_line"] - 1
    return frozenset(
        sub.lineno + offset
        for sub in ast.walk(node)
        if isinstance(sub, ast.If) and any(isinstance(s, ast.Raise) for s in sub.body)
    )


def _own_test_index(texts: list[tuple[str, str, bool, int | None]], kinds: list[str]) -> int:
    """Index of the check's own test: an assert's test, else the innermost enclosing ``if``
    (-1 when there is none, e.g. a raise at the top of its function)."""
    for i in range(len(texts) - 1, -1, -1):
        if texts[i][0] == "test":
            return i
    for i in range(len(texts) - 1, -1, -1):
        if texts[i][0] == "guard" and kinds[i] in ("if", ""):
            return i
    return -1


def evaluate_path(
    store: Store,
    version: str,
    check: Check,
    attrs: dict[str, Value],
    facts: dict[str, Value],
    *,
    apply_writes: bool = True,
    memo: dict[tuple[Any, ...], object] | None = None,
    facts_sig: str | None = None,
) -> PathEvaluation:
    """Evaluate every piece of ``check``'s path condition.

    ``facts_sig`` is :func:`~service.engine.cache.facts_signature` of ``facts`` when the caller
    has it (it is computed otherwise); each piece is memoised on it and on the inputs it
    reads, the earlier writes on the facts and inputs they read.
    """
    texts, names = prepared_pieces(store, version, check, frozenset(facts))
    fsig = facts_sig or facts_signature(facts)
    attrs = dict(attrs)
    caveats: list[str] = []
    notes: dict[str, list[str]] = {}
    if apply_writes:
        caveats, notes = apply_earlier_writes(
            store, version, check, attrs, facts, names, memo, fsig
        )
    env = Env(attrs, facts)
    parts: list[PiecePart] = []
    kinds = piece_kinds(store, version, check)
    if len(kinds) != len(texts):
        kinds = [""] * len(texts)
    test_at = _own_test_index(texts, kinds)
    for i, (role, cond, pol, line) in enumerate(texts):
        try:
            res = _evaluate_piece(cond, env, fsig)
        except Exception as exc:  # UnsafeExpression / syntax: unknown, said so
            caveats.append(f"could not evaluate `{cond[:80]}`: {exc}")
            res = Result(UNKNOWN, UNKNOWN, (), frozenset(), (cond[:80],))
        parts.append(
            PiecePart(
                role, cond, pol, line, res, piece_holds(res.truth, pol), kinds[i], i == test_at
            )
        )
    fired = all_hold([p.holds for p in parts]) if parts else UNKNOWN
    return PathEvaluation(fired, parts, names, caveats, notes)


def evaluate_check(ctx: CheckContext, attrs: dict[str, Value] | None = None) -> PathEvaluation:
    """:func:`evaluate_path` of ``ctx``'s check with its attributes (or ``attrs``, an edited
    environment), facts and facts key."""
    return evaluate_path(
        ctx.store,
        ctx.release,
        ctx.check,
        ctx.attrs if attrs is None else attrs,
        ctx.facts,
        facts_sig=ctx.facts_key,
    )


def path_fires(
    store: Store,
    version: str,
    check: Check,
    attrs: Mapping[str, Value],
    facts: Mapping[str, Value],
    fact_names: frozenset[str],
    sigs: dict[object, object],
) -> tuple[object, Reads]:
    """Whether ``check`` fires (True / False / UNKNOWN) with its earlier writes unapplied,
    as :func:`evaluate_path` says, and the questions its pieces asked the facts, by value.
    ``fact_names``: the facts' keys; ``sigs``: their answers so far (one per set of facts).
    Each piece's truth is memoised on the values of the attributes it reads and, per way
    the facts answered, on the facts it asked by value: a truth shows no origin, so
    another GPU answering alike reuses it."""
    texts, _ = prepared_pieces(store, version, check, fact_names)
    asked: dict[object, object] = {}
    holds: list[object] = []
    for _, cond, pol, _ in texts:
        read = sorted_reads(cond)  # None: evaluated unmemoised, as evaluate_path does
        key = (cond, tuple(value_key(attrs.get(n)) for n in read or ()))
        variants = _TRUTHS.get(key) or () if read is not None else ()
        hit = next((v for v in variants if reads_match(v[0], facts, sigs)), None)
        if hit is None:
            trace = FactsTrace(facts, sigs)
            trace.provenance = False
            truth = _truth(cond, Env(attrs, trace))
            hit = (trace.snapshot(), truth)
            if read is not None:
                _TRUTHS.put(key, (*variants, hit)[-_TRUTH_VARIANTS:])
        asked.update(hit[0])
        holds.append(piece_holds(hit[1], pol))
    return (all_hold(holds) if texts else UNKNOWN), tuple(asked.items())


def _truth(cond: str, env: Env) -> object:
    """``cond``'s truth under ``env``; UNKNOWN when it cannot be evaluated."""
    try:
        return evaluate(cond, env).truth
    except Exception:  # UnsafeExpression / syntax: unknown, as evaluate_path has it
        return UNKNOWN


def _evaluate_piece(cond: str, env: Env, fsig: str) -> Result:
    """``evaluate(cond, env)``, memoised on the value *and provenance* of every attribute
    ``cond`` reads (a Result lists its inputs with their provenance) and, when the
    evaluation asked the facts anything, on the facts (``fsig``). An evaluation is
    deterministic in what it reads: one that asked no fact for these inputs asks none
    under any facts, so its result serves every GPU and model."""
    read = sorted_reads(cond)
    if read is None:  # let the evaluator raise its own error
        return evaluate(cond, env)
    inputs = tuple((n, value_signature(env.attrs.get(n))) for n in read)
    hit = _PIECES.get((cond, None, inputs)) or _PIECES.get((cond, fsig, inputs))
    if hit is None:
        trace = FactsTrace(env.facts)
        hit = evaluate(cond, Env(env.attrs, trace, env.functions, env.arg_objects))
        _PIECES.put((cond, fsig if trace.reads else None, inputs), hit)
    return hit
