"""Static reading of an unpacked SGLang release's source: nothing is imported or executed.

``modules``  :class:`~ingest.static.modules.ModuleLoader`: files parsed on demand into
             :class:`~ingest.static.modules.SourceModule` records, imports resolved by name
``values``   :class:`~ingest.static.values.StaticEvaluator`: literal-ish expressions,
             constants and class attributes to plain values (or :data:`UNKNOWN`)

The flag catalog (:mod:`ingest.catalog`) is read with them.
"""

from ingest.static.modules import (
    ModuleLoader,
    SourceModule,
    from_import_names,
    name_assignment,
    name_assignments,
    resolve_from,
)
from ingest.static.values import (
    UNKNOWN,
    Scope,
    StaticEvaluator,
    forget_local_scopes,
    is_stringish,
    jsonable,
    local_scope,
    string_value,
    text_of,
)

__all__ = [
    "UNKNOWN",
    "ModuleLoader",
    "Scope",
    "SourceModule",
    "StaticEvaluator",
    "forget_local_scopes",
    "from_import_names",
    "is_stringish",
    "jsonable",
    "local_scope",
    "name_assignment",
    "name_assignments",
    "resolve_from",
    "string_value",
    "text_of",
]
