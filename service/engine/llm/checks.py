"""Checking the LLM's answer in code before anyone sees it, and merging what passes.

* :func:`check_text` drops every sentence of the explanation that cites an id
  that was not sent, claims a line number (``line 123``, ``file.py:123``,
  ``:123``) or names a flag that is not in the release's catalog, and every
  diff (hunk headers, ``+``/``-`` code lines, a ``diff`` fence);
  :func:`rewrite_citations` turns ``[S2]`` into our own ``release:path:line``.
* :func:`check_edit` accepts an edit of the launch command only when every
  flag is a spelling (or attribute) of the catalog (:func:`flag_table`), the
  edited command parses with the release's argparse rules, the fix verifier
  (:func:`service.engine.fixes.propose.verify`) shows that the check becomes definitely false and no
  neighbouring check fires instead, and the rule checker, when given, finds no
  violation.
* :func:`merge_answer` applies those checks to a whole :class:`~service.engine.llm.prompt.LLMAnswer`
  (at most :data:`MAX_EDITS` edits; a summary of at most
  :data:`MAX_SUMMARY_WORDS` words, kept only with an accepted explanation) and
  returns the result with ``llm`` filled in; whatever fails is listed in
  ``llm["rejected"]`` as ``{item, reason}``.

The recommendation rule and the rest of the contract are described in :mod:`service.engine.llm.writer`.
"""

from __future__ import annotations

import re
import time
from typing import Any

from kb.catalog_types import FlagSpec
from service.engine.answer import FixOut, LLMInfo, LLMRejection, RuleVerdict, TriageResult, tri
from service.engine.explain.display import command_markdown
from service.engine.fixes.implied import command_whole
from service.engine.fixes.propose import Edit, verify
from service.engine.flags.edit import apply_edits, render_command
from service.engine.flags.parse import parse_argv
from service.engine.llm.prompt import AssistContext, LLMAnswer, LLMEdit, Snippet

__all__ = [
    "MAX_EDITS",
    "MAX_SUMMARY_WORDS",
    "check_edit",
    "check_text",
    "flag_table",
    "merge_answer",
    "rewrite_citations",
]

MAX_EDITS = 3
MAX_SUMMARY_WORDS = 30


# -- checking text ----------------------------------------------------------------------
_CITE_GROUP = re.compile(r"\[\s*(S\d+(?:\s*[,;]\s*S\d+)*)\s*\]")
_SID = re.compile(r"S\d+")
_LINE_CLAIMS = (
    (re.compile(r"\blines?\s*#?\s*\d+", re.I), "claims a line number"),
    (re.compile(r"(?<![\d:]):\d+\b"), "claims a file:line location"),
    (re.compile(r"#L\d+|\bL\d{2,}\b"), "claims a line number"),
)
_DIFF_LINE = re.compile(
    r"^\s*(?:@@ .*@@|(?:\+\+\+|---) (?:a/|b/|/dev/null)|[+-]\s{0,8}"
    r"(?:def |class |assert |if |elif |else:|raise |return |import |self\.))"
)
_FLAG_TOKEN = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _problem(text: str, ids: set[str], flags: set[str]) -> str | None:
    for group in _CITE_GROUP.findall(text):
        bad = [s for s in _SID.findall(group) if s not in ids]
        if bad:
            return f"cites {', '.join(bad)}, which is not one of the snippets given"
    for pattern, reason in _LINE_CLAIMS:
        if pattern.search(text):
            return reason
    unknown = [f for f in _FLAG_TOKEN.findall(text) if f not in flags]
    if unknown:
        return f"names {', '.join(dict.fromkeys(unknown))}, not a flag of this release"
    return None


def check_text(text: str, ids: set[str], flags: set[str]) -> tuple[str, list[dict[str, str]]]:
    """Drop the sentences (and diff lines/blocks) that fail the checks; say why."""
    rejected: list[dict[str, str]] = []
    kept: list[str] = []
    in_fence = in_diff = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if not in_fence and stripped[3:].strip().lower() in ("diff", "patch"):
                in_diff = True
                rejected.append({"item": stripped[:200], "reason": "contains a diff"})
            elif in_fence and in_diff:
                in_fence = in_diff = False
                continue
            in_fence = not in_fence
            if in_diff:
                continue
            kept.append(line)
            continue
        if in_diff:
            continue
        if _DIFF_LINE.match(line):
            rejected.append({"item": line[:200], "reason": "contains a diff line"})
            continue
        parts = [line] if in_fence else _SENTENCE.split(line)
        good = []
        for part in parts:
            reason = _problem(part, ids, flags)
            if reason:
                rejected.append({"item": part.strip()[:200], "reason": reason})
            else:
                good.append(part)
        if good or not stripped:
            kept.append(" ".join(good) if not in_fence else line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip(), rejected


def rewrite_citations(text: str, snippets: list[Snippet]) -> str:
    """``[S2]`` -> ``[`0.5.11:path:line`]`` using our own citations."""
    by_id = {s.id: s for s in snippets}

    def sub(m: re.Match[str]) -> str:
        cites: list[str] = []
        for sid in _SID.findall(m.group(1)):
            s = by_id[sid]
            label = f"`{s.citation}`" if s.citation else "launch command"
            if label not in cites:
                cites.append(label)
        return "[" + "; ".join(cites) + "]"

    return _CITE_GROUP.sub(sub, text)


# -- checking edits ---------------------------------------------------------------------
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


def flag_table(ctx: AssistContext) -> dict[str, FlagSpec]:
    """Accepted names: every spelling of the catalog, the attributes, and the
    abbreviations the user's own command used (``--tp`` for ``--tp-size``)."""
    table: dict[str, FlagSpec] = {**ctx.catalog.by_attr(), **ctx.catalog.by_flag()}
    for short, full in parse_argv(ctx.argv, ctx.catalog).abbreviations.items():
        if full in table:
            table.setdefault(short, table[full])
    return table


def _as_bool(value: object) -> object:
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    return value


def _describe(edit: LLMEdit) -> str:
    parts = [f"set {k} {v}" for k, v in edit.set.items()] + [f"remove {k}" for k in edit.remove]
    return "; ".join(parts) or "(empty edit)"


def check_edit(
    edit: LLMEdit, ctx: AssistContext, result: TriageResult
) -> tuple[FixOut | None, str | None, int | None]:
    """-> (fix, rejection reason, rank of the deterministic fix it equals)."""
    cat, table = ctx.catalog, flag_table(ctx)
    before = parse_argv(ctx.argv, cat)
    typos = {k for k in edit.remove if k in before.unknown}  # the user's own unknown tokens
    unknown = [k for k in [*edit.set, *edit.remove] if k not in table and k not in typos]
    if unknown:
        return None, f"{', '.join(unknown)}: not a flag of SGLang {ctx.release}", None
    specs = {k: table[k] for k in [*edit.set, *edit.remove] if k not in typos}
    to_set = {
        specs[k].flags[0]: (value if specs[k].takes_value else _as_bool(value))
        for k, value in edit.set.items()
    }
    to_remove = [k if k in typos else specs[k].flags[0] for k in edit.remove]
    touched = [specs[k].attr for k in [*edit.set, *edit.remove] if k not in typos]
    try:
        new_argv = apply_edits(ctx.argv, cat, set=to_set, remove=to_remove)
    except (KeyError, ValueError) as exc:
        return None, f"cannot apply the edit: {exc}", None
    if new_argv == ctx.argv:
        return None, "does not change the command", None
    after = parse_argv(new_argv, cat)
    errors = [e for e in after.errors if e not in before.errors]
    strays = [u for u in after.unknown if u not in before.unknown]
    if errors or strays:
        return None, "the edited command does not parse: " + "; ".join(errors + strays)[:300], None
    for fix in result.fixes:
        if fix.argv == new_argv:
            return None, None, fix.rank
    attrs = list(dict.fromkeys(touched))
    typed = Edit(
        set={a: after.values[a].value for a in attrs if a in after.values},
        remove=[a for a in attrs if a not in after.values],
        origin="llm",
    )
    trips: list[dict[str, Any]] = []
    unknown_n = 0
    undecided = False
    if ctx.check is not None:
        v = verify(ctx.store, ctx.release, ctx.check, typed, ctx.attrs, ctx.facts, cat)
        if v.fixes_check is False:
            return None, "the check would still fire", None
        undecided = v.fixes_check is not True  # inputs stay unknown: kept, unverified
        if v.trips:
            t = v.trips[0]
            return (
                None,
                (
                    f"fixes the check, but then {t['function']} at "
                    f"{ctx.release}:{t['path']}:{t['line']} would fire"
                ),
                None,
            )
        trips, unknown_n, passes = v.trips, v.unknown_neighbours, True
    else:
        passes = not after.errors and not after.unknown
        if not passes:
            return None, "the edited command still fails argparse", None
    verdicts: list[RuleVerdict] = []
    if ctx.rule_check is not None:
        raw, has_error = ctx.rule_check(new_argv)
        verdicts = [r if isinstance(r, RuleVerdict) else RuleVerdict.model_validate(r) for r in raw]
        if has_error:
            bad = [
                f"{r.rule}: {r.reason}" if r.reason else r.rule
                for r in verdicts
                if r.verdict == "violated"
            ]
            return None, "violates " + ("; ".join(bad) or "a rule"), None
    extra = f" ({unknown_n} related checks undecided)" if unknown_n else ""
    by_flag = cat.by_flag()
    spelled = {
        k: after.values[by_flag[k].attr].value if by_flag[k].attr in after.values else v
        for k, v in to_set.items()
    }
    verdict = (
        f"proposed by the model, unverified: the check's inputs stay unknown, so the "
        f"code cannot show that it passes; flags of {ctx.release}, the edited command "
        f"parses and no rule card refuses it"
        if undecided
        else f"proposed by the model and verified: fixes the check; no other check "
        f"of {ctx.release} that reads these flags fires{extra}"
    )
    return (
        FixOut(
            rank=len(result.fixes) + 1,
            set=spelled,
            remove=to_remove,
            argv=new_argv,
            command=render_command(new_argv, prefix=ctx.prefix),
            command_complete=command_whole(before, ctx.attrs, cat),
            origin="llm",
            fixes_check="unknown" if undecided else tri(passes),
            trips=trips,
            unknown_neighbours=unknown_n,
            verdict=verdict,
            rule_verdicts=verdicts,
        ),
        None,
        None,
    )


# -- merging the answer ----------------------------------------------------------------
def _footer(result: TriageResult, release: str) -> str:
    rec = next((f for f in result.fixes if f.recommended), None)
    if rec is not None:
        who = "the model's fix, " if rec.origin == "llm" else ""
        return (
            f"\n\n**Verified fix** ({who}checked against {release}):\n\n{command_markdown(rec)}"
            f"\n\n{rec.verdict}"
        )
    if result.no_flag_fix:
        return f"\n\n**No verified flag fix:** {result.no_flag_fix}"
    return ""


def merge_answer(
    result: TriageResult,
    answer: LLMAnswer,
    snippets: list[Snippet],
    ctx: AssistContext,
    info: LLMInfo,
    t0: float,
) -> TriageResult:
    """``result`` with the parts of ``answer`` that pass the checks, and ``llm`` set from
    ``info`` (the call's metadata) plus what was accepted, cited and rejected; ``t0`` is
    the ``time.perf_counter()`` at which the assist started."""
    ids = {s.id for s in snippets}
    typed = [t.split("=", 1)[0] for t in parse_argv(ctx.argv, ctx.catalog).unknown]
    flags = {k for k in [*flag_table(ctx), *typed] if k.startswith("-")}  # and the user's typos
    rejected: list[dict[str, str]] = []
    update: dict[str, Any] = {}
    # edits
    fixes = [f.model_copy() for f in result.fixes]
    det_recommended = any(f.recommended for f in fixes)
    added: list[int] = []
    agrees: list[int] = []
    for i, edit in enumerate(answer.edits):
        item = f"edit: {_describe(edit)}"
        if i >= MAX_EDITS:
            rejected.append({"item": item, "reason": f"more than {MAX_EDITS} edits"})
            continue
        view = result.model_copy(update={"fixes": fixes})
        fix, why, same = check_edit(edit, ctx, view)
        if same is not None:
            agrees.append(same)
        elif fix is None:
            rejected.append({"item": item, "reason": why or "failed"})
        else:
            # an unverified proposal is shown, labelled, and never recommended
            fix.recommended = (
                fix.fixes_check == "true"
                and not det_recommended
                and not any(f.recommended for f in fixes)
            )
            fixes.append(fix)
            added.append(fix.rank)
    update["fixes"] = fixes
    # explanation
    clean, dropped = check_text(answer.explanation, ids, flags)
    rejected += dropped
    cited = sorted(
        {s for g in _CITE_GROUP.findall(clean) for s in _SID.findall(g)}, key=lambda s: int(s[1:])
    )
    explanation_ok = bool(cited)
    if explanation_ok:
        view = result.model_copy(update={"fixes": fixes})
        update["explanation"] = rewrite_citations(clean, snippets) + _footer(view, ctx.release)
        by_id = {s.id: s for s in snippets}
        extra = [by_id[s].citation for s in cited if by_id[s].citation]
        update["citations"] = list(dict.fromkeys([*result.citations, *extra]))
        info.deterministic_explanation = result.explanation
    else:
        rejected.append(
            {
                "item": f"explanation: {answer.explanation[:200]}",
                "reason": "cites none of the snippets given once the checks are applied",
            }
        )
    # summary: only alongside an accepted (grounded) explanation
    summary = " ".join(_CITE_GROUP.sub("", answer.summary).split())
    reason = _problem(answer.summary, ids, flags)
    if reason is None and len(summary.split()) > MAX_SUMMARY_WORDS:
        reason = f"longer than {MAX_SUMMARY_WORDS} words"
    if reason is None and not explanation_ok:
        reason = "its explanation was rejected"
    if reason is None and summary:
        update["summary"] = summary
    else:
        rejected.append({"item": f"summary: {answer.summary[:200]}", "reason": reason or "empty"})
    info.used = explanation_ok or bool(added)
    info.explanation = "accepted" if explanation_ok else "rejected"
    info.summary = "accepted" if "summary" in update else "rejected"
    info.cited = cited
    info.fixes_added = added
    info.agrees_with = agrees
    info.rejected = [LLMRejection(**r) for r in rejected]
    info.unverified = [f.rank for f in fixes if f.rank in added and f.fixes_check != "true"]
    info.elapsed_ms = round((time.perf_counter() - t0) * 1000, 1)
    if not info.used:
        info.error = "nothing in the answer passed the checks"
    return result.model_copy(update={**update, "llm": info})
