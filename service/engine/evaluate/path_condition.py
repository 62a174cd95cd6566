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
from service.engine.evaluate import chain
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

_MAX_SUBST_DEPTH = 3
_MISSING = object()

# (release, check, names, facts, values read) -> what folding the earlier writes does
_FOLDS: LRUCache[Fold] = LRUCache("evaluation.folds", 20_000)
# (condition, facts, inputs read with their provenance) -> its Result
_PIECES: LRUCache[Result] = LRUCache("evaluation.pieces", 30_000)


@dataclass
class PiecePart:
    role: str  # "call_site" | "guard" | "test"
    condition: str
    polarity: bool  # True: this piece must hold for the check to fire
    line: int | None
    result: Result
    holds: object  # True / False / UNKNOWN


@dataclass
class PathEvaluation:
    fired: object  # True / False / UNKNOWN
    parts: list[PiecePart]
    attrs: set[str]
    caveats: list[str] = field(default_factory=list)
    write_notes: dict[str, list[str]] = field(default_factory=dict)


def base_attrs(catalog: Catalog, parsed: ParsedArgs,
               server_args_log: dict[str, Any] | None = None) -> dict[str, Value]:
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
                attrs[spec.attr] = Value(spec.default, Provenance(
                    "default", f"default {spec.default!r} ({spec.path}:{spec.line})"))
        for decl in catalog.declarations:
            if decl.default_known:
                attrs[decl.attr] = Value(decl.default, Provenance(
                    "default", f"default {decl.default!r} ({decl.path}:{decl.line})"))
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


def _locals_before(store: Store, version: str, fn: dict[str, Any] | None,
                   line: int) -> dict[str, ast.expr]:
    """Simple ``name = expr`` assignments in ``fn`` before ``line`` (last one wins)."""
    if fn is None:
        return {}
    return cached(release_key(store, version, f"locals:{fn['path']}:{fn['start_line']}:{line}"),
                        lambda: _scan_locals(store, version, fn, line))


def _scan_locals(store: Store, version: str, fn: dict[str, Any], line: int) -> dict[str, ast.expr]:
    node = chain.function_ast(store, version, fn)
    if node is None:
        return {}
    offset = fn["start_line"] - 1
    out: dict[str, ast.expr] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign) and len(sub.targets) == 1 \
                and isinstance(sub.targets[0], ast.Name) and sub.lineno + offset < line:
            name = sub.targets[0].id
            if name not in ("self", "server_args", "cfg", "args"):
                out[name] = sub.value
    return out


class _Subst(ast.NodeTransformer):
    def __init__(self, local: dict[str, ast.expr], keep: set[str]) -> None:
        self.local, self.keep, self.depth = local, keep, 0

    def visit_Name(self, node: ast.Name) -> ast.AST:  # noqa: N802
        if node.id in self.local and node.id not in self.keep and self.depth < _MAX_SUBST_DEPTH:
            self.depth += 1
            try:
                return self.visit(ast.parse(ast.unparse(self.local[node.id]), mode="eval").body)
            finally:
                self.depth -= 1
        return node


def substitute(condition: str, local: dict[str, ast.expr], keep: Collection[str] = ()) -> str:
    """``condition`` with local variables replaced by their assigned expressions.

    Names in ``keep`` (those a fact supplies, e.g. ``model_arch``) stay as they are.
    """
    if not local:
        return condition
    try:
        tree = ast.parse(condition.strip(), mode="eval")
    except SyntaxError:
        return condition
    new = _Subst(local, set(keep)).visit(tree)
    return ast.unparse(new)


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


def apply_earlier_writes(store: Store, version: str, check: dict[str, Any], attrs: dict[str, Value],
                         facts: dict[str, Value], names: set[str],
                         memo: dict[tuple[Any, ...], object] | None = None,
                         *, facts_sig: str | None = None,
                         ) -> tuple[list[str], dict[str, list[str]]]:
    """Fold the writes that run before ``check`` into ``attrs`` (in place).

    Returns (caveats, notes by attribute); see :func:`fold_earlier_writes`.
    """
    assigned, caveats, notes = fold_earlier_writes(store, version, check, attrs, facts, names,
                                                   memo, facts_sig=facts_sig)
    for attr, value in assigned:
        attrs[attr] = value
    return list(caveats), {k: list(v) for k, v in notes.items()}


def fold_earlier_writes(store: Store, version: str, check: dict[str, Any],
                        attrs: Mapping[str, Value], facts: dict[str, Value], names: Collection[str],
                        memo: dict[tuple[Any, ...], object] | None = None,
                        *, facts_sig: str | None = None, cache: bool = True) -> Fold:
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
    deps = write_dependencies(store, version, check, frozen)
    key = (release_key(store, version, "folds"), check["id"], tuple(sorted(frozen)),
           facts_sig or facts_signature(facts), tuple(value_key(attrs.get(d)) for d in deps))
    hit = _FOLDS.get(key)
    if hit is None:
        hit = _fold(store, version, check, ChainMap({}, attrs), facts, frozen, memo)  # type: ignore[arg-type]
        _FOLDS.put(key, hit)
    return hit


def write_dependencies(store: Store, version: str, check: dict[str, Any], names: frozenset[str]
                       ) -> tuple[str, ...]:
    """The attributes that decide how the earlier writes of ``names`` fold in (cached).

    ``names`` themselves and every attribute read by those writes' guards and values.
    """
    def build() -> tuple[str, ...]:
        deps = set(names)
        for attr in names:
            for w in chain.earlier_writes(store, version, attr, check):
                for text in [w.value or "", *(g["condition"] for g in w.guards)]:
                    try:
                        deps |= referenced_names(text) if text else set()
                    except Exception:  # noqa: BLE001 - unparsable: evaluated as unknown
                        continue
        return tuple(sorted(deps))

    key = (*release_key(store, version, "write-deps"), check["id"], tuple(sorted(names)))
    return cached(key, build)


def _fold(store: Store, version: str, check: dict[str, Any], attrs: MutableMapping[str, Value],
          facts: dict[str, Value], names: frozenset[str],
          memo: dict[tuple[Any, ...], object] | None) -> Fold:
    """The uncached fold: (assignments in order, caveats, notes); ``attrs`` is scratch space
    (assigned in place)."""
    done: list[tuple[str, Value]] = []

    def assign(attr: str, value: Value) -> None:
        attrs[attr] = value
        done.append((attr, value))

    caveats: list[str] = []
    notes: dict[str, list[str]] = {}
    for attr in sorted(names):
        for w in chain.earlier_writes(store, version, attr, check):
            env = Env(attrs, facts)
            holds = _and([_holds(_truth(g["condition"], env, memo), g["polarity"])
                          for g in w.guards])
            when = " and ".join(
                (g["condition"] if g["polarity"] else f"not ({g['condition']})") for g in w.guards
            ) or "always"
            where = f"{w.path}:{w.line}"
            if holds is False:
                continue
            if w.rank is None:
                notes.setdefault(attr, []).append(f"may be changed at {where} when {when} "
                                                  "(order relative to the check unknown)")
                continue
            if holds is True and w.rank != int(w.rank) and w.function != check["function"]:
                holds = UNKNOWN  # in a helper of a step: the helper's own call guards are unknown
            try:
                value = evaluate(w.value, env).value if w.value else UNKNOWN
            except UnsafeExpression:
                value = UNKNOWN
            if value is UNKNOWN and _transforms_itself(w.value, attr):
                # e.g. model_path = _resolve_or_download(self.model_path): same meaning, new form
                notes.setdefault(attr, []).append(f"rewritten at {where} from its own value")
                continue
            if holds is True and value is not UNKNOWN:
                assign(attr, Value(value, Provenance("write", f"set to {value!r} at {where}"
                                                         + (f" because {when}" if w.guards else ""))))
                notes.setdefault(attr, []).append(f"set to {value!r} at {where}")
            else:
                msg = f"may be changed at {where} when {when}"
                notes.setdefault(attr, []).append(msg)
                if holds is True:
                    assign(attr, Value(UNKNOWN, Provenance("write", f"set at {where} to "
                                                               f"`{w.value}`, not known statically")))
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


def prepared_pieces(store: Store, version: str, check: dict[str, Any], fact_names: frozenset[str]
                    ) -> tuple[list[tuple[str, str, bool, int | None]], set[str]]:
    """The pieces of ``check``'s path condition with locals substituted (cached per check)."""
    key = release_key(store, version, f"pieces:{check['id']}:{hash(fact_names)}")
    return cached(key, lambda: _prepare(store, version, check, fact_names))


def _prepare(store: Store, version: str, check: dict[str, Any], fact_names: frozenset[str]
             ) -> tuple[list[tuple[str, str, bool, int | None]], set[str]]:
    fns = store.functions_at(version, check["path"], check["start_line"])
    fn = fns[0] if fns else None
    local = _locals_before(store, version, fn, check["start_line"])
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
    texts = [(role, substitute(cond, local, fact_names), pol, line)
             for role, cond, pol, line in pieces]
    names: set[str] = set()
    for _, cond, _, _ in texts:
        try:
            names |= set(referenced_names(cond))
        except Exception:  # noqa: BLE001 - unparsable text is evaluated as unknown below
            continue
    return texts, names


def evaluate_path(store: Store, version: str, check: dict[str, Any], attrs: dict[str, Value],
                  facts: dict[str, Value], *, apply_writes: bool = True,
                  memo: dict[tuple[Any, ...], object] | None = None,
                  facts_sig: str | None = None) -> PathEvaluation:
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
        caveats, notes = apply_earlier_writes(store, version, check, attrs, facts, names, memo,
                                              facts_sig=fsig)
    env = Env(attrs, facts)
    parts: list[PiecePart] = []
    for role, cond, pol, line in texts:
        try:
            res = _evaluate_piece(cond, env, fsig)
        except Exception as exc:  # noqa: BLE001 - UnsafeExpression / syntax: unknown, said so
            caveats.append(f"could not evaluate `{cond[:80]}`: {exc}")
            res = Result(UNKNOWN, UNKNOWN, (), frozenset(), (cond[:80],))
        parts.append(PiecePart(role, cond, pol, line, res, _holds(res.truth, pol)))
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
