"""Well-known public checkpoints as data: what their ``config.json`` says, by Hugging Face id.

``kb/data/known_models.json`` lists entries that match ids exactly (``ids``,
case-insensitive) or by glob patterns (``patterns``, :mod:`fnmatch` on the
lower-cased id). Each entry holds only facts checked against the public
``config.json`` (architectures, ``model_type``, the quantization method SGLang
derives, MLA or not, layer and expert counts) and a ``source`` note; a field
left out is not known. :func:`known_model` answers one id: an exact id wins
over a pattern, a longer pattern over a shorter one. :func:`known_model_by_name`
matches a bare folder name (``/models/Kimi-K2-Thinking``) against the name
part of the exact ids, when exactly one entry has it. The engine turns the
answer into facts (:mod:`service.engine.facts.checkpoint`).
"""

from __future__ import annotations

import fnmatch
import functools
import json
from pathlib import Path

from pydantic import BaseModel, Field

from kb.errors import ConfigError

__all__ = ["DATA_FILE", "KnownModel", "known_model", "known_model_by_name", "known_models"]

DATA_FILE = Path(__file__).with_name("data") / "known_models.json"


class KnownModel(BaseModel):
    """One table entry: which ids it covers and the facts known about them."""

    ids: list[str] = Field(default_factory=list)
    patterns: list[str] = Field(default_factory=list)
    architectures: list[str] | None = None
    model_type: str | None = None
    #: the method SGLang's ModelConfig derives ("fp8", "compressed-tensors", "modelopt_fp4", ...);
    #: ``"none"`` for a checkpoint without quantization, None when not known
    quantization: str | None = None
    mla: bool | None = None
    num_hidden_layers: int | None = None
    num_experts: int | None = None
    source: str

    def label(self) -> str:
        """A short name for the entry (its first id or pattern), for provenance texts."""
        return (self.ids or self.patterns or ["?"])[0]

    def matched(self, model_id: str) -> str:
        """The id (as the table spells it) or pattern of this entry that ``model_id`` matches."""
        key = model_id.strip().strip("/").lower()
        hit = next((i for i in self.ids if i.lower() == key), None)
        if hit is None:
            hit = max((p for p in self.patterns if fnmatch.fnmatchcase(key, p.lower())),
                      key=len, default=None)
        return hit or self.label()


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> tuple[KnownModel, ...]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        models = tuple(KnownModel.model_validate(m) for m in raw["models"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"cannot read the known-model table {path}: {exc}",
                          details={"path": str(path)}) from exc
    for m in models:
        if not (m.ids or m.patterns):
            raise ConfigError(f"known-model entry without ids or patterns in {path}",
                              details={"source": m.source})
    return models


def known_models(path: Path | None = None) -> tuple[KnownModel, ...]:
    """Every entry of the table (read once per path)."""
    return _load(path or DATA_FILE)


def known_model(model_id: str, path: Path | None = None) -> KnownModel | None:
    """The entry for the Hugging Face id ``model_id`` (``org/name``), or None.

    Matching ignores case; an exact id beats any pattern, and among patterns
    the longest (most specific) one wins.
    """
    key = model_id.strip().strip("/").lower()
    if not key:
        return None
    best: tuple[int, KnownModel] | None = None
    for m in known_models(path):
        if any(key == i.lower() for i in m.ids):
            return m
        for p in m.patterns:
            if fnmatch.fnmatchcase(key, p.lower()) and (best is None or len(p) > best[0]):
                best = (len(p), m)
    return best[1] if best else None


def known_model_by_name(name: str, path: Path | None = None) -> tuple[str, KnownModel] | None:
    """``(full id, entry)`` for a folder name equal to the name part of exactly one known id."""
    key = name.strip().strip("/").lower()
    if not key or "/" in key:
        return None
    hits = {(i, id(m)): (i, m) for m in known_models(path) for i in m.ids
            if i.lower().rpartition("/")[2] == key}
    return next(iter(hits.values())) if len(hits) == 1 else None
