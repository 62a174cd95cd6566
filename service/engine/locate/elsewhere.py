"""Not a launch-flag problem: an exception SGLang's checks do not raise.

When no check of the diagnosed release matches a crash, :func:`not_a_flag_problem`
decides whether the honest answer is "not a launch-flag problem" rather than "could not
locate". It says so only on evidence:

* **raised outside SGLang**: the innermost frame is in another package (a kernel
  package, torch, transformers, a fork's module), and no check of *any* ingested
  release raises the message. The package is named from that frame's path, and the
  last SGLang frame before it (the call into the package) is cited when its line
  exists in the KB;
* **dependency skew**: an ``ImportError``/``ModuleNotFoundError``, or an
  ``AttributeError`` about a module, raised while SGLang imports another package
  (``cannot import name 'x' from 'sgl_kernel'``): the versions of SGLang and that
  package do not match.

It stays silent when the message names a flag of the release (``trust_remote_code``,
``--mem-fraction-static``): a flag may then fix it after all. Out-of-memory errors are
left alone for the same reason. ``not_checked`` says what the verdict did not see.
"""

from __future__ import annotations

import re

from kb.catalog_types import Catalog
from kb.store import Store
from service.engine.answer import NotFlagProblem
from service.engine.locate.check_history import ingested_releases
from service.engine.logparse.frames import ExceptionInfo, Frame

__all__ = ["not_a_flag_problem"]

_SKEW_TYPES = frozenset({"ImportError", "ModuleNotFoundError"})
_FROM_MODULE = re.compile(r"""(?:from|module|named) '([A-Za-z_][\w.]{0,100})'""")
_MEMORY = re.compile(r"out of memory|OutOfMemory|not enough memory|mem[-_]fraction", re.I)
_ROOTS = ("/site-packages/", "/dist-packages/")
_WORD = re.compile(r"[A-Za-z_][\w-]{2,80}")


def _package(frame: Frame) -> str | None:
    """The top-level package of a frame outside SGLang (``flashinfer`` for
    ``.../site-packages/flashinfer/jit/core.py``); None when the path shows none."""
    p = frame.path.replace("\\", "/")
    for root in _ROOTS:
        k = p.rfind(root)
        if k >= 0:
            top = p[k + len(root) :].split("/", 1)[0]
            return top.removesuffix(".py") or None
    return None


def _names_a_flag(message: str, catalog: Catalog) -> str | None:
    """A flag (spelling or attribute) of the release that the message names."""
    words = {w.lower() for w in _WORD.findall(message)}
    for spec in catalog.flags:
        if spec.attr.lower() in words and "_" in spec.attr:
            return spec.attr
        for spelling in spec.flags:
            if spelling.startswith("--") and spelling.lower() in message.lower():
                return spelling
    return None


def _raised_elsewhere(store: Store, message: str, exc_type: str) -> list[str]:
    """Ingested releases with a check whose message matches; [] when none has one."""
    from service.engine.locate.message import MESSAGE_MIN, match_message

    out = []
    for rel in ingested_releases(store):
        hits = match_message(store, rel, message, exc_type=exc_type, limit=1)
        if hits and hits[0].score >= MESSAGE_MIN:
            out.append(rel)
    return out


def _call_site(store: Store, version: str, frames: list[Frame]) -> str | None:
    """The last SGLang frame as ``release:path:line`` when that line is in the KB."""
    for f in reversed(frames):
        if f.package_path and f.line and store.file_lines(version, f.package_path, f.line, f.line):
            return f"{version}:{f.package_path}:{f.line}"
    return None


def not_a_flag_problem(
    exc: ExceptionInfo, store: Store, version: str, catalog: Catalog
) -> NotFlagProblem | None:
    """The "not a launch-flag problem" verdict for an exception no check of ``version``
    matched, or None when the evidence does not hold (see the module docstring)."""
    message = exc.message or ""
    if _MEMORY.search(message) or _MEMORY.search(exc.type):
        return None
    flag = _names_a_flag(message, catalog)
    if flag is not None:
        return None
    frames = exc.frames
    inner = frames[-1] if frames else None
    cited = _call_site(store, version, frames)
    checked = ingested_releases(store)
    not_checked = [
        "SGLang releases the KB has not ingested",
        "the installed versions of the packages named (`pip list` shows them)",
    ]
    if exc.type.rsplit(".", 1)[-1] in _SKEW_TYPES or (
        exc.type.endswith("AttributeError") and "module '" in message
    ):
        m = _FROM_MODULE.search(message)
        module = m.group(1) if m else None
        if module is None or module.split(".")[0] == "sglang":
            return None  # SGLang's own module: a broken install, not another package
        top = module.split(".")[0]
        return NotFlagProblem(
            kind="dependency_skew",
            package=top,
            reason=(
                f"SGLang {version} could not import what it needs from `{module}`: the "
                f"installed {top} does not match this SGLang release (install the "
                f"{top} version SGLang {version} pins, or the SGLang release built "
                f"for your {top})"
            ),
            evidence=[f"{exc.type}: {message[:200]}"],
            citations=[cited] if cited else [],
            checked_releases=checked,
            not_checked=not_checked,
        )
    if inner is None or inner.package_path is not None:
        return None  # raised in SGLang (or no frames): not shown to come from elsewhere
    package = _package(inner)
    if package is None or package == "sglang":
        return None
    if _raised_elsewhere(store, message, exc.type):
        return None  # a check of another ingested release raises it: a release question
    where = f"{package}/…:{inner.line} in {inner.function}" if inner.function else package
    return NotFlagProblem(
        kind="raised_elsewhere",
        package=package,
        reason=(
            f"the {exc.type} is raised inside {package} ({where}), and no check of the "
            f"ingested SGLang releases ({', '.join(checked)}) raises this message; "
            f"no launch flag of {version} is named in it"
        ),
        evidence=[f'File "{inner.path}", line {inner.line}, in {inner.function}'],
        citations=[cited] if cited else [],
        checked_releases=checked,
        not_checked=not_checked,
    )
