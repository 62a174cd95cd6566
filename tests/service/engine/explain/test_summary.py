"""The one-line summary's reasons (``service.engine.explain.deterministic``)."""

from __future__ import annotations

from service.engine.answer import AtomInput, AtomOut
from service.engine.explain.deterministic import failing_inputs


def _atom(*inputs: AtomInput, role: str = "guard", failing: bool = True) -> AtomOut:
    return AtomOut(text="…", role=role, value="false", failing=failing, inputs=list(inputs))


def test_a_flag_the_user_set_that_sglang_rewrote_leads() -> None:
    """The user's --enable-dp-attention, set back to False by SGLang before the check, is
    the reason the summary gives first, said as set by SGLang; the same write of a flag
    the user did not set is an ordinary input, and an atom that did not fail gives none."""
    tbo = AtomInput(name="enable_two_batch_overlap", value=True, source="flag", detail="")
    dp = AtomInput(
        name="enable_dp_attention", value=False, source="write", detail="overrides.py:1308"
    )
    skipped = AtomInput(name="tp_size", value=4, source="flag", detail="")
    atoms = [_atom(tbo), _atom(dp), _atom(skipped, failing=False)]
    assert failing_inputs(atoms, {"enable_two_batch_overlap", "enable_dp_attention"}) == [
        "--enable-dp-attention set to False by SGLang",
        "--enable-two-batch-overlap=True",
    ]
    assert failing_inputs(atoms, {"enable_two_batch_overlap"}) == [
        "--enable-two-batch-overlap=True",
        "enable_dp_attention=False",
    ]


def test_a_guard_at_its_default_is_no_reason() -> None:
    """0.5.23's ``if cfg.ep_join_mode != "scale": assert (tp * pp) % nnodes == 0`` posted
    alone: the guard holds with the default ``None``, but that let the check run; it did
    not make it fire. A test's input at its default is a reason (its value is what failed),
    and so is a guard's input the user set."""
    join = AtomInput(name="ep_join_mode", value=None, source="default", detail="")
    nnodes = AtomInput(name="nnodes", value=1, source="default", detail="")
    dp = AtomInput(name="enable_dp_attention", value=True, source="flag", detail="")
    assert failing_inputs([_atom(join)]) == []
    assert failing_inputs([_atom(join), _atom(dp)]) == ["--enable-dp-attention=True"]
    assert failing_inputs([_atom(join), _atom(nnodes, role="test")]) == ["--nnodes=1"]
