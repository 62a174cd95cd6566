"""The ``memory_pool`` family: SGLang sized a pool (KV cache, request slots, mamba state)
from the free GPU memory, the pool came out too small, and the message says which flag
to move ("Not enough memory. Please try to increase --mem-fraction-static", "set a
smaller number for `--max-running-requests`", "try to increase
--mamba-full-memory-ratio").

Cases come from each release's own raises in its pool-sizing code (:data:`POOL_CODE`)
whose message names a numeric launch flag of that release after a direction word,
rendered (:func:`~evals.families.messages.render_source`) with a failing launch's values
(:func:`render_memory`): a flag's attribute is the launch's value, a quantity named for a
fraction the launch's ``--mem-fraction-static`` plus 0.07 (the bound a message prints,
"above 0.870"), anything else 0. The steps (:func:`steps_of`) are the flags the message
names with the direction it says and the bound printed after one; a correct fix moves
one or two of them that way from the launch's value (:func:`acceptable_fixes`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evals.families.messages import render_source
from kb.catalog_types import FlagSpec
from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.incidents import FixSpec
from kb.store import Store

__all__ = [
    "LAUNCH",
    "POOL_CODE",
    "MemoryCase",
    "acceptable_fixes",
    "fraction_like",
    "memory_cases",
    "render_memory",
    "steps_of",
]

#: where SGLang sizes its pools
POOL_CODE = ("sglang/srt/mem_cache/", "sglang/srt/model_executor/")
UP = ("increase", "raise", "larger", "higher")
DOWN = ("reduce", "lower", "smaller", "decrease")
#: the failing launch: each flag is sent when the release declares it
LAUNCH: dict[str, float] = {
    "--mem-fraction-static": 0.8,
    "--max-running-requests": 64,
    "--mamba-full-memory-ratio": 0.5,
    "--max-mamba-cache-size": 100,
    "--chunked-prefill-size": 4096,
}
#: highest memory fraction (or ratio) a fix may set
FRACTION_CAP = 0.95
#: a count moved up stays within this many times the launch's value
COUNT_CAP = 8

Step = tuple[str, str, float | None]


@dataclass(frozen=True)
class MemoryCase:
    """One rendered pool-sizing raise."""

    release: str
    check: Check
    message: str
    #: (flag, "up"/"down", bound printed after it or None), as the message words them
    steps: tuple[Step, ...]


def render_memory(src: str, launch: Mapping[str, float] = LAUNCH) -> str | None:
    """``src`` rendered with ``launch``'s values (module docstring)."""
    by_attr = {f[2:].replace("-", "_"): v for f, v in launch.items()}
    frac = launch.get("--mem-fraction-static", LAUNCH["--mem-fraction-static"])

    def fill(name: str) -> object:
        if name in by_attr:
            return by_attr[name]
        return round(frac + 0.07, 4) if "fraction" in name else 0

    return render_source(src, {}, fill)


def steps_of(text: str, flags: set[str]) -> tuple[Step, ...]:
    """The numeric ``flags`` ``text`` names after a direction word of its sentence, with
    the bound printed right after ("above 0.870", "at least 2")."""
    out = []
    for m in re.finditer(r"--[a-z][a-z0-9-]{1,60}[a-z0-9]", text):
        flag = m.group(0)
        if flag not in flags:
            continue
        before = text[max(0, text.rfind(".", 0, m.start()) + 1) : m.start()].lower()
        words = re.findall(r"[a-z]+", before)
        way = next((("up" if w in UP else "down") for w in reversed(words) if w in UP + DOWN), None)
        if way is None:
            continue
        b = re.match(r"`? (?:above|at least) ([0-9.]{0,20}[0-9])", text[m.end() :])
        out.append((flag, way, float(b.group(1)) if b else None))
    return tuple(out)


def numeric_flags(flags: Sequence[FlagSpec]) -> set[str]:
    return {f for s in flags if s.type in ("int", "float") for f in s.flags}


def memory_cases(
    store: Store,
    releases: Sequence[str],
    per_release: int = 4,
    launch: Mapping[str, float] = LAUNCH,
) -> list[MemoryCase]:
    """Up to ``per_release`` cases per release the KB holds: the first raise (by path and
    line) of each recipe (its steps), rendered with ``launch``."""
    out: list[MemoryCase] = []
    have = {r["version"] for r in store.releases()}
    for release in releases:
        if release not in have:
            continue
        flags = numeric_flags(load_catalog(store, release).flags)
        mine: list[MemoryCase] = []
        for c in sorted(store.checks(release), key=lambda c: (c.path, c.start_line)):
            src = c.message or ""
            if not c.path.startswith(POOL_CODE) or "--" not in src:
                continue
            if not re.search(r"memory|space|pool|cache", src, re.I):
                continue
            message = render_memory(src, launch)
            steps = steps_of(message or "", flags)
            if message and steps and all(i.steps != steps for i in mine):  # one per recipe
                mine.append(MemoryCase(release, c, message, steps))
        out += mine[:per_release]
    return out


def fraction_like(flag: str, spec: FlagSpec) -> bool:
    """A share of memory (kept <= :data:`FRACTION_CAP`)."""
    return spec.type == "float" and ("fraction" in flag or "ratio" in flag)


def _range(step: Step, current: float, spec: FlagSpec) -> tuple[float, float] | None:
    """Where ``step`` may set its flag from ``current``: past the bound the message
    printed, in the direction it says, within the caps."""
    flag, way, bound = step
    if fraction_like(flag, spec):
        eps = 0.001
        low, high = (
            (max(current, bound or current) + eps, FRACTION_CAP)
            if way == "up"
            else (eps, current - eps)
        )
    elif spec.type == "int":
        low, high = (
            (max(current, bound or current) + 1, max(current, 1) * COUNT_CAP)
            if way == "up"
            else (1, current - 1)
        )
    else:
        low, high = (
            (max(current, bound or current) * 1.001, current * COUNT_CAP)
            if way == "up"
            else (current * 0.001, current * 0.999)
        )
    return (round(low, 4), round(high, 4)) if low <= high else None


def acceptable_fixes(
    steps: Sequence[Step], launch: Mapping[str, float], flags: Sequence[FlagSpec]
) -> list[FixSpec]:
    """Moving one step's flag, or two steps' flags together, from the launch's value the
    way the message says (a step whose flag the launch did not set has no value to move
    from, and is left out)."""
    by_flag = {f: s for s in flags for f in s.flags}
    ranges = {}
    for step in steps:
        flag = step[0]
        if flag in launch and flag in by_flag:
            r = _range(step, float(launch[flag]), by_flag[flag])
            if r is not None:
                ranges[flag] = r
    singles = [FixSpec(within={f: r}) for f, r in ranges.items()]
    pairs = [
        FixSpec(within={a: ranges[a], b: ranges[b]}) for a, b in itertools.combinations(ranges, 2)
    ]
    return singles + pairs
