"""Incidents the launch context alone triggers, found and judged by replay only.

The main generator (:mod:`evals.generate`) searches *flag values* that make a check
fire. Some crashes need no unusual flag at all: the model and the hardware
trigger them (``gpt-oss-120b``'s mxfp4 weights on an MI300X, say). Those are
the incidents where the right answer may be "no flag fix".

For every release, hardware profile and model of the generator's contexts,
the plain command (model, tensor parallelism, ``--trust-remote-code``) is
replayed with the release's own validation. A command SGLang refuses inside a
check of the KB becomes an incident:

* **location** — the check replay raised in (innermost SGLang frame);
* **crash log** — SGLang's real traceback and message from the replay
  (:func:`~evals.render.render_replay_log`, Python 3.11 as in the replay);
* **acceptable fixes** — single edits of the flags the check reads (drop one,
  or set it to one of its choices, at most ``max_edits`` in a seeded order),
  each replayed: those after which validation passes (an edit that only moves
  the refusal elsewhere — ``--quantization fp8`` against mxfp4 weights trades
  "unknown method" for "does not match the model config" — is no fix);
* **no flag fix** — when none of them holds. The reason says whether a later
  ingested release accepts the same command on the same hardware (an upgrade)
  or none does (the model or the hardware must change).

Nothing comes from the static evaluator or the engine: replay is the only
judge, so every incident has ``confirmed_by = "replay:<release>:<hardware>"``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from evals.incidents import Expected, ExpectedLocation, FixSpec, Incident, categorize
from evals.render import render_replay_log
from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.store import Store
from service.engine import apply_edits, get_profile, model_arch_for, referenced_names
from service.replay.results import ReplayResult
from service.settings import Settings

__all__ = ["context_incidents", "plain_command"]

#: attributes never edited by a fix (the model itself, and what the user asked to serve with)
_FROZEN = {"model_path", "tokenizer_path", "trust_remote_code", "tp_size"}
Replay = Callable[..., list[ReplayResult]]


def plain_command(model: str, tp: int, trust: bool, hardware: str) -> list[str]:
    """The plainest launch of ``model`` on ``hardware``."""
    argv = ["--model-path", model, "--tp", str(min(tp, get_profile(hardware).count))]
    return argv + (["--trust-remote-code"] if trust else [])


def _check_of(store: Store, release: str, res: ReplayResult) -> Check | None:
    origin = res.origin
    if res.status != "raised" or origin is None or origin.line is None:
        return None
    rows = store.checks(
        release,
        path=origin.path,
        where="start_line <= ? AND end_line >= ?",
        params=[origin.line, origin.line],
    )
    rows = [r for r in rows if r.kind in ("assert", "raise")]
    return min(rows, key=lambda r: r.end_line - r.start_line) if rows else None


def _edits(
    check: Check,
    argv: list[str],
    by_attr: dict[str, Any],
    rng: random.Random,
    max_edits: int,
) -> list[FixSpec]:
    """Single edits of the flags the check (and its guards) read, in a seeded order."""
    texts = [check.condition or "", *(g["condition"] for g in check.guards)]
    attrs: set[str] = set()
    for text in texts:
        try:
            attrs |= set(referenced_names(text)) if text else set()
        except Exception:
            continue
    out: list[FixSpec] = []
    for attr in sorted(a for a in attrs if a in by_attr and a not in _FROZEN):
        spec = by_attr[attr]
        if spec.deprecated:
            continue
        flag = spec.flags[0]
        if any(a in spec.flags for a in argv):
            out.append(FixSpec(remove=[flag]))
        choices = [c for c in (spec.choices or []) if isinstance(c, str | int | float)]
        rng.shuffle(choices)
        out += [FixSpec(set={flag: c}) for c in choices[:max_edits]]
    rng.shuffle(out)
    return out[:max_edits]


def context_incidents(
    store: Store,
    settings: Settings,
    releases: Sequence[str],
    *,
    contexts: Sequence[tuple[str, int, bool]],
    hardware: Sequence[str],
    seed: int = 0,
    max_edits: int = 8,
    replay: Replay | None = None,
    log: Callable[[str], None] | None = None,
) -> list[Incident]:
    """Incidents of plain commands that SGLang refuses (see module doc)."""
    from kb.sources import fetch_release
    from service.replay.harness import replay_many

    replay = replay or replay_many
    rng = random.Random(f"{seed}:context")
    roots = {
        r: fetch_release(
            r,
            wheel_dir=settings.wheel_dir,
            source_dir=settings.source_dir,
            index_url=settings.pip_index_url,
        ).root
        for r in releases
    }
    archs = [model_arch_for(m) for m, _, _ in contexts]

    def run(
        release: str, hw: str, argvs: list[list[str]], arch: list[str | None]
    ) -> list[ReplayResult]:
        return replay(
            roots[release],
            release,
            argvs,
            hardware=hw,
            model_arch=arch,
            timeout_s=180,
            job_timeout_s=30,
            settings=settings,
        )

    plain: dict[tuple[str, str], list[ReplayResult]] = {}
    for release in releases:
        for hw in hardware:
            argvs = [plain_command(m, tp, trust, hw) for m, tp, trust in contexts]
            plain[(release, hw)] = run(release, hw, argvs, list(archs))
    out: list[Incident] = []
    for r_i, release in enumerate(releases):
        catalog = load_catalog(store, release)
        by_attr = catalog.by_attr()
        for hw in hardware:
            for c_i, ((model, tp, trust), arch, res) in enumerate(
                zip(contexts, archs, plain[(release, hw)], strict=True)
            ):
                check = _check_of(store, release, res)
                if check is None:
                    continue
                argv = plain_command(model, tp, trust, hw)
                edits = _edits(check, argv, by_attr, rng, max_edits)
                tried = (
                    run(
                        release,
                        hw,
                        [
                            apply_edits(argv, catalog, set=dict(e.set), remove=list(e.remove))
                            for e in edits
                        ],
                        [arch] * len(edits),
                    )
                    if edits
                    else []
                )
                # with no static analysis behind them, only an edit SGLang fully accepts counts
                fixes = [e for e, t in zip(edits, tried, strict=True) if t.status == "passed"]
                later = [r for r in releases[r_i + 1 :] if plain[(r, hw)][c_i].status == "passed"]
                no_fix = (
                    None
                    if fixes
                    else (
                        f"upgrade: {later[0]} accepts the same command on {hw} (replay); none of "
                        f"{len(edits)} single edits of the flags the check reads passes"
                        if later
                        else f"the model and the hardware trigger it: none of {len(edits)} "
                        "single edits of the flags the check reads passes (replay); change the "
                        "hardware or the model (checkpoint format)"
                    )
                )
                short = check.function.rsplit(".", 1)[-1].strip("_")
                inc = Incident(
                    id=f"ctx-{release}-{hw}-{short}-{check.start_line}",
                    source=f"generated:context:seed={seed}",
                    release=release,
                    hardware=hw,
                    model=model,
                    model_arch=arch,
                    command=argv,
                    crash_log=render_replay_log(store, release, res, argv),
                    expected=Expected(
                        release=release,
                        location=ExpectedLocation(
                            path=check.path,
                            function=check.function,
                            start_line=check.start_line,
                            end_line=check.end_line,
                        ),
                        root_cause_flags=[],
                        acceptable_fixes=fixes,
                        no_flag_fix=no_fix,
                    ),
                    category=categorize(check.path, check.function, []),
                    notes=f"generated from a plain command SGLang refuses on {hw}; "
                    f"{len(fixes)}/{len(edits)} replayed single edits hold",
                    confirmed_by=f"replay:{release}:{hw}",
                )
                if log:
                    log(f"{inc.id}: {'no flag fix' if no_fix else f'{len(fixes)} fixes'}")
                out.append(inc)
    return out
