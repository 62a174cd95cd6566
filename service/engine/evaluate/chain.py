"""The validation chain of a release: order, call-site guards and earlier writes.

SGLang validates in a fixed order: ``ServerArgs.__post_init__`` calls its
``_handle_*`` methods one after another (up to 0.5.18), and from 0.5.19
``run_resolution_pipeline`` runs hooks through ``run_hook(fn, server_args)``.
A check only sees the values that earlier steps wrote, so we need:

* :func:`validation_order` — the rank of each step, read from the dispatcher
  (a function run through :data:`STEP_RUNNERS` counts as called there), then the
  :data:`LATE_STEPS` the launch runs next (``check_server_args``);
  :func:`dispatcher_position` places a dispatcher's own lines among its steps
  (0.4.x validates in ``__post_init__`` itself);
* :func:`call_site_guards` — the conditions under which a function is called
  (``_handle_eagle_family`` runs only for EAGLE-family algorithms);
* :func:`earlier_writes` — the writes of an attribute that run before a check,
  each with its guards, from the structured index.

Everything is read from the KB: call sites as ingest stored them, a single
function's body with Python's ``ast``; nothing is parsed with tree-sitter and
nothing is executed.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field
from typing import Any

from kb.code_types import Check, Guard
from kb.store import VALIDATION_PREFIXES, Store
from service.engine.cache import cached, release_key

#: Dispatchers whose call order is the validation order.
DISPATCHERS: tuple[tuple[str, str], ...] = (
    ("sglang/srt/server_args.py", "ServerArgs.__post_init__"),
    ("sglang/srt/arg_groups/pipeline.py", "run_resolution_pipeline"),
    ("sglang/srt/server_args.py", "ServerArgs.resolve_once"),
)
VALIDATION_PATHS = VALIDATION_PREFIXES
#: Steps the launch runs on the validated arguments after the dispatchers, before any
#: process starts (every release's ``entrypoints/engine.py``: ``server_args.check_server_args()``).
LATE_STEPS: tuple[str, ...] = ("check_server_args",)
#: Calls that run the function passed as an argument (its position): a pipeline step
#: ``run_hook(fn, server_args)``, a post-process pass ``run_post_process_pass(server_args,
#: fn)`` (its returned dict is declared) and a plugin resolver ``record_foreign_defaults``.
STEP_RUNNERS: dict[str, int] = {
    "run_hook": 0,
    "run_post_process_pass": 1,
    "record_foreign_defaults": 2,
}
#: A parsed function definition (``def`` or ``async def``: both have the same fields).
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def function_source(store: Store, version: str, fn: dict[str, Any]) -> str:
    lines = store.file_lines(version, fn["path"], fn["start_line"], fn["end_line"])
    return textwrap.dedent("\n".join(lines))


def function_ast(store: Store, version: str, fn: dict[str, Any]) -> FunctionNode | None:
    """The parsed function (cached; callers must not mutate it)."""

    def build() -> FunctionNode | None:
        try:
            mod = ast.parse(function_source(store, version, fn))
        except SyntaxError:
            return None
        node = mod.body[0] if mod.body else None
        return node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None

    return cached(release_key(store, version, f"ast:{fn['path']}:{fn['start_line']}"), build)


def _calls_with_nodes(node: ast.AST) -> list[tuple[ast.Call, str]]:
    """Calls in ``node`` with the called name (``self.f()``, ``f(x)``, ``run_hook(f, x)``)."""
    out: list[tuple[ast.Call, str]] = []
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        func = sub.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
        ):
            out.append((sub, func.attr))
        elif isinstance(func, ast.Name):
            at = STEP_RUNNERS.get(func.id)
            step = sub.args[at] if at is not None and len(sub.args) > at else None
            if isinstance(step, ast.Name):
                out.append((sub, step.id))
            else:
                out.append((sub, func.id))
    return out


def _called_names(node: ast.AST) -> list[str]:
    """Names of the functions called in ``node``, in source order."""
    calls = sorted(_calls_with_nodes(node), key=lambda c: (c[0].lineno, c[0].col_offset))
    return [name for _, name in calls]


def validation_order(store: Store, version: str) -> dict[str, float]:
    """Function name -> rank in the validation chain (lower runs earlier).

    Steps the dispatcher calls directly get integer ranks; functions they call
    in turn get the caller's rank plus a fraction (one level deep).
    """

    def build() -> dict[str, float]:
        ranks: dict[str, float] = {}
        for path, qualname in DISPATCHERS:
            fn = store.function(version, qualname, path)
            if fn is None:
                continue
            node = function_ast(store, version, fn)
            if node is None:
                continue
            for name in _called_names(node):
                ranks.setdefault(name, float(len(ranks)))
        for name in LATE_STEPS:
            ranks.setdefault(name, float(len(ranks)))
        # one level below each step
        for name, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            for row in store.functions_named(version, name):
                if not row["path"].startswith(VALIDATION_PATHS):
                    continue
                node = function_ast(store, version, dict(row))
                if node is None:
                    continue
                for i, callee in enumerate(_called_names(node)):
                    ranks.setdefault(callee, rank + (i + 1) / 1000.0)
        return ranks

    return cached(release_key(store, version, "order"), build)


def dispatcher_position(
    store: Store, version: str, qualname: str, path: str, line: int
) -> float | None:
    """Where a line of a dispatcher's own body runs among its steps: half a rank before the
    first step it calls after ``line`` (after its last step when it calls none later).
    ``None`` when ``qualname`` in ``path`` is not a dispatcher or calls no ranked step."""
    if (path, qualname) not in DISPATCHERS:
        return None
    fn = store.function(version, qualname, path)
    node = function_ast(store, version, fn) if fn is not None else None
    if fn is None or node is None:
        return None
    order = validation_order(store, version)
    steps = [
        (fn["start_line"] + call.lineno - 1, order[name])
        for call, name in _calls_with_nodes(node)
        if name in order and order[name] == int(order[name])
    ]
    if not steps:
        return None
    later = [rank for at, rank in steps if at > line]
    return min(later) - 0.5 if later else max(rank for _, rank in steps) + 0.5


def rank_of(store: Store, version: str, qualname: str) -> float | None:
    name = qualname.rsplit(".", 1)[-1]
    return validation_order(store, version).get(name)


@dataclass
class CallSite:
    path: str
    caller: str
    line: int
    guards: list[Guard] = field(default_factory=list)


def call_site_guards(store: Store, version: str, qualname: str, path: str) -> list[CallSite]:
    """Where ``qualname`` is called in ``path`` (its module), with each call's guards,
    in source order (from the ``calls`` rows ingest stored). A function called from no
    other function of its module, and defined once in the validation files, is looked for
    in the other validation files (0.5.23's ``model_hook.py`` calls
    ``apply_deepseek_v4_defaults`` of ``deepseek_v4_hook.py`` only ``if model_arch in
    ["DeepseekV4ForCausalLM"]``), unless it is a step a dispatcher runs or a late step."""
    name = qualname.rsplit(".", 1)[-1]

    def build() -> list[CallSite]:
        rows = [
            row
            for row in store.calls(version, path, name)
            if row["caller"].rsplit(".", 1)[-1] != name  # not recursion
        ]
        if not rows and name not in LATE_STEPS and _defined_once(store, version, name):
            rows = [
                row
                for row in store.calls(version, None, name)
                if row["path"] != path
                and row["path"].startswith(VALIDATION_PATHS)
                and row["caller"].rsplit(".", 1)[-1] != name
            ]
            if any((r["path"], r["caller"]) in DISPATCHERS for r in rows):
                rows = []  # a step of the validation order: its dispatcher runs it
        return [
            CallSite(
                row["path"], row["caller"], row["line"], [Guard.from_dict(g) for g in row["guards"]]
            )
            for row in rows
        ]

    return cached(release_key(store, version, f"calls:{path}:{name}"), build)


def _defined_once(store: Store, version: str, name: str) -> bool:
    """Whether one function of the validation files has this name (a call by the name
    elsewhere then runs it)."""
    rows = store.functions_named(version, name)
    return sum(1 for r in rows if r["path"].startswith(VALIDATION_PATHS)) == 1


@dataclass
class Write:
    attr: str
    path: str
    function: str
    line: int
    kind: str
    value: str | None
    guards: list[dict[str, Any]]
    rank: float | None

    @property
    def citation(self) -> str:
        return f"{self.path}:{self.line}"


def earlier_writes(store: Store, version: str, attr: str, check: Check) -> list[Write]:
    """Writes of ``attr`` in the validation files that run before ``check``.

    "Before" means an earlier step of the validation chain, or the same
    function at an earlier line. Writes whose order is unknown are returned
    with ``rank=None`` so callers can report them as "may be changed".
    """
    return cached(
        release_key(store, version, f"writes:{check.id}:{attr}"),
        lambda: _earlier_writes(store, version, attr, check),
    )


def _writing_refs(store: Store, version: str, attr: str) -> list[dict[str, Any]]:
    """The refs that write, declare or return ``attr`` (cached per release and attribute:
    the writes of every check share their rows; callers must not mutate them)."""
    return cached(
        release_key(store, version, f"writing-refs:{attr}"),
        lambda: store.refs(version, attr, kinds=("write", "declare", "return_dict")),
    )


def _earlier_writes(store: Store, version: str, attr: str, check: Check) -> list[Write]:
    check_rank = rank_of(store, version, check.function)
    out: list[Write] = []
    for ref in _writing_refs(store, version, attr):
        if not ref["path"].startswith(VALIDATION_PATHS):
            continue
        rank = rank_of(store, version, ref["function"])
        same_fn = ref["function"] == check.function and ref["path"] == check.path
        if same_fn:
            if ref["line"] >= check.start_line:
                continue
        elif rank is not None and check_rank is not None and rank >= check_rank:
            continue
        elif rank is None and check_rank is not None:
            pass  # unknown order: keep, flagged by rank None
        out.append(
            Write(
                attr,
                ref["path"],
                ref["function"],
                ref["line"],
                ref["kind"],
                ref["value"],
                ref["guards"],
                rank if not same_fn else check_rank,
            )
        )
    out.sort(key=lambda w: (w.rank if w.rank is not None else -1.0, w.line))
    return out


def later_writes(store: Store, version: str, attr: str, check: Check) -> list[Write]:
    """Writes of ``attr`` at or after ``check`` in its own function (e.g. auto-chosen values)."""
    out: list[Write] = []
    for ref in _writing_refs(store, version, attr):
        if (
            ref["kind"] in ("write", "declare")
            and ref["function"] == check.function
            and ref["path"] == check.path
            and ref["line"] > check.end_line
        ):
            out.append(
                Write(
                    attr,
                    ref["path"],
                    ref["function"],
                    ref["line"],
                    ref["kind"],
                    ref["value"],
                    ref["guards"],
                    None,
                )
            )
    return out
