"""Argparse errors in a crash log: the ``prog: error: ...`` line and the usage block before it.

When SGLang's argument parser refuses a launch command it prints a ``usage:``
block and one ``error:`` line, then exits with status 2: no traceback.
:func:`find_argparse_error` finds the last such error in the cleaned log lines
and reads its kind (unrecognized arguments, invalid choice, missing value,
required argument, invalid value, ambiguous option), the flags and values it
names and the choices argparse listed, into an :class:`ArgparseError`; ``parser``
says which of SGLang's parsers printed it when the log tells (``diffusion``: a
``sglang/multimodal_gen`` path, ``sglang generate``, the serve dispatcher's
"Selected serve backend 'diffusion'"; ``llm``: the dispatcher chose the LLM server),
else None.
:mod:`service.engine.locate.argparse` later matches it with the release's flag catalog.

Pure, and every regular expression is linear and sees at most
:data:`~service.engine.logparse.text.SCAN_CHARS` characters of a line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from service.engine.logparse.text import SCAN_CHARS, unquote

__all__ = ["ArgparseError", "ArgparseKind", "find_argparse_error"]

ArgparseKind = Literal[
    "unrecognized_arguments",
    "invalid_choice",
    "expected_argument",
    "required",
    "invalid_value",
    "ambiguous",
    "other",
]


class ArgparseError(BaseModel):
    """A ``prog: error: ...`` line printed by argparse (exit status 2, no traceback)."""

    prog: str | None
    kind: ArgparseKind
    message: str
    flags: list[str]
    values: list[str]
    choices: list[str] | None
    usage: str | None
    parser: Literal["llm", "diffusion"] | None = None  # which SGLang parser, when the log says


# --------------------------------------------------------------------------- argparse

_ARGUMENT_RE = re.compile(r"argument ([^:]{1,300}): (.*)")
_INVALID_VALUE_RE = re.compile(r"invalid \S{1,100} value: (.*)")
_ARGERR_RE = re.compile(r"^(?:([^\s:][^:\n]{0,200}): )?error: (.*)")
_FLAG_RE = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]{0,100}")


def _argparse_fields(msg: str) -> tuple[ArgparseKind, list[str], list[str], list[str] | None]:
    """``(kind, flags, values, choices)`` of an argparse error message."""
    if msg.startswith("unrecognized arguments:"):
        flags, values = [], []
        for tok in msg.partition(":")[2].split():
            name, eq, value = tok.partition("=")
            if tok.startswith("-"):
                flags.append(name)
                if eq:
                    values.append(value)
            else:
                values.append(tok)
        return "unrecognized_arguments", flags, values, None
    if msg.startswith("the following arguments are required:"):
        names = [f.strip() for f in msg.partition(":")[2].split(",") if f.strip()]
        return "required", names, [], None
    if msg.startswith("ambiguous option:"):
        opt, _, cands = msg.partition(":")[2].partition(" could match ")
        name, eq, value = opt.strip().partition("=")
        matches = [c.strip() for c in cands.split(",") if c.strip()]
        return "ambiguous", [name, *matches], [value] if eq else [], matches or None
    m = _ARGUMENT_RE.match(msg)
    if m is None:
        return "other", _FLAG_RE.findall(msg), [], None
    flags = [f.strip() for f in m[1].split("/") if f.strip()]
    rest = m[2]
    if rest.startswith("invalid choice:"):
        body = rest.partition(":")[2].strip()
        k = body.rfind(" (choose from ")
        value, listed = (body[:k], body[k + len(" (choose from ") :]) if k >= 0 else (body, "")
        listed = listed[:-1] if listed.endswith(")") else listed
        choices = [unquote(c) for c in listed.split(",") if c.strip()]
        return "invalid_choice", flags, [unquote(value)], choices or None
    v = _INVALID_VALUE_RE.match(rest)
    if v is not None:
        return "invalid_value", flags, [unquote(v[1])], None
    if rest.startswith("expected "):
        return "expected_argument", flags, [], None
    return "other", flags + [f for f in _FLAG_RE.findall(rest) if f not in flags], [], None


_BARE_STARTS = (
    "unrecognized arguments: ",
    "the following arguments are required: ",
    "ambiguous option: ",
    "argument -",
)


def _bare_error(line: str) -> str | None:
    """The message of an argparse error pasted without its ``prog: error: `` prefix
    (``unrecognized arguments: --foo``), else None; only known argparse forms count."""
    if not line.startswith(_BARE_STARTS) or len(line) < 20:
        return None
    if line.startswith("argument -") and ": invalid " not in line and ": expected " not in line:
        return None
    return line


_DIFFUSION_MARKERS = (
    "multimodal_gen",
    "serve backend 'diffusion'",
    "sglang generate ",
    "sglang-diffusion",
    "SGLang Diffusion",
    "--model-type diffusion",
    "--model-type=diffusion",
)
_LLM_MARKERS = (
    "serve backend 'llm'",
    "--model-type llm",
    "--model-type=llm",
    "sglang.launch_server",
    "launch_server.py",
)


def _parser_of(lines: Sequence[str]) -> Literal["llm", "diffusion"] | None:
    """Which SGLang parser the log shows (see the module docstring); the diffusion markers win."""
    llm = False
    for raw in lines:
        line = raw[:SCAN_CHARS]
        if any(m in line for m in _DIFFUSION_MARKERS):
            return "diffusion"
        llm = llm or any(m in line for m in _LLM_MARKERS)
    return "llm" if llm else None


def find_argparse_error(lines: Sequence[str]) -> ArgparseError | None:
    """The last argparse error line, with the ``usage:`` block printed just before it.

    Leading blanks are ignored. A ``prog: error: ...`` line of a known argparse form
    always counts, and so does a known form pasted without its ``prog: error: ``
    prefix (``unrecognized arguments: --foo``); any other ``error:`` line counts only
    right after a usage block.
    """
    best: ArgparseError | None = None
    usage: tuple[int, str] | None = None  # (index after the block, text)
    i, n = 0, len(lines)
    while i < n:
        line = lines[i][:SCAN_CHARS].strip()
        if line.startswith("usage: "):
            j = i + 1
            while (
                j < n
                and j - i < 5000
                and lines[j][:1] in (" ", "\t")
                and lines[j].strip()
                and "error: " not in lines[j][:SCAN_CHARS]
            ):
                j += 1
            usage = (j, "\n".join(x.rstrip() for x in lines[i:j])[:65536])
            i = j
            continue
        m = _ARGERR_RE.fullmatch(line) if "error: " in line else None
        prog, message = (m[1], m[2].strip()) if m is not None else (None, _bare_error(line))
        if message is not None:
            near = usage is not None and 0 <= i - usage[0] <= 2
            kind, flags, values, choices = _argparse_fields(message)
            if kind != "other" or (near and m is not None):
                best = ArgparseError(
                    prog=prog,
                    kind=kind,
                    message=message,
                    flags=flags,
                    values=values,
                    choices=choices,
                    usage=usage[1] if near and usage else None,
                )
        i += 1
    if best is not None:
        best.parser = _parser_of(lines)
    return best
