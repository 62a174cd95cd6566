"""Render the crash log Python would print for a check of a release.

Used by the eval generator and by tests. Frames are built from the KB: the
entry point (``launch_server.py``), SGLang's own call chain down to the
validation step (the dispatcher's call line of each step, then callers found
in the same file), and the check itself at the line the chosen Python version
reports for it:

* 3.10/3.11: the last line of a multi-line assert's test;
* 3.12: the ``assert`` line;
* 3.13: the first line of the test.

Only lines that exist in the release are used; a link of the chain that
cannot be found is left out, as in a cut log.
"""

from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass
from typing import Any

from kb.code_types import Check
from kb.store import Store
from service.engine import DISPATCHERS, call_site_guards, validation_order

SITE = "/usr/local/lib/python{py}/dist-packages"


@dataclass
class FrameSpec:
    path: str  # package-relative ("sglang/srt/server_args.py") or a literal like "<string>"
    line: int
    function: str
    source: str | None


def reported_line(check: Check, python: str) -> int:
    if check.kind != "assert" or check.test_start is None:
        return check.start_line
    if python in ("3.10", "3.11"):
        return check.test_end
    if python == "3.13":
        return check.test_start
    return check.start_line


def _line_with(
    store: Store, release: str, path: str, fn: dict[str, Any] | None, needle: str
) -> int | None:
    if fn is None:
        return None
    lines = store.file_lines(release, path, fn["start_line"], fn["end_line"])
    for i, text in enumerate(lines):
        if needle in text:
            return fn["start_line"] + i
    return None


def _frame(
    store: Store, release: str, path: str, line: int | None, function: str
) -> FrameSpec | None:
    if line is None:
        return None
    text = store.file_lines(release, path, line, line)
    return FrameSpec(path, line, function, text[0].strip() if text else None)


def _entry_frames(store: Store, release: str) -> list[FrameSpec]:
    """launch_server -> prepare_server_args -> from_cli_args -> __init__ (or resolve_once)."""
    frames: list[FrameSpec] = []
    ls = "sglang/launch_server.py"
    sa = "sglang/srt/server_args.py"
    text = store.file_text(release, ls) or ""
    for i, line in enumerate(text.split("\n"), start=1):
        if "prepare_server_args(" in line and "import" not in line:
            fns = store.functions_at(release, ls, i)
            frames.append(FrameSpec(ls, i, fns[0]["name"] if fns else "<module>", line.strip()))
            break
    resolve = store.function(release, "ServerArgs.resolve_once", sa)
    if resolve is not None:  # 0.5.19+: launcher calls resolve_once, which runs the pipeline
        for i, line in enumerate(text.split("\n"), start=1):
            if ".resolve_once()" in line:
                fns = store.functions_at(release, ls, i)
                frames = [FrameSpec(ls, i, fns[0]["name"] if fns else "<module>", line.strip())]
                break
        frames.append(
            _frame(
                store,
                release,
                sa,
                _line_with(store, release, sa, resolve, "run_resolution_pipeline(self)"),
                "resolve_once",
            )
        )
        return [f for f in frames if f is not None]
    prep = store.function(release, "prepare_server_args", sa)
    frames.append(
        _frame(
            store,
            release,
            sa,
            _line_with(store, release, sa, prep, "from_cli_args("),
            "prepare_server_args",
        )
    )
    fca = store.function(release, "ServerArgs.from_cli_args", sa)
    frames.append(
        _frame(
            store, release, sa, _line_with(store, release, sa, fca, "return cls("), "from_cli_args"
        )
    )
    frames.append(FrameSpec("<string>", 300, "__init__", None))
    return [f for f in frames if f is not None]


def _main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"``."""
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def launcher_warning(store: Store, release: str, site: str) -> list[str]:
    """What Python prints for the warning ``python -m sglang.launch_server`` raises itself
    at start-up (from 0.5.11: "... 'sglang serve' is the recommended entrypoint"), read
    from the release's ``launch_server.py``: ``<site>/sglang/launch_server.py:<line>:
    <Category>: <message>`` (the message's further lines as they are) and then the
    call's first source line indented by two. Python 3.10 to 3.13 all report a
    multi-line ``warnings.warn(`` call at its first line.

    Only a ``warnings.warn`` statement of the ``if __name__ == "__main__":`` block with
    a literal message and no ``stacklevel`` but 1 is rendered (the source is parsed
    with ``ast``, never run); otherwise, as for 0.5.9, whose launcher warns nothing,
    the answer is empty.
    """
    path = "sglang/launch_server.py"
    text = store.file_text(release, path)
    try:
        tree = ast.parse(text or "")
    except SyntaxError:
        return []
    blocks = [n.body for n in tree.body if isinstance(n, ast.If) and _main_guard(n.test)]
    for stmt in (s for body in blocks for s in body):
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (
            isinstance(call, ast.Call)
            and ast.unparse(call.func) == "warnings.warn"
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
        ):
            continue
        keywords = {k.arg: k.value for k in call.keywords}
        level = keywords.get("stacklevel")
        if level is not None and not (isinstance(level, ast.Constant) and level.value == 1):
            return []
        category = call.args[1] if len(call.args) > 1 else keywords.get("category")
        name = "UserWarning" if category is None else ast.unparse(category).rsplit(".", 1)[-1]
        head, *rest = call.args[0].value.split("\n")
        source = store.file_lines(release, path, call.lineno, call.lineno)[0].strip()
        return [f"{site}/{path}:{call.lineno}: {name}: {head}", *rest, f"  {source}"]
    return []


def call_chain(store: Store, release: str, check: Check) -> list[FrameSpec]:
    """Frames from the dispatcher down to the check's function (outermost first)."""
    frames: list[FrameSpec] = []
    qual = check.function
    path = check.path
    order = validation_order(store, release)
    for _ in range(4):
        name = qual.rsplit(".", 1)[-1]
        rank = order.get(name)
        if rank is not None and rank == int(rank):
            for dpath, dqual in DISPATCHERS:
                dfn = store.function(release, dqual, dpath)
                needle_a, needle_b = f"self.{name}(", f"run_hook({name},"
                line = _line_with(store, release, dpath, dfn, needle_a) or _line_with(
                    store, release, dpath, dfn, needle_b
                )
                if line is not None:
                    frames.insert(0, _frame(store, release, dpath, line, dqual.rsplit(".", 1)[-1]))
                    break
            break
        sites = call_site_guards(store, release, qual, path)
        if not sites:
            break
        site = sites[0]
        frames.insert(0, _frame(store, release, path, site.line, site.caller.rsplit(".", 1)[-1]))
        qual = site.caller
    return [f for f in frames if f is not None]


def render_message(check: Check, values: dict[str, Any] | None = None) -> str | None:
    """The message text a check raises, placeholders filled from ``values`` when possible."""
    if check.bare or not check.message:
        return None
    from service.engine import Env, evaluate

    try:
        res = evaluate(check.message, Env(values or {}))
    except Exception:
        return None
    return " ".join(res.value.split()) if isinstance(res.value, str) else None


def render_log(
    store: Store,
    release: str,
    check: Check,
    *,
    python: str = "3.12",
    argv: list[str] | None = None,
    entry: str = "python3 -m sglang.launch_server",
    message: str | None = None,
    line_offset: int = 0,
    site: str | None = None,
    preamble: list[str] | None = None,
) -> str:
    """A realistic crash log: command, some log lines, traceback, exception line."""
    site = site or SITE.format(py=python)
    frames = _entry_frames(store, release) + call_chain(store, release, check)
    line = reported_line(check, python)
    text = store.file_lines(release, check.path, line, line)
    frames.append(
        FrameSpec(
            check.path,
            line,
            check.function.rsplit(".", 1)[-1],
            text[0].strip() if text else None,
        )
    )
    out: list[str] = []
    if argv is not None:
        out.append("$ " + entry + " " + shlex.join(argv))
    out.extend(preamble or [])
    out.append("Traceback (most recent call last):")
    out.append('  File "<frozen runpy>", line 198, in _run_module_as_main')
    out.append('  File "<frozen runpy>", line 88, in _run_code')
    for f in frames:
        if f.path.startswith("<"):
            out.append(f'  File "{f.path}", line {f.line}, in {f.function}')
            continue
        out.append(f'  File "{site}/{f.path}", line {f.line + line_offset}, in {f.function}')
        if f.source:
            out.append(f"    {f.source}")
    exc = check.exc_type or "AssertionError"
    msg = message if message is not None else render_message(check)
    out.append(f"{exc}: {msg}" if msg else exc)
    return "\n".join(out) + "\n"


def render_replay_log(
    store: Store,
    release: str,
    result: Any,
    argv: list[str],
    *,
    entry: str = "python3 -m sglang.launch_server",
    site: str | None = None,
) -> str:
    """The crash log of a replay (:class:`~service.replay.results.ReplayResult`):
    SGLang's real frames and message, as Python 3.11 (the replay's) prints them."""
    site = site or SITE.format(py="3.11")
    launcher = [f for f in _entry_frames(store, release) if f.path == "sglang/launch_server.py"]
    frames = launcher + [
        FrameSpec(f.path, f.line or 0, f.function, f.code or None) for f in result.frames
    ]
    out = [
        "$ " + entry + " " + shlex.join(argv),
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "<frozen runpy>", line 88, in _run_code',
    ]
    for prev, f in zip([None, *frames], frames, strict=False):
        if prev is not None and prev.function == "from_cli_args" and f.function == "__post_init__":
            out.append('  File "<string>", line 300, in __init__')  # the dataclass __init__
        out.append(f'  File "{site}/{f.path}", line {f.line}, in {f.function}')
        if f.source:
            out.append(f"    {f.source}")
    message = (result.message or "").strip()
    out.append(f"{result.exception_type}: {message}" if message else str(result.exception_type))
    return "\n".join(out) + "\n"
