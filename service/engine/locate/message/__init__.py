"""Finding the check that raised an exception's message, and the values the message prints.

:mod:`.template` turns a check's message source into a template (literal fragments separated
by placeholders), :mod:`.align` aligns a message with one template, :mod:`.match` indexes a
release's templates and finds the checks a message comes from, and :mod:`.values` binds each
formatted expression of the located check to the text the message printed for it.
"""

from service.engine.locate.message.match import (
    MAX_MESSAGE_CHARS,
    MESSAGE_MIN,
    IndexRow,
    MessageIndex,
    MessageMatch,
    build_index,
    match_in,
    match_message,
    split_exception_prefix,
)
from service.engine.locate.message.template import (
    MessageTemplate,
    Placeholder,
    message_parts,
    message_pattern,
    normalise,
)
from service.engine.locate.message.values import BoundValue, bind_message, parse_printed

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MESSAGE_MIN",
    "BoundValue",
    "IndexRow",
    "MessageIndex",
    "MessageMatch",
    "MessageTemplate",
    "Placeholder",
    "bind_message",
    "build_index",
    "match_in",
    "match_message",
    "message_parts",
    "message_pattern",
    "normalise",
    "parse_printed",
    "split_exception_prefix",
]
