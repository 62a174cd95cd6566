"""Flags declared by ``add_argument`` calls, and the argparse semantics all flags share.

:class:`ArgparseReader` turns ``parser.add_argument("--x", ...)`` calls (on any
receiver) into :class:`FlagSpec` records, applies what argparse does for an
``action`` (built-in, ``BooleanOptionalAction`` or a custom ``Action`` subclass
read statically), and reads the dest renames of ``ServerArgs.from_cli_args``.
The small keyword helpers are shared with the annotated-field layout.
"""

from __future__ import annotations

import re

from tree_sitter import Node

from ingest import ts
from ingest.static.modules import SourceModule
from ingest.static.values import (
    UNKNOWN,
    Scope,
    StaticEvaluator,
    jsonable,
    local_scope,
    string_value,
    text_of,
)
from kb.catalog_types import FlagSpec

__all__ = [
    "ArgparseReader",
    "action_name",
    "call_arguments",
    "callable_name",
    "choices_value",
    "is_deprecated",
    "known_or_none",
    "optional_str",
    "value_or_source",
]

_BUILTIN_ACTIONS = {
    "store",
    "store_const",
    "store_true",
    "store_false",
    "append",
    "append_const",
    "count",
    "help",
    "version",
    "extend",
}
_DEPRECATED_HELP = re.compile(
    r"^\W*deprecated\b"  # "Deprecated. Use ...", "[Deprecated] ...", "(Deprecated: ...)"
    r"|^\W*note:\s*(this|the)?\s*(flag|argument|option|--[\w-]+)\s+is\s+deprecated"
    r"|\b(this|the) (flag|argument|option) is deprecated",
    re.IGNORECASE,
)


def call_arguments(args: Node) -> tuple[list[Node], dict[str, Node], bool]:
    """Positional nodes, keyword nodes by name, and whether ``*``/``**`` splats occur."""
    pos: list[Node] = []
    kws: dict[str, Node] = {}
    splat = False
    for a in args.named_children:
        if a.type == "comment":
            continue
        if a.type == "keyword_argument":
            kws[ts.text(a.child_by_field_name("name"))] = a.child_by_field_name("value")
        elif a.type in ("list_splat", "dictionary_splat"):
            splat = True
        else:
            pos.append(a)
    return pos, kws, splat


def action_name(node: Node | None) -> str | None:
    if node is None:
        return None
    if node.type in ("string", "concatenated_string"):
        v = string_value(node)
        return v if isinstance(v, str) else ts.text(node)
    return ts.text(node).rsplit(".", 1)[-1]


def callable_name(node: Node | None) -> str | None:
    if node is None:
        return None
    if node.type == "none":
        return None
    if node.type == "lambda":
        return "lambda"
    return ts.text(node)


def is_deprecated(spec: FlagSpec) -> bool:
    if spec.action and "deprecat" in spec.action.lower():
        return True
    return bool(spec.help and _DEPRECATED_HELP.search(spec.help))


def optional_str(value: object) -> str | None:
    """How an evaluated ``nargs`` is kept: ``str(value)``, or None when absent or unknown."""
    return str(value) if value is not None and value is not UNKNOWN else None


def known_or_none(value: object) -> object:
    """An evaluated value, with UNKNOWN turned into None (how ``const`` is kept)."""
    return value if value is not UNKNOWN else None


def value_or_source(
    ev: StaticEvaluator, node: Node, mod: SourceModule, scope: Scope | None = None
) -> object:
    """How an extra keyword is kept: its JSON-friendly value, else its source text."""
    value = ev.eval(node, mod, scope)
    return jsonable(value) if value is not UNKNOWN else ts.text(node)


def choices_value(
    ev: StaticEvaluator, node: Node, mod: SourceModule, scope: Scope | None = None
) -> list | None:
    """A ``choices=`` list when it evaluates to a fully known list or tuple, else None."""
    value = ev.eval(node, mod, scope)
    choices = jsonable(value) if isinstance(value, (list, tuple)) else None
    return choices if isinstance(choices, list) else None


class ArgparseReader:
    """Reads argparse declarations of the scanned modules with a shared evaluator."""

    def __init__(self, mods: list[SourceModule], evaluator: StaticEvaluator) -> None:
        self.mods = mods
        self.evaluator = evaluator
        self.action_classes: dict[str, dict[str, tuple[bool, object]]] = {}

    def collect_action_classes(self) -> None:
        """Read the ``__init__`` defaults (nargs/const/default) of custom ``Action`` classes."""
        for mod in self.mods:
            for name, cls in mod.classes.items():
                supers = cls.child_by_field_name("superclasses")
                if supers is None or "Action" not in ts.text(supers):
                    continue
                params: dict[str, tuple[bool, object]] = {}
                body = cls.child_by_field_name("body")
                for fn in body.named_children if body is not None else []:
                    fdef = fn if fn.type == "function_definition" else None
                    if fdef is None or ts.text(fdef.child_by_field_name("name")) != "__init__":
                        continue
                    plist = fdef.child_by_field_name("parameters")
                    for p in plist.named_children if plist is not None else []:
                        if p.type in ("default_parameter", "typed_default_parameter"):
                            pname = ts.text(p.child_by_field_name("name"))
                            v = self.evaluator.eval(p.child_by_field_name("value"), mod)
                            params[pname] = (v is not UNKNOWN, known_or_none(v))
                self.action_classes[name] = params

    def apply_action(
        self,
        spec: FlagSpec,
        action: str | None,
        *,
        explicit_default: bool,
        explicit_nargs: bool = False,
    ) -> None:
        if action is None or action in _BUILTIN_ACTIONS:
            if not explicit_default:
                if action == "store_true":
                    spec.default, spec.default_known = False, True
                elif action == "store_false":
                    spec.default, spec.default_known = True, True
                else:
                    spec.default, spec.default_known = None, True
            return
        if action == "BooleanOptionalAction":
            flags: list[str] = []
            for opt in spec.flags:
                flags.append(opt)
                if opt.startswith("--"):
                    flags.append("--no-" + opt[2:])
            spec.flags = flags
            if not explicit_default:
                spec.default, spec.default_known = None, True
            return
        params = self.action_classes.get(action, {})
        if not explicit_nargs and spec.nargs is None and "nargs" in params and params["nargs"][0]:
            n = params["nargs"][1]
            spec.nargs = str(n) if n is not None else None
        if spec.const is None and "const" in params and params["const"][0]:
            spec.const = jsonable(params["const"][1])
        if not explicit_default:
            if "default" in params and params["default"][0]:
                spec.default, spec.default_known = jsonable(params["default"][1]), True
            else:
                spec.default, spec.default_known = None, True

    def from_cli_renames(self) -> dict[str, str]:
        """``args.tp_size = args.tensor_parallel_size`` in ServerArgs.from_cli_args: dest -> attr."""
        renames: dict[str, str] = {}
        for mod in self.mods:
            cls = mod.classes.get("ServerArgs")
            if cls is None:
                continue
            for node in ts.walk(cls):
                if node.type != "function_definition":
                    continue
                if ts.text(node.child_by_field_name("name")) != "from_cli_args":
                    continue
                for a in ts.walk(node):
                    if a.type != "assignment":
                        continue
                    left, right = a.child_by_field_name("left"), a.child_by_field_name("right")
                    if (
                        left is not None
                        and right is not None
                        and left.type == "attribute"
                        and right.type == "attribute"
                        and ts.text(left.child_by_field_name("object")) == "args"
                        and ts.text(right.child_by_field_name("object")) == "args"
                    ):
                        renames[ts.text(right.child_by_field_name("attribute"))] = ts.text(
                            left.child_by_field_name("attribute")
                        )
        return renames

    def specs(self, mod: SourceModule, renames: dict[str, str]) -> list[FlagSpec]:
        """A spec for each ``<anything>.add_argument("--flag", ...)`` call of ``mod``."""
        out: list[FlagSpec] = []
        for node in ts.walk(mod.root):
            if node.type != "call":
                continue
            fn = node.child_by_field_name("function")
            if fn is None or fn.type != "attribute":
                continue
            if ts.text(fn.child_by_field_name("attribute")) != "add_argument":
                continue
            args = node.child_by_field_name("arguments")
            if args is None:
                continue
            spec = self._spec(mod, node, args, renames)
            if spec is not None:
                out.append(spec)
        return out

    def _spec(
        self, mod: SourceModule, call: Node, args: Node, renames: dict[str, str]
    ) -> FlagSpec | None:
        pos, kws, splat = call_arguments(args)
        if splat or not pos:
            return None
        names = [string_value(p) for p in pos]
        if any(not isinstance(n, str) for n in names) or not all(n.startswith("-") for n in names):  # type: ignore[union-attr]
            return None  # dynamic names or positionals
        flags: list[str] = names  # type: ignore[assignment]
        scope = local_scope(call)
        ev = self.evaluator

        def lit(key: str) -> object:
            return ev.eval(kws[key], mod, scope) if key in kws else None

        dest = lit("dest")
        if not isinstance(dest, str):
            long = [n for n in flags if n.startswith("--")]
            dest = (long[0] if long else flags[0]).lstrip("-").replace("-", "_")
        attr = renames.get(dest, dest)
        action = action_name(kws.get("action"))
        type_name = callable_name(kws.get("type"))
        nargs_v = lit("nargs")
        nargs = optional_str(nargs_v)
        default_node = kws.get("default")
        if default_node is not None:
            dv = ev.eval(default_node, mod, scope)
            dv = jsonable(dv) if dv is not UNKNOWN else UNKNOWN
            default, known, default_src = (
                (None, False, ts.text(default_node))
                if dv is UNKNOWN
                else (dv, True, ts.text(default_node))
            )
        else:
            default, known, default_src = None, True, None
        choices = choices_src = None
        if "choices" in kws and kws["choices"].type != "none":
            choices_src = ts.text(kws["choices"])
            choices = choices_value(ev, kws["choices"], mod, scope)
        const_v = lit("const")
        req = lit("required")
        spec = FlagSpec(
            attr=attr,
            flags=flags,
            type=type_name,
            action=action,
            nargs=nargs,
            default=default,
            default_known=known,
            default_src=default_src,
            choices=choices,
            choices_src=choices_src,
            help=text_of(kws.get("help")),
            required=req is True,
            deprecated=False,
            path=mod.rel,
            line=ts.start_line(call),
            layout="argparse",
            const=known_or_none(const_v),
            dest=dest if dest != attr else None,
        )
        for k, v in kws.items():
            if k in (
                "dest",
                "action",
                "type",
                "nargs",
                "default",
                "choices",
                "help",
                "required",
                "const",
                "metavar",
            ):
                continue
            spec.extra[k] = value_or_source(ev, v, mod, scope)
        self.apply_action(
            spec, action, explicit_default=default_node is not None, explicit_nargs="nargs" in kws
        )
        spec.deprecated = is_deprecated(spec)
        return spec
