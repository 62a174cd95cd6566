"""Well-known public checkpoints as data: what their ``config.json`` says, by Hugging Face id.

``kb/data/known_models.json`` lists entries that match ids exactly (``ids``,
case-insensitive) or by glob patterns (``patterns``, :mod:`fnmatch` on the
lower-cased id). Each entry holds only facts checked against the public
``config.json`` (architectures, ``model_type``, the quantization method SGLang
derives, MLA or not, layer and expert counts) and a ``source`` note; a field
left out is not known. The *shape* fields the checks past argument validation
read (:data:`SHAPE_FIELDS`: hidden and intermediate sizes, ``moe_intermediate_size``,
heads and KV heads, ``weight_block_size``, the hybrid/linear-attention layout,
the vision tower...) are entered only with a citation: each one is listed in
exactly one of the entry's ``sources`` (:class:`ShapeSource`), which names the
``owner/repo@commit:path`` (or URL) its value was read from. :meth:`KnownModel.cite`
answers where one value comes from; loading the table fails for a shape value
without a source. :func:`known_model` answers one id: an exact id wins
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

from pydantic import BaseModel, Field, model_validator

from kb.errors import ConfigError

__all__ = [
    "DATA_FILE",
    "SHAPE_FIELDS",
    "KnownModel",
    "ShapeSource",
    "known_model",
    "known_model_by_name",
    "known_models",
]

DATA_FILE = Path(__file__).with_name("data") / "known_models.json"

#: the fields that need a citation in ``sources`` (all named as in ``config.json``, except
#: ``has_vision``/``vision_model_type`` (a ``vision_config`` is present / its
#: ``model_type``) and ``full_attention_interval``/``layer_types`` for the hybrid layout)
SHAPE_FIELDS = (
    "hidden_size", "intermediate_size", "moe_intermediate_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "num_experts_per_tok", "weight_block_size",
    "kv_lora_rank", "q_lora_rank", "max_position_embeddings", "sliding_window",
    "full_attention_interval", "layer_types", "has_vision", "vision_model_type",
)  # fmt: skip


class ShapeSource(BaseModel):
    """Where some shape values of an entry were read: ``cite`` is ``owner/repo@commit:path``
    (or a URL), ``fields`` the values read there, ``note`` what the file is (a vendored
    copy of which checkpoint's ``config.json``)."""

    cite: str = Field(min_length=8)
    fields: list[str] = Field(min_length=1)
    note: str = ""


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
    # -- shape fields (each cited in ``sources``; None: not known)
    hidden_size: int | None = None
    intermediate_size: int | None = None
    moe_intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    num_experts_per_tok: int | None = None
    #: ``quantization_config.weight_block_size`` ([n, k]) of a block-quantized checkpoint
    weight_block_size: list[int] | None = None
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    max_position_embeddings: int | None = None
    sliding_window: int | None = None
    #: hybrid linear attention: every n-th layer is full attention (Qwen3-Next, Qwen3.5)
    full_attention_interval: int | None = None
    #: ``layer_types`` summarised as ``{type: count}`` (gpt-oss, Qwen3.5, Gemma 3...)
    layer_types: dict[str, int] | None = None
    has_vision: bool | None = None
    vision_model_type: str | None = None
    sources: list[ShapeSource] = Field(default_factory=list)

    @model_validator(mode="after")
    def _cited(self) -> KnownModel:
        """Every shape value set is listed in exactly one source; no source lists a field
        that is not a shape field or not set."""
        listed = [f for s in self.sources for f in s.fields]
        unknown = sorted(set(listed) - set(SHAPE_FIELDS))
        if unknown:
            raise ValueError(f"{self.label()}: sources list unknown fields {unknown}")
        dup = sorted({f for f in listed if listed.count(f) > 1})
        if dup:
            raise ValueError(f"{self.label()}: fields cited twice {dup}")
        unset = [f for f in listed if getattr(self, f) is None]
        if unset:
            raise ValueError(f"{self.label()}: sources cite fields with no value {unset}")
        uncited = [f for f in SHAPE_FIELDS if getattr(self, f) is not None and f not in listed]
        if uncited:
            raise ValueError(f"{self.label()}: shape values without a source {uncited}")
        if self.weight_block_size is not None and (
            len(self.weight_block_size) != 2 or min(self.weight_block_size) <= 0
        ):
            raise ValueError(f"{self.label()}: weight_block_size must be [n, k] > 0")
        return self

    def shape(self) -> dict[str, object]:
        """The shape values known for this entry (``{field: value}``, cited ones only)."""
        return {f: getattr(self, f) for f in SHAPE_FIELDS if getattr(self, f) is not None}

    def cite(self, name: str) -> str | None:
        """The source of shape field ``name`` (``cite`` and ``note``), or None when not known."""
        src = next((s for s in self.sources if name in s.fields), None)
        if src is None:
            return None
        return f"{src.cite} ({src.note})" if src.note else src.cite

    def label(self) -> str:
        """A short name for the entry (its first id or pattern), for provenance texts."""
        return (self.ids or self.patterns or ["?"])[0]

    def matched(self, model_id: str) -> str:
        """The id (as the table spells it) or pattern of this entry that ``model_id`` matches."""
        key = model_id.strip().strip("/").lower()
        hit = next((i for i in self.ids if i.lower() == key), None)
        if hit is None:
            hit = max(
                (p for p in self.patterns if fnmatch.fnmatchcase(key, p.lower())),
                key=len,
                default=None,
            )
        return hit or self.label()


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> tuple[KnownModel, ...]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        models = tuple(KnownModel.model_validate(m) for m in raw["models"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"cannot read the known-model table {path}: {exc}", details={"path": str(path)}
        ) from exc
    for m in models:
        if not (m.ids or m.patterns):
            raise ConfigError(
                f"known-model entry without ids or patterns in {path}", details={"source": m.source}
            )
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
    hits = {
        (i, id(m)): (i, m)
        for m in known_models(path)
        for i in m.ids
        if i.lower().rpartition("/")[2] == key
    }
    return next(iter(hits.values())) if len(hits) == 1 else None
