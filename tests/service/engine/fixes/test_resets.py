"""Flags SGLang resets before the check (``service.engine.fixes.resets``).

0.5.21's resolution sets ``enable_dp_attention`` back to False when ``dp_size == 1``
(``_data_parallelism_defaults``), and ``check_two_batch_overlap`` then refuses two-batch
overlap without attention DP, although the user passed ``--enable-dp-attention``. The
check, its message and the write are the release's own, read from the KB.
"""

from __future__ import annotations

import ast
import shlex

import pytest

from evals.families.messages import literal_text
from kb.catalogs import load_catalog
from service.engine.evaluate.fold import fold_plan
from service.engine.fixes.resets import ORIGIN
from service.engine.triage import Engine

RELEASE = "0.5.21"
FUNCTION = "check_two_batch_overlap"


@pytest.fixture(scope="module")
def case(kb):
    if RELEASE not in {r["version"] for r in kb.store.releases()}:
        pytest.skip(f"{RELEASE} is not in the test KB")
    check = next(c for c in kb.store.checks(RELEASE) if c.function.endswith(FUNCTION))
    message = literal_text(check.message or "") or ""
    log = (
        "Traceback (most recent call last):\n"
        f'  File "/usr/lib/python3/site-packages/sglang/{check.path.removeprefix("sglang/")}", '
        f"line {check.start_line}, in {FUNCTION}\n"
        f"ValueError: {message}\n"
    )
    return Engine(kb), check, log


def _triage(engine: Engine, log: str, command: str):
    return engine.triage({"log": log, "command": command}, release=RELEASE)


def test_a_flag_sglang_resets_is_kept_by_failing_the_reset(kb, case) -> None:
    engine, check, log = case
    command = "python -m sglang.launch_server --model-path m --tp-size 4 "
    command += "--enable-two-batch-overlap --enable-dp-attention"
    result = _triage(engine, log, command)
    best = next(f for f in result.fixes if f.recommended)
    assert best.origin.startswith(ORIGIN + "--enable-dp-attention"), best.origin
    assert best.fixes_check == "true" and not best.remove
    argv = shlex.split(best.command)
    assert "--enable-dp-attention" in argv and "--enable-two-batch-overlap" in argv
    # the flag set is one the reset's guard compares, cited by path and line
    ((flag, value),) = best.set.items()
    catalog = load_catalog(kb.store, RELEASE)
    attr = catalog.by_flag()[flag].attr
    plan, _ = fold_plan(kb.store, RELEASE, check, frozenset({"enable_dp_attention"}))
    resets = [
        (w, pw)
        for w, pw in plan
        if w.attr == "enable_dp_attention" and f"{w.path}:{w.line}" in best.origin
    ]
    assert resets
    guards = [g for w, pw in resets for g, _ in pw.all_guards(False)]
    compared = [
        side.value
        for g in guards
        for node in ast.walk(ast.parse(g, mode="eval"))
        if isinstance(node, ast.Compare)
        and any(
            isinstance(s, ast.Attribute) and s.attr == attr for s in [node.left, *node.comparators]
        )
        for side in [node.left, *node.comparators]
        if isinstance(side, ast.Constant)
    ]
    assert compared and value not in compared  # the guard's comparison now fails


def test_no_reset_fix_for_a_flag_the_user_did_not_set(case) -> None:
    engine, _check, log = case
    command = "python -m sglang.launch_server --model-path m --tp-size 4 --enable-two-batch-overlap"
    result = _triage(engine, log, command)
    assert result.fixes
    assert not any(f.origin.startswith(ORIGIN) for f in result.fixes)
