"""Per-layer attention backends: a layer refuses the backend it was given and lists (or
registers) the ones it takes. Incidents are generated from each release's own raises
under ``sglang/srt/layers/attention/``: the message rendered with a supported set the
release's source defines (a literal set assigned in the raising function, a registry the
message reads, the names the check's condition compares with, or the registry of the
raising file) and a refused name from the release's flag choices outside it.

The engine must locate the raise exactly, message alone or with frames and a command,
and recommend a fix whose effective backend for every refused position (``prefill_be``
is ``--prefill-attention-backend`` else ``--attention-backend``, as SGLang reads them) is
in that set and among the deciding flag's choices in that release."""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass

import pytest

from kb.catalogs import load_catalog
from service.engine.triage import Engine

#: releases incidents are generated from (two keep the test short; every kind occurs)
RELEASES = ("0.5.11", "0.5.23")
ROOT = "sglang/srt/layers/attention/"
_SET_LITERAL = r"^\s*{name}\s*=\s*([\[{{(].*[\]}})])\s*$"


@dataclass(frozen=True)
class Incident:
    release: str
    check: dict
    exc: str
    message: str
    supported: frozenset[str]
    #: the refused name per position word ("prefill", "decode", "mm", "mamba", "")
    refused: tuple[tuple[str, str], ...]
    kind: str


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


def _names(src: str) -> list[str]:
    try:
        tree = ast.parse("(" + src + ")", mode="eval")
    except SyntaxError:
        return []
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                   and not hasattr(builtins, n.id)})


def _literal_sets(store, release: str, check: dict, name: str) -> list[frozenset[str]]:
    """Literal collections of names assigned to ``name`` in the raising function."""
    fn = store.functions_at(release, check["path"], check["start_line"])
    start = fn[0]["start_line"] if fn else check["start_line"] - 50
    out = []
    pat = re.compile(_SET_LITERAL.format(name=re.escape(name)))
    for text in store.file_lines(release, check["path"], start, check["start_line"]):
        m = pat.match(text)
        if m:
            try:
                value = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                continue
            if value and all(isinstance(v, str) for v in value):
                out.append(frozenset(value))
    return out


def _text(src: str) -> str | None:
    """A literal message's text (None for a formatted one)."""
    try:
        value = ast.literal_eval("(" + src + ")")
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _outside(supported: frozenset[str], flags, text: str) -> str | None:
    """A name outside ``supported`` that the flag deciding it accepts: the flag the message
    spells if it covers ``supported``, else the covering flag with the fewest choices."""
    covering = [s for s in flags if s.choices and supported <= set(s.choices)]
    covering.sort(key=lambda s: (not any(f in text for f in s.flags), len(s.choices)))
    for s in covering:
        rest = sorted(set(s.choices) - supported)
        if rest:
            return rest[0]
    return None


def _position(expr: str) -> str:
    for word in ("prefill", "decode"):
        if word in expr:
            return word
    return ""


def _incidents(store) -> list[Incident]:
    out: list[Incident] = []
    have = {r["version"] for r in store.releases()}
    for release in RELEASES:
        if release not in have:
            continue
        catalog = load_catalog(store, release)
        for c in store.checks(release):
            src = c["message"] or ""
            if not c["path"].startswith(ROOT) or "backend" not in src.lower():
                continue
            names = _names(src)
            if _text(src) is None:  # a formatted message: a set it prints, names it refuses
                for name in names:
                    regs = store.registrations(release, registry=name)
                    sets = [frozenset(r["keys"][0] for r in regs)] if regs else \
                        _literal_sets(store, release, c, name)
                    for supported in sets[:2]:
                        refused = _outside(supported, catalog.flags, src) \
                            if not regs else "no_such_backend"
                        others = [n for n in names if n != name]
                        if refused is None or not others:
                            continue
                        env = {n: refused for n in others}
                        env[name] = dict.fromkeys(supported) if regs else set(supported)
                        try:
                            message = eval("(" + src + ")", {}, env)  # noqa: S307 - SGLang's own
                        except Exception:  # noqa: BLE001 - reads more than names: not generated
                            continue
                        out.append(Incident(release, c, c["exc_type"], message, supported,
                                            tuple((_position(n), refused) for n in others),
                                            "registry" if regs else "printed"))
            elif "only supported" in src and _text(src):  # names listed in the text, compared in the condition
                cond = ast.parse(c["condition"] or "0", mode="eval")
                supported = frozenset(n.value for n in ast.walk(cond)
                                      if isinstance(n, ast.Constant) and isinstance(n.value, str))
                refused = _outside(supported, catalog.flags, src)
                if supported and refused and "not (" not in (c["condition"] or ""):
                    out.append(Incident(release, c, c["exc_type"], _text(src),
                                        supported, (("", refused),), "condition"))
            else:  # a quoted name the raising file's registry holds
                text = _text(src) or ""
                for q in re.findall(r"'([a-z0-9_]{1,30})'", text):
                    regs = [r for r in store.registrations(release, key=q) if r["path"] == c["path"]]
                    if regs:
                        reg = regs[0]["registry"]
                        keys = {r["keys"][0] for r in store.registrations(release, registry=reg)
                                if r["path"] == c["path"]}
                        out.append(Incident(release, c, c["exc_type"], text,
                                            frozenset(keys - {q}), (("mm", q),), "file registry"))
    return out


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _effective(argv: list[str], position: str, flags: list[str]) -> tuple[str, str] | None:
    """(flag, backend) SGLang reads for ``position``: the position's own flag, else another
    backend flag the fix sets."""
    own = [f for f in flags if position and f"-{position}-" in f"-{f[2:]}-"]
    for f in own + [f for f in flags if f not in own]:
        v = _value(argv, f)
        if v is not None:
            return f, v
    return None


def _framed(store, inc: Incident) -> str:
    """The incident as a traceback: the raising frame with its source line, then the
    exception line."""
    c = inc.check
    line = store.file_lines(inc.release, c["path"], c["start_line"], c["start_line"])[0].strip()
    return ("Traceback (most recent call last):\n"
            f'  File "/usr/local/lib/python3.12/dist-packages/{c["path"]}", line {c["start_line"]}, '
            f'in {c["function"].rsplit(".", 1)[-1]}\n    {line}\n{inc.exc}: {inc.message}\n')


def _same_message(store, inc: Incident) -> int:
    """How many checks of the release carry this literal message (a message alone cannot
    tell them apart)."""
    return sum(1 for c in store.checks(inc.release) if c["message"] == inc.check["message"])


def test_incidents_cover_the_releases_and_kinds(store) -> None:
    incidents = _incidents(store)
    assert {i.release for i in incidents} == set(RELEASES), [(i.release, i.kind) for i in incidents]
    assert {"printed", "registry", "condition", "file registry"} <= {i.kind for i in incidents}


@pytest.mark.parametrize("with_frames", [False, True])
def test_a_refused_backend_is_replaced_by_a_listed_one(engine, kb, with_frames) -> None:
    store = kb.store
    incidents = _incidents(store)
    located = valid = 0
    failures = []
    for inc in incidents:
        command = "$ python -m sglang.launch_server --model-path org/model --tp 2\n"
        log = command + _framed(store, inc) if with_frames else f"{inc.exc}: {inc.message}\n"
        result = engine.triage(log, release=inc.release)
        where = (result.location.path, result.location.start_line) if result.location else None
        cite = f"{inc.release}:{inc.check['path']}:{inc.check['start_line']}"
        if where != (inc.check["path"], inc.check["start_line"]) and not (
                not with_frames and _same_message(store, inc) > 1 and result.location
                and cite in result.location.alternatives):
            failures.append((inc.release, inc.kind, inc.message[:80], where))
            continue
        located += 1
        best = next((f for f in result.fixes if f.recommended), None)
        if best is None:
            failures.append((inc.release, inc.kind, inc.message[:80], "no fix"))
            continue
        catalog = load_catalog(store, inc.release)
        edited = [a for a in best.argv if a.startswith("--") and a[2:].replace("-", "_") in
                  {s.attr for s in catalog.flags if s.choices}]
        ok = True
        by_flag = catalog.by_flag()
        for position, _ in inc.refused:
            got = _effective(best.argv, position, edited)
            ok = ok and got is not None and got[1] in inc.supported \
                and got[1] in by_flag[got[0]].choices
        # the fix cites where the supported names are defined, in this release
        ok = ok and f"{inc.release}:" in best.origin
        if ok:
            valid += 1
        else:
            failures.append((inc.release, inc.kind, inc.message[:80], best.command))
    print(f"attention family (frames={with_frames}): n={len(incidents)} located={located} "
          f"fix valid={valid}")
    assert not failures, failures
