"""Launch commands in a crash log: shell lines, ``\\`` continuations, YAML/JSON lists.

:func:`find_commands` finds every SGLang launch command in the cleaned log
lines (see :func:`~service.engine.logparse.text.clean_log`): shell command lines joined over
trailing-backslash continuations, YAML/JSON ``command:``/``args:`` lists (flow
or block style, as in Kubernetes manifests and compose files) and ``sh -c``
strings inside either. A command is kept from its SGLang entrypoint on
(``python -m sglang.launch_server``, ``sglang serve``, ``launch_server.py``;
``docker run`` options, ``env`` assignments and ``nohup`` are dropped) up to the
first shell operator or redirection. :func:`tokenize_command` tokenises a
command given by the user the same way, and :func:`model_from_argv` reads the
model from an argv.

Pure: nothing is read, written or fetched. Shell-style splitting uses
:mod:`shlex` within a character budget, then falls back to whitespace; every
regular expression is linear and sees at most
:data:`~service.engine.logparse.text.SCAN_CHARS` characters of a line.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from service.engine.logparse.text import SCAN_CHARS, split_top_level, unquote

__all__ = ["FRAGMENT", "FoundCommand", "find_commands", "model_from_argv", "tokenize_command"]

_MAX_LOGICAL = 20_000  # a command joined from ``\\`` continuations is cut here
_SHLEX_BUDGET = 200_000  # characters of command-looking text tokenised at most


@dataclass(frozen=True)
class FoundCommand:
    """A launch command found in the log: ``argv`` is what follows the entrypoint."""

    argv: list[str]
    text: str
    entrypoint: str | None
    line: int  # 1-based line of the cleaned log where the command starts


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


def _split_flow(text: str) -> list[str]:
    """Items of the flow list ``[a, "b", 'c']`` that ``text`` starts with (text after the
    closing bracket is ignored); read as JSON when possible, else split on commas
    outside quotes."""
    parts, _ = split_top_level(text[1:])
    items = [unquote(p) for p in parts]
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
                    items.append(unquote(item[1]))
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


_PROMPTS = ("$ ", "# ", "> ", "+ ")
FRAGMENT = "flags only"  # ``entrypoint`` of a command read from a flags-only fragment


def _fragment_tokens(text: str, split: _Splitter) -> list[str] | None:
    """Launch flags of a fragment with no entrypoint, else None.

    Understood: ``$ --flag value ...`` (a shell prompt, one flag is enough), a line of
    only flags (``--tp 8 --speculative-algorithm EAGLE3``, at least two flags) and a
    JSON list of them (``["--tp", "8", ...]``). argparse help columns (two blanks,
    ``--tp-size TP_SIZE, --tp TP_SIZE``) and usage brackets are not fragments.
    """
    s = text.strip()
    prompt = s.startswith(_PROMPTS)
    if prompt:
        s = s[2:].lstrip()
    if s.startswith(('["-', "['-", '[ "-')):
        tokens = _split_flow(s)
    elif s.startswith("--") and "  " not in s:
        tokens = split(s)
    else:
        return None
    flags = [t for t in tokens if t.startswith("--") and t[2:3].isalpha()]
    if len(flags) < (1 if prompt else 2) or any(t.endswith(",") for t in tokens):
        return None
    return _cut_at_shell_operator(tokens)


def _fragments(lines: Sequence[str], split: _Splitter) -> list[FoundCommand]:
    """Flags-only fragments (see :func:`_fragment_tokens`), for a log with no launch command."""
    out = []
    for start, text in _logical_lines(lines, wanted="--"):
        tokens = _fragment_tokens(text, split)
        if tokens:
            out.append(FoundCommand(tokens, text, FRAGMENT, start + 1))
    return out


def find_commands(lines: Sequence[str]) -> tuple[list[FoundCommand], list[str]]:
    """Every SGLang launch command in the log, in log order, and notes.

    Looks at shell command lines (joined over ``\\`` continuations; log prefixes
    are already gone), YAML/JSON ``command:``/``args:`` lists (flow or block
    style, as in Kubernetes manifests and compose files), and ``sh -c`` shell
    strings inside either. Documentation lines (``Example: sglang serve ...``) and
    argparse usage text are not commands. A log with none of these is searched for
    flags-only fragments (``$ --tp 8 ...``, ``--tp 8 --dp 2``, ``["--tp", "8"]``),
    whose ``entrypoint`` is :data:`FRAGMENT`.
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
    if not by_line:
        by_line = {cmd.line - 1: cmd for cmd in _fragments(lines, split)}
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
