"""Tracing a value a check reads outside the server-args object to the flag that sets it."""

from __future__ import annotations

import pytest

from kb.code_types import Check
from service.engine.evaluate.params import flag_for, own_fields, rename_fields, traced_params


def _line(store, citation: str) -> str:
    release, path, line = citation.split(":")
    return store.file_lines(release, path, int(line), int(line))[0]


@pytest.mark.parametrize("release", ["0.5.5", "0.5.11", "0.5.23"])
def test_moe_ep_size_is_the_ep_size_flag_with_the_line_that_passes_it(store, release) -> None:
    trace = flag_for(store, release, "moe_ep_size")
    assert trace is not None and trace.attr == "ep_size"
    line = _line(store, trace.citation)
    assert "moe_ep_size" in line and "ep_size" in line and trace.how in line
    assert "/test" not in trace.citation and "bench" not in trace.citation


def test_a_flag_name_is_itself_cited_at_its_declaration(store) -> None:
    trace = flag_for(store, "0.5.23", "tp_size")
    assert trace is not None and (trace.attr, trace.how) == ("tp_size", "declared")
    assert "tp_size" in _line(store, trace.citation)


@pytest.mark.parametrize("name", ["weight_block_size_n", "model_config", "not an identifier!"])
def test_names_no_flag_sets_are_not_traced(store, name) -> None:
    assert flag_for(store, "0.5.23", name) is None


def test_parameters_of_a_start_up_function_are_traced(store) -> None:
    fn = next(
        f
        for f in store.query(
            "SELECT * FROM functions WHERE release = '0.5.23' AND name = "
            "'check_quantized_moe_compatibility' AND class_name IS NULL"
        )
    )
    traced = traced_params(store, "0.5.23", dict(fn), fn["path"])
    assert {n: t.attr for n, t in traced.items()} == {
        "tp_size": "tp_size",
        "moe_ep_size": "ep_size",
        "moe_dp_size": "moe_dp_size",
    }


def test_validation_functions_keep_their_parameters(store) -> None:
    fn = dict(
        next(
            iter(
                store.query(
                    "SELECT * FROM functions WHERE release = '0.5.23' AND path "
                    "LIKE 'sglang/srt/arg_groups/%' LIMIT 1"
                )
            )
        )
    )
    assert traced_params(store, "0.5.23", fn, fn["path"]) == {}


def _check_with(store, release: str, text: str) -> tuple[dict, Check]:
    check = next(c for c in store.checks(release) if text in (c.message or ""))
    fn = dict(store.functions_at(release, check.path, check.start_line)[0])
    return fn, check


def test_fields_of_a_runner_are_renamed_to_their_flag(store) -> None:
    fn, check = _check_with(store, "0.5.11", "For quantized MoE models")
    assert fn["class_name"] == "ModelRunner"
    assert (
        rename_fields(store, "0.5.11", fn, check, "self.tp_size % self.moe_ep_size != 0")
        == "self.tp_size % self.ep_size != 0"
    )


def test_a_field_the_function_assigns_is_the_objects_own(store) -> None:
    # ModelConfig._verify_quantization sets self.quantization from the checkpoint first
    fn, check = _check_with(store, "0.5.11", "Unknown quantization method")
    assert "quantization" in own_fields(store, "0.5.11", fn, check)
    assert (
        rename_fields(store, "0.5.11", fn, check, "self.quantization not in supported")
        == "model_config.quantization not in supported"
    )


def test_validation_checks_read_fields_as_written(store) -> None:
    check = next(c for c in store.checks("0.5.11", path="sglang/srt/server_args.py"))
    fn = dict(store.functions_at("0.5.11", check.path, check.start_line)[0])
    assert (
        rename_fields(store, "0.5.11", fn, check, "self.moe_ep_size > 1") == "self.moe_ep_size > 1"
    )
