"""The replay child's own guards (stdlib only; imported by ``runner.py`` inside the sandbox).

The parent already expanded, filtered and substituted the command line
(:mod:`service.replay.argv_guard`, :func:`service.replay.plan.substitute_argv`); these
checks make sure, with the release's *real* parser, that nothing of the user's is
loaded even if that filter were wrong:

* :func:`install_argv_guard` wraps ``argparse.ArgumentParser.parse_known_args``: when the
  parser is SGLang's server parser (it has a ``model_path`` destination), the parsed
  namespace is checked before ``ServerArgs`` sees it (:func:`namespace_problems`):
  ``trust_remote_code`` set, ``--config`` given, a model, tokenizer or draft path that is
  not one of the generated folders, or any other value that changed from its default
  and looks like a path. Any of these raises :class:`UnsafeArgv` (the job is answered
  ``harness_error``, phase ``unsafe``), so argparse prefix matching, ``--flag=value`` and
  repeated flags are judged exactly as the release judges them.
* :func:`install_code_guard` makes transformers' remote-code loaders
  (``get_class_from_dynamic_module`` and friends) refuse and record the attempt in
  :data:`EVENTS`. SGLang swallows some of those errors (0.5.11's DFLASH block size
  inference logs a warning and goes on); a job with an event is never ``passed``.
* :func:`dump_options` reads the option table of the parser ``prepare_server_args``
  builds, for the parent's filter.
* :func:`leftover_processes` lists what else runs in the sandbox's PID namespace.
* :func:`install_socket_guard` refuses network access but loopback and Unix sockets.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import signal
import socket
import sys
from typing import Any

#: remote-code loads refused in this process (a fork inherits the list, emptied per job)
EVENTS: list[str] = []
#: dests whose value is replaced by a generated folder (checked against the allowed set)
MODEL_DESTS = ("model_path", "tokenizer_path", "speculative_draft_model_path")
#: dests that must stay at their default: they make SGLang read a file or run code
FORBIDDEN_DESTS = ("trust_remote_code", "config")


class UnsafeArgv(Exception):
    """The parsed command line would make SGLang read a user's files or run their code."""


class RemoteCodeBlocked(Exception):
    """transformers was asked to import code from a model folder (refused in replay)."""


def looks_like_path(value: str) -> bool:
    """The parent's rule (:func:`service.replay.argv_guard.path_like`), for the real
    namespace: ``/``, ``..`` or ``~`` anywhere, or ``.``."""
    return "/" in value or ".." in value or "~" in value or value in (".",)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _strings(item)]
    return []


def namespace_problems(
    parser: argparse.ArgumentParser, ns: argparse.Namespace, allowed: set[str]
) -> list[str]:
    """What in ``ns`` (parsed by the release's ``parser``) replay must not run: names of
    destinations only, never their values."""
    problems = []
    for dest in FORBIDDEN_DESTS:
        value = getattr(ns, dest, None)
        if value not in (None, False) and value != parser.get_default(dest):
            problems.append(dest)
    model = getattr(ns, "model_path", None)
    if not isinstance(model, str) or os.path.realpath(model) not in allowed:
        problems.append("model_path (not a generated folder)")
    for dest, value in vars(ns).items():
        if dest in FORBIDDEN_DESTS or dest == "model_path":
            continue
        if value is None or value == parser.get_default(dest):
            continue
        texts = _strings(value)
        if dest in MODEL_DESTS:
            if any(os.path.realpath(t) not in allowed for t in texts):
                problems.append(f"{dest} (not a generated folder)")
        elif any(looks_like_path(t) or os.path.exists(t) for t in texts):
            problems.append(f"{dest} (a path)")
    return problems


def _is_server_parser(parser: argparse.ArgumentParser) -> bool:
    return any(a.dest == "model_path" for a in parser._actions)


def install_argv_guard(allowed: list[str]) -> None:
    """Check every namespace SGLang's server parser returns (see the module docstring)."""
    allowed_set = {os.path.realpath(p) for p in allowed}
    original = argparse.ArgumentParser.parse_known_args
    if getattr(original, "__replay_guard__", False):
        original = original.__wrapped__  # type: ignore[attr-defined]

    def parse_known_args(
        self: argparse.ArgumentParser, args: Any = None, namespace: Any = None
    ) -> Any:
        ns, extras = original(self, args, namespace)
        if _is_server_parser(self):
            problems = namespace_problems(self, ns, allowed_set)
            if problems:
                raise UnsafeArgv(
                    "replay refused to run this command line: the release's "
                    "parser gives " + ", ".join(problems)
                )
        return ns, extras

    parse_known_args.__replay_guard__ = True  # type: ignore[attr-defined]
    parse_known_args.__wrapped__ = original  # type: ignore[attr-defined]
    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]


_LOADERS = (
    "get_class_from_dynamic_module",
    "get_class_in_module",
    "get_cached_module_file",
    "custom_object_save",
)


def install_code_guard() -> list[str]:
    """Make transformers' remote-code loaders refuse (recorded in :data:`EVENTS`), in the
    defining module and wherever they were imported by name. Returns the patched names."""
    try:
        import transformers.dynamic_module_utils as dmu
    except Exception:
        return []
    originals = {name: getattr(dmu, name) for name in _LOADERS if hasattr(dmu, name)}

    def refuse(name: str) -> Any:
        def blocked(*args: Any, **kwargs: Any) -> Any:
            EVENTS.append(name)
            raise RemoteCodeBlocked(f"replay refuses to load code from a model folder ({name})")

        blocked.__replay_stub__ = "guard"  # type: ignore[attr-defined]
        return blocked

    patched = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name.startswith(("transformers", "sglang"))):
            continue
        for name, orig in originals.items():
            try:
                if vars(mod).get(name) is orig:
                    setattr(mod, name, refuse(name))
                    patched.append(f"{mod_name}.{name}")
            except Exception:
                continue
    return patched


def dump_options(sa: Any) -> dict[str, Any]:
    """The option table of the parser ``sa.prepare_server_args`` builds (never parsing a
    user's argv): option string -> (dest, nargs kind), positionals, ``allow_abbrev``,
    ``prefix_chars``; nargs kind is ``"0"``, ``"1"``, ``"?"``, ``"*"``, ``"+"`` or a count."""
    captured: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_known_args

    class _Captured(Exception):
        pass

    def capture(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        if _is_server_parser(self):
            captured.append(self)
            raise _Captured
        return original(self, args, namespace)

    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign]
    try:
        sa.prepare_server_args(["--model-path", "x"])
    except _Captured:
        pass
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    if not captured:
        raise RuntimeError("prepare_server_args built no server parser")
    parser = captured[0]

    def kind(action: argparse.Action) -> str:
        nargs = action.nargs
        if nargs is None:
            return "1"
        if nargs == argparse.REMAINDER:
            return "*"
        return str(nargs)

    options = {
        opt: [a.dest, kind(a), bool(a.required)]
        for a in parser._actions
        for opt in a.option_strings
    }
    positionals = [[a.dest, kind(a)] for a in parser._actions if not a.option_strings]
    return {
        "options": options,
        "positionals": positionals,
        "allow_abbrev": bool(getattr(parser, "allow_abbrev", True)),
        "prefix_chars": parser.prefix_chars,
        "negative_number_options": bool(parser._has_negative_number_optionals),
        "python": list(sys.version_info[:2]),
    }


def leftover_processes(keep: set[int]) -> list[int]:
    """Processes in this PID namespace other than ``keep``, this process, its ancestors and
    the namespace's init (bubblewrap)."""
    mine = {os.getpid(), 1}
    pid = os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        mine.add(pid)
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in mine | keep:
            out.append(int(entry))
    return sorted(out)


def kill_leftovers(keep: set[int]) -> list[int]:
    """SIGKILL every :func:`leftover_processes` process (and reap our own zombies)."""
    found = leftover_processes(keep)
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    while True:
        try:
            done, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if not done:
            break
    return found


# ------------------------------------------------------------------ network


class NetworkBlocked(OSError):
    """A connection to a non-loopback address was attempted during replay."""


def _is_loopback(host: Any) -> bool:
    if host is None:
        return True
    host = str(host)
    if host in ("localhost", "") or host.startswith("/"):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def install_socket_guard() -> None:
    """Refuse ``connect`` (and name lookups) for anything but loopback and Unix sockets."""
    orig_connect = socket.socket.connect
    orig_connect_ex = socket.socket.connect_ex
    orig_getaddrinfo = socket.getaddrinfo

    def _check(self: socket.socket, address: Any) -> None:
        if self.family == getattr(socket, "AF_UNIX", None):
            return
        host = address[0] if isinstance(address, tuple) else address
        if not _is_loopback(host):
            raise NetworkBlocked(f"replay harness: network access to {address!r} is blocked")

    def connect(self: socket.socket, address: Any) -> None:
        _check(self, address)
        return orig_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _check(self, address)
        return orig_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_loopback(host if not isinstance(host, bytes) else host.decode()):
            raise NetworkBlocked(f"replay harness: name lookup of {host!r} is blocked")
        return orig_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]
