"""Per-layer and per-model backends: a backend the raising layer refused, and the ones it takes.

Past argument validation, layers and models check the backend they were given: the
hybrid-GDN wrapper ("Only {'triton', 'trtllm_mha', 'fa4', 'flashinfer'} backends are
supported on Blackwell GPUs for hybrid GDN models. Got prefill=fa3, decode=fa3."), the
mamba state update ("Unknown mamba backend 'x'. Available backends: ['triton',
'flashinfer']"), vision attention ("The 'fa3' backend is not supported on Blackwell
GPUs"), linear attention ("KDA currently only supports 'triton'"). :func:`backend_edits`
reads from the located check and the message as printed:

* **the supported set**, with where it is defined: a printed collection of names (cited
  at the assignment of the printed name in the raising function, or at the registry
  the expression reads: ``_BACKEND_REGISTRY``); else the names the message's own text
  lists ("X, Y, or Z backend are the only supported backends", "only supports 'triton'");
  else the registry of the raising file holding the refused name (``QKV_BACKEND_IMPL`` of
  ``vision.py``: every registered vision backend but the refused one);
* **the refused names**: the printed names outside that set (each with the expression
  that printed it: ``prefill_be``), or names the message quotes;
* **the deciding flag** of each refused name: the flag the raising function fills the
  printed expression from (traced by :mod:`service.engine.evaluate.params`), else among
  the release's backend flags whose choices hold it (or, for a name no flag offers, the
  flags the message names in words: "mamba backend"), the one the message spells ("use --attention-backend"), else the one the
  launch set to it, else the one whose name shares most words with the printed
  expression, the message and the raising file's path (``prefill_be`` in
  ``attention_registry.py`` is ``--prefill-attention-backend``; "mamba backend" in
  ``ssu_dispatch.py`` is ``--mamba-backend``). Several refused names with one value, and
  flags that are variants of one (``prefill_attention_backend`` of
  ``attention_backend``) not set by the launch, are decided by that one flag.

Each proposal sets the deciding flag to a supported value the flag accepts (its
choices), keeping first a value the launch already uses for a sibling flag, then the
flag's default, then the set's order. Proposals are judged by
:mod:`service.engine.fixes.candidates` like any fix; the rule cards then see the
hardware (a Hopper-only backend on Blackwell is demoted there).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kb.catalog_types import Catalog, FlagSpec
from kb.code_types import Check
from kb.store import Store
from service.engine.expr.interpreter import Value
from service.engine.fixes.recipe import RecipeStep
from service.engine.locate.message import BoundValue

__all__ = ["BackendEdit", "backend_edits", "supported_set"]

#: values proposed per deciding flag
MAX_VALUES = 3
#: the flags this family decides: backends (a quantization method or a dtype the model
#: brings is not the launch's choice)
BACKEND_SUFFIX = "backend"
#: longest message read for listed names
MAX_MESSAGE_CHARS = 4_000
#: lines of the raising function searched for a printed name's assignment
MAX_SCAN_LINES = 400

_QUOTED = re.compile(r"['\"`]([A-Za-z0-9_.\-]{1,40})['\"`]")
_ONLY = re.compile(
    r"(?:only supports?|supported backends?(?: are)?|available backends?(?: are)?|"
    r"must be one of|choose from)\s{0,3}:?\s{0,3}([^.\n]{1,300})",
    re.I,
)
_ONLY_BEFORE = re.compile(
    r"([A-Za-z0-9_, \-]{1,200}?)\s(?:backends?\s)?(?:are|is) the only supported", re.I
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,80}")
_WORDS = re.compile(r"[a-z][a-z0-9]{1,30}")


@dataclass(frozen=True)
class BackendEdit:
    """Set ``attr`` to ``value`` (a member of the supported set, defined at ``citation``)
    in place of the refused ``old`` (None when the message did not print it)."""

    attr: str
    value: str
    old: str | None
    citation: str
    supported: tuple[str, ...]


def _names(value: object, text: str) -> list[str] | None:
    """The names a printed collection holds, in printed order (a set prints as
    ``{'a', 'b'}``)."""
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return list(value)
    t = text.strip()
    if len(t) > 2_000 or not t.startswith(("{", "[", "(")):
        return None
    try:
        node = ast.parse(t, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(node, ast.Set | ast.List | ast.Tuple) or not node.elts:
        return None
    out = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return out if len(out) == len(node.elts) else None


def _assignment(store: Store, version: str, check: Check, name: str) -> str | None:
    """``release:path:line`` of the last ``name = ...`` before the check in its function."""
    fns = store.functions_at(version, check.path, check.start_line)
    start = fns[0]["start_line"] if fns else max(1, check.start_line - MAX_SCAN_LINES)
    start = max(start, check.start_line - MAX_SCAN_LINES)
    lines = store.file_lines(version, check.path, start, check.start_line)
    pat = re.compile(rf"^\s{{0,40}}{re.escape(name)}\s{{0,4}}(?::[^=]{{0,80}})?=[^=]")
    hit = None
    for i, text in enumerate(lines):
        if pat.match(text):
            hit = start + i
    return f"{version}:{check.path}:{hit}" if hit is not None else None


def _registry_cite(store: Store, version: str, expr: str) -> tuple[list[str], str] | None:
    """(registered names, citation) of a registry an expression reads
    (``list(_BACKEND_REGISTRY.keys())``)."""
    for name in _NAME.findall(expr):
        if name in ("list", "keys", "sorted", "tuple", "set", "self"):
            continue
        rows = store.registrations(version, registry=name)
        if rows:
            names = [r["keys"][0] for r in rows if len(r["keys"]) == 1]
            if names:
                return names, f"{version}:{rows[0]['path']}:{rows[0]['line']}"
    return None


def _listed(text: str) -> list[str]:
    """Names a message's words list as the supported ones."""
    out: list[str] = []
    for m in _ONLY.finditer(text):
        part = m.group(1)
        out += _QUOTED.findall(part) or [
            w.strip(" '\"[]") for w in re.split(r",|\bor\b|\band\b", part)
        ]
    for m in _ONLY_BEFORE.finditer(text):
        out += [w.strip(" '\"") for w in re.split(r",|\bor\b|\band\b", m.group(1))]
    return [w for w in dict.fromkeys(out) if w and re.fullmatch(r"[A-Za-z0-9_.\-]{1,40}", w)]


def supported_set(
    store: Store, version: str, check: Check, bound: list[BoundValue], message: str | None
) -> tuple[list[str], str, str | None] | None:
    """(supported names, citation, the printed expression that listed them) — see the
    module; None when neither the message nor the code lists them."""
    for b in bound:
        names = _names(b.value, b.text)
        if names:
            reg = _registry_cite(store, version, b.expr)
            if reg is not None and set(names) <= set(reg[0]):
                return names, reg[1], b.expr
            cite = _assignment(store, version, check, b.expr) if _NAME.fullmatch(b.expr) else None
            return names, cite or _check_cite(version, check), b.expr
    for text in (message or "", _literal(check.message)):
        names = _listed(text)
        if names:
            return names, _check_cite(version, check), None
    return None


def _literal(source: str | None) -> str:
    """The literal text of a message's source (its string pieces joined)."""
    parts = re.findall(r"\"([^\"]{0,600})\"|'([^']{0,600})'", source or "")
    return " ".join(a or b for a, b in parts)


def _check_cite(version: str, check: Check) -> str:
    return f"{version}:{check.path}:{check.start_line}"


def _file_registry(
    store: Store, version: str, check: Check, refused: str
) -> tuple[list[str], str] | None:
    """The registry of the raising file that registers ``refused``: its other names."""
    for row in store.registrations(version, key=refused):
        if row["path"] != check.path or len(row["keys"]) != 1:
            continue
        rows = [
            r
            for r in store.registrations(version, registry=row["registry"])
            if r["path"] == check.path and len(r["keys"]) == 1
        ]
        names = [r["keys"][0] for r in rows if r["keys"][0] != refused]
        if names:
            return names, f"{version}:{rows[0]['path']}:{rows[0]['line']}"
    return None


def _words(text: str) -> set[str]:
    return set(_WORDS.findall(text.lower().replace("_", " ").replace("-", " ")))


def _deciding_flag(
    catalog: Catalog,
    old: str | None,
    supported: list[str],
    expr: str,
    message: str,
    path: str,
    named: list[str],
    attrs: dict[str, Value],
    user_set: set[str],
) -> FlagSpec | None:
    """The flag that decides ``old`` (see the module)."""
    specs = [
        s
        for s in catalog.flags
        if s.choices and s.attr.endswith(BACKEND_SUFFIX) and any(v in s.choices for v in supported)
    ]
    if old is not None and any(old in s.choices for s in specs if s.choices):
        specs = [s for s in specs if s.choices and old in s.choices]
    elif old is not None:  # a name no flag offers: only a flag the message names in words
        words = _words(message) | {w.removesuffix("s") for w in _words(message)}
        specs = [s for s in specs if s.attr in named or set(s.attr.split("_")) <= words]
    if not specs:
        return None
    said = [s for s in specs if s.attr in named]
    if said:
        return said[0]
    if old is not None:
        mine = [
            s
            for s in specs
            if s.attr in user_set and attrs.get(s.attr) is not None and attrs[s.attr].value == old
        ]
        if len(mine) == 1:
            return mine[0]
    ew, mw, pw = _words(expr), _words(message), _words(path)

    def score(s: FlagSpec) -> tuple[int, int, int]:
        w = set(s.attr.split("_"))
        covered = sum(v in (s.choices or []) for v in supported)
        return (covered, 3 * len(w & ew) + 2 * len(w & mw) + len(w & pw), -len(w))

    return max(specs, key=score)


def _base(attr: str, catalog: Catalog) -> str | None:
    """The flag ``attr`` is a variant of (``attention_backend`` of
    ``prefill_attention_backend``), when the release has it."""
    by_attr = catalog.by_attr()
    parts = attr.split("_")
    for i in range(1, len(parts) - 1):
        cand = "_".join(parts[i:])
        if cand in by_attr:
            return cand
    return None


def backend_edits(
    store: Store,
    version: str,
    check: Check,
    bound: list[BoundValue],
    message: str | None,
    catalog: Catalog,
    attrs: dict[str, Value],
    user_set: set[str],
    steps: list[RecipeStep],
    traced: dict[str, str] | None = None,
) -> list[BackendEdit]:
    """Supported backends for the refused ones (see the module). ``traced`` maps a printed
    expression to the flag attribute the raising function fills it from
    (:mod:`service.engine.evaluate.params`); such a flag decides its refused name."""
    message = (message or "")[:MAX_MESSAGE_CHARS] or None
    text = message or _literal(check.message)
    found = supported_set(store, version, check, bound, message)
    refused: list[tuple[str | None, str]] = []  # (refused name, printed expression)
    listing = found[2] if found else None
    for b in bound:
        if (
            b.expr != listing
            and isinstance(b.value, str)
            and (found is None or b.value not in found[0])
        ):
            refused.append((b.value.strip("'\""), b.expr))
    if not refused:
        refused = [(q, "") for q in _QUOTED.findall(text) if found is None or q not in found[0]][:2]
    for old, _ in refused if found is None else []:
        reg = _file_registry(store, version, check, old) if old else None
        if reg is not None:
            found = (reg[0], reg[1], None)
            break
    if found is None:
        return []
    supported, citation, _ = found
    named = [s.attr for s in steps if s.verb == "set" and s.value is None]
    if not refused:
        refused = [(None, "")]
    decided: dict[str, str | None] = {}
    by_attr = catalog.by_attr()
    for old, expr in refused:
        spec = by_attr.get((traced or {}).get(expr, ""))
        if spec is None or not spec.choices or not spec.attr.endswith(BACKEND_SUFFIX):
            spec = _deciding_flag(
                catalog, old, supported, expr, text, check.path, named, attrs, user_set
            )
        if spec is not None and spec.attr not in decided:
            decided[spec.attr] = old
    # one value in several variants the launch did not set: their base flag decides them
    olds = set(decided.values())
    bases = {_base(a, catalog) for a in decided}
    base = bases.pop() if len(bases) == 1 else None
    if len(decided) > 1 and len(olds) == 1 and base is not None and not set(decided) & user_set:
        decided = {base: olds.pop()}
    out: list[BackendEdit] = []
    for attr, old in decided.items():
        spec = by_attr[attr]
        values = [v for v in supported if v in (spec.choices or []) and v != old]
        siblings = {
            str(attrs[a].value)
            for a in attrs
            if a != attr and a.endswith(_base(attr, catalog) or attr) and attrs[a].value is not None
        }
        values.sort(key=lambda v: (v not in siblings, v != spec.default, supported.index(v)))
        out += [BackendEdit(attr, v, old, citation, tuple(supported)) for v in values[:MAX_VALUES]]
    return out
