"""Secret redaction: the one step every way in (API, web page, Slack, CLI) goes through.

:func:`redact` replaces tokens, keys and passwords in a crash log or a command
line by ``***`` before anything is parsed, stored or echoed: values of
``--api-key``/``--hf-token``-style flags, ``NAME=value`` for secret-like
environment names, ``api_key='...'`` in reprs, ``Authorization:`` headers and
the well-known token shapes (Slack, OpenAI, Hugging Face, AWS, GitHub).

Every pattern runs in linear time on any input (issue 26: a run of ``-`` used to
make the flag pattern backtrack quadratically: 17 CPU seconds for 16 KB). Secret flags are
found as whole ``[\\w-]`` runs, each examined once, and their names are checked
in code (:func:`_secret_flag`), not by a backtracking regular expression; the scan
reads 32 KB windows, so no single call holds the GIL for long.

It is idempotent, and its result is a :class:`Redacted` string: redacting that
again costs nothing (only ``extra`` literals are replaced), so a front end
redacts once per request and the engine's own :func:`redact` calls are free.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["REDACTED", "Redacted", "redact", "redact_payload"]

REDACTED = "***"


class Redacted(str):
    """Text :func:`redact` has already processed; :func:`redact` returns it unchanged.

    Only :func:`redact` makes these. Any string operation (slicing, ``+``,
    ``replace``) gives a plain ``str`` again, which is redacted afresh.
    """

    __slots__ = ()


_SECRET_FLAG_NAMES = (
    "api-key",
    "admin-api-key",
    "hf-token",
    "token",
    "secret",
    "password",
    "access-key",
    "secret-key",
)
#: A whole ``[\w-]`` run (one start per run: never inside one) that ends in a secret flag
#: name and is followed by ``=`` or a blank. The run is consumed possessively and its end
#: checked by fixed-width lookbehinds, so each character is looked at a bounded number of
#: times. Whether the run holds the ``--`` of a flag is checked in :func:`_secret_flag`.
_FLAG_RUN_RE = re.compile(
    r"(?<![\w-])[\w-]*+(?:"
    + "|".join(f"(?<={re.escape(n)})" for n in _SECRET_FLAG_NAMES)
    + r")(?=[\s=])",
    re.I,
)
#: The separator and the value after a secret flag (matched at the flag's end, never after
#: a blank, so a search through a run of blanks starts once).
_FLAG_VALUE_RE = re.compile(r"(?<!\s)(=|\s++)(\"[^\"]*\"|'[^']*'|\S+)")

_SECRET_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # NAME=value and NAME: value for env-like names (HF_TOKEN=, OPENAI_API_KEY=, AWS_SECRET_ACCESS_KEY=)
    (
        re.compile(
            r"\b([A-Z0-9_]*(?:TOKEN|API_KEY|SECRET|SECRET_ACCESS_KEY|PASSWORD))(\s*[=:]\s*)"
            r"(\"[^\"]*\"|'[^']*'|[^\s\"',)]+)"
        ),
        rf"\1\2{REDACTED}",
    ),
    # python reprs and kwargs: ServerArgs(api_key='...', hf_token="...")
    (
        re.compile(
            r"\b([a-z0-9_]*(?:api_key|token|secret|password))(=)(\"[^\"]*\"|'[^']*'|[^\s\"',)]+)"
        ),
        rf"\1\2{REDACTED}",
    ),
    (re.compile(r"(?i)\b(authorization\s*:\s*(?:bearer|basic|token)\s+)\S+"), rf"\1{REDACTED}"),
    (re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{6,}"), REDACTED),
    (re.compile(r"\bxapp-[A-Za-z0-9-]{6,}"), REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{12,}"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"(?i)(aws_secret_access_key\s*[=:]\s*)[A-Za-z0-9/+=]{40}\b"), rf"\1{REDACTED}"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), REDACTED),
]


def _secret_flag(run: str) -> bool:
    """Whether the ``[\\w-]`` run ``run`` holds a secret flag that ends with it.

    True when some ``--`` in the run starts ``--NAME`` or ``--X-...-NAME`` up to the
    run's end, ``NAME`` one of the secret flag names (any case): ``--api-key``,
    ``--hf-token``, ``--my-admin-api-key``, ``x--token``; not ``tokens`` or ``my-token``.
    """
    low = run.lower()
    for name in _SECRET_FLAG_NAMES:
        if low.endswith(name):
            head = low[: len(low) - len(name)]
            if head.endswith("--") or (head.endswith("-") and "--" in head[:-1]):
                return True
    return False


#: Characters the flag scan reads per call (the scan holds the GIL for a whole call).
_WINDOW = 32 * 1024
_NOT_FLAG_CHAR_RE = re.compile(r"[^\w-]")


def _windows(text: str) -> Iterator[tuple[int, int]]:
    """``(start, end)`` windows of about :data:`_WINDOW` characters covering ``text``, each
    ending just after a character outside ``[\\w-]``, so no flag run and the character that
    follows it (``=`` or a blank) are ever split."""
    start = 0
    while start < len(text):
        cut = _NOT_FLAG_CHAR_RE.search(text, start + _WINDOW)
        end = cut.end() if cut is not None else len(text)
        yield start, end
        start = end


def _redact_flags(text: str) -> str:
    """Replace the values of ``--api-key X``/``--hf-token=X``-style flags (names kept)."""
    pieces: list[str] = []
    pos = 0
    for start, end in _windows(text):
        for m in _FLAG_RUN_RE.finditer(text, start, end):
            if m.start() < pos or not _secret_flag(m.group()):
                continue  # inside a value already replaced, or not a secret flag
            v = _FLAG_VALUE_RE.match(text, m.end())
            if v is None:
                continue
            pieces += [text[pos : m.end()], v.group(1), REDACTED]
            pos = v.end()
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "".join(pieces)


def redact(text: str, extra: Iterable[str] = ()) -> Redacted:
    """``text`` with secrets replaced by ``***``, as a :class:`Redacted` string.

    ``extra`` are literal secrets (the bot's own tokens and keys) that are
    removed wherever they appear, whatever their shape. Text that is already
    :class:`Redacted` only has ``extra`` removed. Linear in ``len(text)``.
    """
    done = isinstance(text, Redacted)
    for secret in extra:
        if secret and len(secret) >= 6:
            text = text.replace(secret, REDACTED)
    if done:
        return text if isinstance(text, Redacted) else Redacted(text)
    text = _redact_flags(text)
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return Redacted(text)


def redact_payload(value: Any, extra: Iterable[str] = ()) -> Any:
    """Redact every string inside a JSON-like value (blocks, text, button values)."""
    extra = tuple(extra)
    if isinstance(value, str):
        return redact(value, extra)
    if isinstance(value, list):
        return [redact_payload(v, extra) for v in value]
    if isinstance(value, dict):
        return {k: redact_payload(v, extra) for k, v in value.items()}
    return value
