"""The knowledge base and how to read it; imports no other part of sglang-triage.

Public modules (each declares its own ``__all__``):

``knowledge``     :class:`~kb.knowledge.KnowledgeBase`: the structured index, vectors, encoders
``store``         the structured index (SQLite); ``schema`` its tables, ``writer`` its writes
``vectors``       Chroma, embedded or a ``chroma run`` server (always our own vectors)
``search``        hybrid keyword + dense search over one release
``embedder``      the sentence-transformers embedding model; ``query_encoder`` the same in NumPy
``catalog_types`` the flag catalog's record types; ``catalogs`` a release's catalog, indexed
``code_types``    record types of stored code facts (guards)
``conditions``    the condition language: parse, whitelist, normalise, names read
``hardware``      hardware profiles as data
``known_models``  facts about well-known public checkpoints (``data/known_models.json``)
``rules``         the rule-card format and the curated cards
``sources``       SGLang releases: the wheel and source cache
``records``       stored triages and confirmations; ``incidents``/``recording`` their export
``settings``      :class:`~kb.settings.KBSettings`; ``errors`` the root of the error tree
"""

__all__ = [
    "catalog_types",
    "catalogs",
    "code_types",
    "conditions",
    "embedder",
    "errors",
    "hardware",
    "incidents",
    "knowledge",
    "known_models",
    "query_encoder",
    "recording",
    "records",
    "rules",
    "schema",
    "search",
    "settings",
    "sources",
    "store",
    "vectors",
    "writer",
]
