"""Neighbour re-checks (``service.engine.fixes.neighbours``): a fix is said to make another
check fire only when that check fires with SGLang's earlier writes folded in."""

from __future__ import annotations

from kb.catalogs import load_catalog
from service.engine.evaluate.path_condition import evaluate_path
from service.engine.expr.interpreter import Provenance, Value
from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.neighbours import recheck_neighbours
from service.engine.rules.card_env import facts_for
from service.engine.rules.checker import prepare_flags

RELEASE = "0.5.23"
HOOK = "sglang/srt/arg_groups/speculative_hook.py"


def test_a_value_sglang_resolves_first_is_no_trip(kb) -> None:
    """``--speculative-use-block-verification`` without an algorithm (0.5.23): setting
    ``--speculative-algorithm EAGLE`` reaches ``if cfg.device != "cuda": raise``. As given,
    ``device`` is None, so that check "fires"; SGLang sets ``device`` from the machine
    before it, so the re-check does not claim it, and leaves it undecided."""
    store = kb.store
    checks = store.checks(RELEASE, path=HOOK)
    check = next(c for c in checks if "only supports EAGLE / EAGLE3" in (c.message or ""))
    device = next(c for c in checks if "only supports CUDA or ROCm" in (c.message or ""))
    argv = ["--model-path", "/models/m", "--speculative-use-block-verification"]
    attrs, _ = prepare_flags(store, RELEASE, argv)
    facts = facts_for("a100-x8", "LlamaForCausalLM")
    catalog = load_catalog(store, RELEASE)
    edited = {**attrs, "speculative_algorithm": Value("EAGLE", Provenance("flag", "EAGLE"))}
    raw = evaluate_path(store, RELEASE, device, edited, facts, apply_writes=False)
    assert raw.fired is True  # on the value as given
    verdict = Verdict(Edit(set={"speculative_algorithm": "EAGLE"}), fixes_check=True)
    recheck_neighbours(store, RELEASE, check, verdict, attrs, facts, catalog)
    assert all(t["id"] != device.id for t in verdict.trips), verdict.trips
    assert verdict.unknown_neighbours >= 1
