"""Find SGLang launch commands, with their file and line, in the files that hold them.

``sglang-triage lint --from FILE`` (:mod:`service.cli.lint`) reads a deployment file and lints
every launch command in it. A *launch command* is ``python[3] [opts] -m sglang.launch_server
FLAGS`` (also after ``torchrun``/``srun``/``exec``/``docker run IMAGE``/``sglang-triage run --``
or any other wrapper) or ``sglang serve FLAGS``; its flags run to the end of the simple command
(a shell operator, a redirection, the end of the list). What is read, by kind:

``shell``       backslash continuations, comments, quotes, ``NAME=value`` assignments and
                ``export`` before the command, env prefixes (``A=1 python -m …``),
                ``bash -c "…"`` bodies; ``slurm`` is the same (``#SBATCH`` lines are comments,
                ``srun …`` is a wrapper)
``systemd``     ``Exec*=`` lines of ``[Service]`` (continuations, the ``-@:+!`` prefixes,
                ``;`` between commands), ``Environment=`` for ``$VAR``/``${VAR}``
``compose``     a service's ``entrypoint`` + ``command`` (string or list), ``environment``
``kubernetes``  every document; a container's ``command`` + ``args`` (``$(VAR)`` from its
                ``env``), whatever the workload kind; ``sh -c "…"`` bodies
any other YAML a string anywhere that holds a launch command is read as a shell script

Variables are resolved only from what the file itself says (assignments, ``Environment=``,
``env``/``environment``, a ``${X:-default}`` default, noted as assumed). Anything else
(``$@``, ``$(cmd)``, ``EnvironmentFile=``, ``valueFrom``, ``%i``) stays as written and is
listed in :attr:`LaunchCommand.unresolved`; nothing is guessed.

Shell words (quotes, continuations, expansion) come from :mod:`service.cli.shell_words`.
The release the file names is read too: an SGLang image tag (``lmsysorg/sglang:v0.5.11-cu129``,
any image whose repository is ``sglang``), ``sglang==X`` (a ``pip install`` line, a comment)
or ``sglang-triage run|lint --release X``; a command's own (its wrapper's, its container's)
comes before the file's first.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from service.cli.shell_words import Lexer, Word

__all__ = ["Extraction", "LaunchCommand", "ReleaseHint", "detect_kind", "extract", "extract_text"]

MAX_BYTES = 2_000_000
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
_DECLARE = frozenset({"export", "readonly", "declare", "typeset", "local"})
_PY_RE = re.compile(r"python[\d.]{0,8}|torchrun|pypy3?")
_ASSIGN_RE = re.compile(r"([A-Za-z_]\w{0,200})=(.*)", re.S)
_PARAM_RE = re.compile(r"([A-Za-z_]\w{0,200})(?:(:?[-=])(.*))?", re.S)
_VERSION = r"v?(\d{1,3}\.\d{1,3}\.\d{1,4}(?:\.post\d{1,3})?)"
_IMAGE_RE = re.compile(r"(?:^|[\s/\"'=,])sglang:" + _VERSION + r"(?![\w.])", re.M)
_PIP_RE = re.compile(r"\bsglang(?:\[[\w,. -]{0,100}\])?[ \t]{0,3}==[ \t]{0,3}" + _VERSION)
_TRIAGE_RE = re.compile(
    r"\bsglang-triage[ \t]{1,10}(?:run|lint)\b[^\n]{0,300}?[ \t]--release[= ]" + _VERSION
)
_MARK_RE = re.compile(r"sglang\.launch_server|\bsglang[ \t]{1,50}serve\b")
_COMPOSE_VAR_RE = re.compile(r"\$\$|\$\{([^}]{1,300})\}|\$([A-Za-z_]\w{0,200})")
_K8S_VAR_RE = re.compile(r"\$\$|\$\(([A-Za-z_][\w.-]{0,200})\)")
_SECTION_RE = re.compile(r"^[ \t]{0,20}\[(?:Unit|Service|Install)\][ \t]{0,20}$", re.M)


@dataclass(frozen=True)
class ReleaseHint:
    """A release the file names: ``version``, what said it (``source``) and where."""

    version: str
    source: str
    line: int


@dataclass
class LaunchCommand:
    """One launch command: where it is, its launcher words and flags, as resolved."""

    file: str
    line: int
    kind: str  # shell | slurm | systemd | compose | kubernetes | yaml
    where: str  # "ExecStart", "services.sglang", "Deployment/sglang container server", …
    launcher: list[str]
    argv: list[str]  # the flags, variables resolved where the file says their value
    env: dict[str, str] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)  # as written: "$TP", "$(hostname)"
    assumed: list[str] = field(default_factory=list)  # "${TP:-8} read as '8' (…)"
    release_hint: ReleaseHint | None = None

    @property
    def command(self) -> str:
        """The command on one line; variables left as written stay unquoted."""
        return " ".join(
            t if re.fullmatch(r"[\w@%+=:,./${}()-]{1,10000}", t) else shlex.quote(t)
            for t in [*self.launcher, *self.argv]
        )


@dataclass
class Extraction:
    """What :func:`extract` found in one file."""

    file: str
    kind: str
    commands: list[LaunchCommand]
    hints: list[ReleaseHint]  # every release the file names, in order


# --------------------------------------------------------------------------- commands


@dataclass
class _Ctx:
    file: str
    kind: str
    where: str
    env: dict[str, str] = field(default_factory=dict)
    hint: ReleaseHint | None = None
    depth: int = 0


def _find_launch(vals: list[str]) -> tuple[int, int] | None:
    """(index of the launcher's first word, index of its first flag) in ``vals``."""
    for j, v in enumerate(vals):
        if v.rsplit("/", 1)[-1] == "sglang" and j + 1 < len(vals) and vals[j + 1] == "serve":
            return j, j + 2
        if v == "sglang.launch_server" and j > 0 and vals[j - 1] == "-m":
            start = next(
                (
                    k
                    for k in range(j - 2, max(j - 7, -1), -1)
                    if _PY_RE.fullmatch(vals[k].rsplit("/", 1)[-1])
                ),
                j - 1,
            )
            return start, j + 1
    return None


def _shell_body(vals: list[str]) -> int | None:
    """Index of the script of ``sh -c SCRIPT`` (``bash -lc``, ``/bin/sh -ec``) in ``vals``."""
    for j, v in enumerate(vals[:-1]):
        if v.rsplit("/", 1)[-1] in _SHELLS:
            for k in range(j + 1, min(j + 5, len(vals) - 1)):  # bash -o pipefail -c
                if re.fullmatch(r"-[a-z]{0,5}c[a-z]{0,5}", vals[k]):
                    return k + 1
    return None


def _token_at(text: str, start: int, end: int) -> str:
    """The whitespace- and quote-delimited token of ``text`` around ``start:end``."""
    stops = " \t\n\"'=,[]"
    a, b = start, end
    while a > 0 and a > start - 300 and text[a - 1] not in stops:
        a -= 1
    while b < len(text) and b < end + 300 and text[b] not in stops:
        b += 1
    return text[a:b].strip(stops)


def _own_hint(vals: list[str], line: int) -> ReleaseHint | None:
    """The release a wrapper names: ``docker run``/``srun --container-image`` with an SGLang
    image, or ``sglang-triage run|lint --release X``."""
    text = " ".join(vals)
    if m := _IMAGE_RE.search(text):
        return ReleaseHint(m[1], f"image tag {_token_at(text, m.start(1), m.end(1))}", line)
    if m := _TRIAGE_RE.search(text):
        return ReleaseHint(m[1], f"sglang-triage … --release {m[1]}", line)
    return None


def _from_words(words: list[Word], ctx: _Ctx) -> list[LaunchCommand]:
    """The launch command in one simple command, or those of its ``sh -c`` script."""
    vals = [w.value for w in words]
    found, body = _find_launch(vals), _shell_body(vals)
    if body is not None and ctx.depth < 3 and (found is None or body <= found[0]):
        sub = _Ctx(ctx.file, ctx.kind, ctx.where, ctx.env, ctx.hint, ctx.depth + 1)
        return _from_script(words[body].value, words[body].line, sub)
    if found is None:
        return []
    start, flags = found
    span = words[start:]
    env = dict(ctx.env)
    env.update(m.groups() for w in words[:start] if (m := _ASSIGN_RE.fullmatch(w.value)))
    hint = _own_hint(vals[:start], words[0].line) or ctx.hint
    return [
        LaunchCommand(
            file=ctx.file,
            line=words[start].line,
            kind=ctx.kind,
            where=ctx.where,
            launcher=vals[start:flags],
            argv=vals[flags:],
            env=env,
            unresolved=list(dict.fromkeys(u for w in span for u in w.unresolved)),
            assumed=list(dict.fromkeys(a for w in span for a in w.assumed)),
            release_hint=hint,
        )
    ]


def _from_script(text: str, line: int, ctx: _Ctx) -> list[LaunchCommand]:
    """Every launch command of a shell script; assignments are followed in file order."""
    shell_vars = dict(ctx.env)
    exported = dict(ctx.env)
    out: list[LaunchCommand] = []
    for words in Lexer(text, line, shell_vars).commands():
        declare = bool(words) and words[0].value in _DECLARE
        body = words[1:] if declare else words
        pairs = [(m[1], m[2], w) for w in body if (m := _ASSIGN_RE.fullmatch(w.value))]
        if body and len(pairs) == len(body):
            for name, value, w in pairs:  # a value the file does not say is no value
                for table in (shell_vars, exported) if declare else (shell_vars,):
                    table.pop(name, None)
                    if not w.unresolved:
                        table[name] = value
            continue
        sub = _Ctx(ctx.file, ctx.kind, ctx.where, exported, ctx.hint, ctx.depth)
        out += _from_words(words, sub)
    return out


# ----------------------------------------------------------------------------- systemd


def _systemd(text: str, ctx: _Ctx) -> list[LaunchCommand]:
    """``Exec*=`` lines of ``[Service]``, with ``Environment=`` (wherever it is set)."""
    lines = text.split("\n")
    entries: list[tuple[str, str, int]] = []
    env: dict[str, str] = {}
    section, i = "", 0
    while i < len(lines):
        s, at = lines[i].strip(), i + 1
        i += 1
        if not s or s[0] in "#;":
            continue
        if s.startswith("["):
            section = s
            continue
        while s.endswith("\\") and i < len(lines):  # kept for the lexer, which counts lines
            nxt = lines[i].strip()
            i += 1
            # a comment line inside a continuation is skipped (an empty continued line)
            s += "\n\\" if nxt[:1] in ("#", ";") else "\n" + nxt
        key, sep, value = s.partition("=")
        if not sep or section != "[Service]":
            continue
        key, value = key.strip(), value.strip()
        if key == "Environment":
            for cmd in Lexer(value, at, {}, shell=False, expand=False).commands():
                env.update(m.groups() for w in cmd if (m := _ASSIGN_RE.fullmatch(w.value)))
        elif key.startswith("Exec") and value:
            entries.append((key, value, at))
    out: list[LaunchCommand] = []
    for key, value, at in entries:
        prefix = re.match(r"[-@:+!|]{0,5}", value)
        assert prefix is not None
        rest = value[prefix.end() :]
        words = [w for cmd in Lexer(rest, at, env, shell=False).commands() for w in cmd]
        if "@" in prefix.group() and len(words) > 1:
            del words[1]  # "@/usr/bin/python3 python3 …": the second word is argv[0]
        group: list[Word] = []
        for w in [*words, Word(";", at)]:
            if w.value != ";":
                group.append(w)
                continue
            out += _from_words(group, _Ctx(ctx.file, "systemd", key, env, ctx.hint))
            group = []
    return out


# -------------------------------------------------------------------------------- YAML


def _mapping(node: yaml.Node, depth: int = 0) -> dict[str, yaml.Node]:
    """A mapping node's items by key; ``<<`` merges are followed (four deep: a recursive
    anchor ends there)."""
    out: dict[str, yaml.Node] = {}
    for k, v in getattr(node, "value", []):
        if isinstance(k, yaml.ScalarNode) and k.value == "<<":
            for m in v.value if isinstance(v, yaml.SequenceNode) else [v]:
                if isinstance(m, yaml.MappingNode) and depth < 4:
                    out.update(
                        (kk, vv) for kk, vv in _mapping(m, depth + 1).items() if kk not in out
                    )
        elif isinstance(k, yaml.ScalarNode):
            out[str(k.value)] = v
    return out


def _line(node: yaml.Node) -> int:
    """1-based line of a node's text (a ``|``/``>`` block starts on the next line)."""
    style = getattr(node, "style", None)
    return node.start_mark.line + 1 + (1 if style in ("|", ">") else 0)


def _expand_item(text: str, kind: str, env: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """(value, unresolved, assumed) of one exec-form item: compose interpolation
    (``${X:-d}``, ``$$``) or Kubernetes' ``$(VAR)`` from the container's ``env``."""
    unresolved: list[str] = []
    assumed: list[str] = []

    def compose(m: re.Match[str]) -> str:
        if m.group() == "$$":
            return "$"
        p = _PARAM_RE.fullmatch(m[1]) if m[1] else None
        if p and p[2]:
            assumed.append(f"{m.group()} read as {p[3]!r} (its default)")
            return p[3]
        unresolved.append(m.group())
        return m.group()

    def k8s(m: re.Match[str]) -> str:
        if m.group() == "$$":
            return "$"
        if m[1] in env:
            return env[m[1]]
        unresolved.append(m.group())
        return m.group()

    if kind == "compose":
        return _COMPOSE_VAR_RE.sub(compose, text), unresolved, assumed
    if kind == "kubernetes":
        return _K8S_VAR_RE.sub(k8s, text), unresolved, assumed
    return text, unresolved, assumed


def _yaml_words(node: yaml.Node | None, kind: str, env: dict[str, str]) -> list[Word]:
    if node is None:
        return []
    if isinstance(node, yaml.SequenceNode):
        out = []
        for item in node.value:
            if isinstance(item, yaml.ScalarNode):
                v, u, a = _expand_item(str(item.value), kind, env)
                out.append(Word(v, _line(item), tuple(u), tuple(a)))
        return out
    if isinstance(node, yaml.ScalarNode) and node.value:
        v, u, a = _expand_item(str(node.value), kind, env)
        words = [
            w for c in Lexer(v, _line(node), {}, shell=False, expand=False).commands() for w in c
        ]
        return [Word(w.value, w.line, tuple(x for x in u if x in w.value), tuple(a)) for w in words]
    return []


def _env_of(m: dict[str, yaml.Node]) -> dict[str, str]:
    """A compose service's ``environment`` (map or list) or a container's ``env`` values."""
    out: dict[str, str] = {}
    node = m.get("environment") or m.get("env")
    if isinstance(node, yaml.MappingNode):
        out.update(
            (k, str(v.value))
            for k, v in _mapping(node).items()
            if isinstance(v, yaml.ScalarNode) and v.tag != "tag:yaml.org,2002:null"
        )
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            if isinstance(item, yaml.ScalarNode) and (a := _ASSIGN_RE.fullmatch(str(item.value))):
                out[a[1]] = a[2]
            elif isinstance(item, yaml.MappingNode):
                e = _mapping(item)
                name, value = e.get("name"), e.get("value")
                if isinstance(name, yaml.ScalarNode) and isinstance(value, yaml.ScalarNode):
                    out[str(name.value)] = str(value.value)
    return out


def _yaml(text: str, ctx: _Ctx) -> list[LaunchCommand]:
    """Every document; containers/services by their command keys, other strings as scripts."""
    try:
        docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise ValueError(f"{ctx.file}: not valid YAML: {exc}") from exc
    out: list[LaunchCommand] = []
    seen: set[int] = set()  # aliases are one node: each is walked once
    used: set[int] = set()  # and read as a command once

    def walk(node: yaml.Node, path: str, kind: str, label: str) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for n, item in enumerate(node.value):
                walk(item, f"{path}[{n}]", kind, label)
        elif isinstance(node, yaml.ScalarNode):
            if isinstance(node.value, str) and _MARK_RE.search(node.value):
                out.extend(
                    _from_script(node.value, _line(node), _Ctx(ctx.file, kind, label or path))
                )
        elif isinstance(node, yaml.MappingNode):
            m = _mapping(node)
            keys = ("entrypoint", "command") if "entrypoint" in m else ("command", "args")
            if any(k in m and id(m[k]) not in used for k in keys):  # an alias: read once
                name = m.get("name")
                where = (
                    f"{label} container {name.value}"
                    if label and isinstance(name, yaml.ScalarNode)
                    else (label or path)
                )
                image = m.get("image")
                hint = (
                    _own_hint([str(image.value)], _line(image))
                    if isinstance(image, yaml.ScalarNode)
                    else None
                )
                env = _env_of(m)
                words = [w for k in keys for w in _yaml_words(m.get(k), kind, env)]
                out.extend(_from_words(words, _Ctx(ctx.file, kind, where, env, hint)))
                used.update(id(m[k]) for k in keys if k in m)
                seen.update(used)
            for k, v in m.items():
                walk(v, f"{path}.{k}" if path else k, kind, label)

    for doc in docs:
        top = _mapping(doc) if isinstance(doc, yaml.MappingNode) else {}
        kind, label = "yaml", ""
        if "services" in top:
            kind = "compose"
        elif "apiVersion" in top and "kind" in top:
            kind = "kubernetes"
            meta = _mapping(top["metadata"]) if "metadata" in top else {}
            name = meta.get("name")
            label = f"{getattr(top['kind'], 'value', '')}/{getattr(name, 'value', '?')}"
        if doc is not None:
            walk(doc, "", kind, label)
    return out


# ------------------------------------------------------------------------------ files


def detect_kind(name: str, text: str) -> str:
    """``yaml``, ``systemd``, ``slurm`` or ``shell``, by suffix and then by content."""
    suffix = Path(name).suffix.lower()
    if suffix in (".yaml", ".yml", ".json"):
        return "yaml"
    if suffix in (".service", ".socket", ".target") or _SECTION_RE.search(text):
        return "systemd"
    if suffix in (".sbatch", ".slurm") or re.search(r"^#SBATCH\b", text, re.M):
        return "slurm"
    return "shell"


def _hints(text: str) -> list[ReleaseHint]:
    """Every release the text names (image tags, ``sglang==X``), in order of position."""
    found = []
    for rx, what in (
        (_IMAGE_RE, "image tag"),
        (_PIP_RE, "pinned"),
        (_TRIAGE_RE, "sglang-triage --release"),
    ):
        for n, m in enumerate(rx.finditer(text)):
            if n >= 50:
                break
            said = (
                _token_at(text, m.start(1), m.end(1))
                if rx is _IMAGE_RE
                else m[1]
                if rx is _TRIAGE_RE
                else m.group()
            )
            found.append(
                (m.start(), ReleaseHint(m[1], f"{what} {said}", text.count("\n", 0, m.start()) + 1))
            )
    return [h for _, h in sorted(found, key=lambda x: x[0])]


def extract_text(text: str, name: str = "<text>", kind: str | None = None) -> Extraction:
    """The launch commands of ``text`` (read as ``kind``, else as :func:`detect_kind` says).

    Raises :class:`ValueError` for a YAML file that does not parse.
    """
    kind = kind or detect_kind(name, text)
    hints = _hints(text)
    ctx = _Ctx(name, kind, kind, hint=hints[0] if hints else None)
    if kind == "yaml":
        commands = _yaml(text, ctx)
        kinds = {c.kind for c in commands}
        kind = kinds.pop() if len(kinds) == 1 else kind
    elif kind == "systemd":
        commands = _systemd(text, ctx)
    else:
        commands = _from_script(text, 1, ctx)
    for c in commands:
        c.release_hint = c.release_hint or ctx.hint
    return Extraction(name, kind, commands, hints)


def extract(path: str | Path) -> Extraction:
    """:func:`extract_text` of a file; :class:`ValueError` if it is unreadable or too big."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise ValueError(f"{path}: {size} bytes, more than the {MAX_BYTES} read")
        text = p.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return extract_text(text, str(path))
