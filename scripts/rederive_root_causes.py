"""Re-derive ``expected.root_cause_flags`` of the shipped generated incidents with the
current :func:`evals.groundtruth.root_cause_attrs` (nothing else of an incident changes).

Run when the *definition* of a root cause changes, never to make the engine pass: the
generator's evaluation of each incident's own command on its own context is repeated and
the flags read by the failing atoms are taken again. Prints every change.

``python scripts/rederive_root_causes.py [--write]`` (the suite's KB: ``TRIAGE_TEST_KB``)
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.common import test_kb_dir
from evals.groundtruth import Context, Prober, root_cause_attrs
from evals.incidents import INCIDENTS_DIR, read_incidents
from kb.incidents import dump_incidents
from kb.store import Store
from service.engine import parse_argv


def main() -> None:
    write = "--write" in sys.argv
    store = Store(test_kb_dir() / "index.sqlite")
    probers: dict[str, Prober] = {}
    for path in sorted(INCIDENTS_DIR.glob("generated*.jsonl")):
        incidents = read_incidents([path])
        changed = 0
        for inc in incidents:
            exp = inc.expected
            if exp.release is None or exp.location is None or not inc.hardware:
                continue
            prober = probers.setdefault(exp.release, Prober(store, exp.release))
            rows = store.checks(exp.release, where="path = ? AND start_line = ?",
                                params=[exp.location.path, exp.location.start_line])
            if not rows:
                print(f"{inc.id}: check not found; kept")
                continue
            ctx = Context(exp.release, inc.model or "", inc.model_arch, inc.hardware, ())
            argv = inc.command_argv()
            ev = prober.evaluate(rows[0], argv, prober.facts(ctx))
            if ev.fired is not True:
                print(f"{inc.id}: the evaluator does not fire it now ({ev.fired}); kept")
                continue
            user = set(parse_argv(argv, prober.catalog).values)
            root = [prober.by_attr[a].flags[0] for a in root_cause_attrs(ev, user)]
            if root != exp.root_cause_flags:
                print(f"{inc.id}: {exp.root_cause_flags} -> {root}")
                exp.root_cause_flags = root
                changed += 1
        print(f"{path.name}: {changed} changed")
        if write and changed:
            dump_incidents(incidents, path)


if __name__ == "__main__":
    main()
