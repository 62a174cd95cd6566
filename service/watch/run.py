"""``sglang-triage run -- <launch command>``: launch SGLang knowing the machine, and triage a
start-up crash with those facts.

1. **Facts** (:func:`service.watch.facts.gather`): the SGLang release the command's own
   interpreter has installed, the GPUs (nvidia-smi/rocm-smi) as a hardware profile, the
   local model's ``config.json``, the ``SGLANG_*`` environment. ``--release`` and
   ``--hardware`` replace the probes.
2. **Pre-flight** (``--preflight warn``, the default): the command's flags are linted
   against that release and those facts (:func:`service.engine.lint`, the rule cards);
   violated error cards are printed with their fixes and the launch goes on. ``strict``
   refuses to launch (exit 2) when an error card is violated; ``off`` skips it. A release
   the KB does not hold is said and skipped; nothing is ingested here.
3. **Launch** (:func:`service.watch.launch.launch`): output, exit code, signals, terminal
   and environment pass through unchanged; a bounded tail is kept.
4. **Triage**: a non-zero exit before SGLang's ready line is a start-up crash. The tail
   and the command go to :meth:`service.usecase.TriageUseCase.answer` with ``release`` the installed
   version, ``hardware`` the detected profile, ``model`` the local path and the ``SGLANG_*``
   settings as ``export`` lines; the answer is stamped with the facts
   (:func:`~service.watch.report.apply_facts`: ``release: exact (installed)``,
   ``hardware: detected``). A non-zero exit after the ready line is reported as "not a
   start-up crash", with the tail. The report goes to stderr after SGLang's output (one
   JSON line with ``--json``), and to ``--report-to``/``--slack-channel`` when asked.

The exit code is the child's (``128 + N`` for signal N), or 2 when strict pre-flight
refused to launch. When a signal we forwarded (Ctrl-C, SIGTERM) ended the launch, nothing
is triaged: it was stopped, it did not crash.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

from service.engine import TriageResult, lint
from service.errors import ReleaseNotIngested, TriageError
from service.settings import Settings
from service.watch.facts import MachineFacts, command_start, gather
from service.watch.launch import LaunchResult, Tail, launch
from service.watch.report import CrashReport, apply_facts, send_report

__all__ = ["PREFLIGHT_MODES", "RunOptions", "flags_of", "preflight", "run", "triage_launch"]

PREFLIGHT_MODES = ("warn", "strict", "off")
_PYTHON_PREFIXES = ("python",)


@dataclass
class RunOptions:
    """The ``run`` command's options."""

    preflight: str = "warn"
    release: str | None = None
    hardware: str | None = None
    report_to: str | None = None
    slack_channel: str | None = None
    as_json: bool = False
    #: after the rule cards, replay the release's own validation with the detected hardware
    replay: bool = False


def flags_of(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(launcher, flags)``: ``python3 -X dev -m sglang.launch_server --tp 8`` ->
    ``(["python3", "-X", "dev", "-m", "sglang.launch_server"], ["--tp", "8"])``;
    ``sglang serve --tp 8`` -> ``(["sglang", "serve"], ["--tp", "8"])``; an ``env X=1``
    prefix stays with the launcher."""
    argv = list(argv)
    start = command_start(argv)
    if start >= len(argv):
        return argv, []
    i = start + 1
    if os.path.basename(argv[start]).startswith(_PYTHON_PREFIXES):
        while i < len(argv) and argv[i] != "-m" and argv[i].startswith("-"):
            i += 2 if argv[i] in ("-X", "-W") else 1
        if i < len(argv) and argv[i] == "-m":
            i += 2
        elif i < len(argv):  # a script path
            i += 1
    else:
        while i < len(argv) and not argv[i].startswith("-"):
            i += 1
    return argv[:i], argv[i:]


def _sglang_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("SGLANG_") or k == "CUDA_VISIBLE_DEVICES"}


def preflight(
    settings: Settings, argv: Sequence[str], facts: MachineFacts, env: Mapping[str, str]
) -> dict[str, Any]:
    """Lint the command's flags against the facts' release; a JSON-safe summary with
    ``status`` ``ok`` | ``errors`` | ``skipped``, the violated error cards (``errors``: rule,
    title, reason, citations, fixes) and ``ms``. Never ingests."""
    from service.wiring import kb_for

    t0 = time.perf_counter()
    release = facts.version
    launcher, flags = flags_of(argv)
    if not release:
        return {
            "status": "skipped",
            "note": "no SGLang release is known (none installed for the "
            "command's interpreter, and no --release): pre-flight skipped",
        }
    arch = (facts.model.get("architectures") or [None])[0]
    try:
        report = lint(
            kb_for(settings).store,
            release,
            flags,
            facts.profile,
            arch,
            env=_sglang_env(env),
            prefix=shlex.join(launcher) or "python -m sglang.launch_server",
        )
    except ReleaseNotIngested:
        return {
            "status": "skipped",
            "release": release,
            "note": f"release {release} is not in the KB: pre-flight skipped (add it with "
            f"`sglang-triage ingest --release {release}`)",
        }
    except (TriageError, ValueError) as exc:
        msg = getattr(exc, "message", None) or str(exc)
        return {"status": "skipped", "release": release, "note": f"pre-flight skipped: {msg[:300]}"}
    errors = [
        {
            "rule": f.rule,
            "title": f.title,
            "reason": f.reason,
            "citations": f.citations[:3],
            "fixes": [
                {"command": x.command, "verified": x.verified, "origin": x.origin}
                for x in f.fixes[:2]
            ],
        }
        for f in report.violated
        if f.severity == "error"
    ]
    return {
        "status": "ok" if report.ok else "errors",
        "release": release,
        "hardware": report.hardware,
        "model_arch": report.model_arch,
        "errors": errors,
        "warnings": sum(1 for f in report.violated if f.severity != "error"),
        "undecided": len(report.unknown),
        "ms": round((time.perf_counter() - t0) * 1000, 1),
    }


#: seconds the pre-flight replay may take (a cold sandboxed interpreter included)
REPLAY_TIMEOUT_S = 60.0


def preflight_replay(
    settings: Settings,
    argv: Sequence[str],
    facts: MachineFacts,
    pre: dict[str, Any],
    timeout_s: float = REPLAY_TIMEOUT_S,
) -> dict[str, Any]:
    """``pre`` with SGLang as the judge: the release's own argument validation replayed on
    the command's flags with the detected hardware and model architecture, in the replay
    sandbox (never the user's model path: replay generates a stand-in checkpoint). A
    refusal becomes an error entry (the exception, its message and where it was raised);
    a replay that cannot run (no sandbox, no cached wheel: pre-flight downloads nothing)
    or reaches no verdict is a note. Skipped when the rule cards already found errors."""
    from kb.sources import find_wheel, unpack_wheel
    from service.replay.background import unavailable_reason
    from service.replay.harness import replay

    release = pre.get("release") or facts.version
    if pre.get("status") not in ("ok",) or not release:
        return pre
    _, flags = flags_of(argv)
    reason = unavailable_reason(settings, release, flags)
    wheel = find_wheel(settings.wheel_dir, release) if reason is None else None
    if reason is not None or wheel is None:
        return {**pre, "replay": {"status": "skipped", "note": f"replay skipped: {reason}"}}
    root = unpack_wheel(wheel, settings.source_dir / release)
    arch = (facts.model.get("architectures") or [None])[0]
    res = replay(
        root,
        release,
        flags,
        hardware=facts.profile,
        model_arch=arch,
        timeout_s=timeout_s,
        settings=settings,
    )
    where = res.origin.where() if res.origin is not None else ""
    verdict = {
        "status": res.status,
        "hardware": res.hardware,
        "where": where,
        "message": (res.message or res.harness_reason or "")[:500],
    }
    if res.status not in ("raised", "argparse_error"):
        return {**pre, "replay": verdict}
    error = {
        "rule": "replay",
        "title": f"SGLang {release}'s own validation refuses the command "
        f"({res.exception_type or 'argparse'})",
        "reason": verdict["message"],
        "citations": [f"{release}:{res.origin.path}:{res.origin.line}"]
        if res.origin is not None and res.origin.path and res.origin.line
        else [],
        "fixes": [],
    }
    return {**pre, "status": "errors", "errors": [*pre.get("errors", []), error], "replay": verdict}


def _print_preflight(pre: dict[str, Any], err: Console, strict: bool) -> None:
    if pre.get("note"):
        err.print(Text(f"sglang-triage pre-flight: {pre['note']}", style="yellow"), soft_wrap=True)
        return
    replayed = pre.get("replay") or {}
    if pre["status"] == "ok":
        err.print(
            Text(
                f"sglang-triage pre-flight: SGLang {pre['release']}"
                f"{' on ' + pre['hardware'] if pre.get('hardware') else ''}: no error card "
                f"violated ({pre['warnings']} warning(s), {pre['undecided']} undecided)",
                style="dim",
            ),
            soft_wrap=True,
        )
        if replayed:
            err.print(
                Text(
                    f"sglang-triage pre-flight replay: {replayed.get('status')}"
                    + (f" ({replayed['note']})" if replayed.get("note") else ""),
                    style="dim",
                ),
                soft_wrap=True,
            )
        return
    err.print(
        Text(
            f"sglang-triage pre-flight: SGLang {pre['release']} would refuse this command "
            f"({len(pre['errors'])} error card(s)):",
            style="bold red",
        ),
        soft_wrap=True,
    )
    for e in pre["errors"]:
        err.print(Text(f"✗ {e['rule']} {e['title']}", style="red"), soft_wrap=True)
        err.print(Text(f"    {e['reason']}"), soft_wrap=True)
        for c in e["citations"]:
            err.print(Text(f"    cites {c}", style="dim"), soft_wrap=True)
        for fix in e["fixes"]:
            tag = "verified" if fix["verified"] else "not clean"
            err.print(Text(f"    fix ({tag}, {fix['origin']}):"))
            err.print(fix["command"], markup=False, highlight=False, soft_wrap=True, crop=False)
    err.print(
        Text(
            "refusing to launch (--preflight strict)"
            if strict
            else "launching anyway (--preflight warn)",
            style="bold",
        )
    )


def _payload(
    tail: Tail, argv: Sequence[str], facts: MachineFacts, env: Mapping[str, str]
) -> dict[str, Any]:
    """The structured triage input: the launch's ``SGLANG_*`` settings as ``export`` lines
    before the tail (the log parser reads them), the command and the interpreter's Python."""
    exports = [f"export {k}={shlex.quote(v)}" for k, v in sorted(_sglang_env(env).items())][:64]
    payload: dict[str, Any] = {"log": "\n".join([*exports, *tail.lines]), "command": list(argv)}
    python = facts.release.get("python")
    if python:
        payload["python"] = ".".join(str(python).split(".")[:2])
    return payload


def triage_launch(
    settings: Settings, tail: Tail, argv: Sequence[str], facts: MachineFacts, env: Mapping[str, str]
) -> tuple[TriageResult | None, str | None]:
    """``(answer, error)``: the tail triaged with the facts, stamped with them."""
    from service.usecase import TriageRequest, TriageUseCase  # the engine only on a crash
    from service.wiring import engine_for

    try:
        request = TriageRequest(
            _payload(tail, argv, facts, env),
            release=facts.version,
            hardware=facts.profile,
            model=facts.model.get("path"),
        )
        result = TriageUseCase(engine_for(settings), settings).answer(request)
    except TriageError as exc:
        return None, exc.message
    except Exception as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"
    return apply_facts(result, facts.to_json()), None


def _status(res: LaunchResult) -> str:
    if res.exit_code == 0:
        return "ok"
    return "not_startup" if res.tail.ready else "startup_crash"


def run(
    argv: Sequence[str],
    options: RunOptions,
    settings: Settings,
    *,
    err: Console | None = None,
    env: Mapping[str, str] | None = None,
    stdout_fd: int = 1,
    stderr_fd: int = 2,
    tail: Tail | None = None,
    render: Callable[[TriageResult, Console], None] | None = None,
) -> int:
    """The ``run`` use case (see the module docstring); returns the exit code to use.

    ``err`` is where our own messages go (stderr); ``stdout_fd``/``stderr_fd`` where the
    child's output is copied; ``render`` prints an answer (the CLI's ``render_result``)."""
    err = err or Console(stderr=True)
    env = dict(os.environ if env is None else env)
    argv = list(argv)
    if options.preflight not in PREFLIGHT_MODES:
        err.print(f"--preflight must be one of {', '.join(PREFLIGHT_MODES)}", markup=False)
        return 2
    if not argv:
        err.print(
            "usage: sglang-triage run [options] -- python -m sglang.launch_server ...", markup=False
        )
        return 2
    facts = gather(argv, env, release=options.release, hardware=options.hardware)
    pre: dict[str, Any] = {"status": "off"}
    if options.preflight != "off":
        pre = preflight(settings, argv, facts, env)
        if options.replay:
            pre = preflight_replay(settings, argv, facts, pre)
        strict = options.preflight == "strict"
        if not options.as_json or pre["status"] == "errors":
            _print_preflight(pre, err, strict)
        if strict and pre["status"] == "errors":
            if options.as_json:
                _emit_json(
                    err,
                    {"launched": False, "exit_code": 2, "preflight": pre, "facts": facts.to_json()},
                )
            return 2
    res = launch(argv, env=env, stdout_fd=stdout_fd, stderr_fd=stderr_fd, tail=tail)
    if res.error:
        err.print(Text(f"sglang-triage: cannot run {res.error}", style="red"))
        return res.exit_code
    status = _status(res)
    out: dict[str, Any] = {"launched": True, "exit_code": res.exit_code, "preflight": pre}
    if status == "ok" or res.forwarded:
        if res.forwarded and status != "ok":
            msg = f"stopped by a signal we passed on (exit {res.exit_code}): not triaged"
            if options.as_json:
                out["note"] = msg
            else:
                err.print(Text(f"sglang-triage: {msg}", style="dim"))
        if options.as_json:
            _emit_json(err, {**out, "facts": facts.to_json()})
        return res.exit_code
    result, error = (
        triage_launch(settings, res.tail, argv, facts, env)
        if status == "startup_crash"
        else (None, None)
    )
    report = CrashReport(
        result=result,
        tail=list(res.tail.lines),
        status=status,
        facts=facts.to_json(),
        command=argv,
        exit_code=res.exit_code,
        error=error,
    )
    asked = bool(options.report_to or options.slack_channel)
    if options.as_json:
        notes = (
            send_report(
                report,
                report_to=options.report_to,
                slack_channel=options.slack_channel,
                settings=settings,
            )
            if asked
            else []
        )
        _emit_json(err, {**out, "report": report.to_json(), "sent": notes})
    else:
        report.render_text(err, render)
        if asked:
            for note in send_report(
                report,
                report_to=options.report_to,
                slack_channel=options.slack_channel,
                settings=settings,
            ):
                err.print(Text(f"sglang-triage: {note}", style="dim"), soft_wrap=True)
    return res.exit_code


def _emit_json(err: Console, data: dict[str, Any]) -> None:
    """One JSON object on one line of stderr (after SGLang's output)."""
    err.file.write(json.dumps(data, default=str) + "\n")
    err.file.flush()
