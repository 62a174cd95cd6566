"""Optional LLM assistance, checked in code before anyone sees it.

:func:`assist` runs on top of the deterministic :class:`~.models.TriageResult`
only when an OpenAI-compatible endpoint is configured (``llm_base_url`` and
``llm_model``; ``llm_api_key`` may be omitted for local servers such as
SGLang, vLLM or Ollama). With no endpoint nothing happens and ``llm`` stays
``None``: the service is fully offline.

**What the model sees.** Only retrieved context, as numbered snippets
(``S1``, ``S2`` ...): the launch command, the check (condition, message, code
excerpt), the guards of its path, the evaluated atoms with their values and
provenance, the result's references (declarations, help, writes) and the help
of the flags involved. Line numbers and ``path:line`` locations are scrubbed
from what is sent; the model cites snippet ids only.

**What it answers** (:class:`LLMAnswer`): a ``summary`` (at most 30 words), a
markdown ``explanation`` citing ``[S2]``-style ids, and up to three ``edits``
of the launch command (``{"set": {"--flag": value}, "remove": ["--flag"]}``).

**What is checked** before the answer is used:

* every cited id must be one of the snippets sent; a sentence citing another
  id, claiming a line number (``line 123``, ``file.py:123``, ``:123``),
  naming a flag that is not in the release's catalog, or a diff (hunk
  headers, ``+``/``-`` code lines, a ``diff`` fence) is dropped; an
  explanation left citing nothing is rejected as a whole (the deterministic
  one stays);
* every flag of an edit must be a spelling (or attribute) of the release's
  catalog; the edited command must parse with the release's argparse rules;
  the edit goes through the fix verifier (:func:`.fixes.verify`: the check
  must become definitely false and no neighbouring check may fire instead)
  and, when given, the rule checker ``rule_check(argv) -> (verdicts,
  has_error)``.

Whatever fails is dropped and listed in ``llm["rejected"]`` as ``{item,
reason}``. A passing edit becomes a :class:`~.models.FixOut` with origin
``"llm"``, appended after the deterministic fixes (an edit giving the same
command as a deterministic fix is not repeated, see ``llm["agrees_with"]``).
**Recommendation rule:** the deterministic recommended fix stays recommended;
a model fix is recommended only when it passes every check and no
deterministic fix is recommended. Citations in the final explanation are
rewritten from ``[S2]`` to the snippet's ``release:path:line`` taken from our
own data, and a "Verified fix" line built from the checked fixes is appended.

**Structured output.** LangChain's ``ChatOpenAI.with_structured_output`` with
``method="json_schema"`` and ``strict=False``, given the JSON schema as a
dict: the endpoint receives ``response_format={"type": "json_schema", ...}``
(constrained decoding on SGLang, vLLM, Ollama and OpenAI; a server that
ignores it still works when it returns the JSON object as text, possibly
fenced). The parsed dict is validated with pydantic here, so nothing depends
on the server's strict-mode support. ``include_raw=True`` keeps a parse
failure an answer-level error instead of an exception.

**Deadline.** The call runs in a daemon thread and is abandoned after
``llm_timeout_s`` (client timeouts can exceed it on hangs); a timeout or any
endpoint error keeps the deterministic answer with ``llm = {"used": False,
"error": ...}``. The local checks that follow an answer are bounded (at most
three edits, each one :func:`.fixes.verify`).
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ..config import Settings
from ..ingest.catalog import Catalog, FlagSpec
from ..kb.catalogs import load_catalog
from ..kb.store import Store
from .evaluation import base_attrs
from .expr import Value
from .fixes import Edit, verify
from .flags import apply_edits, parse_argv, render_command
from .models import FixOut, RuleVerdict, TriageResult, tri

__all__ = ["AssistContext", "LLMAnswer", "LLMEdit", "RuleCheck", "Snippet", "assist",
           "build_snippets", "context_from_result", "enabled"]

#: ``rule_check(argv) -> (verdicts, has_error)``; verdicts are RuleVerdict or dicts.
RuleCheck = Callable[[list[str]], tuple[Sequence[Any], bool]]

METHOD = "json_schema"
MAX_EDITS = 3
MAX_SUMMARY_WORDS = 30
_MAX_REFS = 12
_MAX_HELP = 12
_DEFAULT_PREFIX = "python -m sglang.launch_server"


# -- the answer -------------------------------------------------------------------------
class LLMEdit(BaseModel):
    """One change to the launch command, in flag spellings."""

    set: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="flag spelling -> new value")
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
    """What :func:`assist` needs beyond the result: the engine's own inputs.

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
    check: dict[str, Any] | None = None
    rule_check: RuleCheck | None = None
    prefix: str = _DEFAULT_PREFIX


def context_from_result(store: Store, result: TriageResult, *, attrs: dict[str, Value] | None = None,
                        facts: dict[str, Value] | None = None,
                        rule_check: RuleCheck | None = None) -> AssistContext:
    """Rebuild an :class:`AssistContext` from a result (attrs from argv when not given)."""
    release = str(result.release.get("release"))
    catalog = load_catalog(store, release)
    argv = list(result.parsed.command or [])
    if attrs is None:
        attrs = base_attrs(catalog, parse_argv(argv, catalog))
    check = None
    if result.check is not None and result.location is not None:
        rows = store.checks(release, path=result.location.path, where="id = ?",
                            params=[result.check.id])
        check = rows[0] if rows else None
    return AssistContext(store=store, release=release, catalog=catalog, argv=argv, attrs=attrs,
                         facts=dict(facts or {}), check=check, rule_check=rule_check,
                         prefix=_prefix_of(result, argv))


def _prefix_of(result: TriageResult, argv: list[str]) -> str:
    for fix in result.fixes:
        tail = shlex.join(fix.argv)
        if tail and fix.command.endswith(tail):
            return fix.command[: -len(tail)].strip() or _DEFAULT_PREFIX
    return _DEFAULT_PREFIX


def enabled(settings: Settings) -> bool:
    """True when an OpenAI-compatible endpoint is configured."""
    return bool(settings.llm_base_url and settings.llm_model)


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
    add("input", "the user's launch command and crash",
        f"command: {shlex.join(ctx.argv) or '(not in the log)'}\ncrash: {crash}", None)
    loc, chk = result.location, result.check
    if loc is not None and chk is not None:
        code = textwrap.dedent("\n".join(e.text for e in loc.excerpt))
        marked = "\n".join(("> " if e.highlight else "  ") + line for e, line in
                           zip(loc.excerpt, code.splitlines(), strict=False))
        text = (f"{'bare ' if chk.bare else ''}{chk.kind} raising {chk.exc_type or 'an exception'}\n"
                f"condition: {textwrap.dedent(chk.condition or '').strip() or '(none)'}\n"
                f"message: {chk.message or '(none)'}\ncode (the check marked with >):\n{marked}")
        add("check", f"{loc.function} in {loc.path}", text, loc.citation)
        for g in chk.guards:
            need = "must hold" if g.get("polarity") else "must not hold"
            cite = f"{ctx.release}:{loc.path}:{g['line']}" if g.get("line") else loc.citation
            add("guard", f"{g.get('kind', 'if')} in {loc.function}",
                f"{textwrap.dedent(g.get('condition') or '').strip()} ({need} for the check to run)",
                cite)
    if result.evaluation is not None and loc is not None:
        ev = result.evaluation
        guard_cites = [(_norm(g.get("condition") or ""), f"{ctx.release}:{loc.path}:{g['line']}")
                       for g in (chk.guards if chk else []) if g.get("line")]
        add("evaluation", "the check's path condition with this command",
            f"fires: {ev.fired}" + "".join(f"\ncaveat: {c}" for c in ev.caveats[:6]), loc.citation)
        for atom in ev.atoms:
            cite = loc.citation
            if atom.role == "guard":  # cite the guard the atom belongs to when it is known
                text = _norm(atom.text)
                cite = next((c for cond, c in guard_cites if text in cond), loc.citation)
            inputs = "; ".join(f"{i.name} = {i.value!r} from {i.source}"
                               + (f" ({i.detail})" if i.detail else "") for i in atom.inputs)
            add("evaluation", f"{atom.role} atom",
                f"`{atom.text}` is {atom.value}"
                + (" (pushes towards firing)" if atom.failing else "")
                + f"; inputs: {inputs or 'none'}", cite)
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
    return [("system", _SYSTEM.format(release=release)),
            ("human", f"Snippets:\n\n{body}\n\nExplain the crash and propose edits.")]


# -- calling the model ------------------------------------------------------------------
def _json_from_text(text: str) -> Any:
    """The first JSON object in ``text`` (fenced or bare)."""
    start = text.find("{")
    while start >= 0:
        try:
            obj, _ = json.JSONDecoder().raw_decode(text[start:])
            return obj
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    raise ValueError("no JSON object in the answer")


def _ask(messages: list[tuple[str, str]], settings: Settings) -> LLMAnswer:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=settings.llm_base_url, model=settings.llm_model,
                     api_key=settings.llm_api_key or "EMPTY",  # type: ignore[arg-type]
                     timeout=settings.llm_timeout_s, max_retries=0, temperature=0)
    chain = llm.with_structured_output(ANSWER_SCHEMA, method=METHOD, strict=False,
                                       include_raw=True)
    out = chain.invoke(messages)
    parsed = out.get("parsed") if isinstance(out, dict) else None
    if parsed is None:
        raw = out.get("raw") if isinstance(out, dict) else None
        content = getattr(raw, "content", "") or ""
        parsed = _json_from_text(content if isinstance(content, str) else json.dumps(content))
    return LLMAnswer.model_validate(parsed)


def _with_deadline(fn: Callable[[], LLMAnswer], deadline_s: float) -> LLMAnswer:
    """Run ``fn`` in a daemon thread; give up after ``deadline_s`` whatever the client does."""
    fut: Future[LLMAnswer] = Future()

    def run() -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            fut.set_exception(exc)

    threading.Thread(target=run, name="triage-llm", daemon=True).start()
    return fut.result(timeout=max(0.05, deadline_s))


# -- checking text ----------------------------------------------------------------------
_CITE_GROUP = re.compile(r"\[\s*(S\d+(?:\s*[,;]\s*S\d+)*)\s*\]")
_SID = re.compile(r"S\d+")
_LINE_CLAIMS = (
    (re.compile(r"\blines?\s*#?\s*\d+", re.I), "claims a line number"),
    (re.compile(r"(?<![\d:]):\d+\b"), "claims a file:line location"),
    (re.compile(r"#L\d+|\bL\d{2,}\b"), "claims a line number"),
)
_DIFF_LINE = re.compile(r"^\s*(?:@@ .*@@|(?:\+\+\+|---) (?:a/|b/|/dev/null)|[+-]\s{0,8}"
                        r"(?:def |class |assert |if |elif |else:|raise |return |import |self\.))")
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


def check_edit(edit: LLMEdit, ctx: AssistContext, result: TriageResult
               ) -> tuple[FixOut | None, str | None, int | None]:
    """-> (fix, rejection reason, rank of the deterministic fix it equals)."""
    cat, table = ctx.catalog, flag_table(ctx)
    before = parse_argv(ctx.argv, cat)
    typos = {k for k in edit.remove if k in before.unknown}  # the user's own unknown tokens
    unknown = [k for k in [*edit.set, *edit.remove] if k not in table and k not in typos]
    if unknown:
        return None, f"{', '.join(unknown)}: not a flag of SGLang {ctx.release}", None
    specs = {k: table[k] for k in [*edit.set, *edit.remove] if k not in typos}
    to_set = {specs[k].flags[0]: (value if specs[k].takes_value else _as_bool(value))
              for k, value in edit.set.items()}
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
    typed = Edit(set={a: after.values[a].value for a in attrs if a in after.values},
                 remove=[a for a in attrs if a not in after.values], origin="llm")
    trips: list[dict[str, Any]] = []
    unknown_n = 0
    if ctx.check is not None:
        v = verify(ctx.store, ctx.release, ctx.check, typed, ctx.attrs, ctx.facts, cat)
        if v.fixes_check is not True:
            why = ("the check would still fire" if v.fixes_check is False
                   else "cannot show that the check passes (inputs unknown)")
            return None, why, None
        if v.trips:
            t = v.trips[0]
            return None, (f"fixes the check, but then {t['function']} at "
                          f"{ctx.release}:{t['path']}:{t['line']} would fire"), None
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
            bad = [f"{r.rule}: {r.reason}" if r.reason else r.rule for r in verdicts
                   if r.verdict == "violated"]
            return None, "violates " + ("; ".join(bad) or "a rule"), None
    extra = f" ({unknown_n} related checks undecided)" if unknown_n else ""
    by_flag = cat.by_flag()
    spelled = {k: after.values[by_flag[k].attr].value if by_flag[k].attr in after.values else v
               for k, v in to_set.items()}
    return FixOut(rank=len(result.fixes) + 1, set=spelled, remove=to_remove, argv=new_argv,
                  command=render_command(new_argv, prefix=ctx.prefix), origin="llm",
                  fixes_check=tri(passes), trips=trips, unknown_neighbours=unknown_n,
                  verdict=f"proposed by the model and verified: fixes the check; no other check "
                          f"of {ctx.release} that reads these flags fires{extra}",
                  rule_verdicts=verdicts), None, None


# -- the entry point --------------------------------------------------------------------
def _footer(result: TriageResult, release: str) -> str:
    rec = next((f for f in result.fixes if f.recommended), None)
    if rec is not None:
        who = "the model's fix, " if rec.origin == "llm" else ""
        return (f"\n\n**Verified fix** ({who}checked against {release}):\n\n```\n{rec.command}\n```"
                f"\n\n{rec.verdict}")
    if result.no_flag_fix:
        return f"\n\n**No verified flag fix:** {result.no_flag_fix}"
    return ""


def assist(result: TriageResult, *, engine_ctx: AssistContext, settings: Settings) -> TriageResult:
    """``result`` improved by the model where every part passes the checks (see module doc)."""
    if not enabled(settings):
        return result
    ctx = engine_ctx
    t0 = time.perf_counter()
    info: dict[str, Any] = {"used": False, "model": settings.llm_model, "method": METHOD}
    if result.status == "unlocated":
        info["error"] = "skipped: no located check to ground an answer in"
        return result.model_copy(update={"llm": info})
    snippets = build_snippets(result, ctx)
    info["snippets"] = [{"id": s.id, "kind": s.kind, "citation": s.citation} for s in snippets]
    messages = build_messages(snippets, ctx.release)
    try:
        answer = _with_deadline(lambda: _ask(messages, settings), settings.llm_timeout_s)
    except FutureTimeout:
        info["error"] = f"no answer within {settings.llm_timeout_s:g}s"
    except (ValidationError, ValueError) as exc:
        info["error"] = f"the answer did not match the schema: {str(exc)[:300]}"
    except Exception as exc:  # noqa: BLE001 - any endpoint failure keeps the deterministic answer
        info["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    else:
        return _merge(result, answer, snippets, ctx, info, t0)
    info["elapsed_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    return result.model_copy(update={"llm": info})


def _merge(result: TriageResult, answer: LLMAnswer, snippets: list[Snippet], ctx: AssistContext,
           info: dict[str, Any], t0: float) -> TriageResult:
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
            fix.recommended = not det_recommended and not any(f.recommended for f in fixes)
            fixes.append(fix)
            added.append(fix.rank)
    update["fixes"] = fixes
    # explanation
    clean, dropped = check_text(answer.explanation, ids, flags)
    rejected += dropped
    cited = sorted({s for g in _CITE_GROUP.findall(clean) for s in _SID.findall(g)},
                   key=lambda s: int(s[1:]))
    explanation_ok = bool(cited)
    if explanation_ok:
        view = result.model_copy(update={"fixes": fixes})
        update["explanation"] = rewrite_citations(clean, snippets) + _footer(view, ctx.release)
        by_id = {s.id: s for s in snippets}
        extra = [by_id[s].citation for s in cited if by_id[s].citation]
        update["citations"] = list(dict.fromkeys([*result.citations, *extra]))  # type: ignore[list-item]
        info["deterministic_explanation"] = result.explanation
    else:
        rejected.append({"item": f"explanation: {answer.explanation[:200]}",
                         "reason": "cites none of the snippets given once the checks are applied"})
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
    info.update(used=explanation_ok or bool(added),
                explanation="accepted" if explanation_ok else "rejected",
                summary="accepted" if "summary" in update else "rejected",
                cited=cited, fixes_added=added, agrees_with=agrees, rejected=rejected,
                elapsed_ms=round((time.perf_counter() - t0) * 1000, 1))
    if not info["used"]:
        info["error"] = "nothing in the answer passed the checks"
    return result.model_copy(update={**update, "llm": info})
