"""The seed case as two incidents (``incidents/seed.jsonl``).

Kimi K2.6 with EAGLE-3 on 8x RTX PRO 6000 Blackwell (``shared/incidents/seed_case.md``).
Both launches die with a bare ``AssertionError`` in ``_handle_speculative_decoding``;
the check is 0.5.11's only bare assert there (``speculative_num_steps is None`` requires
``--speculative-eagle-topk`` and ``--speculative-num-draft-tokens`` unset too).

* attempt 1 (``--speculative-eagle-topk 4 --speculative-num-draft-tokens 8``) is rendered
  as the original log was: a dev build whose lines sit 79 below 0.5.11's (the assert at
  3598), with a dev version string;
* attempt 2 (only ``--speculative-num-draft-tokens 8``) is rendered with 0.5.11's lines.

``python -m evals.seed --out incidents/seed.jsonl`` rewrites the file.
"""

from __future__ import annotations

import argparse

from evals.incidents import Expected, ExpectedLocation, FixSpec, Incident, dump_incidents
from evals.render import render_log
from kb.code_types import Check
from kb.store import Store
from service.engine import model_arch_for

MODEL = "/models/Kimi-K2.6"
BASE = [
    "--model-path",
    MODEL,
    "--tp",
    "8",
    "--trust-remote-code",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/Kimi-K2.6-eagle3",
]
TAIL = ["--mem-fraction-static", "0.85"]
DEV_VERSION = "0.5.12.dev210+gedff717ef"
SITE = "/root/venv_sglang211/lib/python3.12/site-packages"
PREAMBLE = ["[2026-05-02 10:14:03] INFO utils.py:164: NumExpr defaulting to 16 threads."]
STEPS_TOPK_DRAFT = FixSpec(
    set={
        "--speculative-num-steps": 3,
        "--speculative-eagle-topk": 1,
        "--speculative-num-draft-tokens": 4,
    }
)


def seed_check(store: Store, release: str = "0.5.11") -> Check:
    """0.5.11's bare assert in ``ServerArgs._handle_speculative_decoding``."""
    return next(
        c
        for c in store.checks(release, function="ServerArgs._handle_speculative_decoding")
        if c.bare and "speculative_eagle_topk is None" in (c.condition or "")
    )


def seed_incidents(store: Store) -> list[Incident]:
    check = seed_check(store)
    loc = ExpectedLocation(
        path=check.path,
        function=check.function,
        start_line=check.start_line,
        end_line=check.end_line,
    )
    arch = model_arch_for(MODEL)
    argv1 = BASE + ["--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"] + TAIL
    argv2 = BASE + ["--speculative-num-draft-tokens", "8"] + TAIL
    log1 = render_log(
        store,
        "0.5.11",
        check,
        python="3.12",
        argv=argv1,
        entry="python3 -m sglang.launch_server",
        line_offset=79,
        site=SITE,
        preamble=[f"sglang {DEV_VERSION}", *PREAMBLE],
    )
    log2 = render_log(
        store,
        "0.5.11",
        check,
        python="3.12",
        argv=argv2,
        entry="python3 -m sglang.launch_server",
        site=SITE,
        preamble=PREAMBLE,
    )
    common = dict(
        source="seed: shared/incidents/seed_case.md",
        hardware="rtx-pro-6000-x8",
        model=MODEL,
        model_arch=arch,
        category="speculative",
    )
    return [
        Incident(
            id="seed-attempt-1",
            release=DEV_VERSION,
            command=argv1,
            crash_log=log1,
            expected=Expected(
                release="0.5.11",
                location=loc,
                root_cause_flags=["--speculative-eagle-topk", "--speculative-num-draft-tokens"],
                acceptable_fixes=[
                    FixSpec(remove=["--speculative-eagle-topk", "--speculative-num-draft-tokens"]),
                    STEPS_TOPK_DRAFT,
                ],
            ),
            notes="Launch 1 of the seed case. The original traceback came from a dev build "
            "(line 3598, 79 below 0.5.11's 3519); rendered with that offset. The dev "
            "version string is illustrative (the article does not print one); the "
            "nearest ingested release, 0.5.11, is the expected answer.",
            **common,
        ),  # type: ignore[arg-type]
        Incident(
            id="seed-attempt-2",
            release="0.5.11",
            command=argv2,
            crash_log=log2,
            expected=Expected(
                release="0.5.11",
                location=loc,
                root_cause_flags=["--speculative-num-draft-tokens"],
                acceptable_fixes=[
                    FixSpec(remove=["--speculative-num-draft-tokens"]),
                    STEPS_TOPK_DRAFT,
                ],
            ),
            notes="Launch 2 of the seed case (topk dropped, the same assert fires). Rendered "
            "with 0.5.11's own lines.",
            **common,
        ),  # type: ignore[arg-type]
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.seed")
    ap.add_argument("--out", required=True)
    ap.add_argument("--kb", default=None)
    args = ap.parse_args(argv)
    from evals.confirm import kb_settings

    settings = kb_settings(args.kb)
    store = Store(settings.kb_path / "index.sqlite")
    store.require("0.5.11")
    dump_incidents(seed_incidents(store), args.out)
    print(f"wrote 2 incidents to {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
