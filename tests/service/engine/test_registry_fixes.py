"""A registry lookup that missed: the MoE runner needs a fused function for the all-to-all
backend, and none is registered for the pair. Incidents are generated from each release's
own message and its registrations (read at ingest); the recommended fix must name a pair
that release registers, citing the registration."""

from __future__ import annotations

import itertools

import pytest

from kb.code_types import Check
from service.engine.triage import Engine

MESSAGE_START = "Runner backend "
REGISTRY = "register_fused_func"


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


def _runner_check(store, release: str) -> Check | None:
    rows = [
        c
        for c in store.checks(release)
        if "requires a fused func for a2a backend" in (c.message or "")
    ]
    return rows[0] if len(rows) == 1 else None


def _missing_pairs(store, release: str, limit: int = 2) -> list[tuple[str, str]]:
    """(a2a, runner) pairs not registered, for runners and a2a backends that are."""
    pairs = {
        tuple(r["keys"])
        for r in store.registrations(release, registry=REGISTRY)
        if len(r["keys"]) == 2
    }
    a2as = sorted({a for a, _ in pairs} - {"none"})
    runners = sorted({r for _, r in pairs})
    return [(a, r) for a, r in itertools.product(a2as, runners) if (a, r) not in pairs][:limit]


def _message(check: Check, runner: str, a2a: str) -> str:
    class Runner:  # the enum member as SGLang prints it
        def __str__(self) -> str:
            return f"MoeRunnerBackend.{runner.upper()}"

    return eval(
        "(" + check.message + ")",
        {},  # SGLang's own f-string
        {"runner_backend": Runner(), "a2a_backend_name": a2a},
    )


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _incidents(store) -> list[tuple[str, str, str]]:
    out = []
    for release in ("0.5.16", "0.5.21", "0.5.23"):
        if _runner_check(store, release) is not None:
            out += [(release, a, r) for a, r in _missing_pairs(store, release)]
    return out


def test_registry_incidents_exist(store) -> None:
    assert len(_incidents(store)) >= 6


@pytest.mark.parametrize("with_command", [True, False])
def test_a_missing_fused_func_is_fixed_by_a_registered_pair(engine, kb, with_command) -> None:
    store = kb.store
    incidents = _incidents(store)
    for release, a2a, runner in incidents:
        check = _runner_check(store, release)
        message = _message(check, runner, a2a)
        command = (
            f"$ python -m sglang.launch_server --model-path org/moe --tp 8 "
            f"--moe-a2a-backend {a2a} --moe-runner-backend {runner}\n"
        )
        log = (command if with_command else "") + f"NotImplementedError: {message}\n"
        result = engine.triage(log, release=release)
        assert result.status == "located", (release, a2a, runner)
        assert (result.location.path, result.location.start_line) == (
            check.path,
            check.start_line,
        )
        best = next((f for f in result.fixes if f.recommended), None)
        assert best is not None, (release, a2a, runner, result.no_flag_fix)
        new = (
            _value(best.argv, "--moe-a2a-backend") or a2a,
            _value(best.argv, "--moe-runner-backend") or runner,
        )
        registered = {
            tuple(r["keys"]): f"{release}:{r['path']}:{r['line']}"
            for r in store.registrations(release, registry=REGISTRY)
        }
        assert new in registered, (release, a2a, runner, best.command)
        # one name changed, the other kept as the crash printed it
        assert (new[0] == a2a) != (new[1] == runner)
        assert registered[new] in best.origin and registered[new] in result.citations
        if with_command:  # the user's a2a backend is a feature: another runner keeps it
            runners_for_a2a = {r for a, r in registered if a == a2a}
            assert not runners_for_a2a or new[0] == a2a, best.command
