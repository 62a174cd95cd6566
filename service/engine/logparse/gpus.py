"""The GPUs a crash log shows: names, compute capabilities, counts and memory.

:func:`find_gpus` reads, from the cleaned log lines:

* ``python -m sglang.check_env`` rows: ``GPU 0,1,2,3: NVIDIA H200`` (and
  ``nvidia-smi -L``'s ``GPU 0: NAME (UUID: ...)``), ``GPU 0,1 Compute Capability: 9.0``;
* ``nvidia-smi`` tables: ``|   0  NVIDIA H100 80GB HBM3   On  | ... |`` with the
  memory (``81559MiB``) on the row or the row below;
* torch's device properties: ``_CudaDeviceProperties(name='NVIDIA B200', major=10,
  minor=0, total_memory=183359MB, ...)`` (on ROCm with ``gcnArchName='gfx942:...'``);
* capability prints: ``torch.cuda.get_device_capability()`` tuples such as
  ``capability (12, 0)``, ``Compute Capability: 10.0``, torch's ``with CUDA
  capability sm_120`` warning and ``Found GPU0 NVIDIA GB10 which is of cuda capability
  12.1``; a requirement (``requires capability >= (9, 0)``)
  is not the device and is skipped;
* ROCm architectures: ``gcnArchName='gfx942'``, ``rocminfo``'s ``Name: gfx942``,
  ``arch: gfx950``;
* SGLang's start-up lines: ``GPU: NVIDIA RTX PRO 6000 ...``, ``avail mem=78.50 GB``
  (free memory when weights start loading: a lower bound of the GPU's memory);
* free text: ``8x RTX PRO 6000``, ``on 8× H100``.

Hints are merged by name (:class:`GpuHint`); each keeps the first line that showed
it as ``evidence``. A capability or architecture printed without a name becomes a
hint of its own (``GPU with compute capability 12.0``, ``gfx942``) unless it fits
the one named GPU. Pure and linear: every pattern is bounded and sees at most
:data:`~service.engine.logparse.text.SCAN_CHARS` characters of a line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from service.engine.logparse.text import SCAN_CHARS

__all__ = ["GpuHint", "find_gpus", "gpu_sm"]

GpuVendor = Literal["nvidia", "amd"]


class GpuHint(BaseModel):
    """A GPU mentioned in the log, with its compute capability when the name is known.

    ``sm`` is the capability as an int (``(12, 0)`` -> 120; ROCm's ``(9, 4)`` -> 94),
    ``count`` the GPUs listed with it, ``memory_gb`` its total memory,
    ``free_gb`` the largest ``avail mem=`` SGLang printed (a lower bound of the
    memory), ``arch`` a ROCm ``gfx`` architecture and ``evidence`` the first log
    line that showed the GPU.
    """

    name: str
    sm: int | None
    count: int | None
    memory_gb: int | None
    vendor: GpuVendor | None = None
    free_gb: float | None = None
    arch: str | None = None
    evidence: str = ""


# (model names, compute capability); the first match wins, names stand between word boundaries
_GPU_MODELS: list[tuple[str, int]] = [
    (r"G?B300", 103),
    (r"G?B200|B100", 100),
    (r"GB10|DGX ?Spark", 121),
    (r"RTX ?PRO ?\d{4}|RTX ?50[5-9]0(?: Ti)?", 120),
    (r"GH200|H200|H100|H800|H20", 90),
    (r"RTX ?6000 Ada|L40S|L40|L20|L4|RTX ?40[5-9]0(?: Ti)?", 89),
    (r"A100|A800|A30", 80),
    (r"A10G|A10|A40|RTX ?A[456]000|RTX ?30[5-9]0(?: Ti)?", 86),
    (r"V100", 70),
    (r"T4", 75),
]
_SM_TABLE = [(re.compile(rf"\b(?:{p})\b", re.I), sm) for p, sm in _GPU_MODELS]
_GPU_NAME = "|".join(p for p, _ in _GPU_MODELS)
_GPU_SUFFIX = r"(?:[ -](?:Blackwell|Server|Workstation|Edition|Max-Q|SXM\d?|PCIe|NVL|HBM3e?|Ada|\d{2,3} ?GB))*"
_GPU_TEXT_RE = re.compile(
    rf"(?:\b(\d{{1,3}}) ?[x×*] ?|\b)((?:NVIDIA |Tesla |GeForce ){{0,2}}(?:{_GPU_NAME})\b{_GPU_SUFFIX})"
)
_GPU_IDS_RE = re.compile(r"^[ \t]*GPU ([\d, -]{1,200}):[ \t]*(\S.*)$")
_GPU_CC_RE = re.compile(r"^[ \t]*GPU [\d, -]{1,200} Compute Capability:[ \t]*(\d{1,2})\.(\d)")
_MEM_NAME_RE = re.compile(r"\b(\d{2,3}) ?GB\b")
_MIB_RE = re.compile(r"/[ \t]*(\d{1,7})[ \t]*MiB")
_ANY_MIB_RE = re.compile(r"\b(\d{4,7})[ \t]*MiB\b")
_COUNT_RE = re.compile(r"\d ?[x×]")
# SGLang's own start-up lines
_GPU_LABEL_RE = re.compile(
    r"\bGPU(?:[ \t]name| device)?[ \t]*[:=][ \t]*['\"]?((?:NVIDIA|AMD|Tesla)[ \t][^,;|'\"()\n]{1,80})"
)
_AVAIL_RE = re.compile(
    r"\bavail(?:able)? mem(?:ory)?[ \t]*[=:][ \t]*(\d{1,4}(?:\.\d{1,3})?)[ \t]*GB"
)
# torch.cuda.get_device_properties(...)
_PROPS_NAME_RE = re.compile(r"name='([^'\n]{1,100})'")
_PROPS_CAP_RE = re.compile(r"\bmajor=(\d{1,2}), ?minor=(\d{1,2})\b")
_PROPS_MEM_RE = re.compile(r"\btotal_memory=(\d{1,9}) ?MB\b")
_PROPS_ARCH_RE = re.compile(r"\bgcnArchName='(gfx[0-9a-f]{3,4})")
# capability prints; the words around a tuple tell a requirement from the device
_CAP_TUPLE_RE = re.compile(r"capability(?:\(\))?[^()\n]{0,40}\((\d{1,2}), ?(\d{1,2})\)", re.I)
_CAP_SM_RE = re.compile(r"capability:?[ \t]{0,3}sm_?(\d{2,3})\b", re.I)
_CAP_DOT_RE = re.compile(r"capability[ \t]{0,3}[:=]?[ \t]{0,3}(\d{1,2})\.(\d)\b", re.I)
_REQUIREMENT_WORDS = (
    "requir",
    "minimum",
    "at least",
    ">=",
    "or higher",
    "or newer",
    "or above",
    "or later",
    "expected",
    "need",
)
_ROCM_ARCH_RE = re.compile(
    r"(?:\bgcnArchName='|^[ \t]*Name:[ \t]{1,40}|\barch(?:itecture)?[ \t]*[:=][ \t]*['\"]?)"
    r"(gfx9[0-9a-f]{2})\b"
)
_AMD_NAME_RE = re.compile(r"\bAMD Instinct MI\d{3}[A-Z]{0,2}\b|\bMI3[0-9]{2}X\b")


def gpu_sm(name: str) -> int | None:
    """Compute capability as an int (``"H100 80GB HBM3"`` -> 90) or None for unknown names."""
    norm = " ".join(name.split())
    for pattern, sm in _SM_TABLE:
        if pattern.search(norm):
            return sm
    return None


def _ids(spec: str) -> set[int]:
    ids: set[int] = set()
    for part in spec.replace(" ", "").split(","):
        lo, dash, hi = part.partition("-")
        if lo.isdecimal() and dash and hi.isdecimal() and int(hi) - int(lo) < 1024:
            ids.update(range(int(lo), int(hi) + 1))
        elif lo.isdecimal() and not dash:
            ids.add(int(lo))
    return ids


def _smi_row(line: str, nxt: str) -> tuple[str, int, int | None] | None:
    """``(name, index, memory GB)`` of an ``nvidia-smi`` table row such as
    ``|   0  NVIDIA H100 80GB HBM3   On  |  00000000:18:00.0 Off | 0 |``; the memory
    is the ``/ 81559MiB`` of the row below, else the largest ``MiB`` on the row."""
    cells = line.split("|")
    if len(cells) < 3:
        return None
    cell = cells[1].strip()
    for tail in (" On", " Off"):
        if cell.endswith(tail):
            cell = cell[: -len(tail)].rstrip()
            break
    else:
        return None
    index, _, name = cell.partition(" ")
    name = name.strip().removesuffix("...").rstrip()
    if (
        not index.isdecimal()
        or not name
        or not (gpu_sm(name) or name.startswith(("NVIDIA", "Tesla", "AMD")))
    ):
        return None
    mem = _MIB_RE.search(nxt) or _MIB_RE.search(line)
    if mem is not None:
        return name, int(index), round(int(mem[1]) / 1024)
    on_row = [int(m[1]) for m in _ANY_MIB_RE.finditer(line)]
    return name, int(index), round(max(on_row) / 1024) if on_row else None


def _is_requirement(line: str, start: int, end: int) -> bool:
    """True when the capability at ``line[start:end]`` is a requirement, not the device."""
    around = line[max(0, start - 40) : end + 30].lower()
    return any(w in around for w in _REQUIREMENT_WORDS)


def _capability(line: str) -> int | None:
    """The device capability a line prints (``(12, 0)`` -> 120), None for none or a requirement.

    A line with two different capabilities (a list of supported ones) says nothing.
    """
    found: set[int] = set()
    for rx in (_CAP_TUPLE_RE, _CAP_DOT_RE):
        for m in rx.finditer(line):
            if not _is_requirement(line, m.start(), m.end()):
                found.add(int(m[1]) * 10 + int(m[2]))
    for m in _CAP_SM_RE.finditer(line):
        if not _is_requirement(line, m.start(), m.end()):
            found.add(int(m[1]))
    return found.pop() if len(found) == 1 else None


class _Gpus:
    """The hints being gathered, merged by name in first-seen order."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.ids: dict[str, set[int]] = {}
        self.counts: dict[str, int] = {}
        self.memory: dict[str, int] = {}
        self.sm: dict[str, int] = {}
        self.arch: dict[str, str] = {}
        self.evidence: dict[str, str] = {}
        self.last: str | None = None  # the last GPU the current line named

    def start_line(self) -> None:
        """Forget the GPU the previous line named (a new line is being read)."""
        self.last = None

    def note(self, name: str, line: str) -> str:
        name = " ".join(name.split())
        self.last = name
        if name not in self.ids:
            self.order.append(name)
            self.ids[name] = set()
            self.evidence[name] = line.strip()[:200]
        return name

    def props(self, line: str) -> None:
        """``_CudaDeviceProperties(name=..., major=..., minor=..., total_memory=...MB)``."""
        k = line.find("_CudaDeviceProperties(")
        rest = line[k:]
        m = _PROPS_NAME_RE.search(rest)
        if m is None:
            return
        name = self.note(m[1], line)
        cap = _PROPS_CAP_RE.search(rest)
        if cap is not None:
            self.sm[name] = int(cap[1]) * 10 + int(cap[2])
        mem = _PROPS_MEM_RE.search(rest)
        if mem is not None:
            self.memory[name] = round(int(mem[1]) / 1024)
        arch = _PROPS_ARCH_RE.search(rest)
        if arch is not None:
            self.arch[name] = arch[1]

    def unnamed(self, line: str, sm: int | None = None, arch: str | None = None) -> None:
        """A capability or architecture printed without a name: the one named GPU's when it
        fits it, else a hint of its own (``GPU with compute capability 12.0``, ``gfx942``)."""
        if len(self.order) == 1:
            only = self.order[0]
            known = self.sm.get(only, gpu_sm(only))
            if sm is None or known is None or known == sm:
                if sm is not None:
                    self.sm[only] = sm
                if arch is not None:
                    self.arch.setdefault(only, arch)
                return
        if arch is not None:
            name = self.note(arch, line)
            self.arch[name] = arch
            if sm is not None:
                self.sm[name] = sm
        elif sm is not None and not any(self.sm.get(n, gpu_sm(n)) == sm for n in self.order):
            self.sm[self.note(f"GPU with compute capability {sm // 10}.{sm % 10}", line)] = sm

    def hints(self, free_gb: float | None) -> list[GpuHint]:
        out = []
        for name in self.order:
            mem = self.memory.get(name)
            if mem is None:
                mm = _MEM_NAME_RE.search(name)
                mem = int(mm[1]) if mm else None
            arch = self.arch.get(name)
            sm = self.sm.get(name, gpu_sm(name))
            amd = arch is not None or sm in (94, 95) or _AMD_NAME_RE.search(name) is not None
            vendor: GpuVendor | None = "amd" if amd else ("nvidia" if sm is not None else None)
            out.append(
                GpuHint(
                    name=name,
                    sm=sm,
                    count=len(self.ids[name]) or self.counts.get(name),
                    memory_gb=mem,
                    vendor=vendor,
                    free_gb=free_gb,
                    arch=arch,
                    evidence=self.evidence[name],
                )
            )
        return out


def _names(g: _Gpus, line: str, nxt: str) -> None:
    """Note the GPUs ``line`` names (``nxt`` is the line below, for ``nvidia-smi`` rows)."""
    if "_CudaDeviceProperties(" in line:
        g.props(line)
        return
    has_gpu = "GPU" in line
    m = _GPU_IDS_RE.match(line) if has_gpu else None
    if m is not None and "Compute Capability" not in line:
        name = g.note(m[2].split("(UUID", 1)[0].strip(), line)
        g.ids[name] |= _ids(m[1])
        return
    m = _GPU_CC_RE.match(line) if has_gpu else None
    if m is not None:
        sm = int(m[1]) * 10 + int(m[2])
        if g.order:
            g.sm[g.order[-1]] = sm
        else:
            g.unnamed(line, sm=sm)
        return
    vendor = "NVIDIA" in line or "Tesla" in line or "GeForce" in line or "AMD" in line
    if not (has_gpu or vendor or "|" in line or _COUNT_RE.search(line)):
        return
    if line.lstrip().startswith("|"):
        row = _smi_row(line, nxt)
        if row is not None:
            name = g.note(row[0], line)
            g.ids[name].add(row[1])
            if row[2]:
                g.memory[name] = row[2]
        return
    m = _GPU_LABEL_RE.search(line) if has_gpu else None
    if m is not None:
        g.note(m[1].strip(), line)
        return
    for m in _GPU_TEXT_RE.finditer(line):
        if not m[1] and not m[2].startswith(("NVIDIA", "Tesla", "GeForce")) and not has_gpu:
            continue
        name = g.note(m[2], line)
        if m[1]:
            g.counts[name] = max(g.counts.get(name, 0), int(m[1]))


def find_gpus(lines: Sequence[str]) -> list[GpuHint]:
    """GPUs from ``check_env``/``nvidia-smi -L`` rows (``GPU 0,1: NAME``), ``nvidia-smi``
    tables, torch device properties, capability and ROCm architecture prints, SGLang's
    start-up lines and free text (``8x RTX PRO 6000``, ``on 8× H100``), merged by name.

    A capability or architecture printed on a line that names a GPU is that GPU's.
    """
    g = _Gpus()
    free: float | None = None
    for i, raw in enumerate(lines):
        line = raw[:SCAN_CHARS]
        low = line.lower()
        if "avail" in low and " mem" in low:
            m = _AVAIL_RE.search(line)
            if m is not None:
                free = max(free or 0.0, float(m[1]))
        g.start_line()
        _names(g, line, lines[i + 1][:SCAN_CHARS] if i + 1 < len(lines) else "")
        sm = (
            _capability(line)
            if "apabilit" in low
            and "_CudaDeviceProperties(" not in line
            and not _GPU_CC_RE.match(line)
            else None
        )
        m = _ROCM_ARCH_RE.search(line) if "gfx9" in line else None
        if g.last is not None:
            if sm is not None:
                g.sm[g.last] = sm
            if m is not None:
                g.arch.setdefault(g.last, m[1])
        elif sm is not None or m is not None:
            g.unnamed(line, sm=sm, arch=m[1] if m is not None else None)
    return g.hints(free)
