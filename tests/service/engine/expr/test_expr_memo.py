"""Per-node memos of the expression layer: served only for the cached parse trees,
never for copies or caller-built nodes, and equal to the uncached answers."""

from __future__ import annotations

import ast
import copy

from kb.conditions import DEFAULT_ARG_OBJECTS, attr_chain, norm_text, to_node, unparse
from service.engine.expr.interpreter import Env, Provenance, Value, evaluate

TEXTS = [
    "self.speculative_eagle_topk is None or self.speculative_eagle_topk <= 1",
    "resolved_view(server_args).page_size in (16, 32) and is_sm100_supported()",
    "cfg.model_config.hf_config.architectures[0] == 'DeepseekV3ForCausalLM'",
    "getattr(self, 'tp_size', 1) % self.dp_size == 0",
]


def _all_nodes(text: str) -> list[ast.AST]:
    return list(ast.walk(to_node(text)))


def test_memoised_texts_equal_fresh_ones() -> None:
    for text in TEXTS:
        for node in _all_nodes(text):
            fresh = copy.deepcopy(node)
            for _ in range(2):  # the second time from the memo
                assert unparse(node) == ast.unparse(fresh)
                assert norm_text(node, DEFAULT_ARG_OBJECTS) == norm_text(fresh, DEFAULT_ARG_OBJECTS)
                assert attr_chain(node, DEFAULT_ARG_OBJECTS) == attr_chain(
                    fresh, DEFAULT_ARG_OBJECTS
                )


def test_copies_are_not_served_from_the_memo() -> None:
    node = to_node("self.page_size > 1")
    assert norm_text(node, DEFAULT_ARG_OBJECTS) == "args.page_size > 1"
    twin = copy.deepcopy(node)
    twin.left.attr = "tp_size"  # type: ignore[attr-defined]
    assert norm_text(twin, DEFAULT_ARG_OBJECTS) == "args.tp_size > 1"
    assert unparse(twin) == "self.tp_size > 1"
    assert norm_text(node, DEFAULT_ARG_OBJECTS) == "args.page_size > 1"


def test_attr_chain_hands_out_its_own_list() -> None:
    node = to_node("self.model_config.hf_config.architectures")
    first = attr_chain(node, DEFAULT_ARG_OBJECTS)
    assert first == (True, ["model_config", "hf_config", "architectures"])
    first[1].append("junk")
    assert attr_chain(node, DEFAULT_ARG_OBJECTS) == (
        True,
        ["model_config", "hf_config", "architectures"],
    )


def test_repeated_evaluation_gives_equal_results() -> None:
    env = Env(
        {
            "speculative_eagle_topk": Value(4, Provenance("flag", "--speculative-eagle-topk 4")),
            "page_size": Value(16, Provenance("default", "default 16")),
            "dp_size": Value(2, Provenance("flag", "--dp 2")),
        },
        {"is_sm100_supported()": Value(False, Provenance("fact", "rtx"))},
    )
    for text in TEXTS:
        assert evaluate(text, env) == evaluate(text, env)
