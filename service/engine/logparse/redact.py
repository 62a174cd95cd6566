"""Secret redaction: the one step every way in (API, web page, Slack, CLI) goes through.

:func:`redact` replaces tokens, keys and passwords in a crash log or a command
line by ``***`` before anything is parsed, stored or echoed: values of
``--api-key``/``--hf-token``-style flags, ``NAME=value`` for secret-like
environment names, ``api_key='...'`` in reprs, ``Authorization:`` headers and
the well-known token shapes (Slack, OpenAI, Hugging Face, AWS, GitHub). It is
idempotent, so a front end may redact before the engine does again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["REDACTED", "redact", "redact_payload"]

REDACTED = "***"


_SECRET_FLAGS = r"api-key|admin-api-key|hf-token|token|secret|password|access-key|secret-key"
_SECRET_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # --api-key X, --hf-token=X, --admin-api-key 'X' (the flag name is kept)
    (re.compile(rf"(--(?:[\w-]*-)?(?:{_SECRET_FLAGS}))(?=[\s=])(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)",
                re.I), rf"\1\2{REDACTED}"),
    # NAME=value and NAME: value for env-like names (HF_TOKEN=, OPENAI_API_KEY=, AWS_SECRET_ACCESS_KEY=)
    (re.compile(r"\b([A-Z0-9_]*(?:TOKEN|API_KEY|SECRET|SECRET_ACCESS_KEY|PASSWORD))(\s*[=:]\s*)"
                r"(\"[^\"]*\"|'[^']*'|[^\s\"',)]+)"), rf"\1\2{REDACTED}"),
    # python reprs and kwargs: ServerArgs(api_key='...', hf_token="...")
    (re.compile(r"\b([a-z0-9_]*(?:api_key|token|secret|password))(=)(\"[^\"]*\"|'[^']*'|[^\s\"',)]+)"),
     rf"\1\2{REDACTED}"),
    (re.compile(r"(?i)\b(authorization\s*:\s*(?:bearer|basic|token)\s+)\S+"), rf"\1{REDACTED}"),
    (re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{6,}"), REDACTED),
    (re.compile(r"\bxapp-[A-Za-z0-9-]{6,}"), REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{12,}"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"(?i)(aws_secret_access_key\s*[=:]\s*)[A-Za-z0-9/+=]{40}\b"), rf"\1{REDACTED}"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), REDACTED),
]


def redact(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with secrets replaced by ``***``.

    ``extra`` are literal secrets (the bot's own tokens and keys) that are
    removed wherever they appear, whatever their shape.
    """
    for secret in extra:
        if secret and len(secret) >= 6:
            text = text.replace(secret, REDACTED)
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


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
