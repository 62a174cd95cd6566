"""The deterministic explanation: a short summary and cited markdown.

Every sentence about SGLang's behaviour carries a ``release:path:line``
citation that the engine took from the KB; nothing here invents a place.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from service.engine.answer import (
    AtomOut,
    FixOut,
    Location,
    NotFlagProblem,
    UnknownFact,
    UpgradeFix,
)
from service.engine.explain.display import command_markdown


def _flagish(attr: str) -> str:
    return "--" + attr.replace("_", "-")


def failing_inputs(atoms: list[AtomOut], given: Collection[str] = ()) -> list[str]:
    """Inputs of the failing atoms, the assert test's first (they are why it fired); a
    flag of ``given`` (those the user set) that SGLang rewrote before the check leads, said
    so ("--enable-dp-attention set to False by SGLang"). A guard's input at its default is
    left out: it lets the check run (``ep_join_mode != "scale"`` with the default ``None``)
    but did not make it fire."""
    out: list[str] = [
        f"{_flagish(inp.name)} set to {inp.value!r} by SGLang"
        for atom in atoms
        if atom.failing
        for inp in atom.inputs
        if inp.source == "write" and inp.name in given
    ]
    out = list(dict.fromkeys(out))
    ordered = sorted(atoms, key=lambda a: {"test": 0, "guard": 1}.get(a.role, 2))
    if any(a.failing and a.role == "test" for a in atoms):
        ordered = [a for a in ordered if a.role == "test"]
    for atom in ordered:
        if not atom.failing:
            continue
        for inp in atom.inputs:
            if inp.source == "write" and inp.name in given:
                continue  # said first
            if inp.source == "default" and atom.role != "test":
                continue  # a guard left at its default lets the check run; it is no cause
            if len(repr(inp.value)) > 40 and inp.source not in ("flag", "default"):
                label = f"{atom.text} is {atom.value}"  # a whole fact object says too much
            else:
                label = (
                    f"{_flagish(inp.name)}={inp.value!r}"
                    if inp.source in ("flag", "default")
                    else f"{inp.name}={inp.value!r}"
                )
            if label not in out:
                out.append(label)
    return out


#: words of a summary, and of one that leads with a sure upgrade (its phrase is longer)
SUMMARY_WORDS = 29
SUMMARY_WORDS_UPGRADE = 40


def summary(
    exc_type: str | None,
    bare: bool,
    location: Location | None,
    atoms: list[AtomOut],
    fixes: list[FixOut],
    release: str,
    *,
    upgrade: str | None = None,
    given: Collection[str] = (),
) -> str:
    """One line: what fired where, why, and the fix. ``upgrade`` (a sure upgrade, in
    :func:`~service.engine.fixes.upgrade.upgrade_phrase`'s words) comes before the flag
    fix, which stays the alternative for those who keep the release. ``given``: the
    attributes the user set (see :func:`failing_inputs`)."""
    if location is None:
        return f"Could not locate the failing check in {release}."
    what = (
        f"{'bare ' if bare else ''}{exc_type or 'check'} in {location.function.rsplit('.', 1)[-1]}"
    )
    inputs = failing_inputs(atoms, given)[: 2 if upgrade is None else 1]
    why = f" because {', '.join(inputs)}" if inputs else ""
    first = f"; {upgrade}" if upgrade else ""
    fix = ""
    if fixes:
        fix = "; fix: " + fix_phrase(next((f for f in fixes if f.recommended), fixes[0]))
    words = f"{what} ({release}){why}{first}{fix}.".split()
    return " ".join(words[: SUMMARY_WORDS if upgrade is None else SUMMARY_WORDS_UPGRADE])


def with_upgrade(summary_text: str, phrase: str) -> str:
    """``summary_text`` with ``phrase`` (a sure upgrade) before its fix, as :func:`summary`
    writes it for an upgrade known when the answer was made."""
    head, sep, fix = summary_text.partition("; fix: ")
    words = f"{head.rstrip('.')}; {phrase}{sep}{fix}".rstrip(".").split()
    return " ".join(words[:SUMMARY_WORDS_UPGRADE]) + "."


def upgrade_paragraph(up: UpgradeFix) -> str:
    """The explanation's first paragraph for a sure upgrade, with both citations."""
    cites = " and ".join(f"`{c}`" for c in up.citations)
    return (
        f"**Upgrade first:** `{up.install}` — {up.note} ({cites}). The same command "
        f"then gets past this check; not checked: {'; '.join(up.not_checked)}.\n\n"
    )


def not_flag_paragraph(nf: NotFlagProblem) -> str:
    """The explanation of a "not a launch-flag problem" answer, with its evidence."""
    out = f"**Not a launch-flag problem:** {nf.reason}."
    if nf.evidence:
        out += "\n\nFrom the log:" + "".join(f"\n- `{e}`" for e in nf.evidence)
    if nf.citations:
        out += "\n\nSGLang calls into it at " + ", ".join(f"`{c}`" for c in nf.citations) + "."
    out += "\n\nNot checked: " + "; ".join(nf.not_checked) + "."
    return out


def fix_phrase(fix: FixOut) -> str:
    """A fix in the summary's words: ``drop --a --b, set --c 3``."""
    parts = [f"drop {' '.join(fix.remove)}"] if fix.remove else []
    parts += [f"set {k} {v}" for k, v in fix.set.items()]
    return ", ".join(parts)


def with_fix(summary_text: str, fix: FixOut | None) -> str:
    """``summary_text`` naming ``fix`` (or no fix) instead of the fix it named."""
    head = summary_text.split("; fix: ", 1)[0].rstrip(".")
    words = (f"{head}; fix: {fix_phrase(fix)}." if fix is not None else f"{head}.").split()
    return " ".join(
        words[: SUMMARY_WORDS_UPGRADE if "; upgrade to SGLang ≥" in head else SUMMARY_WORDS]
    )


def markdown(
    result: dict[str, Any],
    location: Location | None,
    atoms: list[AtomOut],
    fixes: list[FixOut],
    unknowns: list[UnknownFact],
    release: str,
    references: list[dict[str, str]],
    caveats: list[str],
) -> str:
    lines: list[str] = []
    res = result
    if location is None:
        lines.append(f"The crash could not be tied to a check in SGLang {release}.")
    else:
        lines.append(
            f"**Where:** `{location.function}` at `{location.citation}` "
            f"(located by {location.method.replace('_', ' ')}, confidence "
            f"{location.confidence:.2f})."
        )
        cond = res.get("condition")
        if cond:
            lines.append(
                f"\n**The check** (`{location.citation}`):\n\n```python\n{cond.strip()}\n```"
            )
        if res.get("rule"):  # a bare check: its rule in words (explain/rule.py), cited
            lines.append(f"\n**The rule:** {res['rule']}")
        if res.get("undecided"):
            lines.append(f"\n**Undecided:** {res['undecided']}")
        fired = [a for a in atoms if a.failing]
        if fired:
            lines.append("\n**Why it fired:**")
            for atom in fired:
                srcs = "; ".join(
                    f"`{i.name}` = `{i.value!r}` from {i.source}"
                    + (f" ({i.detail})" if i.detail else "")
                    for i in atom.inputs
                )
                lines.append(
                    f"- `{atom.text}` is **{atom.value}** ({atom.role}) — {srcs or 'no inputs'}"
                )
    if caveats:
        lines.append("\n**Values SGLang changes before this check:**")
        lines.extend(f"- {c}" for c in caveats[:8])
    if fixes:
        lines.append("\n**Fixes** (re-checked against the release's other checks):")
        for f in fixes[:3]:
            lines.append(f"{f.rank}. {f.verdict}\n\n{command_markdown(f, '   ')}")
    elif res.get("no_flag_fix"):
        lines.append(f"\n**No flag fix:** {res['no_flag_fix']}")
    if unknowns:
        lines.append("\n**Unknown:**")
        lines.extend(f"- {u.what}: {u.why} — would settle it: {u.settle}" for u in unknowns)
    if references:
        lines.append("\n**References:**")
        lines.extend(f"- {r['kind']}: `{r['citation']}` {r['text']}" for r in references[:8])
    return "\n".join(lines)
