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
import functools
from collections import ChainMap
from collections.abc import Collection, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from kb.catalog_types import Catalog
from kb.errors import UnsafeExpression
from kb.store import Store
from service.engine.cache import LRUCache, cached, facts_signature, release_key
from service.engine.evaluate import chain, params, resolution, source
from service.engine.evaluate.pieces import PIECE_KINDS, PiecePart, atom_signs  # noqa: F401
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
from service.engine.flags.parse import ParsedArgs

_MISSING = object()

# (release, check, names, facts, values read) -> what folding the earlier writes does
_FOLDS: LRUCache[Fold] = LRUCache("evaluation.folds", 20_000)
# (condition, facts, inputs read with their provenance) -> its Result
_PIECES: LRUCache[Result] = LRUCache("evaluation.pieces", 30_000)


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


def value_key(v: object) -> str:
    """A memo key's view of one attribute: its value's ``repr`` ("?" when absent)."""
    if v is None:
        return "?"
    return repr(v.value) if isinstance(v, Value) else repr(v)


def value_signature(v: object) -> object:
    """A memo key's view of one input whose provenance matters too (a :class:`Result`
    lists its inputs with their provenance): value ``repr`` and provenance, "?" when absent."""
    if v is None:
        return "?"
    return (repr(v.value), v.provenance) if isinstance(v, Value) else (repr(v), None)


def _holds(truth: object, polarity: bool) -> object:
    if truth is UNKNOWN:
        return UNKNOWN
    return truth if polarity else (not truth)


def _and(values: list[object]) -> object:
    if any(v is False for v in values):
        return False
    if any(v is UNKNOWN for v in values):
        return UNKNOWN
    return True


def _locals_before(
    store: Store, version: str, fn: dict[str, Any] | None, line: int
) -> dict[str, ast.expr]:
    """Simple ``name = expr`` assignments in ``fn`` before ``line`` (see :mod:`.source`)."""
    return source.locals_before(store, version, fn, line)


def _safe_truth(cond: str, env: Env) -> object:
    try:
        return evaluate(cond, env).truth
    except UnsafeExpression:  # e.g. a generator or walrus in SGLang's guard: undecidable here
        return UNKNOWN


@functools.lru_cache(maxsize=16384)
def _sorted_reads(cond: str) -> tuple[str, ...] | None:
    """The attributes ``cond`` reads, sorted (None when it cannot be read)."""
    try:
        return tuple(sorted(referenced_names(cond)))
    except Exception:  # noqa: BLE001 - unparsable: the evaluator decides (unknown)
        return None


def _truth(cond: str, env: Env, memo: dict[tuple[Any, ...], object] | None) -> object:
    """``evaluate(cond).truth``, memoised on the values of the attributes it reads."""
    if memo is None:
        return _safe_truth(cond, env)
    names = _sorted_reads(cond)
    if names is None:
        return _safe_truth(cond, env)
    attrs = env.attrs
    key = (cond, tuple((n, value_key(attrs.get(n))) for n in names))
    hit = memo.get(key, _MISSING)
    if hit is _MISSING:
        hit = memo[key] = _safe_truth(cond, env)
    return hit


Fold = tuple[tuple[tuple[str, Value], ...], list[str], dict[str, list[str]]]


def apply_earlier_writes(
    store: Store,
    version: str,
    check: dict[str, Any],
    attrs: dict[str, Value],
    facts: dict[str, Value],
    names: set[str],
    memo: dict[tuple[Any, ...], object] | None = None,
    *,
    facts_sig: str | None = None,
) -> tuple[list[str], dict[str, list[str]]]:
    """Fold the writes that run before ``check`` into ``attrs`` (in place).

    Returns (caveats, notes by attribute); see :func:`fold_earlier_writes`.
    """
    assigned, caveats, notes = fold_earlier_writes(
        store, version, check, attrs, facts, names, memo, facts_sig=facts_sig
    )
    for attr, value in assigned:
        attrs[attr] = value
    return list(caveats), {k: list(v) for k, v in notes.items()}


def fold_earlier_writes(
    store: Store,
    version: str,
    check: dict[str, Any],
    attrs: Mapping[str, Value],
    facts: dict[str, Value],
    names: Collection[str],
    memo: dict[tuple[Any, ...], object] | None = None,
    *,
    facts_sig: str | None = None,
    cache: bool = True,
) -> Fold:
    """What folding the writes that run before ``check`` does to ``attrs`` (left untouched):
    (the assignments in order, caveats, notes by attribute). The result is shared: read-only.

    ``memo`` (one per triage, whose facts are fixed) caches guard truths. The
    fold depends only on the values of :func:`write_dependencies` and on the
    facts (``facts_sig``, computed when not given), so it is memoised
    process-wide on them (bounded). ``cache=False`` skips that table, for
    callers that memoise what they derive from the fold themselves.
    """
    frozen = frozenset(names)
    if not cache:
        return _fold(store, version, check, ChainMap({}, attrs), facts, frozen, memo)  # type: ignore[arg-type]
    deps = write_dependencies(store, version, check, frozen, frozenset(facts))
    key = (
        release_key(store, version, "folds"),
        check["id"],
        tuple(sorted(frozen)),
        facts_sig or facts_signature(facts),
        tuple(value_key(attrs.get(d)) for d in deps),
    )
    hit = _FOLDS.get(key)
    if hit is None:
        hit = _fold(store, version, check, ChainMap({}, attrs), facts, frozen, memo)  # type: ignore[arg-type]
        _FOLDS.put(key, hit)
    return hit


#: how many rounds of "the attributes earlier writes read" join the fold
_CLOSURE_DEPTH = 2
#: at most this many writes are folded for one check
_MAX_FOLDED = 400


def fold_plan(
    store: Store,
    version: str,
    check: dict[str, Any],
    names: frozenset[str],
    fact_names: frozenset[str] = frozenset(),
) -> tuple[tuple[tuple[chain.Write, resolution.PreparedWrite], ...], tuple[str, ...]]:
    """The writes folded before ``check`` in validation order, prepared, and the attributes
    that decide how they fold (cached per release).

    The writes are those of ``names`` and, up to :data:`_CLOSURE_DEPTH` rounds, of the
    attributes their values and guards read (a declaration reading a value an earlier
    hook declared sees that declaration). They are sorted by pipeline position, so each
    is evaluated over exactly the writes that ran before it.
    """

    def build() -> tuple[tuple[tuple[chain.Write, resolution.PreparedWrite], ...], tuple[str, ...]]:
        deps = set(names)
        seen: set[str] = set()
        writes: dict[tuple[str, int, str], tuple[chain.Write, resolution.PreparedWrite]] = {}
        frontier = set(names)
        for _ in range(_CLOSURE_DEPTH + 1):
            added: set[str] = set()
            for attr in sorted(frontier - seen):
                seen.add(attr)
                for w in chain.earlier_writes(store, version, attr, check):
                    if len(writes) >= _MAX_FOLDED:
                        break
                    pw = resolution.prepare_write(store, version, w, fact_names)
                    writes[(w.path, w.line, attr)] = (w, pw)
                    for text in [pw.value or "", *(g for g, _ in pw.all_guards(False))]:
                        try:
                            added |= referenced_names(text) if text else set()
                        except Exception:  # noqa: BLE001 - unparsable: evaluated as unknown
                            continue
            deps |= added
            frontier = added - seen
            if not frontier:
                break
        order = sorted(
            writes.values(),
            key=lambda p: (
                p[0].rank if p[0].rank is not None else -1.0,
                p[0].path,
                p[0].line,
                p[0].attr,
            ),
        )
        return tuple(order), tuple(sorted(deps))

    key = (
        *release_key(store, version, "fold-plan"),
        check["id"],
        tuple(sorted(names)),
        hash(fact_names),
    )
    return cached(key, build)


def write_dependencies(
    store: Store,
    version: str,
    check: dict[str, Any],
    names: frozenset[str],
    fact_names: frozenset[str] = frozenset(),
) -> tuple[str, ...]:
    """The attributes that decide how the earlier writes of ``names`` fold in (cached):
    ``names`` themselves and every attribute read by the folded writes' guards and values."""
    return fold_plan(store, version, check, names, fact_names)[1]


def _fold(
    store: Store,
    version: str,
    check: dict[str, Any],
    attrs: MutableMapping[str, Value],
    facts: dict[str, Value],
    names: frozenset[str],
    memo: dict[tuple[Any, ...], object] | None,
) -> Fold:
    """The uncached fold: (assignments in order, caveats, notes); ``attrs`` is scratch space
    (assigned in place). Only the writes of ``names`` are reported (notes and caveats);
    the others are folded so that later writes read what ran before them."""
    done: list[tuple[str, Value]] = []

    def assign(attr: str, value: Value) -> None:
        attrs[attr] = value
        done.append((attr, value))

    caveats: list[str] = []
    notes: dict[str, list[str]] = {}
    plan, _ = fold_plan(store, version, check, names, frozenset(facts))
    for w, pw in plan:
        attr = w.attr
        report = attr in names
        env = Env(attrs, facts)
        same_fn = w.function == check["function"] and w.path == check["path"]
        guards = pw.all_guards(same_fn)
        holds = _and([_holds(_truth(cond, env, memo), pol) for cond, pol in guards])
        when = " and ".join(cond if pol else f"not ({cond})" for cond, pol in guards) or "always"
        where = f"{w.path}:{w.line}"
        if holds is False:
            continue
        if w.rank is None:
            if report:
                notes.setdefault(attr, []).append(
                    f"may be changed at {where} when {when} (order relative to the check unknown)"
                )
            continue
        if holds is True and not pw.reached and not same_fn:
            holds = UNKNOWN  # in a helper of a step called from several places: guards unknown
        try:
            value = evaluate(pw.value, env).value if pw.value else UNKNOWN
        except UnsafeExpression:
            value = UNKNOWN
        if value is UNKNOWN and _transforms_itself(pw.value, attr):
            # e.g. model_path = _resolve_or_download(self.model_path): same meaning, new form
            if report:
                notes.setdefault(attr, []).append(f"rewritten at {where} from its own value")
            continue
        if holds is True and value is not UNKNOWN:
            assign(
                attr,
                Value(
                    value, Provenance("write", resolution.write_provenance(version, w, value, when))
                ),
            )
            if report:
                notes.setdefault(attr, []).append(f"set to {value!r} at {where}")
        else:
            msg = f"may be changed at {where} when {when}"
            if holds is True:
                assign(
                    attr,
                    Value(
                        UNKNOWN,
                        Provenance(
                            "write", f"set at {where} to `{pw.value}`, not known statically"
                        ),
                    ),
                )
            if report:
                notes.setdefault(attr, []).append(msg)
                caveats.append(f"`{attr}` {msg}")
    return tuple(done), caveats, notes


def _transforms_itself(value_src: str | None, attr: str) -> bool:
    """Does the written expression read the attribute it writes (a normalisation)?"""
    if not value_src:
        return False
    try:
        return attr in referenced_names(value_src)
    except Exception:  # noqa: BLE001
        return False


def prepared_pieces(
    store: Store, version: str, check: dict[str, Any], fact_names: frozenset[str]
) -> tuple[list[tuple[str, str, bool, int | None]], set[str]]:
    """The pieces of ``check``'s path condition with locals substituted (cached per check)."""
    key = release_key(store, version, f"pieces:{check['id']}:{hash(fact_names)}")
    return cached(key, lambda: _prepare(store, version, check, fact_names))


def _prepare(
    store: Store, version: str, check: dict[str, Any], fact_names: frozenset[str]
) -> tuple[list[tuple[str, str, bool, int | None]], set[str]]:
    fns = store.functions_at(version, check["path"], check["start_line"])
    fn = fns[0] if fns else None
    local = _locals_before(store, version, fn, check["start_line"])
    local.update(params.flag_params(store, version, fn, check["path"], local, fact_names))
    pieces: list[tuple[str, str, bool, int | None]] = []
    if fn is not None:
        for site in chain.call_site_guards(store, version, fn["qualname"], check["path"]):
            for g in site.guards:
                pieces.append(("call_site", g.condition, g.polarity, g.line))
            break  # the first call site (several are ORed; one is enough to reach the check)
    for g in check["guards"]:
        pieces.append(("guard", g["condition"], g["polarity"], g["line"]))
    if check["kind"] == "assert" and check["condition"]:
        pieces.append(("test", check["condition"], False, check["test_start"]))
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
        except Exception:  # noqa: BLE001 - unparsable text is evaluated as unknown below
            continue
    return texts, names


def piece_kinds(store: Store, version: str, check: dict[str, Any]) -> list[str]:
    """The kind (:data:`PIECE_KINDS`) of each piece of :func:`prepared_pieces`, in order
    (cached per check). An early exit is an ``exit_raise`` when its ``if`` body raises."""

    def build() -> list[str]:
        fns = store.functions_at(version, check["path"], check["start_line"])
        fn = fns[0] if fns else None
        kinds: list[str] = []
        if fn is not None:
            for site in chain.call_site_guards(store, version, fn["qualname"], check["path"]):
                kinds += ["call_site"] * len(site.guards)
                break
        raising = _raising_ifs(store, version, fn)
        for g in check["guards"]:
            if g.get("kind") == "early_exit":
                kinds.append("exit_raise" if g.get("line") in raising else "exit_return")
            else:
                kinds.append("if")
        if check["kind"] == "assert" and check["condition"]:
            kinds.append("test")
        return kinds

    return cached(release_key(store, version, f"piece-kinds:{check['id']}"), build)


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
    check: dict[str, Any],
    attrs: dict[str, Value],
    facts: dict[str, Value],
    *,
    apply_writes: bool = True,
    memo: dict[tuple[Any, ...], object] | None = None,
    facts_sig: str | None = None,
) -> PathEvaluation:
    """Evaluate every piece of ``check``'s path condition.

    ``facts_sig`` is :func:`~service.engine.cache.facts_signature` of ``facts`` when the caller
    has it (it is computed otherwise); the earlier writes and each piece are
    memoised on it and on the inputs they read.
    """
    texts, names = prepared_pieces(store, version, check, frozenset(facts))
    fsig = facts_sig or facts_signature(facts)
    attrs = dict(attrs)
    caveats: list[str] = []
    notes: dict[str, list[str]] = {}
    if apply_writes:
        caveats, notes = apply_earlier_writes(
            store, version, check, attrs, facts, names, memo, facts_sig=fsig
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
        except Exception as exc:  # noqa: BLE001 - UnsafeExpression / syntax: unknown, said so
            caveats.append(f"could not evaluate `{cond[:80]}`: {exc}")
            res = Result(UNKNOWN, UNKNOWN, (), frozenset(), (cond[:80],))
        parts.append(
            PiecePart(role, cond, pol, line, res, _holds(res.truth, pol), kinds[i], i == test_at)
        )
    fired = _and([p.holds for p in parts]) if parts else UNKNOWN
    return PathEvaluation(fired, parts, names, caveats, notes)


def _evaluate_piece(cond: str, env: Env, fsig: str) -> Result:
    """``evaluate(cond, env)``, memoised on the facts and on the value *and provenance*
    of every attribute ``cond`` reads (a Result lists its inputs with their provenance)."""
    try:
        read = referenced_names(cond)
    except Exception:  # noqa: BLE001 - let the evaluator raise its own error
        return evaluate(cond, env)
    key = (cond, fsig, tuple((n, value_signature(env.attrs.get(n))) for n in sorted(read)))
    hit = _PIECES.get(key)
    if hit is None:
        hit = evaluate(cond, env)
        _PIECES.put(key, hit)
    return hit
