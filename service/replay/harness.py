"""Verify by replay: run a release's OWN argument validation on this CPU-only machine.

:func:`replay` (one command line) and :func:`replay_many` (several, sharing
one warmed-up subprocess) start ``child/runner.py`` in an isolated interpreter
(:mod:`service.replay.batches` runs it, :mod:`service.replay.child` is what runs inside):

* an OS sandbox (:mod:`service.replay.sandbox`: bubblewrap namespaces, no network, the host
  read-only, the service's cache hidden, resource limits, the whole tree killed
  on time-out); without it replay does not run at all;
* a clean environment (``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``, no
  user site, ``cwd`` and ``HOME`` in a temporary folder), ``PYTHONPATH`` = the
  force-stub folder, then the release tree (see :mod:`service.replay.trees`);
* a socket guard in the child refusing non-loopback connections;
* no path or code of the user's: the model folders are generated, and
  ``--config``, ``--trust-remote-code`` and path-valued flags are dropped
  (:func:`service.replay.plan.substitute_argv`);
* the declared hardware (:mod:`service.replay.plan`) and a generated model folder per
  architecture (:mod:`service.replay.model_configs`);
* a time limit: the whole process group is killed when it runs over.

Uncached command lines go to a *warm* worker by default (:mod:`service.replay.pool`:
the same sandbox and environment, the import paid once per release and machine,
then one fork per command line); the cold subprocess above stays for test hooks
(``stub_failure``, ``test_payload``), when the pool is off (``pool=False``, the
``replay_pool`` setting or ``TRIAGE_REPLAY_POOL=0``) and as the fallback when a
worker cannot start.

Outcomes are :class:`~service.replay.results.ReplayResult` objects, cached on disk in
``<home>/replay-cache/`` by a hash of (version, release tree, argv, hardware,
model architecture, environment, this package's code and the venv's torch and
transformers versions). Timeouts and crashes are not cached.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kb.settings import KBSettings
from service.engine import get_profile
from service.replay import batches, sandbox
from service.replay.errors import ReplayError
from service.replay.launch import HARNESS_DIR, STUB_DIRS
from service.replay.model_configs import MODEL_CONFIGS, config_with_facts
from service.replay.options import option_table
from service.replay.plan import stable_dir, substitute_argv
from service.replay.queue import ReplayQueue
from service.replay.results import ReplayResult, to_result
from service.replay.settings import ReplaySettings
from service.replay.trees import replay_tree

__all__ = [
    "HARNESS_DIR",
    "QUEUE",
    "STUB_DIRS",
    "STUB_FAILURE_ENV",
    "batch_key",
    "harness_version",
    "pool_enabled",
    "prewarm",
    "replay",
    "replay_async",
    "replay_many",
]

#: test hook: ``import:<module>`` or ``call:<fake>`` makes a stub raise inside the child
STUB_FAILURE_ENV = "TRIAGE_REPLAY_STUB_FAILURE"
_UNCACHED_PHASES = {"timeout", "crash", "harness", "busy", "deadline"}
#: ``TRIAGE_REPLAY_POOL`` read once: ``0``/``false``/``no``/``off`` turns the warm pool off for
#: callers whose settings carry no ``replay_pool`` (:class:`ReplaySettings` read the same
#: variable)
_POOL_ENV = os.environ.get("TRIAGE_REPLAY_POOL", "1").strip().lower() not in (
    "0",
    "false",
    "no",
    "off",
)


def pool_enabled(settings: KBSettings | None = None) -> bool:
    """Whether uncached command lines go to the warm pool: ``settings.replay_pool`` when the
    settings are replay's (:class:`~service.replay.settings.ReplaySettings`, the service's
    among them), else ``TRIAGE_REPLAY_POOL`` as read at import."""
    if isinstance(settings, ReplaySettings):
        return settings.replay_pool
    return _POOL_ENV


@functools.lru_cache(maxsize=1)
def harness_version() -> str:
    """A hash of every file of this package (code, stubs) and the venv's key packages."""
    h = hashlib.sha256()
    for path in sorted(HARNESS_DIR.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(HARNESS_DIR)).encode())
            h.update(path.read_bytes())
    for dist in ("torch", "transformers", "pydantic", "numpy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            h.update(f"{dist}={importlib.metadata.version(dist)}".encode())
    h.update(sys.version.encode())
    return h.hexdigest()[:16]


def _cache_key(payload: dict[str, Any]) -> str:
    blob = json.dumps({**payload, "harness": harness_version()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def batch_key(
    version: str,
    argvs: Sequence[Sequence[str]],
    *,
    hardware: str | None,
    model_arch: str | None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The cache key of a whole batch, from what the caller knows before any tree is
    unpacked: the same hash as each command line's (:func:`_cache_key`, this package's
    code and the venv's key packages included) over the version, command lines,
    declared machine, architecture and environment. Durable replay jobs are
    de-duplicated by it (:mod:`service.replay.jobs`)."""
    return _cache_key(
        {
            "batch": [[str(a) for a in argv] for argv in argvs],
            "version": version,
            "hardware": hardware,
            "arch": model_arch,
            "env": dict(sorted((env or {}).items())),
        }
    )


def _cache_path(home: Path, key: str) -> Path:
    return home / "replay-cache" / key[:2] / f"{key}.json"


def _cache_get(home: Path, key: str) -> ReplayResult | None:
    path = _cache_path(home, key)
    try:
        result = ReplayResult.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    return result.model_copy(update={"cached": True})


def _cache_put(home: Path, key: str, result: ReplayResult) -> None:
    if result.status == "harness_error" and result.phase in _UNCACHED_PHASES:
        return
    path = _cache_path(home, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(result.model_dump_json())
    os.replace(tmp, path)
    _prune_cache(home)


#: Replay verdicts kept on disk (keyed by users' command lines): beyond it the least
#: recently written are deleted, looked at every :data:`CACHE_PRUNE_EVERY` writes.
CACHE_MAX_FILES = 20_000
CACHE_PRUNE_EVERY = 200
_cache_writes = [0]


def _prune_cache(home: Path) -> int:
    """Delete the oldest cached verdicts beyond :data:`CACHE_MAX_FILES` (every
    :data:`CACHE_PRUNE_EVERY` writes of this process). Returns how many were deleted."""
    _cache_writes[0] += 1
    if _cache_writes[0] % CACHE_PRUNE_EVERY:
        return 0
    files: list[tuple[float, str]] = []
    with contextlib.suppress(OSError):
        for sub in os.scandir(home / "replay-cache"):
            if sub.is_dir():
                files += [
                    (f.stat().st_mtime, f.path)
                    for f in os.scandir(sub.path)
                    if f.name.endswith(".json")
                ]
    files.sort()
    doomed = files[: max(0, len(files) - CACHE_MAX_FILES)]
    for _, name in doomed:
        with contextlib.suppress(OSError):
            os.unlink(name)
    return len(doomed)


def replay_many(
    release_root: Path,
    version: str,
    argvs: Sequence[Sequence[str]],
    *,
    hardware: str | None,
    model_arch: str | None | Sequence[str | None],
    timeout_s: float = 60,
    job_timeout_s: float = 30,
    env: Mapping[str, str] | None = None,
    settings: KBSettings | None = None,
    use_cache: bool = True,
    stub_failure: str | None = None,
    test_payload: Path | None = None,
    deadline_s: float | None = None,
    pool: bool | None = None,
    model_facts: Mapping[str, Any] | None = None,
) -> list[ReplayResult]:
    """Replay several command lines of one release on one declared machine.

    Cached answers are returned without starting anything; the rest go to the
    warm pool's worker for this release and machine (:mod:`service.replay.pool`;
    ``pool=False``, or ``replay_pool``/``TRIAGE_REPLAY_POOL=0`` when ``pool`` is
    None, turns it off), or else share one cold subprocess that imports torch and
    SGLang once; both fork per command line (each fork limited to
    ``job_timeout_s``). Warm results carry ``timings`` ``warm`` = 1,
    ``pool_wait_s`` (waiting for the worker, its start included) and
    ``validate_s``. ``deadline_s`` (seconds from the call) bounds the whole call:
    command lines not replayed by then come back as ``harness_error`` with phase
    ``deadline`` (unverified, not cached), and a full pool answers phase ``busy``
    (unverified, not cached). ``model_arch`` is one
    architecture for all, or one per command line (the machine is shared, the
    model folder is per command line). ``timeout_s`` bounds the import
    plus the first command line; each further one adds ``job_timeout_s``.
    ``env`` adds environment variables (e.g. ``SGLANG_*`` seen in a log).
    ``stub_failure`` (or ``$TRIAGE_REPLAY_STUB_FAILURE``) is a test hook that
    makes a stub raise (``import:<module>`` or ``call:<fake probe>``);
    ``test_payload`` (tests only, never reachable from a request) is a script the
    child runs inside the sandbox before anything else. ``model_facts`` (a checkpoint's
    config fields, :func:`~service.replay.model_configs.config_with_facts`) are laid over
    the generated model folder (start-up probes, :mod:`service.replay.probes`).

    Raises :class:`~kb.errors.ConfigError` for an unknown hardware
    profile and :class:`ReplayError` when the release tree is unusable.
    """
    deadline_at = None if deadline_s is None else time.monotonic() + deadline_s
    use_pool = pool_enabled(settings) if pool is None else pool
    settings = settings or KBSettings()
    hw = get_profile(hardware) if hardware else None
    stub_failure = stub_failure or os.environ.get(STUB_FAILURE_ENV) or None
    tree, tree_note = replay_tree(
        Path(release_root), version, home=settings.home, wheel_dir=settings.wheel_dir
    )
    if model_arch is None or isinstance(model_arch, str):
        archs: list[str | None] = [model_arch] * len(argvs)
    else:
        archs = list(model_arch)
        if len(archs) != len(argvs):
            raise ReplayError("model_arch must be one architecture or one per command line")
    results: list[ReplayResult | None] = [None] * len(argvs)
    pending: list[tuple[int, str, dict[str, Any], list[str]]] = []
    # the release's own option table (a sandboxed read, once per tree); a caller with a
    # deadline waits for it until then: its command lines are answered unverified after
    reading = argvs and sandbox.status().available
    options = (
        option_table(
            tree,
            settings.home,
            lambda: batches.dump_options(tree, hw, settings.home, timeout_s),
            wait_s=None if deadline_at is None else deadline_at - time.monotonic(),
        )
        if reading
        else None
    )
    for i, argv in enumerate(argvs):
        argv = [str(a) for a in argv]
        if reading and options is None and deadline_at is not None:
            results[i] = to_result(
                batches.unreplayed("the release's option table is still being read"),
                {"version": version, "argv": argv, "hardware": hw.name if hw else None},
            )
            continue
        run_argv, arch, notes = substitute_argv(argv, archs[i], settings.home, options)
        if model_facts and run_argv is not None and arch in MODEL_CONFIGS:  # its own folder
            plain, facts_dir = (
                str(stable_dir(settings.home, label, cfg))
                for label, cfg in (
                    (arch, MODEL_CONFIGS[arch]),
                    (f"{arch}-facts", config_with_facts(arch, dict(model_facts))),
                )
            )
            run_argv = [facts_dir if token == plain else token for token in run_argv]
            notes.append(f"model facts laid over the {arch} config: {facts_dir}")
        if options is None:
            notes.append(
                "the release's own option table could not be read: options were "
                "resolved against replay's fallback table"
            )
        base = {
            "version": version,
            "argv": argv,
            "effective_argv": run_argv or [],
            "hardware": hw.name if hw else None,
            "model_arch": arch,
            "substitutions": notes,
            "notes": [f"release tree: {tree} ({tree_note})"],
        }
        key = _cache_key(
            {
                "version": version,
                "tree": str(tree),
                "argv": argv,
                "hardware": hw.model_dump() if hw else None,
                "arch": arch,
                "env": dict(sorted((env or {}).items())),
                "fail": stub_failure,
                **({"facts": dict(model_facts)} if model_facts else {}),
            }
        )
        base["cache_key"] = key
        if run_argv is None:  # refused: nothing of the user's is ever run
            results[i] = to_result({"phase": "harness", "harness_reason": notes[-1]}, base)
            continue
        uncached = stub_failure or test_payload
        cached = _cache_get(settings.home, key) if use_cache and not uncached else None
        if cached is not None:
            results[i] = cached
        else:
            pending.append((i, key, base, run_argv))
    warm = use_pool and not (stub_failure or test_payload) and sandbox.status().available
    if pending and warm:
        answers = batches.run_warm(
            tree,
            hw,
            [p[3] for p in pending],
            env,
            timeout_s,
            job_timeout_s,
            [p[2] for p in pending],
            settings.home,
            deadline_at,
        )
        for (i, key, _, _), result in zip(pending, answers, strict=True):
            if result is not None:
                results[i] = result
                if use_cache:
                    _cache_put(settings.home, key, result)
        pending = [p for p, result in zip(pending, answers, strict=True) if result is None]
    if pending and deadline_at is not None and time.monotonic() >= deadline_at:
        for i, _, base, _ in pending:
            results[i] = to_result(batches.unreplayed(), base)
        pending = []
    if pending:
        fresh = batches.run_cold(
            tree,
            hw,
            [p[3] for p in pending],
            env,
            timeout_s,
            job_timeout_s,
            stub_failure,
            [p[2] for p in pending],
            settings.home,
            test_payload,
            deadline_at,
        )
        for (i, key, _, _), result in zip(pending, fresh, strict=True):
            results[i] = result
            if use_cache and not (stub_failure or test_payload):
                _cache_put(settings.home, key, result)
    return [r for r in results if r is not None]


def prewarm(
    release_root: Path, version: str, hardware: str | None, settings: KBSettings | None = None
) -> bool:
    """Start the warm worker that will replay ``version`` on ``hardware`` in the background
    (:meth:`service.replay.pool.WarmPool.prestart`) and return at once. False when the pool
    is off, the sandbox is missing or the worker cannot be started now; raises nothing."""
    settings = settings or KBSettings()
    if not pool_enabled(settings) or not sandbox.status().available:
        return False
    from service.replay.pool import default_pool

    try:
        hw = get_profile(hardware) if hardware else None
        tree, _ = replay_tree(
            Path(release_root), version, home=settings.home, wheel_dir=settings.wheel_dir
        )
        home = settings.home
        option_table(tree, home, lambda: batches.dump_options(tree, hw, home, 180.0), wait_s=0.0)
        return default_pool().prestart(tree, hw, settings.home)
    except Exception:
        return False


def replay(
    release_root: Path,
    version: str,
    argv: list[str],
    *,
    hardware: str | None,
    model_arch: str | None,
    timeout_s: float = 60,
    env: Mapping[str, str] | None = None,
    settings: KBSettings | None = None,
    use_cache: bool = True,
    stub_failure: str | None = None,
) -> ReplayResult:
    """Replay one command line (``argv`` without the program name) of ``version``.

    ``release_root`` is the folder holding ``sglang/`` (``ReleaseSource.root``);
    ``hardware`` a profile name (``"rtx-pro-6000-x8"``); ``model_arch`` the HF
    architecture the generated ``--model-path`` folder declares (guessed from
    the given model path when None). See :func:`replay_many` for the rest.
    """
    return replay_many(
        release_root,
        version,
        [argv],
        hardware=hardware,
        model_arch=model_arch,
        timeout_s=timeout_s,
        job_timeout_s=timeout_s,
        env=env,
        settings=settings,
        use_cache=use_cache,
        stub_failure=stub_failure,
    )[0]


def replay_async(
    release_root: Path,
    version: str,
    argvs: Sequence[Sequence[str]],
    *,
    client: str = "local",
    **kwargs: Any,
) -> concurrent.futures.Future[list[ReplayResult]]:
    """:func:`replay_many` in the background queue (bounded, fair between clients; one batch
    at a time). Raises :class:`~service.replay.queue.QueueFull` when it is full."""
    return QUEUE.submit(client, replay_many, release_root, version, argvs, **kwargs)


#: The process's replay queue (see :mod:`service.replay.queue`).
QUEUE = ReplayQueue()
