"""The facts of the machine a launch command runs on, each with where it came from.

* **Release** — the SGLang the command's own interpreter would import: the ``python`` it
  names (``python3 -m sglang.launch_server``), for a console script (``sglang serve``) the
  interpreter of its shebang, else :data:`sys.executable`. That interpreter runs a tiny
  ``-c`` script (:data:`PROBE`) reading ``importlib.metadata`` only — sglang itself is
  never imported — with the launch's environment, within :data:`PROBE_TIMEOUT_S`: the
  version, the install folder and, for a build installed from git, the commit of
  ``direct_url.json`` (``vcs_info.commit_id``).
* **Hardware** — the GPUs ``nvidia-smi`` (or ``rocm-smi``) reports, mapped to a hardware
  profile (:mod:`service.watch.gpus`: :func:`~service.watch.gpus.read_gpus`).
* **Model** — ``config.json`` of ``--model-path`` when it is a local folder (at most
  :data:`MAX_CONFIG_BYTES`): architectures, model type, quantization method.
* **Environment** — ``SGLANG_*`` (and ``CUDA_VISIBLE_DEVICES``) of the launch, values cut
  short and secrets (names with KEY, TOKEN, SECRET or PASSWORD) hidden.

Nothing here sends anything anywhere; every probe is bounded in time and bytes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb.errors import ConfigError
from service.engine import get_profile, redact
from service.watch.gpus import read_gpus

__all__ = [
    "MAX_CONFIG_BYTES",
    "PROBE",
    "PROBE_TIMEOUT_S",
    "MachineFacts",
    "command_start",
    "env_facts",
    "gather",
    "installed_release",
    "interpreter_for",
    "model_facts",
    "model_path_of",
    "read_gpus",
]

PROBE_TIMEOUT_S = 10.0
MAX_CONFIG_BYTES = 2 * 1024 * 1024
_MAX_OUTPUT = 64 * 1024
_MAX_ENV = 64

#: run by the command's interpreter: importlib.metadata only, never ``import sglang``
PROBE = """\
import json, sys
try:
    from importlib import metadata as m
except ImportError:
    print(json.dumps({"error": "no importlib.metadata"})); sys.exit(0)
out = {"python": sys.version.split()[0], "executable": sys.executable}
try:
    d = m.distribution("sglang")
except m.PackageNotFoundError:
    out["error"] = "sglang is not installed for this interpreter"
else:
    out["version"] = d.version
    try:
        out["location"] = str(d.locate_file(""))
    except Exception:
        pass
    t = d.read_text("direct_url.json")
    if t:
        try:
            j = json.loads(t)
            out["url"] = str(j.get("url", ""))[:500]
            out["commit"] = (j.get("vcs_info") or {}).get("commit_id")
            out["editable"] = bool((j.get("dir_info") or {}).get("editable"))
        except ValueError:
            pass
print(json.dumps(out))
"""

_PYTHON_NAME = re.compile(r"^python(?:\d{1,2}(?:\.\d{1,3})?)?$")
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)
_LOCAL_COMMIT = re.compile(r"\+g([0-9a-f]{7,40})\b")


@dataclass
class MachineFacts:
    """What :func:`gather` found: ``release``, ``hardware``, ``model`` and ``env`` (dicts,
    each with its ``source``; empty when not found) and ``notes`` on what was not found."""

    release: dict[str, Any] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def version(self) -> str | None:
        return self.release.get("version")

    @property
    def profile(self) -> str | None:
        return self.hardware.get("profile")

    def to_json(self) -> dict[str, Any]:
        """The facts as :class:`~service.watch.report.CrashReport` carries them."""
        out: dict[str, Any] = {
            "release": self.release,
            "hardware": self.hardware,
            "model": self.model,
            "env": self.env,
            "notes": self.notes,
        }
        return {k: v for k, v in out.items() if v}


# ---------------------------------------------------------------------------- release


def _which(name: str, env: Mapping[str, str]) -> str | None:
    return shutil.which(name, path=env.get("PATH", os.defpath))


def _shebang(path: str) -> list[str] | None:
    """The interpreter argv of a script's ``#!`` line (first 512 bytes), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return line.split() or None


def command_start(argv: Sequence[str]) -> int:
    """Where the program of ``argv`` is: after an ``env [-i] [NAME=value ...]`` prefix."""
    if not argv or os.path.basename(argv[0]) != "env":
        return 0
    i = 1
    while i < len(argv) and (argv[i].startswith("-") or "=" in argv[i]):
        i += 2 if argv[i] in ("-u", "--unset", "-C", "--chdir") else 1
    return min(i, len(argv))


def interpreter_for(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(interpreter, how it was found)`` for a launch command (see the module docstring)."""
    env = os.environ if env is None else env
    argv = list(argv)[command_start(argv) :]
    if argv:
        first = argv[0]
        found = first if "/" in first else _which(first, env)
        if _PYTHON_NAME.match(os.path.basename(first)):
            if found:
                return found, f"the command's interpreter {first}"
        elif found:
            bang = _shebang(found)
            if bang:
                if os.path.basename(bang[0]) == "env" and len(bang) > 1:
                    name = next((b for b in bang[1:] if not b.startswith("-")), "")
                    target = _which(name, env) if name else None
                else:
                    target = bang[0]
                if target and _PYTHON_NAME.match(os.path.basename(target)):
                    return target, f"the shebang of {found}"
    return sys.executable, "sglang-triage's own interpreter (the command names none)"


def installed_release(
    interpreter: str, how: str, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], str | None]:
    """``(release fact, note)``: the SGLang version ``interpreter`` sees (empty dict and a
    note saying why when it sees none)."""
    try:
        proc = subprocess.run(
            [interpreter, "-c", PROBE],
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            env=dict(os.environ if env is None else env),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return (
            {},
            f"could not ask {interpreter} for its SGLang: {type(exc).__name__}: {str(exc)[:200]}",
        )
    try:
        data = json.loads(
            proc.stdout[-_MAX_OUTPUT:].decode("utf-8", "replace").strip().splitlines()[-1]
        )
    except (ValueError, IndexError):
        data = None
    if not isinstance(data, dict):
        err = proc.stderr[-300:].decode("utf-8", "replace").strip()
        return {}, f"{interpreter} did not answer the version probe (exit {proc.returncode}): {err}"
    if not data.get("version"):
        return {}, f"{interpreter}: {data.get('error') or 'no SGLang version'}"
    version = str(data["version"])[:100]
    commit = data.get("commit")
    m = _LOCAL_COMMIT.search(version)
    if not commit and m:
        commit = m[1]
    location = data.get("location")
    pkg = os.path.join(location, "sglang") if location else None
    detail = f"importlib.metadata of {interpreter}, {how}" + (f"; {pkg}" if pkg else "")
    fact = {
        "version": version,
        "source": "installed",
        "detail": detail,
        "location": pkg,
        "commit": str(commit)[:40] if commit else None,
        "interpreter": interpreter,
        "python": data.get("python"),
        "dev_build": ".dev" in version or "+" in version or bool(commit),
    }
    if data.get("url"):
        fact["url"] = data["url"]
    return fact, None


# ------------------------------------------------------------------------- model, env


def model_path_of(argv: Sequence[str]) -> str | None:
    """The value of ``--model-path``/``--model`` (last one wins; ``--x=v`` or ``--x v``)."""
    found = None
    for i, tok in enumerate(argv):
        name, eq, value = tok.partition("=")
        if name in ("--model-path", "--model"):
            if eq:
                found = value
            elif i + 1 < len(argv):
                found = argv[i + 1]
    return found


def model_facts(argv: Sequence[str]) -> tuple[dict[str, Any], str | None]:
    """``(model fact, note)``: the local ``config.json`` of ``--model-path`` (bounded), or
    just the path (a hub id, or a folder without a readable config)."""
    path = model_path_of(argv)
    if not path:
        return {}, None
    fact: dict[str, Any] = {"path": path, "source": "command line", "detail": "--model-path"}
    cfg = Path(path).expanduser() / "config.json"
    try:
        if not cfg.is_file():
            return fact, None
        size = cfg.stat().st_size
        if size > MAX_CONFIG_BYTES:
            return fact, f"{cfg} is {size} bytes, more than {MAX_CONFIG_BYTES}: not read"
        with cfg.open("rb") as f:
            data = json.loads(f.read(MAX_CONFIG_BYTES))
    except (OSError, ValueError) as exc:
        return fact, f"{cfg} not read: {type(exc).__name__}"
    if not isinstance(data, dict):
        return fact, f"{cfg} is not a JSON object"
    arch = data.get("architectures")
    quant = data.get("quantization_config")
    fact.update(
        {
            "source": "config.json",
            "detail": str(cfg),
            "local": True,
            "architectures": [str(a)[:200] for a in arch[:4]] if isinstance(arch, list) else [],
            "model_type": str(data.get("model_type"))[:100] if data.get("model_type") else None,
            "quantization": str(quant.get("quant_method"))[:50]
            if isinstance(quant, dict) and quant.get("quant_method")
            else None,
        }
    )
    return fact, None


def env_facts(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``SGLANG_*`` and ``CUDA_VISIBLE_DEVICES`` of the launch (at most 64, values at most
    200 characters, secrets hidden, the rest redacted like a log)."""
    env = os.environ if env is None else env
    out: dict[str, str] = {}
    for name in sorted(env):
        if (
            not (name.startswith("SGLANG_") or name == "CUDA_VISIBLE_DEVICES")
            or len(out) >= _MAX_ENV
        ):
            continue
        value = env[name][:200]
        out[name] = "<hidden>" if _SECRET_NAME.search(name) else redact(value)
    return out


def gather(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    release: str | None = None,
    hardware: str | None = None,
) -> MachineFacts:
    """Every fact of the launch ``argv``: a given ``release``/``hardware`` (the user's
    ``--release``/``--hardware``) replaces the probe and says so."""
    env = os.environ if env is None else env
    facts = MachineFacts()
    if release:
        facts.release = {"version": release, "source": "given", "detail": "--release"}
    else:
        interp, how = interpreter_for(argv, env)
        facts.release, note = installed_release(interp, how, env)
        if note:
            facts.notes.append(note)
    if hardware:
        try:
            name = get_profile(hardware).name
        except ConfigError as exc:
            facts.notes.append(exc.message)
        else:
            facts.hardware = {"profile": name, "source": "given", "detail": "--hardware"}
    else:
        facts.hardware, notes = read_gpus(env)
        facts.notes.extend(notes)
    facts.model, note = model_facts(argv)
    if note:
        facts.notes.append(note)
    facts.env = env_facts(env)
    return facts
