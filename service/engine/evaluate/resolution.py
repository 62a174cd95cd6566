"""The resolution pipeline of 0.5.19+ releases, read statically.

From 0.5.19 SGLang validates in ``arg_groups/pipeline.py::run_resolution_pipeline``,
which runs hooks (``run_hook(fn, server_args)``) in a fixed order. Hooks never assign
``server_args.x``; they work on a stash of declarations (``arg_groups/overrides.py``
and ``model_override_base.py`` of those releases):

* ``declare_resolution(server_args, "<source>", x=value, ...)`` appends
  ``("<source>", {"x": value})`` to the stash; the raw field is left alone until the
  record is published;
* a post-process pass ``fn(view) -> {"x": value}`` run by
  ``run_post_process_pass(server_args, fn)`` declares the dict it returns;
* ``cfg = resolving_view(server_args)`` is a live view: each read answers the last
  declaration of the field made so far, else the raw input; ``resolved_view(server_args)``
  is the same answer as a snapshot taken where it is called;
* ``resolution_result(server_args, "x")`` answers the last declaration, else the raw
  input, else the field's ``Arg(fallback=...)`` when that is None.

So what a hook reads is the last declaration made before it, in pipeline order, over
the user's flags and the defaults. The evaluator models exactly that: the stash's
entries are the ``declare``/``return_dict`` refs ingest stored, folded in validation
order by :func:`service.engine.evaluate.fold.fold_earlier_writes` like the
``self.x = ...`` writes of older releases, each with a provenance naming the declaring
hook and line (:func:`write_provenance`). Reads are rewritten to plain attribute reads
(:func:`rewrite`): ``resolution_result(server_args, "x")`` becomes ``server_args.x``
(with the declared fallback when there is one), and a pass's own view parameter
(``view``) is spelled ``server_args``. Direct ``server_args.x`` reads are read as view
reads too (hooks read through views; the raw field differs only for fields declared
earlier, which hooks do not read raw).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import EllipsisType
from typing import Any

from kb.conditions import DEFAULT_ARG_OBJECTS, is_arg_root
from kb.store import Store
from service.engine.cache import cached, cached_on_members, release_key
from service.engine.evaluate import chain, source

#: Functions reading one field of the resolution result: name -> position of the field.
READ_FUNCTIONS: dict[str, int] = {"resolution_result": 1}
#: Where fields are declared with ``Arg(..., fallback=...)``.
FIELDS_PREFIX = "sglang/srt/arg_groups/fields/"
_VIEW_PARAMS = frozenset({"view", "resolved", "rv"})
_VIEW_ANNOTATIONS = ("ServerArgs", "ResolvedView", "ResolvingConfig")
_WRITE_LABEL = {"declare": "declared by", "return_dict": "returned for declaration by"}
#: What a constant in source can be (the value of an :class:`ast.Constant`).
ConstantValue = str | bytes | bool | int | float | complex | EllipsisType | None


def fallbacks(store: Store, version: str) -> Mapping[str, ConstantValue]:
    """Field -> its ``Arg(fallback=<constant>)`` in the release's field declarations (cached)."""

    def build() -> dict[str, ConstantValue]:
        out: dict[str, ConstantValue] = {}
        for path in store.paths(version):
            if not path.startswith(FIELDS_PREFIX):
                continue
            text = "\n".join(store.file_lines(version, path, 1, 10**7))
            if "fallback" not in text:
                continue
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                    continue
                for call in ast.walk(node.annotation):
                    if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Arg":
                        for kw in call.keywords:
                            if kw.arg == "fallback" and isinstance(kw.value, ast.Constant):
                                out[node.target.id] = kw.value.value
        return out

    return cached(release_key(store, version, "resolution:fallbacks"), build)


def args_param(store: Store, version: str, fn: dict[str, Any] | None) -> str | None:
    """The name under which ``fn`` receives the server-args object, when it is not one of
    the names every condition already reads as such (``view`` of a post-process pass)."""
    if fn is None:
        return None
    node = chain.function_ast(store, version, fn)
    if node is None:
        return None
    params = node.args.posonlyargs + node.args.args
    if not params:
        return None
    first = params[0]
    if first.arg in DEFAULT_ARG_OBJECTS:
        return None
    note = ast.unparse(first.annotation) if first.annotation is not None else ""
    if first.arg in _VIEW_PARAMS or any(a in note for a in _VIEW_ANNOTATIONS):
        return first.arg
    return None


class _Reads(ast.NodeTransformer):
    def __init__(self, param: str | None, fallback: Mapping[str, ConstantValue]) -> None:
        self.param, self.fallback = param, fallback

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if self.param is not None and node.id == self.param:
            return ast.copy_location(ast.Name("server_args", ast.Load()), node)
        return node

    def visit_Call(self, call: ast.Call) -> ast.AST:
        node = self.generic_visit(call)
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            return node
        at = READ_FUNCTIONS.get(node.func.id)
        if (
            at is None
            or len(node.args) <= at
            or node.keywords
            or not is_arg_root(node.args[0], DEFAULT_ARG_OBJECTS)
        ):
            return node
        field = node.args[at]
        if not (
            isinstance(field, ast.Constant)
            and isinstance(field.value, str)
            and field.value.isidentifier()
        ):
            return node
        read = ast.Attribute(ast.Name("server_args", ast.Load()), field.value, ast.Load())
        if field.value not in self.fallback:
            return read
        # None answers the declared fallback: `x if x is not None else <fallback>`
        test = ast.Compare(read, [ast.IsNot()], [ast.Constant(None)])
        return ast.IfExp(test, read, ast.Constant(self.fallback[field.value]))


def rewrite(
    text: str, param: str | None = None, fallback: Mapping[str, ConstantValue] | None = None
) -> str:
    """``text`` with resolution reads spelled as attribute reads of ``server_args``.

    ``resolution_result(server_args, "x")`` -> ``server_args.x`` (or
    ``server_args.x if server_args.x is not None else F`` for a field declared with
    ``fallback=F``); the function's own view parameter ``param`` -> ``server_args``.
    Text without either comes back unchanged.
    """
    if param is None and not any(name in text for name in READ_FUNCTIONS):
        return text
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return text
    return ast.unparse(_Reads(param, fallback or {}).visit(tree))


@dataclass(frozen=True)
class PreparedWrite:
    """A write as the fold evaluates it: its value and guards in condition vocabulary.

    ``reached`` is False when the write sits in a helper of a step whose call cannot be
    tied to a single call site (its own call guards are unknown).
    """

    value: str | None
    guards: tuple[tuple[str, bool], ...]
    site_guards: tuple[tuple[str, bool], ...]
    reached: bool
    #: ``site_guards + guards``, joined once (the fold asks for it on every write)
    _joined: tuple[tuple[str, bool], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_joined", self.site_guards + self.guards)

    def all_guards(self, same_function: bool) -> tuple[tuple[str, bool], ...]:
        """The write's guards, after those of its call site unless it is in the checking
        function itself (whose call-site guards are pieces of the path already)."""
        return self.guards if same_function else self._joined


def prepare_write(
    store: Store, version: str, w: chain.Write, keep: Collection[str]
) -> PreparedWrite:
    """``w``'s value and guards with the function's locals substituted, helpers inlined and
    resolution reads rewritten; a helper's write also carries the guards of its one call
    site in a step (cached per release, and on which of the names the write reads are
    fact keys in ``keep``, so other facts share it)."""
    key = release_key(store, version, f"prepared-write:{w.path}:{w.line}:{w.attr}:{w.kind}")
    return cached_on_members(key, keep, lambda k: _prepare_write(store, version, w, k))


def _prepare_write(
    store: Store, version: str, w: chain.Write, keep: Collection[str]
) -> PreparedWrite:
    fns = store.functions_at(version, w.path, w.line)
    fn = fns[0] if fns else None
    fb = fallbacks(store, version)

    def text(src: str, where: dict[str, Any] | None, line: int) -> str:
        local = source.locals_before(store, version, where, line)
        out = source.substitute(src, local, keep)
        out = rewrite(out, args_param(store, version, where), fb)
        return source.inline_helpers(store, version, out, keep)

    value = text(w.value, fn, w.line) if w.value else None
    guards = [
        (text(g["condition"], fn, g.get("line") or w.line), bool(g["polarity"])) for g in w.guards
    ]
    reached = True
    site: list[tuple[str, bool]] = []
    if w.rank is not None and w.rank != int(w.rank):
        found = _single_call_site(store, version, w.function)
        if found is None:
            reached = False
        else:
            caller, line, site_guards = found
            site = [
                (text(g["condition"], caller, g.get("line") or line), bool(g["polarity"]))
                for g in site_guards
            ]
    return PreparedWrite(value, tuple(guards), tuple(site), reached)


def _single_call_site(
    store: Store, version: str, name: str
) -> tuple[dict[str, Any] | None, int, list[dict[str, Any]]] | None:
    """(caller function, line, guards) of the one call of ``name`` in a validation file,
    or None when it is called from several places (or none is stored)."""
    name = name.rsplit(".", 1)[-1]
    rows = [
        r
        for r in store.query(
            "SELECT * FROM calls WHERE release = ? AND callee = ?", (version, name)
        )
        if r["path"].startswith(chain.VALIDATION_PATHS) and r["caller"].rsplit(".", 1)[-1] != name
    ]
    if len(rows) != 1:
        return None
    row = rows[0]
    callers = store.functions_at(version, row["path"], row["line"])
    guards = json.loads(row["guards"]) if isinstance(row["guards"], str) else list(row["guards"])
    return (callers[0] if callers else None), row["line"], guards


def _provenance_heads(value: object) -> tuple[str, ...]:
    """How :func:`write_provenance` details assigning ``value`` start, one per kind."""
    return (f"set to {value!r} at ", *(f"{value!r} {label} " for label in _WRITE_LABEL.values()))


def write_provenance(version: str, w: chain.Write, value: object, when: str) -> str:
    """The provenance detail of a folded write: ``declared by <hook> at release:path:line``
    for a declaration or a pass's returned dict, ``set to X at path:line`` otherwise."""
    label = _WRITE_LABEL.get(w.kind)
    because = f" because {when}" if when != "always" else ""
    if label is None:
        return f"{_provenance_heads(value)[0]}{w.path}:{w.line}{because}"
    hook = w.function.rsplit(".", 1)[-1]
    return f"{value!r} {label} {hook} at {version}:{w.path}:{w.line}{because}"


def revalued_provenance(detail: str, old: object, new: object) -> str | None:
    """The :func:`write_provenance` detail ``detail`` of a write assigning ``old``, for
    the same write assigning ``new``; ``None`` when ``detail`` is not one assigning ``old``."""
    for head, now in zip(_provenance_heads(old), _provenance_heads(new), strict=True):
        if detail.startswith(head):
            return now + detail[len(head) :]
    return None
