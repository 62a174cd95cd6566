"""The crash report ``sglang-triage run`` and ``watch`` print and, when asked, send.

A :class:`CrashReport` is one ended launch attempt: its ``status`` (``startup_crash``:
SGLang exited before its ready line; ``not_startup``: it had been ready; ``ok``), the
bounded tail of its output, the triage of that tail (``result``; None when there is
nothing to triage or the triage failed, then ``error`` says why), the facts of the
machine it ran on and the command. ``key`` is a dedupe signature: the same crash
repeated by a restart policy has the same key (``count`` says how many times it was
seen).

``facts`` is a plain dict, each entry naming its source (see :mod:`service.watch.facts`)::

    {"release": {"version": "0.5.11", "source": "installed", "detail": "...",
                 "location": "...", "commit": None, "interpreter": "..."},
     "hardware": {"profile": "rtx-pro-6000-x8", "source": "nvidia-smi",
                  "evidence": "<first CSV row>", "detail": "...", "gpus": [...]},
     "model": {"path": "...", "source": "config.json", "detail": "...", ...},
     "env": {"SGLANG_X": "1"}, "notes": ["..."]}

:func:`apply_facts` stamps them on a triage answer (``release.method`` ``installed``,
``release.match`` ``exact`` when the answer is of that very release; ``hardware.source``
``detected``). :func:`send_report` posts a report to a sglang-triage service
(``POST {url}/triage``, bearer key from ``TRIAGE_REPORT_KEY`` when set) and/or to Slack
(``chat.postMessage`` with the bot token of the settings, at ``slack_api_url``); it
never raises on a network error and returns one note per destination. Nothing is sent
unless asked. Everything sent is redacted (:func:`service.engine.redact_payload`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from rich.console import Console
from rich.text import Text

from service.engine import (
    InstalledRelease,
    TriageResult,
    edit_lines,
    model_facts_line,
    redact_payload,
    upgrade_lines,
)
from service.settings import Settings, reveal

__all__ = [
    "REPORT_KEY_ENV",
    "STATUSES",
    "CrashReport",
    "apply_facts",
    "crash_key",
    "fact_lines",
    "render_answer",
    "reply_in_thread",
    "send_report",
]

STATUSES = ("startup_crash", "not_startup", "ok")
#: environment variable holding the bearer key for ``--report-to`` (never a command-line flag)
REPORT_KEY_ENV = "TRIAGE_REPORT_KEY"
#: tail lines shown in text and sent to Slack (the JSON keeps the whole bounded tail)
SHOWN_TAIL = 30
_HTTP_TIMEOUT_S = 20.0
_DIGITS = re.compile(r"\d+")
_HEX = re.compile(r"0x[0-9a-fA-F]{1,32}")


def crash_key(result: TriageResult | None, tail: list[str], status: str = "startup_crash") -> str:
    """A short dedupe signature of a crash: the release, located check and exception of the
    answer, else the last non-empty tail lines with numbers and addresses blanked (so the
    same crash repeated with new timestamps, pids or ports has the same key)."""
    if result is not None:
        loc = result.location.citation if result.location is not None else ""
        check = str(result.check.id) if result.check is not None else ""
        parts = [
            status,
            str(result.release.release),
            result.status,
            loc,
            check,
            result.parsed.exception or "",
            _DIGITS.sub("N", (result.parsed.message or "")[:300]),
        ]
    else:
        lines = [ln.strip()[:300] for ln in tail if ln.strip()][-3:]
        parts = [status, *(_DIGITS.sub("N", _HEX.sub("X", ln)) for ln in lines)]
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:16]


@dataclass
class CrashReport:
    """One ended launch attempt, its triage and the facts it was triaged with."""

    result: TriageResult | None
    tail: list[str]
    status: str  # "startup_crash" | "not_startup" | "ok"
    count: int = 1
    facts: dict[str, Any] = field(default_factory=dict)
    command: list[str] | None = None
    key: str = ""  # dedupe signature (crash_key when left empty)
    exit_code: int | None = None
    #: why there is no triage (the triage raised), or None
    error: str | None = None
    #: what send_report achieved: ``report_id``, ``report_url``, ``slack_ts``, ``slack_channel``
    sent: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {self.status!r}")
        if not self.key:
            self.key = crash_key(self.result, self.tail, self.status)

    def headline(self) -> str:
        """One sentence on what happened."""
        code = f" with exit code {self.exit_code}" if self.exit_code is not None else ""
        times = f" (seen {self.count} times)" if self.count > 1 else ""
        if self.status == "startup_crash":
            return f"SGLang exited{code} before its ready line: a start-up crash{times}"
        if self.status == "not_startup":
            return (
                f"SGLang exited{code} after its ready line: not a start-up crash{times}; "
                "not triaged as a launch-flag problem"
            )
        return f"SGLang exited{code} normally{times}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict: the whole bounded tail, the facts and the answer."""
        return {
            "status": self.status,
            "headline": self.headline(),
            "exit_code": self.exit_code,
            "count": self.count,
            "key": self.key,
            "command": self.command,
            "facts": self.facts,
            "tail": list(self.tail),
            "error": self.error,
            "sent": dict(self.sent),
            "result": self.result.model_dump(mode="json") if self.result is not None else None,
        }

    def render_text(
        self, console: Console, render: Callable[[TriageResult, Console], None] | None = None
    ) -> None:
        """Print the report: the headline, the facts with their sources, then the answer or,
        without one, the tail. ``render`` prints the answer (the CLI passes its
        ``render_result``; the default is :func:`render_answer`, this layer's short form)."""
        console.print(Text(f"sglang-triage: {self.headline()}", style="bold"))
        for line in fact_lines(self.facts, self.result):
            console.print(Text(line), soft_wrap=True)
        if self.error:
            console.print(Text(f"triage failed: {self.error}", style="yellow"))
        if self.result is not None and self.status == "startup_crash":
            # the hardware line is ours (detected); render_result would call it "from the log"
            shown = self.result
            if shown.hardware is not None and shown.hardware.source == "detected":
                shown = shown.model_copy(update={"hardware": None})
            (render or render_answer)(shown, console)
        elif self.tail and self.status != "ok":
            console.print(Text(f"last {min(len(self.tail), SHOWN_TAIL)} lines:", style="dim"))
            for line in self.tail[-SHOWN_TAIL:]:
                console.print(Text(line), soft_wrap=True, highlight=False)
        for key in ("report_url", "slack_ts"):
            if self.sent.get(key):
                console.print(Text(f"{key.replace('_', ' ')}: {self.sent[key]}", style="dim"))


# ------------------------------------------------------------------------------- facts


def fact_lines(facts: dict[str, Any], result: TriageResult | None = None) -> list[str]:
    """``release: 0.5.11 exact (installed; ...)``, ``hardware: h100-x8 detected (...)``,
    ``model: ...``, ``env: ...``: the facts and where each came from."""
    lines: list[str] = []
    rel = facts.get("release") or {}
    if rel.get("version"):
        answered = result.release.release if result is not None else None
        how = (
            "exact"
            if answered in (None, rel["version"])
            else f"not in the KB, answered from {answered}"
        )
        if rel.get("source") != "installed":
            how = (
                "given"
                if answered in (None, rel["version"])
                else f"given, answered from {answered}"
            )
        extra = f", commit {rel['commit']}" if rel.get("commit") else ""
        lines.append(
            f"release: {rel['version']} {how} ({rel.get('source', '?')}{extra}; "
            f"{rel.get('detail', '')})".replace("; )", ")")
        )
    hw = facts.get("hardware") or {}
    if hw:
        name = hw.get("profile") or "no known profile"
        ev = f': "{str(hw["evidence"])[:160]}"' if hw.get("evidence") else ""
        detail = f"; {hw['detail']}" if hw.get("detail") else ""
        how = "declared" if hw.get("source") == "given" else "detected"
        lines.append(f"hardware: {name} {how} ({hw.get('source', '?')}{ev}{detail})")
    model = facts.get("model") or {}
    if model.get("path"):
        arch = ", ".join(model.get("architectures") or []) or "architecture unknown"
        lines.append(f"model: {model['path']} ({arch}; {model.get('source', '?')})")
    env = facts.get("env") or {}
    if env:
        shown = ", ".join(f"{k}={v}" for k, v in list(env.items())[:8])
        more = f" and {len(env) - 8} more" if len(env) > 8 else ""
        lines.append(f"env: {shown}{more} (environment of the launch)")
    lines.extend(f"note: {n}" for n in facts.get("notes") or [])
    return lines


def apply_facts(result: TriageResult, facts: dict[str, Any]) -> TriageResult:
    """The answer with the machine's facts stamped on it (a new answer; ``result`` is left
    as it is).

    With an installed release the answer's ``release`` gains ``installed`` (version,
    location, commit, interpreter), ``source: installed`` and ``match``: ``exact`` when the
    answer is of that release (``method`` becomes ``installed``), else ``nearest``. A
    detected hardware profile that the answer used becomes ``hardware.source: detected``
    with the nvidia-smi/rocm-smi evidence."""
    rel = facts.get("release") or {}
    if rel.get("version") and rel.get("source") == "installed":
        exact = result.release.release == rel["version"]
        installed = InstalledRelease.model_validate(
            {k: rel.get(k) for k in ("version", "location", "commit", "interpreter", "detail")}
        )
        stamp: dict[str, Any] = {
            "installed": installed,
            "source": "installed",
            "match": "exact" if exact else "nearest",
        }
        if exact:
            stamp["method"] = "installed"
        result = result.model_copy(update={"release": result.release.model_copy(update=stamp)})
    hw = facts.get("hardware") or {}
    if (
        hw.get("profile")
        and hw.get("source") != "given"
        and result.hardware is not None
        and result.hardware.name == hw["profile"]
    ):
        detected = result.hardware.model_copy(
            update={
                "source": "detected",
                "evidence": str(hw.get("evidence") or "")[:500],
                "detail": str(hw.get("detail") or hw.get("source") or "")[:500],
            }
        )
        result = result.model_copy(update={"hardware": detected})
    return result


def render_answer(result: TriageResult, console: Console) -> None:
    """A short text form of an answer: summary, release, failing check, rule, upgrade, the
    first fixes (edit lines and the whole command on one unwrapped line), unknowns."""
    rel = result.release
    console.print(Text(result.summary, style="bold"), soft_wrap=True)
    console.print(
        Text(
            f"release {rel.release} ({rel.method}, confidence "
            f"{rel.confidence}); answer confidence {result.confidence}"
        )
    )
    if result.location is not None:
        console.print(
            Text(f"failing check: {result.location.function} at {result.location.citation}")
        )
    if result.rule:
        console.print(Text(f"rule: {result.rule}"), soft_wrap=True)
    line = model_facts_line(result.model_facts)
    if line:
        console.print(Text(line), soft_wrap=True)
    for line in upgrade_lines(result.upgrade_fix):
        console.print(Text(line), soft_wrap=True)
    for fix in result.fixes[:3]:
        console.print(
            Text(f"fix {fix.rank}{' (recommended)' if fix.recommended else ''}: {fix.verdict}"),
            soft_wrap=True,
        )
        for edit in edit_lines(fix):
            console.print(Text(f"  {edit}"))
        console.print(fix.command, markup=False, highlight=False, soft_wrap=True, crop=False)
    if result.no_flag_fix:
        console.print(Text(f"no flag fix: {result.no_flag_fix}"), soft_wrap=True)
    for u in result.unknowns[:5]:
        console.print(Text(f"unknown {u.what}: {u.why} (settle: {u.settle})"), soft_wrap=True)


# ------------------------------------------------------------------------------ sending


def _triage_url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith("/triage") else f"{base}/triage"


def _request_body(report: CrashReport) -> dict[str, Any]:
    """The ``POST /triage`` body (the API's ``TriageRequest``): the tail, the command and
    the facts the service cannot see (release, hardware profile, model architecture)."""
    body: dict[str, Any] = {"log": "\n".join(report.tail)}
    if report.command:
        body["command"] = list(report.command)
    rel, hw, model = (report.facts.get(k) or {} for k in ("release", "hardware", "model"))
    if rel.get("version"):
        body["release"] = str(rel["version"])
    if hw.get("profile"):
        body["hardware"] = str(hw["profile"])
    if model.get("path"):
        body["model"] = str(model["path"])
    if model.get("architectures"):
        body["model_arch"] = str(model["architectures"][0])
    return redact_payload(body)


def _send_team(report: CrashReport, url: str) -> str:
    target = _triage_url(url)
    headers = {"content-type": "application/json"}
    key = os.environ.get(REPORT_KEY_ENV, "").strip()
    if key:
        headers["authorization"] = f"Bearer {key}"
    try:
        resp = httpx.post(
            target,
            json=_request_body(report),
            headers=headers,
            timeout=_HTTP_TIMEOUT_S,
            follow_redirects=False,
        )
    except httpx.HTTPError as exc:
        return f"not sent to {target}: {type(exc).__name__}: {str(exc)[:200]}"
    if resp.status_code != 200:
        return f"not sent to {target}: HTTP {resp.status_code} {resp.text[:200]}"
    try:
        tid = resp.json().get("id")
    except ValueError:
        tid = None
    if tid:
        report.sent["report_id"] = str(tid)
        report.sent["report_url"] = f"{url.rstrip('/').removesuffix('/triage')}/t/{tid}"
        return f"sent to {target}: triage {tid} ({report.sent['report_url']})"
    return f"sent to {target}"


def _slack_message(report: CrashReport) -> tuple[str, list[dict[str, Any]]]:
    """Fallback text and Block Kit blocks: the headline and facts, then the bot's own answer
    blocks (:func:`service.slack.blocks.triage_blocks`), or the tail without an answer."""
    from service.slack.blocks import code, context, esc, section, triage_blocks

    facts = [esc(line) for line in fact_lines(report.facts, report.result)][:6]
    head = [section(f":rotating_light: *{esc(report.headline())}*")]
    if facts:
        head.append(context(*facts))
    text = report.headline()
    if report.result is not None and report.status == "startup_crash":
        shown = report.result
        if shown.hardware is not None and shown.hardware.source == "detected":
            shown = shown.model_copy(update={"hardware": None})  # the facts line says it
        fallback, blocks = triage_blocks(shown, report.sent.get("report_url"))
        return f"{text}\n{fallback}", (head + blocks)[:48]
    if report.error:
        head.append(context(esc(f"triage failed: {report.error}")))
    if report.tail:
        head.append(section(code("\n".join(report.tail[-SHOWN_TAIL:]))))
    return text, head


def _post_slack(settings: Settings, payload: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """``chat.postMessage`` with the bot token of ``settings``: (Slack's answer, "") when it
    took the message, else (None, why not). Never raises; the payload is redacted."""
    token = reveal(settings.slack_bot_token)
    if not token:
        return None, "TRIAGE_SLACK_BOT_TOKEN is not set"
    base = (settings.slack_api_url or "https://slack.com/api/").rstrip("/")
    try:
        resp = httpx.post(
            f"{base}/chat.postMessage",
            json=redact_payload(payload, extra=[token]),
            timeout=_HTTP_TIMEOUT_S,
            headers={"authorization": f"Bearer {token}"},
        )
        data = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"
    if not isinstance(data, dict) or not data.get("ok"):
        err = data.get("error") if isinstance(data, dict) else None
        return None, str(err or f"HTTP {resp.status_code}")
    return data, ""


def _send_slack(
    report: CrashReport, channel: str, thread_ts: str | None, settings: Settings
) -> str:
    text, blocks = _slack_message(report)
    payload: dict[str, Any] = {"channel": channel, "text": text[:3000], "blocks": blocks}
    if thread_ts:
        payload["thread_ts"] = thread_ts
    data, why = _post_slack(settings, payload)
    if data is None:
        return f"not sent to Slack channel {channel}: {why}"
    ts = str(data.get("ts") or "")
    report.sent["slack_ts"], report.sent["slack_channel"] = ts, str(data.get("channel") or channel)
    return f"posted to Slack channel {channel} (ts {ts})"


def reply_in_thread(channel: str, thread_ts: str, text: str, settings: Settings) -> str:
    """One short reply in a report's Slack thread (a repeat's count); a note of what happened."""
    data, why = _post_slack(
        settings, {"channel": channel, "thread_ts": thread_ts, "text": text[:3000]}
    )
    if data is None:
        return f"no reply in Slack channel {channel}: {why}"
    return f"replied in the Slack thread {thread_ts}"


def send_report(
    report: CrashReport,
    *,
    report_to: str | None,
    slack_channel: str | None,
    thread_ts: str | None = None,
    settings: Settings,
) -> list[str]:
    """Send ``report`` where asked; one note per destination (sent, or why not).

    ``report_to`` (a sglang-triage service's base URL, or its ``/triage`` URL) gets the
    tail, command and facts as ``POST /triage``, for start-up crashes only: the service
    triages it again, stores it and its ``/t/{id}`` permalink is noted in ``report.sent``.
    ``slack_channel`` gets the report via ``chat.postMessage`` (in ``thread_ts`` when
    given); a report with status ``ok`` is not posted. Never raises on a network error."""
    notes: list[str] = []
    if report_to:
        if report.status == "startup_crash":
            notes.append(_send_team(report, report_to))
        else:
            notes.append(f"not sent to {report_to}: not a start-up crash")
    if slack_channel:
        if report.status == "ok":
            notes.append(f"not sent to Slack channel {slack_channel}: SGLang exited normally")
        else:
            notes.append(_send_slack(report, slack_channel, thread_ts, settings))
    return notes
