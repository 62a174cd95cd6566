"""Confirm generated ground truth by replay: SGLang's own validation is the judge.

The generator computes each incident's expected answer with the static
evaluator only. :class:`ReplayConfirmer` then runs the release's real argument
validation (:mod:`service.replay`) on the incident's declared hardware
and model architecture:

* the incident's command must **raise** the expected exception type inside the
  expected check (innermost SGLang frame in ``path`` between its start and end
  line) -- otherwise the incident is dropped;
* each acceptable fix is replayed too and kept only when the check no longer
  fires (validation passes, or fails at a *different* place later); fixes that
  still fire it, that argparse refuses, or that the harness cannot run are
  dropped, and an incident whose fixes all drop is dropped as well;
* when SGLang's real message differs from the rendered one, the crash log is
  rewritten with the real message.

A kept incident gets ``confirmed_by = "replay:<release>:<hardware>"`` and a note
with the counts. :meth:`ReplayConfirmer.equivalents` then replays the frameless
incidents on the KB's other releases (:mod:`evals.equivalents`): a release whose own
validation prints the same log is recorded in ``expected.equivalents``. Command lines are replayed in one batch per (release,
hardware), so one subprocess imports SGLang once for many command lines;
verdicts are cached on disk by the replay harness.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from evals.incidents import FixSpec, Incident
from kb.catalog_types import Catalog
from kb.catalogs import load_catalog
from kb.store import Store
from service.engine import apply_edits
from service.replay.results import ReplayResult
from service.settings import Settings

#: ``confirm(release, incidents) -> confirmed copies, None where not confirmed``
Confirm = Callable[[str, Sequence[Incident]], list[Incident | None]]

__all__ = ["Confirm", "ReplayConfirmer", "fires_expected_check", "judge", "kb_settings", "refusal"]


def kb_settings(kb_dir: str | None) -> Settings:
    """The settings of a script's ``--kb`` folder (the configured KB when None)."""
    settings = Settings()
    if kb_dir:
        settings = settings.model_copy(update={"kb_dir": Path(kb_dir).expanduser().resolve()})
    return settings


def fires_expected_check(result: ReplayResult, inc: Incident) -> bool:
    """Did SGLang's own validation fail inside the incident's expected check?"""
    loc = inc.expected.location
    origin = result.origin
    if loc is None or origin is None or origin.line is None or loc.start_line is None:
        return False
    end = loc.end_line if loc.end_line is not None else loc.start_line
    return (
        result.status == "raised"
        and origin.path == loc.path
        and loc.start_line <= origin.line <= end
    )


def _fix_holds(result: ReplayResult, inc: Incident) -> bool:
    """The fix makes the check pass: validation completes, or fails somewhere else."""
    if result.status == "passed":
        return True
    return result.status == "raised" and not fires_expected_check(result, inc)


_EXC_LINE = re.compile(r"^(?P<prefix>\[[^\]]*\]\s*)?(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")


def _exception_line(inc: Incident) -> tuple[str, str, str | None] | None:
    """(timestamp prefix, exception type, message or None) of the log's last line."""
    m = _EXC_LINE.match(inc.crash_log.rstrip().splitlines()[-1])
    return (m["prefix"] or "", m["type"], m["msg"]) if m else None


def _with_real_message(inc: Incident, real: str | None) -> tuple[str, bool]:
    """The crash log with its last exception line carrying SGLang's real message."""
    parsed = _exception_line(inc)
    real = (real or "").strip()
    if parsed is None or not real or "\n" in real or (parsed[2] or "").strip() == real:
        return inc.crash_log, False
    prefix, exc_type, _ = parsed
    lines = inc.crash_log.rstrip("\n").split("\n")
    lines[-1] = f"{prefix}{exc_type}: {real}"
    return "\n".join(lines) + "\n", True


def judge(
    inc: Incident, crash: ReplayResult, fixes: Sequence[ReplayResult], label: str
) -> Incident | None:
    """Fold the replay of ``inc``'s command (``crash``) and of its fixes into a verdict.

    Returns a confirmed copy (fixes filtered, ``confirmed_by`` set) or None.
    """
    shown = _exception_line(inc)
    if not fires_expected_check(crash, inc) or shown is None or crash.exception_type != shown[1]:
        return None
    wanted = inc.expected.acceptable_fixes
    kept = [fix for fix, res in zip(wanted, fixes, strict=True) if _fix_holds(res, inc)]
    if wanted and not kept:
        return None
    log, rewritten = _with_real_message(inc, crash.message)
    note = f"; replay: crash reproduced at {crash.location}, {len(kept)}/{len(wanted)} fixes hold"
    if rewritten:
        note += ", log carries SGLang's real message"
    expected = inc.expected.model_copy(update={"acceptable_fixes": kept})
    return inc.model_copy(
        update={
            "expected": expected,
            "crash_log": log,
            "notes": inc.notes + note,
            "confirmed_by": label,
        }
    )


def refusal(inc: Incident, crash: ReplayResult, fixes: Sequence[ReplayResult]) -> str:
    """Why :func:`judge` refused ``inc`` (for the generator's log)."""
    if not fires_expected_check(crash, inc):
        return f"replay: {crash.summary()}"
    shown = _exception_line(inc)
    if shown is None or crash.exception_type != shown[1]:
        return f"replay raised {crash.exception_type}, the log shows {shown and shown[1]}"
    return "no acceptable fix holds: " + "; ".join(r.summary() for r in fixes)[:300]


class ReplayConfirmer:
    """:data:`Confirm` by replaying with the release's own validation (see module doc)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        job_timeout_s: float = 30,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.job_timeout_s = job_timeout_s
        self.log = log

    def _root(self, release: str) -> Path:
        from kb.sources import fetch_release

        return fetch_release(
            release,
            wheel_dir=self.settings.wheel_dir,
            source_dir=self.settings.source_dir,
            index_url=self.settings.pip_index_url,
        ).root

    def replay(
        self,
        release: str,
        argvs: Sequence[Sequence[str]],
        hardware: str | None,
        archs: Sequence[str | None],
    ) -> list[ReplayResult]:
        """Replay command lines of ``release`` on one declared machine (one subprocess)."""
        from service.replay.harness import replay_many

        return replay_many(
            self._root(release),
            release,
            argvs,
            hardware=hardware,
            model_arch=list(archs),
            timeout_s=180,
            job_timeout_s=self.job_timeout_s,
            settings=self.settings,
        )

    def __call__(self, release: str, incidents: Sequence[Incident]) -> list[Incident | None]:
        from service.replay.harness import replay_many

        catalog = load_catalog(self.store, release)
        root = self._root(release)
        out: list[Incident | None] = [None] * len(incidents)
        groups: dict[str, list[int]] = defaultdict(list)
        for i, inc in enumerate(incidents):
            groups[inc.hardware or ""].append(i)
        for hardware, members in sorted(groups.items()):
            argvs: list[list[str]] = []
            archs: list[str | None] = []
            spans: list[tuple[int, int]] = []
            for i in members:
                inc = incidents[i]
                start = len(argvs)
                argvs.append(inc.command_argv())
                argvs += [_fixed(inc, fix, catalog) for fix in inc.expected.acceptable_fixes]
                archs += [inc.model_arch] * (len(argvs) - start)
                spans.append((start, len(argvs)))
            if self.log:
                self.log(
                    f"replay {release} on {hardware or 'no hardware'}: "
                    f"{len(members)} incidents, {len(argvs)} command lines"
                )
            results = replay_many(
                root,
                release,
                argvs,
                hardware=hardware or None,
                model_arch=archs,
                timeout_s=180,
                job_timeout_s=self.job_timeout_s,
                settings=self.settings,
            )
            label = f"replay:{release}:{hardware or 'none'}"
            for i, (a, b) in zip(members, spans, strict=True):
                out[i] = judge(incidents[i], results[a], results[a + 1 : b], label)
                if out[i] is None and self.log:
                    self.log(
                        f"{incidents[i].id} not confirmed: "
                        f"{refusal(incidents[i], results[a], results[a + 1 : b])}"
                    )
        return out


def _fixed(inc: Incident, fix: FixSpec, catalog: Catalog) -> list[str]:
    return apply_edits(inc.command_argv(), catalog, set=dict(fix.set), remove=list(fix.remove))
