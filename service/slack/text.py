"""Reading Slack message text: formatting undone, leading options, log or question, follow-ups.

:func:`normalize_text` gives the text as the user typed it (mentions dropped,
links, entities and code fences undone); :func:`split_options` takes leading
``release= hardware= model= model_arch=`` options off; :func:`looks_like_log`
tells a crash log from a question about one; :func:`classify_followup` reads
a follow-up in a thread ("why?", "show the check", "other fixes", "what about
on H100?", "on 0.5.23?"), with :func:`hardware_from_text` mapping GPU words to
a hardware profile name. Pure functions, used by :mod:`service.slack.bot`.

Every pattern is a module global and runs in linear time on any text (issue 26; the
ReDoS fuzz test in ``tests/service/hardening/test_redos.py`` runs all of them): Slack
escapes ``<`` in what users type, so the ``<...>`` entities never span one, and the
hardware-name pattern looks at most 64 characters from each start.
"""

from __future__ import annotations

import re

from kb.errors import ConfigError
from service.engine import GpuHint, get_profile, profile_from_gpus

__all__ = [
    "classify_followup",
    "drop_versions",
    "hardware_from_text",
    "looks_like_log",
    "normalize_text",
    "split_options",
]

_MENTION = re.compile(r"<@[UWB][A-Z0-9]++(?:\|[^<>]*)?>")
_LINK = re.compile(r"<((?:https?|mailto|ftp|file):[^<>|]*)(?:\|([^<>]*))?>")
_SPECIAL = re.compile(r"<[!#][^<>|]*(?:\|([^<>]*))?>")
_FENCE = re.compile(r"```(?:[ \t]*(?:python|py|text|bash|sh|shell|console|log)[ \t]*(?=\n))?")
_TOKEN = re.compile(r"(\S+)\s*")
_HW_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,62}-x\d{1,3}\b")
_CPU = re.compile(r"\bcpu\b", re.I)
_FOLLOWUPS = [
    ("why", re.compile(r"\bwhy\b|explain|reason|cause")),
    ("check", re.compile(r"\bcheck\b|\bcode\b|source|\bline\b|assert|condition")),
    ("fixes", re.compile(r"\bfix(es)?\b|alternative|other|option|command")),
    ("unknowns", re.compile(r"unknown|missing|not sure|uncertain")),
]
_OPTION = re.compile(r"^(release|hardware|hw|model|model_arch|arch)=(\S+)$", re.I)
_OPTION_KEYS = {"hw": "hardware", "arch": "model_arch"}
_LOG_HINTS = re.compile(
    r"Traceback \(most recent call last\)|launch_server|sglang serve|--model-path|"
    r"error: argument|usage: |^\w+(?:Error|Exception)\b",
    re.I | re.M,
)
_VERSION = re.compile(r"\b(\d+\.\d+\.\d+(?:\.post\d+|rc\d+)?)\b")
_COUNT = re.compile(
    r"\b(\d{1,3})\s*[x×*]\s*(?=[A-Za-z])|\b[A-Za-z]+\d+[A-Za-z]*\s*[x×*]\s*(\d{1,3})\b"
)


def normalize_text(text: str) -> str:
    """Slack message text as the user typed it: mentions dropped, links and entities undone."""
    text = _MENTION.sub("", text or "")
    text = _LINK.sub(lambda m: m[2] or m[1].removeprefix("mailto:"), text)
    text = _SPECIAL.sub(lambda m: m[1] or "", text)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    text = _FENCE.sub("\n", text)
    return text.strip()


def split_options(text: str) -> tuple[dict[str, str], str]:
    """Leading ``key=value`` options (``release= hardware= model= model_arch=``) and the rest."""
    options: dict[str, str] = {}
    rest = text.lstrip()
    pos = 0  # the options are read in place: no copy of the rest per option
    while pos < len(rest):
        tok = _TOKEN.match(rest, pos)
        m = _OPTION.match(tok[1]) if tok else None
        if tok is None or m is None:
            break
        key = m[1].lower()
        options[_OPTION_KEYS.get(key, key)] = m[2]
        pos = tok.end()
    return options, rest[pos:]


def looks_like_log(text: str) -> bool:
    """True for text that is a crash log rather than a question about one."""
    return len(text) > 400 or bool(_LOG_HINTS.search(text))


def hardware_from_text(text: str) -> str | None:
    """A hardware profile name for the GPU words in ``text`` (``"on 2x H100"`` -> ``h100-x2``)."""
    for token in _HW_NAME.findall(text):
        try:
            return get_profile(token).name
        except ConfigError:
            pass
    prof = profile_from_gpus([GpuHint(name=text, sm=None, count=None, memory_gb=None)])
    if prof is None or prof.name.startswith("gpu-sm"):
        if _CPU.search(text):
            return "cpu"
        return None
    base = prof.name.rpartition("-x")[0] or prof.name
    m = _COUNT.search(text)
    count = next((g for g in (m.groups() if m else ()) if g), None)
    try:
        return get_profile(f"{base}-x{count}" if count else base).name
    except ConfigError:
        return None


def classify_followup(text: str) -> tuple[str, str | None]:
    """``(kind, value)`` for a follow-up: hardware, release, why, check, fixes, unknowns or help."""
    hw = hardware_from_text(text)
    if hw:
        return "hardware", hw
    m = _VERSION.search(text)
    if m:
        return "release", m[1]
    low = text.lower()
    for kind, pattern in _FOLLOWUPS:
        if pattern.search(low):
            return kind, None
    return "help", None


def drop_versions(text: str) -> str:
    """``text`` without the release numbers (``0.5.11``) that :func:`classify_followup` reads."""
    return _VERSION.sub("", text)
