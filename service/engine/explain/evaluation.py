"""An evaluated path condition in the answer's words: its atoms (with their inputs and
whether each pushes the check towards firing), what stayed unknown and what would settle
it, whether the check's own test was decided, and why no flag fix is verified.

Helpers of the located answer (:mod:`service.engine.triage.assemble`); they read a
:class:`~service.engine.evaluate.path_condition.PathEvaluation`.
"""

from __future__ import annotations

from kb.code_types import Check
from service.engine.answer import AtomInput, AtomOut, UnknownFact, jsonable, tri
from service.engine.evaluate.path_condition import PathEvaluation
from service.engine.expr.interpreter import UNKNOWN

__all__ = ["atoms_out", "guards_text", "no_fix_reason", "undecided_reason", "unknown_facts"]

_HW_FACT_HINTS = ("sm", "cuda", "hip", "npu", "blackwell", "hopper", "device", "gpu", "xpu", "cpu")


def atoms_out(ev: PathEvaluation) -> list[AtomOut]:
    """Every atom of every piece of ``ev``, with its value, its inputs and whether it
    pushes the check towards firing."""
    out: list[AtomOut] = []
    for piece, part in enumerate(ev.parts):
        # an atom "fails" when its value pushes the piece towards firing (never one of a
        # sibling check the path passed: that is not why this one fired)
        for atom, failing in zip(part.result.atoms, part.atoms_failing(), strict=True):
            out.append(
                AtomOut(
                    text=atom.text,
                    role=part.role,
                    value=tri(atom.value),
                    failing=failing,
                    inputs=[
                        AtomInput(name=n, value=jsonable(v), source=p.kind, detail=p.detail)
                        for n, v, p in atom.inputs
                    ],
                    piece=piece,
                )
            )
    return out


def unknown_facts(
    ev: PathEvaluation, hw: str | None, arch: str | None, argv: list[str]
) -> list[UnknownFact]:
    """What the evaluation could not decide, the check's own test first, each with what
    would settle it (a flag's value, a declaring hook's result, a fact)."""
    out: list[UnknownFact] = []
    seen: set[str] = set()
    test = ev.test
    parts = ([test] if test is not None else []) + [p for p in ev.parts if p is not test]
    for part in parts:
        own = part is test
        for name in part.result.unknowns:
            if name in seen:
                continue
            seen.add(name)
            prov = next((p for a in part.result.atoms for n, _, p in a.inputs if n == name), None)
            low = name.lower()
            if prov is not None and prov.kind == "write":
                settle = (
                    f"the value SGLang gives it before this check ({prov.detail}); "
                    "a replay of the release's validation with these flags"
                )
            elif any(h in low for h in _HW_FACT_HINTS) and hw is None:
                settle = "the hardware profile, e.g. --hardware rtx-pro-6000-x8"
            elif "arch" in low or "model_config" in low or "hf_config" in low:
                settle = "the model architecture, e.g. --model-arch DeepseekV3ForCausalLM"
            elif not argv:
                settle = "the full launch command"
            elif name.isidentifier() and name in ev.attrs:
                settle = (
                    f"the value of --{name.replace('_', '-')} (set it explicitly), "
                    "or a replay of the release's validation with these flags"
                )
            else:
                settle = "a replay of the release's validation with these flags"
            why = (
                f"the check's own test `{part.condition[:80]}` needs it"
                if own
                else f"`{part.condition[:80]}` needs it"
            )
            out.append(UnknownFact(what=name, why=why, settle=settle))
    return out


def no_fix_reason(ev: PathEvaluation, check: Check, undecided: bool = False) -> str:
    """Why no fix is verified; ``undecided``: candidates are listed for replay to decide.
    When the check's own test is undecided, it says so and names what the test needs."""
    test_needs = ""
    test = ev.test
    if ev.test_unknown and test is not None:
        names = ", ".join(f"`{n}`" for n in test.result.unknowns[:3]) or "an unknown input"
        test_needs = f" (the check's own test `{test.condition[:80]}` needs {names})"
    if undecided:
        return (
            "no flag edit could be shown statically to make this check pass; the "
            "candidates listed are undecided (some inputs are unknown) and need a replay"
            + test_needs
        )
    if test_needs:
        return (
            "no flag edit could be shown to make this check pass: its own test could not "
            f"be decided{test_needs}; see unknowns"
        )
    if ev.fired is UNKNOWN:
        return (
            "no flag edit could be shown to make this check pass, because some of its "
            "inputs are unknown (see unknowns)"
        )
    if not ev.attrs:
        return (
            "the check reads no launch flag: it depends on the model, hardware or environment, "
            "so no flag change avoids it; an upgrade or a different model/hardware may"
        )
    return "no edit of the flags this check reads makes it pass; the validator or an upgrade is the fix"


def undecided_reason(ev: PathEvaluation) -> str | None:
    """A sentence saying the check's own test was not decided and what it needs (None when
    it was decided)."""
    test = ev.test
    if not ev.test_unknown or test is None:
        return None
    names = ", ".join(f"`{n}`" for n in test.result.unknowns[:3]) or "an unknown input"
    return (
        f"the check's own test `{test.condition[:120]}` could not be evaluated: it "
        f"needs {names}. Nothing above is claimed as the reason it fired."
    )


def guards_text(check: Check) -> str:
    """``check``'s guards joined with ``and`` (a negated guard as ``not (...)``): its
    condition, for a check with no test of its own."""
    return " and ".join(
        g["condition"] if g["polarity"] else f"not ({g['condition']})" for g in check.guards
    )
