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
* :func:`find_gpus` — GPUs (:class:`GpuHint`) from ``check_env``,
  ``nvidia-smi`` and free text, with :func:`gpu_sm` for compute capabilities.

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


_WARNING_RE = re.compile(r"^[ \t]*(\S{1,500}?\.py):(\d{1,6}): ([A-Za-z_]\w{0,60}Warning): (.{0,300})")
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
        out.append(WarningLine(path=path, line=int(m.group(2)), category=m.group(3),
                               message=m.group(4).strip()))
        if len(out) >= MAX_WARNINGS:
            break
    return out


class GpuHint(BaseModel):
    """A GPU mentioned in the log, with its compute capability when the name is known."""

    name: str
    sm: int | None
    count: int | None
    memory_gb: int | None


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
        m = _ENV_MAP_RE.match(line)
        if m is not None and "=" not in m[2]:
            env[m[1]] = unquote(m[2])
        m = _ENV_K8S_NAME_RE.match(line)
        if m is not None:
            for nxt in lines[i + 1 : i + 3]:
                v = _ENV_K8S_VALUE_RE.match(nxt[:SCAN_CHARS])
                if v is not None:
                    env[m[1]] = unquote(v[1])
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


# --------------------------------------------------------------------------- GPUs

# (model names, compute capability); the first match wins, names stand between word boundaries
_GPU_MODELS: list[tuple[str, int]] = [
    (r"G?B300", 103),
    (r"G?B200|B100", 100),
    (r"GB10|DGX ?Spark", 121),
    (r"RTX ?PRO ?\d{4}|RTX ?50[5-9]0(?: Ti)?", 120),
    (r"GH200|H200|H100|H800|H20", 90),
    (r"RTX ?6000 Ada|L40S|L40|L20|L4|RTX ?40[5-9]0(?: Ti)?", 89),
    (r"A100|A800|A30", 80),
    (r"A10G|A10|A40|RTX ?A[456]000|RTX ?30[5-9]0(?: Ti)?", 86),
    (r"V100", 70),
    (r"T4", 75),
]
_SM_TABLE = [(re.compile(rf"\b(?:{p})\b", re.I), sm) for p, sm in _GPU_MODELS]
_GPU_NAME = "|".join(p for p, _ in _GPU_MODELS)
_GPU_SUFFIX = r"(?:[ -](?:Blackwell|Server|Workstation|Edition|Max-Q|SXM\d?|PCIe|NVL|HBM3e?|Ada|\d{2,3} ?GB))*"
_GPU_TEXT_RE = re.compile(
    rf"(?:\b(\d{{1,3}}) ?[x×*] ?|\b)((?:NVIDIA |Tesla |GeForce ){{0,2}}(?:{_GPU_NAME})\b{_GPU_SUFFIX})"
)
_GPU_IDS_RE = re.compile(r"^[ \t]*GPU ([\d, -]{1,200}):[ \t]*(\S.*)$")
_GPU_CC_RE = re.compile(r"^[ \t]*GPU [\d, -]{1,200} Compute Capability:[ \t]*(\d{1,2})\.(\d)")
_MEM_NAME_RE = re.compile(r"\b(\d{2,3}) ?GB\b")
_MIB_RE = re.compile(r"/[ \t]*(\d{1,7})[ \t]*MiB")
_COUNT_RE = re.compile(r"\d ?[x×]")


def gpu_sm(name: str) -> int | None:
    """Compute capability as an int (``"H100 80GB HBM3"`` -> 90) or None for unknown names."""
    norm = " ".join(name.split())
    for pattern, sm in _SM_TABLE:
        if pattern.search(norm):
            return sm
    return None


def _ids(spec: str) -> set[int]:
    ids: set[int] = set()
    for part in spec.replace(" ", "").split(","):
        lo, dash, hi = part.partition("-")
        if lo.isdecimal() and dash and hi.isdecimal() and int(hi) - int(lo) < 1024:
            ids.update(range(int(lo), int(hi) + 1))
        elif lo.isdecimal() and not dash:
            ids.add(int(lo))
    return ids


def _smi_row(line: str, nxt: str) -> tuple[str, int, int | None] | None:
    """``(name, index, memory GB)`` of an ``nvidia-smi`` table row such as
    ``|   0  NVIDIA H100 80GB HBM3   On  |  00000000:18:00.0 Off | 0 |``."""
    cells = line.split("|")
    if len(cells) < 3:
        return None
    cell = cells[1].strip()
    for tail in (" On", " Off"):
        if cell.endswith(tail):
            cell = cell[: -len(tail)].rstrip()
            break
    else:
        return None
    index, _, name = cell.partition(" ")
    name = name.strip()
    if (
        not index.isdecimal()
        or not name
        or not (gpu_sm(name) or name.startswith(("NVIDIA", "Tesla")))
    ):
        return None
    mem = _MIB_RE.search(nxt)
    return name, int(index), round(int(mem[1]) / 1024) if mem else None


def find_gpus(lines: Sequence[str]) -> list[GpuHint]:
    """GPUs from ``check_env``/``nvidia-smi -L`` rows (``GPU 0,1: NAME``), ``nvidia-smi``
    tables and free text (``8x RTX PRO 6000``, ``on 8× H100``), merged by name."""
    order: list[str] = []
    ids: dict[str, set[int]] = {}
    counts: dict[str, int] = {}
    memory: dict[str, int] = {}
    sm_seen: dict[str, int] = {}

    def note(name: str) -> str:
        name = " ".join(name.split())
        if name not in ids:
            order.append(name)
            ids[name] = set()
        return name

    for i, raw in enumerate(lines):
        line = raw[:SCAN_CHARS]
        has_gpu = "GPU" in line
        vendor = "NVIDIA" in line or "Tesla" in line or "GeForce" in line
        if not (has_gpu or vendor or "|" in line or _COUNT_RE.search(line)):
            continue
        m = _GPU_IDS_RE.match(line) if has_gpu else None
        if m is not None and "Compute Capability" not in line:
            name = note(m[2].split("(UUID", 1)[0].strip())
            ids[name] |= _ids(m[1])
            continue
        m = _GPU_CC_RE.match(line) if has_gpu else None
        if m is not None and order:
            sm_seen[order[-1]] = int(m[1]) * 10 + int(m[2])
            continue
        if line.lstrip().startswith("|"):
            row = _smi_row(line, lines[i + 1][:SCAN_CHARS] if i + 1 < len(lines) else "")
            if row is not None:
                name = note(row[0])
                ids[name].add(row[1])
                if row[2]:
                    memory[name] = row[2]
            continue
        for m in _GPU_TEXT_RE.finditer(line):
            if (
                not m[1]
                and not m[2].startswith(("NVIDIA", "Tesla", "GeForce"))
                and "GPU" not in line
            ):
                continue
            name = note(m[2])
            if m[1]:
                counts[name] = max(counts.get(name, 0), int(m[1]))
    hints = []
    for name in order:
        mem = memory.get(name)
        if mem is None:
            mm = _MEM_NAME_RE.search(name)
            mem = int(mm[1]) if mm else None
        count = len(ids[name]) or counts.get(name) or None
        hints.append(
            GpuHint(name=name, sm=sm_seen.get(name, gpu_sm(name)), count=count, memory_gb=mem)
        )
    return hints
