"""The message's own recipe (issue #28 item 5): "Please use `--attention-backend
flashinfer`", "Use --linear-attn-prefill-backend triton instead", "try to increase
--mamba-full-memory-ratio". Recipes are generated from the releases' own literal messages
(a verb, a flag of that release and one of its choices); the reader must find each, the
engine must propose it and rank it first whenever it holds (it fixes the check, trips no
other check and violates no rule card)."""

from __future__ import annotations

import re

import pytest

from evals.families.messages import literal_text
from kb.catalogs import load_catalog
from kb.code_types import Check
from service.engine.fixes.recipe import read_recipe
from service.engine.triage import Engine

RELEASES = ("0.5.11", "0.5.23")
#: recipes triaged end to end per release (the first, by path and line)
TRIAGED = 4
_RECIPE = re.compile(
    r"\b(?:[Uu]se|[Ss]et|[Aa]dd|[Pp]ass)\s{1,3}`?(--[a-z][a-z0-9-]{1,60})[ =]"
    r"([A-Za-z0-9_.]{1,40})"
)


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


def _recipes(store, release: str) -> list[tuple[Check, str, str, str]]:
    """(check, message, flag, value): a literal message that says to use a flag of the
    release with one of its choices."""
    by_flag = load_catalog(store, release).by_flag()
    out = []
    for c in sorted(store.checks(release), key=lambda c: (c.path, c.start_line)):
        text = literal_text(c.message or "")
        for m in _RECIPE.finditer(text or ""):
            spec = by_flag.get(m.group(1))
            if spec is not None and spec.choices and m.group(2) in map(str, spec.choices):
                out.append((c, text, m.group(1), m.group(2)))
                break
    return out


def test_every_recipe_of_the_releases_is_read(store) -> None:
    n = found = 0
    for release in RELEASES:
        catalog = load_catalog(store, release)
        by_flag = catalog.by_flag()
        for _, text, flag, value in _recipes(store, release):
            n += 1
            steps = read_recipe(text, catalog)
            if any(
                s.attr == by_flag[flag].attr and str(s.value) == value and s.verb == "set"
                for s in steps
            ):
                found += 1
    print(f"recipes read: n={n} found={found}")
    assert n >= 20 and found == n


def test_directions_bounds_and_negations(store) -> None:
    catalog = load_catalog(store, "0.5.23")
    steps = read_recipe(
        "Not enough space for mamba cache, try to increase "
        "--mamba-full-memory-ratio or --max-mamba-cache-size.",
        catalog,
    )
    assert [(s.attr, s.verb) for s in steps] == [
        ("mamba_full_memory_ratio", "increase"),
        ("max_mamba_cache_size", "increase"),
    ]
    steps = read_recipe("Please set a smaller number for `--max-running-requests`.", catalog)
    assert [(s.attr, s.verb) for s in steps] == [("max_running_requests", "decrease")]
    (step,) = read_recipe(
        "Raise --mem-fraction-static above 0.873 (minimum viable = 0.85).", catalog
    )
    assert (step.attr, step.verb, step.bound) == ("mem_fraction_static", "increase", 0.873)
    # what is refused is no recipe; nor is a flag the release does not declare
    assert (
        read_recipe(
            "--dsa-decode-backend flashmla_sparse_q8 is not supported: it is prefill-only.", catalog
        )
        == []
    )
    assert read_recipe("This does not support --enable-dp-attention.", catalog) == []
    assert read_recipe("Please use --no-such-flag-anywhere 3.", catalog) == []
    # the condition the check refused is no recipe, the advice after it is (0.5.11's words)
    catalog = load_catalog(store, "0.5.11")
    refused = (
        "Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible "
        "with radix cache when using --mamba-scheduler-strategy no_buffer."
    )
    assert read_recipe(refused, catalog) == []
    assert read_recipe("It fails if you use --enable-dp-attention here.", catalog) == []
    (step,) = read_recipe(
        refused + "To use radix cache with speculative decoding, please use "
        "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.",
        catalog,
    )
    assert (step.attr, step.verb, step.value) == ("mamba_scheduler_strategy", "set", "extra_buffer")
    # a value the release would refuse is not taken: the flag is named without one
    (step,) = read_recipe("Please use `--attention-backend nonexistent`.", catalog)
    assert step.value is None


def test_the_recipe_is_ranked_first_when_it_holds(engine, kb) -> None:
    store = kb.store
    n = located = proposed = first = 0
    failures = []
    for release in RELEASES:
        for check, text, flag, value in _recipes(store, release)[:TRIAGED]:
            n += 1
            result = engine.triage(f"{check.exc_type}: {text}\n", release=release)
            cite = f"{release}:{check.path}:{check.start_line}"
            if result.location is None or (
                result.location.citation.split("-")[0] != cite
                and cite not in result.location.alternatives
            ):
                failures.append((release, text[:60], "not located"))
                continue
            located += 1
            recipe = [
                f
                for f in result.fixes
                if f.origin.startswith("the message's own recipe") and str(f.set.get(flag)) == value
            ]
            if not recipe:
                continue  # the check still fires with it: not proposed
            proposed += 1
            r = recipe[0]
            holds = r.fixes_check == "true" and not r.trips and "violates" not in r.verdict
            if holds:
                if r.rank == 1 and r.recommended:
                    first += 1
                else:
                    failures.append((release, text[:60], "holds but ranked", r.rank))
    print(f"recipes triaged: n={n} located={located} proposed={proposed} first={first}")
    assert not failures, failures
    assert proposed >= n // 2 and first >= 1


def test_flags_to_drop_joined_by_and_are_one_step(store) -> None:
    """ "Disable --a and --b" asks for both: one edit dropping each the launch set (without
    the command, both; with it, the one it had); "--a or --b" is either, two edits."""
    from service.engine.fixes.recipe import recipe_edits

    catalog = load_catalog(store, "0.5.23")
    both = read_recipe(
        "DeepEP v2 MoE has not implemented the TBO/SBO overlap hooks yet. Disable "
        "--enable-two-batch-overlap and --enable-single-batch-overlap when using "
        "--moe-a2a-backend deepep_v2.",
        catalog,
    )
    assert [(s.attr, s.verb, s.joined) for s in both] == [
        ("enable_two_batch_overlap", "remove", ""),
        ("enable_single_batch_overlap", "remove", "and"),
    ]
    tbo, sbo = "enable_two_batch_overlap", "enable_single_batch_overlap"
    (edit,) = recipe_edits(both, catalog, {}, {tbo, sbo}, [])
    assert edit.remove and (edit.attr, edit.also) == (tbo, (sbo,))
    (edit,) = recipe_edits(both, catalog, {}, {sbo}, [])
    assert (edit.attr, edit.also) == (sbo, ())
    assert recipe_edits(both, catalog, {}, set(), []) == []
    either = read_recipe(
        "Disable --enable-two-batch-overlap or --enable-single-batch-overlap.", catalog
    )
    edits = recipe_edits(either, catalog, {}, {tbo, sbo}, [])
    assert [(e.attr, e.also) for e in edits] == [(tbo, ()), (sbo, ())]


def test_a_recipe_saying_instead_drops_what_it_replaces(engine) -> None:
    """ "FA4 backend is only supported for prefill. Please use `--prefill-attention-backend
    fa4` instead." (0.5.5): setting the prefill backend alone leaves the check firing on the
    flag that held ``fa4``; the recipe's edit drops it. With the command, the flag the
    launch set; posted alone, each flag the check compares with ``fa4``."""
    log = (
        "ValueError: FA4 backend is only supported for prefill. Please use "
        "`--prefill-attention-backend fa4` instead.\n"
    )
    given = engine.triage(
        {"log": log, "command": "--model-path /models/m --decode-attention-backend fa4"},
        release="0.5.5",
    )
    top = next(f for f in given.fixes if f.recommended)
    assert (top.set, top.remove) == (
        {"--prefill-attention-backend": "fa4"},
        ["--decode-attention-backend"],
    ), top
    assert "instead of --decode-attention-backend" in top.origin
    alone = engine.triage({"log": log}, release="0.5.5")
    top = next(f for f in alone.fixes if f.recommended)
    assert top.set == {"--prefill-attention-backend": "fa4"}
    assert set(top.remove) == {"--attention-backend", "--decode-attention-backend"}, top
