"""Evidence around a crash: launch command, argparse error, env, ServerArgs, release, GPUs.

Helpers of :mod:`sglang_triage.service.logparse`, kept in their own module so
that each stays short. Everything here is pure: functions take the cleaned log
lines (see :func:`sglang_triage.service.logparse.clean_log`) and return data;
nothing is read, written or fetched. Values from ``ServerArgs(...)`` reprs are
read with :func:`ast.literal_eval` only, one value at a time.

Every regular expression is linear: no nested quantifiers that can overlap,
bounded repetitions, and callers scan at most :data:`SCAN_CHARS` characters of
any line.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

SCAN_CHARS = 10_000
"""Characters of a line that regular expressions look at; the rest is ignored."""

_MAX_LOGICAL = 20_000  # a command joined from ``\\`` continuations is cut here
_SHLEX_BUDGET = 200_000  # characters of command-looking text tokenised at most
_LITERAL_MAX = 10_000  # longest ServerArgs value handed to ast.literal_eval


ReleaseKind = Literal["pip", "check_env", "dist_info", "version_string", "explicit"]


class ReleaseHint(BaseModel):
    """A clue to the SGLang release that produced the log."""

    version: str
    evidence: str
    kind: ReleaseKind


class GpuHint(BaseModel):
    """A GPU mentioned in the log, with its compute capability when the name is known."""

    name: str
    sm: int | None
    count: int | None
    memory_gb: int | None


@dataclass(frozen=True)
class FoundCommand:
    """A launch command found in the log: ``argv`` is what follows the entrypoint."""

    argv: list[str]
    text: str
    entrypoint: str | None
    line: int  # 1-based line of the cleaned log where the command starts


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


# --------------------------------------------------------------------------- commands

_PYTHON_RE = re.compile(r"python(?:3(?:\.\d{1,2})?)?")
_SHELL_STOP = frozenset({"|", "||", "&", "&&", ";", ";;", "|&", "2>&1", "&>", ">", ">>", "<"})
_REDIRECT_RE = re.compile(r"\d?(?:>>?|&>)\S*|<(?!\S*>$)\S*")  # not "<model>" placeholders
_NOT_A_COMMAND = frozenset({"example:", "e.g.", "e.g.:", "usage:", "eg:", "eg."})
_KEY_RE = re.compile(
    r"""^(?P<indent>[ \t{,]*)(?:-[ \t]+)?["']?(?P<key>command|args|cmd|entrypoint)["']?"""
    r"""[ \t]*:[ \t]*(?P<rest>.*)$""",
    re.IGNORECASE,
)
_ENTRY_HINT_RE = re.compile(r"sglang\.launch_server|launch_server\.py|sglang[ \t]+serve\b")
_ITEM_RE = re.compile(r"^[ \t]*-[ \t]+(.*)$")


class _Splitter:
    """Shell-style splitting with a budget: once ``budget`` characters have been
    tokenised with :mod:`shlex`, further text is split on whitespace only."""

    def __init__(self, budget: int = _SHLEX_BUDGET) -> None:
        self.budget = budget

    def __call__(self, text: str) -> list[str]:
        self.budget -= len(text)
        if self.budget < 0:
            return text.split()
        try:
            return shlex.split(text, posix=True)
        except ValueError:  # unbalanced quotes
            return text.split()

    def expand(self, tokens: Sequence[str], items: bool = False) -> list[str]:
        """Split again the shell strings among ``tokens``: those after ``-c``
        (``sh -c "python3 -m ..."``) and, for list ``items``, any mentioning sglang."""
        out: list[str] = []
        for k, tok in enumerate(tokens):
            if (k > 0 and tokens[k - 1] == "-c") or (items and " " in tok and "sglang" in tok):
                out.extend(self(tok))
            else:
                out.append(tok)
        return out


def _is_python(token: str) -> bool:
    return _PYTHON_RE.fullmatch(token.rsplit("/", 1)[-1]) is not None


def _entrypoint(tokens: Sequence[str]) -> tuple[int, int, str] | None:
    """Locate the SGLang entrypoint in ``tokens``.

    Returns ``(first token of the command, first argv token, description)``.
    Understood: ``python[3] [opts] -m sglang.launch_server`` (also under
    ``torchrun``), ``sglang serve`` and ``python .../launch_server.py``.
    """
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok == "-m" and nxt == "sglang.launch_server":
            start = i
            for j in range(i - 1, max(-1, i - 6), -1):
                if _is_python(tokens[j]) or tokens[j].rsplit("/", 1)[-1] == "torchrun":
                    start = j
                    break
            runner = tokens[start].rsplit("/", 1)[-1] if start < i else ""
            return start, i + 2, f"{runner} -m sglang.launch_server".strip()
        if tok.rsplit("/", 1)[-1] == "sglang" and nxt == "serve":
            return i, i + 2, "sglang serve"
        if tok.endswith("launch_server.py") and i > 0 and _is_python(tokens[i - 1]):
            return i - 1, i + 1, f"{tokens[i - 1].rsplit('/', 1)[-1]} {tok}"
    return None


def _cut_at_shell_operator(argv: list[str]) -> list[str]:
    """Drop everything from the first shell operator or redirection on."""
    for k, tok in enumerate(argv):
        if tok in _SHELL_STOP or _REDIRECT_RE.fullmatch(tok):
            return argv[:k]
        if tok.endswith(";") and not tok.endswith("\\;"):
            return [*argv[:k], tok[:-1]] if tok[:-1] else argv[:k]
    return argv


def _describe(tokens: Sequence[str], start: int, entry: str) -> str:
    before = [t.rsplit("/", 1)[-1] for t in tokens[:start]]
    wrappers = []
    if "docker" in before and "run" in before:
        wrappers.append("docker run …")
    for name in ("nohup", "torchrun"):
        if name in before and name not in entry:
            wrappers.append(name)
    return " ".join([*wrappers, entry])


def _command_from_tokens(tokens: list[str], text: str, line: int) -> FoundCommand | None:
    found = _entrypoint(tokens)
    if found is None:
        return None
    start, first_arg, entry = found
    if any(t.lower() in _NOT_A_COMMAND for t in tokens[:start]):
        return None  # documentation, e.g. "Example: sglang serve --model-path <model>"
    argv = _cut_at_shell_operator(tokens[first_arg:])
    if "[options]" in argv or "..." in argv:
        return None
    return FoundCommand(argv, text, _describe(tokens, start, entry), line)


def tokenize_command(text: str | Sequence[str]) -> FoundCommand:
    """Tokenise a command given by the user the way found commands are tokenised.

    Continuations are joined, the string is split shell-style, and everything up to
    and including the SGLang entrypoint (``docker run`` options, ``env``
    assignments, ``nohup``, the interpreter) is dropped. A flags-only string
    (``--tp-size 4 ...``) is kept whole with ``entrypoint=None``.
    """
    split = _Splitter()
    if isinstance(text, str):
        joined = " ".join(t for _, t in _logical_lines(text.splitlines(), wanted=""))
        tokens = split.expand(split(joined))
    else:
        tokens = split.expand([str(t) for t in text], items=True)
        joined = shlex.join(tokens)
    found = _command_from_tokens(tokens, joined, 1)
    if found is not None:
        return found
    return FoundCommand(_cut_at_shell_operator(tokens), joined, None, 1)


def _logical_lines(lines: Sequence[str], wanted: str = "sglang") -> Iterator[tuple[int, str]]:
    """``(0-based start index, text)`` of lines joined over trailing-backslash continuations
    (indentation trimmed); single lines without ``wanted`` in them are skipped."""
    buf: list[str] = []
    size = 0
    start = 0
    for i, raw in enumerate(lines):
        if not buf and not raw.endswith("\\") and wanted not in raw:
            continue
        s = raw[:SCAN_CHARS].strip()
        cont = s.endswith("\\") and size < _MAX_LOGICAL
        if not buf:
            start = i
        piece = s[:-1].rstrip() if cont else s
        buf.append(piece)
        size += len(piece) + 1
        if not cont:
            yield start, " ".join(p for p in buf if p)
            buf, size = [], 0
    if buf:
        yield start, " ".join(p for p in buf if p)


def _unquote(item: str) -> str:
    s = item.strip()
    if s.endswith(","):
        s = s[:-1].rstrip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    if " #" in s:
        s = s.split(" #", 1)[0].rstrip()
    return s


def _split_flow(text: str) -> list[str]:
    """Items of the flow list ``[a, "b", 'c']`` that ``text`` starts with (text after the
    closing bracket is ignored); read as JSON when possible, else split on commas
    outside quotes."""
    parts, _ = _split_top_level(text[1:])
    items = [_unquote(p) for p in parts]
    try:
        data = json.loads("[" + ",".join(parts) + "]")
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, list) and len(data) == len(items):
        items = [str(x) for x in data]
    return [i for i in items if i]


def _yaml_lists(lines: Sequence[str]) -> list[tuple[int, str, list[str], int]]:
    """``(index, key, items, end index)`` for every ``command:``/``args:`` list in the log."""
    found = []
    i = 0
    n = len(lines)
    while i < n:
        m = _KEY_RE.match(lines[i], 0, SCAN_CHARS) if ":" in lines[i] else None
        if m is None:
            i += 1
            continue
        key, rest = m["key"].lower(), m["rest"].strip()
        indent = len(m["indent"])
        items: list[str] = []
        j = i + 1
        if rest.startswith("["):
            parts = [rest]
            depth = rest.count("[") - rest.count("]")
            while depth > 0 and j < n and j - i < 200:
                parts.append(lines[j][:SCAN_CHARS].strip())
                depth += parts[-1].count("[") - parts[-1].count("]")
                j += 1
            items = _split_flow(" ".join(parts))
        elif rest in ("", ">", "|", ">-", "|-", ">+", "|+") or rest.startswith("#"):
            block: list[str] = []
            while j < n and j - i < 2000:
                cur = lines[j][:SCAN_CHARS]
                if not cur.strip():
                    j += 1
                    continue
                item = _ITEM_RE.match(cur)
                cur_indent = len(cur) - len(cur.lstrip())
                if rest and rest[0] in ">|" and cur_indent > indent:
                    block.append(cur.strip())
                elif item and cur_indent >= indent:
                    items.append(_unquote(item[1]))
                else:
                    break
                j += 1
            if block:
                items = [" ".join(block)]
        if items:
            found.append((i, key, items, j))
        i = max(j, i + 1)
    return found


def _yaml_commands(lines: Sequence[str], split: _Splitter) -> list[tuple[FoundCommand, int]]:
    """Commands from ``command:``/``args:`` lists, each with the index after its list."""
    out: list[tuple[FoundCommand, int]] = []
    prev: tuple[int, str, list[str], int] | None = None
    for idx, key, items, end in _yaml_lists(lines):
        seq = items
        if key == "args" and prev is not None and prev[1] != "args" and idx - prev[3] < 60:
            seq = prev[2] + items
        tokens = split.expand(seq, items=True)
        text = " ".join(seq)
        cmd = _command_from_tokens(tokens, text, idx + 1)
        if cmd is None and key == "args" and tokens and tokens[0].startswith("-"):
            cmd = FoundCommand(_cut_at_shell_operator(tokens), text, "container args list", idx + 1)
        if cmd is not None:
            out.append((cmd, end))
        prev = (idx, key, items, end)
    return out


def find_commands(lines: Sequence[str]) -> tuple[list[FoundCommand], list[str]]:
    """Every SGLang launch command in the log, in log order, and notes.

    Looks at shell command lines (joined over ``\\`` continuations; log prefixes
    are already gone), YAML/JSON ``command:``/``args:`` lists (flow or block
    style, as in Kubernetes manifests and compose files), and ``sh -c`` shell
    strings inside either. Documentation lines (``Example: sglang serve ...``) and
    argparse usage text are not commands.
    """
    split = _Splitter()
    by_line: dict[int, FoundCommand] = {}
    for start, text in _logical_lines(lines):
        if not _ENTRY_HINT_RE.search(text) or (_KEY_RE.match(text) and "[" in text):
            continue  # no entrypoint, or a flow list (read by _yaml_commands)
        cmd = _command_from_tokens(split.expand(split(text)), text, start + 1)
        if cmd is not None:
            by_line[start] = cmd
    for cmd, end in _yaml_commands(lines, split):
        for k in range(cmd.line - 1, end):
            by_line.pop(k, None)  # a shell line inside the list is part of this command
        by_line[cmd.line - 1] = cmd
    notes = []
    if split.budget < 0:
        notes.append(f"command text past {_SHLEX_BUDGET} characters was split on blanks only")
    return [by_line[k] for k in sorted(by_line)], notes


def model_from_argv(argv: Sequence[str]) -> str | None:
    """The value of the last ``--model-path``/``--model`` (also ``--flag=value``) in argv."""
    model = None
    for k, tok in enumerate(argv):
        name, eq, value = tok.partition("=")
        if name in ("--model-path", "--model", "--model_path"):
            if eq:
                model = value
            elif k + 1 < len(argv) and not argv[k + 1].startswith("--"):
                model = argv[k + 1]
    return model


# --------------------------------------------------------------------------- argparse

_ARGUMENT_RE = re.compile(r"argument ([^:]{1,300}): (.*)")
_INVALID_VALUE_RE = re.compile(r"invalid \S{1,100} value: (.*)")
_ARGERR_RE = re.compile(r"(?:([^\s:][^:\n]{0,200}): )?error: (.*)")
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
        choices = [_unquote(c) for c in listed.split(",") if c.strip()]
        return "invalid_choice", flags, [_unquote(value)], choices or None
    v = _INVALID_VALUE_RE.match(rest)
    if v is not None:
        return "invalid_value", flags, [_unquote(v[1])], None
    if rest.startswith("expected "):
        return "expected_argument", flags, [], None
    return "other", flags + [f for f in _FLAG_RE.findall(rest) if f not in flags], [], None


def find_argparse_error(lines: Sequence[str]) -> ArgparseError | None:
    """The last argparse error line, with the ``usage:`` block printed just before it.

    A ``prog: error: ...`` line of a known argparse form always counts; any other
    ``error:`` line counts only right after a usage block.
    """
    best: ArgparseError | None = None
    usage: tuple[int, str] | None = None  # (index after the block, text)
    i, n = 0, len(lines)
    while i < n:
        line = lines[i][:SCAN_CHARS]
        if line.startswith("usage: "):
            j = i + 1
            while j < n and j - i < 5000 and lines[j][:1] in (" ", "\t") and lines[j].strip():
                j += 1
            usage = (j, "\n".join(x.rstrip() for x in lines[i:j])[:65536])
            i = j
            continue
        m = _ARGERR_RE.fullmatch(line) if "error: " in line else None
        if m is not None:
            near = usage is not None and 0 <= i - usage[0] <= 2
            kind, flags, values, choices = _argparse_fields(m[2].strip())
            if kind != "other" or near:
                best = ArgparseError(
                    prog=m[1],
                    kind=kind,
                    message=m[2].strip(),
                    flags=flags,
                    values=values,
                    choices=choices,
                    usage=usage[1] if near and usage else None,
                )
        i += 1
    return best


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
            env[m[1]] = _unquote(m[2])
        for m in _ENV_PAIR_RE.finditer(line):
            env[m[1]] = _unquote(m[2])
        m = _ENV_MAP_RE.match(line)
        if m is not None and "=" not in m[2]:
            env[m[1]] = _unquote(m[2])
        m = _ENV_K8S_NAME_RE.match(line)
        if m is not None:
            for nxt in lines[i + 1 : i + 3]:
                v = _ENV_K8S_VALUE_RE.match(nxt[:SCAN_CHARS])
                if v is not None:
                    env[m[1]] = _unquote(v[1])
                    break
    return env


# --------------------------------------------------------------------------- ServerArgs


def _split_top_level(body: str) -> tuple[list[str], bool]:
    """Split ``a=1, b=[2, 3])`` at top-level commas up to the closing parenthesis."""
    parts: list[str] = []
    depth = 0
    quote = ""
    escaped = False
    start = 0
    for i, ch in enumerate(body):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                parts.append(body[start:i])
                return parts, True
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return parts, False


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
        parts, closed = _split_top_level(raw[k + len("ServerArgs(") :])
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
