"""Variants of the generated incidents (issue #28): each has its property, they are
deterministic, range answers and the reliability table are scored as documented, the gate
checks the variant floors, and the engine answers a small sample of every variant."""

from __future__ import annotations

import re
import shlex

import pytest
from packaging.version import Version

from evals.gate import check_gate, variant_breaches
from evals.incidents import Incident, load_incidents
from evals.runner import BUCKETS, EvalReport, IncidentScore, SystemReport, reliability, run_eval
from evals.scoring import Prediction, same_check, score, score_robust
from evals.variants import (
    PREFIX_STYLES,
    SEP,
    VARIANTS,
    build_variants,
    exception_start,
    is_generated,
    older_wording,
    parse_variants,
    prefix_lines,
    variant_name,
    variants_of,
)
from service.engine import Engine

_FRAME = re.compile(r'File "')
_HEADS = {
    "journald": re.compile(r"Dec 03 \d\d:\d\d:\d\d gpu-node-3 python3\[1234\]: "),
    "compose": re.compile(r"sglang-1  \|(?: |$)"),
    "slurm": re.compile(r"0: "),
    "ray": re.compile(r"\(pid=4242\) "),
    "kubectl": re.compile(r"\[pod/sglang-0/server\] "),
    "rich": re.compile(r"\[12/03/26 \d\d:\d\d:\d\d\] INFO     "),
}
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)(?::|$)")


@pytest.fixture(scope="module")
def generated() -> list[Incident]:
    return [i for i in load_incidents() if is_generated(i)]


def _sample(generated: list[Incident]) -> list[Incident]:
    """One traceback log and one frameless-style log of every release (bounded work)."""
    out: dict[tuple[str | None, bool], Incident] = {}
    for inc in generated:
        out.setdefault((inc.expected.release, 'File "' in inc.crash_log), inc)
    return list(out.values())


def test_every_variant_has_its_property(generated) -> None:
    sample = _sample(generated)
    assert len(sample) >= 8
    for inc in sample:
        lines = inc.crash_log.splitlines()
        exc_at = exception_start(lines)
        assert exc_at is not None, inc.id
        got = {variant_name(v.id): v for v in variants_of(inc, VARIANTS[:-1])}
        framed = bool(_FRAME.search(inc.crash_log))
        bare = re.fullmatch(r"[\w.]+:?", lines[exc_at].split("] ")[-1].strip()) is not None
        assert set(got) == set(VARIANTS[:-1]) - ({"truncated"} if not framed else set()) - (
            {"frameless"} if bare and exc_at == len(lines) - 1 else set()
        )
        if "frameless" not in got:
            continue
        for name, v in got.items():
            assert v.id == f"{inc.id}{SEP}{name}"
            assert v.expected == inc.expected and v.hardware == inc.hardware
        frameless = got["frameless"]
        assert not _FRAME.search(frameless.crash_log)
        assert "$ " not in frameless.crash_log and "sglang==" not in frameless.crash_log
        assert _EXC_LINE.match(frameless.crash_log)
        assert frameless.command is None and frameless.release is None
        if framed:
            truncated = got["truncated"].crash_log.splitlines()
            assert truncated == lines[:exc_at]  # cut right before the exception line
            assert len(_FRAME.findall(got["truncated"].crash_log)) == len(
                _FRAME.findall(inc.crash_log)
            )
            assert not any(_EXC_LINE.match(ln.split("] ", 1)[-1]) for ln in truncated)
        frag = got["fragment"]
        assert frag.command is None
        cmds = [ln for ln in frag.crash_log.splitlines() if "$ " in ln and "pip" not in ln]
        assert len(cmds) == 1 and "launch_server" not in cmds[0] and "serve" not in cmds[0]
        cmd = cmds[0]
        assert cmd.split("] ", 1)[-1].startswith("$ --")
        assert shlex.split(cmd.split("$ ", 1)[1]) == inc.command_argv()
        nover = got["noversion"]
        assert "sglang==" not in nover.crash_log and "pip list" not in nover.crash_log
        assert inc.expected.release not in nover.crash_log and nover.release is None


@pytest.mark.parametrize("style", PREFIX_STYLES)
def test_prefixes_go_on_every_line(generated, style: str) -> None:
    inc = generated[0]
    text = prefix_lines(inc.crash_log, style)
    before, after = inc.crash_log.splitlines(), text.splitlines()
    assert len(after) == len(before)
    head = _HEADS[style]
    for old, new in zip(before, after, strict=True):
        m = head.match(new)
        assert m is not None, (style, new)
        assert new[m.end() :].rstrip() == old.rstrip() or style == "rich"
    if style == "rich":
        assert all(ln.endswith("  launcher.py:123") and " INFO     " in ln for ln in after)


def test_variants_are_deterministic_and_styles_rotate(generated) -> None:
    few = generated[:12]
    one = build_variants(few, ("prefixed", "truncated"), seed=0)
    assert [v.model_dump() for v in one] == [
        v.model_dump() for v in build_variants(few, ("prefixed", "truncated"), seed=0)
    ]
    styles = [v.notes.split(".", 1)[0] for v in one if v.id.endswith("~prefixed")]
    assert len(set(styles)) == len(PREFIX_STYLES)  # 12 incidents: every style twice
    other = build_variants(few, ("prefixed",), seed=1)
    assert [v.crash_log for v in other] != [v.crash_log for v in one if "prefixed" in v.id]
    seeds = [i for i in load_incidents() if not is_generated(i)]
    assert build_variants(seeds) == []  # seed/public incidents are left as they are


def test_parse_variants() -> None:
    assert parse_variants("all") == VARIANTS
    assert parse_variants(None) == ()
    assert parse_variants("frameless, prefixed,frameless") == ("frameless", "prefixed")
    with pytest.raises(ValueError, match="unknown variant"):
        parse_variants("frameless,nope")


def test_older_wording_is_an_older_release_s_message(store, generated) -> None:
    """The first older wording found (incidents in file order: bounded work) is an older
    release's message of the same check, differs from the incident's own, and replaces only
    the exception line; a bare assert has no wording to change."""
    bare = next(i for i in generated if i.crash_log.rstrip().endswith("AssertionError"))
    assert older_wording(store, bare) is None
    for inc in generated:
        hit = older_wording(store, inc)
        if hit is not None:
            break
    else:
        raise AssertionError("no generated incident has an older wording")
    rel, message = hit
    assert Version(rel) < Version(inc.expected.release)
    assert message not in inc.crash_log
    v = variants_of(inc, ("older_wording",), store=store)[0]
    assert v.crash_log.splitlines()[-1].endswith(message)
    assert v.crash_log.splitlines()[:-1] == inc.crash_log.splitlines()[:-1]
    assert v.expected == inc.expected and v.id.endswith("~older_wording")


def _same_check_elsewhere(store, generated):
    """A generated incident and the same check (same_check) in another ingested release."""
    for inc in generated:
        loc = inc.expected.location
        if loc is None or loc.start_line is None:
            continue
        for row in store.releases():
            rel = row["version"]
            if rel == inc.expected.release:
                continue
            for c in store.checks(rel, function=loc.function):
                cand = {
                    "path": c.path,
                    "function": c.function,
                    "start_line": c.start_line,
                    "end_line": c.end_line,
                }
                if same_check(store, rel, cand, inc.expected.release, loc):
                    return inc, rel, cand
    raise AssertionError("no check of a generated incident is in two releases")


def test_a_range_holding_the_expected_release_scores_the_same_check(store, generated) -> None:
    inc, rel, loc = _same_check_elsewhere(store, generated)
    want = inc.expected.release

    def ok(rng: list[str], location: dict | None = None) -> bool | None:
        pred = Prediction(
            status="located",
            release=rel,
            location=location or loc,
            fixes=[],
            root_cause=[],
            citations=[],
            extra={"range": rng},
        )
        metrics = score(inc, pred, store)
        return score_robust(inc, pred, store, metrics)[0]["location_ok"]

    assert ok([want, rel]) is True
    assert ok([rel]) is False  # the range does not hold the expected release
    assert ok([]) is False  # no range: the answer names another release, a miss
    other = next(
        c for c in store.checks(rel) if not same_check(store, rel, c, want, inc.expected.location)
    )
    assert (
        ok(
            [want, rel],
            {k: getattr(other, k) for k in ("path", "function", "start_line", "end_line")},
        )
        is False
    )


def _s(i: int, conf: float | None, right: bool | None, variant: str = "original") -> IncidentScore:
    return IncidentScore(
        id=f"gen-x-{i}" + ("" if variant == "original" else f"~{variant}"),
        category="other",
        source="generated",
        status="located",
        latency_ms=1.0,
        metrics={"location_ok": right, "fix_ok": right},
        variant=variant,
        confidence=conf,
    )


def test_reliability_buckets() -> None:
    scores = [
        _s(0, 0.0, True),
        _s(1, 0.49, False),
        _s(2, 0.5, True),
        _s(3, 0.79, False),
        _s(4, 0.8, True),
        _s(5, 0.89, False),
        _s(6, 0.9, True),
        _s(7, 1.0, True),
        _s(8, None, True),
        _s(9, 0.95, None),
    ]
    table = reliability(scores)
    assert [(r["lo"], r["hi"]) for r in table] == list(BUCKETS)
    assert [r["n"] for r in table] == [2, 2, 2, 2]  # no confidence / no location: left out
    assert [r["share"] for r in table] == [0.5, 0.5, 0.5, 1.0]


def _variant_report(location: dict[str, float], high_right: int) -> EvalReport:
    system = SystemReport(
        name="engine", incidents=[], aggregate={"n": 0, "errors": 0}, by_category={}
    )
    by = {
        v: {
            "n": 10,
            "errors": 0,
            "location_ok": r,
            "location_ok_n": 10,
            "fix_ok": r,
            "fix_ok_n": 10,
        }
        for v, r in location.items()
    }
    rel = [
        {
            "bucket": "[0.8, 0.9)",
            "lo": 0.8,
            "hi": 0.9,
            "n": 10,
            "correct": high_right,
            "share": high_right / 10,
        }
    ]
    return EvalReport(
        created="now",
        target="t",
        incidents=0,
        systems={"engine": system},
        by_variant=by,
        reliability=rel,
    )


def test_the_gate_checks_variant_floors_when_variants_ran() -> None:
    th = {
        "system": "engine",
        "min": {},
        "max": {},
        "variants": {
            "min": {
                "frameless": {"location_ok": 0.5, "fix_ok": 0.4},
                "prefixed": {"location_ok": 0.9},
            },
            "high_confidence": 0.9,
        },
    }
    assert variant_breaches(_variant_report({"frameless": 0.6, "prefixed": 0.95}, 9), th) == []
    failures = check_gate(_variant_report({"frameless": 0.3, "prefixed": 0.95}, 8), th)
    assert sorted(failures) == [
        "reliability[confidence >= 0.8]: 0.8 < 0.9 (n=10)",
        "variant[frameless].fix_ok: 0.3 < 0.4",
        "variant[frameless].location_ok: 0.3 < 0.5",
    ]
    only = _variant_report({"prefixed": 0.95}, 10)  # frameless not run: not gated
    assert variant_breaches(only, th) == []
    plain = _variant_report({}, 10)
    plain.by_variant, plain.reliability = {}, []
    assert variant_breaches(plain, th) == []  # no variants run: the section is not checked


def test_the_engine_answers_every_variant(kb, generated) -> None:
    """One traceback incident and all its variants, in-process without replay (bounded:
    at most seven answers): every variant is answered, none errs, and the report's variant
    sections are filled."""
    one = [next(i for i in generated if 'File "' in i.crash_log and i.expected.release == "0.5.11")]
    report = run_eval(one, Engine(kb), variants=VARIANTS)
    answers = report.variant_incidents
    assert {s.variant for s in answers} >= set(VARIANTS[:-1])
    assert all(s.error is None for s in answers), [s.error for s in answers if s.error]
    assert all(s.status in ("located", "argparse", "unlocated") for s in answers)
    assert all(s.confidence is not None for s in answers)
    assert list(report.by_variant)[0] == "original" and report.by_variant["original"]["n"] == 1
    assert sum(r["n"] for r in report.reliability) == sum(
        1 for s in [*report.engine.incidents, *answers] if s.metrics.get("location_ok") is not None
    )
    assert report.engine.aggregate["n"] == 1  # the originals' scores stay the originals' own
    assert EvalReport.model_validate_json(report.model_dump_json()).by_variant == report.by_variant


def test_reports_and_cli_show_variants_and_reliability() -> None:
    from io import StringIO

    from rich.console import Console

    from evals.cli import print_variants
    from evals.reports import markdown

    report = _variant_report({"original": 1.0, "frameless": 0.25}, 9)
    md = markdown(report)
    assert "## Engine by variant" in md and "| frameless | 10 | 0.250 |" in md
    assert "| [0.8, 0.9) | 10 | 9 | 0.900 |" in md
    buf = StringIO()
    print_variants(report, Console(file=buf, width=80))
    text = buf.getvalue()
    assert "frameless" in text and ".250" in text and "[0.8, 0.9)" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    empty = _variant_report({}, 0)
    empty.by_variant = {}
    buf = StringIO()
    print_variants(empty, Console(file=buf, width=80))
    assert buf.getvalue() == "" and "by variant" not in markdown(empty)


def test_a_bare_exception_has_no_frameless_variant(generated) -> None:
    """``AssertionError`` alone is nothing to answer: a bare assert's log keeps its other
    variants (frames, command) but gets no frameless one."""
    bare = [
        i
        for i in generated
        if i.crash_log.rstrip().splitlines()[-1].split("] ")[-1].strip() == "AssertionError"
    ]
    assert bare
    for inc in bare:
        got = {variant_name(v.id) for v in variants_of(inc, VARIANTS[:-1])}
        assert "frameless" not in got and "prefixed" in got, inc.id
