"""Rule cards: small, versioned constraints on SGLang launch flags, each citing its source.

* :mod:`.cards`    the :class:`~.cards.Card` model, the YAML loader for curated cards
  (``sglang_triage/kb/rules/*.yaml``) and the JSON Schema check;
* :mod:`.derive`   one card per validation check of every ingested release, deduplicated
  across releases and cached in ``<kb>/rules/derived.jsonl``;
* :mod:`.checker`  ``check(flags, release, facts, store=...)`` -> one
  :class:`~service.engine.answer.RuleVerdict` per applicable card;
* :mod:`.lint`     ``lint(store, release, argv, ...)`` -> violated/unknown cards with
  checked fixes;
* :mod:`.cli_lint` the CLI command and HTTP payloads the front ends wire in.
"""

from __future__ import annotations
