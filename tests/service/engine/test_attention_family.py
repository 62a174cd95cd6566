"""Per-layer attention backends: a layer refuses the backend it was given and lists (or
registers) the ones it takes. Incidents are generated (:mod:`evals.families.attention`,
shared with the family eval) from each release's own raises
under ``sglang/srt/layers/attention/``: the message rendered with a supported set the
release's source defines (a literal set assigned in the raising function, a registry the
message reads, the names the check's condition compares with, or the registry of the
raising file) and a refused name from the release's flag choices outside it.

The engine must locate the raise exactly, message alone or with frames and a command,
and recommend a fix whose effective backend for every refused position (``prefill_be``
is ``--prefill-attention-backend`` else ``--attention-backend``, as SGLang reads them) is
in that set and among the deciding flag's choices in that release."""

from __future__ import annotations

import pytest

from evals.families.attention import AttentionCase, attention_cases
from kb.catalogs import load_catalog
from service.engine.triage import Engine

#: releases incidents are generated from (two keep the test short; every kind occurs)
RELEASES = ("0.5.11", "0.5.23")


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


def _incidents(store) -> list[AttentionCase]:
    """The shared generator's cases (:mod:`evals.families.attention`)."""
    return attention_cases(store, RELEASES)


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _effective(argv: list[str], position: str, flags: list[str]) -> tuple[str, str] | None:
    """(flag, backend) SGLang reads for ``position``: the position's own flag, else another
    backend flag the fix sets."""
    own = [f for f in flags if position and f"-{position}-" in f"-{f[2:]}-"]
    for f in own + [f for f in flags if f not in own]:
        v = _value(argv, f)
        if v is not None:
            return f, v
    return None


def _framed(store, inc: AttentionCase) -> str:
    """The incident as a traceback: the raising frame with its source line, then the
    exception line."""
    c = inc.check
    line = store.file_lines(inc.release, c.path, c.start_line, c.start_line)[0].strip()
    return (
        "Traceback (most recent call last):\n"
        f'  File "/usr/local/lib/python3.12/dist-packages/{c.path}", line {c.start_line}, '
        f"in {c.function.rsplit('.', 1)[-1]}\n    {line}\n{inc.exc}: {inc.message}\n"
    )


def _same_message(store, inc: AttentionCase) -> int:
    """How many checks of the release carry this literal message (a message alone cannot
    tell them apart)."""
    return sum(1 for c in store.checks(inc.release) if c.message == inc.check.message)


def test_incidents_cover_the_releases_and_kinds(store) -> None:
    incidents = _incidents(store)
    assert {i.release for i in incidents} == set(RELEASES), [(i.release, i.kind) for i in incidents]
    assert {"printed", "registry", "condition", "file registry"} <= {i.kind for i in incidents}


@pytest.mark.parametrize("with_frames", [False, True])
def test_a_refused_backend_is_replaced_by_a_listed_one(engine, kb, with_frames) -> None:
    store = kb.store
    incidents = _incidents(store)
    located = valid = 0
    failures = []
    for inc in incidents:
        command = "$ python -m sglang.launch_server --model-path org/model --tp 2\n"
        log = command + _framed(store, inc) if with_frames else f"{inc.exc}: {inc.message}\n"
        result = engine.triage(log, release=inc.release)
        where = (result.location.path, result.location.start_line) if result.location else None
        cite = f"{inc.release}:{inc.check.path}:{inc.check.start_line}"
        if where != (inc.check.path, inc.check.start_line) and not (
            not with_frames
            and _same_message(store, inc) > 1
            and result.location
            and cite in result.location.alternatives
        ):
            failures.append((inc.release, inc.kind, inc.message[:80], where))
            continue
        located += 1
        best = next((f for f in result.fixes if f.recommended), None)
        if best is None:
            failures.append((inc.release, inc.kind, inc.message[:80], "no fix"))
            continue
        catalog = load_catalog(store, inc.release)
        edited = [
            a
            for a in best.argv
            if a.startswith("--")
            and a[2:].replace("-", "_") in {s.attr for s in catalog.flags if s.choices}
        ]
        ok = True
        by_flag = catalog.by_flag()
        for position, _ in inc.refused:
            got = _effective(best.argv, position, edited)
            ok = (
                ok
                and got is not None
                and got[1] in inc.supported
                and got[1] in by_flag[got[0]].choices
            )
        # the fix cites where the supported names are defined, in this release
        ok = ok and f"{inc.release}:" in best.origin
        if ok:
            valid += 1
        else:
            failures.append((inc.release, inc.kind, inc.message[:80], best.command))
    print(
        f"attention family (frames={with_frames}): n={len(incidents)} located={located} "
        f"fix valid={valid}"
    )
    assert not failures, failures
