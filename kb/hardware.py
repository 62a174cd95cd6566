"""Hardware profiles as data: the GPUs SGLang's validation asks about, by name.

A :class:`HardwareProfile` is a declared machine (GPU model, vendor, compute
capability, count, memory per GPU, CUDA version). :data:`BASES` lists the GPUs
known here, :data:`LISTED` the profiles named in the docs, and
:func:`get_profile` reads any spelling a user types (``h100-x8``, ``8xH100``,
``rtx-pro-6000``). The engine turns a profile into facts
(:mod:`service.engine.facts`); replay pins SGLang's probes to it.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from kb.errors import ConfigError

__all__ = [
    "AMD_CAPABILITY",
    "BASES",
    "CUDA",
    "GPU_NAME_BASES",
    "LISTED",
    "PROFILES",
    "HardwareProfile",
    "Vendor",
    "get_profile",
    "make_profile",
]

Vendor = Literal["nvidia", "amd", "cpu"]


class HardwareProfile(BaseModel):
    """A declared machine: GPU model, count, memory per GPU (GB) and CUDA version."""

    name: str
    gpu: str
    vendor: Vendor
    sm: int | None
    count: int
    memory_gb: int
    cuda: str | None


CUDA = "12.9"  # CUDA of SGLang's default wheels; every probe below needs <= 12.8

# base name -> (GPU, vendor, sm, default count, memory per GPU in GB)
BASES: dict[str, tuple[str, Vendor, int | None, int, int]] = {
    "h100": ("NVIDIA H100 80GB HBM3", "nvidia", 90, 8, 80),
    "h200": ("NVIDIA H200", "nvidia", 90, 8, 141),
    "h20": ("NVIDIA H20", "nvidia", 90, 8, 96),
    "h800": ("NVIDIA H800", "nvidia", 90, 8, 80),
    "gh200": ("NVIDIA GH200", "nvidia", 90, 1, 96),
    "b200": ("NVIDIA B200", "nvidia", 100, 8, 180),
    "gb200": ("NVIDIA GB200", "nvidia", 100, 4, 186),
    "b300": ("NVIDIA B300", "nvidia", 103, 8, 288),
    "gb300": ("NVIDIA GB300", "nvidia", 103, 4, 288),
    "rtx-pro-6000": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "nvidia", 120, 8, 96),
    "rtx-5090": ("NVIDIA GeForce RTX 5090", "nvidia", 120, 1, 32),
    "dgx-spark": ("NVIDIA GB10", "nvidia", 121, 1, 128),
    "a100": ("NVIDIA A100-SXM4-80GB", "nvidia", 80, 8, 80),
    "l40s": ("NVIDIA L40S", "nvidia", 89, 4, 48),
    "mi300x": ("AMD Instinct MI300X", "amd", None, 8, 192),
    "mi325x": ("AMD Instinct MI325X", "amd", None, 8, 256),
    "mi355x": ("AMD Instinct MI355X", "amd", None, 8, 288),
    "cpu": ("CPU", "cpu", None, 0, 0),
}
ALIASES: dict[str, str] = {
    "rtx-pro-6000-blackwell": "rtx-pro-6000", "rtxpro6000": "rtx-pro-6000",
    "rtx-pro6000": "rtx-pro-6000", "pro-6000": "rtx-pro-6000", "rtx6000-pro": "rtx-pro-6000",
    "rtx5090": "rtx-5090", "5090": "rtx-5090", "gb10": "dgx-spark", "spark": "dgx-spark",
    "a100-80gb": "a100", "h100-sxm": "h100", "h100-80gb": "h100", "h200-141gb": "h200",
    "mi300": "mi300x", "mi325": "mi325x", "mi355": "mi355x", "mi350x": "mi355x",
}  # fmt: skip
# the profiles named in the docs; any base with "-xN" works as well
LISTED = [
    "h100-x8", "h200-x8", "h20-x8", "b200-x8", "gb200-x4", "b300-x8", "rtx-pro-6000-x8",
    "rtx-5090-x1", "a100-x8", "l40s-x4", "mi300x-x8", "cpu",
]  # fmt: skip
# torch.cuda.get_device_capability() on ROCm (gfx942 -> (9, 4), gfx950 -> (9, 5))
AMD_CAPABILITY = {"mi300x": (9, 4), "mi325x": (9, 4), "mi355x": (9, 5)}


def make_profile(base: str, count: int | None = None) -> HardwareProfile:
    gpu, vendor, sm, default_count, mem = BASES[base]
    n = default_count if count is None else count
    name = base if base == "cpu" else f"{base}-x{n}"
    return HardwareProfile(
        name=name,
        gpu=gpu,
        vendor=vendor,
        sm=sm,
        count=n,
        memory_gb=mem,
        cuda=CUDA if vendor == "nvidia" else None,
    )


PROFILES: dict[str, HardwareProfile] = {}
for _name in LISTED:
    _b, _, _n = _name.rpartition("-x")
    PROFILES[_name] = make_profile(_b, int(_n)) if _b else make_profile(_name)

#: The most GPUs a profile may declare (``-x0`` or ``-x999`` is a typo, not a machine).
MAX_GPUS = 256

NAME_RE = re.compile(r"^(?:(\d{1,3})[x×*]-?)?(.+?)(?:-?[x×*](\d{1,3}))?$")


def get_profile(name: str) -> HardwareProfile:
    """The profile for ``name``: ``"h100-x8"``, ``"h100-x2"``, ``"8xH100"``, ``"rtx-pro-6000"``.

    Case, spaces and underscores do not matter and a ``nvidia-`` prefix is
    dropped. Without ``-xN`` the base's usual count is used (8 for most
    servers). Raises :class:`ConfigError` listing the valid names otherwise.
    """
    norm = re.sub(r"[\s_]+", "-", name.strip().lower())
    norm = norm.removeprefix("nvidia-").removeprefix("amd-").removeprefix("instinct-")
    if norm in PROFILES:
        return PROFILES[norm]
    m = NAME_RE.match(norm)
    if m is not None:
        base = ALIASES.get(m[2], m[2]).removesuffix("-")
        count = m[1] or m[3]
        if (
            base in BASES
            and not (base == "cpu" and count)
            and (not count or 1 <= int(count) <= MAX_GPUS)
        ):
            return make_profile(base, int(count) if count else None)
    raise ConfigError(
        f"unknown hardware profile {name!r}; valid: {', '.join(LISTED)} "
        f"(or any of {', '.join(sorted(BASES))} with -xN, 1 <= N <= {MAX_GPUS}, e.g. h100-x2)",
        details={"hardware": name, "valid": LISTED, "bases": sorted(BASES)},
    )


GPU_NAME_BASES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p, re.I), base)
    for p, base in [
        (r"\bGB300\b", "gb300"), (r"\bB300\b", "b300"), (r"\bGB200\b", "gb200"),
        (r"\bB200\b", "b200"), (r"\bGB10\b|DGX ?Spark", "dgx-spark"),
        (r"RTX ?PRO ?6000", "rtx-pro-6000"), (r"RTX ?5090", "rtx-5090"), (r"\bGH200\b", "gh200"),
        (r"\bH200\b", "h200"), (r"\bH800\b", "h800"), (r"\bH100\b", "h100"), (r"\bH20\b", "h20"),
        (r"\bA100\b", "a100"), (r"\bL40S\b", "l40s"), (r"MI300X?\b", "mi300x"),
        (r"MI325X?\b", "mi325x"), (r"MI35[05]X?\b", "mi355x"),
    ]
]  # fmt: skip
