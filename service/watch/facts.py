"""The facts of the machine a launch command runs on, each with where it came from.

* **Release** — the SGLang the command's own interpreter would import: the ``python`` it
  names (``python3 -m sglang.launch_server``), for a console script (``sglang serve``) the
  interpreter of its shebang, else :data:`sys.executable`. That interpreter runs a tiny
  ``-c`` script (:data:`PROBE`) reading ``importlib.metadata`` only — sglang itself is
  never imported — with the launch's environment, within :data:`PROBE_TIMEOUT_S`: the
  version, the install folder and, for a build installed from git, the commit of
  ``direct_url.json`` (``vcs_info.commit_id``).
* **Hardware** — ``nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version
  --format=csv,noheader`` (and ``rocm-smi --showproductname --showmeminfo vram --json``
  when it is there): model, count, memory, compute capability, driver, mapped to a
  hardware profile by the engine's :func:`~service.engine.profile_from_gpus` (a GPU it
  does not know by name gets the closest profile of the same compute capability).
  :func:`hardware_from_smi` does the same for recorded ``nvidia-smi`` output (the CSV
  above, ``nvidia-smi -L`` or the usual table). ``CUDA_VISIBLE_DEVICES`` narrows the count.
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
from kb.hardware import BASES, MAX_GPUS
from service.engine import GpuHint, get_profile, profile_from_gpus, redact

__all__ = [
    "MAX_CONFIG_BYTES",
    "PROBE",
    "PROBE_TIMEOUT_S",
    "SMI_QUERY",
    "MachineFacts",
    "command_start",
    "env_facts",
    "gather",
    "hardware_from_smi",
    "installed_release",
    "interpreter_for",
    "model_facts",
    "model_path_of",
    "read_gpus",
]

PROBE_TIMEOUT_S = 10.0
SMI_TIMEOUT_S = 10.0
MAX_CONFIG_BYTES = 2 * 1024 * 1024
_MAX_OUTPUT = 64 * 1024
_MAX_ENV = 64
SMI_QUERY = ["--query-gpu=name,memory.total,compute_cap,driver_version", "--format=csv,noheader"]
_SMI_QUERY_OLD = ["--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
_ROCM_QUERY = ["--showproductname", "--showmeminfo", "vram", "--json"]

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
_SMI_TABLE_ROW = re.compile(r"^\|\s{0,8}(\d{1,3})\s{1,8}(\S.{0,120}?)\s{1,60}(?:On|Off)\s{0,8}\|")
_SMI_MIB = re.compile(r"/\s{0,8}(\d{1,9})\s{0,2}MiB")
_SMI_LIST_ROW = re.compile(r"^GPU\s(\d{1,3}):\s(.{1,200}?)\s\(UUID")
_SMI_DRIVER = re.compile(r"Driver Version:\s{0,8}([\d.]{1,20})")


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


# ---------------------------------------------------------------------------- hardware


def _gb(mib: float) -> int:
    return max(1, round(mib / 1024))


def _nearest_profile(hint: GpuHint) -> tuple[str, str] | None:
    """A listed profile base for a GPU the engine does not know by name: the NVIDIA bases of
    its compute capability (else of its major), the one whose memory fits most tightly."""
    if hint.sm is None:
        return None
    nvidia = {b: row for b, row in BASES.items() if row[1] == "nvidia" and row[2] is not None}
    same = [b for b, row in nvidia.items() if row[2] == hint.sm]
    major = [b for b, row in nvidia.items() if row[2] is not None and row[2] // 10 == hint.sm // 10]
    cands = same or major
    if not cands:
        return None
    mem = hint.memory_gb or 0
    fits = [b for b in cands if BASES[b][4] >= mem * 0.95]
    base = min(fits, key=lambda b: BASES[b][4]) if fits else max(cands, key=lambda b: BASES[b][4])
    how = f"closest profile by compute capability {hint.sm // 10}.{hint.sm % 10}"
    return base, how + (f" and {mem} GB" if mem else "")


def _profile_for(hint: GpuHint) -> tuple[str | None, str]:
    """``(profile name, how)`` for the GPU ``hint`` (``None`` when no profile fits)."""
    prof = profile_from_gpus([hint])
    if prof is not None:
        try:
            return get_profile(prof.name).name, f"{prof.name}: by GPU name {hint.name}"
        except ConfigError:
            pass
    near = _nearest_profile(hint)
    if near is not None:
        name = get_profile(f"{near[0]}-x{hint.count or 1}").name
        return name, f"{name}: {near[1]} ({hint.name} has no profile of its own)"
    return None, f"no hardware profile fits {hint.name}"


def _rows_csv(text: str) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines()[:MAX_GPUS]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 2 or not cells[0] or "MiB" not in cells[1]:
            continue
        mib = cells[1].replace("MiB", "").strip()
        row: dict[str, Any] = {
            "name": cells[0][:200],
            "line": line.strip()[:300],
            "memory_mib": int(mib) if mib.isdecimal() else None,
        }
        if len(cells) >= 4:
            cap = cells[2].split(".")
            if len(cap) == 2 and cap[0].isdecimal() and cap[1].isdecimal():
                row["sm"] = int(cap[0]) * 10 + int(cap[1])
            row["driver"] = cells[3][:40]
        elif len(cells) == 3:
            row["driver"] = cells[2][:40]
        rows.append(row)
    return rows


def _rows_table(text: str) -> list[dict[str, Any]]:
    """Rows of the usual ``nvidia-smi`` table or of ``nvidia-smi -L``."""
    lines = text.splitlines()[: 4 * MAX_GPUS + 40]
    driver = next((m[1] for ln in lines[:20] if (m := _SMI_DRIVER.search(ln[:400]))), None)
    rows = []
    for i, line in enumerate(lines):
        m = _SMI_TABLE_ROW.match(line[:400]) or _SMI_LIST_ROW.match(line[:400])
        if m is None:
            continue
        nxt = lines[i + 1][:400] if i + 1 < len(lines) else ""
        mem = _SMI_MIB.search(nxt)
        rows.append(
            {
                "name": m[2].strip(),
                "line": line.strip()[:300],
                "memory_mib": int(mem[1]) if mem else None,
                "driver": driver,
            }
        )
    return rows


def hardware_from_smi(
    text: str, env: Mapping[str, str] | None = None, source: str = "nvidia-smi"
) -> dict[str, Any]:
    """The hardware fact of recorded ``nvidia-smi`` output (``--query-gpu`` CSV, ``-L`` or
    the table): ``profile`` (a name ``--hardware`` accepts, or None), ``gpus`` (name,
    count, memory, compute capability, driver), ``count``, ``evidence`` (the first GPU row),
    ``detail`` and ``source``. Empty when the text shows no GPU."""
    text = text[:_MAX_OUTPUT]
    rows = _rows_csv(text) or _rows_table(text)
    if not rows:
        return {}
    first = rows[0]
    same = [r for r in rows if r["name"] == first["name"]]
    count, counted = len(same), f"{len(same)} GPUs listed"
    cvd = (env or {}).get("CUDA_VISIBLE_DEVICES", "").strip()
    ids = [p.strip() for p in cvd.split(",") if p.strip()]
    if ids and all(p.isdecimal() for p in ids) and len(ids) <= len(rows):
        count, counted = len(ids), f"CUDA_VISIBLE_DEVICES={cvd}"
    mib = first.get("memory_mib")
    hint = GpuHint(
        name=first["name"],
        sm=first.get("sm"),
        count=count,
        memory_gb=_gb(mib) if mib else None,
        vendor="nvidia",
        evidence=first["line"],
    )
    profile, how = _profile_for(hint)
    gpus = [
        {
            "name": n,
            "count": sum(1 for r in rows if r["name"] == n),
            "memory_mib": next(r.get("memory_mib") for r in rows if r["name"] == n),
            "compute_capability": (lambda sm: f"{sm // 10}.{sm % 10}" if sm else None)(
                next(r.get("sm") for r in rows if r["name"] == n)
            ),
            "driver": next(r.get("driver") for r in rows if r["name"] == n),
        }
        for n in dict.fromkeys(r["name"] for r in rows)
    ]
    return {
        "profile": profile,
        "source": source,
        "evidence": first["line"],
        "detail": f"{how}; {count} GPUs ({counted})",
        "gpus": gpus,
        "count": count,
    }


def _rocm_from_json(text: str, source: str) -> dict[str, Any]:
    try:
        data = json.loads(text[:_MAX_OUTPUT])
    except ValueError:
        return {}
    cards = (
        [v for k, v in data.items() if k.startswith("card") and isinstance(v, dict)]
        if isinstance(data, dict)
        else []
    )
    if not cards:
        return {}
    card = cards[0]
    name = str(
        card.get("Card series")
        or card.get("Card SKU")
        or card.get("Card model")
        or card.get("Device Name")
        or "AMD GPU"
    )[:200]
    arch = str(card.get("GFX Version") or "")[:20] or None
    total = card.get("VRAM Total Memory (B)")
    mem = (
        round(int(total) / 1024**3)
        if isinstance(total, str | int) and str(total).isdecimal()
        else None
    )
    hint = GpuHint(
        name=name,
        sm=None,
        count=len(cards),
        memory_gb=mem,
        vendor="amd",
        arch=arch,
        evidence=json.dumps(card)[:300],
    )
    prof = profile_from_gpus([hint])
    profile = None
    if prof is not None:
        try:
            profile = get_profile(prof.name).name
        except ConfigError:
            profile = None
    how = f"{profile}: by GPU name {name}" if profile else f"no hardware profile fits {name}"
    return {
        "profile": profile,
        "source": source,
        "evidence": hint.evidence,
        "detail": f"{how}; {len(cards)} GPUs listed",
        "count": len(cards),
        "gpus": [{"name": name, "count": len(cards), "memory_gb": mem, "arch": arch}],
    }


def _run_tool(argv: list[str], env: Mapping[str, str]) -> tuple[str | None, str | None]:
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            timeout=SMI_TIMEOUT_S,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{os.path.basename(argv[0])} failed: {type(exc).__name__}: {str(exc)[:200]}"
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout)[-200:].decode("utf-8", "replace").strip()
        return None, f"{os.path.basename(argv[0])} exited {proc.returncode}: {err}"
    return proc.stdout[:_MAX_OUTPUT].decode("utf-8", "replace"), None


def read_gpus(env: Mapping[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """``(hardware fact, notes)`` from ``nvidia-smi`` on the launch's ``PATH``, else
    ``rocm-smi``; ``({}, notes)`` when neither shows a GPU."""
    env = os.environ if env is None else env
    notes: list[str] = []
    smi = _which("nvidia-smi", env)
    if smi:
        text, err = _run_tool([smi, *SMI_QUERY], env)
        if text is None:  # drivers before 510 do not know compute_cap
            text, err2 = _run_tool([smi, *_SMI_QUERY_OLD], env)
            err = err2 or err
        if text is not None:
            found = hardware_from_smi(text, env, source=f"nvidia-smi {' '.join(SMI_QUERY)}")
            if found:
                return found, notes
            notes.append("nvidia-smi listed no GPU")
        else:
            notes.append(err or "nvidia-smi failed")
    rocm = _which("rocm-smi", env)
    if rocm:
        text, err = _run_tool([rocm, *_ROCM_QUERY], env)
        if text is not None:
            found = _rocm_from_json(text, f"rocm-smi {' '.join(_ROCM_QUERY)}")
            if found:
                return found, notes
            notes.append("rocm-smi listed no GPU")
        else:
            notes.append(err or "rocm-smi failed")
    if not smi and not rocm:
        notes.append("no GPU detected: neither nvidia-smi nor rocm-smi is on PATH")
    return {}, notes


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
