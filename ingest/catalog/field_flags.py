"""Flags declared as annotated dataclass fields (``name: A[T, "help"] = default``).

Covers ``ServerArgs`` fields (0.5.14–0.5.19) and the namespace classes of
``sglang/srt/arg_groups/fields/*.py`` (0.5.20+): :class:`FieldReader` records each
field as a :class:`Declaration` and turns those carrying CLI metadata (a help string
or ``Arg(...)``) into :class:`FlagSpec` records with the rules of
``arg_groups/arg_utils.py::add_cli_args_from_dataclass``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from ingest import ts
from ingest.catalog.argparse_flags import (
    ArgparseReader,
    action_name,
    call_arguments,
    callable_name,
    choices_value,
    is_deprecated,
    known_or_none,
    optional_str,
    value_or_source,
)
from ingest.static.modules import SourceModule
from ingest.static.values import (
    UNKNOWN,
    StaticEvaluator,
    is_stringish,
    jsonable,
    string_value,
    text_of,
)
from kb.catalog_types import Declaration, FlagSpec

__all__ = ["FieldReader"]

# ---------------------------------------------------------------------------
# type annotations
# ---------------------------------------------------------------------------


@dataclass
class _T:
    head: str  # "Optional", "Union", "List", "Literal", "Annotated", "int", "None", "<str>", "<call>", "<expr>"
    args: list[_T]
    node: Node


def _tparse(node: Node) -> _T:
    t = node.type
    if t in ("type", "parenthesized_expression") and node.named_children:
        return _tparse(node.named_children[0])
    if t == "generic_type":
        kids = node.named_children
        head = ts.text(kids[0]) if kids else ""
        args: list[_T] = []
        for kid in kids[1:]:
            if kid.type == "type_parameter":
                args.extend(_tparse(c) for c in kid.named_children if c.type != "comment")
        return _T(_norm_head(head), args, node)
    if t == "subscript":
        head = ts.text(node.child_by_field_name("value"))
        subs = [s for s in node.children_by_field_name("subscript") if s.type != "comment"]
        if len(subs) == 1 and subs[0].type == "tuple":
            subs = [c for c in subs[0].named_children if c.type != "comment"]
        return _T(_norm_head(head), [_tparse(s) for s in subs], node)
    if t == "binary_operator" and ts.text(node.child_by_field_name("operator")) == "|":
        parts = [
            _tparse(node.child_by_field_name("left")),
            _tparse(node.child_by_field_name("right")),
        ]
        return _T("Union", parts, node)
    if t in ("identifier", "attribute"):
        return _T(_norm_head(ts.text(node)), [], node)
    if t == "none":
        return _T("None", [], node)
    if is_stringish(node):
        return _T("<str>", [], node)
    if t == "call":
        return _T("<call>", [], node)
    return _T("<expr>", [], node)


def _norm_head(head: str) -> str:
    last = head.rsplit(".", 1)[-1]
    if last in ("A", "Annotated"):
        return "Annotated"
    return {"list": "List", "List": "List", "Optional": "Optional", "Union": "Union"}.get(
        last, last
    )


def _flatten_union(tp: _T) -> list[_T]:
    if tp.head == "Union":
        out: list[_T] = []
        for a in tp.args:
            out.extend(_flatten_union(a))
        return out
    if tp.head == "Optional" and tp.args:
        return _flatten_union(tp.args[0]) + [_T("None", [], tp.node)]
    return [tp]


def _unwrap_optional(tp: _T) -> _T:
    if tp.head in ("Union", "Optional"):
        non_none = [a for a in _flatten_union(tp) if a.head != "None"]
        if len(non_none) == 1:
            return non_none[0]
    return tp


def _infer_type(name: str) -> str:
    return name if name in ("str", "int", "float") else "str"


# ---------------------------------------------------------------------------
# fields
# ---------------------------------------------------------------------------

#: ``Arg(...)`` parameters in positional order.
_ARG_FIELDS = [
    "help",
    "choices",
    "aliases",
    "cli_name",
    "type_parser",
    "nargs",
    "required",
    "action",
    "action_kwargs",
    "const",
    "no_cli",
]


@dataclass
class _FieldInfo:
    mod: SourceModule
    cls: str
    name: str
    node: Node  # the assignment
    type_node: Node
    right: Node | None


def _class_fields(mod: SourceModule, cls_node: Node) -> list[_FieldInfo]:
    body = cls_node.child_by_field_name("body")
    out: list[_FieldInfo] = []
    if body is None:
        return out
    cls_name = ts.text(cls_node.child_by_field_name("name"))
    stack = list(reversed(body.named_children))
    while stack:
        stmt = stack.pop()
        if stmt.type == "ERROR":
            stack.extend(reversed(stmt.named_children))
            continue
        if stmt.type != "expression_statement":
            continue
        for child in stmt.named_children:
            if child.type != "assignment":
                continue
            left = child.child_by_field_name("left")
            tnode = child.child_by_field_name("type")
            if left is None or left.type != "identifier" or tnode is None:
                continue
            if re.match(r"^\s*(typing\.)?ClassVar\b", ts.text(tnode)):
                continue
            out.append(
                _FieldInfo(
                    mod, cls_name, ts.text(left), child, tnode, child.child_by_field_name("right")
                )
            )
    return out


def _has_ns_path(cls: Node) -> bool:
    """Whether a class body sets ``_NS_PATH`` (a namespace class of fields)."""
    body = cls.child_by_field_name("body")
    if body is None:
        return False
    for stmt in body.named_children:
        if stmt.type == "expression_statement" and ts.text(stmt).startswith("_NS_PATH"):
            return True
    return False


def _arg_kwargs(call: Node) -> dict[str, Node]:
    """Keyword nodes of an ``Arg(...)`` call, positional ones named by ``_ARG_FIELDS``."""
    args = call.child_by_field_name("arguments")
    if args is None:
        return {}
    pos, kws, _ = call_arguments(args)
    out = dict(zip(_ARG_FIELDS, pos, strict=False))
    out.update(kws)
    return out


_FieldMeta = tuple[_FieldInfo, _T, "Node | None", object, bool]


class FieldReader:
    """Reads the annotated fields of the scanned modules with a shared evaluator."""

    def __init__(
        self, mods: list[SourceModule], evaluator: StaticEvaluator, argparse: ArgparseReader
    ) -> None:
        self.mods = mods
        self.evaluator = evaluator
        self.argparse = argparse
        self._metas: list[_FieldMeta] = []

    def field_classes(self) -> list[tuple[SourceModule, Node]]:
        """``ServerArgs``, ``arg_groups/fields`` classes and ``_NS_PATH`` classes, bases first."""
        selected: list[tuple[SourceModule, Node]] = []
        seen: set[tuple[str, str]] = set()

        def add(mod: SourceModule, name: str) -> None:
            if (mod.name, name) in seen or name not in mod.classes:
                return
            seen.add((mod.name, name))
            cls = mod.classes[name]
            # bases declared in scanned modules first (MRO-ish order)
            supers = cls.child_by_field_name("superclasses")
            if supers is not None:
                for base in supers.named_children:
                    if base.type == "identifier":
                        bname = ts.text(base)
                        for m in self.mods:
                            if bname in m.classes:
                                add(m, bname)
                                break
            selected.append((mod, cls))

        for mod in self.mods:
            in_fields = "/arg_groups/fields/" in mod.rel
            for name, cls in mod.classes.items():
                is_server_args = name == "ServerArgs" and mod.rel.endswith("srt/server_args.py")
                if is_server_args or in_fields or _has_ns_path(cls):
                    add(mod, name)
        return selected

    def declarations(self) -> tuple[list[Declaration], dict[str, tuple[bool, object]]]:
        """Every declared field, and ``attr -> (known, default)`` for the evaluator.

        Also sets the evaluator's ``class_names`` and remembers the fields for :meth:`specs`.
        """
        classes = self.field_classes()
        self.evaluator.class_names = {ts.text(c.child_by_field_name("name")) for _, c in classes}
        fields: list[_FieldInfo] = []
        for mod, cls in classes:
            fields.extend(_class_fields(mod, cls))

        decl_defaults: dict[str, tuple[bool, object]] = {}
        declarations: list[Declaration] = []
        metas = self._metas = []
        for f in fields:
            value = self.evaluator.eval(f.right, f.mod) if f.right is not None else UNKNOWN
            value = jsonable(value) if value is not UNKNOWN else UNKNOWN
            known = value is not UNKNOWN
            if f.name not in decl_defaults or not decl_defaults[f.name][0]:
                decl_defaults[f.name] = (known, value if known else None)
            tp = _tparse(f.type_node)
            meta = None
            if tp.head == "Annotated":
                for a in tp.args[1:]:
                    if a.head == "<str>" or (
                        a.head == "<call>"
                        and ts.text(a.node.child_by_field_name("function")).rsplit(".", 1)[-1]
                        == "Arg"
                    ):
                        meta = a.node
                        break
            help_text = None
            if meta is not None:
                help_text = (
                    text_of(meta) if is_stringish(meta) else text_of(_arg_kwargs(meta).get("help"))
                )
            declarations.append(
                Declaration(
                    attr=f.name,
                    annotation=ts.text(f.type_node),
                    default=value if known else None,
                    default_known=known,
                    default_src=ts.text(f.right) if f.right is not None else None,
                    help=help_text,
                    path=f.mod.rel,
                    line=ts.start_line(f.node),
                    cls=f.cls,
                )
            )
            if f.right is None:
                # a field without default: argparse gets no default (required rule)
                decl_defaults.setdefault(f.name, (False, None))
            metas.append((f, tp, meta, value, known))
        return declarations, decl_defaults

    def specs(self) -> list[FlagSpec]:
        """A spec for each field read by :meth:`declarations` that carries CLI metadata."""
        specs: list[FlagSpec] = []
        for f, tp, meta, value, known in self._metas:
            if meta is not None:
                spec = self._spec(f, tp, meta, value, known, has_default=f.right is not None)
                if spec is not None:
                    specs.append(spec)
        return specs

    def _spec(
        self, f: _FieldInfo, tp: _T, meta: Node, default: object, known: bool, *, has_default: bool
    ) -> FlagSpec | None:
        ev = self.evaluator
        mod = f.mod
        if is_stringish(meta):
            kw: dict[str, Node] = {}
            help_text = text_of(meta)
        else:
            kw = _arg_kwargs(meta)
            help_text = text_of(kw.get("help")) if "help" in kw else ""
        if "no_cli" in kw and ev.eval(kw["no_cli"], mod) is True:
            return None

        def val(key: str) -> object:
            return ev.eval(kw[key], mod) if key in kw else None

        cli_name = val("cli_name")
        if not isinstance(cli_name, str) or not cli_name:
            cli_name = "--" + f.name.replace("_", "-")
        aliases = val("aliases")
        names = [cli_name] + (
            [a for a in aliases if isinstance(a, str)] if isinstance(aliases, list) else []
        )
        type_parser = callable_name(kw.get("type_parser"))
        arg_nargs = val("nargs")
        arg_nargs = optional_str(arg_nargs)
        choices_node = kw.get("choices")
        choices = None
        choices_src = None
        if choices_node is not None and choices_node.type != "none":
            choices_src = ts.text(choices_node)
            choices = choices_value(ev, choices_node, mod)
        const_v = val("const")
        const = known_or_none(const_v)
        spec = FlagSpec(
            attr=f.name,
            flags=names,
            type=None,
            action=None,
            nargs=None,
            default=default if known else None,
            default_known=known if has_default else True,
            default_src=ts.text(f.right) if f.right is not None else None,
            choices=None,
            choices_src=None,
            help=help_text,
            required=False,
            deprecated=False,
            path=mod.rel,
            line=ts.start_line(f.node),
            layout="annotated_field",
            const=const,
        )
        if not has_default:
            spec.default, spec.default_known = None, True  # argparse default None
        if "action" in kw and kw["action"].type != "none":
            spec.action = action_name(kw["action"])
            ak = ev.eval(kw["action_kwargs"], mod) if "action_kwargs" in kw else None
            if "action_kwargs" in kw and kw["action_kwargs"].type == "dictionary":
                for pair in kw["action_kwargs"].named_children:
                    if pair.type != "pair":
                        continue
                    k = string_value(pair.child_by_field_name("key"))
                    v = pair.child_by_field_name("value")
                    if k == "type":
                        spec.type = callable_name(v)
                    elif k == "nargs":
                        nv = ev.eval(v, mod)
                        spec.nargs = optional_str(nv)
                    elif k == "choices":
                        spec.choices_src = ts.text(v)
                        cv = ev.eval(v, mod)
                        spec.choices = jsonable(cv) if isinstance(cv, (list, tuple)) else None
                    elif isinstance(k, str):
                        spec.extra[k] = value_or_source(ev, v, mod)
            elif isinstance(ak, dict):
                spec.extra.update({str(k): v for k, v in ak.items()})
            explicit_nargs = "action_kwargs" in kw and '"nargs"' in ts.text(kw["action_kwargs"])
            self.argparse.apply_action(
                spec, spec.action, explicit_default=has_default, explicit_nargs=explicit_nargs
            )
            spec.deprecated = is_deprecated(spec)
            return spec

        inner = _unwrap_optional(tp.args[0]) if tp.args else _T("<expr>", [], tp.node)
        if inner.head == "Literal":
            lit_vals = [ev.eval(a.node, mod) for a in inner.args]
            lit_vals = [v for v in lit_vals if v is not UNKNOWN]
            spec.choices = choices if choices else jsonable(lit_vals)  # type: ignore[assignment]
            spec.choices_src = choices_src if choices else ts.text(inner.node)
            first = type(lit_vals[0]).__name__ if lit_vals else "str"
            spec.type = type_parser or _infer_type(first)
        elif inner.head == "List" and type_parser is None:
            elem = inner.args[0].head if inner.args else "str"
            spec.type = _infer_type(elem)
            spec.nargs = arg_nargs or "+"
            if choices:
                spec.choices, spec.choices_src = choices, choices_src
        elif inner.head == "bool":
            spec.action = "store_true"
            if not has_default:
                spec.default, spec.default_known = False, True
        else:
            spec.type = type_parser or _infer_type(inner.head)
            if choices:
                spec.choices, spec.choices_src = choices, choices_src
            spec.nargs = arg_nargs
            req = val("required")
            spec.required = req is True or (req is None and not has_default)
        if choices_src and spec.choices_src is None:
            spec.choices_src = choices_src
        spec.deprecated = is_deprecated(spec)
        return spec

    # -- custom argparse actions -------------------------------------------------
