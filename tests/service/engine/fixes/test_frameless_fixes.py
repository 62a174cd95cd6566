"""Fixes for an exception line posted alone (issue #28, the ``frameless`` variant): no
command, so the engine proposes for the flags the raised check implies
(:mod:`service.engine.fixes.implied`). Shipped generated incidents through
:func:`evals.variants.frameless`, answered in the incident's own release; the expectations
are the incidents' own (``acceptable_fixes``), never written here."""

from __future__ import annotations

import re
from typing import Any

import pytest

from evals.incidents import Incident, load_incidents
from evals.scoring import fix_matches
from evals.variants import frameless, is_generated
from kb.catalogs import load_catalog
from service.engine import Engine
from service.engine.evaluate.path_condition import PathEvaluation
from service.engine.evaluate.pieces import PiecePart
from service.engine.expr.interpreter import UNKNOWN, Atom, Provenance, Result, Value
from service.engine.fixes.implied import command_unknown, implied_launch
from service.engine.flags.parse import parse_argv

_FLAG = re.compile(r"--[a-z][a-z0-9-]{1,60}")
#: incidents answered per release (bounded work: a triage each)
_PER_RELEASE = 1


def _named_and_set(inc: Incident, store: Any) -> bool:
    """The class: the exception line names a flag the incident's command set, and a flag
    fix is expected."""
    if inc.expected.no_flag_fix or not inc.expected.acceptable_fixes or not inc.expected.release:
        return False
    by_flag = load_catalog(store, inc.expected.release).by_flag()
    named = {by_flag[f].attr for f in _FLAG.findall(inc.crash_log.splitlines()[-1]) if f in by_flag}
    return bool(named & {by_flag[a].attr for a in inc.command_argv() if a in by_flag})


@pytest.fixture(scope="module")
def answered(kb) -> list[tuple[Incident, Incident, Any]]:
    """(incident, its frameless variant, the engine's answer) for a sample of the class."""
    engine = Engine(kb)
    picked: dict[str, list[Incident]] = {}
    for inc in load_incidents():
        if not is_generated(inc) or inc.expected.release is None:
            continue
        if len(picked.setdefault(inc.expected.release, [])) >= _PER_RELEASE:
            continue
        if frameless(inc) is not None and _named_and_set(inc, kb.store):
            picked[inc.expected.release].append(inc)
    out = []
    for inc in (i for group in picked.values() for i in group):
        v = frameless(inc)
        assert v is not None and v.command is None and 'File "' not in v.crash_log
        result = engine.triage(
            {"log": v.crash_log},
            release=inc.expected.release,
            hardware=inc.hardware,
            model=inc.model,
            model_arch=inc.model_arch,
        )
        out.append((inc, v, result))
    return out


def test_the_recommended_fix_is_an_acceptable_edit_of_the_named_flags(answered, kb) -> None:
    assert len({inc.expected.release for inc, _, _ in answered}) >= 4
    misses = []
    for inc, _, result in answered:
        top = next((f for f in result.fixes if f.recommended), None)
        catalog = load_catalog(kb.store, inc.expected.release)
        if top is None or not any(
            fix_matches(top.model_dump(mode="json"), a, [], catalog)
            for a in inc.expected.acceptable_fixes
        ):
            misses.append((inc.id, top and (top.set, top.remove)))
            continue
        # it edits a flag of the check, not one whose change merely skips it
        assert "skips the check" not in top.origin, inc.id
        assert top.fixes_check == "true" and not top.trips, inc.id
    # the class is answered by the check's own structure; a miss is a pair of flags the
    # message names symmetrically where the release refuses one of the drops at replay
    assert len(misses) <= len(answered) // 5, misses


def test_a_fix_resting_on_implied_flags_says_so_and_does_not_restate_them(answered) -> None:
    said = 0
    for _, _, result in answered:
        for fix in result.fixes:
            if "assumes the launch had" not in fix.verdict:
                continue
            said += 1
            had = fix.verdict.split("assumes the launch had ", 1)[1].split(":", 1)[0]
            for flag, value in fix.set.items():  # never "set what crashed"
                assert f"{flag} {value}" not in had and not (
                    value is True and re.search(rf"{flag}(,|$)", had)
                ), (fix.set, had)
    assert said >= len(answered) // 2


def test_without_the_command_no_fix_claims_a_whole_command(answered, kb) -> None:
    """No command in the log: each fix's command is marked incomplete (it holds only the
    flags the log showed) and each flag it changes, shown or assumed, has its edit line.
    The same crash posted with its launch command, or with a command naming a config file,
    gets whole commands."""
    fixes = [fix for _, _, result in answered for fix in result.fixes]
    assert any(fix.remove for fix in fixes)
    for fix in fixes:
        assert fix.command_complete is False
        dropped = [e.split()[1] for e in fix.edits if e[0] == "-"]
        assert set(fix.remove) <= set(dropped), (fix.remove, fix.edits)
        assert {e.split()[1] for e in fix.edits if e[0] == "+"} == set(fix.set), fix.edits
    for _, _, result in answered:  # the explanation says so too, with the change fenced
        if result.fixes:
            assert "The log shows no full launch command" in result.explanation
    inc = answered[0][0]
    whole = Engine(kb).triage(
        {"log": inc.crash_log},
        release=inc.expected.release,
        hardware=inc.hardware,
        model=inc.model,
        model_arch=inc.model_arch,
    )
    assert whole.fixes and all(fix.command_complete for fix in whole.fixes)
    # a command naming a config file is whole as typed (the file holds the rest)
    variant = answered[0][1]
    configured = Engine(kb).triage(
        {"log": variant.crash_log, "command": "--config /etc/sglang/launch.yaml"},
        release=inc.expected.release,
        hardware=inc.hardware,
        model=inc.model,
        model_arch=inc.model_arch,
    )
    assert configured.fixes and all(fix.command_complete for fix in configured.fixes)
    assert all(fix.argv[:2] == ["--config", "/etc/sglang/launch.yaml"] for fix in configured.fixes)


def _part(
    cond: str,
    polarity: bool,
    atoms: list[tuple[str, object, str]],
    kind: str = "if",
    holds: object = False,
) -> PiecePart:
    res = Result(
        UNKNOWN,
        UNKNOWN,
        tuple(Atom(t, v, ((n, v, Provenance("default")),)) for t, v, n in atoms),
        frozenset(),
        (),
    )
    return PiecePart("guard", cond, polarity, 1, res, holds, kind)


def test_implied_flags_from_the_path_structure(kb) -> None:
    """A conjunction that held fixes each atom; a failed assert's test fixes its flag to a
    value not known; the default's own truth implies nothing; a disjunction alone, nothing."""
    release = "0.5.9"
    catalog = load_catalog(kb.store, release)
    parsed = parse_argv([], catalog)
    attrs = {
        s.attr: Value(s.default, Provenance("default")) for s in catalog.flags if s.default_known
    }
    assert command_unknown(parsed, attrs, catalog)
    assert not command_unknown(parse_argv(["--model-path", "m"], catalog), attrs, catalog)
    guard = _part(
        "self.enable_dp_lm_head and self.disaggregation_mode == 'decode'",
        True,
        [
            ("self.enable_dp_lm_head", False, "enable_dp_lm_head"),
            ("self.disaggregation_mode == 'decode'", False, "disaggregation_mode"),
        ],
    )
    test = _part(
        "self.disaggregation_decode_tp is None",
        False,
        [("self.disaggregation_decode_tp is None", True, "disaggregation_decode_tp")],
        kind="test",
    )
    passed = _part(
        "self.tp_size >= 1", True, [("self.tp_size >= 1", True, "tp_size")], kind="if", holds=True
    )
    ev = PathEvaluation(fired=False, parts=[guard, passed, test], attrs=set())
    launch = implied_launch(ev, attrs, parsed, catalog)
    assert launch is not None
    assert launch.implied["enable_dp_lm_head"] is True
    assert launch.implied["disaggregation_mode"] == "decode"
    assert launch.implied["disaggregation_decode_tp"] is UNKNOWN
    assert set(launch.parsed.values) == set(launch.implied)  # tp_size: the default held
    assert "--enable-dp-lm-head" in launch.note(catalog)
    either = _part(
        "self.enable_dp_attention or self.enable_dp_lm_head",
        True,
        [
            ("self.enable_dp_attention", False, "enable_dp_attention"),
            ("self.enable_dp_lm_head", False, "enable_dp_lm_head"),
        ],
    )
    alone = PathEvaluation(fired=False, parts=[either], attrs=set())
    assert implied_launch(alone, attrs, parsed, catalog) is None


def test_an_earlier_write_that_would_undo_the_crash_implies_its_if_did_not_hold(kb) -> None:
    """``if self.dp_size == 1: self.enable_dp_lm_head = False`` runs before the check that
    ``--enable-dp-lm-head`` needs dp attention: the crash implies ``--dp-size`` was set (not
    to 1), so dropping the switch fixes the check and is recommended. Where the reset is an
    override's returned dict under ``view.dp_size == 1 and view.ep_join_mode != "scale"``
    (0.5.21+), one of the two was set. Each shipped incident of that check, as its frameless
    variant, in its own release and with the release left to the engine (as users post it)."""
    engine = Engine(kb)
    cases = [
        inc
        for inc in load_incidents()
        if is_generated(inc)
        and inc.expected.release
        and "enable_dp_lm_head" in inc.crash_log.splitlines()[-1]
        and frameless(inc) is not None
    ]
    assert cases, "no shipped incident of the dp-lm-head check"
    for inc in cases:
        v = frameless(inc)
        assert v is not None
        for release in (inc.expected.release, None):
            result = engine.triage({"log": v.crash_log}, release=release)
            top = next(f for f in result.fixes if f.recommended)
            assert "--data-parallel-size" in top.verdict or "--dp-size" in top.verdict
            catalog = load_catalog(kb.store, inc.expected.release)
            fix = {"set": top.set, "remove": top.remove, "argv": None}
            assert any(
                fix_matches(fix, a, inc.command_argv(), catalog, real=inc.command_argv())
                for a in inc.expected.acceptable_fixes
            ), (inc.id, release, result.release.release, top.set, top.remove)


def _implied_on_defaults(kb, hook: str, message: str) -> tuple[PathEvaluation, Any]:
    """0.5.23's check in ``arg_groups/<hook>`` raising ``message``, evaluated on the
    release's defaults (a log without its command), and the launch it implies."""
    from service.engine.evaluate.path_condition import base_attrs, evaluate_path

    store = kb.store
    check = next(
        c
        for c in store.checks("0.5.23", path=f"sglang/srt/arg_groups/{hook}")
        if message in (c.message or "")
    )
    catalog = load_catalog(store, "0.5.23")
    parsed = parse_argv([], catalog)
    attrs = base_attrs(catalog, parsed)
    ev = evaluate_path(store, "0.5.23", check, attrs, {})
    return ev, implied_launch(ev, attrs, parsed, catalog)


def test_a_resolution_read_with_a_fallback_implies_its_flag(kb) -> None:
    """0.5.23 range-checks ``resolution_result(server_args, "swa_full_tokens_ratio")``, a
    read with a declared fallback (a ternary inside the comparison, which leaves the
    condition's shape alone): posted alone, its message implies the flag was set to a value
    not known here, and the fix is on that flag rather than on the earlier checks' guards."""
    message = "--swa-full-tokens-ratio should be in range (0, 1.0]."
    ev, launch = _implied_on_defaults(kb, "kv_cache_hook.py", message)
    assert ev.fired is False and " if " in ev.parts[-1].condition  # the fallback's ternary
    assert launch is not None and launch.implied == {"swa_full_tokens_ratio": UNKNOWN}
    out = Engine(kb).triage({"log": f"ValueError: {message}\n"}, release="0.5.23")
    top = next(f for f in out.fixes if f.recommended)
    assert set(top.set) | set(top.remove) == {"--swa-full-tokens-ratio"}, top


def test_a_conjunction_with_a_negated_disjunction_fixes_every_atom(kb) -> None:
    """``cfg.enable_deepseek_v4_fp4_indexer and not (is_sm100 or is_sm120 or gfx95)``
    held at the crash (0.5.23): the switch was on and each GPU test false, so posted alone
    on an H100 the fix drops the switch (before, a mixed ``and``/``or`` implied nothing and
    no fix was given)."""
    message = "--enable-deepseek-v4-fp4-indexer requires SM100, SM120, or gfx95 GPUs"
    _, launch = _implied_on_defaults(kb, "serving_hook.py", message)
    assert launch is not None and launch.implied == {"enable_deepseek_v4_fp4_indexer": True}
    out = Engine(kb).triage(
        {"log": f"ValueError: {message} with FP4 indexer support.\n"},
        release="0.5.23",
        hardware="h100-x8",
    )
    top = next(f for f in out.fixes if f.recommended)
    assert top.remove == ["--enable-deepseek-v4-fp4-indexer"] and not top.set, top


def _piece(condition: str, holds: object, **inputs: object) -> PiecePart:
    atom = Atom(condition, holds, tuple((n, v, Provenance("flag")) for n, v in inputs.items()))
    result = Result(holds, holds, (atom,), frozenset(inputs), ())
    return PiecePart("guard", condition, True, 1, result, holds)


def test_an_edit_leaving_every_changed_piece_holding_still_fires() -> None:
    """The check fired at the crash, so its pieces held then, known or not: an edit whose
    changed pieces all hold again cannot fix it, whatever stays unknown; one changing a
    piece to false or to unknown may."""
    from service.engine.fixes.propose import still_fires

    platform = _piece("current_platform.supports('DFLASH')", UNKNOWN, device=UNKNOWN)
    crash = PathEvaluation(
        UNKNOWN, [platform, _piece("cfg.pp_size != 1", UNKNOWN, pp_size=UNKNOWN)], set()
    )

    def after(*parts: PiecePart) -> PathEvaluation:
        return PathEvaluation(UNKNOWN, list(parts), set())

    assert still_fires(crash, after(platform, _piece("cfg.pp_size != 1", True, pp_size=2)))
    assert not still_fires(crash, after(platform, _piece("cfg.pp_size != 1", False, pp_size=1)))
    moved = _piece("current_platform.supports('DFLASH')", UNKNOWN, device="cpu")
    assert not still_fires(crash, after(moved, _piece("cfg.pp_size != 1", True, pp_size=2)))
    assert not still_fires(crash, after(platform))  # another path: nothing is concluded


def test_a_value_the_check_refuses_is_no_candidate_when_other_pieces_are_unknown(kb) -> None:
    """0.5.23 raises "only supports pp_size == 1" behind a platform test the engine cannot
    decide: posted alone, no fix sets --pp-size to another value than 1 (it fires again),
    although the check stays undecided for it."""
    message = "Currently DFLASH speculative decoding only supports pp_size == 1."
    out = Engine(kb).triage({"log": f"ValueError: {message}\n"}, release="0.5.23")
    assert out.fixes
    for fix in out.fixes:
        value = fix.set.get("--pp-size", fix.set.get("--pipeline-parallel-size"))
        assert value is None or str(value) == "1", fix
