"""Incidents of the start-up check families replay reaches (issue #27): ``block_shape`` and
``moe_runner_a2a``.

For each release whose KB has the family's check, failing launches are run through the
release's own start-up code by replay's start-up probes (:func:`service.replay.probes.
replay_startup`, on the warm pool, answers cached on disk):

``block_shape``      FP8 block-quantized MoE checkpoints (:data:`BLOCK_CHECKPOINTS`: a
                     Qwen3-30B-A3B-FP8 shape, a Qwen3-235B-A22B-FP8 shape, and a
                     hypothetical 128x256-block fine-tune whose ``block_k`` only the MoE
                     method's ``create_weights`` checks) under tensor/expert-parallel
                     layouts (:data:`BLOCK_LAYOUTS`); the probe runs the model config,
                     ``check_quantized_moe_compatibility`` (0.5.9+) and the MoE layer's
                     ``create_weights``
``moe_runner_a2a``   (a2a backend, MoE runner) pairs the release does **not** register
                     (``register_fused_func``, read from the KB), for the a2a backends whose
                     MoE layer a probe builds (:data:`A2A_BACKENDS`) and the runners the
                     release registers and its ``--moe-runner-backend`` accepts, on a BF16
                     and an FP8 checkpoint; the probe builds the
                     model's MoE layer, whose quant method constructs ``MoeRunner``

An incident is kept only when replay **raised** at the family's check (phase ``probe``,
innermost frame in one of :data:`service.replay.probes.FAMILY_CHECKS`). Its crash log is
:func:`evals.render.render_replay_log` of that replay (SGLang's real frames and message)
under the launch command, its expected location the KB's check spanning the origin line,
and its acceptable fixes the natural single-flag edits (:func:`block_fixes`,
:func:`a2a_fixes`) **the same probe accepted** on replay (status ``passed``); an incident
none of whose candidate fixes passes is dropped. Everything is deterministic (fixed lists,
no random draws); per release at most :data:`PER_RELEASE` incidents per family, picked by
rotating through the launches so the releases differ.

The model ids are ones the KB's known models know (``kb/data/known_models.json``) or that
it does not know at all (the hypothetical one): the engine then learns the checkpoint's
shape from the values the message printed, and the eval's replay judge
(:mod:`evals.replay_check`) rebuilds the same facts for the probe.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.incidents import Expected, ExpectedLocation, FixSpec, Incident, categorize
from evals.render import render_replay_log
from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.settings import KBSettings
from kb.store import Store
from service.engine import apply_edits
from service.replay import ReplayResult, StartupProbe, replay_startup
from service.replay.probes import FAMILY_CHECKS

__all__ = [
    "A2A_BACKENDS",
    "BLOCK_CHECKPOINTS",
    "BLOCK_LAYOUTS",
    "HARDWARE",
    "PER_RELEASE",
    "Checkpoint",
    "a2a_fixes",
    "block_fixes",
    "family_checks",
    "replayed_incidents",
]

#: the machine every launch declares (a profile replay's probes run on, see their tests)
HARDWARE = "rtx-pro-6000-x8"
QWEN_MOE = "Qwen3MoeForCausalLM"
DEEPSEEK = "DeepseekV3ForCausalLM"
#: incident family -> the probe family that reaches it
PROBES: dict[str, str] = {"block_shape": "moe_block_shape", "moe_runner_a2a": "moe_runner_a2a"}
#: at most this many incidents per family and release
PER_RELEASE: dict[str, int] = {"block_shape": 5, "moe_runner_a2a": 4}
REGISTRY = "register_fused_func"
#: a2a backends whose MoE layer (DeepEPMoE ...) the probe builds on this machine
A2A_BACKENDS = ("deepep", "mooncake")
_FUSED = "requires a fused func for a2a backend"


def _fp8(block: list[int]) -> dict[str, Any]:
    return {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": block,
    }


@dataclass(frozen=True)
class Checkpoint:
    """A model as launched: its id, architecture, and the config facts laid over replay's
    stand-in for that architecture (:func:`service.replay.model_configs.config_with_facts`)."""

    short: str
    model: str
    arch: str
    facts: Mapping[str, Any] = field(default_factory=dict)
    extra_argv: tuple[str, ...] = ()


#: block-quantized MoE checkpoints (the Qwen3-30B-A3B stand-in has moe_intermediate_size 768)
BLOCK_CHECKPOINTS: tuple[Checkpoint, ...] = (
    Checkpoint(
        "qwen3-30b-fp8",
        "Qwen/Qwen3-30B-A3B-FP8",
        QWEN_MOE,
        {"quantization_config": _fp8([128, 128])},
    ),
    Checkpoint(
        "qwen3-235b-fp8",
        "Qwen/Qwen3-235B-A22B-FP8",
        QWEN_MOE,
        {
            "hidden_size": 4096,
            "moe_intermediate_size": 1536,
            "num_experts_per_tok": 8,
            "quantization_config": _fp8([128, 128]),
        },
    ),
    # hypothetical: block_n 128 passes the compatibility check where block_k 256 fails
    # create_weights (384 % 256)
    Checkpoint(
        "b128x256",
        "example-org/Qwen3-30B-A3B-FP8-block128x256",
        QWEN_MOE,
        {"quantization_config": _fp8([128, 256])},
    ),
)
_MULTI_NODE = ("--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000")
#: (checkpoint short name, layout flags): launches that fail with some release's checks
BLOCK_LAYOUTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("qwen3-30b-fp8", ("--tp-size", "8")),
    ("qwen3-235b-fp8", ("--tp", "8")),
    ("qwen3-30b-fp8", ("--tp", "4")),
    ("b128x256", ("--tp-size", "2")),
    ("qwen3-30b-fp8", ("--tp-size", "8", "--ep", "2")),
    ("qwen3-235b-fp8", ("--tp-size", "16", *_MULTI_NODE)),
    ("qwen3-30b-fp8", ("--tp", "16", *_MULTI_NODE)),
)
#: MoE checkpoints the a2a launches use (BF16 and FP8; the stand-ins as they are)
A2A_CHECKPOINTS: tuple[Checkpoint, ...] = (
    Checkpoint("qwen3-30b", "Qwen/Qwen3-30B-A3B", QWEN_MOE),
    Checkpoint(
        "deepseek-v3", "deepseek-ai/DeepSeek-V3", DEEPSEEK, extra_argv=("--trust-remote-code",)
    ),
)
_TP = ("--tp-size", "--tp", "--tensor-parallel-size")
_EP = ("--ep-size", "--ep", "--expert-parallel-size")

Log = Callable[[str], None]


def family_checks(store: Store, release: str, family: str) -> list[Check]:
    """The KB's checks of ``release`` that ``family``'s probe reaches (``moe_runner_a2a``:
    only the missing fused-func refusal)."""
    targets = FAMILY_CHECKS[PROBES[family]]
    out = [
        c
        for c in store.checks(release)
        if c.path.startswith("sglang/srt/")
        and any(
            c.path.endswith(suffix) and c.function.rsplit(".", 1)[-1] == name
            for suffix, name in targets
        )
    ]
    if family == "moe_runner_a2a":
        out = [c for c in out if _FUSED in (c.message or "")]
    return out


def _check_at(checks: Sequence[Check], result: ReplayResult) -> Check | None:
    """The innermost of ``checks`` spanning the origin line of a raised probe replay."""
    origin = result.origin
    if (
        result.status != "raised"
        or result.phase != "probe"
        or origin is None
        or origin.line is None
    ):
        return None
    hits = [
        c for c in checks if c.path == origin.path and c.start_line <= origin.line <= c.end_line
    ]
    return min(hits, key=lambda c: c.end_line - c.start_line, default=None)


def _flag(argv: Sequence[str], names: Sequence[str], default: int) -> int:
    values = [int(argv[i + 1]) for i, tok in enumerate(argv[:-1]) if tok in names]
    return values[-1] if values else default


def block_fixes(argv: Sequence[str]) -> list[FixSpec]:
    """Single-flag edits of a parallel layout: every other ``--ep-size`` dividing ``--tp``,
    and every other power-of-two ``--tp-size`` up to 16 (for which the current expert
    parallelism still divides it)."""
    tp, ep = _flag(argv, _TP, 1), _flag(argv, _EP, 1)
    out = [
        FixSpec(set={"--ep-size": e})
        for e in (1, 2, 4, 8, 16)
        if e != ep and e <= tp and tp % e == 0
    ]
    out += [FixSpec(set={"--tp-size": t}) for t in (1, 2, 4, 8, 16) if t != tp and t % ep == 0]
    return out


def _pairs(store: Store, release: str) -> set[tuple[str, str]]:
    return {
        (r["keys"][0], r["keys"][1])
        for r in store.registrations(release, registry=REGISTRY)
        if len(r["keys"]) == 2
    }


def a2a_fixes(pairs: set[tuple[str, str]], a2a: str, runner: str) -> list[FixSpec]:
    """Every other runner registered for ``a2a``, every other a2a backend for ``runner``."""
    out = [
        FixSpec(set={"--moe-runner-backend": r})
        for a, r in sorted(pairs)
        if a == a2a and r != runner
    ]
    out += [
        FixSpec(set={"--moe-a2a-backend": a}) for a, r in sorted(pairs) if r == runner and a != a2a
    ]
    return out


@dataclass
class _Launch:
    """One failing launch under test and what replay said of it and its fixes."""

    family: str
    ckpt: Checkpoint
    argv: list[str]
    short: str
    fixes: list[FixSpec] = field(default_factory=list)
    crash: ReplayResult | None = None
    check: Check | None = None


class _Replayer:
    """Replay of one release on :data:`HARDWARE`, batched per (probe, checkpoint)."""

    def __init__(self, settings: KBSettings, release: str, root: Path) -> None:
        self.settings, self.release, self.root = settings, release, root

    def run(
        self, family: str, ckpt: Checkpoint, argvs: Sequence[Sequence[str]]
    ) -> list[ReplayResult]:
        if not argvs:
            return []
        return replay_startup(
            self.settings,
            self.release,
            HARDWARE,
            argvs,
            probe=StartupProbe(family=PROBES[family]),  # type: ignore[arg-type]
            model_arch=ckpt.arch,
            model_facts=dict(ckpt.facts),
            release_root=self.root,
            timeout_s=300,
            job_timeout_s=90,
        )


def _crash_and_fixes(
    rp: _Replayer, launches: list[_Launch], checks: list[Check], catalog: Any
) -> list[tuple[_Launch, list[FixSpec]]]:
    """Replay each launch, then the candidate fixes of those that raised at a family check;
    (launch, fixes replay accepted) for the launches kept."""
    by_ckpt: dict[str, list[_Launch]] = {}
    for launch in launches:
        by_ckpt.setdefault(launch.ckpt.short, []).append(launch)
    out: list[tuple[_Launch, list[FixSpec]]] = []
    for group in by_ckpt.values():
        ckpt, family = group[0].ckpt, group[0].family
        for launch, res in zip(group, rp.run(family, ckpt, [g.argv for g in group]), strict=True):
            launch.crash, launch.check = res, _check_at(checks, res)
        crashed = [g for g in group if g.check is not None]
        fixed = [
            (g, f, apply_edits(g.argv, catalog, set=dict(f.set))) for g in crashed for f in g.fixes
        ]
        verdicts = rp.run(family, ckpt, [argv for _, _, argv in fixed])
        held: dict[int, list[FixSpec]] = {}
        for (g, fix, _), res in zip(fixed, verdicts, strict=True):
            if res.status == "passed":
                held.setdefault(id(g), []).append(fix)
        out += [(g, held[id(g)]) for g in crashed if id(g) in held]
    return out


def _block_launches() -> list[_Launch]:
    by_short = {c.short: c for c in BLOCK_CHECKPOINTS}
    out = []
    for short, layout in BLOCK_LAYOUTS:
        ckpt = by_short[short]
        argv = ["--model-path", ckpt.model, *layout, *ckpt.extra_argv]
        tp, ep = _flag(argv, _TP, 1), _flag(argv, _EP, 1)
        tag = f"{short}-tp{tp}" + (f"-ep{ep}" if ep > 1 else "")
        out.append(_Launch("block_shape", ckpt, argv, tag, block_fixes(argv)))
    return out


def _a2a_launches(store: Store, release: str, catalog: Any) -> list[_Launch]:
    spec = catalog.by_flag().get("--moe-a2a-backend")
    choices = [a for a in A2A_BACKENDS if spec is not None and a in (spec.choices or [])]
    pairs = _pairs(store, release)
    runner_spec = catalog.by_flag().get("--moe-runner-backend")
    runners = sorted({r for _, r in pairs} & set(runner_spec.choices or [] if runner_spec else []))
    out = []
    for ckpt in A2A_CHECKPOINTS:
        for a2a in choices:
            for runner in runners:
                if (a2a, runner) in pairs:
                    continue
                argv = [
                    "--model-path",
                    ckpt.model,
                    "--tp-size",
                    "8",
                    "--ep-size",
                    "8",
                    *ckpt.extra_argv,
                    "--moe-a2a-backend",
                    a2a,
                    "--moe-runner-backend",
                    runner,
                ]
                out.append(
                    _Launch(
                        "moe_runner_a2a",
                        ckpt,
                        argv,
                        f"{ckpt.short}-{a2a}-{runner}",
                        a2a_fixes(pairs, a2a, runner),
                    )
                )
    return out


def _pick(
    kept: list[tuple[_Launch, list[FixSpec]]], cap: int, offset: int, key: Callable[[_Launch], str]
) -> list[tuple[_Launch, list[FixSpec]]]:
    """Up to ``cap`` launches, round-robin over ``key`` groups (rotated by ``offset``)."""
    groups: dict[str, list[tuple[_Launch, list[FixSpec]]]] = {}
    for item in kept:
        groups.setdefault(key(item[0]), []).append(item)
    names = sorted(groups)
    names = names[offset % len(names) :] + names[: offset % len(names)] if names else []
    out: list[tuple[_Launch, list[FixSpec]]] = []
    depth = 0
    while len(out) < cap and any(len(groups[n]) > depth for n in names):
        for n in names:
            members = groups[n]
            if len(members) > depth and len(out) < cap:
                out.append(members[(depth + offset) % len(members)])
        depth += 1
    return out


_SLUG = re.compile(r"[^a-z0-9]{1,40}")


def _incident(
    store: Store, release: str, launch: _Launch, fixes: list[FixSpec], entry: str
) -> Incident:
    crash, check = launch.crash, launch.check
    assert crash is not None and check is not None
    if launch.family == "block_shape":
        root = [
            f
            for f in ("--tp-size", "--ep-size")
            if any(t in launch.argv for t in (_TP if f == "--tp-size" else _EP))
        ]
    else:
        root = ["--moe-a2a-backend", "--moe-runner-backend"]
    attrs = [f.strip("-").replace("-", "_") for f in root]
    short = _SLUG.sub("-", launch.short.lower()).strip("-")
    facts = ", ".join(f"{k}={v}" for k, v in sorted(launch.ckpt.facts.items())) or "none"
    return Incident(
        id=f"fam-{launch.family}-{release}-{short}",
        source=f"generated:family={launch.family}",
        release=release,
        hardware=HARDWARE,
        model=launch.ckpt.model,
        model_arch=launch.ckpt.arch,
        command=list(launch.argv),
        crash_log=render_replay_log(store, release, crash, launch.argv, entry=entry),
        expected=Expected(
            release=release,
            location=ExpectedLocation(
                path=check.path,
                function=check.function,
                start_line=check.start_line,
                end_line=check.end_line,
            ),
            root_cause_flags=root,
            acceptable_fixes=fixes,
        ),
        category=categorize(check.path, check.function, attrs),
        notes=(
            f"generated: start-up probe {PROBES[launch.family]} on {HARDWARE} "
            f"({launch.ckpt.arch}, model facts: {facts}); replay: crash reproduced at "
            f"{crash.location}, {len(fixes)}/{len(launch.fixes)} fixes hold"
        ),
        confirmed_by=f"replay-probe:{release}:{HARDWARE}",
        family=launch.family,
    )


def _release_root(settings: KBSettings, release: str) -> Path:
    from kb.sources import fetch_release

    return fetch_release(
        release,
        wheel_dir=settings.wheel_dir,
        source_dir=settings.source_dir,
        index_url=getattr(settings, "pip_index_url", None),
    ).root


def replayed_incidents(
    store: Store,
    settings: KBSettings,
    releases: Sequence[str],
    *,
    families: Sequence[str] = ("block_shape", "moe_runner_a2a"),
    per_release: Mapping[str, int] | None = None,
    max_launches: int | None = None,
    log: Log | None = None,
) -> list[Incident]:
    """The replay-confirmed incidents of ``families`` for ``releases`` (see the module
    docstring); a release without the family's check, or whose release tree cannot be
    fetched, contributes none. ``per_release`` overrides :data:`PER_RELEASE`;
    ``max_launches`` replays only the first so many launches per family and release."""
    caps = {**PER_RELEASE, **dict(per_release or {})}
    out: list[Incident] = []
    for index, release in enumerate(releases):
        wanted = {f: family_checks(store, release, f) for f in families}
        wanted = {f: c for f, c in wanted.items() if c}
        if not wanted:
            continue
        try:
            rp = _Replayer(settings, release, _release_root(settings, release))
        except Exception as exc:
            if log:
                log(f"{release}: no release tree for replay ({exc})")
            continue
        catalog = load_catalog(store, release)
        entry = ("python3 -m sglang.launch_server", "python -m sglang.launch_server")[index % 2]
        for family, checks in wanted.items():
            if family == "block_shape":
                launches = _block_launches()
                key: Callable[[_Launch], str] = lambda g: g.short  # noqa: E731
            else:
                launches = _a2a_launches(store, release, catalog)
                launches.sort(key=lambda g: (g.argv[-1], g.argv[-3]))  # runner, then a2a
                key = lambda g: g.ckpt.short  # noqa: E731 - alternate the models
            kept = _crash_and_fixes(rp, launches[:max_launches], checks, catalog)
            chosen = _pick(kept, caps[family], index, key)
            out += [_incident(store, release, g, fixes, entry) for g, fixes in chosen]
            if log:
                log(
                    f"{release} {family}: {len(launches)} launches, {len(kept)} refused at the "
                    f"check with a fix replay accepted, {len(chosen)} kept"
                )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evals.families.replayed --out FILE [--releases ...] [--kb DIR]``."""
    import argparse

    from evals.confirm import kb_settings
    from evals.incidents import dump_incidents

    ap = argparse.ArgumentParser(prog="python -m evals.families.replayed")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--releases", default="0.5.5,0.5.9,0.5.11,0.5.16,0.5.21,0.5.23")
    ap.add_argument("--kb", default=None)
    args = ap.parse_args(argv)
    settings = kb_settings(args.kb)
    store = Store(settings.kb_path / "index.sqlite")
    releases = [r.strip() for r in args.releases.split(",") if r.strip()]
    incidents = replayed_incidents(
        store, settings, releases, log=lambda m: print(m, file=sys.stderr, flush=True)
    )
    dump_incidents(incidents, args.out)
    print(f"{len(incidents)} incidents -> {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
