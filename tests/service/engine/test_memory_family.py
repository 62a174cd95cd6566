"""Memory sizing: SGLang sized a pool (KV cache, request slots, mamba state) from the free
GPU memory, the pool came out too small, and the message says which flag to move
("Not enough memory. Please try to increase --mem-fraction-static", "set a smaller
number for `--max-running-requests`", "try to increase --mamba-full-memory-ratio").

Incidents are generated from each release's own raises in its pool-sizing code
(``sglang/srt/mem_cache/``, ``sglang/srt/model_executor/``) whose
message names a launch flag of that release after a direction word, rendered with the
values of a failing launch. The engine must locate the raise exactly and recommend
moving a flag the message names in the direction it says, from the value the launch ran
with: a fraction of memory stays <= 0.95 and passes a bound the message printed ("above
0.873"); a count stays positive. A step with no printed bound is said to be rough, and
the free GPU memory is reported unknown with the log lines that would settle it."""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass

import pytest

from kb.catalogs import load_catalog
from service.engine.triage import Engine

RELEASES = ("0.5.11", "0.5.23")
#: where SGLang sizes its pools
POOL_CODE = ("sglang/srt/mem_cache/", "sglang/srt/model_executor/")
#: incidents per release (the first of each recipe, by path and line)
PER_RELEASE = 4
UP = ("increase", "raise", "larger", "higher")
DOWN = ("reduce", "lower", "smaller", "decrease")
#: the failing launch: each flag is sent when the release declares it
LAUNCH = {"--mem-fraction-static": 0.8, "--max-running-requests": 64,
          "--mamba-full-memory-ratio": 0.5, "--max-mamba-cache-size": 100,
          "--chunked-prefill-size": 4096}


class _Num:
    """A printed quantity: any attribute, call or item of it is a number too
    (``self.mamba_pool.available_size()``); ``mem_fraction_static`` is the launch's."""

    def __init__(self, v: float) -> None:
        self.v = v

    def __getattr__(self, name: str) -> _Num:
        return _Num(LAUNCH["--mem-fraction-static"] if name == "mem_fraction_static" else self.v)

    def __call__(self, *a: object, **k: object) -> _Num:
        return self

    def __getitem__(self, k: object) -> _Num:
        return self

    def __iter__(self):  # noqa: ANN204 - joined or unpacked: nothing to print
        return iter(())

    def __format__(self, spec: str) -> str:
        return format(self.v, spec)

    def __repr__(self) -> str:
        return repr(self.v)

    __str__ = __repr__

    def _op(self, other: object) -> _Num:
        return _Num(self.v)

    __truediv__ = __rtruediv__ = __mul__ = __rmul__ = __add__ = __radd__ = _op
    __sub__ = __rsub__ = __rshift__ = __floordiv__ = _op


@dataclass(frozen=True)
class Incident:
    release: str
    check: dict
    message: str
    #: (flag, "up"/"down", bound printed after it or None), as the message words them
    steps: tuple[tuple[str, str, float | None], ...]


@pytest.fixture(scope="module")
def engine(kb) -> Engine:
    return Engine(kb)


def _render(src: str) -> str | None:
    try:
        tree = ast.parse("(" + src + ")", mode="eval")
    except SyntaxError:
        return None
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not hasattr(builtins, n.id)}
    env = {n: _Num(LAUNCH["--mem-fraction-static"] + 0.07 if "fraction" in n else 0)
           for n in names}
    try:
        value = eval("(" + src + ")", {}, env)  # noqa: S307 - SGLang's own message source
    except Exception:  # noqa: BLE001 - a message this cannot render is not generated
        return None
    return value if isinstance(value, str) else None


def _steps(text: str, flags: set[str]) -> tuple[tuple[str, str, float | None], ...]:
    out = []
    for m in re.finditer(r"--[a-z][a-z0-9-]{1,60}[a-z0-9]", text):
        flag = m.group(0)
        if flag not in flags:
            continue
        before = text[max(0, text.rfind(".", 0, m.start()) + 1):m.start()].lower()
        words = re.findall(r"[a-z]+", before)
        way = next((("up" if w in UP else "down") for w in reversed(words) if w in UP + DOWN),
                   None)
        if way is None:
            continue
        b = re.match(r"`? (?:above|at least) ([0-9.]+[0-9])", text[m.end():])
        out.append((flag, way, float(b.group(1)) if b else None))
    return tuple(out)


def _incidents(store) -> list[Incident]:
    out: list[Incident] = []
    for release in RELEASES:
        catalog = load_catalog(store, release)
        flags = {f for s in catalog.flags if s.type in ("int", "float") for f in s.flags}
        mine: list[Incident] = []
        for c in sorted(store.checks(release), key=lambda c: (c["path"], c["start_line"])):
            src = c["message"] or ""
            if not c["path"].startswith(POOL_CODE) or "--" not in src:
                continue
            if not re.search(r"memory|space|pool|cache", src, re.I):
                continue
            message = _render(src)
            steps = _steps(message or "", flags)
            if message and steps and all(i.steps != steps for i in mine):  # one per recipe
                mine.append(Incident(release, c, message, steps))
        out += mine[:PER_RELEASE]
    return out


def _value(argv: list[str], flag: str) -> float | None:
    return float(argv[argv.index(flag) + 1]) if flag in argv else None


def _framed(store, inc: Incident) -> str:
    c = inc.check
    line = store.file_lines(inc.release, c["path"], c["start_line"], c["start_line"])[0].strip()
    return ("Traceback (most recent call last):\n"
            f'  File "/opt/venv/lib/python3.11/site-packages/{c["path"]}", line {c["start_line"]}, '
            f'in {c["function"].rsplit(".", 1)[-1]}\n    {line}\n{c["exc_type"]}: {inc.message}\n')


def _same_message(store, inc: Incident) -> int:
    """How many checks of the release print this message (a message alone cannot tell
    them apart)."""
    return sum(1 for c in store.checks(inc.release) if c["path"].startswith(POOL_CODE)
               and c["exc_type"] == inc.check["exc_type"] and c["message"]
               and _render(c["message"]) == inc.message)


def test_incidents_cover_both_releases_and_directions(store) -> None:
    incidents = _incidents(store)
    assert {i.release for i in incidents} == set(RELEASES)
    assert {w for i in incidents for _, w, _ in i.steps} == {"up", "down"}
    assert any(f == "--mem-fraction-static" for i in incidents for f, _, _ in i.steps)


@pytest.mark.parametrize("with_frames", [False, True])
def test_a_pool_too_small_moves_the_flag_the_message_names(engine, kb, with_frames) -> None:
    store = kb.store
    incidents = _incidents(store)
    located = valid = 0
    failures = []
    for inc in incidents:
        catalog = load_catalog(store, inc.release)
        by_flag = catalog.by_flag()
        launch = {f: v for f, v in LAUNCH.items() if f in by_flag}
        command = "$ python -m sglang.launch_server --model-path org/hybrid-model " + " ".join(
            f"{f} {v}" for f, v in launch.items()) + "\n"
        log = command + _framed(store, inc) if with_frames \
            else f"{inc.check['exc_type']}: {inc.message}\n"
        result = engine.triage(log, release=inc.release)
        where = (result.location.path, result.location.start_line) if result.location else None
        cite = f"{inc.release}:{inc.check['path']}:{inc.check['start_line']}"
        if where != (inc.check["path"], inc.check["start_line"]) and not (
                not with_frames and _same_message(store, inc) > 1 and result.location
                and cite in result.location.alternatives):
            failures.append((inc.release, inc.message[:70], "located at", where))
            continue
        located += 1
        best = next((f for f in result.fixes if f.recommended), None)
        if best is None:
            # no value is known to move from (a count SGLang derived): said, not guessed
            if not with_frames and result.no_flag_fix is not None:
                valid += 1
            else:
                failures.append((inc.release, inc.message[:70], "no fix", result.no_flag_fix))
            continue
        moved = []
        for flag, way, bound in inc.steps:
            spec = by_flag[flag]
            cur = launch.get(flag) if with_frames else None
            if cur is None and spec.default_known and spec.default is not None:
                cur = spec.default
            new = _value(best.argv, flag)
            if new is None or new == cur:
                continue  # not the step this fix takes
            ok = new > 0 and (cur is None or (new > cur if way == "up" else new < cur))
            if spec.type == "float" and ("fraction" in flag or "ratio" in flag):
                ok = ok and new <= 0.95
            if bound is not None:
                ok = ok and new > bound
            moved.append(ok)
        if moved and all(moved) and best.fixes_check == "true":
            valid += 1
            # a step past no printed bound is rough: the free memory is reported unknown
            if all(b is None for _, _, b in inc.steps):
                assert any("free GPU memory" in u.what for u in result.unknowns), inc.message
        else:
            failures.append((inc.release, inc.message[:70], best.command[-120:]))
    print(f"memory family (frames={with_frames}): n={len(incidents)} located={located} "
          f"fix valid={valid}")
    assert not failures, failures
