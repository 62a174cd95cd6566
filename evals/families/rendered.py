"""Incidents of the families replay does not reach (their checks need a device):
``layer_attention_backend`` (:mod:`evals.families.attention`) and ``memory_pool``
(:mod:`evals.families.memory`).

Each case (a release's own raise, its message rendered with a failing launch's values)
becomes an incident: the launch command that fails it (model, hardware and flags
consistent with the check), the crash log as SGLang's scheduler process prints it
(``Scheduler hit an exception: Traceback ...``, frames from ``run_scheduler_process``
through the raising function's callers in its file to the raise, then the exception
line), with a ``sglang==X`` pin, a ``check_env`` block or no release line, the Python
version cycling through 3.10-3.13. The expected location is the raise; the acceptable
fixes follow from the check alone (never from an answer): the backend flag set to each
supported name it accepts; a memory flag moved in the message's direction
(``FixSpec.within``). ``confirmed_by`` stays None: replay cannot run these checks.

Everything is deterministic (cases in release, path and line order; choices by a case's
number in its release), and a release's incidents do not depend on the run's other releases.
A case whose refused name the deciding flag does not accept (argparse would refuse the
launch first) or with no acceptable fix is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evals.families.attention import AttentionCase, acceptable_backends, attention_cases
from evals.families.memory import (
    LAUNCH,
    acceptable_fixes,
    memory_cases,
    numeric_flags,
    render_memory,
    steps_of,
)
from evals.render import SITE, FrameSpec, call_chain, reported_line
from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.incidents import Expected, ExpectedLocation, FixSpec, Incident, categorize
from kb.store import Store
from service.engine import get_profile, model_arch_for

__all__ = ["NOTE", "crash_log", "rendered_incidents"]

NOTE = "rendered from the release's own raise; replay does not reach this check (needs a device)"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
_PATCH = {"3.10": "3.10.12", "3.11": "3.11.9", "3.12": "3.12.3", "3.13": "3.13.1"}
SCHEDULER = "sglang/srt/managers/scheduler.py"

#: (model, hardware profiles in turn) by what a message is about
HYBRID = ("Qwen/Qwen3-Next-80B-A3B-Instruct", ("h100-x8", "h200-x8", "a100-x8"))
BLACKWELL_HYBRID = (
    "Qwen/Qwen3-Next-80B-A3B-Instruct",
    ("b200-x8", "gb200-x4", "b300-x8", "rtx-pro-6000-x8"),
)
VISION = ("Qwen/Qwen2.5-VL-72B-Instruct", ("b200-x8", "gb200-x4", "rtx-pro-6000-x8"))
DENSE = ("meta-llama/Llama-3.1-70B-Instruct", ("l40s-x4", "a100-x8", "h100-x8"))
SMALL = ("meta-llama/Llama-3.1-8B-Instruct", ("rtx-5090-x1", "l40s-x4"))


def _pick(options: Sequence[Any], k: int) -> Any:
    return options[k % len(options)]


def _numbered(cases: Sequence[Any]) -> list[tuple[int, Any]]:
    """Each case with its number: its place among its release's cases plus the release's
    last version part (an incident does not depend on the other releases of the run)."""
    out: list[tuple[int, Any]] = []
    seen: dict[str, int] = {}
    for case in cases:
        n = seen[case.release] = seen.get(case.release, -1) + 1
        last = case.release.rsplit(".", 1)[-1]
        out.append((n + (int(last) if last.isdigit() else 0), case))
    return out


def _frame_lines(f: FrameSpec, site: str) -> list[str]:
    out = [f'  File "{site}/{f.path}", line {f.line}, in {f.function}']
    return out + ([f"    {f.source}"] if f.source else [])


def _scheduler_frame(store: Store, release: str) -> FrameSpec | None:
    """``run_scheduler_process``'s line that builds the scheduler."""
    fn = store.function(release, "run_scheduler_process", SCHEDULER)
    if fn is None:
        return None
    lines = store.file_lines(release, SCHEDULER, fn["start_line"], fn["end_line"])
    for i, text in enumerate(lines):
        if "Scheduler(" in text and "=" in text:
            return FrameSpec(SCHEDULER, fn["start_line"] + i, "run_scheduler_process", text.strip())
    return None


def _version_lines(release: str, python: str, gpu: str | None, count: int, k: int) -> list[str]:
    """A pin, a ``check_env`` block or nothing, by ``k``."""
    if k % 3 == 0:
        return ["$ pip freeze | grep sglang", f"sglang=={release}"]
    if k % 3 == 1:
        rows = [
            f"Python: {_PATCH[python]} (main, Nov  6 2025, 13:44:16) [GCC 13.3.0]",
            f"CUDA available: {bool(gpu)}",
        ]
        if gpu:
            rows.append(f"GPU {','.join(str(i) for i in range(count))}: {gpu}")
        return ["$ python3 -m sglang.check_env", *rows, f"sglang: {release}"]
    return []


def crash_log(
    store: Store,
    release: str,
    check: Check,
    message: str,
    argv: list[str],
    k: int,
    hardware: str | None,
) -> str:
    """The crash log of incident number ``k`` (module docstring)."""
    python = _pick(PYTHONS, k)
    site = _pick([SITE.format(py=python), f"/opt/venv/lib/python{python}/site-packages"], k // 4)
    profile = get_profile(hardware) if hardware else None
    entry = _pick(["python3 -m sglang.launch_server", "python -m sglang.launch_server"], k // 2)
    out = _version_lines(
        release, python, profile.gpu if profile else None, profile.count if profile else 1, k
    )
    out.append(f"$ {entry} " + " ".join(argv))
    stamp = f"[2025-{1 + k % 12:02d}-{1 + k % 28:02d} 10:{k % 60:02d}:{(7 * k) % 60:02d}"
    out.append(f"{stamp} TP0] Scheduler hit an exception: Traceback (most recent call last):")
    frames = [
        f
        for f in [_scheduler_frame(store, release), *call_chain(store, release, check)]
        if f is not None
    ]
    line = reported_line(check, python)
    text = store.file_lines(release, check.path, line, line)
    frames.append(
        FrameSpec(
            check.path,
            line,
            check.function.rsplit(".", 1)[-1],
            text[0].strip() if text else None,
        )
    )
    for f in frames:
        out += _frame_lines(f, site)
    out.append(f"{check.exc_type or 'RuntimeError'}: {message}")
    return "\n".join(out) + "\n"


def _launch(model: str, hardware: str | None, extra: list[str]) -> list[str]:
    count = get_profile(hardware).count if hardware else 8
    argv = ["--model-path", model, "--tp", str(count)]
    if "Qwen3-Next" in model or "VL" in model:
        argv.append("--trust-remote-code")
    return argv + extra


def _location(check: Check) -> ExpectedLocation:
    return ExpectedLocation(
        path=check.path,
        function=check.function,
        start_line=check.start_line,
        end_line=check.end_line,
    )


def _id(family: str, release: str, check: Check, k: int) -> str:
    short = check.function.rsplit(".", 1)[-1].strip("_")
    return f"fam-{family}-{release}-{short}-{check.start_line}-{k}"


def _attention_setting(case: AttentionCase, k: int) -> tuple[str, str | None]:
    """(model, hardware) the refusal happens on."""
    text = case.message
    if "NPU" in text:
        return HYBRID[0], None  # no NPU hardware profile: the log says NPU
    if any(p == "mm" for p, _ in case.refused):
        return VISION[0], _pick(VISION[1], k)
    if "Blackwell" in text:
        return BLACKWELL_HYBRID[0], _pick(BLACKWELL_HYBRID[1], k)
    if "GDN" in text or "mamba" in text.lower():
        return HYBRID[0], _pick(HYBRID[1], k)
    return DENSE[0], _pick(("h100-x8", "h200-x8"), k)


def attention_incidents(store: Store, releases: Sequence[str]) -> list[Incident]:
    out: list[Incident] = []
    for k, case in _numbered(attention_cases(store, releases)):
        flags = load_catalog(store, case.release).flags
        found = acceptable_backends(case, flags)
        if found is None:
            continue
        spec, names = found
        refused = case.refused[0][1]
        if refused not in (spec.choices or ()):
            continue  # argparse refuses the name before the layer is built
        flag = spec.flags[0]
        model, hardware = _attention_setting(case, k)
        argv = _launch(model, hardware, [flag, refused])
        check = case.check
        out.append(
            Incident(
                id=_id("attention", case.release, check, k),
                source=f"generated:family=layer_attention_backend:{case.kind}",
                release=case.release,
                hardware=hardware,
                model=model,
                model_arch=model_arch_for(model),
                command=argv,
                crash_log=crash_log(store, case.release, check, case.message, argv, k, hardware),
                expected=Expected(
                    release=case.release,
                    location=_location(check),
                    root_cause_flags=[flag],
                    acceptable_fixes=[FixSpec(set={flag: n}) for n in names],
                ),
                category=categorize(check.path, check.function, [spec.attr]),
                notes=f"{NOTE}. {case.kind}: {flag} {refused} refused; supported: "
                f"{', '.join(names)}",
                confirmed_by=None,
                family="layer_attention_backend",
            )
        )
    return out


#: launch values per incident, in turn (each keeps the printed bound <= 0.95)
FRACTIONS = (0.8, 0.85, 0.75, 0.7, 0.82)
RUNNING = (64, 128, 256, 32)


def _memory_setting(message: str, k: int) -> tuple[str, str]:
    low = message.lower()
    if "mamba" in low or "hybrid" in low:
        return HYBRID[0], _pick(HYBRID[1], k)
    if "alloc_req_slots" in low:
        return SMALL[0], _pick(SMALL[1], k)
    return DENSE[0], _pick(DENSE[1], k)


def memory_incidents(store: Store, releases: Sequence[str]) -> list[Incident]:
    out: list[Incident] = []
    for k, case in _numbered(memory_cases(store, releases)):
        catalog = load_catalog(store, case.release)
        by_flag = catalog.by_flag()
        named = {f for f, _, _ in case.steps}
        base = {
            **LAUNCH,
            "--mem-fraction-static": _pick(FRACTIONS, k),
            "--max-running-requests": _pick(RUNNING, k),
        }
        launch = {
            f: v
            for f, v in base.items()
            if f in by_flag
            and (
                f in named
                or f == "--mem-fraction-static"
                or (f == "--chunked-prefill-size" and k % 2 == 0)
            )
        }
        message = render_memory(case.check.message or "", launch)
        if message is None:
            continue
        steps = steps_of(message, numeric_flags(catalog.flags))
        fixes = acceptable_fixes(steps, launch, catalog.flags)
        if not fixes:
            continue
        model, hardware = _memory_setting(message, k)
        extra = [x for f, v in launch.items() for x in (f, f"{v:g}")]
        argv = _launch(model, hardware, extra)
        check = case.check
        moved = [f for f, _, _ in steps if f in launch]
        out.append(
            Incident(
                id=_id("memory", case.release, check, k),
                source="generated:family=memory_pool",
                release=case.release,
                hardware=hardware,
                model=model,
                model_arch=model_arch_for(model),
                command=argv,
                crash_log=crash_log(store, case.release, check, message, argv, k, hardware),
                expected=Expected(
                    release=case.release,
                    location=_location(check),
                    root_cause_flags=moved,
                    acceptable_fixes=fixes,
                ),
                category=categorize(check.path, check.function, [by_flag[f].attr for f in moved]),
                notes=f"{NOTE}. steps: "
                + "; ".join(
                    f"{f} {w}" + (f" past {b:g}" if b is not None else "") for f, w, b in steps
                ),
                confirmed_by=None,
                family="memory_pool",
            )
        )
    return out


def rendered_incidents(store: Store, releases: Sequence[str]) -> list[Incident]:
    """The ``layer_attention_backend`` and ``memory_pool`` incidents of ``releases`` (the
    ones the KB holds)."""
    return attention_incidents(store, releases) + memory_incidents(store, releases)
