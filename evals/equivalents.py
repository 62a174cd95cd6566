"""Equivalent answers of frameless crash logs, each confirmed by replay.

A crash log without traceback frames (the ``message_only`` style: the launch
command and the exception line) may be exactly what several ingested releases
print: the same command accepted, the same exception type, the same message.
The log cannot tell them apart, so each of them is a right answer. For every
such incident this module replays its command -- with its hardware profile and
model architecture, as :mod:`evals.confirm` replays the primary -- on every
*other* release of the KB, and records in ``expected.equivalents`` each release
whose own validation raises the same exception type with the same message
(whitespace normalized) inside a check of the KB's checks table (the innermost
check whose lines hold the raising line, as :func:`evals.confirm.fires_expected_check`
matches the primary's span).

Only releases the log itself does not rule out are replayed: a log naming its
release (``sglang==X``, a version string: any release hint) fits that release
only, and a warning printed from SGLang's files (the launcher's) must be issued
at its reported line by the release (:func:`service.engine.release.fingerprint.warning_fits`).
The acceptable fixes are replayed on the equivalent release in the same batch
and their count reported (the log), not recorded.

Replays are batched: one :func:`~service.replay.harness.replay_many` call per
release and hardware profile for all the incidents that need it (the machine is
per subprocess), cached on disk by the harness.

``python -m evals.equivalents [FILE ...] [--releases R,R] [--kb DIR]`` adds them
in place to the shipped generated files (or the given ones): only
``expected.equivalents`` of frameless incidents changes, every other byte stays.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from evals.incidents import INCIDENTS_DIR, Equivalent, Incident, load_incidents
from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.store import Store
from kb.versions import sorted_versions, version_key
from service.engine import ParsedLog, apply_edits, parse_log, warning_fits
from service.replay.results import ReplayResult

#: the shipped files equivalents are added to by default
GENERATED_FILES = ("generated.jsonl", "generated_more.jsonl", "generated_old.jsonl")

__all__ = [
    "GENERATED_FILES",
    "candidate_releases",
    "find_equivalents",
    "is_frameless",
    "located_check",
    "main",
    "match",
    "normalize",
    "update_file",
]


def normalize(text: str | None) -> str:
    """``text`` with its whitespace runs collapsed (the only normalization applied)."""
    return " ".join((text or "").split())


def is_frameless(parsed: ParsedLog) -> bool:
    """An exception with no traceback frame inside ``sglang/``."""
    return parsed.primary is not None and not any(
        (f.package_path or "").startswith("sglang/") for f in parsed.primary.frames
    )


def candidate_releases(
    store: Store, inc: Incident, parsed: ParsedLog, releases: Iterable[str]
) -> list[str]:
    """The other releases (of ``releases``) whose output the frameless log could be.

    Empty when the incident has no located primary answer or its log has frames.
    """
    exp = inc.expected
    if (
        exp.release is None
        or exp.location is None
        or exp.location.start_line is None
        or not is_frameless(parsed)
        or not inc.command_argv()
    ):
        return []

    out = []
    for release in sorted_versions(set(releases) - {exp.release}):
        rel = store.release(release)
        if rel is None or any(h.version != release for h in parsed.release_hints):
            continue
        if all(warning_fits(store, rel, w) for w in parsed.warnings):
            out.append(release)
    return out


def located_check(store: Store, release: str, path: str, line: int) -> Check | None:
    """The innermost check of ``release`` whose lines in ``path`` hold ``line``."""
    rows = store.checks(
        release, path=path, where="start_line <= ? AND end_line >= ?", params=[line, line]
    )
    return min(rows, key=lambda r: (r.end_line - r.start_line, -r.start_line), default=None)


def match(
    store: Store, release: str, result: ReplayResult, exc_type: str, message: str | None
) -> Equivalent | None:
    """The equivalent when ``result`` raised ``exc_type`` with ``message`` at a located check."""
    origin = result.origin
    if (
        result.status != "raised"
        or origin is None
        or origin.line is None
        or result.exception_type != exc_type
        or normalize(result.message) != normalize(message)
    ):
        return None
    check = located_check(store, release, origin.path, origin.line)
    if check is None:
        return None
    return Equivalent(
        release=release,
        path=check.path,
        function=check.function,
        start_line=check.start_line,
        end_line=check.end_line,
    )


def _fires(result: ReplayResult, eq: Equivalent) -> bool:
    """Did ``result`` raise inside the equivalent's check?"""
    o = result.origin
    return (
        result.status == "raised"
        and o is not None
        and o.line is not None
        and o.path == eq.path
        and eq.start_line <= o.line <= eq.end_line
    )


def _fix_argvs(store: Store, release: str, inc: Incident) -> list[list[str]]:
    catalog = load_catalog(store, release)
    out = []
    for fix in inc.expected.acceptable_fixes:
        try:
            out.append(
                apply_edits(inc.command_argv(), catalog, set=dict(fix.set), remove=list(fix.remove))
            )
        except (KeyError, ValueError):
            continue  # a flag this release does not know: not replayable here
    return out


def find_equivalents(
    store: Store,
    incidents: Sequence[Incident],
    releases: Iterable[str],
    replay: Callable[..., list[ReplayResult]],
    log: Callable[[str], None] | None = None,
) -> dict[str, list[Equivalent]]:
    """``{incident id: equivalents}`` for the frameless incidents of ``incidents``.

    ``replay(release, argvs, hardware, archs)`` replays command lines of one release on
    one declared machine (see :meth:`evals.confirm.ReplayConfirmer.replay`).
    """
    want: dict[str, list[tuple[Incident, ParsedLog]]] = defaultdict(list)
    for inc in incidents:
        parsed = parse_log(inc.crash_log)
        for release in candidate_releases(store, inc, parsed, releases):
            want[release].append((inc, parsed))
    found: dict[str, list[Equivalent]] = defaultdict(list)
    for release in sorted_versions(want):
        groups: dict[str, list[tuple[Incident, ParsedLog]]] = defaultdict(list)
        for inc, parsed in want[release]:
            groups[inc.hardware or ""].append((inc, parsed))
        for hardware, members in sorted(groups.items()):
            argvs: list[list[str]] = []
            archs: list[str | None] = []
            spans: list[tuple[int, int]] = []
            for inc, _ in members:
                start = len(argvs)
                argvs += [inc.command_argv(), *_fix_argvs(store, release, inc)]
                archs += [inc.model_arch] * (len(argvs) - start)
                spans.append((start, len(argvs)))
            if log:
                log(
                    f"equivalents: replay {release} on {hardware or 'no hardware'}: "
                    f"{len(members)} incidents, {len(argvs)} command lines"
                )
            results = replay(release, argvs, hardware or None, archs)
            for (inc, parsed), (a, b) in zip(members, spans, strict=True):
                primary = parsed.primary
                assert primary is not None  # frameless implies an exception
                eq = match(store, release, results[a], primary.type, primary.message)
                if eq is None:
                    if log:
                        log(f"  {inc.id}: not on {release}: {results[a].summary()[:160]}")
                    continue
                found[inc.id].append(eq)
                if log:
                    still = sum(1 for r in results[a + 1 : b] if _fires(r, eq))
                    log(
                        f"  {inc.id}: same log on {release} at {eq.path}:{eq.start_line} "
                        f"({eq.function}); fixes that hold there: "
                        f"{b - a - 1 - still}/{len(inc.expected.acceptable_fixes)}"
                    )
    return dict(found)


def update_file(path: Path, found: dict[str, list[Equivalent]]) -> int:
    """Set ``expected.equivalents`` of the incidents of ``path`` in place.

    Lines of incidents without equivalents (or not in ``found``) are kept byte for
    byte (a stale ``equivalents`` key is dropped); the others get the key last in
    ``expected``, everything else in its order. Returns how many incidents have it.
    """
    lines = path.read_text(encoding="utf-8").split("\n")
    count = 0
    for n, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        obj = json.loads(line)
        eqs = found.get(obj["id"], [])
        if not eqs and "equivalents" not in obj["expected"]:
            continue
        obj["expected"].pop("equivalents", None)
        if eqs:
            obj["expected"]["equivalents"] = [e.model_dump(mode="json") for e in eqs]
            count += 1
        lines[n] = json.dumps(obj, ensure_ascii=False)
    path.write_text("\n".join(lines), encoding="utf-8")
    return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m evals.equivalents", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "files", nargs="*", help=f"incident files (default: {', '.join(GENERATED_FILES)})"
    )
    ap.add_argument(
        "--releases", default=None, help="releases to replay on (default: every release of the KB)"
    )
    ap.add_argument("--kb", default=None, help="KB folder (default: TRIAGE_KB_DIR or <home>/kb)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    from evals.confirm import ReplayConfirmer, kb_settings

    settings = kb_settings(args.kb)
    store = Store(settings.kb_path / "index.sqlite")
    releases = (
        [r.strip() for r in args.releases.split(",") if r.strip()]
        if args.releases
        else [r["version"] for r in store.releases()]
    )
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    confirmer = ReplayConfirmer(settings, store, log=log)
    paths = [Path(f) for f in args.files] or [INCIDENTS_DIR / f for f in GENERATED_FILES]
    for path in paths:
        found = find_equivalents(store, load_incidents([path]), releases, confirmer.replay, log=log)
        n = update_file(path, found)
        per = defaultdict(int)
        for eqs in found.values():
            for e in eqs:
                per[e.release] += 1
        print(
            f"{path}: {n} incidents with equivalents "
            f"({', '.join(f'{r} {c}' for r, c in sorted(per.items(), key=lambda x: version_key(x[0])))})"
        )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
