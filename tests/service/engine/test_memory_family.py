"""Memory sizing: SGLang sized a pool (KV cache, request slots, mamba state) from the free
GPU memory, the pool came out too small, and the message says which flag to move
("Not enough memory. Please try to increase --mem-fraction-static", "set a smaller
number for `--max-running-requests`", "try to increase --mamba-full-memory-ratio").

Incidents are generated (:mod:`evals.families.memory`, shared with the family eval)
from each release's own raises in its pool-sizing code
(``sglang/srt/mem_cache/``, ``sglang/srt/model_executor/``) whose
message names a launch flag of that release after a direction word, rendered with the
values of a failing launch. The engine must locate the raise exactly and recommend
moving a flag the message names in the direction it says, from the value the launch ran
with: a fraction of memory stays <= 0.95 and passes a bound the message printed ("above
0.873"); a count stays positive. A step with no printed bound is said to be rough, and
the free GPU memory is reported unknown with the log lines that would settle it."""

from __future__ import annotations

import pytest

from evals.families.memory import LAUNCH, POOL_CODE, MemoryCase, memory_cases, render_memory
from kb.catalogs import load_catalog
from service.engine.triage import Engine

RELEASES = ("0.5.11", "0.5.23")
#: incidents per release (the first of each recipe, by path and line)
PER_RELEASE = 4


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


def _incidents(store) -> list[MemoryCase]:
    """The shared generator's cases (:mod:`evals.families.memory`), rendered with
    :data:`LAUNCH`."""
    return memory_cases(store, RELEASES, PER_RELEASE)


def _value(argv: list[str], flag: str) -> float | None:
    return float(argv[argv.index(flag) + 1]) if flag in argv else None


def _framed(store, inc: MemoryCase) -> str:
    c = inc.check
    line = store.file_lines(inc.release, c.path, c.start_line, c.start_line)[0].strip()
    return (
        "Traceback (most recent call last):\n"
        f'  File "/opt/venv/lib/python3.11/site-packages/{c.path}", line {c.start_line}, '
        f"in {c.function.rsplit('.', 1)[-1]}\n    {line}\n{c.exc_type}: {inc.message}\n"
    )


def _same_message(store, inc: MemoryCase) -> int:
    """How many checks of the release print this message (a message alone cannot tell
    them apart)."""
    return sum(
        1
        for c in store.checks(inc.release)
        if c.path.startswith(POOL_CODE)
        and c.exc_type == inc.check.exc_type
        and c.message
        and render_memory(c.message) == inc.message
    )


def test_incidents_cover_both_releases_and_directions(store) -> None:
    incidents = _incidents(store)
    assert {i.release for i in incidents} == set(RELEASES)
    assert {w for i in incidents for _, w, _ in i.steps} == {"up", "down"}
    assert any(f == "--mem-fraction-static" for i in incidents for f, _, _ in i.steps)


@pytest.mark.parametrize("with_frames", [False, True])
def test_a_pool_too_small_moves_the_flag_the_message_names(engine, kb, with_frames) -> None:
    store = kb.store
    incidents = _incidents(store)
    located = valid = 0
    failures = []
    for inc in incidents:
        catalog = load_catalog(store, inc.release)
        by_flag = catalog.by_flag()
        launch = {f: v for f, v in LAUNCH.items() if f in by_flag}
        command = (
            "$ python -m sglang.launch_server --model-path org/hybrid-model "
            + " ".join(f"{f} {v}" for f, v in launch.items())
            + "\n"
        )
        log = (
            command + _framed(store, inc)
            if with_frames
            else f"{inc.check.exc_type}: {inc.message}\n"
        )
        result = engine.triage(log, release=inc.release)
        where = (result.location.path, result.location.start_line) if result.location else None
        cite = f"{inc.release}:{inc.check.path}:{inc.check.start_line}"
        if where != (inc.check.path, inc.check.start_line) and not (
            not with_frames
            and _same_message(store, inc) > 1
            and result.location
            and cite in result.location.alternatives
        ):
            failures.append((inc.release, inc.message[:70], "located at", where))
            continue
        located += 1
        best = next((f for f in result.fixes if f.recommended), None)
        if best is None:
            # no value is known to move from (a count SGLang derived): said, not guessed
            if not with_frames and result.no_flag_fix is not None:
                valid += 1
            else:
                failures.append((inc.release, inc.message[:70], "no fix", result.no_flag_fix))
            continue
        moved = []
        for flag, way, bound in inc.steps:
            spec = by_flag[flag]
            cur = launch.get(flag) if with_frames else None
            if cur is None and spec.default_known and spec.default is not None:
                cur = spec.default
            new = _value(best.argv, flag)
            if new is None or new == cur:
                continue  # not the step this fix takes
            ok = new > 0 and (cur is None or (new > cur if way == "up" else new < cur))
            if spec.type == "float" and ("fraction" in flag or "ratio" in flag):
                ok = ok and new <= 0.95
            if bound is not None:
                ok = ok and new > bound
            moved.append(ok)
        if moved and all(moved) and best.fixes_check == "true":
            valid += 1
            # a step past no printed bound is rough: the free memory is reported unknown
            if all(b is None for _, _, b in inc.steps):
                assert any("free GPU memory" in u.what for u in result.unknowns), inc.message
        else:
            failures.append((inc.release, inc.message[:70], best.command[-120:]))
    print(
        f"memory family (frames={with_frames}): n={len(incidents)} located={located} "
        f"fix valid={valid}"
    )
    assert not failures, failures
