"""The eval's replay judge: does the recommended fix pass the release's own validation?

With ``replay`` on, each in-process answer goes through what the service does before
answering (the replay-backed fix search, :func:`service.replay.fix_search.search_fixes`,
here without a deadline so that the verdict does not depend on the machine's load), and
then its **recommended** fix is replayed on the incident's hardware and model
architecture (answered from the replay cache when the search already ran it).
:func:`judge` returns what :mod:`evals.scoring` scores:

``fix_replay``      ``passed`` (SGLang accepted the recommended fix), ``failed`` (it
                    refused it, or no fix was recommended although one is expected),
                    or None when replay cannot say (no wheel, no sandbox, a harness
                    error, or a replay without hardware that stops before the crash's
                    check for the user's command too)
``recommended``     whether an answer recommends a fix at all

Without a declared machine, replay of the user's command runs too, so a failure of the fix
that the command shares (validation needing a GPU on this CPU-only machine) is not counted
against the fix; so does a bare launch of the model, which tells where this machine stops
any command when the user's never reached validation (argparse refused it).

A located check past argument validation that a start-up probe reaches
(:func:`service.replay.probes.startup_request` on the answer) is judged by that probe: the
fix is replayed through validation **and** the release's own start-up code for the check,
with the checkpoint facts the answer knew, so "passed" means that code accepted the fix (a
probe that cannot reach the check is no verdict). A located check outside the validation
files that no probe reaches is judged only if replay of the user's command reproduces the
crash there (a check validation itself calls, such as the model config's); otherwise the
verdict is None: "replay does not reach this check".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kb.catalogs import load_catalog
from kb.settings import KBSettings
from kb.store import VALIDATION_PREFIXES, Store
from service.engine import TriageResult, apply_edits
from service.replay.background import release_root, summarise, unavailable_reason
from service.replay.fix_search import search_fixes
from service.replay.harness import prewarm as harness_prewarm
from service.replay.harness import replay_many
from service.replay.probes import probe_env, startup_request
from service.replay.results import ReplayResult

__all__ = ["Prewarmer", "judge", "prewarm", "searched"]

#: the search waits this long in the eval (answers must not depend on the machine's load)
EVAL_DEADLINE_S = 600.0


def searched(result: TriageResult, settings: KBSettings, max_candidates: int = 5) -> TriageResult:
    """``result`` after the fix search the service runs before answering (no deadline)."""
    return search_fixes(result, settings, deadline_s=EVAL_DEADLINE_S, max_candidates=max_candidates)


def prewarm(settings: KBSettings, release: str | None, hardware: str | None) -> bool:
    """Start the warm replay worker for ``release`` on ``hardware`` in the background (the
    eval calls it for the next group of incidents while it answers the current one); False
    when replay could not run for that release (no sandbox, no wheel in the cache)."""
    if release is None or unavailable_reason(settings, release, ["--model-path", "m"]):
        return False
    return harness_prewarm(release_root(settings, release), release, hardware, settings)


def pool_jobs_served() -> int:
    """How many command lines the process's warm pool has run (replay cache misses)."""
    from service.replay.pool import default_pool

    return int(default_pool().stats().get("jobs_served") or 0)


class Prewarmer:
    """Starts the next (release, machine) group's warm replay worker in the background while
    the eval answers the current group, but only when the current group's answers needed the
    pool: when the replay cache answers a group whole (the same code replayed the same
    command lines before), starting a worker for the next group would be work thrown away.

    ``groups`` is each incident's (release, hardware) in answering order. The worker of the
    next group is started right after the first answer of the current group that the pool
    served, so the current group's worker, just used, is the one the pool keeps, and the
    least recently used one (the previous group's) makes room: with the pool's two workers,
    starting the next one at the first incident of a group, before using the current one,
    would evict the current group's own prestarted worker.
    """

    def __init__(self, settings: KBSettings, groups: Sequence[tuple[str | None, str | None]]):
        self.settings = settings
        self.groups = list(groups)
        self.started: list[tuple[str | None, str | None]] = []
        self._served = 0
        self._warmed: set[int] = set()

    def before(self, at: int) -> None:
        """Before the answer at position ``at``: a new group counts the pool's jobs anew."""
        if at == 0 or self.groups[at] != self.groups[at - 1]:
            self._served = pool_jobs_served()

    def after(self, at: int) -> None:
        """After the answer at position ``at``: when the group has needed the pool, start the
        next group's worker (once)."""
        nxt = next(
            (k for k in range(at + 1, len(self.groups)) if self.groups[k] != self.groups[at]),
            None,
        )
        if nxt is None or nxt in self._warmed or pool_jobs_served() == self._served:
            return
        self._warmed.add(nxt)
        self.started.append(self.groups[nxt])
        prewarm(self.settings, *self.groups[nxt])


def judge(
    result: dict[str, Any], settings: KBSettings, real: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Replay's verdict on the recommended fix of ``result`` (an answer as JSON).

    ``real`` (``{"argv": [...], "release": "X"}``) is the command a log without one really
    ran and the release it ran (a frameless variant's original): the recommended fix's
    edits are applied to that command and replayed on that release, the user's situation."""
    if real is not None and not ((result.get("parsed") or {}).get("command")):
        return _judge_real(result, settings, list(real["argv"]), str(real["release"]))
    fixes = result.get("fixes") or []
    top = next((f for f in fixes if f.get("recommended")), None)
    out: dict[str, Any] = {"recommended": top is not None, "fix_replay": None, "detail": ""}
    release = (result.get("release") or {}).get("release")
    parsed = result.get("parsed") or {}
    argv = list(parsed.get("command") or [])
    why = unavailable_reason(settings, release, argv)
    if why is not None:
        out["detail"] = why
        return out
    if top is None:
        out["fix_replay"] = "failed"
        out["detail"] = "no fix recommended"
        return out
    hardware = parsed.get("hardware")
    startup = _startup(result)
    # the search ran the same probe (or validation alone, for a validation check)
    past = _past_validation(result) and startup is None
    done = (top.get("replay") or {}).get("status")
    if done == "verified" and not past:
        out["fix_replay"] = "passed"
        out["detail"] = (top.get("replay") or {}).get("detail", "")
        return out
    # without hardware, the user's command is replayed too: a stop it shares with the fix
    # (validation asking this CPU-only machine for its GPU) says nothing about the fix;
    # for a check past validation no probe reaches, it says whether replay gets there
    argvs = [top["argv"]] if hardware and not past else [argv, top["argv"]]
    if not hardware and not past:  # and a bare launch: where this machine stops any command
        argvs.append(_bare(argv))
    probe = {"env": probe_env(startup[0]), "model_facts": startup[1]} if startup else {}
    results = replay_many(
        release_root(settings, release),
        release,
        argvs,
        hardware=hardware,
        model_arch=parsed.get("model_arch"),
        settings=settings,
        **probe,
    )
    if past and not _raised_at(results[0], result.get("location") or {}):
        out["detail"] = (
            "replay does not reach this check (past argument validation, "
            f"no start-up probe; the command: {results[0].summary()})"
        )
        return out
    if hardware:
        results = results[-1:]
        fix = results[0]
        out["detail"] = fix.summary()
        out["fix_replay"] = {
            "passed": "passed",
            "raised": "failed",
            "argparse_error": "failed",
        }.get(fix.status)
        return out
    if past:  # the crash reproduced: the fix's own replay decides
        out["detail"] = results[1].summary()
        out["fix_replay"] = {
            "passed": "passed",
            "raised": "failed",
            "argparse_error": "failed",
        }.get(results[1].status)
        return out
    first, fix, bare = results[0], results[1], results[-1]
    if (
        first.status == "argparse_error"
        and fix.status == bare.status == "raised"
        and fix.location == bare.location
    ):  # the command never reached validation, and the fix stops where any launch does
        out["detail"] = (
            f"replay without hardware stops a bare launch at the same place: {bare.summary()}"
        )
        return out
    probe = {"location": result.get("location"), "fixes": [{}]}
    summarise(results[:2], probe, release, hardware)
    verdict = probe["fixes"][0].get("replay") or {}
    out["detail"] = verdict.get("detail", "")
    out["fix_replay"] = {"verified": "passed", "next_failure": "failed"}.get(
        verdict.get("status") or ""
    )
    return out


def _judge_real(
    result: dict[str, Any], settings: KBSettings, argv: list[str], release: str
) -> dict[str, Any]:
    """:func:`judge` for a log without its command: the recommended fix's edits on ``argv``,
    replayed on ``release``; ``passed`` when SGLang's validation accepts the edited command.
    A check past argument validation gets no verdict here (its probe needs the answer's
    own release and location)."""
    fixes = result.get("fixes") or []
    top = next((f for f in fixes if f.get("recommended")), None)
    out: dict[str, Any] = {"recommended": top is not None, "fix_replay": None, "detail": ""}
    why = unavailable_reason(settings, release, argv)
    if why is not None or _past_validation(result):
        out["detail"] = why or "past argument validation: judged statically"
        return out
    if top is None:
        out.update(fix_replay="failed", detail="no fix recommended")
        return out
    store = Store(settings.kb_path / "index.sqlite")
    try:
        edited = apply_edits(
            argv, load_catalog(store, release), set=top.get("set"), remove=top.get("remove")
        )
    except KeyError as exc:  # a flag of the release answered from, not of the user's
        out.update(fix_replay="failed", detail=f"not a flag of {release}: {exc}")
        return out
    finally:
        store.close()
    if edited == argv:  # setting what the command already had is no fix
        out.update(fix_replay="failed", detail="the fix does not change the command")
        return out
    parsed = result.get("parsed") or {}
    (fix,) = replay_many(
        release_root(settings, release),
        release,
        [edited],
        hardware=parsed.get("hardware"),
        model_arch=parsed.get("model_arch"),
        settings=settings,
    )
    out["detail"] = f"on the command the launch ran, in {release}: {fix.summary()}"
    out["fix_replay"] = {"passed": "passed", "raised": "failed", "argparse_error": "failed"}.get(
        fix.status
    )
    return out


def _bare(argv: list[str]) -> list[str]:
    """The launch of ``argv``'s model with no other flag."""
    for i, token in enumerate(argv):
        if token in ("--model-path", "--model") and i + 1 < len(argv):
            return ["--model-path", argv[i + 1]]
        if token.startswith(("--model-path=", "--model=")):
            return ["--model-path", token.split("=", 1)[1]]
    return ["--model-path", "/models/model"]


def _startup(result: dict[str, Any]) -> Any:
    """The start-up probe (and checkpoint facts) for the answer's located check, if any."""
    try:
        answer = TriageResult.model_validate(result)
    except ValueError:
        return None
    return startup_request(answer)


def _past_validation(result: dict[str, Any]) -> bool:
    """Whether the answer located a check of SGLang outside the argument-validation files."""
    path = (result.get("location") or {}).get("path") or ""
    return (
        result.get("status") == "located"
        and path.startswith("sglang/")
        and not path.startswith(VALIDATION_PREFIXES)
    )


def _raised_at(res: ReplayResult, location: dict[str, Any]) -> bool:
    """Whether replay raised inside the located check's lines."""
    origin = res.origin
    start, end = location.get("start_line"), location.get("end_line")
    if res.status != "raised" or origin is None or origin.line is None or start is None:
        return False
    return origin.path == location.get("path") and start <= origin.line <= (end or start)
