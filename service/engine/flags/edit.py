"""Edits to a parsed command line and the corrected command they give, in the user's own spellings."""

from __future__ import annotations

import shlex
from collections.abc import Callable

from kb.catalog_types import Catalog, FlagSpec
from service.engine.flags.scan import Occurrence, OptionScanner, nargs_of, normalise_flag

__all__ = ["apply_edits", "render_command"]


def render_command(argv: list[str], *, prefix: str = "python -m sglang.launch_server") -> str:
    """One shell-quoted line: ``prefix`` followed by ``shlex.join(argv)``."""
    joined = shlex.join([str(a) for a in argv])
    if not prefix:
        return joined
    return f"{prefix} {joined}" if joined else prefix


def _resolve_key(key: str, catalog: Catalog, parser: OptionScanner) -> FlagSpec | None:
    if key.startswith("-"):
        spec = parser.options.get(key.split("=", 1)[0])
        if spec is None:
            matches = parser.prefix_matches(key)
            spec = parser.options[matches[0]] if len(matches) == 1 else None
        return spec
    return catalog.by_attr().get(key) or parser.options.get(normalise_flag(key))


def _render_values(spec: FlagSpec, value: object) -> list[str]:
    if isinstance(value, (list, tuple)) and nargs_of(spec) not in ("None", "?"):
        return [str(v) for v in value]
    return [str(value)]


def apply_edits(
    argv: list[str],
    catalog: Catalog,
    *,
    set: dict[str, object]
    | None = None,  # a keyword named by the API, though it shadows the builtin
    remove: list[str] | None = None,
) -> list[str]:
    """Return a new argv with flags removed / set (keys are attrs or any flag spelling).

    * ``remove`` drops every occurrence of the attr (all its spellings, abbreviations too)
      with its value tokens; an unknown ``--flag`` key drops that exact token and the stray
      value tokens after it;
    * ``set`` replaces the value of the last occurrence in place, keeping the user's
      spelling and ``=`` form (earlier occurrences are dropped), or appends
      ``<primary spelling> <value>``; no-value flags (``store_true`` and the like) become
      the bare flag for a truthy value and are removed for a falsy one (the reverse for
      ``store_false``); ``BooleanOptionalAction`` gives ``--x`` / ``--no-x``; ``None``
      removes the flag. Values are rendered with ``str`` (lists as several tokens for
      ``nargs`` flags).
    """
    return _apply_edits(list(argv), catalog, dict(set or {}), list(remove or []))


def _writes_attr(attr: str) -> Callable[[Occurrence], bool]:
    """Whether an occurrence is of a known option that writes ``attr``."""
    return lambda o: o.spec is not None and o.spec.attr == attr


def _unknown_spelled(flag: str) -> Callable[[Occurrence], bool]:
    """Whether an occurrence is of an unknown option spelled ``flag`` (without ``=value``)."""
    return lambda o: o.spec is None and o.token.split("=", 1)[0] == flag


def _drop(parser: OptionScanner, toks: list[str], pred: Callable[[Occurrence], bool]) -> list[str]:
    occs, stray = parser.scan(toks)
    kill: set[int] = set()
    stray_set = set(stray)
    for occ in occs:
        if pred(occ):
            kill.update(range(occ.index, occ.end))
            if occ.spec is None:  # unknown option: the stray values after it go too
                k = occ.end
                while k in stray_set:
                    kill.add(k)
                    k += 1
    return [t for idx, t in enumerate(toks) if idx not in kill]


def _apply_edits(
    tokens: list[str], catalog: Catalog, to_set: dict[str, object], to_remove: list[str]
) -> list[str]:
    parser = OptionScanner(catalog)
    for key in to_remove:
        spec = _resolve_key(key, catalog, parser)
        if spec is not None:
            attr = spec.attr
            tokens = _drop(parser, tokens, _writes_attr(attr))
        else:
            flag = key.split("=", 1)[0]
            tokens = _drop(parser, tokens, _unknown_spelled(flag))

    for key, value in to_set.items():
        spec = _resolve_key(key, catalog, parser)
        if spec is None:
            raise KeyError(f"unknown flag or attribute: {key!r}")
        attr = spec.attr
        occs, _ = parser.scan(tokens)
        mine = [o for o in occs if o.spec is not None and o.spec.attr == attr]
        last = mine[-1] if mine else None
        target = last.spec if last is not None and last.spec is not None else spec
        new: list[str] | None  # None: remove the flag
        if value is None:
            new = None
        elif nargs_of(target) == "0":
            if target.action == "BooleanOptionalAction":
                base = next((f for f in target.flags if not f.startswith("--no-")), target.flags[0])
                new = [base if value else "--no-" + base[2:]]
            else:
                present = not value if target.action == "store_false" else bool(value)
                new = [last.token if last is not None else target.flags[0]] if present else None
        else:
            vals = _render_values(target, value)
            if last is not None and last.explicit is not None and len(vals) == 1:
                new = [f"{last.token}={vals[0]}"]
            elif last is not None:
                new = [last.token, *vals]
            else:
                new = [target.flags[0], *vals]
        if new is None:
            tokens = _drop(parser, tokens, _writes_attr(attr))
            continue
        if last is None:
            tokens = tokens + new
            continue
        kill = {i for o in mine if o is not last for i in range(o.index, o.end)}
        rebuilt: list[str] = []
        for idx, tok in enumerate(tokens):
            if idx == last.index:
                rebuilt.extend(new)
            if idx in kill or last.index <= idx < last.end:
                continue
            rebuilt.append(tok)
        tokens = rebuilt
    return tokens
