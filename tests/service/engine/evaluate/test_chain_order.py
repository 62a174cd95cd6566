"""The validation order across layouts: a dispatcher's own checks (0.4.x validates in
``__post_init__`` itself) and the launch's late step, ``check_server_args``."""

from __future__ import annotations

import pytest

from evals.check_order import validation_positions
from service.engine.evaluate import chain

OLD = "0.4.10.post2"
SA = "sglang/srt/server_args.py"


@pytest.mark.parametrize("release", [OLD, "0.5.9", "0.5.23"])
def test_check_server_args_runs_after_every_dispatched_step(kb, release) -> None:
    order = chain.validation_order(kb.store, release)
    late = order["check_server_args"]
    steps = [r for name, r in order.items() if r == int(r) and name not in chain.LATE_STEPS]
    assert late == int(late) and late > max(steps)
    # what it calls is placed below it (0.5.9: the LoRA checks)
    assert late < order["check_lora_server_args"] < late + 1


def test_a_dispatchers_own_checks_sit_between_its_steps_by_line(kb) -> None:
    store = kb.store
    positions = validation_positions(store, OLD)
    checks = {c.id: c for c in store.checks(OLD)}
    own = sorted(
        (checks[i] for i in positions if checks[i].function == "ServerArgs.__post_init__"),
        key=lambda c: c.start_line,
    )
    assert len(own) >= 5
    # source order inside __post_init__ is validation order
    assert [positions[c.id] for c in own] == sorted(positions[c.id] for c in own)
    # a step __post_init__ calls at line L runs after its own checks above L, before those below
    fn = store.function(OLD, "ServerArgs.__post_init__", SA)
    node = chain.function_ast(store, OLD, fn)
    order = chain.validation_order(store, OLD)
    step_line = {
        name: fn["start_line"] + call.lineno - 1
        for call, name in chain._calls_with_nodes(node)
        if name == "validate_disagg_tp_size"
    }["validate_disagg_tp_size"]
    rank = order["validate_disagg_tp_size"]
    for c in own:
        assert (positions[c.id][0] < rank) == (c.start_line < step_line), c.start_line
    # and check_server_args's checks come after all of them
    late = [positions[i] for i in positions if checks[i].function == "ServerArgs.check_server_args"]
    assert late and min(late) > max(positions[c.id] for c in own)


def test_a_hook_called_from_another_file_carries_that_call_sites_guards(kb) -> None:
    """0.5.23's ``model_hook.py`` calls ``apply_deepseek_v4_defaults`` (of
    ``deepseek_v4_hook.py``) only ``if model_arch in ["DeepseekV4ForCausalLM"]``: its
    checks cannot fire for a Llama model (a neighbour re-check once said they would), and
    for DeepSeek-V4 they do. A dispatcher's steps keep no such guard: the dispatcher
    runs them."""
    from service.engine.evaluate.path_condition import evaluate_path
    from service.engine.rules.card_env import facts_for
    from service.engine.rules.checker import prepare_flags

    store, release = kb.store, "0.5.23"
    hook = "sglang/srt/arg_groups/deepseek_v4_hook.py"
    sites = chain.call_site_guards(store, release, "apply_deepseek_v4_defaults", hook)
    assert sites and sites[0].path == "sglang/srt/arg_groups/model_hook.py"
    assert any("DeepseekV4ForCausalLM" in g.condition for g in sites[0].guards)
    check = next(
        c
        for c in store.checks(release, path=hook)
        if "Only EAGLE and DSPARK speculative algorithms" in (c.message or "")
    )
    attrs, _ = prepare_flags(
        store, release, ["--model-path", "/models/m", "--speculative-algorithm", "NGRAM"]
    )
    llama = evaluate_path(store, release, check, attrs, facts_for("a100-x8", "LlamaForCausalLM"))
    assert llama.fired is False
    v4 = evaluate_path(store, release, check, attrs, facts_for("b200-x8", "DeepseekV4ForCausalLM"))
    assert v4.fired is not False
    step = "sglang/srt/arg_groups/kv_cache_hook.py"
    assert chain.call_site_guards(store, release, "handle_kv4_compatibility", step) == []
