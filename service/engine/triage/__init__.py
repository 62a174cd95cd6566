"""The triage engine: crash log in, grounded diagnosis and checked fixes out.

``Engine(kb).triage(payload)`` runs, in order: parse the log
(:mod:`service.engine.logparse.parse`), resolve the release (:mod:`service.engine.release.resolve`), locate the check
(:mod:`service.engine.locate.localize`), evaluate its path condition (:mod:`service.engine.evaluate.path_condition`), propose
and verify fixes (:mod:`service.engine.fixes.propose`), and write the summary and cited
explanation (:mod:`service.engine.explain.deterministic`). It is deterministic and offline; the optional
LLM layer and replay run on top of its result.

The stages of a triage, each a module returning what the next one reads:

``inputs``           the log read, its release resolved, its facts and command
                     (:class:`~service.engine.triage.inputs.TriageInput`)
``argparse_answer``  the answer to an argparse error
``unlocated``        the answers naming no check: no exception, or no check matched
``located``          the check located, then evaluated under the command and facts
``fix_list``         the fixes listed: judged, ranked by the rule cards, repaired
``assemble``         the located answer's assembly
``engine``           :class:`Engine`, which runs them in order
"""

from __future__ import annotations

from service.engine.expr.interpreter import UNKNOWN
from service.engine.triage.engine import Engine

__all__ = ["Engine", "UNKNOWN"]
