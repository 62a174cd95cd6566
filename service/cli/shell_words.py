"""Shell words of a script or a systemd command line, with lines and variables kept honest.

:mod:`service.cli.commands_from` reads launch commands out of deployment files with this
lexer. It reads POSIX shell (quotes, backslashes and continuations, comments, ``; & | ( )``
and newlines between simple commands, redirections dropped with their target) or, with
``shell=False``, a systemd ``Exec*=`` value (quotes, ``$VAR``/``${VAR}``, ``%`` specifiers).

Expansion uses only the variables it is given: ``$NAME``/``${NAME}`` of a known name is its
value (field-split when unquoted), ``${NAME:-default}`` of an unknown one its default (noted in
:attr:`Word.assumed`); anything else (``$@``, ``$1``, ``$(cmd)``, backticks, ``${x#y}``, an
unknown name, ``%i``) stays as written and is listed in :attr:`Word.unresolved`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Lexer", "Word"]

_NAME_RE = re.compile(r"[A-Za-z_]\w{0,200}")
_PARAM_RE = re.compile(r"([A-Za-z_]\w{0,200})(?:(:?[-=])(.*))?", re.S)
_PLAIN_RE = re.compile(r"[^\s'\"\\$`;&|()<>#%]{1,10000}")
_DQ_PLAIN_RE = re.compile(r"[^\"\\$`\n]{1,10000}")


@dataclass
class Word:
    """A shell word after quote removal and expansion, with the line it starts on."""

    value: str
    line: int
    unresolved: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- the lexer


class _Cur:
    """The word being read: chunks ``(text, may be field-split)`` and what was left open."""

    def __init__(self, line: int) -> None:
        self.line, self.quoted = line, False
        self.chunks: list[tuple[str, bool]] = []
        self.unresolved: list[str] = []
        self.assumed: list[str] = []

    def words(self) -> list[Word]:
        """The word, or the words an unquoted expansion's spaces split it into."""
        out: list[list[str]] = [[]]
        for text, split in self.chunks:
            if not split:
                out[-1].append(text)
                continue
            parts = re.split(r"[ \t\n]{1,1000}", text)
            out[-1].append(parts[0])
            out.extend([p] for p in parts[1:])
        vals = [v for v in map("".join, out) if v] or ([""] if self.quoted else [])
        return [Word(v, self.line, tuple(self.unresolved), tuple(self.assumed)) for v in vals]


class Lexer:
    """Simple commands of ``text`` as :class:`Word` lists.

    ``shell=True`` reads POSIX shell: ``; & | ( )`` and newlines end a command, ``< >``
    redirections are dropped with their target, ``#`` starts a comment. ``shell=False`` reads
    a systemd command line: only quotes, backslashes, ``$VAR``/``${VAR}`` and ``%`` specifiers.
    ``env`` is read as the lexer goes, so the caller may add assignments between commands.
    """

    def __init__(
        self, text: str, line: int, env: dict[str, str], *, shell: bool = True, expand: bool = True
    ) -> None:
        self.t, self.i, self.line, self.env = text, 0, line, env
        self.shell, self.expand = shell, expand
        self.close = -1  # index of the next "}", for ${…}

    def commands(self) -> Iterator[list[Word]]:
        t, n = self.t, len(self.t)
        words: list[Word] = []
        cur: _Cur | None = None
        skip = False  # the next word is a redirection's target
        while self.i < n:
            c = t[self.i]
            if c == "\\" and t.startswith("\n", self.i + 1):
                self.i, self.line = self.i + 2, self.line + 1
                continue
            boundary = c in " \t\r\n" or (
                self.shell and (c in ";&|()<>" or (c == "#" and cur is None))
            )
            if not boundary:
                if cur is None:
                    cur = _Cur(self.line)
                self._piece(cur)
                continue
            if (
                c in "<>"
                and cur is not None
                and not cur.quoted
                and "".join(x for x, _ in cur.chunks).isdigit()
            ):
                cur = None  # "2>": the fd number is no word
            if cur is not None:
                if not skip:
                    words.extend(cur.words())
                cur, skip = None, False
            if c == "#":
                end = t.find("\n", self.i)
                self.i = n if end < 0 else end
            elif c in "<>" or (c == "&" and t.startswith(">", self.i + 1)):
                j = self.i + 1
                while j < n and j < self.i + 3 and t[j] in "<>&":
                    j += 1
                if t[j - 1] == "&" and c != "&":  # >&2, <&-: no target word
                    while j < n and (t[j].isdigit() or t[j] == "-"):
                        j += 1
                else:
                    skip = True
                self.i = j
            elif c in ";&|()\n":
                if words:
                    yield words
                words, skip = [], False
                if c == "\n":
                    self.line += 1
                self.i += 1
            else:
                self.i += 1
        if cur is not None and not skip:
            words.extend(cur.words())
        if words:
            yield words

    def _piece(self, cur: _Cur) -> None:
        t, i = self.t, self.i
        c = t[i]
        if c == "'":
            end = t.find("'", i + 1)
            end = len(t) if end < 0 else end
            cur.chunks.append((t[i + 1 : end], False))
            cur.quoted, self.line, self.i = True, self.line + t.count("\n", i, end), end + 1
        elif c == '"':
            cur.quoted, self.i = True, i + 1
            while self.i < len(t) and t[self.i] != '"':
                d = t[self.i]
                if d == "\\" and self.i + 1 < len(t) and t[self.i + 1] in '$`"\\\n':
                    if t[self.i + 1] == "\n":
                        self.line += 1
                    else:
                        cur.chunks.append((t[self.i + 1], False))
                    self.i += 2
                elif d in "$`" and self.expand:
                    self._dollar(cur, split=False)
                elif d == "\n":
                    cur.chunks.append((d, False))
                    self.i, self.line = self.i + 1, self.line + 1
                else:
                    m = _DQ_PLAIN_RE.match(t, self.i)
                    end = m.end() if m else self.i + 1
                    cur.chunks.append((t[self.i : end], False))
                    self.i = end
            self.i += 1
        elif c == "\\":
            cur.chunks.append((t[i + 1 : i + 2], False))
            self.i = i + 2
        elif c in "$`" and self.expand:
            self._dollar(cur, split=True)
        elif c == "%" and not self.shell:  # systemd specifiers: %% is %, %i is left as written
            spec = t[i : i + 2]
            cur.chunks.append(("%" if spec == "%%" else spec, False))
            if spec != "%%" and len(spec) == 2:
                cur.unresolved.append(spec)
            self.i = i + 2
        else:
            m = _PLAIN_RE.match(t, i)
            end = m.end() if m else i + 1
            cur.chunks.append((t[i:end], False))
            self.i = end

    def _dollar(self, cur: _Cur, *, split: bool) -> None:
        """``$…`` at ``self.i``: a known variable's value, else the text as written."""
        t, i = self.t, self.i
        nxt = t[i + 1 : i + 2]
        if t[i] == "`" or nxt == "(":
            raw = _balanced(t, i)
        elif nxt == "{":
            if self.close < i + 2:  # the next "}" (found once, reused: linear in the text)
                found = t.find("}", i + 2)
                self.close = found if found >= 0 else len(t) + 600
            end = self.close if self.close < i + 600 else -1
            if end < 0:
                cur.chunks.append(("$", False))
                self.i = i + 1
                return
            raw = t[i : end + 1]
            m = _PARAM_RE.fullmatch(raw[2:-1])
            self.i = end + 1
            if m and m[1] in self.env:
                cur.chunks.append((self.env[m[1]], split and self.shell))
            elif m and m[2]:
                default = m[3].strip("\"'")
                cur.chunks.append((default, split and self.shell))
                cur.assumed.append(
                    f"{raw} read as {default!r} (its default; {m[1]} is not set in the file)"
                )
            else:
                cur.chunks.append((raw, False))
                cur.unresolved.append(raw)
            return
        elif m := _NAME_RE.match(t, i + 1):
            raw = m.group()
            self.i = m.end()
            if raw in self.env:
                cur.chunks.append((self.env[raw], split))
            else:
                cur.chunks.append(("$" + raw, False))
                cur.unresolved.append("$" + raw)
            return
        elif nxt and nxt in "0123456789@*#?$!-":
            raw = t[i : i + 2]
        else:
            cur.chunks.append(("$", False))
            self.i = i + 1
            return
        self.i = i + len(raw)
        self.line += raw.count("\n")
        cur.chunks.append((raw, False))
        cur.unresolved.append(raw)


_PARENS_RE = re.compile(r"[()]")


def _balanced(t: str, i: int) -> str:
    """``$( … )``, ``$(( … ))`` or a backtick substitution starting at ``i``, as written.

    One that does not close within 4000 characters runs to the end of its line (the shell
    would refuse it anyway), so a file of unclosed ``$(`` is still read in linear time.
    """
    if t[i] == "`":
        end = t.find("`", i + 1, i + 4000)
        return t[i : (end + 1) if end > 0 else i + 1]
    depth = 0
    for m in _PARENS_RE.finditer(t, i + 1, min(len(t), i + 4000)):
        depth += 1 if m.group() == "(" else -1
        if depth == 0:
            return t[i : m.end()]
    eol = t.find("\n", i)
    return t[i : eol if eol > 0 else len(t)]
