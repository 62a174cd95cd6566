"""Short texts the front ends show for a fix and an answer, shared so they all say the same.

* :func:`edit_lines` — a fix's edit, one line each (``+ --speculative-num-steps 3``,
  ``- --dp 3``): :attr:`FixOut.edits` when the engine filled it, else derived from
  ``set``/``remove`` (answers stored before ``edits`` existed);
* :func:`command_note` — what to show in place of a fix's command that is not the user's
  whole command (the log showed none); :func:`command_markdown` — either, fenced;
* :func:`fix_search_line` — the replay-backed fix search in one line;
* :func:`model_facts_line` — the checkpoint facts the answer used, compactly;
* :func:`hardware_line` — the hardware profile used and where it came from;
* :func:`upgrade_lines` — upgrading as the fix: what to install, why, what is unchecked.
"""

from __future__ import annotations

from service.engine.answer import (
    FixOut,
    FixSearch,
    HardwareSource,
    ModelFact,
    PrintedValue,
    UpgradeFix,
)


def _value_text(value: object) -> str:
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return str(value)


def edit_lines(fix: FixOut) -> list[str]:
    """The fix's edit lines; derived from ``set``/``remove`` when ``edits`` is empty
    (a flag set to ``True`` is shown without a value, as a switch is typed)."""
    if fix.edits:
        return list(fix.edits)
    lines = [f"- {flag}" for flag in fix.remove]
    for flag, value in fix.set.items():
        lines.append(f"+ {flag}" if value is True else f"+ {flag} {_value_text(value)}")
    return lines


def command_note(fix: FixOut) -> str | None:
    """None when ``fix.command`` is the user's whole command, changed (run it as it is);
    else the sentence a front end shows in its place: the log showed no full launch
    command, so the change is to be made in the user's own (``command``, quoted when the
    log showed flags besides those the fix sets, holds only those flags, changed)."""
    if fix.command_complete:
        return None
    note = "The log shows no full launch command: make the change above in yours"
    # the flags the log did show, when there are any besides those the fix sets
    shown = [t for t in fix.argv if t.startswith("-") and t.split("=", 1)[0] not in fix.set]
    return f"{note} (the flags the log showed, changed: {fix.command})" if shown else f"{note}."


def command_markdown(fix: FixOut, indent: str = "") -> str:
    """The fix's command as a fenced block (each line indented by ``indent``); when it is
    not the user's whole command, the fix's edit lines fenced instead, then
    :func:`command_note`."""
    note = command_note(fix)
    body = [fix.command] if note is None else edit_lines(fix)
    fenced = "\n".join(f"{indent}{line}" for line in ["```", *body, "```"])
    return fenced if note is None else f"{fenced}\n\n{indent}{note}"


def fix_search_line(search: FixSearch | None) -> str | None:
    """``"Fix search: verified by replay on 0.5.11 with rtx-pro-6000-x8 (3 replayed, 41 s)"``;
    None when there was no search. The detail is shown as given; the status word is
    added in front unless the detail already starts with it."""
    if search is None:
        return None
    status = search.status
    detail = search.detail.strip()
    text = (
        detail
        if detail.lower().startswith(status.lower())
        else (f"{status}: {detail}" if detail else status)
    )
    extra = [f"{search.candidates} replayed"]
    seconds = search.seconds
    if isinstance(seconds, int | float):
        extra.append(f"{seconds:.0f} s")
    return f"Fix search: {text}" + (f" ({', '.join(extra)})" if extra else "")


def model_facts_line(facts: list[ModelFact]) -> str | None:
    """``"Model: quantization=fp8 (config.json), architecture=DeepseekV3ForCausalLM
    (known_model)"``; None when the answer used none."""
    if not facts:
        return None
    return "Model: " + ", ".join(f"{f.name}={_value_text(f.value)} ({f.source})" for f in facts)


def printed_line(printed: list[PrintedValue]) -> str | None:
    """``"Printed in the message: moe_intermediate_size=1536, tp_size=8 (--tp-size)"``;
    None when the message printed no value the answer read."""
    if not printed:
        return None
    return "Printed in the message: " + ", ".join(
        f"{p.expr}={short_evidence(p.text, 60)}" + (f" ({p.attr})" if p.attr else "")
        for p in printed[:8]
    )


#: the longest evidence line :func:`hardware_line` shows (longer ones are cut with "...")
EVIDENCE_LIMIT = 120


def short_evidence(text: str, limit: int = EVIDENCE_LIMIT) -> str:
    """``text`` on one line, cut to ``limit`` characters (ending in ``...``) when longer."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def hardware_line(hardware: HardwareSource | None) -> str | None:
    """``'hardware: h100-x8 (from the log: "GPU 0,1: NVIDIA H100 80GB HBM3")'`` or
    ``"hardware: b200-x8 (declared)"``; None when the answer names no hardware source.
    The evidence line is cut to :data:`EVIDENCE_LIMIT` characters."""
    if hardware is None:
        return None
    if hardware.source == "request":
        return f"hardware: {hardware.name} (declared)"
    evidence = short_evidence(hardware.evidence) if hardware.evidence else ""
    if hardware.source == "detected":  # read on the machine (`sglang-triage run`, `watch`)
        return f"hardware: {hardware.name} " + (
            f'(detected: "{evidence}")' if evidence else "(detected)"
        )
    return f"hardware: {hardware.name} " + (
        f'(from the log: "{evidence}")' if evidence else "(from the log)"
    )


__all__ = [
    "EVIDENCE_LIMIT",
    "command_markdown",
    "command_note",
    "edit_lines",
    "fix_search_line",
    "hardware_line",
    "model_facts_line",
    "printed_line",
    "short_evidence",
]


def upgrade_lines(up: UpgradeFix | None) -> list[str]:
    """``["Upgrade first: pip install \"sglang==0.5.23\"", "why: …", "cites: …", …]`` for a
    sure upgrade, ``["Upgrade may help: …", …]`` for an unsure one; [] when there is none.
    The replay verdict and what was not checked follow."""
    if up is None:
        return []
    head = "Upgrade first" if up.sure else "Upgrade may help"
    lines = [f"{head}: {up.install}", f"why: {up.note}", f"cites: {', '.join(up.citations)}"]
    if up.replay:
        lines.append(f"replay: {up.replay.get('detail') or up.replay.get('status')}")
    lines += [f"not checked: {n}" for n in up.not_checked]
    return lines
