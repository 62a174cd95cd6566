"""The incident generator: deterministic, grounded in the KB, independent of the engine's fixes."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from packaging.version import Version

from evals import generate as gen
from evals.groundtruth import Context, Prober, root_cause_attrs
from evals.incidents import INCIDENTS_DIR, load_incidents
from evals.render import launcher_warning
from service.engine.flags.parse import parse_argv
from service.engine.logparse.parse import parse_log

pytestmark = pytest.mark.long_pole  # minutes: scheduled first (tests/conftest.py)

#: (shipped file, release) for every release a shipped generated file holds
PARTS = [(name, r) for name, releases in gen.SHIPPED_RUNS.items() for r in releases]


@pytest.fixture(scope="module")
def by_file() -> dict[str, list]:
    return {name: load_incidents([INCIDENTS_DIR / name]) for name in gen.SHIPPED_RUNS}


@pytest.fixture(scope="module")
def generated(by_file) -> list:
    return [i for incs in by_file.values() for i in incs]


def _dump(incidents: list) -> list[dict]:
    return [i.model_dump(mode="json") for i in incidents]


def test_same_seed_same_output_and_another_seed_differs(kb) -> None:
    a = gen.generate_release(kb.store, "0.5.9", 2, seed=11)
    b = gen.generate_release(kb.store, "0.5.9", 2, seed=11)
    c = gen.generate_release(kb.store, "0.5.9", 2, seed=12)
    assert len(a) == 2
    assert _dump(a) == _dump(b)
    assert _dump(a) != _dump(c)


class _ShippedVerdicts:
    """Replay's verdicts as the shipped file records them (the real replay is re-run on a
    sample in test_shipped_verdicts_replay_again): kept incidents come back as shipped."""

    def __init__(self, shipped: list) -> None:
        self.by_id = {i.id: i for i in shipped}
        self.asked: list[str] = []

    def __call__(self, release: str, incidents: list) -> list:
        self.asked += [i.id for i in incidents]
        return [self.by_id.get(i.id) for i in incidents]


@pytest.mark.parametrize(("name", "release"), PARTS)
def test_shipped_file_is_the_scripts_output(kb, by_file, name, release) -> None:
    """Each release's part of a shipped generated file is exactly what seed 0 produces,
    given replay's verdicts (nothing hand-edited): same incidents, same order, same logs."""
    shipped = [i for i in by_file[name] if i.release == release and i.source == "generated:seed=0"]
    assert shipped, (name, release)
    verdicts = _ShippedVerdicts(shipped)
    count = gen.SHIPPED_COUNTS.get(name, 72)
    quota = gen.quota_for(release, gen.SHIPPED_RUNS[name], count)  # the run's quota
    again = gen.generate_release(kb.store, release, quota, seed=0, confirm=verdicts)
    assert _dump(again) == _dump(shipped)
    # every shipped incident was proposed by the generator before replay judged it
    assert set(verdicts.by_id) <= set(verdicts.asked)


@pytest.mark.parametrize("release", [r for _, r in PARTS])
def test_shipped_verdicts_replay_again(kb, cache_settings, generated, release) -> None:
    """A sample of shipped incidents, replayed again with SGLang's own validation: the crash
    fires at the expected check and every shipped fix makes it pass."""
    from evals.confirm import ReplayConfirmer

    confirmer = ReplayConfirmer(cache_settings, kb.store)
    mine = [i for i in generated if i.release == release and i.source == "generated:seed=0"]
    hardware = Counter(i.hardware for i in mine).most_common(1)[0][0]
    sample = sorted(
        (i for i in mine if i.hardware == hardware),
        key=lambda i: (len(i.expected.acceptable_fixes), i.id),
    )[:2]
    again = confirmer(release, sample)
    for inc, back in zip(sample, again, strict=True):
        assert back is not None, inc.id
        assert back.expected.acceptable_fixes == inc.expected.acceptable_fixes, inc.id
        assert back.confirmed_by == inc.confirmed_by == f"replay:{release}:{hardware}"


@pytest.mark.parametrize("name", [n for n, rs in gen.SHIPPED_RUNS.items() if len(rs) == 3])
def test_enough_incidents_over_three_releases(by_file, name) -> None:
    incs = by_file[name]
    assert len(incs) >= 60
    counts = Counter(i.release for i in incs)
    assert counts.keys() == set(gen.SHIPPED_RUNS[name])
    # every release represented (0.5.5 runs dry at 13: few of its checks can fire alone)
    assert min(counts.values()) >= 10, counts
    cats = Counter(i.category for i in incs)
    assert len(cats) >= 5
    assert all(i.source.startswith("generated:") for i in incs)
    assert all((i.confirmed_by or "").startswith(f"replay:{i.release}:") for i in incs)


def test_shipped_files_cover_both_validation_layouts(kb, generated) -> None:
    """Releases of the resolution-pipeline layout (0.5.19 on: ``arg_groups/*_hook.py``)
    and of the ``__post_init__`` one are both in the suite, with incidents located in
    the hooks."""
    hooks = [i for i in generated if "_hook.py" in (i.expected.location.path or "")]
    assert {i.release for i in hooks} >= {"0.5.21", "0.5.23"}
    assert any(
        i.expected.location.path == "sglang/srt/server_args.py"
        for i in generated
        if i.release in ("0.5.5", "0.5.16")
    )


def test_expected_locations_exist_and_logs_parse(kb, generated) -> None:
    for inc in generated:
        loc = inc.expected.location
        rows = kb.store.checks(
            inc.expected.release,
            path=loc.path,
            function=loc.function,
            where="start_line = ? AND end_line = ?",
            params=[loc.start_line, loc.end_line],
        )
        assert len(rows) == 1, inc.id
        parsed = parse_log(inc.crash_log)
        assert parsed.primary is not None, inc.id
        assert parsed.primary.type == (rows[0].exc_type or "AssertionError"), inc.id
        assert parsed.command == inc.command, inc.id
        sglang = [f for f in parsed.primary.frames if (f.package_path or "").startswith("sglang/")]
        if sglang:  # not a message-only log: the innermost frame is inside the check
            assert sglang[-1].package_path == loc.path, inc.id
            assert loc.start_line <= sglang[-1].line <= loc.end_line, inc.id
        assert inc.expected.acceptable_fixes or inc.expected.no_flag_fix, inc.id


@pytest.mark.parametrize(("release", "k"), [("0.5.11", 6), ("0.5.5", 3), ("0.5.21", 3)])
def test_ground_truth_reevaluates(kb, generated, release, k) -> None:
    """The recorded command fires the check, and every acceptable fix makes it definitely pass."""
    from service.engine.flags.edit import apply_edits

    mine = [i for i in generated if i.release == release and i.source == "generated:seed=0"]
    for inc in mine[:k]:
        prober = Prober(kb.store, inc.release)
        ctx = Context(inc.release, inc.model, inc.model_arch, inc.hardware, tuple())
        loc = inc.expected.location
        check = kb.store.checks(
            inc.release,
            path=loc.path,
            function=loc.function,
            where="start_line = ?",
            params=[loc.start_line],
        )[0]
        facts = prober.facts(ctx)
        ev = prober.evaluate(check, inc.command, facts)
        assert ev.fired is True, inc.id
        user = set(parse_argv(inc.command, prober.catalog).values)
        want = {prober.by_attr[a].flags[0] for a in root_cause_attrs(ev, user)}
        assert want == set(inc.expected.root_cause_flags), inc.id
        for fix in inc.expected.acceptable_fixes:
            argv = apply_edits(inc.command, prober.catalog, set=fix.set, remove=fix.remove)
            assert prober.evaluate(check, argv, facts).fired is False, (inc.id, fix)


def _warn_statement(text: str) -> tuple[int, int]:
    """Lines of the first ``warnings.warn`` statement under ``if __name__ == "__main__":``."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            for stmt in node.body:
                if ast.unparse(stmt).startswith("warnings.warn("):
                    return stmt.lineno, stmt.end_lineno or stmt.lineno
    raise AssertionError("no warnings.warn under the main guard")


@pytest.mark.parametrize("release", ["0.5.11", "0.5.16", "0.5.21", "0.5.23"])
def test_launcher_warning_is_what_python_prints(kb, tmp_path, release) -> None:
    """The rendered warning equals what Python prints for the release's own call: a module
    that keeps only ``import warnings``, the main guard and that call (on their lines,
    the rest blanked) is run with ``-m`` and its stderr compared line by line."""
    text = kb.store.file_text(release, "sglang/launch_server.py")
    first, last = _warn_statement(text)
    lines = text.split("\n")
    keep = {
        i
        for i, line in enumerate(lines, 1)
        if line.strip() in ("import warnings", 'if __name__ == "__main__":')
    } | set(range(first, last + 1))
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(
        "\n".join(line if i in keep else "" for i, line in enumerate(lines, 1))
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    run = subprocess.run(
        [sys.executable, "-m", "sglang.launch_server"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rendered = launcher_warning(kb.store, release, str(tmp_path))
    assert rendered and rendered[0].startswith(f"{tmp_path}/sglang/launch_server.py:{first}: ")
    assert run.stderr.splitlines() == rendered


def test_launcher_warning_only_where_the_launcher_warns(kb) -> None:
    for release in ("0.5.5", "0.5.9"):  # their launchers warn nothing
        assert launcher_warning(kb.store, release, "/site") == []


def test_shipped_logs_with_the_launcher_warning_fit_their_release(kb, generated) -> None:
    """Some generated logs carry the launcher's warning (never 0.5.9's, which has none), and
    the engine's parser reads it as a warning that fits the incident's release."""
    from service.engine.release.fingerprint import warning_fits

    marked = [i for i in generated if "launcher's warning" in i.notes]
    assert marked and {i.release for i in marked} <= {"0.5.11", "0.5.16", "0.5.21", "0.5.23"}
    for inc in generated:
        parsed = parse_log(inc.crash_log)
        assert bool(parsed.warnings) == (inc in marked), inc.id
        rel = kb.store.release(inc.release)
        assert all(warning_fits(kb.store, rel, w) for w in parsed.warnings), inc.id


def test_generator_does_not_use_the_engines_fixes_or_locate() -> None:
    """Ground truth must not come from the engine's localizer, fixes or triage pipeline:
    every name imported from the engine is defined outside those stages."""
    import service.engine as engine_api

    banned = ("service.engine.fixes", "service.engine.locate", "service.engine.triage")
    root = Path(gen.__file__).parent
    for name in ("generate.py", "groundtruth.py"):
        tree = ast.parse((root / name).read_text())
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                assert not any(a.name.startswith(banned) for a in n.names), name
            if not isinstance(n, ast.ImportFrom) or not (n.module or "").startswith("service"):
                continue
            assert not (n.module or "").startswith(banned), (name, n.module)
            if n.module == "service.engine":
                for a in n.names:
                    defined = getattr(getattr(engine_api, a.name), "__module__", "")
                    assert not defined.startswith(banned), (name, a.name, defined)


def test_cli_writes_jsonl(kb_settings, tmp_path, ingest_reports) -> None:
    out = tmp_path / "g.jsonl"
    rc = gen.main(
        [
            "--out",
            str(out),
            "--count",
            "1",
            "--releases",
            "0.5.9",
            "--kb",
            str(kb_settings.kb_path),
            "--quiet",
            "--no-replay",
        ]
    )
    assert rc == 0
    written = load_incidents([out])
    assert len(written) == 1 and written[0].confirmed_by is None  # not replayed


def test_context_incidents_replay_again(
    kb,
    cache_settings,
    sglang_source,
    generated,
) -> None:
    """Crashes of plain commands (model + hardware alone) reproduce under SGLang's own
    validation, with its real message, and include at least one "no flag fix" incident."""
    from evals.confirm import fires_expected_check
    from service.replay.harness import replay_many

    ctx = [i for i in generated if i.source.startswith("generated:context:")]
    assert ctx and any(i.expected.no_flag_fix for i in ctx)
    for inc in ctx:
        assert inc.confirmed_by == f"replay:{inc.release}:{inc.hardware}"
        assert inc.expected.acceptable_fixes or inc.expected.no_flag_fix
        parsed = parse_log(inc.crash_log)
        assert parsed.command == inc.command and parsed.primary is not None
    firsts = {Version(i.release) < Version("0.5.19"): i for i in reversed(ctx)}  # per layout
    for first in firsts.values():
        root = sglang_source(first.release).root
        again = replay_many(
            root,
            first.release,
            [first.command_argv()],
            hardware=first.hardware,
            model_arch=first.model_arch,
            settings=cache_settings,
        )[0]
        assert fires_expected_check(again, first), first.id
        assert first.crash_log.rstrip().endswith(
            f"{again.exception_type}: {again.message.strip()}"
        ), first.id


def test_a_04x_release_has_incidents_of_both_its_validation_steps(by_file) -> None:
    """0.4.x validates in ``__post_init__`` itself and then in ``check_server_args`` (which the
    launch calls): both are placed in the validation order, and replay confirms crashes of
    each, so the old release is scored like the others."""
    incs = by_file["generated_old.jsonl"]
    assert {i.release for i in incs} == set(gen.OLD_RELEASES)
    assert all((i.confirmed_by or "").startswith(f"replay:{i.release}:") for i in incs)
    functions = {i.expected.location.function for i in incs if i.source == "generated:seed=0"}
    assert "ServerArgs.__post_init__" in functions
    assert "ServerArgs.check_server_args" in functions
