"""``sglang-triage watch``: follow a log stream, triage each start-up crash once, and turn a
crash loop into one report with a count.

:class:`Watcher` takes lines (and idle ticks) from a source (:mod:`service.watch.stream`),
cuts them into launch attempts (:class:`~service.watch.attempts.Segmenter`) and, for each
attempt that crashed or exited, decides:

* **a start-up crash** (no ready line before it): the attempt's lines (the crashing
  rank's only, transport prefixes stripped) are triaged with
  :meth:`service.usecase.TriageUseCase.answer`, with ``--release``/``--hardware`` and the hardware of
  ``--gpus-from`` (a recorded ``nvidia-smi`` CSV, :func:`~service.watch.gpus.hardware_from_smi`;
  the answer then says ``hardware.source: detected``);
* **not a start-up crash** (it had been ready): reported with its tail, not triaged;
* **a repeat**: the same command line and the same cause (exception type, normalised
  message, located check) as a crash already reported. The stream's own signature
  (command, exception line, innermost frame) is checked first, so a crash loop is
  triaged once, not once per restart. A repeat is a ``repeat`` event with the report's
  key and the new count ("still the same cause"), never a second report; a changed
  command or a new cause is a new report.

Remembered reports and signatures are bounded (:data:`MAX_REMEMBERED`, least recently
seen forgotten first). Output (:class:`Output`): text or JSON lines on stdout (one
``report`` event per report, one ``repeat`` event per repeat), ``--report-to`` (the team
service; a report is sent once, repeats are not re-sent) and ``--slack-channel`` (the
report is posted; repeats reply in its thread at counts 2, 3, 5, 10, 20, 50, 100, …, so a
night-long loop does not flood the channel).
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from kb.errors import TriageError
from service.engine import Engine, TriageResult
from service.settings import Settings
from service.usecase import TriageRequest, TriageUseCase
from service.watch.attempts import Attempt, Segmenter, command_key, normalise, signature
from service.watch.gpus import hardware_from_smi
from service.watch.report import CrashReport, apply_facts, reply_in_thread, send_report
from service.watch.stream import ClientSource, SourceError, fd_lines, file_lines

__all__ = [
    "MAX_REMEMBERED",
    "REPORT_TAIL",
    "Output",
    "WatchEvent",
    "Watcher",
    "slack_reply_due",
    "watch_command",
]

MAX_REMEMBERED = 256
REPORT_TAIL = 200  # lines of an attempt a report carries (the triage reads more)


@dataclass
class WatchEvent:
    """What one settled attempt produced: a new ``report``, or a ``repeat`` of one."""

    kind: str  # "report" | "repeat"
    report: CrashReport
    attempt: int
    count: int
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """One JSON line: a ``report`` event carries the whole report, a ``repeat`` event
        the report's key, the new count and "still the same cause"."""
        if self.kind == "report":
            return {
                "event": "report",
                "attempt": self.attempt,
                **self.report.to_json(),
                "notes": self.notes,
            }
        return {
            "event": "repeat",
            "attempt": self.attempt,
            "key": self.report.key,
            "count": self.count,
            "status": self.report.status,
            "exit_code": self.report.exit_code,
            "headline": repeat_line(self),
            "notes": self.notes,
        }


def repeat_line(event: WatchEvent) -> str:
    """``attempt 3: the same crash again (3 times), still the same cause: <summary>``."""
    what = (
        event.report.result.summary
        if event.report.result is not None
        else event.report.headline().split(":")[0]
    )
    return (
        f"attempt {event.attempt}: the same crash again ({event.count} times), "
        f"still the same cause: {what}"
    )


def _fit(lines: list[str], limit: int) -> str:
    """The lines joined, within ``limit`` UTF-8 bytes (what the engine accepts): the first
    lines (the command) and as many of the last (the traceback) as fit."""
    sizes = [len(line.encode("utf-8", "surrogatepass")) + 1 for line in lines]
    if sum(sizes) <= limit:
        return "\n".join(lines)
    head = 0
    size = 0
    while head < min(50, len(lines)) and size + sizes[head] <= limit // 4:
        size += sizes[head]
        head += 1
    start = len(lines)
    while start > head and size + sizes[start - 1] <= limit:
        start -= 1
        size += sizes[start]
    return "\n".join([*lines[:head], *lines[start:]])


class Watcher:
    """Attempts in, :class:`WatchEvent` out (see the module docstring).

    ``triaged`` counts the triages run; ``settled`` the attempts that ended in a crash.
    """

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        *,
        release: str | None = None,
        hardware: str | None = None,
        facts: dict[str, Any] | None = None,
        max_remembered: int = MAX_REMEMBERED,
    ) -> None:
        self.engine, self.settings = engine, settings
        self.release = release
        self.facts = dict(facts or {})
        self.hardware = hardware or (self.facts.get("hardware") or {}).get("profile")
        self.max_remembered = max_remembered
        self.segmenter = Segmenter()
        self.reports: OrderedDict[str, CrashReport] = OrderedDict()
        self.aliases: OrderedDict[str, str] = OrderedDict()  # stream signature -> report key
        self.triaged = 0
        self.settled = 0

    # -- lines in ----------------------------------------------------------------------
    def feed(self, line: str | None) -> list[WatchEvent]:
        """One line (``None``: an idle tick); the events it settled."""
        done = self.segmenter.tick() if line is None else self.segmenter.feed(line)
        return [e for a in done if (e := self.handle(a)) is not None]

    def close(self) -> list[WatchEvent]:
        """The end of the stream: the last attempt's event, if it crashed."""
        return [e for a in self.segmenter.close() if (e := self.handle(a)) is not None]

    def run(self, lines: Iterable[str | None], emit: Callable[[WatchEvent], None]) -> None:
        """Feed every line of ``lines`` and hand each event to ``emit``, then close. The
        source is closed however this ends (a client's process is stopped on Ctrl-C)."""
        source = iter(lines)
        try:
            for line in source:
                for event in self.feed(line):
                    emit(event)
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        for event in self.close():
            emit(event)

    # -- attempts ----------------------------------------------------------------------
    def _remember(self, table: OrderedDict[str, Any], key: str, value: Any) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > self.max_remembered:
            table.popitem(last=False)

    def _repeat(self, key: str, attempt: Attempt) -> WatchEvent:
        report = self.reports[key]
        report.count += 1
        self.reports.move_to_end(key)
        if attempt.exit_code is not None:
            report.exit_code = attempt.exit_code
        return WatchEvent("repeat", report, attempt.index, report.count)

    def handle(self, attempt: Attempt) -> WatchEvent | None:
        """The event of one settled attempt: None when it exited cleanly."""
        if attempt.crash is None:
            return None  # exited with status 0, or without a crash we can see
        self.settled += 1
        status = "not_startup" if attempt.up else "startup_crash"
        pre = attempt.presignature(status)
        if pre in self.aliases and self.aliases[pre] in self.reports:
            self._remember(self.aliases, pre, self.aliases[pre])
            return self._repeat(self.aliases[pre], attempt)
        lines = attempt.crash_lines()
        result, error = None, None
        if status == "startup_crash":
            result, error = self._triage(_fit(lines, int(self.settings.max_body_bytes * 0.9)))
        command = attempt.argv() or (
            list(result.parsed.command) if result is not None and result.parsed.command else None
        )
        if result is not None:
            loc = result.location.citation if result.location is not None else None
            key = signature(
                "report",
                status,
                command_key(" ".join(command or [])),
                result.parsed.exception or result.status,
                normalise(result.parsed.message or ""),
                loc,
            )
        else:
            key = signature("report", pre)
        self._remember(self.aliases, pre, key)
        if key in self.reports:
            return self._repeat(key, attempt)
        report = CrashReport(
            result=result,
            tail=lines[-REPORT_TAIL:],
            status=status,
            count=1,
            facts=self.facts,
            command=command,
            key=key,
            exit_code=attempt.exit_code,
            error=error,
        )
        self._remember(self.reports, key, report)
        return WatchEvent("report", report, attempt.index, 1)

    def _triage(self, text: str) -> tuple[TriageResult | None, str | None]:
        self.triaged += 1
        try:
            request = TriageRequest(text, release=self.release, hardware=self.hardware)
            result = TriageUseCase(self.engine, self.settings).answer(request)
        except TriageError as exc:
            return None, exc.message
        except Exception as exc:
            return None, f"{type(exc).__name__}: {str(exc)[:300]}"
        if self.facts:
            result = apply_facts(result, self.facts)
        return result, None


# ------------------------------------------------------------------------------ output


def slack_reply_due(count: int) -> bool:
    """Whether a repeat seen ``count`` times gets a thread reply: 2 and 3, then 5, 10, 20,
    50, 100, 200, 500, …"""
    if count in (2, 3):
        return True
    if count < 5:
        return False
    while count % 10 == 0:
        count //= 10
    return count in (1, 2, 5)


class Output:
    """Where events go: stdout (text or JSON lines), the team service, a Slack thread."""

    def __init__(
        self,
        settings: Settings,
        *,
        as_json: bool,
        report_to: str | None = None,
        slack_channel: str | None = None,
        console: Console | None = None,
        stream: Any = None,
    ) -> None:
        self.settings, self.as_json = settings, as_json
        self.report_to, self.slack_channel = report_to, slack_channel
        self.console = console or Console(soft_wrap=True)
        self.stream = stream or sys.stdout
        self.counts = {"report": 0, "repeat": 0}

    def __call__(self, event: WatchEvent) -> None:
        self.counts[event.kind] += 1
        self._send(event)
        if self.as_json:
            self.stream.write(json.dumps(event.to_json(), default=str) + "\n")
            self.stream.flush()
        elif event.kind == "report":
            self.console.rule(f"attempt {event.attempt}")
            event.report.render_text(self.console)
            for note in event.notes:
                self.console.print(Text(note, style="dim"))
        else:
            self.console.print(Text(f"{repeat_line(event)} (key {event.report.key})"))
            for note in event.notes:
                self.console.print(Text(note, style="dim"))

    def _send(self, event: WatchEvent) -> None:
        report = event.report
        if event.kind == "report":
            if self.report_to or self.slack_channel:
                event.notes += send_report(
                    report,
                    report_to=self.report_to,
                    slack_channel=self.slack_channel,
                    settings=self.settings,
                )
            return
        if not self.slack_channel or not slack_reply_due(event.count):
            return
        ts = report.sent.get("slack_ts")
        if not ts:
            event.notes.append(
                f"no reply in Slack channel {self.slack_channel}: the report itself was not posted"
            )
            return
        event.notes.append(
            self._reply(
                report.sent.get("slack_channel") or self.slack_channel, ts, f"{repeat_line(event)}."
            )
        )

    def _reply(self, channel: str, thread_ts: str, text: str) -> str:
        """One short reply in the report's thread (``chat.postMessage`` with ``thread_ts``)."""
        return reply_in_thread(channel, thread_ts, text, self.settings)


# ------------------------------------------------------------------------- the command


def _source(
    file: Path | None, clients: dict[str, str | None], *, follow: bool, idle_s: float
) -> tuple[Iterable[str | None], ClientSource | None]:
    """The line source of the options: a file, a client, else standard input."""
    chosen = [k for k, v in clients.items() if v]
    if len(chosen) + (file is not None) > 1:
        given = ([f"--file {file}"] if file is not None else []) + [f"--{k}" for k in chosen]
        raise SourceError(f"give one source, not {' and '.join(given)}")
    if file is not None:
        return file_lines(file, follow=follow, idle_s=idle_s), None
    if chosen:
        client = ClientSource(chosen[0], str(clients[chosen[0]]), follow=follow, idle_s=idle_s)
        return client, client
    if sys.stdin is None or sys.stdin.isatty():
        raise SourceError(
            "nothing to watch: give --file, --journald, --docker or --kubectl, "
            "or pipe a log in (journalctl -fu sglang | sglang-triage watch)"
        )
    return fd_lines(sys.stdin.fileno(), idle_s=idle_s if follow else None), None


def watch_command(
    *,
    file: Path | None = None,
    journald: str | None = None,
    docker: str | None = None,
    kubectl: str | None = None,
    release: str | None = None,
    hardware: str | None = None,
    gpus_from: Path | None = None,
    as_json: bool = False,
    report_to: str | None = None,
    slack_channel: str | None = None,
    follow: bool = True,
    idle_s: float = 2.0,
    settings: Settings | None = None,
) -> int:
    """``sglang-triage watch``: 0 when the stream ended (or ``--no-follow`` read it all),
    2 for a bad source (none, two, a missing client, a client that failed, an unreadable
    file) or an unreadable ``--gpus-from``, 130 on Ctrl-C (after settling what was seen)."""
    err = Console(stderr=True, soft_wrap=True)
    facts: dict[str, Any] = {}
    if gpus_from is not None:
        try:
            hw = hardware_from_smi(gpus_from.read_text(errors="replace")[:1_000_000])
        except OSError as exc:
            err.print(Text(f"error: cannot read --gpus-from {gpus_from}: {exc.strerror or exc}"))
            return 2
        if not hw:
            err.print(
                Text(
                    f"error: --gpus-from {gpus_from} lists no GPU (expected nvidia-smi "
                    "--query-gpu=name,memory.total,compute_cap,driver_version "
                    "--format=csv,noheader output)"
                )
            )
            return 2
        facts["hardware"] = hw
    try:
        lines, client = _source(
            file,
            {"journald": journald, "docker": docker, "kubectl": kubectl},
            follow=follow,
            idle_s=idle_s,
        )
        settings = settings or Settings()
        from kb.knowledge import KnowledgeBase

        watcher = Watcher(
            Engine(KnowledgeBase(settings)),
            settings,
            release=release,
            hardware=hardware,
            facts=facts,
        )
    except SourceError as exc:
        err.print(Text(f"error: {exc}"))
        return 2
    except TriageError as exc:
        err.print(Text(f"error: {exc.message}"))
        return 2
    output = Output(settings, as_json=as_json, report_to=report_to, slack_channel=slack_channel)
    try:
        watcher.run(lines, output)
    except SourceError as exc:
        err.print(Text(f"error: {exc}"))
        return 2
    except KeyboardInterrupt:
        for event in watcher.close():
            output(event)
        return 130
    err.print(
        Text(
            f"watch: {watcher.segmenter.count} attempt(s), {watcher.settled} ended in a "
            f"crash, {output.counts['report']} report(s), {output.counts['repeat']} "
            f"repeat(s), {watcher.triaged} triage(s)",
            style="dim",
        )
    )
    if client is not None and client.error:
        err.print(Text(f"error: {client.error}"))
        return 2
    return 0
