"""Parse a user's ``sglang serve`` / ``launch_server`` argv against a release's flag catalog.

The rules follow CPython 3.11's ``argparse`` (the parser SGLang builds with
``argparse.ArgumentParser()`` and ``allow_abbrev=True``): ``--flag=value``, unique-prefix
abbreviations, negative numbers as values, ``nargs`` patterns, type conversion, choices,
later-wins / append-accumulates, and argparse's error phrasing. Unlike argparse, parsing
never stops at the first error: every problem is collected.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from kb.catalog_types import Catalog, FlagSpec
from service.engine.flags.scan import Occurrence, OptionScanner, nargs_of, normalise_flag

__all__ = [
    "ParsedArgs",
    "ParsedFlag",
    "parse_argv",
    "suggest_flag",
]


@dataclass
class ParsedFlag:
    attr: str
    value: object
    token: str  # the spelling the user typed, e.g. "--tp"
    raw: list[str]  # the raw tokens consumed, e.g. ["--tp", "8"] or ["--tp=8"]
    index: int  # position in argv of the flag token
    flag: str = ""  # the full catalog spelling the token resolved to, e.g. "--tp-size"


@dataclass
class ParsedArgs:
    values: dict[str, ParsedFlag] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    abbreviations: dict[str, str] = field(default_factory=dict)

    def spelling(self, attr: str) -> str | None:
        """The option as the user typed it for ``attr`` (its last occurrence, without
        ``=value``): ``--tp`` for ``tp_size`` when they wrote ``--tp 8``, an alias such as
        ``--dp-size``, or an abbreviation; None when they did not set ``attr``."""
        pf = self.values.get(attr)
        return pf.token if pf is not None else None


# ---------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------


def _display(spec: FlagSpec) -> str:
    return "/".join(spec.flags)


def _convert(spec: FlagSpec, raw: str) -> tuple[object, str | None]:
    tp = spec.type
    if tp == "int":
        try:
            return int(raw), None
        except ValueError:
            return raw, f"invalid int value: {raw!r}"
    if tp == "float":
        try:
            return float(raw), None
        except ValueError:
            return raw, f"invalid float value: {raw!r}"
    if tp == "bool":
        return bool(raw), None  # argparse's type=bool: any non-empty string is True
    return raw, None  # str, None, custom callables (kept as the string)


def _check_choice(spec: FlagSpec, value: object) -> str | None:
    if spec.choices is None or value in spec.choices:
        return None
    choices = ", ".join(repr(c) for c in spec.choices)
    return f"invalid choice: {value!r} (choose from {choices})"


def _value_of(occ: Occurrence, previous: object) -> tuple[object, list[str]]:
    """The value argparse would store for ``occ`` (given the previous one), plus errors."""
    spec = occ.spec
    assert spec is not None
    action = spec.action
    if action == "store_true":
        return True, []
    if action == "store_false":
        return False, []
    if action in ("store_const", "append_const"):
        if action == "append_const":
            return _as_list(previous, spec) + [spec.const], []
        return spec.const, []
    if action == "count":
        return (previous if isinstance(previous, int) else 0) + 1, []
    if action == "help":
        return True, []
    if action == "BooleanOptionalAction":
        return not (occ.option or occ.token).startswith("--no-"), []
    errors: list[str] = []
    converted: list[object] = []
    for raw in occ.values:
        item, err = _convert(spec, raw)
        if err is None:
            err = _check_choice(spec, item)
        if err is not None:
            errors.append(err)
        converted.append(item)
    nargs = nargs_of(spec)
    if nargs in ("None", "?"):
        value: object = converted[0] if converted else spec.const
    else:
        value = converted
    if action in (None, "store"):
        return value, errors
    if action == "append":
        return _as_list(previous, spec) + [value], errors
    if action == "extend":
        return _as_list(previous, spec) + (value if isinstance(value, list) else [value]), errors
    # custom argparse.Action subclasses
    if "const_value" in spec.extra:
        return spec.extra["const_value"], errors
    if nargs == "0":
        return (spec.const if spec.const is not None else True), errors
    return value, errors


def _as_list(previous: object, spec: FlagSpec) -> list[object]:
    if isinstance(previous, list):
        return list(previous)
    if isinstance(spec.default, list):
        return list(spec.default)
    return []


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------


def parse_argv(argv: list[str], catalog: Catalog) -> ParsedArgs:
    """Parse ``argv`` (without the program name) the way the release's argparse parser would."""
    parser = OptionScanner(catalog)
    occs, stray = parser.scan(list(argv))
    out = ParsedArgs()
    unknown_idx: set[int] = set(stray)
    seen_attrs: set[str] = set()
    for occ in occs:
        if occ.spec is None:
            unknown_idx.add(occ.index)
            if occ.error:
                out.errors.append(occ.error)
            continue
        spec = occ.spec
        if occ.option and occ.token != occ.option and occ.token not in parser.options:
            out.abbreviations[occ.token] = occ.option
        if occ.error:
            out.errors.append(f"argument {_display(spec)}: {occ.error}")
            continue
        prev = out.values.get(spec.attr)
        value, errs = _value_of(occ, prev.value if prev is not None else None)
        out.errors.extend(f"argument {_display(spec)}: {e}" for e in errs)
        seen_attrs.add(spec.attr)
        out.values[spec.attr] = ParsedFlag(
            attr=spec.attr,
            value=value,
            token=occ.token,
            raw=list(argv[occ.index : occ.end]),
            index=occ.index,
            flag=occ.option or occ.token,
        )
    out.unknown = [argv[i] for i in sorted(unknown_idx)]
    missing = [_display(s) for s in catalog.flags if s.required and s.attr not in seen_attrs]
    if missing:
        out.errors.append("the following arguments are required: " + ", ".join(missing))
    return out


def suggest_flag(token: str, catalog: Catalog, n: int = 3) -> list[str]:
    """Nearest valid spellings for ``token``.

    Exact normalisation first (``_``->``-``, lowercase, ``--`` added), then spellings the
    normalised token is a prefix of (shortest first), then ``difflib`` close matches.
    """
    spellings = list(catalog.by_flag())
    out: list[str] = []
    norm = normalise_flag(token)
    if norm in spellings:
        out.append(norm)
    if len(norm) > 3:  # what argparse would have expanded, had the prefix been unique
        out.extend(sorted((f for f in spellings if f.startswith(norm) and f != norm), key=len))
    for cand in difflib.get_close_matches(norm, spellings, n=n + len(out), cutoff=0.6):
        if cand not in out:
            out.append(cand)
    return out[:n]
