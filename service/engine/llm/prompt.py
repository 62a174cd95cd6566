"""What the LLM is given and must answer: the context, the numbered snippets, the prompt, the schema.

:class:`AssistContext` carries the engine's own inputs (the store, the release
and its flag catalog, the argv, the evaluation environment, the located check,
the rule checker); :func:`context_from_result` rebuilds one from a stored
result. :func:`build_snippets` turns a result into numbered pieces of
retrieved context (``S1``, ``S2`` ...): the launch command and crash, the check
(condition, message, code excerpt), the guards of its path, the evaluated atoms
with their values and provenance, the result's references and the help of the
flags involved. Each :class:`Snippet` keeps its real ``release:path:line``
citation, which never reaches the model: line numbers and ``path:line``
locations are scrubbed from what is sent. :func:`build_messages` is the chat
sent (system rules + snippets), and :class:`LLMAnswer` (:data:`ANSWER_SCHEMA`)
is the structured answer the model must return.

:mod:`service.engine.llm.writer` calls the model; :mod:`service.engine.llm.checks` checks its answer.
"""

from __future__ import annotations

import ast
import re
import shlex
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from kb.catalog_types import Catalog, FlagSpec
from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.answer import TriageResult
from service.engine.evaluate.context import CheckContext
from service.engine.evaluate.path_condition import base_attrs
from service.engine.expr.interpreter import Value
from service.engine.flags.parse import parse_argv

__all__ = [
    "ANSWER_SCHEMA",
    "AssistContext",
    "LLMAnswer",
    "LLMEdit",
    "RuleCheck",
    "Snippet",
    "build_messages",
    "build_snippets",
    "context_from_result",
]

#: ``rule_check(argv) -> (verdicts, has_error)``; verdicts are RuleVerdict or dicts.
RuleCheck = Callable[[list[str]], tuple[Sequence[Any], bool]]

_MAX_REFS = 12
_MAX_HELP = 12
_DEFAULT_PREFIX = "python -m sglang.launch_server"


# -- the answer -------------------------------------------------------------------------
class LLMEdit(BaseModel):
    """One change to the launch command, in flag spellings."""

    set: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="flag spelling -> new value"
    )
    remove: list[str] = Field(default_factory=list, description="flag spellings to drop")


class LLMAnswer(BaseModel):
    """What the model must return."""

    summary: str = Field(description="one sentence, at most 30 words")
    explanation: str = Field(description="markdown citing snippet ids like [S2]")
    edits: list[LLMEdit] = Field(default_factory=list, description="0-3 edits of the command")


ANSWER_SCHEMA: dict[str, Any] = LLMAnswer.model_json_schema()


# -- context ----------------------------------------------------------------------------
@dataclass
class Snippet:
    """One numbered piece of retrieved context; ``citation`` never reaches the model."""

    id: str
    kind: str
    title: str
    text: str
    citation: str | None = None

    def render(self) -> str:
        return f"[{self.id}] {self.kind}: {_scrub(self.title)}\n{_scrub(self.text).rstrip()}"


@dataclass
class AssistContext:
    """What :func:`service.engine.llm.writer.assist` needs beyond the result: the engine's own inputs.

    ``attrs``/``facts`` are the evaluation environment the engine built
    (``base_attrs(...)`` and ``facts_for(...)``), ``check`` the located check
    row (``None`` for argparse results), ``prefix`` the command prefix the
    engine renders fixes with.
    """

    store: Store
    release: str
    catalog: Catalog
    argv: list[str]
    attrs: dict[str, Value]
    facts: dict[str, Value]
    check: Check | None = None
    rule_check: RuleCheck | None = None
    prefix: str = _DEFAULT_PREFIX

    @classmethod
    def of(cls, ctx: CheckContext, *, prefix: str = _DEFAULT_PREFIX) -> AssistContext:
        """The LLM step's context for a located check: the engine's :class:`CheckContext`."""
        return cls(
            store=ctx.store,
            release=ctx.release,
            catalog=ctx.catalog,
            argv=list(ctx.argv),
            attrs=ctx.attrs,
            facts=ctx.facts,
            check=ctx.check,
            prefix=prefix,
        )


def context_from_result(
    store: Store,
    result: TriageResult,
    *,
    attrs: dict[str, Value] | None = None,
    facts: dict[str, Value] | None = None,
    rule_check: RuleCheck | None = None,
) -> AssistContext:
    """Rebuild an :class:`AssistContext` from a result (attrs from argv when not given)."""
    release = str(result.release.release)
    catalog = load_catalog(store, release)
    argv = list(result.parsed.command or [])
    if attrs is None:
        attrs = base_attrs(catalog, parse_argv(argv, catalog))
    check = None
    if result.check is not None and result.location is not None:
        rows = store.checks(
            release, path=result.location.path, where="id = ?", params=[result.check.id]
        )
        check = rows[0] if rows else None
    return AssistContext(
        store=store,
        release=release,
        catalog=catalog,
        argv=argv,
        attrs=attrs,
        facts=dict(facts or {}),
        check=check,
        rule_check=rule_check,
        prefix=_prefix_of(result, argv),
    )


def _prefix_of(result: TriageResult, argv: list[str]) -> str:
    for fix in result.fixes:
        tail = shlex.join(fix.argv)
        if tail and fix.command.endswith(tail):
            return fix.command[: -len(tail)].strip() or _DEFAULT_PREFIX
    return _DEFAULT_PREFIX


# -- snippets ---------------------------------------------------------------------------
_PY_LINE = re.compile(r"(\.py)(?::\d+(?:-\d+)?)")
_LINE_WORD = re.compile(r"\s*\(?\blines?\s+\d+(?:\s*-\s*\d+)?\)?", re.I)


def _scrub(text: str) -> str:
    """Remove ``path.py:123`` and ``line 123`` from text sent to the model."""
    return _LINE_WORD.sub("", _PY_LINE.sub(r"\1", text))


def _norm(code: str) -> str:
    """``code`` in one canonical spelling (``ast.unparse``) when it parses."""
    try:
        return ast.unparse(ast.parse(textwrap.dedent(code).strip(), mode="eval"))
    except SyntaxError:
        return " ".join(code.split())


def _flag_text(spec: FlagSpec) -> str:
    bits = []
    if spec.type:
        bits.append(f"type {spec.type}")
    if spec.action and spec.action != "store":
        bits.append(f"action {spec.action}")
    if spec.default_known:
        bits.append(f"default {spec.default!r}")
    if spec.choices:
        bits.append(f"choices {list(spec.choices)[:12]}")
    head = " / ".join(spec.flags)
    return f"{head} ({', '.join(bits)}): {(spec.help or '').strip()[:300]}"


def build_snippets(result: TriageResult, ctx: AssistContext) -> list[Snippet]:
    """The numbered context for ``result``; each snippet keeps its real citation."""
    out: list[Snippet] = []

    def add(kind: str, title: str, text: str, citation: str | None) -> None:
        out.append(Snippet(f"S{len(out) + 1}", kind, title, text, citation))

    p = result.parsed
    crash = f"{p.exception or 'exception'}" + (f": {p.message}" if p.message else " (no message)")
    add(
        "input",
        "the user's launch command and crash",
        f"command: {shlex.join(ctx.argv) or '(not in the log)'}\ncrash: {crash}",
        None,
    )
    loc, chk = result.location, result.check
    if loc is not None and chk is not None:
        code = textwrap.dedent("\n".join(e.text for e in loc.excerpt))
        marked = "\n".join(
            ("> " if e.highlight else "  ") + line
            for e, line in zip(loc.excerpt, code.splitlines(), strict=False)
        )
        text = (
            f"{'bare ' if chk.bare else ''}{chk.kind} raising {chk.exc_type or 'an exception'}\n"
            f"condition: {textwrap.dedent(chk.condition or '').strip() or '(none)'}\n"
            f"message: {chk.message or '(none)'}\ncode (the check marked with >):\n{marked}"
        )
        add("check", f"{loc.function} in {loc.path}", text, loc.citation)
        for g in chk.guards:
            need = "must hold" if g.get("polarity") else "must not hold"
            cite = f"{ctx.release}:{loc.path}:{g['line']}" if g.get("line") else loc.citation
            add(
                "guard",
                f"{g.get('kind', 'if')} in {loc.function}",
                f"{textwrap.dedent(g.get('condition') or '').strip()} ({need} for the check to run)",
                cite,
            )
    if result.evaluation is not None and loc is not None:
        ev = result.evaluation
        guard_cites = [
            (_norm(g.get("condition") or ""), f"{ctx.release}:{loc.path}:{g['line']}")
            for g in (chk.guards if chk else [])
            if g.get("line")
        ]
        add(
            "evaluation",
            "the check's path condition with this command",
            f"fires: {ev.fired}" + "".join(f"\ncaveat: {c}" for c in ev.caveats[:6]),
            loc.citation,
        )
        for atom in ev.atoms:
            cite = loc.citation
            if atom.role == "guard":  # cite the guard the atom belongs to when it is known
                text = _norm(atom.text)
                cite = next((c for cond, c in guard_cites if text in cond), loc.citation)
            inputs = "; ".join(
                f"{i.name} = {i.value!r} from {i.source}" + (f" ({i.detail})" if i.detail else "")
                for i in atom.inputs
            )
            add(
                "evaluation",
                f"{atom.role} atom",
                f"`{atom.text}` is {atom.value}"
                + (" (pushes towards firing)" if atom.failing else "")
                + f"; inputs: {inputs or 'none'}",
                cite,
            )
    seen = set()
    for ref in result.references[:_MAX_REFS]:
        seen.add(ref.citation)
        parts = ref.citation.split(":")
        add(ref.kind, f"in {parts[1]}" if len(parts) == 3 else "reference", ref.text, ref.citation)
    by_attr = ctx.catalog.by_attr()
    involved = list(parse_argv(ctx.argv, ctx.catalog).values)
    if result.evaluation is not None:
        involved += [i.name for a in result.evaluation.atoms for i in a.inputs]
    n_help = 0
    for attr in dict.fromkeys(involved):
        spec = by_attr.get(attr)
        if spec is None or not spec.line or n_help >= _MAX_HELP:
            continue
        cite = f"{ctx.release}:{spec.path}:{spec.line}"
        if cite in seen:
            continue
        seen.add(cite)
        n_help += 1
        add("help", f"flag {spec.flags[0]}", _flag_text(spec), cite)
    return out


_SYSTEM = """You explain why an SGLang server (release {release}) refused to start.
Use ONLY the numbered snippets in the user message; they come from that release's source.
Rules:
- Support each claim with the ids of the snippets it rests on, in square brackets, e.g. [S1] or [S2, S3]. Cite only ids that appear in the snippets.
- Never mention source line numbers, file:line locations or diffs: snippet ids are the only references.
- Mention only command-line flags that appear in the snippets.
- summary: one sentence, at most 30 words.
- explanation: short markdown (a few sentences or bullets).
- edits: zero to three changes to the launch command that would let the server start, each {{"set": {{"--flag": value}}, "remove": ["--flag"]}}. Propose none when unsure.
Answer with one JSON object with the keys summary, explanation and edits."""


def build_messages(snippets: list[Snippet], release: str) -> list[tuple[str, str]]:
    """The chat messages sent to the model (system rules + snippets)."""
    body = "\n\n".join(s.render() for s in snippets)
    return [
        ("system", _SYSTEM.format(release=release)),
        ("human", f"Snippets:\n\n{body}\n\nExplain the crash and propose edits."),
    ]
