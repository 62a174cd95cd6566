"""Reachability of validation checks, for card derivation: call sites and local variables.

A check inside a helper only runs when the helper is called. The engine's
:func:`~service.engine.evaluate.chain.call_site_guards` takes the first call site in
the check's own file, else (for a helper no dispatcher runs) in another validation
file; cards need every site, because SGLang 0.5.2x calls its model hooks across files
(``model_hook.py`` calls ``apply_deepseek_v4_defaults`` only ``if model_arch in
["DeepseekV4ForCausalLM"]``). Without that guard a card derived from the hook would fire
for every model.

:func:`call_index` reads, for each function name defined in the validation
surface, its call sites with their guards (the ``calls`` rows ingest stored;
:func:`ingest.checks.callee_name` decides what a call runs). :func:`reach_condition` turns them into one
condition: the OR over call sites of (the caller's own reach condition AND
the site's guards), two levels deep. A function with no call site in the
surface (a dispatcher step, a registered post-process pass) is taken as
always reached, unless it is registered for model architectures
(``@_register_for("Qwen4ExpForConditionalGeneration")`` on a model override
hook, :func:`arch_registrations`): then it runs for those only. Local
variables in the guards are replaced by the expressions assigned to them
earlier in the same function (:func:`local_map`), except the names kept as
facts (``model_arch``) and those without one known value there.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from dataclasses import dataclass
from typing import Any

from kb.store import VALIDATION_PREFIXES, Store
from service.engine.cache import cached, release_key
from service.engine.evaluate import chain
from service.engine.evaluate.path_condition import substitute

__all__ = [
    "FACT_LOCALS",
    "arch_registrations",
    "Site",
    "call_index",
    "guard_text",
    "local_map",
    "reach_condition",
    "validation_paths",
    "with_locals",
]

#: Local names kept as they are: they are facts the checker can be told directly.
FACT_LOCALS = frozenset({"model_arch"})
#: Argument-object names for normalisation (``view`` is the post-process passes' parameter).
ARG_OBJECTS = ("self", "server_args", "cfg", "args", "sa", "view")
MAX_SITES = 6
MAX_DEPTH = 2


@dataclass(frozen=True)
class Site:
    path: str
    caller: str  # qualname, or "<module>"
    caller_start: int | None
    line: int
    guards: tuple[tuple[str, bool], ...]  # (condition, polarity), outermost first


def validation_paths(store: Store, version: str) -> list[str]:
    return [p for p in store.paths(version) if p.startswith(VALIDATION_PREFIXES)]


def _functions(store: Store, version: str, path: str) -> list[dict[str, Any]]:
    rows = store.query(
        "SELECT qualname, name, path, start_line, end_line FROM functions "
        "WHERE release = ? AND path = ? ORDER BY start_line",
        (version, path),
    )
    return [dict(r) for r in rows]


def call_index(store: Store, version: str) -> dict[str, list[Site]]:
    """Function name -> its call sites in the validation surface (cached per release)."""

    def build() -> dict[str, list[Site]]:
        paths = validation_paths(store, version)
        defined = {f["name"] for p in paths for f in _functions(store, version, p)}
        index: dict[str, list[Site]] = {}
        for path in paths:
            for row in store.calls(version, path):
                name = row["callee"]
                if name not in defined or row["caller"].rsplit(".", 1)[-1] == name:
                    continue  # not a validation function, or recursion
                guards = tuple((g["condition"], g["polarity"]) for g in row["guards"])
                index.setdefault(name, []).append(
                    Site(path, row["caller"], row["caller_start"], row["line"], guards)
                )
        return index

    return cached(release_key(store, version, "rules:call_index"), build)


# ------------------------------------------------------------------------- locals


def _function_node(
    store: Store, version: str, path: str, start: int
) -> tuple[chain.FunctionNode | None, int]:
    """The parsed function starting at ``start`` (shared: not to be mutated) and the offset
    of its lines in the file."""
    rows = store.query(
        "SELECT * FROM functions WHERE release = ? AND path = ? AND start_line = ?",
        (version, path, start),
    )
    if not rows:
        return None, 0
    fn = dict(rows[0])
    return chain.function_ast(store, version, fn), fn["start_line"] - 1


def _assignments(
    store: Store, version: str, path: str, start: int
) -> tuple[list[int], list[tuple[str, ast.expr]]]:
    """Simple ``name = expr`` assignments of one function, by absolute line (cached)."""

    def build() -> tuple[list[int], list[tuple[str, ast.expr]]]:
        node, offset = _function_node(store, version, path, start)
        if node is None:
            return [], []
        found: list[tuple[int, str, ast.expr]] = []
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Assign)
                and len(sub.targets) == 1
                and isinstance(sub.targets[0], ast.Name)
            ):
                name = sub.targets[0].id
                if name not in ARG_OBJECTS:
                    found.append((sub.lineno + offset, name, sub.value))
        found.sort(key=lambda t: t[0])
        return [t[0] for t in found], [(t[1], t[2]) for t in found]

    return cached(release_key(store, version, f"rules:assign:{path}:{start}"), build)


def _unsettled(store: Store, version: str, path: str, start: int) -> list[tuple[int, str]]:
    """(line, name) where a local of the function stops having one known value: a second
    assignment when either is inside a branch or loop (which one ran is not known), an
    augmented, annotated or item assignment, a loop or ``with`` target, or a method call on
    it (``backends.discard(None)``). Cached per function."""

    def build() -> list[tuple[int, str]]:
        node, offset = _function_node(store, version, path, start)
        if node is None:
            return []
        top = {id(stmt) for stmt in node.body}
        seen: dict[str, bool] = {}  # name -> all its assignments so far are top-level
        out: list[tuple[int, str]] = []
        for sub in sorted(
            (n for n in ast.walk(node) if isinstance(n, ast.stmt)), key=lambda n: n.lineno
        ):
            line = sub.lineno + offset
            if isinstance(sub, ast.Assign):
                for target in sub.targets:
                    if isinstance(target, ast.Name):
                        level = id(sub) in top
                        if target.id in seen and not (seen[target.id] and level):
                            out.append((line, target.id))
                        seen[target.id] = seen.get(target.id, True) and level
                    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                        out.append((line, target.value.id))
            elif isinstance(sub, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
                out += [(line, n.id) for n in ast.walk(sub.target) if isinstance(n, ast.Name)]
            elif isinstance(sub, (ast.With, ast.AsyncWith)):
                out += [
                    (line, n.id)
                    for item in sub.items
                    if item.optional_vars is not None
                    for n in ast.walk(item.optional_vars)
                    if isinstance(n, ast.Name)
                ]
            elif (
                isinstance(sub, ast.Expr)
                and isinstance(sub.value, ast.Call)
                and isinstance(sub.value.func, ast.Attribute)
                and isinstance(sub.value.func.value, ast.Name)
            ):
                out.append((line, sub.value.func.value.id))
        return out

    return cached(release_key(store, version, f"rules:unsettled:{path}:{start}"), build)


def local_map(
    store: Store, version: str, path: str, fn_start: int | None, line: int
) -> dict[str, ast.expr]:
    """Locals of the function starting at ``fn_start`` assigned before ``line`` (last wins),
    but not those whose value before ``line`` is not one expression (see :func:`_unsettled`):
    they stay names, which the checker cannot read (the card is then undecided, not
    wrong)."""
    if fn_start is None:
        return {}
    lines, items = _assignments(store, version, path, fn_start)
    out: dict[str, ast.expr] = {}
    for name, value in items[: bisect.bisect_left(lines, line)]:
        out[name] = value
    for at, name in _unsettled(store, version, path, fn_start):
        if at < line:
            out.pop(name, None)
    return out


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def with_locals(
    store: Store, version: str, path: str, fn_start: int | None, line: int, condition: str
) -> str:
    """``condition`` with the function's earlier locals substituted (cached; facts kept)."""
    if fn_start is None:
        return condition
    lines, items = _assignments(store, version, path, fn_start)
    pos = bisect.bisect_left(lines, line)
    names = {n for n, _ in items[:pos]} - FACT_LOCALS
    gone = {n for at, n in _unsettled(store, version, path, fn_start) if at < line}
    names -= gone
    if not names or not names.intersection(_IDENT.findall(condition)):
        return condition
    key = release_key(
        store, version, f"rules:subst:{path}:{fn_start}:{pos}:{sorted(gone)}:{condition}"
    )
    return cached(
        key,
        lambda: substitute(condition, local_map(store, version, path, fn_start, line), FACT_LOCALS),
    )


def guard_text(condition: str, polarity: bool) -> str:
    """``condition``, negated when ``polarity`` is False, parenthesised."""
    return f"({condition})" if polarity else f"not ({condition})"


# ---------------------------------------------------------------------- reachability


def reach_condition(store: Store, version: str, qualname: str, depth: int = 0) -> str | None:
    """The condition under which ``qualname`` runs, or None for "always" / "cannot tell".

    OR over call sites of (caller's reach AND site guards); more than
    :data:`MAX_SITES` sites, a site without guards or a caller at depth
    :data:`MAX_DEPTH` count as "always" (None), which only ever widens a card.
    """
    key = release_key(store, version, f"rules:reach:{qualname}:{depth}")
    return cached(key, lambda: _reach(store, version, qualname, depth))


def _reach(store: Store, version: str, qualname: str, depth: int) -> str | None:
    name = qualname.rsplit(".", 1)[-1]
    sites = call_index(store, version).get(name, [])
    if not sites:
        return _registered_reach(store, version, name)
    if len(sites) > MAX_SITES or depth >= MAX_DEPTH:
        return None
    alts: list[str] = []
    for s in sites:
        parts: list[str] = []
        if s.caller != "<module>":
            up = reach_condition(store, version, s.caller, depth + 1)
            if up is not None:
                parts.append(f"({up})")
        parts += [
            guard_text(with_locals(store, version, s.path, s.caller_start, s.line, c), p)
            for c, p in s.guards
        ]
        if not parts:
            return None
        alts.append(" and ".join(parts))
    unique = list(dict.fromkeys(alts))
    return unique[0] if len(unique) == 1 else " or ".join(f"({a})" for a in unique)


#: a registry key that names a model architecture (``DeepseekV3ForCausalLM``)
_ARCH_KEY = re.compile(r"[A-Z][A-Za-z0-9_]*For[A-Z][A-Za-z0-9_]*")


def arch_registrations(store: Store, version: str) -> dict[str, tuple[str, ...]]:
    """Function name -> the model architectures it is registered for, over the validation
    surface's registrations whose keys all name architectures (``@_register_for(
    "Qwen4ExpForConditionalGeneration")`` on a model override hook), cached per release."""

    def build() -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        rows = store.query(
            "SELECT path, keys, target FROM registrations WHERE release = ?", (version,)
        )
        for r in rows:
            if not r["path"].startswith(VALIDATION_PREFIXES) or not r["target"]:
                continue
            keys = json.loads(r["keys"] or "[]")
            if keys and all(isinstance(k, str) and _ARCH_KEY.fullmatch(k) for k in keys):
                out.setdefault(r["target"].rsplit(".", 1)[-1], []).extend(keys)
        return {k: tuple(dict.fromkeys(v)) for k, v in out.items()}

    return cached(release_key(store, version, "rules:arch_registrations"), build)


def _registered_reach(store: Store, version: str, name: str) -> str | None:
    """A function nothing in the surface calls but that is registered for model
    architectures runs only for those: ``model_arch in (...)`` (None: always)."""
    archs = arch_registrations(store, version).get(name)
    if not archs:
        return None
    return f"model_arch in ({', '.join(repr(a) for a in archs)},)"
