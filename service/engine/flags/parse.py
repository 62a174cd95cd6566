"""Parse a user's ``sglang serve`` / ``launch_server`` argv against a release's flag catalog.

The rules follow CPython 3.11's ``argparse`` (the parser SGLang builds with
``argparse.ArgumentParser()`` and ``allow_abbrev=True``): ``--flag=value``, unique-prefix
abbreviations, negative numbers as values, ``nargs`` patterns, type conversion, choices,
later-wins / append-accumulates, and argparse's error phrasing. Unlike argparse, parsing
never stops at the first error: every problem is collected.
"""

from __future__ import annotations

import bisect
import difflib
import re
from dataclasses import dataclass, field

from kb.catalog_types import NO_VALUE_ACTIONS, Catalog, FlagSpec

__all__ = [
    "ParsedArgs",
    "ParsedFlag",
    "parse_argv",
    "suggest_flag",
]

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_HELP = FlagSpec(
    attr="help",
    flags=["-h", "--help"],
    type=None,
    action="help",
    nargs=None,
    default=None,
    default_known=True,
    default_src=None,
    choices=None,
    choices_src=None,
    help="show this help message and exit",
    required=False,
    deprecated=False,
    path="argparse",
    line=0,
    layout="argparse",
)


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
# scanning
# ---------------------------------------------------------------------------


@dataclass
class _Occ:
    """One occurrence of an option (known or not) and the tokens it consumed."""

    index: int
    end: int  # exclusive
    token: str  # as typed, without "=value"
    spec: FlagSpec | None
    option: str | None  # the full spelling it resolved to
    values: list[str]
    explicit: str | None  # text after "=" (None when absent)
    error: str | None = None


class _PrefixIndex:
    """The spellings of an option table sorted, for abbreviation look-ups by bisection."""

    def __init__(self, options: dict[str, FlagSpec]) -> None:
        self.sorted = sorted(options)
        self.position = {o: i for i, o in enumerate(options)}

    def starting_with(self, prefix: str) -> set[str]:
        out: set[str] = set()
        for o in self.sorted[bisect.bisect_left(self.sorted, prefix) :]:
            if not o.startswith(prefix):
                break
            out.add(o)
        return out

    def in_table_order(self, found: set[str]) -> list[str]:
        return sorted(found, key=self.position.__getitem__)


def _option_table(catalog: Catalog) -> tuple[dict[str, FlagSpec], bool, _PrefixIndex | None]:
    """(every spelling -> its spec, with ``-h``/``--help``; any option like a negative
    number?; a prefix index of the spellings, or None).

    Built once per catalog when the catalog is a KB's read-only
    :class:`~kb.catalogs.IndexedCatalog`; only then is there a prefix
    index. The dict must not be modified.
    """
    from kb.catalogs import IndexedCatalog

    def build() -> tuple[dict[str, FlagSpec], bool]:
        options = dict(catalog.by_flag())
        for spelling in _HELP.flags:
            options.setdefault(spelling, _HELP)
        return options, any(_NEGATIVE_NUMBER.match(o) for o in options)

    if not isinstance(catalog, IndexedCatalog):
        return (*build(), None)

    def build_indexed() -> tuple[dict[str, FlagSpec], bool, _PrefixIndex]:
        options, negative = build()
        return options, negative, _PrefixIndex(options)

    return catalog.cached("_option_table", build_indexed)


def _nargs(spec: FlagSpec) -> str:
    if spec.action in NO_VALUE_ACTIONS:
        return "0"
    return spec.nargs if spec.nargs is not None else "None"


class _Parser:
    def __init__(self, catalog: Catalog) -> None:
        # the option table depends only on the catalog: built once per catalog, shared read-only
        self.options: dict[str, FlagSpec]
        self.options, self.has_negative_number_options, self._index = _option_table(catalog)

    # argparse._parse_optional
    def classify(self, tok: str) -> tuple[str, FlagSpec | None, str | None, str | None, str | None]:
        """-> (kind, spec, option, explicit, error); kind in "A" (value), "O" (option), "-" (--)."""
        if tok == "--":
            return "-", None, None, None, None
        if not tok or tok[0] != "-":
            return "A", None, None, None, None
        if tok in self.options:
            return "O", self.options[tok], tok, None, None
        if len(tok) == 1:
            return "A", None, None, None, None
        if "=" in tok:
            opt, explicit = tok.split("=", 1)
            if opt in self.options:
                return "O", self.options[opt], opt, explicit, None
        matches = self.prefix_matches(tok)
        if len(matches) > 1:
            prefix = tok.split("=", 1)[0]
            return (
                "O",
                None,
                None,
                None,
                (f"ambiguous option: {prefix} could match {', '.join(matches)}"),
            )
        if len(matches) == 1:
            opt = matches[0]
            explicit = tok.split("=", 1)[1] if "=" in tok else None
            return "O", self.options[opt], opt, explicit, None
        if _NEGATIVE_NUMBER.match(tok) and not self.has_negative_number_options:
            return "A", None, None, None, None
        if " " in tok:
            return "A", None, None, None, None
        return "O", None, None, None, None

    # argparse._get_option_tuples (long options only; SGLang has no short ones but -h)
    def prefix_matches(self, tok: str) -> list[str]:
        """Options ``tok`` abbreviates, in the table's order (by bisection when indexed)."""
        index = self._index
        if tok.startswith("--"):
            prefix = tok.split("=", 1)[0]
            if index is not None:
                return index.in_table_order(index.starting_with(prefix))
            return [o for o in self.options if o.startswith(prefix)]
        if len(tok) > 1 and tok[1] != "-":
            short = tok[:2]
            if index is not None:
                found = index.starting_with(tok)
                if short in self.options:
                    found.add(short)
                return index.in_table_order(found)
            return [o for o in self.options if o == short or o.startswith(tok)]
        return []

    def scan(self, argv: list[str]) -> tuple[list[_Occ], list[int]]:
        """Occurrences of options plus indexes of stray value tokens (unknown)."""
        kinds = [self.classify(t) for t in argv]
        occs: list[_Occ] = []
        stray: list[int] = []
        i = 0
        n = len(argv)
        while i < n:
            kind, spec, option, explicit, error = kinds[i]
            if kind == "-":
                stray.extend(range(i, n))  # everything after "--" is positional: unrecognised
                break
            if kind == "A":
                stray.append(i)
                i += 1
                continue
            token = argv[i].split("=", 1)[0] if (explicit is not None) else argv[i]
            if spec is None:  # unknown or ambiguous option
                occs.append(_Occ(i, i + 1, argv[i], None, None, [], None, error))
                i += 1
                continue
            nargs = _nargs(spec)
            j = i + 1
            avail = 0
            while j + avail < n and kinds[j + avail][0] == "A":
                avail += 1
            values: list[str] = []
            err = None
            if explicit is not None:
                if nargs == "0":
                    err = f"ignored explicit argument {explicit!r}"
                elif nargs in ("None", "?", "*", "+", "1"):
                    values = [explicit]
                else:
                    err = f"expected {nargs} arguments"
                occs.append(_Occ(i, i + 1, token, spec, option, values, explicit, err))
                i += 1
                continue
            if nargs == "0":
                take = 0
            elif nargs == "None":
                take = 1 if avail >= 1 else -1
                err = None if avail >= 1 else "expected one argument"
            elif nargs == "?":
                take = min(avail, 1)
            elif nargs == "*":
                take = avail
            elif nargs == "+":
                take = avail if avail >= 1 else -1
                err = None if avail >= 1 else "expected at least one argument"
            elif nargs.isdigit():
                k = int(nargs)
                take = k if avail >= k else -1
                word = "argument" if k == 1 else "arguments"
                err = None if avail >= k else f"expected {k} {word}"
            else:  # "...", "A...": consume everything
                take = n - j
            if take < 0:
                occs.append(_Occ(i, i + 1, token, spec, option, [], None, err))
                i += 1
                continue
            values = argv[j : j + take]
            occs.append(_Occ(i, j + take, token, spec, option, values, None, None))
            i = j + take
        return occs, stray


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


def _value_of(occ: _Occ, previous: object) -> tuple[object, list[str]]:
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
        value, err = _convert(spec, raw)
        if err is None:
            err = _check_choice(spec, value)
        if err is not None:
            errors.append(err)
        converted.append(value)
    nargs = _nargs(spec)
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


def _as_list(previous: object, spec: FlagSpec) -> list:
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
    parser = _Parser(catalog)
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


def _normalise(token: str) -> str:
    tok = token.split("=", 1)[0].strip().lower().replace("_", "-")
    if not tok.startswith("-"):
        tok = "--" + tok
    elif not tok.startswith("--") and len(tok) > 2:
        tok = "-" + tok  # "-model-path" -> "--model-path"
    return tok


def suggest_flag(token: str, catalog: Catalog, n: int = 3) -> list[str]:
    """Nearest valid spellings for ``token``.

    Exact normalisation first (``_``->``-``, lowercase, ``--`` added), then spellings the
    normalised token is a prefix of (shortest first), then ``difflib`` close matches.
    """
    spellings = list(catalog.by_flag())
    out: list[str] = []
    norm = _normalise(token)
    if norm in spellings:
        out.append(norm)
    if len(norm) > 3:  # what argparse would have expanded, had the prefix been unique
        out.extend(sorted((f for f in spellings if f.startswith(norm) and f != norm), key=len))
    for cand in difflib.get_close_matches(norm, spellings, n=n + len(out), cutoff=0.6):
        if cand not in out:
            out.append(cand)
    return out[:n]
