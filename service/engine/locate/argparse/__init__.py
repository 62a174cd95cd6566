"""Explaining an argparse error against one release's flag catalog.

:func:`diagnose_argparse` (:mod:`.diagnose`) answers one error; :mod:`.unrecognized` and
:mod:`.option_errors` hold the answers per kind of error, :mod:`.foreign` the flags that
are not typos (another engine's, another parser's), :mod:`.words` the reading of the
error's words and :mod:`.work` the state of one diagnosis and the argv its edits give.
"""

from service.engine.locate.argparse.diagnose import (
    ArgparseDiagnosis,
    diagnose_argparse,
    reparse_problems,
)
from service.engine.locate.argparse.foreign import (
    ForeignAnswer,
    foreign_answer,
    known_here,
    which_parser,
)

__all__ = [
    "ArgparseDiagnosis",
    "ForeignAnswer",
    "diagnose_argparse",
    "foreign_answer",
    "known_here",
    "reparse_problems",
    "which_parser",
]
