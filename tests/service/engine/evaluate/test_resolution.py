"""The 0.5.19+ resolution pipeline, evaluated statically (declarations, views, own tests).

Every case is found in the store (no hard-coded answer): a declaration read by a later
hook, a ``resolution_result`` range check, a raise whose own test compares one flag with
constants, and a check whose own test stays unknown.
"""

from __future__ import annotations

import ast

import pytest

from kb.catalogs import load_catalog
from kb.code_types import Check
from service.engine.evaluate import chain
from service.engine.evaluate.path_condition import base_attrs, evaluate_path, prepared_pieces
from service.engine.explain.evaluation import atoms_out, no_fix_reason, unknown_facts
from service.engine.expr.interpreter import UNKNOWN, Provenance, Value
from service.engine.flags.parse import parse_argv

RELEASE = "0.5.23"
MODEL = ["--model-path", "Qwen/Qwen3-8B"]


@pytest.fixture(scope="module")
def ctx(kb):  # the session KnowledgeBase fixture
    store = kb.store
    catalog = load_catalog(store, RELEASE)
    return store, catalog


def _attrs(catalog, argv: list[str]) -> dict[str, Value]:
    return base_attrs(catalog, parse_argv(argv, catalog))


def _pipeline_checks(store) -> list[Check]:
    return [c for c in store.checks(RELEASE) if c.path.startswith("sglang/srt/arg_groups/")]


def test_resolution_result_range_check_is_decided_and_explained_by_its_flag(ctx) -> None:
    store, catalog = ctx
    found = [
        c
        for c in _pipeline_checks(store)
        for g in c.guards[-1:]
        if "resolution_result(" in g["condition"] and g["polarity"]
    ]
    assert found, "a check guarded by a resolution_result read"
    check = found[0]
    field = ast.literal_eval(
        ast.parse(
            check.guards[-1]["condition"]
            .split("resolution_result(", 1)[1]
            .split(",", 1)[1]
            .split(")", 1)[0]
            .strip(),
            mode="eval",
        ).body
    )
    flag = catalog.by_attr()[field].flags[0]
    ev = evaluate_path(store, RELEASE, check, _attrs(catalog, [*MODEL, flag, "1.5"]), {})
    assert ev.test is not None and ev.test.holds is True
    assert field in ev.test_attrs
    atoms = atoms_out(ev)
    failing = {i.name for a in atoms if a.failing for i in a.inputs}
    assert failing == {field}  # not the earlier sibling checks' flags
    ok = evaluate_path(store, RELEASE, check, _attrs(catalog, [*MODEL, flag, "0.5"]), {})
    assert ok.test is not None and ok.test.holds is False


def _one_attr_range_checks(store) -> list[tuple[Check, str]]:
    """Raise checks of arg_groups whose own `if` compares one `cfg.X` with constants and
    that follow earlier sibling raises (whose flags must not explain it)."""
    out = []
    for c in _pipeline_checks(store):
        if c.kind != "raise" or not c.guards or not c.guards[-1]["polarity"]:
            continue
        if not any(g["kind"] == "early_exit" for g in c.guards):
            continue
        try:
            node = ast.parse(c.guards[-1]["condition"].strip(), mode="eval").body
        except SyntaxError:
            continue
        if not (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Gt | ast.Lt | ast.GtE | ast.LtE)
        ):
            continue
        left, right = node.left, node.comparators[0]
        if (
            isinstance(left, ast.Attribute)
            and getattr(left.value, "id", "") == "cfg"
            and isinstance(right, ast.Constant)
            and isinstance(right.value, int)
        ):
            out.append((c, left.attr))
    return out


def test_generated_range_check_is_explained_by_its_flag_only(ctx) -> None:
    store, catalog = ctx
    by_attr = catalog.by_attr()
    tried = 0
    for check, attr in _one_attr_range_checks(store):
        spec = by_attr.get(attr)
        if spec is None or spec.action not in (None, "store"):
            continue
        node = ast.parse(check.guards[-1]["condition"].strip(), mode="eval").body
        assert isinstance(node, ast.Compare)
        limit = node.comparators[0]
        assert isinstance(limit, ast.Constant)
        bound = limit.value
        value = bound + 1 if isinstance(node.ops[0], ast.Gt | ast.GtE) else bound - 1
        ev = evaluate_path(
            store, RELEASE, check, _attrs(catalog, [*MODEL, spec.flags[0], str(value)]), {}
        )
        if ev.fired is not True:
            continue  # another guard of this path does not hold in a plain launch
        tried += 1
        failing = {i.name for a in atoms_out(ev) if a.failing for i in a.inputs}
        assert attr in failing
        guard_only = {
            n for p in ev.parts if not p.explains for a in p.result.atoms for n, _, _ in a.inputs
        } - ev.test_attrs
        assert not failing & guard_only, (check.start_line, failing, guard_only)
    assert tried, "a generated range check fired"


def test_declared_value_read_by_a_later_hook_cites_the_declaration(ctx) -> None:
    store, catalog = ctx
    attrs = _attrs(catalog, MODEL)
    seen = 0
    for check in _pipeline_checks(store)[:400]:
        ev = evaluate_path(store, RELEASE, check, attrs, {})
        for part in ev.parts:
            for atom in part.result.atoms:
                for name, value, prov in atom.inputs:
                    if prov.kind != "write" or " declared by " not in prov.detail:
                        continue
                    seen += 1
                    cite = prov.detail.split(" at ", 1)[1].split(" because ", 1)[0]
                    rel, path, line = cite.rsplit(":", 2)
                    assert rel == RELEASE
                    text = "\n".join(store.file_lines(RELEASE, path, int(line), int(line)))
                    assert name in text  # the declaring keyword is on the cited line
                    assert value is not UNKNOWN
                    refs = [
                        r
                        for r in store.refs(RELEASE, name, kinds=("declare",))
                        if r["path"] == path and r["line"] == int(line)
                    ]
                    assert refs, prov.detail
        if seen >= 3:
            break
    assert seen, "a check reading a value an earlier hook declared"


def test_pass_run_by_run_post_process_pass_has_a_rank(ctx) -> None:
    store, _ = ctx
    order = chain.validation_order(store, RELEASE)
    passes = {
        r["callee"]
        for r in store.query(
            "SELECT callee FROM calls WHERE release = ? AND callee LIKE '\\_%' ESCAPE '\\'",
            (RELEASE,),
        )
    }
    returned = {
        r["function"]
        for r in store.query(
            "SELECT DISTINCT function FROM refs WHERE release = ? AND kind = 'return_dict' "
            "AND path LIKE 'sglang/srt/arg_groups/%'",
            (RELEASE,),
        )
    }
    ranked = [f for f in returned & passes if f in order]
    assert ranked


def test_unknown_own_test_is_named_with_what_settles_it(ctx) -> None:
    store, catalog = ctx
    attrs = _attrs(catalog, MODEL)
    for check in _pipeline_checks(store):
        texts, _ = prepared_pieces(store, RELEASE, check, frozenset())
        if not texts:
            continue
        ev = evaluate_path(store, RELEASE, check, attrs, {})
        if not ev.test_unknown or not ev.test.result.unknowns:
            continue
        if any(p.holds is False for p in ev.parts):
            continue
        unknowns = unknown_facts(ev, None, None, MODEL)
        assert unknowns[0].what in ev.test.result.unknowns
        assert "own test" in unknowns[0].why
        assert unknowns[0].settle
        reason = no_fix_reason(ev, check)
        assert "own test" in reason and unknowns[0].what in reason
        assert not any(a.failing for a in atoms_out(ev) if a.role == "test")
        return
    pytest.skip("no check with an undecided own test under a plain launch")


def test_a_conditionally_reassigned_local_is_a_ternary_not_the_last_write(store) -> None:
    # `x = a; if c: x = b` reaches a later line as `b if c else a`, never as `b` alone
    from service.engine.evaluate import source

    fn = next(
        f
        for f in (
            dict(r)
            for r in store.query(
                "SELECT * FROM functions WHERE release = ? AND name = 'handle_linear_attn_backend'",
                (RELEASE,),
            )
        )
        if f["path"].startswith("sglang/srt/arg_groups/")
    )
    node = chain.function_ast(store, RELEASE, fn)
    assert node is not None
    offset = fn["start_line"] - 1
    names = [
        (s.lineno + offset, s.targets[0].id)
        for s in ast.walk(node)
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)
    ]
    twice = {n for _, n in names if sum(1 for _, m in names if m == n) > 1}
    assert twice
    name = sorted(twice)[0]
    last = max(line for line, n in names if n == name)
    local = source.locals_before(
        store, RELEASE, fn, fn["end_line"] + 1 if last < fn["end_line"] else last + 1
    )
    if name in local:
        assert isinstance(local[name], ast.IfExp | ast.expr)
        texts = ast.unparse(local[name])
        last_value = next(
            ast.unparse(s.value)
            for s in ast.walk(node)
            if isinstance(s, ast.Assign)
            and isinstance(s.targets[0], ast.Name)
            and s.targets[0].id == name
            and s.lineno + offset == last
        )
        assert texts != last_value or " if " in texts


def test_provenance_of_a_plain_write_is_unchanged() -> None:
    from service.engine.evaluate.resolution import write_provenance

    w = chain.Write(
        "page_size", "sglang/srt/server_args.py", "ServerArgs._handle_x", 10, "write", "16", [], 1.0
    )
    assert write_provenance("0.5.9", w, 16, "always") == "set to 16 at sglang/srt/server_args.py:10"
    d = chain.Write(
        "page_size", "sglang/srt/arg_groups/x_hook.py", "handle_x", 12, "declare", "16", [], 1.0
    )
    assert write_provenance("0.5.23", d, 16, "cfg.a") == (
        "16 declared by handle_x at 0.5.23:sglang/srt/arg_groups/x_hook.py:12 because cfg.a"
    )
    assert Provenance("write", "x").kind == "write"
