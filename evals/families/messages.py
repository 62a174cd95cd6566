"""Render a raise's message source with a failing launch's values, by the engine's own
interpreter (:func:`service.engine.evaluate`; nothing is ``eval``-ed).

Shared by the rendered families (:mod:`evals.families.attention`,
:mod:`evals.families.memory`) and their tests. A message names values the KB cannot
know (locals of the raising function, pool sizes, a helper's result); the caller gives
some by name (``values``) and :func:`render_source` asks ``fill`` for every other one
the interpreter reports unknown, until the message is text or nothing new is asked.

A collection given for a name the message formats as it is (``{allowed}``,
``{allowed!r}``) is printed as a set literal (a ``tuple``: in the order given, the
source's; a ``frozenset``: sorted) or a list literal (a ``list``): Python prints a set in
hash order, which differs between runs.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Mapping

from service.engine import Env, evaluate

__all__ = ["literal_text", "local_names", "render_source"]

#: rounds of "fill what is still unknown" before giving up
_ROUNDS = 8


def _parse(src: str) -> ast.expr | None:
    try:
        return ast.parse("(" + src + ")", mode="eval").body
    except SyntaxError:
        return None


def literal_text(src: str) -> str | None:
    """A literal message's text (None for a formatted one)."""
    try:
        value = ast.literal_eval("(" + src + ")")
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def local_names(src: str) -> list[str]:
    """The bare names a message source reads (not builtins), sorted."""
    tree = _parse(src)
    if tree is None:
        return []
    return sorted(
        {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not hasattr(builtins, n.id)}
    )


def _formatted_as_is(tree: ast.expr, name: str) -> bool:
    """Does the message format ``name`` itself (``{name}`` or ``{name!r}``)?"""
    return any(
        isinstance(n, ast.FormattedValue)
        and isinstance(n.value, ast.Name)
        and n.value.id == name
        and not n.format_spec
        for n in ast.walk(tree)
    )


def _literal(items: tuple[str, ...], as_set: bool) -> str:
    body = ", ".join(repr(i) for i in items)
    return "{" + body + "}" if as_set else "[" + body + "]"


def _helpers(tree: ast.expr, fill: Callable[[str], object]) -> dict[str, Callable[[], object]]:
    """``name() -> {attr: value}`` for each zero-argument helper whose result's attributes
    the message reads (``get_schedule().mem_fraction_static``)."""
    reads: dict[str, dict[str, object]] = {}
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Name)
            and not n.value.args
        ):
            reads.setdefault(n.value.func.id, {})[n.attr] = fill(n.attr)
    return {name: (lambda d=d: dict(d)) for name, d in reads.items()}


def render_source(
    src: str,
    values: Mapping[str, object] | None = None,
    fill: Callable[[str], object] | None = None,
) -> str | None:
    """The text ``src`` (a message's source) evaluates to, or None when the interpreter
    cannot make text of it.

    ``values`` gives local names; ``fill(name)`` the value of anything else left unknown
    (called with the last part of a dotted name, ``available_size`` for
    ``req_to_token_pool.available_size()``); without it an unknown is not rendered.
    """
    tree = _parse(src)
    if tree is None:
        return None
    fill = fill or (lambda _name: None)
    facts: dict[str, object] = {}
    marks: dict[str, str] = {}
    for k, (name, value) in enumerate(sorted((values or {}).items())):
        if isinstance(value, tuple | frozenset | list) and _formatted_as_is(tree, name):
            items = tuple(sorted(value)) if isinstance(value, frozenset) else tuple(value)
            mark = f"@@{k}@@"
            marks[mark] = _literal(items, not isinstance(value, list))
            facts[name] = mark
        else:
            facts[name] = value
    attrs: dict[str, object] = {}
    functions = _helpers(tree, fill)
    text: object = None
    for _ in range(_ROUNDS):
        try:
            res = evaluate(src, Env(attrs, facts, functions))
        except Exception:
            return None
        text = res.value
        if isinstance(text, str):
            break
        new = [u for u in res.unknowns if u not in facts]
        if not new:
            return None
        for key in new:
            value = fill(key.rsplit(".", 1)[-1].removesuffix("()"))
            if value is None:
                return None
            facts[key] = value
            if "." not in key and not key.endswith(")"):
                attrs[key] = value
    if not isinstance(text, str):
        return None
    for mark, literal in marks.items():
        text = text.replace(repr(mark), literal).replace(mark, literal)
    return text
