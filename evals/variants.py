"""Realistic variants of the generated incidents: the same crash, posted the ways users post it.

Issue #28 asks whether the engine still answers when the log is not the clean, complete
paste the generator renders. From each generated incident (``source`` starting with
``generated``; seed, public and recorded incidents are left as they are) :func:`variants_of`
derives new incidents with id ``<id>~<variant>``, the same hardware, model and
expectations:

``frameless``     only the exception line(s) (type and message): no frames, no command,
                  no version line, and no ``command`` in the request either (none for a
                  bare ``AssertionError``: the type alone says nothing to answer)
``prefixed``      the whole log with a log system's prefix on every line, one style per
                  incident, rotating among :data:`PREFIX_STYLES` (journald, docker compose,
                  Slurm rank, Ray, Rich's log columns with the trailing ``file.py:NNN``
                  column, kubectl)
``truncated``     the log cut right before the exception line (frames kept; only for
                  logs with traceback frames: a cut frameless log says nothing)
``fragment``      the command only as a fragment in the log (``$ --flag value …``: the
                  flags without ``python -m sglang.launch_server`` / ``sglang serve``);
                  no ``command`` in the request
``noversion``     every version mention removed (``pip list | grep sglang``, ``sglang==X``,
                  version banners, dist-info paths); the incident's ``release`` is null
``older_wording`` the exception message as an *older* ingested release prints the same
                  check (same function, exception type and condition, another message
                  template), rendered with the command's values; incidents whose check has
                  no such older wording get no variant. The expectations stay the
                  incident's release: the rest of the log is that release's.

Everything is deterministic: the prefix style rotates with the incident's position and
``seed`` (:func:`build_variants`), timestamps and pids are fixed. Frameless and
no-version variants may have several right answers; :mod:`evals.scoring` accepts the
incident's ``expected.equivalents`` and an answer whose release *range* holds the
expected release with the same check (``location_ok``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher
from typing import Any

from evals.incidents import Incident
from kb.code_types import Check
from kb.store import Store
from kb.versions import version_key

__all__ = [
    "PREFIX_STYLES",
    "VARIANTS",
    "build_variants",
    "exception_start",
    "is_generated",
    "older_wording",
    "parse_variants",
    "prefix_lines",
    "same_message_check",
    "same_rule",
    "same_text",
    "variant_name",
    "variant_of",
    "variants_of",
]

VARIANTS: tuple[str, ...] = (
    "frameless",
    "prefixed",
    "truncated",
    "fragment",
    "noversion",
    "older_wording",
)
PREFIX_STYLES: tuple[str, ...] = ("journald", "compose", "slurm", "ray", "rich", "kubectl")
#: the separator of a variant's id: ``<incident id>~<variant>``
SEP = "~"

_TS = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[^\]\n]{0,80}\] ?")
_EXC = re.compile(r"[A-Za-z_][\w.]{0,200}(?:Error|Exception|Exit|Interrupt)(?::|$)")
_FRAME = re.compile(r'\s{0,8}File "')
_ENTRY = re.compile(
    r"(?:\S{0,200}python[\d.]{0,8} -m sglang\.launch_server"
    r"|\S{0,200}sglang serve|\S{0,200}launch_server\.py)\s?"
)
_VERSION_LINE = re.compile(
    r"\$ pip (?:list|show|freeze)[^\n]{0,200}sglang|sglang\s{0,4}(?:==|-|\s)\s{0,4}v?\d{1,3}\.\d"
    r"|^\s{0,8}(?:Version|sglang version|SGLang version)\s{0,4}[:=]?\s{0,4}v?\d{1,3}\.\d",
    re.IGNORECASE,
)


#: an exception line without a message: the type alone
_NO_MESSAGE = re.compile(r"\s*[A-Za-z_][\w.]*:?\s*")


def _bare(line: str) -> str:
    """``line`` without SGLang's ``[timestamp]`` prefix."""
    m = _TS.match(line)
    return line[m.end() :] if m else line


def exception_start(lines: Sequence[str]) -> int | None:
    """Index of the final exception line (``XError: msg`` after the last frame), or None."""
    last_frame = max((i for i, ln in enumerate(lines) if _FRAME.match(_bare(ln))), default=-1)
    for i in range(last_frame + 1, len(lines)):
        text = _bare(lines[i])  # the first unindented exception line: a message may go on
        if text[:1] not in (" ", "\t", "") and _EXC.match(text):
            return i
    return None


def _command_index(lines: Sequence[str]) -> int | None:
    return next(
        (
            i
            for i, ln in enumerate(lines)
            if _bare(ln).startswith("$ ") and _ENTRY.search(_bare(ln))
        ),
        None,
    )


def _derive(incident: Incident, name: str, log: str, **changes: Any) -> Incident:
    data = incident.model_dump(mode="json")
    data.update(
        id=f"{incident.id}{SEP}{name}",
        crash_log=log,
        notes=(f"variant {name} of {incident.id}. " + incident.notes).strip(),
        **changes,
    )
    return Incident.model_validate(data)


# ------------------------------------------------------------------------- variants


def frameless(incident: Incident) -> Incident | None:
    """Only the exception line(s): what a user pastes into a chat. None for a bare
    exception (``AssertionError`` and nothing else): that text holds nothing to answer."""
    lines = incident.crash_log.splitlines()
    at = exception_start(lines)
    if at is None:
        return None
    text = "\n".join(_bare(ln) for ln in lines[at:]) + "\n"
    if _NO_MESSAGE.fullmatch(text):
        return None
    return _derive(incident, "frameless", text, command=None, release=None)


def _rich(line: str, k: int) -> str:
    """One line as Rich's ``RichHandler`` logs it: time and level columns, the message
    padded to the console's width, then the emitting ``file.py:NNN`` column."""
    return f"[12/03/26 10:11:{12 + k % 40:02d}] INFO     {line:<100}  launcher.py:123"


def prefix_lines(text: str, style: str) -> str:
    """``text`` with ``style``'s prefix (one of :data:`PREFIX_STYLES`) on every line."""
    lines = text.splitlines()
    out: list[str] = []
    for k, line in enumerate(lines):
        if style == "journald":
            out.append(f"Dec 03 10:11:{12 + k % 40:02d} gpu-node-3 python3[1234]: {line}")
        elif style == "compose":
            out.append(f"sglang-1  | {line}".rstrip() if line else "sglang-1  |")
        elif style == "slurm":
            out.append(f"0: {line}")
        elif style == "ray":
            out.append(f"(pid=4242) {line}")
        elif style == "rich":
            out.append(_rich(line, k))
        elif style == "kubectl":
            out.append(f"[pod/sglang-0/server] {line}")
        else:
            raise ValueError(f"unknown prefix style {style!r}")
    return "\n".join(out) + "\n"


def prefixed(incident: Incident, style: str) -> Incident:
    """The whole log with ``style``'s prefix on every line."""
    out = _derive(incident, "prefixed", prefix_lines(incident.crash_log, style))
    out.notes = f"prefix style {style}. " + out.notes
    return out


def truncated(incident: Incident) -> Incident | None:
    """The log cut right before the exception line (an incomplete copy)."""
    lines = incident.crash_log.splitlines()
    at = exception_start(lines)
    if at is None or not any(_FRAME.match(_bare(ln)) for ln in lines[:at]):
        return None  # no frame to keep: cut, the log would say nothing of the crash
    return _derive(incident, "truncated", "\n".join(lines[:at]) + "\n")


def fragment(incident: Incident) -> Incident | None:
    """The command's flags pasted without their entry point, and no request command."""
    argv = incident.command_argv()
    lines = incident.crash_log.splitlines()
    at = _command_index(lines)
    if at is not None:
        bare = _bare(lines[at])
        m = _ENTRY.search(bare)
        assert m is not None
        lines[at] = lines[at][: len(lines[at]) - len(bare)] + "$ " + bare[m.end() :].lstrip()
    elif argv:
        lines.insert(0, "$ " + shlex.join(argv))
    else:
        return None
    return _derive(incident, "fragment", "\n".join(lines) + "\n", command=None)


def noversion(incident: Incident) -> Incident | None:
    """Every version mention removed from the log (and the incident's release)."""
    lines = [
        ln
        for ln in incident.crash_log.splitlines()
        if not _VERSION_LINE.search(_bare(ln)) and ".dist-info" not in ln
    ]
    if not lines:
        return None
    return _derive(incident, "noversion", "\n".join(lines) + "\n", release=None)


_ROOT = re.compile(r"\b(?:server_args|cfg|args|view)\.")


def _norm(text: str | None) -> str:
    return " ".join((text or "").split())


def _test(text: str | None) -> str:
    """A condition with the argument object's root spelled alike (``self.``: 0.5.19+ hooks
    read ``server_args.``) and no whitespace."""
    return "".join(_ROOT.sub("self.", text or "").split())


def _expected_check(store: Store, incident: Incident) -> Check | None:
    exp = incident.expected
    loc = exp.location
    if exp.release is None or loc is None or loc.start_line is None:
        return None
    rows = store.checks(exp.release, path=loc.path, function=loc.function)
    return next((c for c in rows if c.start_line == loc.start_line), None)


#: how alike two wordings of one check's message are at least (difflib ratio): below it,
#: the "same" condition is a different check of the function (two raises under one guard)
_REWORDED = 0.5
_PROBERS: dict[tuple[int, str], Any] = {}


def _prober(store: Store, release: str) -> Any:
    from evals.groundtruth import Prober

    key = (id(store), release)
    if key not in _PROBERS:
        _PROBERS[key] = Prober(store, release)
    return _PROBERS[key]


#: literal characters a message template needs to identify a check by itself
MIN_LITERAL = 12


def _template(text: str | None) -> str:
    """A message template's source without whitespace, wrapping parentheses, the seams of
    implicit string concatenation and the argument object's root."""
    t = _test(text)
    while t.startswith("(") and t.endswith(")"):
        t = t[1:-1]
    return t.replace('""', "").replace("''", "")


def same_text(a: str | None, b: str | None) -> bool:
    """The same message template, whitespace, wrapping and argument roots aside."""
    return _template(a) == _template(b)


def same_message_check(a: Check, b: Check) -> bool:
    """Two checks (KB rows, maybe of two releases) that raise the same exception with the
    same message template, at least :data:`MIN_LITERAL` characters long: the user sees the
    same crash whatever else changed around it (guards added, a helper split out). A bare
    check or a short message needs the same function name and condition too."""
    if a.exc_type != b.exc_type:
        return False
    if a.message and b.message and len(_template(a.message)) >= MIN_LITERAL:
        return same_text(a.message, b.message)
    names = [c.function.rsplit(".", 1)[-1].lstrip("_") for c in (a, b)]
    return (
        names[0] == names[1]
        and _template(a.condition) == _template(b.condition)
        and same_text(a.message, b.message)
    )


def same_rule(a: Check, b: Check) -> bool:
    """Same exception type, condition and guards (conditions and polarity) — the same check."""

    def guards(c: Check) -> list[tuple[str, bool]]:
        return [(_test(g.get("condition")), bool(g.get("polarity"))) for g in c.guards or []]

    return (
        a.exc_type == b.exc_type
        and a.bare == b.bare
        and _test(a.condition) == _test(b.condition)
        and guards(a) == guards(b)
    )


def older_wording(store: Store, incident: Incident) -> tuple[str, str] | None:
    """``(release, message)``: the incident's check as the newest older ingested release
    words it (same function name, exception type and condition, another message template),
    rendered with the command's values; None when there is none or it cannot be rendered."""
    from evals.render import render_message

    check = _expected_check(store, incident)
    release = incident.expected.release
    if check is None or release is None or check.bare or not check.message:
        return None
    older = sorted(
        (
            r["version"]
            for r in store.releases()
            if version_key(r["version"]) < version_key(release)
        ),
        key=version_key,
        reverse=True,
    )
    short = check.function.rsplit(".", 1)[-1].lstrip("_")  # _handle_x: handle_x in 0.5.19+
    for rel in older:
        rows = [
            c
            for c in store.checks(rel, where="function LIKE ?", params=(f"%{short}",))
            if c.function.rsplit(".", 1)[-1].lstrip("_") == short
            and same_rule(c, check)
            and _norm(c.message) != _norm(check.message)
        ]
        if not rows:
            continue
        try:
            attrs = dict(_prober(store, rel).attrs_for(incident.command_argv()))
        except Exception:
            attrs = {}
        for cand in rows:
            message = render_message(cand, attrs)
            now = render_message(check, attrs)
            if (
                message
                and now
                and _norm(message) != _norm(now)
                and SequenceMatcher(None, _norm(message), _norm(now)).ratio() >= _REWORDED
            ):
                return rel, message
    return None


def older(store: Store, incident: Incident) -> Incident | None:
    """The incident with its exception message worded as an older release words it."""
    found = older_wording(store, incident)
    lines = incident.crash_log.splitlines()
    at = exception_start(lines)
    if found is None or at is None:
        return None
    rel, message = found
    head = lines[at][: len(lines[at]) - len(_bare(lines[at]))]
    exc = _bare(lines[at]).split(":", 1)[0]
    log = "\n".join([*lines[:at], f"{head}{exc}: {message}"]) + "\n"
    out = _derive(incident, "older_wording", log)
    out.notes = f"message worded as in {rel}. " + out.notes
    return out


# ------------------------------------------------------------------------- building


def variant_of(
    incident: Incident, name: str, *, store: Store | None = None, style: str = "journald"
) -> Incident | None:
    """One variant of ``incident`` (None when it has none: e.g. no older wording)."""
    if name == "frameless":
        return frameless(incident)
    if name == "prefixed":
        return prefixed(incident, style)
    if name == "truncated":
        return truncated(incident)
    if name == "fragment":
        return fragment(incident)
    if name == "noversion":
        return noversion(incident)
    if name == "older_wording":
        return older(store, incident) if store is not None else None
    raise ValueError(f"unknown variant {name!r} (known: {', '.join(VARIANTS)})")


def variants_of(
    incident: Incident,
    names: Sequence[str] = VARIANTS,
    *,
    store: Store | None = None,
    style: str = "journald",
) -> list[Incident]:
    """The variants ``names`` of ``incident`` that exist, in the order of ``names``."""
    out = [variant_of(incident, n, store=store, style=style) for n in names]
    return [v for v in out if v is not None]


def is_generated(incident: Incident) -> bool:
    return incident.source.startswith("generated") and SEP not in incident.id


def build_variants(
    incidents: Iterable[Incident],
    names: Sequence[str] = VARIANTS,
    *,
    store: Store | None = None,
    seed: int = 0,
) -> list[Incident]:
    """Variants of every generated incident of ``incidents``; the prefix style rotates with
    the incident's position among them, starting at ``seed``."""
    out: list[Incident] = []
    gen = [inc for inc in incidents if is_generated(inc)]
    for k, inc in enumerate(gen):
        style = PREFIX_STYLES[(k + seed) % len(PREFIX_STYLES)]
        out += variants_of(inc, names, store=store, style=style)
    return out


def parse_variants(spec: str | None) -> tuple[str, ...]:
    """``"all"`` or ``"frameless,prefixed"`` -> the variant names (ValueError on unknown)."""
    if spec is None or not spec.strip():
        return ()
    if spec.strip() == "all":
        return VARIANTS
    names = tuple(dict.fromkeys(s.strip() for s in spec.split(",") if s.strip()))
    bad = [n for n in names if n not in VARIANTS]
    if bad:
        raise ValueError(f"unknown variant(s) {', '.join(bad)} (known: {', '.join(VARIANTS)})")
    return names


def variant_name(incident_id: str) -> str:
    """``"frameless"`` for ``gen-…~frameless``, ``"original"`` for an incident's own id."""
    return incident_id.rsplit(SEP, 1)[1] if SEP in incident_id else "original"
