"""The rendered families' incidents (:mod:`evals.families.rendered`): each is a real raise
of its release, the crash log parses to that raise and its message, and every acceptable
fix follows from the check (a supported backend the deciding flag takes; a memory flag
moved the way the message says, from the command's value)."""

from __future__ import annotations

import pytest

from evals.families.attention import attention_cases
from evals.families.memory import FRACTION_CAP, fraction_like, steps_of
from evals.families.rendered import NOTE, rendered_incidents
from evals.incidents import CATEGORIES, Incident
from evals.variants import variants_of
from kb.catalogs import load_catalog
from kb.code_types import Check
from service.engine import parse_log

RELEASES = ("0.5.9", "0.5.11", "0.5.16", "0.5.21", "0.5.23")
FAMILIES = ("layer_attention_backend", "memory_pool")


@pytest.fixture(scope="module")
def incidents(store) -> list[Incident]:
    return rendered_incidents(store, RELEASES)


def _check(store, inc: Incident) -> Check:
    loc = inc.expected.location
    return next(
        c for c in store.checks(inc.release, path=loc.path) if c.start_line == loc.start_line
    )


def test_each_family_spans_three_releases(incidents) -> None:
    for family in FAMILIES:
        mine = [i for i in incidents if i.family == family]
        assert len(mine) >= 10, family
        assert len({i.release for i in mine}) >= 3, family
    assert len({i.id for i in incidents}) == len(incidents)


def test_an_incident_is_its_release_raise_as_a_crash_log(store, incidents) -> None:
    for inc in incidents:
        check = _check(store, inc)
        loc = inc.expected.location
        assert (loc.function, loc.end_line) == (check.function, check.end_line)
        assert inc.expected.release == inc.release and inc.confirmed_by is None
        assert inc.source.startswith("generated") and NOTE in inc.notes
        assert inc.category in CATEGORIES
        parsed = parse_log(inc.crash_log)
        exc = parsed.primary
        assert exc is not None and exc.type == (check.exc_type or "RuntimeError"), inc.id
        assert exc.frames and exc.frames[-1].path.endswith(loc.path), inc.id
        assert exc.frames[-1].line in {
            check.start_line,
            check.test_start,
            check.test_end,
        }, inc.id
        assert parsed.command == inc.command_argv(), inc.id
        # the message the incident carries is in the log, whole
        message = inc.crash_log.rstrip("\n").rsplit("\n", 1)[-1].split(": ", 1)[1]
        assert exc.message == message.strip(), inc.id
        # a frameless variant is made (message only, no command, no release)
        frameless = [v for v in variants_of(inc, ["frameless"])]
        assert len(frameless) == 1 and frameless[0].command is None
        assert frameless[0].crash_log.strip().endswith(message.strip())


def test_an_attention_fix_sets_the_deciding_flag_to_a_supported_backend(store, incidents) -> None:
    cases = {
        (c.release, c.check.path, c.check.start_line, c.message): c
        for c in attention_cases(store, RELEASES)
    }
    seen = 0
    for inc in (i for i in incidents if i.family == "layer_attention_backend"):
        check = _check(store, inc)
        message = parse_log(inc.crash_log).primary.message
        case = cases[(inc.release, check.path, check.start_line, message)]
        by_flag = load_catalog(store, inc.release).by_flag()
        argv = inc.command_argv()
        [flag] = inc.expected.root_cause_flags
        refused = argv[argv.index(flag) + 1]
        assert refused not in case.supported and refused in by_flag[flag].choices
        assert refused in message or case.kind == "condition"
        assert inc.expected.acceptable_fixes
        for fix in inc.expected.acceptable_fixes:
            [(name, value)] = fix.set.items()
            assert name == flag and value in case.supported and value in by_flag[flag].choices
        seen += 1
    assert seen >= 10


def test_a_memory_fix_moves_a_named_flag_the_way_the_message_says(store, incidents) -> None:
    seen = 0
    for inc in (i for i in incidents if i.family == "memory_pool"):
        catalog = load_catalog(store, inc.release)
        by_flag = catalog.by_flag()
        message = parse_log(inc.crash_log).primary.message
        steps = {
            f: (way, bound)
            for f, way, bound in steps_of(message, {f for s in catalog.flags for f in s.flags})
        }
        argv = inc.command_argv()
        assert inc.expected.acceptable_fixes
        for fix in inc.expected.acceptable_fixes:
            assert not fix.set and not fix.remove and 1 <= len(fix.within) <= 2
            for flag, (low, high) in fix.within.items():
                way, bound = steps[flag]  # a flag the message names, with its direction
                current = float(argv[argv.index(flag) + 1])  # moved from the launch's value
                assert low <= high
                if way == "up":
                    assert low > current and (bound is None or low > bound)
                else:
                    assert high < current and low > 0
                if fraction_like(flag, by_flag[flag]):
                    assert high <= FRACTION_CAP
        seen += 1
    assert seen >= 10


def test_a_release_incidents_do_not_depend_on_the_run(store, incidents) -> None:
    again = rendered_incidents(store, ("0.5.23",))
    assert [i.model_dump() for i in again] == [
        i.model_dump() for i in incidents if i.release == "0.5.23"
    ]
