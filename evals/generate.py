"""Generate eval incidents from the ingested releases (deterministic for a seed).

``python -m evals.generate --out incidents/generated.jsonl [--seed 0] [--releases R,R,R]``

The shipped files are this script's output with seed 0 and the default count,
one run per file (:data:`SHIPPED_RUNS`): ``generated.jsonl`` for the default
releases, ``generated_more.jsonl`` for :data:`MORE_RELEASES` (``--releases
0.5.5,0.5.16,0.5.21``) and ``generated_old.jsonl`` for :data:`OLD_RELEASES`
(``--releases 0.4.10.post2 --count 24``). A release's searched incidents (``gen-…``) depend only on
the seed, the release and its quota, not on the other releases of the run; the
plain-command ones (``ctx-…``) on the run's releases (a later one may accept it).

For each release (0.5.9, 0.5.11, 0.5.23 by default) the validation checks of
``server_args.py`` and ``arg_groups/`` whose place in the validation order is
known are tried in a seeded order, bare asserts and speculative, attention,
parallelism, page-size, quantization and disaggregation checks first. For a
check, a launch context is drawn (a real model name, a hardware profile, base
flags) and :class:`~evals.groundtruth.Prober` searches for flag
values that make its path condition evaluate to True while no earlier check of
the validation order fires. The expected answer is computed by the evaluator
alone (see :mod:`evals.groundtruth`), and the crash log is rendered with
:func:`~evals.render.render_log` (Python 3.10-3.13, sometimes
with timestamp prefixes, sometimes only the command and the exception line).

Nothing is tuned by hand. By default every incident is then confirmed by a
replay of the release's own validation (:mod:`evals.confirm`): only incidents whose
crash SGLang reproduces at the expected check are kept, with the fixes that
really make it pass, and ``confirmed_by`` says so (``--no-replay`` skips it).
Replay also adds the crashes of plain commands (model and hardware alone, see
:mod:`evals.generate_context`), the source of "no flag fix" incidents.
Last, a frameless log another ingested release prints identically gets that
release's check in ``expected.equivalents`` (:mod:`evals.equivalents`, replayed
on every release of the KB; ``python -m evals.equivalents`` adds them to existing
files in place).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter

from evals.confirm import Confirm, ReplayConfirmer, kb_settings
from evals.equivalents import find_equivalents
from evals.groundtruth import Context, Probe, Prober, root_cause_attrs
from evals.incidents import (
    Expected,
    ExpectedLocation,
    FixSpec,
    Incident,
    categorize,
    dump_incidents,
)
from evals.render import SITE, launcher_warning, render_log, render_message
from kb.code_types import Check
from kb.store import Store
from service.engine import (
    apply_earlier_writes,
    get_profile,
    model_arch_for,
    parse_argv,
    referenced_names,
)

DEFAULT_RELEASES = ("0.5.9", "0.5.11", "0.5.23")
#: releases outside the defaults, both validation layouts (0.5.21: the resolution hooks)
MORE_RELEASES = ("0.5.5", "0.5.16", "0.5.21")
#: a 0.4.x release (validation in ``__post_init__`` itself, then ``check_server_args``)
OLD_RELEASES = ("0.4.10.post2",)
#: shipped file -> the releases its run generated (seed 0, count 72 unless SHIPPED_COUNTS)
SHIPPED_RUNS: dict[str, tuple[str, ...]] = {
    "generated.jsonl": DEFAULT_RELEASES,
    "generated_more.jsonl": MORE_RELEASES,
    "generated_old.jsonl": OLD_RELEASES,
}
#: shipped file -> the count its run asked for (one release's quota, not three)
SHIPPED_COUNTS: dict[str, int] = {"generated_old.jsonl": 24}
#: (model, default tensor parallelism, needs --trust-remote-code)
MODELS: tuple[tuple[str, int, bool], ...] = (
    ("/models/DeepSeek-V3", 8, True),
    ("meta-llama/Llama-3.1-8B-Instruct", 1, False),
    ("Qwen/Qwen3-30B-A3B", 2, False),
    ("moonshotai/Kimi-K2-Instruct", 8, True),
    ("openai/gpt-oss-120b", 4, False),
)
HARDWARE = (
    "h100-x8",
    "h200-x8",
    "b200-x8",
    "rtx-pro-6000-x8",
    "a100-x8",
    "gb200-x4",
    "mi300x-x8",
    "l40s-x4",
)
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
_PREFERRED = (
    "speculative",
    "attention",
    "attn",
    "parallel",
    "page",
    "quant",
    "kv4",
    "fp8",
    "disaggregation",
    "moe",
    "a2a",
    "dp",
    "tp",
)


def _tier(check: Check) -> int:
    """0: a bare assert or a check of a preferred area; 1: the rest."""
    fn = check.function.lower()
    if check.kind == "assert" and check.bare:
        return 0
    return 0 if any(k in fn for k in _PREFERRED) else 1


def context_pool(release: str, rng: random.Random, size: int = 8) -> list[Context]:
    """The launch contexts of a release: every model twice, on seeded hardware."""
    return [_context(release, rng, MODELS[i % len(MODELS)]) for i in range(size)]


def _context(release: str, rng: random.Random, spec: tuple[str, int, bool]) -> Context:
    model, tp, trust = spec
    hardware = rng.choice(HARDWARE)
    count = get_profile(hardware).count
    argv = ["--model-path", model, rng.choice(["--tp", "--tp-size"]), str(min(tp, count))]
    if trust:
        argv.append("--trust-remote-code")
    if rng.random() < 0.3:
        argv += ["--host", "0.0.0.0", "--port", str(rng.choice([30000, 8000, 8080]))]
    return Context(release, model, model_arch_for(model), hardware, tuple(argv))


def _message(prober: Prober, check: Check, probe: Probe, ctx: Context) -> str | None:
    """The exception message SGLang would print (values after the earlier writes)."""
    if check.bare or not check.message:
        return None
    attrs = dict(prober.attrs_for(probe.argv))
    try:
        names = set(referenced_names(check.message))
    except Exception:
        names = set()
    apply_earlier_writes(prober.store, prober.release, check, attrs, prober.facts(ctx), names)
    return render_message(check, attrs)


def _renderable(check: Check) -> bool:
    """Bare, or a message that is a literal or an f-string (else it names locals).

    A raise whose exception or message was built earlier in its function (``test_start``
    set, :mod:`ingest.prebuilt`) is judged as its statement reads (``raise E(msg)``: a
    name, not renderable; ``raise err``: bare), as before ingest resolved them, so the
    seeded draw, and with it the shipped files, stay the script's output."""
    if check.kind == "raise" and check.test_start is not None:
        thrown = (check.source or "").removeprefix("raise").split(" from ")[0].strip()
        return thrown.isidentifier()
    if check.bare or not check.message:
        return check.bare or check.kind == "assert"
    src = check.message.lstrip("( \n")
    return render_message(check, {}) is not None or src.startswith(("f'", 'f"'))


def _log(
    prober: Prober,
    check: Check,
    probe: Probe,
    ctx: Context,
    message: str | None,
    rng: random.Random,
    seed: int,
) -> tuple[str, str]:
    """(crash log, style) for one incident.

    Half of the logs (by a coin of their own, so the main stream of draws is
    unchanged) keep the warning the launcher itself prints when the release
    has one (see :func:`~evals.render.launcher_warning`), right after the command,
    as a pasted terminal or collected stderr shows it.
    """
    python = rng.choice(PYTHONS)
    entry = rng.choice(["python3 -m sglang.launch_server", "python -m sglang.launch_server"])
    site = rng.choice(
        [
            None,
            f"/opt/venv/lib/python{python}/site-packages",
            f"/root/.venv/lib/python{python}/site-packages",
        ]
    )
    coin = random.Random(f"{seed}:{ctx.release}:{check.path}:{check.start_line}:warning")
    warning = (
        launcher_warning(prober.store, prober.release, site or SITE.format(py=python))
        if coin.random() < 0.5
        else []
    )
    pin = f"sglang=={ctx.release}"
    styles = ["traceback", "timestamped"] + (
        ["message_only"] if message and check.kind == "raise" else []
    )
    style = rng.choice(styles) + (" (with the launcher's warning)" if warning else "")
    if style.startswith("message_only"):
        lines = [f"$ {entry} " + " ".join(_quote(a) for a in probe.argv), *warning]
        if rng.random() < 0.8:
            lines.insert(0, f"$ pip list | grep sglang\n{pin}")
        lines.append(f"{check.exc_type or 'AssertionError'}: {message}")
        return "\n".join(lines) + "\n", style
    preamble = warning + ([pin] if rng.random() < 0.3 else [])
    log = render_log(
        prober.store,
        prober.release,
        check,
        python=python,
        argv=probe.argv,
        entry=entry,
        message=message,
        site=site,
        preamble=preamble,
    )
    if style.startswith("timestamped"):
        stamp = (
            f"[2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}]"
        )
        head, _, rest = log.partition("\n")
        log = head + "\n" + "".join(f"{stamp} {line}\n" for line in rest.splitlines())
    return log, style


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def build_incident(
    prober: Prober,
    check: Check,
    ctx: Context,
    probe: Probe,
    rng: random.Random,
    seed: int,
    message: str | None,
) -> Incident:
    """The incident for a firing ``probe`` (expected answer from the evaluator only)."""
    parsed = parse_argv(probe.argv, prober.catalog)
    user = set(parsed.values)
    root = root_cause_attrs(probe.evaluation, user)
    spell = {a: prober.by_attr[a].flags[0] for a in root}
    fixes = prober.acceptable_fixes(check, ctx, probe)
    log, style = _log(prober, check, probe, ctx, message, rng, seed)
    short = check.function.rsplit(".", 1)[-1].strip("_")
    category = categorize(check.path, check.function, root)
    return Incident(
        id=f"gen-{ctx.release}-{short}-{check.start_line}",
        source=f"generated:seed={seed}",
        release=ctx.release,
        hardware=ctx.hardware,
        model=ctx.model,
        model_arch=ctx.model_arch,
        command=list(probe.argv),
        crash_log=log,
        expected=Expected(
            release=ctx.release,
            location=ExpectedLocation(
                path=check.path,
                function=check.function,
                start_line=check.start_line,
                end_line=check.end_line,
            ),
            root_cause_flags=[spell[a] for a in root],
            acceptable_fixes=[FixSpec(**f) for f in fixes],
            no_flag_fix=None
            if fixes
            else "no single or pair edit of the launch flags makes this check pass (computed)",
        ),
        category=category,  # type: ignore[arg-type]
        notes=f"generated: {style} log; flags searched with the evaluator "
        f"({', '.join(f'{k}={v!r}' for k, v in sorted(probe.assign.items()))})",
    )


def generate_release(
    store: Store,
    release: str,
    quota: int,
    seed: int,
    *,
    per_function: int = 3,
    contexts: int = 2,
    log=None,
    confirm: Confirm | None = None,
) -> list[Incident]:
    """Up to ``quota`` incidents for ``release``.

    A first pass takes at most a fifth of the quota per category (so no area
    crowds out the others) and nothing of category ``other``; incidents set
    aside there fill the rest in a second pass, in the order they were found.

    With ``confirm`` (e.g. :class:`~evals.confirm.ReplayConfirmer`), incidents are
    taken tentatively; whenever the quota is tentatively full they are confirmed
    in one batch, those refused are dropped (their function and category slots
    freed) and the search goes on where it stopped. Without it every incident
    is kept as the evaluator found it.
    """
    rng = random.Random(f"{seed}:{release}")
    prober = Prober(store, release)
    pool = context_pool(release, rng)
    cands = [c for c in prober.checks if c.kind in ("assert", "raise") and _renderable(c)]
    # by place, not by row id: ids follow the KB's ingest history (a file copied from
    # another release gets its rows first), and the output must not
    cands.sort(key=lambda c: (c.path, c.start_line, c.end_line, c.kind))
    rng.shuffle(cands)
    cands.sort(key=_tier)
    out: list[Incident] = []
    pending: list[tuple[Incident, str]] = []
    spare: list[tuple[Check, Context, Probe, str | None]] = []
    per_fn: Counter[str] = Counter()
    per_cat: Counter[str] = Counter()
    cat_cap = max(2, -(-quota // 5))

    def take(check: Check, ctx: Context, probe: Probe, message: str | None) -> None:
        inc = build_incident(prober, check, ctx, probe, rng, seed, message)
        pending.append((inc, check.function))
        per_fn[check.function] += 1
        per_cat[inc.category] += 1

    def settle() -> None:
        verdicts = (
            confirm(release, [inc for inc, _ in pending])
            if confirm and pending
            else [inc for inc, _ in pending]
        )
        for (inc, function), kept in zip(pending, verdicts, strict=True):
            if kept is None:
                per_fn[function] -= 1
                per_cat[inc.category] -= 1
            else:
                out.append(kept)
            if log:
                log(
                    f"{release}: {inc.id} [{inc.category}] "
                    f"{'dropped: not confirmed' if kept is None else 'kept'} {len(out)}/{quota}"
                )
        pending.clear()

    def full() -> bool:
        """Tentatively full: confirm what is pending; True when the quota is really met."""
        if len(out) + len(pending) < quota:
            return False
        settle()
        return len(out) >= quota

    for check in cands:
        if full():
            break
        if per_fn[check.function] >= per_function:
            continue
        pieces = [check.condition or "True", *(g["condition"] for g in check.guards)]
        if not prober.levers(check, " and ".join(f"({p})" for p in pieces)):
            continue  # no flag can make it fire
        rare = "page_size" in " ".join(pieces)  # few page-size checks can fire: search harder
        for ctx in rng.sample(pool, 4 if rare else contexts):
            probe = prober.make_fire(check, ctx, rng, budget=200 if rare else 60)
            if probe is None:
                continue
            changed = set(parse_argv(probe.argv, prober.catalog).values) ^ set(
                parse_argv(list(ctx.base_argv), prober.catalog).values
            ) | set(probe.assign)
            if prober.earlier_firing(check, ctx, probe.argv, changed) is not None:
                continue
            message = _message(prober, check, probe, ctx)
            if message is None and not check.bare and check.message:
                break  # SGLang would print a message we cannot render faithfully
            user = set(parse_argv(probe.argv, prober.catalog).values)
            cat = categorize(check.path, check.function, root_cause_attrs(probe.evaluation, user))
            if cat == "other" or per_cat[cat] >= cat_cap:
                spare.append((check, ctx, probe, message))
            else:
                take(check, ctx, probe, message)
            break
    settle()
    for check, ctx, probe, message in spare:
        if full():
            break
        if per_fn[check.function] < per_function:
            take(check, ctx, probe, message)
    settle()
    return out


def generate(
    store: Store,
    *,
    seed: int = 0,
    count: int = 72,
    releases: tuple[str, ...] = DEFAULT_RELEASES,
    log=None,
    confirm: Confirm | None = None,
) -> list[Incident]:
    """``count`` incidents spread evenly over ``releases`` (fewer if a release runs dry)."""
    out: list[Incident] = []
    for release in releases:
        quota = quota_for(release, releases, count)
        out.extend(generate_release(store, release, quota, seed, log=log, confirm=confirm))
    return out


def quota_for(release: str, releases: tuple[str, ...], count: int = 72) -> int:
    """``release``'s share of ``count`` in a run over ``releases`` (its quota, which also
    sets the per-category cap: a release that runs dry keeps fewer incidents than it)."""
    i = releases.index(release)
    return count // len(releases) + (1 if i < count % len(releases) else 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m evals.generate", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--out", required=True, help="JSONL file to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=72)
    ap.add_argument("--releases", default=",".join(DEFAULT_RELEASES))
    ap.add_argument("--kb", default=None, help="KB folder (default: TRIAGE_KB_DIR or <home>/kb)")
    ap.add_argument(
        "--no-replay",
        action="store_true",
        help="keep the evaluator's ground truth unconfirmed (no replay)",
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    settings = kb_settings(args.kb)
    store = Store(settings.kb_path / "index.sqlite")
    releases = tuple(r.strip() for r in args.releases.split(",") if r.strip())
    for r in releases:
        store.require(r)
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    confirm = None if args.no_replay else ReplayConfirmer(settings, store, log=log)
    incidents = generate(
        store, seed=args.seed, count=args.count, releases=releases, log=log, confirm=confirm
    )
    if confirm is not None:  # crashes of plain commands: replay is their only judge
        from evals.generate_context import context_incidents

        incidents += context_incidents(
            store, settings, releases, contexts=MODELS, hardware=HARDWARE, seed=args.seed, log=log
        )
        # frameless logs other releases print identically: their equivalent answers
        found = find_equivalents(
            store, incidents, [r["version"] for r in store.releases()], confirm.replay, log=log
        )
        incidents = [
            i.model_copy(
                update={"expected": i.expected.model_copy(update={"equivalents": found[i.id]})}
            )
            if i.id in found
            else i
            for i in incidents
        ]
    dump_incidents(incidents, args.out)
    cats = Counter(i.category for i in incidents)
    print(
        f"wrote {len(incidents)} incidents to {args.out}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(cats.items()))
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
