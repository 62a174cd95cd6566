"""Which launch flag decides a value a check reads outside the server-args object.

Checks past argument validation read function parameters and fields of other objects:
``check_quantized_moe_compatibility(*, model_config, tp_size, moe_ep_size, moe_dp_size)``
tests ``moe_intermediate_size // (tp_size // moe_ep_size // moe_dp_size)``, and the caller
passes ``moe_ep_size=cfg.ep_size``. :func:`flag_for` finds, for such a name, the
server-args attribute SGLang passes under it, with the line that passes it:

* the name is itself a server-args attribute (``tp_size``): that attribute, citing its
  declaration;
* else the release's source is searched (full-text, phrase of the name's tokens) for
  ``name=server_args.attr`` or ``name = cfg.attr`` (the server-args object under the
  names SGLang gives it, ``self.server_args`` too) where ``attr`` is a server-args
  attribute (``moe_ep_size=cfg.ep_size``); the attribute passed most often wins (a
  line of SGLang's start-up counts ten times one of its benchmarks or tests) and its
  first line is cited.

Nothing is guessed from the name alone. Results are cached per release.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from kb.code_types import Check
from kb.conditions import DEFAULT_ARG_OBJECTS
from kb.store import Store
from service.engine.cache import cached, release_key
from service.engine.evaluate import chain

__all__ = [
    "DerivedTrace",
    "FlagTrace",
    "derived_params",
    "flag_for",
    "flag_params",
    "formula_for",
    "own_fields",
    "rename_fields",
    "server_args_attrs",
    "snake_case",
    "traced_params",
]

#: chunks of the release searched for one name
MAX_CHUNKS = 300
#: what SGLang names the server-args object where it passes a field on
_RECEIVER = r"(?:self\.)?(?:server_args|cfg|args)\."
_NAME = re.compile(r"[A-Za-z_]\w{0,80}")


@dataclass(frozen=True)
class FlagTrace:
    """``name`` is the server-args attribute ``attr``: ``how`` (the passing text or
    "declared"), cited at ``citation`` (release:path:line)."""

    name: str
    attr: str
    citation: str
    how: str


def server_args_attrs(store: Store, version: str) -> frozenset[str]:
    """The server-args attributes of ``version`` (flags and declarations; cached)."""

    def build() -> frozenset[str]:
        rows = store.query(
            "SELECT attr FROM flags WHERE release = ? UNION "
            "SELECT attr FROM declarations WHERE release = ?",
            (version, version),
        )
        return frozenset(r["attr"] for r in rows)

    return cached(release_key(store, version, "params:attrs"), build)


def flag_for(store: Store, version: str, name: str) -> FlagTrace | None:
    """The server-args attribute SGLang passes as ``name`` (None when none is found)."""
    if not _NAME.fullmatch(name):
        return None
    return cached(
        release_key(store, version, f"params:flag-for:{name}"), lambda: _trace(store, version, name)
    )


def _trace(store: Store, version: str, name: str) -> FlagTrace | None:
    attrs = server_args_attrs(store, version)
    if name in attrs:
        decl = store.declarations(version, name)
        row = (
            decl[0]
            if decl
            else next(
                iter(
                    store.query(
                        "SELECT path, line FROM flags WHERE release = ? AND attr = ? LIMIT 1",
                        (version, name),
                    )
                ),
                None,
            )
        )
        if row is None:
            return None
        return FlagTrace(name, name, f"{version}:{row['path']}:{row['line']}", "declared")
    phrase = " ".join(t for t in name.lower().split("_") if t)
    if not phrase:
        return None
    rows = store.query(
        "SELECT c.path AS path, c.start_line AS start_line, c.text AS text FROM chunks_fts "
        "CROSS JOIN chunks AS c ON c.seq = chunks_fts.rowid "
        "WHERE chunks_fts MATCH ? AND c.release = ? "
        "ORDER BY (c.path LIKE '%test%' OR c.path LIKE '%bench%'), c.path LIMIT ?",
        (f'"{phrase}"', version, MAX_CHUNKS),
    )
    passes = re.compile(
        r"\b"
        + re.escape(name)
        + r"\s{0,4}=\s{0,4}"
        + _RECEIVER
        + r"([A-Za-z_]\w{0,80})(?=\s{0,4}(?:[,)#]|$))"
    )
    votes: Counter[str] = Counter()
    first: dict[str, tuple[str, str]] = {}
    for row in rows:
        for i, line in enumerate((row["text"] or "").splitlines()):
            for m in passes.finditer(line):
                attr = m.group(1)
                if attr not in attrs or attr == name:
                    continue
                # SGLang's own start-up outranks its benchmarks and tests
                votes[attr] += 1 if "/test" in row["path"] or "bench" in row["path"] else 10
                first.setdefault(
                    attr, (f"{version}:{row['path']}:{row['start_line'] + i}", m.group(0).strip())
                )
    if not votes:
        return None
    attr = max(votes, key=lambda a: (votes[a], a == name.rsplit("_", 2)[-1], a))
    citation, how = first[attr]
    return FlagTrace(name, attr, citation, how)


def _parameters(store: Store, version: str, fn: dict[str, Any]) -> list[str]:
    """``fn``'s parameter names, but ``self``/``cls`` and the default argument objects."""
    node = chain.function_ast(store, version, fn)
    if node is None:
        return []
    return [
        a.arg
        for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
        if a.arg not in DEFAULT_ARG_OBJECTS and a.arg not in ("self", "cls")
    ]


def traced_params(
    store: Store, version: str, fn: dict[str, Any] | None, path: str
) -> dict[str, FlagTrace]:
    """The parameters of ``fn`` (a function past argument validation) that SGLang fills
    from a server-args attribute, with the trace (cached per release and function).
    Functions of the validation files get none: there the server-args object itself is
    passed, and a parameter named like a flag may hold something else."""
    if fn is None or path.startswith(chain.VALIDATION_PATHS):
        return {}

    def build() -> dict[str, FlagTrace]:
        out: dict[str, FlagTrace] = {}
        for name in _parameters(store, version, fn):
            trace = flag_for(store, version, name)
            if trace is not None:
                out[name] = trace
        return out

    return cached(release_key(store, version, f"params:of:{fn['path']}:{fn['start_line']}"), build)


def flag_params(
    store: Store,
    version: str,
    fn: dict[str, Any] | None,
    path: str,
    local: Mapping[str, ast.expr],
    keep: Collection[str] = (),
) -> dict[str, ast.expr]:
    """``{parameter: server_args.<attr>}`` for :func:`traced_params`, and ``{parameter:
    formula}`` for :func:`derived_params`, to substitute into the check's conditions like a
    local (parameters a local or a fact in ``keep`` shadows are left)."""
    out = {
        name: ast.parse(f"server_args.{t.attr}", mode="eval").body
        for name, t in traced_params(store, version, fn, path).items()
        if name not in local and name not in keep
    }
    for name, d in derived_params(store, version, fn, path).items():
        if name not in local and name not in keep and name not in out:
            out[name] = ast.parse(d.expr, mode="eval").body
    return out


def own_fields(
    store: Store, version: str, fn: dict[str, Any] | None, check: Check
) -> frozenset[str]:
    """Fields ``self.X`` the check's function assigns before the check, outside the
    validation files (cached): there ``self.quantization`` may hold the checkpoint's
    method (``self.quantization = quant_method`` in ``ModelConfig``), not the flag's."""
    if fn is None or check.path.startswith(chain.VALIDATION_PATHS):
        return frozenset()

    def build() -> frozenset[str]:
        node = chain.function_ast(store, version, fn)
        if node is None:
            return frozenset()
        line = check.start_line - fn["start_line"] + 1
        return frozenset(
            t.attr
            for sub in ast.walk(node)
            if isinstance(sub, ast.Assign | ast.AugAssign | ast.AnnAssign) and sub.lineno < line
            for t in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
            if isinstance(t, ast.Attribute)
            and isinstance(t.value, ast.Name)
            and t.value.id == "self"
        )

    return cached(release_key(store, version, f"params:own:{check.id}"), build)


def snake_case(name: str) -> str:
    """``model_config`` of ``ModelConfig``: how SGLang names an instance of a class."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def rename_fields(
    store: Store, version: str, fn: dict[str, Any] | None, check: Check, condition: str
) -> str:
    """``condition`` as a check outside the validation files reads it: a field of the
    argument object that is not a server-args attribute is renamed to the attribute SGLang
    fills it from (``self.moe_ep_size`` in a model runner is ``ep_size``; :func:`flag_for`),
    and a field the function assigns before the check (:func:`own_fields`) is the
    object's own (``self.quantization`` in ``ModelConfig`` reads ``model_config.quantization``,
    a fact, not the flag)."""
    if check.path.startswith(chain.VALIDATION_PATHS) or "." not in condition:
        return condition
    try:
        tree = ast.parse(condition.strip(), mode="eval")
    except SyntaxError:
        return condition
    attrs = server_args_attrs(store, version)
    own = own_fields(store, version, fn, check)
    root = snake_case(fn["class_name"]) if fn is not None and fn.get("class_name") else None
    changed = False
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in DEFAULT_ARG_OBJECTS
        ):
            continue
        if node.value.id == "self" and node.attr in own and root:
            node.value, changed = ast.Name(root, ast.Load()), True
        elif node.attr not in attrs:
            trace = flag_for(store, version, node.attr)
            if trace is not None:
                node.attr, changed = trace.attr, True
    return ast.unparse(tree) if changed else condition


# ------------------------------------------------------------------ derived parameters
#
# A parameter no flag is passed as may be computed from flags where SGLang builds it:
# ``create_weights(..., intermediate_size_per_partition=self.intermediate_size_per_partition)``
# with ``self.intermediate_size_per_partition = intermediate_size // self.moe_tp_size`` in
# ``FusedMoE.__init__``, and ``moe_tp_size = self.tp_size // self.moe_ep_size`` in the
# model runner. :func:`formula_for` finds such one-line arithmetic assignments by full-text
# search and resolves each operand to a flag (:func:`flag_for`), to another such formula
# whose operands are all flags (one level), or, for the parameter's own formula, to a
# checkpoint value the assigning object holds (``fused_moe.intermediate_size``: a fact the
# message's printed value settles). Each step is cited.

#: one-line assignments read per name
MAX_ASSIGNMENTS = 60
_ARITH = (ast.FloorDiv, ast.Div, ast.Mult, ast.Add, ast.Sub, ast.Mod)


@dataclass(frozen=True)
class DerivedTrace:
    """``name`` is ``expr`` (server-args attributes as ``server_args.<attr>``, checkpoint
    values as ``<object>.<field>``), by the assignments and passes in ``steps``."""

    name: str
    expr: str
    steps: tuple[FlagTrace, ...]


def _assignments(store: Store, version: str, name: str) -> list[tuple[str, int, ast.expr]]:
    """``(path, line, right-hand side)`` of the one-line arithmetic assignments to ``name``
    (or ``self.name``) in the release, SGLang's start-up before its benchmarks and tests."""
    phrase = " ".join(t for t in name.lower().split("_") if t)
    if not phrase:
        return []
    rows = store.query(
        "SELECT c.path AS path, c.start_line AS start_line, c.text AS text FROM chunks_fts "
        "CROSS JOIN chunks AS c ON c.seq = chunks_fts.rowid "
        "WHERE chunks_fts MATCH ? AND c.release = ? "
        "ORDER BY (c.path LIKE '%test%' OR c.path LIKE '%bench%'), c.path LIMIT ?",
        (f'"{phrase}"', version, MAX_CHUNKS),
    )
    pattern = re.compile(
        r"^\s{0,40}(?:self\.)?" + re.escape(name) + r"\s{0,4}=\s{0,4}([^=].{0,200})$"
    )
    out: list[tuple[str, int, ast.expr]] = []
    seen: set[tuple[str, int]] = set()
    for row in rows:
        for i, line in enumerate((row["text"] or "").splitlines()):
            m = pattern.match(line)
            where = (row["path"], row["start_line"] + i)
            if m is None or where in seen:
                continue
            seen.add(where)
            try:
                rhs = ast.parse(m.group(1).split("#", 1)[0].strip(), mode="eval").body
            except SyntaxError:
                continue
            if isinstance(rhs, ast.BinOp) and _arithmetic(rhs):
                out.append((row["path"], row["start_line"] + i, rhs))
            if len(out) >= MAX_ASSIGNMENTS:
                return out
    return out


def _arithmetic(node: ast.expr) -> bool:
    """Only ``+ - * / // %`` of names, ``obj.field`` and integer constants."""
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, _ARITH) and _arithmetic(node.left) and _arithmetic(node.right)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    return isinstance(node, ast.Name) or (
        isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
    )


def _cite(store: Store, version: str, path: str, line: int) -> str:
    text = store.file_lines(version, path, line, line)
    return text[0].strip() if text else ""


def formula_for(
    store: Store, version: str, name: str, *, holder: bool = False
) -> DerivedTrace | None:
    """``name`` as arithmetic of flags (see above; cached per release). With ``holder``,
    a bare operand that is no flag is the assigning object's own value
    (``fused_moe.intermediate_size``); without it every operand must be a flag."""
    if not _NAME.fullmatch(name):
        return None
    return cached(
        release_key(store, version, f"params:formula:{name}:{holder}"),
        lambda: _formula(store, version, name, holder),
    )


def _formula(store: Store, version: str, name: str, holder: bool) -> DerivedTrace | None:
    attrs = server_args_attrs(store, version)
    votes: Counter[str] = Counter()
    found: dict[str, DerivedTrace] = {}
    for path, line, rhs in _assignments(store, version, name):
        steps: list[FlagTrace] = [
            FlagTrace(
                name,
                ast.unparse(rhs),
                f"{version}:{path}:{line}",
                _cite(store, version, path, line),
            )
        ]
        owner: str | None = None
        if holder:
            fns = store.functions_at(version, path, line)
            owner = _holder(fns[0]["class_name"]) if fns and fns[0].get("class_name") else None

        def leaf(
            node: ast.expr, owner: str | None = owner, steps: list[FlagTrace] = steps
        ) -> ast.expr | None:
            if isinstance(node, ast.Constant):
                return node
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id != "self"
            ):
                if node.value.id in DEFAULT_ARG_OBJECTS and node.attr in attrs:
                    return ast.parse(f"server_args.{node.attr}", mode="eval").body
                return None
            field = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else None
            )
            if field is None or field == name:
                return None
            trace = flag_for(store, version, field)
            if trace is not None:
                steps.append(trace)
                return ast.parse(f"server_args.{trace.attr}", mode="eval").body
            if isinstance(node, ast.Attribute) and holder:  # a field computed elsewhere
                inner = formula_for(store, version, field)
                if inner is not None:
                    steps.extend(inner.steps)
                    return ast.parse(inner.expr, mode="eval").body
                return None
            if isinstance(node, ast.Name) and owner is not None:
                return ast.parse(f"{owner}.{field}", mode="eval").body
            return None

        expr = _resolve(rhs, leaf)
        if expr is None or "server_args." not in (text := ast.unparse(expr)):
            continue
        votes[text] += 1 if "/test" in path or "bench" in path else 10
        found.setdefault(
            text, DerivedTrace(name, text, tuple(t for t in steps if t.how != "declared"))
        )
    if not votes:
        return None
    return found[max(votes, key=lambda t: (votes[t], t.count("server_args."), t))]


def _holder(class_name: str) -> str:
    """``fused_moe`` of ``FusedMoE``, ``model_config`` of ``ModelConfig``: the object whose
    own value an operand is."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z][a-z])", "_", class_name).lower()


def _resolve(node: ast.expr, leaf: Callable[[ast.expr], ast.expr | None]) -> ast.expr | None:
    """``node`` with each operand replaced by ``leaf(operand)`` (None when one fails)."""
    if isinstance(node, ast.BinOp):
        left, right = _resolve(node.left, leaf), _resolve(node.right, leaf)
        if left is None or right is None:
            return None
        return ast.BinOp(left, node.op, right)
    return leaf(node)


def derived_params(
    store: Store, version: str, fn: dict[str, Any] | None, path: str
) -> dict[str, DerivedTrace]:
    """The parameters of ``fn`` (past argument validation) that no flag is passed as but
    SGLang computes from flags where it builds them (:func:`formula_for`; cached)."""
    if fn is None or path.startswith(chain.VALIDATION_PATHS):
        return {}

    def build() -> dict[str, DerivedTrace]:
        traced = traced_params(store, version, fn, path)
        out: dict[str, DerivedTrace] = {}
        for name in _parameters(store, version, fn):
            if name in traced:
                continue
            d = formula_for(store, version, name, holder=True)
            if d is not None:
                out[name] = d
        return out

    return cached(
        release_key(store, version, f"params:derived:{fn['path']}:{fn['start_line']}"), build
    )
