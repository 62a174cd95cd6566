"""Flags of other serving engines mapped to SGLang's, as data (``kb/data/foreign_flags.json``).

People move launch commands between engines: ``--gpu-memory-utilization 0.9`` is vLLM's,
and SGLang's argparse refuses it; ``--num-shard`` is TGI's (``text-generation-launcher``).
Each :class:`ForeignFlag` entry names the foreign flag (with its aliases), the engine it
belongs to and where that engine declares it (``source``: ``owner/repo@tag:path:line`` of
its ``add_argument`` call or clap field, read at that tag), and what SGLang
spells it: ``sglang`` lists candidate SGLang spellings, the first one the diagnosed
release has wins (the SGLang side is cited from that release's catalog at answer
time, never from this file), or is empty when SGLang has no equivalent. ``value`` says
how the value carries over:

* ``same`` — the value is kept (``--max-model-len 32768`` -> ``--context-length 32768``);
* ``switch`` — both are switches taking no value (``--enforce-eager`` -> ``--disable-cuda-graph``);
* ``tp`` — the SGLang flag takes the command's tensor-parallel size
  (``--enable-expert-parallel`` -> ``--ep-size <tp>``);
* ``drop`` — no SGLang equivalent: the flag is removed and ``note`` says why.

``also`` lists companion SGLang flags set with it when the command does not set them
(their ``value`` is a literal, or ``plus_one``: the foreign value plus one).
``exact`` is false when the meaning differs (``note`` says how). The file is read once,
validated with pydantic; no network, nothing of ours imported.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["DATA_FILE", "Companion", "ForeignFlag", "foreign_flag", "foreign_flags"]

DATA_FILE = Path(__file__).with_name("data") / "foreign_flags.json"

ValueRule = Literal["same", "switch", "tp", "drop"]


class Companion(BaseModel):
    """An SGLang flag set together with the mapped one, unless the command sets it."""

    flag: str
    value: int | float | str | bool  # a literal, or "plus_one" (the foreign value + 1)


class ForeignFlag(BaseModel):
    """One foreign flag and its SGLang counterpart (see the module docstring)."""

    flag: str
    aliases: list[str] = Field(default_factory=list)
    engine: str  # "vLLM", ...
    source: str  # owner/repo@tag:path:line of the foreign declaration
    sglang: list[str] = Field(default_factory=list)
    value: ValueRule = "same"
    also: list[Companion] = Field(default_factory=list)
    exact: bool = True
    note: str | None = None

    def spellings(self) -> list[str]:
        """The flag and its aliases."""
        return [self.flag, *self.aliases]


class _Table(BaseModel):
    flags: list[ForeignFlag]


@functools.lru_cache(maxsize=4)
def foreign_flags(path: Path = DATA_FILE) -> tuple[ForeignFlag, ...]:
    """Every entry of the table at ``path`` (read and validated once per path)."""
    return tuple(_Table.model_validate(json.loads(path.read_text(encoding="utf-8"))).flags)


@functools.lru_cache(maxsize=4)
def _by_spelling(path: Path) -> dict[str, ForeignFlag]:
    out: dict[str, ForeignFlag] = {}
    for entry in foreign_flags(path):
        for s in entry.spellings():
            out.setdefault(s, entry)
    return out


def foreign_flag(spelling: str, path: Path = DATA_FILE) -> ForeignFlag | None:
    """The entry of a typed foreign spelling (``--max-model-len``, ``--max_model_len``,
    ``--max-model-len=4096``), else None."""
    name = spelling.split("=", 1)[0].strip()
    table = _by_spelling(path)
    hit = table.get(name)
    if hit is None and name.startswith("--"):
        hit = table.get("--" + name[2:].replace("_", "-"))
    return hit
