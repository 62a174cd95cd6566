"""The setup around a crash, read from the log: environment, ServerArgs, release, Python, GPUs.

Readers of the cleaned log lines (see :func:`~service.engine.logparse.text.clean_log`):

* :func:`find_env` — ``SGLANG_*`` and ``CUDA_VISIBLE_DEVICES`` settings in
  shell, docker, compose/YAML, JSON and Kubernetes forms;
* :func:`parse_server_args` — the fields of the last ``ServerArgs(...)`` repr,
  each value read with :func:`ast.literal_eval` only, one value at a time;
* :func:`find_release_hints` — SGLang version clues (:class:`ReleaseHint`):
  pins and pip output, ``check_env`` rows, ``dist-info`` paths, version strings;
* :func:`find_sglang_warnings` — Python warnings printed from SGLang's own files
  (:class:`WarningLine`: package path, line, category, message);
* :func:`find_python_version` — from frame paths or ``Python 3.x`` text;
* :func:`find_gpus` — GPUs (:class:`GpuHint`) from ``check_env``, ``nvidia-smi``,
  torch device properties, capability prints, ROCm architectures, SGLang's start-up
  lines and free text, with :func:`gpu_sm` for compute capabilities (re-exported
  from :mod:`service.engine.logparse.gpus`).

Everything is pure (nothing is read, written, fetched or evaluated), and every
regular expression is linear and sees at most
:data:`~service.engine.logparse.text.SCAN_CHARS` characters of a line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from service.engine.logparse.frames import package_path
from service.engine.logparse.gpus import GpuHint, find_gpus, gpu_sm
from service.engine.logparse.text import SCAN_CHARS, split_top_level, unquote

__all__ = [
    "VERSION_RE",
    "GpuHint",
    "ReleaseHint",
    "ReleaseKind",
    "find_env",
    "find_gpus",
    "find_python_version",
    "find_release_hints",
    "gpu_sm",
    "parse_server_args",
]

_LITERAL_MAX = 10_000  # longest ServerArgs value handed to ast.literal_eval

ReleaseKind = Literal["pip", "check_env", "dist_info", "version_string", "explicit"]


class ReleaseHint(BaseModel):
    """A clue to the SGLang release that produced the log."""

    version: str
    evidence: str
    kind: ReleaseKind


class WarningLine(BaseModel):
    """A Python warning printed from a file inside SGLang: ``<path>.py:51: UserWarning: msg``.

    Its line is where the release's ``warnings.warn`` call sits, so, like a
    traceback frame, it tells releases apart.
    """

    path: str  # package-relative: sglang/...
    line: int
    category: str
    message: str


_WARNING_RE = re.compile(
    r"^[ \t]*(\S{1,500}?\.py):(\d{1,6}): ([A-Za-z_]\w{0,60}Warning): (.{0,300})"
)
MAX_WARNINGS = 20


def find_sglang_warnings(lines: Sequence[str]) -> list[WarningLine]:
    """Python warnings raised in SGLang's own files (at most :data:`MAX_WARNINGS`, each
    file and line once)."""
    out: list[WarningLine] = []
    seen: set[tuple[str, int]] = set()
    for raw in lines:
        if "Warning: " not in raw or ".py:" not in raw:
            continue
        m = _WARNING_RE.match(raw[:SCAN_CHARS])
        path = package_path(m.group(1)) if m else None
        if m is None or path is None or (path, int(m.group(2))) in seen:
            continue
        seen.add((path, int(m.group(2))))
        out.append(
            WarningLine(
                path=path, line=int(m.group(2)), category=m.group(3), message=m.group(4).strip()
            )
        )
        if len(out) >= MAX_WARNINGS:
            break
    return out


# --------------------------------------------------------------------------- env

_ENV_NAME = r"SGLANG_[A-Za-z0-9_]{1,100}|CUDA_VISIBLE_DEVICES"
_ENV_ASSIGN_RE = re.compile(
    rf"""(?<![\w$])({_ENV_NAME})=("[^"\n]{{0,1000}}"|'[^'\n]{{0,1000}}'|[^\s"';&|)]{{0,1000}})"""
)
_ENV_MAP_RE = re.compile(rf"""^[ \t]*(?:-[ \t]+)?({_ENV_NAME})[ \t]*:[ \t]*(\S.*)$""")
_ENV_PAIR_RE = re.compile(
    rf"""["']({_ENV_NAME})["'][ \t]*:[ \t]*("[^"\n]{{0,1000}}"|'[^'\n]{{0,1000}}'|[\w.+-]{{1,100}})"""
)
_ENV_K8S_NAME_RE = re.compile(
    rf"""^[ \t]*(?:-[ \t]+)?name[ \t]*:[ \t]*["']?({_ENV_NAME})["']?\s*$"""
)
_ENV_K8S_VALUE_RE = re.compile(r"^[ \t]*value[ \t]*:[ \t]*(.*)$")


def find_env(lines: Sequence[str]) -> dict[str, str]:
    """``SGLANG_*`` and ``CUDA_VISIBLE_DEVICES`` settings seen anywhere, last one wins.

    Understood: ``SGLANG_X=1 python ...``, ``export SGLANG_X=1``, ``-e SGLANG_X=1``
    (docker), ``SGLANG_X: '1'`` (compose/YAML maps, JSON objects) and Kubernetes
    ``- name: SGLANG_X`` / ``value: "1"`` pairs.
    """
    env: dict[str, str] = {}
    for i, raw in enumerate(lines):
        line = raw[:SCAN_CHARS]
        if "SGLANG_" not in line and "CUDA_VISIBLE_DEVICES" not in line:
            continue
        for m in _ENV_ASSIGN_RE.finditer(line):
            env[m[1]] = unquote(m[2])
        for m in _ENV_PAIR_RE.finditer(line):
            env[m[1]] = unquote(m[2])
        mapped = _ENV_MAP_RE.match(line)
        if mapped is not None and "=" not in mapped[2]:
            env[mapped[1]] = unquote(mapped[2])
        named = _ENV_K8S_NAME_RE.match(line)
        if named is not None:
            for nxt in lines[i + 1 : i + 3]:
                v = _ENV_K8S_VALUE_RE.match(nxt[:SCAN_CHARS])
                if v is not None:
                    env[named[1]] = unquote(v[1])
                    break
    return env


# --------------------------------------------------------------------------- ServerArgs


def _plain(value: object) -> object:
    """A JSON-ready copy of a literal (tuples become lists); TypeError for anything else."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v) for k, v in value.items()}
    raise TypeError(type(value).__name__)


def _literal(src: str) -> object:
    """``ast.literal_eval(src)`` made JSON-friendly; the source string when it is not a literal."""
    if len(src) > _LITERAL_MAX:
        return src
    try:
        return _plain(ast.literal_eval(src))
    except Exception:  # SyntaxError, ValueError, TypeError, MemoryError, RecursionError...
        return src


def parse_server_args(lines: Sequence[str]) -> tuple[dict[str, object] | None, list[str]]:
    """The fields of the last ``ServerArgs(...)`` repr in the log (SGLang logs ``server_args=``).

    Each value is read with :func:`ast.literal_eval` on its own text; values that
    are not literals (enums, paths, objects) are kept as their source string.
    """
    for raw in reversed(lines):
        k = raw.find("ServerArgs(")
        if k < 0:
            continue
        parts, closed = split_top_level(raw[k + len("ServerArgs(") :])
        notes = (
            [] if closed else ["the ServerArgs(...) line is cut; read the fields before the cut"]
        )
        args: dict[str, object] = {}
        for part in parts:
            name, eq, value = part.partition("=")
            name = name.strip()
            if eq and name.isidentifier():
                args[name] = _literal(value.strip())
        if args:
            return args, notes
    return None, []


# --------------------------------------------------------------------------- release

_V = r"\d{1,4}(?:\.\d{1,6}){1,3}(?:(?:a|b|rc|\.?post|\.?dev)\d{1,9})*(?:\+[A-Za-z0-9.]{1,64})?"
VERSION_RE = re.compile(_V)
_RELEASE_PATTERNS: list[tuple[ReleaseKind, re.Pattern[str]]] = [
    ("dist_info", re.compile(rf"\bsglang-({_V})\.dist-info", re.I)),
    (
        "pip",
        re.compile(rf"\bsglang(?:\[[\w, -]{{0,100}}\])?[ \t]{{0,5}}==[ \t]{{0,5}}({_V})", re.I),
    ),
    ("pip", re.compile(rf"\bsglang-({_V})(?=$|[\s,;)'\"]|-py|-cp|\.tar|\.zip)", re.I)),
    ("check_env", re.compile(rf"^[ \t]*(?:[-*][ \t]+)?sglang[ \t]*:[ \t]*`?v?({_V})", re.I)),
    (
        "version_string",
        re.compile(
            rf"\bsglang(?:[ \t]{{1,3}}version)?(?:[ \t]{{0,3}}[:=][ \t]{{0,3}}|[ \t]{{1,3}})[`'\"(]?v?({_V})",
            re.I,
        ),
    ),
]
_RELEASE_QUICK_RE = re.compile(r"sglang[-:= \t\[`'\"]", re.I)


def find_release_hints(lines: Sequence[str]) -> list[ReleaseHint]:
    """Version clues in log order: pins and pip output, ``check_env`` rows, dist-info paths
    and free text such as ``SGLang `0.5.19.dev410+gedff717ef``` or image tags.

    A version already found on a line by a more specific kind is not repeated.
    """
    hints: list[ReleaseHint] = []
    seen: set[tuple[str, str]] = set()
    for raw in lines:
        line = raw[:SCAN_CHARS]
        if not _RELEASE_QUICK_RE.search(line):
            continue
        found: list[tuple[ReleaseKind, str]] = []
        on_line: set[str] = set()
        for kind, pattern in _RELEASE_PATTERNS:
            for m in pattern.finditer(line):
                version = m[1].rstrip(".")
                if version not in on_line:
                    on_line.add(version)
                    found.append((kind, version))
        for kind, version in found:
            if (version, kind) not in seen:
                seen.add((version, kind))
                evidence = line.strip()[:200]
                hints.append(ReleaseHint(version=version, evidence=evidence, kind=kind))
    return hints


# --------------------------------------------------------------------------- Python

_PY_PATH_RE = re.compile(r"python(3\.\d{1,2})/")
_PY_TEXT_RE = re.compile(r"\bPython:?[ \t]{1,3}v?(3\.\d{1,2})(?:\.\d{1,3})?\b")


def find_python_version(paths: Sequence[str], lines: Sequence[str]) -> str | None:
    """``"3.12"`` from frame paths (``lib/python3.12/``) first, else from ``Python 3.12.3`` text."""
    for path in paths:
        m = _PY_PATH_RE.search(path[:SCAN_CHARS])
        if m is not None:
            return m[1]
    for raw in lines:
        if "ython" not in raw:
            continue
        m = _PY_TEXT_RE.search(raw[:SCAN_CHARS]) or _PY_PATH_RE.search(raw[:SCAN_CHARS])
        if m is not None:
            return m[1]
    return None
