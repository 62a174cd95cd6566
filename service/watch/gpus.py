"""The GPUs of the machine a launch command runs on, mapped to a hardware profile.

``nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv,noheader``
(and ``rocm-smi --showproductname --showmeminfo vram --json`` when it is there), found on
the launch's ``PATH``: model, count, memory, compute capability, driver, mapped to a
hardware profile by the engine's :func:`~service.engine.profile_from_gpus` (a GPU it
does not know by name gets the closest profile of the same compute capability).
:func:`hardware_from_smi` does the same for recorded ``nvidia-smi`` output (the CSV above,
``nvidia-smi -L`` or the usual table). ``CUDA_VISIBLE_DEVICES`` narrows the count. Each
tool runs within :data:`SMI_TIMEOUT_S` and at most 64 KiB of its output is read. One of
the facts :func:`service.watch.facts.gather` collects.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from kb.errors import ConfigError
from kb.hardware import BASES, MAX_GPUS
from service.engine import GpuHint, get_profile, profile_from_gpus

__all__ = ["SMI_QUERY", "SMI_TIMEOUT_S", "hardware_from_smi", "read_gpus"]

SMI_TIMEOUT_S = 10.0
_MAX_OUTPUT = 64 * 1024
SMI_QUERY = ["--query-gpu=name,memory.total,compute_cap,driver_version", "--format=csv,noheader"]
_SMI_QUERY_OLD = ["--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
_ROCM_QUERY = ["--showproductname", "--showmeminfo", "vram", "--json"]
_SMI_TABLE_ROW = re.compile(r"^\|\s{0,8}(\d{1,3})\s{1,8}(\S.{0,120}?)\s{1,60}(?:On|Off)\s{0,8}\|")
_SMI_MIB = re.compile(r"/\s{0,8}(\d{1,9})\s{0,2}MiB")
_SMI_LIST_ROW = re.compile(r"^GPU\s(\d{1,3}):\s(.{1,200}?)\s\(UUID")
_SMI_DRIVER = re.compile(r"Driver Version:\s{0,8}([\d.]{1,20})")


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
    smi = shutil.which("nvidia-smi", path=env.get("PATH", os.defpath))
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
    rocm = shutil.which("rocm-smi", path=env.get("PATH", os.defpath))
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
