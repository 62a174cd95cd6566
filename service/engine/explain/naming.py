"""Names for what a condition reads, for the rule sentence
(:mod:`service.engine.explain.rule`): ``self.X`` (and ``server_args.X``, ``getattr(self,
"X")`` …) → the flag's spelling, the one the user typed when they typed one, else the
catalog's first; facts in words (``model_arch`` → "the model architecture",
``….hf_config.X`` → "the model config's `X`", ``envs.X.get()`` → "the environment
variable `X`"); anything else as code with the flags named in it
(``parse_connector_type(--model-path)``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from kb.catalog_types import NO_VALUE_ACTIONS, Catalog
from kb.conditions import DEFAULT_ARG_OBJECTS, arg_attr_read, attr_chain, is_arg_root

__all__ = [
    "ATTR_TEXT",
    "Namer",
    "flag_attr",
    "items_text",
    "literal",
    "subject_text",
    "value_text",
]

#: a list longer than this is shown by its first items and its length
_MAX_ITEMS = 6
#: ``self.x`` (and the other server-argument roots) in text that does not parse
ATTR_TEXT = re.compile(r"\b(?:self|server_args|args|cfg|sa)\.([A-Za-z_]\w*)")
_ENV_CALLS = frozenset(
    {
        "get_bool_env_var",
        "get_int_env_var",
        "get_float_env_var",
        "get_str_env_var",
        "getenv",
        "os.getenv",
        "os.environ.get",
    }
)
_BOOL_TYPES = frozenset({"bool", "str2bool"})


class Namer:
    """Names for what a condition reads: flags in the user's spellings, facts in words."""

    def __init__(
        self,
        catalog: Catalog | None = None,
        spellings: Mapping[str, str] | None = None,
        roots: tuple[str, ...] = DEFAULT_ARG_OBJECTS,
    ) -> None:
        self.by_attr = catalog.by_attr() if catalog is not None else {}
        self.spellings = dict(spellings or {})
        #: the names that stand for the server arguments (``self`` only in ServerArgs)
        self.roots = roots

    def spelling(self, attr: str) -> str | None:
        """The flag the user typed for ``attr``, else the catalog's first spelling."""
        if attr in self.spellings:
            return self.spellings[attr]
        spec = self.by_attr.get(attr)
        return spec.flags[0] if spec is not None and spec.flags else None

    def flag(self, attr: str) -> str:
        """`` `--speculative-num-steps` `` for ``speculative_num_steps``; a setting with no
        flag is named as such."""
        spelled = self.spelling(attr)
        return f"`{spelled}`" if spelled else f"the server argument `{attr}`"

    def bare_flag(self, attr: str) -> str:
        """The spelling without backticks (for code shown with the flags named in it)."""
        return self.spelling(attr) or attr

    def is_switch(self, attr: str) -> bool:
        """Is ``attr`` on/off (a ``store_true``-like flag or a bool) or unset by default?"""
        spec = self.by_attr.get(attr)
        if spec is None:
            return True
        return (
            spec.action in NO_VALUE_ACTIONS
            or (spec.type or "") in _BOOL_TYPES
            or (spec.default_known and spec.default in (None, False))
        )


def flag_attr(node: ast.AST, namer: Namer) -> str | None:
    """The ServerArgs attribute ``node`` reads (``self.x``, ``getattr(cfg, "x", d)``)."""
    if not namer.roots:
        return None
    if isinstance(node, ast.Call):
        return arg_attr_read(node, namer.roots)
    if isinstance(node, ast.Attribute) and is_arg_root(node.value, namer.roots):
        return node.attr
    return None


def _chain_text(node: ast.AST, namer: Namer) -> str | None:
    found = attr_chain(node, namer.roots) if namer.roots else None
    if found is None:
        return ast.unparse(node) if isinstance(node, ast.Name) else None
    return ".".join(found[1]) if found[0] else ast.unparse(node)


def _env_name(node: ast.AST) -> str | None:
    """``X`` for ``envs.X.get()``, ``envs.X.value``, ``envs.X``, ``get_bool_env_var("X")``."""
    if (
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and ast.unparse(node.func) in _ENV_CALLS
    ):
        return node.args[0].value
    text = ast.unparse(node)
    m = re.fullmatch(r"envs\.([A-Z][A-Z0-9_]*)(?:\.get\(\)|\.value)?", text)
    return m.group(1) if m else None


def _fact_name(node: ast.AST, namer: Namer) -> str | None:
    """Words for a fact SGLang reads from the model, the machine or the environment."""
    env = _env_name(node)
    if env is not None:
        return f"the environment variable `{env}`"
    # ``x[0]``: the first item of ``x``, named from ``x``
    sub0 = False
    named: ast.AST = node
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == 0
    ):
        sub0, named = True, node.value
    text = _chain_text(named, namer)
    if text is None:
        return None
    if text == "model_arch" and not sub0:
        return "the model architecture"
    if text.endswith("architectures"):
        return "the model architecture" if sub0 else "the model's architectures"
    if sub0:
        return None
    if text == "torch.cuda.device_count()":
        return "the number of GPUs"
    if text in ("gpu_mem", "get_device_memory_capacity()"):
        return "the GPU memory (MiB)"
    for root in ("hf_config.", "model_config.", "get_model_config()."):
        if root in text or text.startswith(root.rstrip(".") + "."):
            return f"the model config's `{text.rsplit('.', 1)[-1]}`"
    return None


class _Named(ast.NodeTransformer):
    """Code with every flag read replaced by its spelling (``self.tp_size`` → ``--tp-size``)."""

    def __init__(self, namer: Namer) -> None:
        self.namer = namer

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        attr = flag_attr(node, self.namer)
        return ast.Name(self.namer.bare_flag(attr)) if attr else self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        attr = flag_attr(node, self.namer)
        return ast.Name(self.namer.bare_flag(attr)) if attr else self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Name("server_args") if node.id in self.namer.roots else node


def literal(node: ast.AST, namer: Namer) -> str:
    """``node`` as code, flags named: `` `parse_connector_type(--model-path)` ``."""
    import copy

    return f"`{ast.unparse(_Named(namer).visit(copy.deepcopy(node)))}`"


def subject_text(node: ast.AST, namer: Namer) -> str:
    """What ``node`` reads, as a sentence's subject: a flag, a fact in words, "the number
    of values in …", else the code with the flags named (:func:`literal`)."""
    attr = flag_attr(node, namer)
    if attr is not None:
        return namer.flag(attr)
    fact = _fact_name(node, namer)
    if fact is not None:
        return fact
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "len" and len(node.args) == 1:
        return f"the number of values in {subject_text(node.args[0], namer)}"
    return literal(node, namer)


def _const_text(value: object) -> str:
    if isinstance(value, str):
        return value or '""'
    return repr(value)


def items_text(values: list[str]) -> str:
    """``A, B or C``; a long list as its first items and its length."""
    if len(values) > _MAX_ITEMS:
        return f"{', '.join(values[: _MAX_ITEMS - 2])} … ({len(values)} values)"
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def value_text(node: ast.AST, namer: Namer) -> str:
    """A value compared with: a constant (a list of them) as written, else as a subject."""
    if isinstance(node, ast.Constant):
        return _const_text(node.value)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        consts = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        if len(consts) == len(node.elts):
            return "[" + ", ".join(_const_text(v) for v in consts) + "]"
    return subject_text(node, namer)
