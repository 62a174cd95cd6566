"""Scanning argv into option occurrences the way CPython 3.11's ``argparse`` does.

:class:`OptionScanner` holds a catalog's option table (every spelling, with ``-h``/``--help``)
and tells an option from a value (``argparse._parse_optional``: ``--flag=value``, unique-prefix
abbreviations, negative numbers as values), then consumes each option's values by its
``nargs`` pattern. :mod:`~service.engine.flags.parse` turns the occurrences into values and
argparse's errors; :mod:`~service.engine.flags.edit` rewrites them in place.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from kb.catalog_types import NO_VALUE_ACTIONS, Catalog, FlagSpec

__all__ = ["Occurrence", "OptionScanner", "nargs_of", "normalise_flag"]

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
class Occurrence:
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


def nargs_of(spec: FlagSpec) -> str:
    """``spec``'s ``nargs`` as a pattern: ``"0"`` for a flag that takes no value, ``"None"``
    for one value."""
    if spec.action in NO_VALUE_ACTIONS:
        return "0"
    return spec.nargs if spec.nargs is not None else "None"


class OptionScanner:
    """The option table of one catalog and the scan of an argv with it."""

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
            after_eq = tok.split("=", 1)[1] if "=" in tok else None
            return "O", self.options[opt], opt, after_eq, None
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

    def scan(self, argv: list[str]) -> tuple[list[Occurrence], list[int]]:
        """Occurrences of options plus indexes of stray value tokens (unknown)."""
        kinds = [self.classify(t) for t in argv]
        occs: list[Occurrence] = []
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
                occs.append(Occurrence(i, i + 1, argv[i], None, None, [], None, error))
                i += 1
                continue
            nargs = nargs_of(spec)
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
                occs.append(Occurrence(i, i + 1, token, spec, option, values, explicit, err))
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
                occs.append(Occurrence(i, i + 1, token, spec, option, [], None, err))
                i += 1
                continue
            values = argv[j : j + take]
            occs.append(Occurrence(i, j + take, token, spec, option, values, None, None))
            i = j + take
        return occs, stray


def normalise_flag(token: str) -> str:
    """``token`` (without ``=value``) as a long option: lower case, ``-`` for ``_``, ``--``
    in front (``-model-path`` -> ``--model-path``)."""
    tok = token.split("=", 1)[0].strip().lower().replace("_", "-")
    if not tok.startswith("-"):
        tok = "--" + tok
    elif not tok.startswith("--") and len(tok) > 2:
        tok = "-" + tok  # "-model-path" -> "--model-path"
    return tok
