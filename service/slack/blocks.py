"""Block Kit rendering of triage results for the Slack bot.

Everything the bot posts goes through :func:`~service.engine.redact_payload` last, so no
Slack token (``xoxb-``/``xoxp-``/``xapp-``...), ``sk-``/``hf_`` key, AWS key or
``--api-key``/``--hf-token`` value from a pasted log (or from the settings)
is ever echoed into a channel. Text from logs and sources is escaped for
Slack's mrkdwn (``&``, ``<``, ``>``) before it is put into a block.

The builders return ``(fallback_text, blocks)``: the fallback is what
notifications and screen readers show.
"""

from __future__ import annotations

import json
import re
from typing import Any

from service.engine import (
    FixOut,
    TriageResult,
    command_note,
    edit_lines,
    fix_search_line,
    hardware_line,
    model_facts_line,
    printed_line,
    upgrade_lines,
)

Block = dict[str, Any]

FIXED_ACTION = "triage_fixed"
REPORT_ACTION = "triage_report"
SECTION_LIMIT = 2900  # Slack's section text limit is 3000 characters
MAX_BLOCKS = 48  # Slack allows 50 blocks per message
# --------------------------------------------------------------------------- mrkdwn helpers


def esc(text: str) -> str:
    """Escape the three characters Slack's mrkdwn reserves."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def trunc(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"


def code(text: str, limit: int = SECTION_LIMIT - 20) -> str:
    """A mrkdwn code block (escaped, truncated, no inner fences)."""
    body = esc(text).replace("```", "`\u200b``")
    return f"```{trunc(body, limit)}```"


def section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": trunc(text, SECTION_LIMIT)}}


def context(*items: str) -> Block:
    return {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": trunc(i, 2000)} for i in items if i][:10],
    }


def md_to_mrkdwn(markdown: str) -> str:
    """Markdown (as the explainer writes it) to Slack mrkdwn, with text escaped.

    Fences are glued to their first and last lines, as Slack renders a
    newline after an opening fence as an empty line.
    """
    out: list[str] = []
    in_code = opening = False
    for raw in markdown.split("\n"):
        if raw.strip().startswith("```"):
            if in_code and out:
                out[-1] += "```"
            in_code, opening = not in_code, not in_code
            continue
        line = esc(raw)
        if in_code:
            if opening:
                line, opening = "```" + line, False
        else:
            line = re.sub(r"^#{1,6}\s+(.*)$", r"*\1*", line)
            line = re.sub(r"\*\*(.+?)\*\*", r"*\1*", line)
            line = re.sub(r"\[([^\]]+)\]\((https?://[^)\s]+)\)", r"<\2|\1>", line)
            line = re.sub(r"^(\s*)[-*] ", r"\1• ", line)
        out.append(line)
    if in_code and out:
        out[-1] += "```"
    return "\n".join(out)


def split_sections(text: str, limit: int = SECTION_LIMIT, max_sections: int = 8) -> list[Block]:
    """Long mrkdwn cut into sections on line boundaries (code fences re-balanced)."""
    chunks: list[str] = []
    cur = ""
    for line in text.split("\n"):
        if len(cur) + len(line) + 1 > limit and cur:
            chunks.append(cur)
            cur = ""
        cur = f"{cur}\n{line}" if cur else line[:limit]
    if cur:
        chunks.append(cur)
    blocks: list[Block] = []
    carry = False
    for chunk in chunks[:max_sections]:
        if carry:
            chunk = "```" + chunk
        carry = chunk.count("```") % 2 == 1
        if carry:
            chunk += "```"
        blocks.append(section(chunk))
    if len(chunks) > max_sections:
        blocks.append(context("_(truncated: see the full report)_"))
    return blocks


# --------------------------------------------------------------------------- pieces


def release_line(result: TriageResult) -> str:
    rel = result.release
    parts = [f"release *{esc(str(rel.release or '?'))}*"]
    parts[0] += f" ({esc(str(rel.method or 'resolved'))}, {rel.confidence})"
    rng = rel.range or {}
    if rng.get("releases") and len(rng["releases"]) < len(rng.get("ingested") or []):
        parts.append(f"range {esc(str(rng.get('text') or ''))}")
    parts.append(f"confidence *{result.confidence:.2f}*")
    if result.parsed.hardware:
        parts.append(f"hardware `{esc(result.parsed.hardware)}`")
    if result.parsed.model_arch:
        parts.append(f"model `{esc(result.parsed.model_arch)}`")
    return " · ".join(parts)


def hardware_context(result: TriageResult) -> list[Block]:
    """One context line with the hardware profile used and where it came from (declared,
    or the GPU line of the log, cut short); nothing when the answer names no source."""
    line = hardware_line(result.hardware)
    return [context(esc(line))] if line else []


def excerpt_text(result: TriageResult, context_lines: int | None = 2) -> str:
    """The failing check's lines, numbered, the check itself marked with ``▶``."""
    loc = result.location
    if loc is None or not loc.excerpt:
        return ""
    lines = loc.excerpt
    if context_lines is not None:
        hl = [e.line for e in lines if e.highlight] or [loc.start_line]
        lo, hi = min(hl) - context_lines, max(hl) + context_lines
        lines = [e for e in lines if lo <= e.line <= hi]
    width = len(str(lines[-1].line)) if lines else 4
    return "\n".join(f"{e.line:>{width}}{'▶' if e.highlight else ' '} {e.text}" for e in lines)


def best_fix(result: TriageResult) -> FixOut | None:
    return next(
        (f for f in result.fixes if f.recommended), result.fixes[0] if result.fixes else None
    )


_VERDICT_ICON = {
    "violated": ":x:",
    "satisfied": ":white_check_mark:",
    "unknown": ":grey_question:",
    "not_applicable": ":heavy_minus_sign:",
}


def fix_text(fix: FixOut) -> str:
    """A fix as mrkdwn: heading and verdict, its edit lines (``+ --flag value`` / ``- --flag``),
    what it gives up, then the full command in a code block of its own (copied whole), or,
    when the log showed no full launch command, a sentence saying so."""
    head = "*Fix* (recommended)" if fix.recommended else f"*Fix {fix.rank}* (not verified)"
    rows = [f"{head}: {esc(trunc(fix.verdict, 600))}"]
    edits = edit_lines(fix)
    if edits:
        rows.append(code("\n".join(edits), 600))
    if fix.gives_up:
        rows.append(f"_Gives up:_ {esc(trunc(fix.gives_up, 400))}")
    note = command_note(fix)  # the log showed no full command: none to copy
    rows.append(code(fix.command) if note is None else f"_{esc(trunc(note, 600))}_")
    return "\n".join(rows)


def answer_context(result: TriageResult) -> list[Block]:
    """One context line with the values the message printed, the model facts the answer
    used, the check's arithmetic and the fix search's status."""
    arithmetic = f"Arithmetic: {result.arithmetic}" if result.arithmetic else None
    items = [
        esc(trunc(line, 600))
        for line in (
            printed_line(result.printed),
            model_facts_line(result.model_facts),
            arithmetic,
            fix_search_line(result.fix_search),
        )
        if line
    ]
    return [context(*items)] if items else []


def rule_block(result: TriageResult) -> list[Block]:
    """The plain-words rule of a bare check (it carries its own citation)."""
    return [section(f"*Rule:* {esc(trunc(result.rule, 1500))}")] if result.rule else []


def fix_blocks(fix: FixOut) -> list[Block]:
    blocks = [section(fix_text(fix))]
    if fix.rule_verdicts:
        rows = [
            f"{_VERDICT_ICON.get(v.verdict, '•')} `{esc(v.rule)}` {v.verdict.replace('_', ' ')}"
            f" ({esc(v.severity)}){': ' + esc(trunc(v.reason, 200)) if v.reason else ''}"
            for v in fix.rule_verdicts[:12]
        ]
        blocks.append(section("*Rule verdicts*\n" + "\n".join(rows)))
    return blocks


def action_blocks(result: TriageResult, report_url: str | None) -> list[Block]:
    elements: list[dict[str, Any]] = []
    fix = best_fix(result)
    if result.id and fix is not None:
        elements.append(
            {
                "type": "button",
                "action_id": FIXED_ACTION,
                "style": "primary",
                "text": {"type": "plain_text", "text": "This fixed it"},
                "value": json.dumps({"t": result.id, "r": fix.rank}),
            }
        )
    if report_url:
        elements.append(
            {
                "type": "button",
                "action_id": REPORT_ACTION,
                "url": report_url,
                "text": {"type": "plain_text", "text": "Full report"},
            }
        )
    return (
        [{"type": "actions", "block_id": "triage_actions", "elements": elements}]
        if elements
        else []
    )


INPUT_HINT = (
    "Paste the launch command and the full traceback (text, a ``` block, or a text file); "
    "add `release=0.5.11 hardware=h100-x8` in front if they are not in the log."
)
FOLLOW_UP_HINT = (
    "Ask in this thread: `why?` · `show the check` · `other fixes` · "
    "`what about on H100?` · `on 0.5.23?`"
)


# --------------------------------------------------------------------------- messages


def triage_blocks(
    result: TriageResult, report_url: str | None, note: str | None = None
) -> tuple[str, list[Block]]:
    """The main reply: summary, failing check, fix command, confidence/release, verdicts, links."""
    blocks: list[Block] = []
    if note:
        blocks.append(context(note))
    blocks.append(section(f":mag: *{esc(result.summary)}*"))
    blocks.append(context(release_line(result)))
    blocks.extend(hardware_context(result))
    loc = result.location
    if loc is not None:
        where = f"*Failing check* `{esc(loc.function)}` at `{esc(loc.citation)}`"
        excerpt = excerpt_text(result)
        blocks.append(section(where + (f"\n{code(excerpt)}" if excerpt else "")))
    blocks.extend(rule_block(result))
    blocks.extend(answer_context(result))
    upgrade = upgrade_lines(result.upgrade_fix)
    if upgrade:
        blocks.append(section(f"*{esc(upgrade[0])}*\n" + "\n".join(esc(x) for x in upgrade[1:])))
    fix = best_fix(result)
    if fix is not None:
        blocks.extend(fix_blocks(fix))
    elif result.no_flag_fix:
        blocks.append(section(f"*No flag fix:* {esc(result.no_flag_fix)}"))
    if result.unknowns:
        items = [f"• {esc(u.what)} — give {esc(u.settle)}" for u in result.unknowns[:3]]
        blocks.append(context("*Unknown:*\n" + "\n".join(items)))
    if report_url:
        blocks.append(context(f"<{report_url}|Full report> · triage `{esc(result.id or '')}`"))
    blocks.extend(action_blocks(result, report_url))
    blocks.append(context(FOLLOW_UP_HINT))
    fallback = result.summary + (
        f"\nFix: {fix.command if fix.command_complete else ' '.join(edit_lines(fix))}"
        if fix is not None
        else ""
    )
    return fallback, blocks[:MAX_BLOCKS]


def change_note(
    old: TriageResult, old_options: dict[str, Any], new: TriageResult, new_options: dict[str, Any]
) -> str:
    """One line on what changed when a follow-up re-evaluated the log with new facts."""
    changed = [
        f"{k} `{esc(str(v))}`" for k, v in new_options.items() if v and v != old_options.get(k)
    ]
    fired_old = old.evaluation.fired if old.evaluation else "n/a"
    fired_new = new.evaluation.fired if new.evaluation else "n/a"
    fix_old, fix_new = best_fix(old), best_fix(new)
    same = (fix_old.command if fix_old else None) == (fix_new.command if fix_new else None)
    return (
        f":arrows_counterclockwise: Re-evaluated with {', '.join(changed) or 'the same options'}: "
        f"check fired {fired_old} → {fired_new}; recommended fix "
        f"{'unchanged' if same else 'changed'}."
    )


def why_blocks(result: TriageResult) -> tuple[str, list[Block]]:
    """The full cited explanation, with the atoms that made the check fail."""
    blocks: list[Block] = [section(f"*Why:* {esc(result.summary)}")]
    blocks.extend(split_sections(md_to_mrkdwn(result.explanation)))
    return f"Why: {result.summary}", blocks[:MAX_BLOCKS]


def check_blocks(result: TriageResult) -> tuple[str, list[Block]]:
    """The failing check in full: excerpt, condition, guards."""
    loc, check = result.location, result.check
    if loc is None:
        return "No check located.", [
            section(
                "No SGLang check was located for this log, so there "
                "is nothing to show. " + esc(result.summary)
            )
        ]
    blocks = [
        section(
            f"*The check* `{esc(loc.function)}` at `{esc(loc.citation)}` "
            f"(located by {esc(loc.method.replace('_', ' '))}, {loc.confidence})\n"
            + code(excerpt_text(result, None))
        )
    ]
    blocks.extend(rule_block(result))
    if check is not None:
        rows = []
        if check.condition:
            rows.append(f"*Condition:* `{esc(trunc(' '.join(check.condition.split()), 800))}`")
        if check.message:
            rows.append(f"*Message:* {esc(trunc(check.message, 400))}")
        for g in check.guards[:8]:
            cond = " ".join(str(g.get("condition", "")).split())
            rows.append(
                f"• guard `{esc(trunc(cond, 300))}`"
                + ("" if g.get("polarity", True) else " (must be false)")
            )
        if rows:
            blocks.append(section("\n".join(rows)))
    if loc.alternatives:
        blocks.append(
            context("Other candidates: " + ", ".join(f"`{esc(a)}`" for a in loc.alternatives[:5]))
        )
    return f"The check at {loc.citation}", blocks


def fixes_blocks(result: TriageResult) -> tuple[str, list[Block]]:
    """Every proposed fix with its verdict and command."""
    if not result.fixes:
        text = result.no_flag_fix or "No flag change was proposed for this failure."
        return text, [section(f"*No fixes:* {esc(text)}")]
    blocks: list[Block] = answer_context(result)
    for fix in result.fixes[:8]:
        blocks.extend(fix_blocks(fix))
    return f"{len(result.fixes)} proposed fixes", blocks[:MAX_BLOCKS]


def unknowns_blocks(result: TriageResult) -> tuple[str, list[Block]]:
    if not result.unknowns:
        return "Nothing unknown", [section("Every input of the check was known.")]
    rows = [
        f"• *{esc(u.what)}*: {esc(u.why)} — settle with {esc(u.settle)}"
        for u in result.unknowns[:15]
    ]
    return "Unknowns", split_sections("*What is unknown*\n" + "\n".join(rows))


def help_blocks(has_context: bool) -> tuple[str, list[Block]]:
    text = (
        "Paste an SGLang crash log (the launch command and the traceback) as text, "
        "in a ``` code block, or as a text file/snippet, and I'll explain why the server "
        "refused to start and which command-line change fixes it. Options go first: "
        "`release=0.5.11 hardware=h100-x8 model_arch=...`."
    )
    if has_context:
        text = FOLLOW_UP_HINT + "\n" + text
    return "How to use sglang-triage", [section(text)]


def error_blocks(message: str, hint: str | None = None) -> tuple[str, list[Block]]:
    blocks = [section(f":warning: {esc(trunc(message, 1500))}")]
    if hint:
        blocks.append(context(esc(hint)))
    return message, blocks


def confirmed_blocks(original: list[Block], user: str, command: str) -> list[Block]:
    """The original message with its "This fixed it" button replaced by a confirmation note."""
    out: list[Block] = []
    for block in original:
        if block.get("type") == "actions":
            rest = [e for e in block.get("elements", []) if e.get("action_id") != FIXED_ACTION]
            out.append(
                context(
                    f":white_check_mark: Confirmed by <@{esc(user)}>: `{esc(trunc(command, 300))}`"
                )
            )
            if rest:
                out.append({**block, "elements": rest})
        else:
            out.append(block)
    return out[:MAX_BLOCKS]
