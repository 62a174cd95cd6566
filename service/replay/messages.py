"""Which exception text from a replay child may enter an answer (issue 26).

A child's exception message is arbitrary text: code that ran in the sandbox could raise
the content of a file it read. :func:`vet` lets a message through only when it is
SGLang's own message for the check that raised it:

* ``argparse_error``: argparse's own error line (it names the user's tokens, nothing else);
* a message raised by replay's own stubs or harness, or by Python's import system;
* otherwise the innermost frame of the traceback must be in the release's ``sglang/``
  code, and the message must contain a literal piece of that ``raise`` statement
  (its string constants and f-string literal parts, read from the release tree with
  :mod:`ast`); a ``raise`` with no literal at all (``raise ValueError(msg)``) is accepted
  as SGLang's own formatting.

Anything else is replaced by the exception type and a fixed note, and a
``harness_reason`` that quoted it keeps only its first clause. Frames outside the
release lose their source line (``code``).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

__all__ = ["WITHHELD", "raise_literals", "vet"]

WITHHELD = "its message was withheld: not raised by the release's own code"
_MIN_LITERAL = 6


@functools.lru_cache(maxsize=512)
def _parsed(path: str, mtime_ns: int) -> ast.Module | None:
    try:
        return ast.parse(Path(path).read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None


def raise_literals(tree: Path, rel_path: str, line: int) -> list[str] | None:
    """The literal text pieces of the statement at ``rel_path:line`` of the release (None
    when the file or statement cannot be read)."""
    path = (tree / rel_path).resolve()
    if not path.is_relative_to(tree.resolve()) or not path.is_file():
        return None
    module = _parsed(str(path), path.stat().st_mtime_ns)
    if module is None:
        return None
    best: ast.stmt | None = None
    for node in ast.walk(module):
        if (
            isinstance(node, ast.stmt)
            and not isinstance(
                node,
                (
                    ast.FunctionDef,
                    ast.AsyncFunctionDef,
                    ast.ClassDef,
                    ast.If,
                    ast.For,
                    ast.While,
                    ast.With,
                    ast.Try,
                    ast.Module,
                ),
            )
            and node.lineno <= line <= (node.end_lineno or node.lineno)
            and (best is None or node.lineno >= best.lineno)
        ):
            best = node
    if best is None:
        return None
    pieces = [
        n.value for n in ast.walk(best) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]
    return [p for p in pieces if len(p.strip()) >= _MIN_LITERAL]


def _sglang_message(raw: dict[str, Any], tree: Path) -> bool:
    frames = raw.get("all_frames") or []
    last = frames[-1] if frames else None
    if not isinstance(last, dict):
        return False
    if last.get("kind") in ("stub", "harness"):  # replay's own code raised it
        return True
    if (
        last.get("kind") == "internal"
        and str(last.get("path", "")).startswith("<frozen importlib")
        and str(raw.get("exception_type", "")).endswith("Error")
    ):
        return True  # Python's import system ("No module named ...")
    if last.get("kind") != "sglang":
        return False
    literals = raise_literals(tree, str(last.get("path") or ""), int(last.get("line") or 0))
    if literals is None:
        return False
    message = str(raw.get("message") or "")
    return not literals or any(piece.strip() in message for piece in literals)


def vet(raw: dict[str, Any], tree: Path) -> dict[str, Any]:
    """``raw`` (a child's answer) with its exception text vetted (see the module docstring)."""
    out = dict(raw)
    message = out.get("message")
    if out.get("status") != "argparse_error" and message and not _sglang_message(out, tree):
        kind = out.get("exception_type") or "exception"
        out["message"] = f"{kind} ({WITHHELD})"
        reason = out.get("harness_reason")
        if isinstance(reason, str) and reason:
            head = reason.split(":", 1)[0]
            out["harness_reason"] = f"{head}: {kind} ({WITHHELD})"
    frames = out.get("all_frames")
    if isinstance(frames, list):
        out["all_frames"] = [
            {**f, "code": ""}
            if isinstance(f, dict) and f.get("kind") not in ("sglang", "harness")
            else f
            for f in frames
        ]
    return out
