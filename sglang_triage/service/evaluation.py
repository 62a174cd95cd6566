"""Evaluate a check's full path condition against the flags and facts.

The *path condition* of a check is what must hold for it to fire:

    call-site guards  AND  guards inside the function  AND  NOT test   (assert)
    call-site guards  AND  guards inside the function                 (raise)

It is evaluated with three-valued logic (:mod:`.expr`) over an environment
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
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..errors import UnsafeExpression
from ..ingest.catalog import Catalog
from ..kb.store import Store
from . import chain
from .expr import UNKNOWN, Env, Provenance, Result, Value, evaluate, referenced_names
from .flags import ParsedArgs

_MAX_SUBST_DEPTH = 3


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
    """Defaults < logged resolved values < the user's flags."""
    attrs: dict[str, Value] = {}
    for spec in catalog.flags:
        if spec.default_known and spec.attr not in attrs:
            attrs[spec.attr] = Value(spec.default, Provenance(
                "default", f"default {spec.default!r} ({spec.path}:{spec.line})"))
    for decl in catalog.declarations:
        if decl.default_known:
            attrs[decl.attr] = Value(decl.default, Provenance(
                "default", f"default {decl.default!r} ({decl.path}:{decl.line})"))
    for key, value in (server_args_log or {}).items():
        attrs[key] = Value(value, Provenance("derived", "value in the logged server_args line"))
    for attr, pf in parsed.values.items():
        attrs[attr] = Value(pf.value, Provenance("flag", " ".join(pf.raw)))
    return attrs


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
    return chain.cached(chain.release_key(store, version, f"locals:{fn['path']}:{fn['start_line']}:{line}"),
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


def _truth(cond: str, env: Env, memo: dict[tuple[Any, ...], object] | None) -> object:
    """``evaluate(cond).truth``, memoised on the values of the attributes it reads."""
    if memo is None:
        return _safe_truth(cond, env)
    try:
        names = referenced_names(cond)
    except Exception:  # noqa: BLE001 - unparsable: let the evaluator decide (unknown)
        return _safe_truth(cond, env)
    key = (cond, tuple((n, repr(env.attrs[n].value) if n in env.attrs else "?")
                       for n in sorted(names)))
    if key not in memo:
        memo[key] = _safe_truth(cond, env)
    return memo[key]


def apply_earlier_writes(store: Store, version: str, check: dict[str, Any], attrs: dict[str, Value],
                         facts: dict[str, Value], names: set[str],
                         memo: dict[tuple[Any, ...], object] | None = None,
                         ) -> tuple[list[str], dict[str, list[str]]]:
    """Fold the writes that run before ``check`` into ``attrs`` (in place).

    ``memo`` (one per triage, whose facts are fixed) caches guard truths.
    """
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
                attrs[attr] = Value(value, Provenance("write", f"set to {value!r} at {where}"
                                                      + (f" because {when}" if w.guards else "")))
                notes.setdefault(attr, []).append(f"set to {value!r} at {where}")
            else:
                msg = f"may be changed at {where} when {when}"
                notes.setdefault(attr, []).append(msg)
                if holds is True:
                    attrs[attr] = Value(UNKNOWN, Provenance("write", f"set at {where} to "
                                                            f"`{w.value}`, not known statically"))
                caveats.append(f"`{attr}` {msg}")
    return caveats, notes


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
    key = chain.release_key(store, version, f"pieces:{check['id']}:{hash(fact_names)}")
    return chain.cached(key, lambda: _prepare(store, version, check, fact_names))


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
                  memo: dict[tuple[Any, ...], object] | None = None) -> PathEvaluation:
    """Evaluate every piece of ``check``'s path condition."""
    texts, names = prepared_pieces(store, version, check, frozenset(facts))
    attrs = dict(attrs)
    caveats: list[str] = []
    notes: dict[str, list[str]] = {}
    if apply_writes:
        caveats, notes = apply_earlier_writes(store, version, check, attrs, facts, names, memo)
    env = Env(attrs, facts)
    parts: list[PiecePart] = []
    for role, cond, pol, line in texts:
        try:
            res = evaluate(cond, env)
        except Exception as exc:  # noqa: BLE001 - UnsafeExpression / syntax: unknown, said so
            caveats.append(f"could not evaluate `{cond[:80]}`: {exc}")
            res = Result(UNKNOWN, UNKNOWN, (), frozenset(), (cond[:80],))
        parts.append(PiecePart(role, cond, pol, line, res, _holds(res.truth, pol)))
    fired = _and([p.holds for p in parts]) if parts else UNKNOWN
    return PathEvaluation(fired, parts, names, caveats, notes)
