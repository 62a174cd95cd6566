"""Optional LLM assistance, checked in code before anyone sees it.

:func:`assist` runs on top of the deterministic :class:`~service.engine.answer.TriageResult`
only when an OpenAI-compatible endpoint is configured (``llm_base_url`` and
``llm_model``; ``llm_api_key`` may be omitted for local servers such as
SGLang, vLLM or Ollama). With no endpoint nothing happens and ``llm`` stays
``None``: the service is fully offline. This module calls the model;
:mod:`service.engine.llm.prompt` builds what it is sent and :mod:`service.engine.llm.checks` checks and
merges its answer.

**What the model sees.** Only retrieved context, as numbered snippets
(``S1``, ``S2`` ...): the launch command, the check (condition, message, code
excerpt), the guards of its path, the evaluated atoms with their values and
provenance, the result's references (declarations, help, writes) and the help
of the flags involved. Line numbers and ``path:line`` locations are scrubbed
from what is sent; the model cites snippet ids only.

**What it answers** (:class:`~service.engine.llm.prompt.LLMAnswer`): a ``summary`` (at most 30 words), a
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
  the edit goes through the fix verifier (:func:`service.engine.fixes.propose.verify`: the check
  must become definitely false and no neighbouring check may fire instead)
  and, when given, the rule checker ``rule_check(argv) -> (verdicts,
  has_error)``.

An edit the verifier can neither confirm nor refute (the check's inputs stay unknown after
the message's values, the model facts and the flags) is kept, labelled unverified in its
``verdict`` and ``llm["unverified"]``, and never recommended; the service's replay search
then judges it like any fix where replay reaches the check.
Whatever fails is dropped and listed in ``llm["rejected"]`` as ``{item,
reason}``. A passing edit becomes a :class:`~service.engine.answer.FixOut` with origin
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
three edits, each one :func:`service.engine.fixes.propose.verify`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Final

from pydantic import SecretStr, ValidationError

from service.engine.answer import LLMInfo, LLMSnippet, TriageResult
from service.engine.llm.checks import merge_answer
from service.engine.llm.prompt import (
    ANSWER_SCHEMA,
    AssistContext,
    LLMAnswer,
    build_messages,
    build_snippets,
)
from service.engine.settings import EngineSettings as Settings

__all__ = ["METHOD", "assist", "enabled"]

METHOD: Final = "json_schema"


def enabled(settings: Settings) -> bool:
    """True when an OpenAI-compatible endpoint is configured."""
    return bool(settings.llm_base_url and settings.llm_model)


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


def _api_key(key: SecretStr | str | None) -> SecretStr:
    """The LLM key as a :class:`SecretStr` (``EMPTY`` for local servers without keys);
    a plain ``str`` (a settings copy made with ``model_copy``) is wrapped, never logged."""
    if isinstance(key, SecretStr):
        return key if key.get_secret_value() else SecretStr("EMPTY")
    return SecretStr(key or "EMPTY")


def _ask(messages: list[tuple[str, str]], settings: Settings) -> LLMAnswer:
    from langchain_openai import ChatOpenAI

    if not settings.llm_model:  # callers ask only when :func:`enabled`
        raise ValueError("no LLM model is configured")
    # field names, not their aliases (``base_url``, ``model``, ...): the model populates by
    # name too, and only the names are in the signature the type checker sees
    llm = ChatOpenAI(
        openai_api_base=settings.llm_base_url,
        model_name=settings.llm_model,
        openai_api_key=_api_key(settings.llm_api_key),
        request_timeout=settings.llm_timeout_s,
        max_retries=0,
        temperature=0,
    )
    chain = llm.with_structured_output(ANSWER_SCHEMA, method=METHOD, strict=False, include_raw=True)
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
        except BaseException as exc:  # handed to the caller
            fut.set_exception(exc)

    threading.Thread(target=run, name="triage-llm", daemon=True).start()
    return fut.result(timeout=max(0.05, deadline_s))


# -- the entry point --------------------------------------------------------------------
def assist(result: TriageResult, *, engine_ctx: AssistContext, settings: Settings) -> TriageResult:
    """``result`` improved by the model where every part passes the checks (see module doc)."""
    if not enabled(settings):
        return result
    ctx = engine_ctx
    t0 = time.perf_counter()
    info = LLMInfo(used=False, model=settings.llm_model, method=METHOD)
    if result.status == "unlocated":
        info.error = "skipped: no located check to ground an answer in"
        return result.model_copy(update={"llm": info})
    snippets = build_snippets(result, ctx)
    info.snippets = [LLMSnippet(id=s.id, kind=s.kind, citation=s.citation) for s in snippets]
    messages = build_messages(snippets, ctx.release)
    try:
        answer = _with_deadline(lambda: _ask(messages, settings), settings.llm_timeout_s)
    except FutureTimeout:
        info.error = f"no answer within {settings.llm_timeout_s:g}s"
    except (ValidationError, ValueError) as exc:
        info.error = f"the answer did not match the schema: {str(exc)[:300]}"
    except Exception as exc:  # any endpoint failure keeps the deterministic answer
        info.error = f"{type(exc).__name__}: {str(exc)[:300]}"
    else:
        return merge_answer(result, answer, snippets, ctx, info, t0)
    info.elapsed_ms = round((time.perf_counter() - t0) * 1000, 1)
    return result.model_copy(update={"llm": info})
