"""Facts about the checkpoint itself: its ``config.json``, read offline, or a table entry.

A fix can clash with what the checkpoint is (its quantization method, its
architecture, MLA or not), which the launch flags do not say. This module
finds that out without the network and without running any of the user's
code, in this order:

1. a local model folder named by the log or the request (an absolute
   ``--model-path`` that exists on this machine) holding ``config.json``;
2. a Hugging Face id (``org/name``) whose snapshot is in the local Hugging Face
   cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
   ``~/.cache/huggingface/hub``: ``models--org--name/snapshots/<rev>/config.json``,
   the revision ``refs/main`` names first);
3. the table of well-known public models in the KB (:mod:`kb.known_models`),
   by id, by the ``models--org--name`` part of a cache path, by the last two
   path components, or by a folder name equal to exactly one known id's name.

``config.json`` is read as plain JSON (at most :data:`MAX_CONFIG_BYTES`; no
``trust_remote_code``, no imports); an oversized or invalid file is skipped
with a note and the table is tried instead. Only whitelisted fields are kept
(:data:`HF_FIELDS`). :func:`checkpoint_facts` turns a :class:`CheckpointInfo`
into evaluator facts keyed as :func:`~service.engine.expr.interpreter.fact_key`
spells SGLang's reads (``model_arch``, ``self.get_model_config().quantization``,
``self.use_mla_backend()``, ``model_config_of(args).hf_config.<field>`` ...), each
with a ``fact`` provenance naming its source. An explicit ``--quantization``
wins for what SGLang's ``ModelConfig.quantization`` would be; the checkpoint's
own method stays visible as ``checkpoint_quantization`` (and in
``hf_config.quantization_config``), so a fix that contradicts it can be judged.

The *shape* of the checkpoint (hidden and intermediate sizes, ``moe_intermediate_size``,
heads, KV heads, ``weight_block_size``, the hybrid layout, the vision tower) becomes
facts under the names SGLang's checks read them by (:mod:`.shape`); a table value's
provenance cites the file it was read from (``known model <id>: <source>``).
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kb.conditions import fact_key
from kb.known_models import KnownModel, known_model, known_model_by_name
from service.engine.expr.interpreter import Provenance, Value
from service.engine.facts.shape import SHAPE_INTS, shape_rows

__all__ = [
    "HF_FIELDS",
    "MAX_CONFIG_BYTES",
    "CheckpointFact",
    "CheckpointInfo",
    "checkpoint_facts",
    "checkpoint_info",
    "fact_rows",
    "flag_value",
    "hf_hub_cache",
    "info_from_config",
    "read_config",
]

MAX_CONFIG_BYTES = 2 * 1024 * 1024
Source = Literal["config.json", "hf_cache", "known_model"]

#: the ``config.json`` fields kept (top level and inside ``text_config``)
HF_FIELDS = frozenset({
    "architectures", "model_type", "quantization_config", "compression_config", "kv_lora_rank",
    "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "index_topk",
    "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size",
    "vocab_size", "head_dim", "n_routed_experts", "num_experts", "num_local_experts",
    "num_experts_per_tok", "mlp_hidden_act", "hidden_act", "sliding_window", "torch_dtype",
    "num_nextn_predict_layers", "dual_chunk_attention_config", "max_position_embeddings",
    "intermediate_size", "moe_intermediate_size", "full_attention_interval", "layer_types",
    "vision_config",
})  # fmt: skip
_EXPERT_FIELDS = ("n_routed_experts", "num_experts", "num_local_experts")
# architectures SGLang treats as MLA (ModelConfig's attention_arch), besides a kv_lora_rank
_MLA_ARCHS = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLMNextN", "KimiK25ForConditionalGeneration", "KimiVLForConditionalGeneration",
    "KimiLinearForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM",
    "MistralLarge3ForCausalLM", "MiniCPM3ForCausalLM", "LongcatFlashForCausalLM",
})  # fmt: skip
# is_deepseek_nsa()/is_deepseek_dsa(): these architectures with index_topk, in every release
_DSA_ARCHS = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN",
    "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM",
})  # fmt: skip
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,95}$")
_CACHE_DIR = re.compile(r"^models--([\w.-]+)--([\w.-]+)$")


@dataclass(frozen=True)
class CheckpointInfo:
    """What is known about one checkpoint, and where it was read."""

    model: str
    source: Source
    detail: str  # the config.json path, or the table entry
    hf_config: dict[str, Any] = field(default_factory=dict)  # whitelisted fields
    quantization: str | None = None  # SGLang's name; "none": not quantized; None: not known
    mla: bool | None = None
    notes: tuple[str, ...] = ()
    #: field -> where its value was read, when not ``detail`` (a table entry's citations)
    cites: dict[str, str] = field(default_factory=dict)
    #: a table entry's layout facts (``layer_types`` summary, ``has_vision``...)
    layout: dict[str, Any] = field(default_factory=dict)

    @property
    def architectures(self) -> list[str]:
        archs = self.hf_config.get("architectures")
        return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []

    def text_field(self, name: str) -> Any:
        """``name`` from ``text_config`` when the model nests one, else from the top level."""
        text = self.hf_config.get("text_config")
        if isinstance(text, dict) and name in text:
            return text[name]
        return self.hf_config.get(name)


@dataclass(frozen=True)
class CheckpointFact:
    """One row of ``TriageResult.model_facts`` and the evaluator fact keys it feeds."""

    name: str
    value: Any
    source: Source
    detail: str
    keys: tuple[str, ...] = ()


# ------------------------------------------------------------------------------- reading


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache folder, as ``huggingface_hub`` resolves it."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _cached_config(model_id: str) -> Path | None:
    """``config.json`` of ``model_id``'s snapshot in the local cache (``refs/main`` first)."""
    org, _, name = model_id.partition("/")
    repo = hf_hub_cache() / f"models--{org}--{name}"
    snaps = repo / "snapshots"
    if not snaps.is_dir():
        return None
    try:
        ref = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        ref = ""
    if re.fullmatch(r"[0-9a-f]{40}", ref) and (snaps / ref / "config.json").is_file():
        return snaps / ref / "config.json"
    found = [p for p in snaps.glob("*/config.json") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def read_config(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(config, None)`` for a readable JSON object of at most :data:`MAX_CONFIG_BYTES`,
    else ``(None, note)`` saying why it was skipped."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            return None, f"{path} is {size} bytes (more than {MAX_CONFIG_BYTES}): not read"
        return _parse(str(path), path.stat().st_mtime_ns, size), None
    except _Skip as exc:
        return None, f"{path}: {exc}"
    except OSError as exc:
        return None, f"{path} could not be read: {exc.strerror or exc}"


class _Skip(Exception):
    pass


@functools.lru_cache(maxsize=64)
def _parse(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    """The whitelisted fields of the JSON object in ``path`` (memoised on mtime and size)."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise _Skip(f"more than {MAX_CONFIG_BYTES} bytes: not read")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise _Skip(f"not valid JSON ({type(exc).__name__}): ignored") from None
    if not isinstance(raw, dict):
        raise _Skip("not a JSON object: ignored")
    out = {k: v for k, v in raw.items() if k in HF_FIELDS}
    text = raw.get("text_config")
    if isinstance(text, dict):
        out["text_config"] = {k: v for k, v in text.items() if k in HF_FIELDS}
    for cfg in (out, out.get("text_config") or {}):
        vision = cfg.get("vision_config")
        if isinstance(vision, dict):  # only what the facts say: a tower, and which
            cfg["vision_config"] = {
                k: vision[k] for k in ("model_type", "architectures") if k in vision
            }
        elif "vision_config" in cfg:
            del cfg["vision_config"]
    return out


def _quantization(hf: dict[str, Any], extra: dict[str, Any] | None) -> str:
    """The method SGLang's ``ModelConfig`` derives: ``quant_method`` (ModelOpt ``quant_algo``
    mapped to ``modelopt_fp4``/``modelopt_fp8``), ``compression_config``, or
    ``hf_quant_config.json``; ``"none"`` without any of them."""
    text_config = hf.get("text_config")
    text: dict[str, Any] = text_config if isinstance(text_config, dict) else {}
    cfg = hf.get("quantization_config") or text.get("quantization_config")
    if not isinstance(cfg, dict):
        cfg = hf.get("compression_config") or text.get("compression_config")
        if isinstance(cfg, dict):
            return str(cfg.get("quant_method") or "compressed-tensors").lower()
        cfg = (extra or {}).get("quantization") if isinstance(extra, dict) else None
        if not isinstance(cfg, dict):
            return "none"
        cfg = {"quant_method": "modelopt", **cfg}
    method = str(cfg.get("quant_method") or "modelopt").lower()
    if method == "modelopt":
        algo = str(cfg.get("quant_algo") or "").upper()
        if "FP4" in algo:
            return "modelopt_fp4"
        if "FP8" in algo:
            return "modelopt_fp8"
    return method


def info_from_config(
    model: str,
    hf: dict[str, Any],
    source: Source,
    detail: str,
    hf_quant: dict[str, Any] | None = None,
    notes: tuple[str, ...] = (),
) -> CheckpointInfo:
    """A :class:`CheckpointInfo` from whitelisted ``config.json`` fields."""
    info = CheckpointInfo(model, source, detail, hf, _quantization(hf, hf_quant), None, notes)
    mla = info.text_field("kv_lora_rank") is not None or bool(set(info.architectures) & _MLA_ARCHS)
    return CheckpointInfo(model, source, detail, hf, info.quantization, mla, notes)


def _info_from_known(
    model: str, entry: KnownModel, matched: str, how: str, notes: tuple[str, ...]
) -> CheckpointInfo:
    """The entry as a ``config.json``-like dict: a vision model's text shape is nested in
    ``text_config`` (as its ``config.json`` nests it), a ``weight_block_size`` in
    ``quantization_config``; each shape value keeps its citation."""
    hf: dict[str, Any] = {}
    if entry.architectures:
        hf["architectures"] = list(entry.architectures)
    for name in ("model_type", "num_hidden_layers", "num_experts"):
        if getattr(entry, name) is not None:
            hf[name] = getattr(entry, name)
    shape = entry.shape()
    text: dict[str, Any] = hf
    if entry.has_vision:  # the layer and expert counts are the text model's too
        text = hf.setdefault(
            "text_config", {k: hf.pop(k) for k in ("num_hidden_layers", "num_experts") if k in hf}
        )
    for name in SHAPE_INTS:
        if isinstance(shape.get(name), int):
            text[name] = shape[name]
    if entry.weight_block_size is not None and entry.quantization not in (None, "none"):
        hf["quantization_config"] = {
            "quant_method": entry.quantization,
            "weight_block_size": list(entry.weight_block_size),
        }
    mla = entry.mla
    if mla is None and entry.architectures:
        mla = bool(set(entry.architectures) & _MLA_ARCHS)
    detail = f"known-model table: {matched} ({how}); {entry.source}"
    cites = {f: f"known model {matched}: {entry.cite(f)}" for f in shape}
    layout: dict[str, Any] = {
        k: shape[k] for k in ("layer_types", "has_vision", "vision_model_type") if k in shape
    }
    return CheckpointInfo(
        model, "known_model", detail, hf, entry.quantization, mla, notes, cites, layout
    )


def _local_config(
    folder: Path, model: str, source: Source, notes: list[str]
) -> CheckpointInfo | None:
    cfg_path = folder / "config.json"
    hf, note = read_config(cfg_path)
    if hf is None:
        notes.append(note or f"{cfg_path}: not read")
        return None
    extra = None
    quant_file = folder / "hf_quant_config.json"
    if "quantization_config" not in hf and quant_file.is_file():
        try:
            if quant_file.stat().st_size <= MAX_CONFIG_BYTES:
                loaded = json.loads(quant_file.read_text(encoding="utf-8"))
                extra = loaded if isinstance(loaded, dict) else None
        except (OSError, ValueError, RecursionError):
            notes.append(f"{quant_file}: not valid JSON, ignored")
    return info_from_config(model, hf, source, str(cfg_path), extra, tuple(notes))


def checkpoint_info(model: str | None) -> CheckpointInfo | None:
    """What is known about ``model`` (a path or a Hugging Face id), offline; None if nothing.

    See the module docstring for the order. A relative path is never read (it is
    relative to the user's machine, not this one).
    """
    if not model or not model.strip() or len(model) > 1024 or "\x00" in model:
        return None
    model = model.strip()
    notes: list[str] = []
    ids: list[tuple[str, str]] = []  # (candidate id, how it was found)
    if model.startswith("/"):
        folder = Path(model)
        try:
            if (folder / "config.json").is_file():
                found = _local_config(folder, model, "config.json", notes)
                if found is not None:
                    return found
        except OSError:
            pass
        parts = [p for p in folder.parts if p not in ("/", "")]
        cache = next((m for p in reversed(parts) if (m := _CACHE_DIR.match(p))), None)
        if cache is not None:
            ids.append((f"{cache[1]}/{cache[2]}", "from the Hugging Face cache path"))
        if len(parts) >= 2:
            ids.append((f"{parts[-2]}/{parts[-1]}", "from the path's last two components"))
    elif _HF_ID.match(model):
        cfg = _cached_config(model)
        if cfg is not None:
            found = _local_config(cfg.parent, model, "hf_cache", notes)
            if found is not None:
                return found
        ids.append((model, "by id"))
    for candidate, how in ids:
        entry = known_model(candidate)
        if entry is not None:
            return _info_from_known(model, entry, entry.matched(candidate), how, tuple(notes))
    base = model.rstrip("/").rpartition("/")[2]
    by_name = known_model_by_name(base) if model.startswith("/") else None
    if by_name is not None:
        return _info_from_known(model, by_name[1], by_name[0], "by the folder name", tuple(notes))
    if notes:  # an unreadable config and no table entry: say so
        return CheckpointInfo(model, "config.json", notes[0], {}, None, None, tuple(notes))
    return None


# --------------------------------------------------------------------------------- facts


def _keys(*exprs: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(fact_key(e) for e in exprs))


_ARCH_KEYS = _keys(
    "model_arch",
    "self.get_model_config().hf_config.architectures",
    "model_config.hf_config.architectures",
    "hf_config.architectures",
    "model.hf_config.architectures",
)
_QUANT_KEYS = _keys("self.get_model_config().quantization")
_MLA_KEYS = _keys(
    "self.use_mla_backend()",
    "use_mla_backend(args)",
    "use_mla_backend(view)",
    "use_mla_backend(server_args)",
)
_DSA_KEYS = _keys(
    "is_deepseek_nsa(self.get_model_config().hf_config)",
    "is_deepseek_nsa(hf_config)",
    "is_deepseek_dsa(model_config_of(args).hf_config)",
    "is_deepseek_dsa(model_config_of(view).hf_config)",
    "is_deepseek_dsa(hf_config)",
)
_CONFIG_ROOTS = _keys("model_config_of(args)", "model_config_of(view)", "self.get_model_config()")
_FIELD_ROOTS = ("get_model_config().hf_config", "model_config_of(args).hf_config")


def fact_rows(info: CheckpointInfo, user_quantization: str | None = None) -> list[CheckpointFact]:
    """The model facts of ``info`` (one row per fact) with the evaluator keys each feeds."""
    rows: list[CheckpointFact] = []

    def add(name: str, value: Any, keys: tuple[str, ...] = (), detail: str = "") -> None:
        rows.append(CheckpointFact(name, value, info.source, detail or info.detail, keys))

    archs = info.architectures
    if archs:
        add("architecture", archs[0], _ARCH_KEYS + _CONFIG_ROOTS)
    model_type = info.hf_config.get("model_type")
    if isinstance(model_type, str):
        add(
            "model_type",
            model_type,
            tuple(f"{r}.model_type" for r in _FIELD_ROOTS) + ("checkpoint_model_type",),
        )
    if info.quantization is not None:
        keys: tuple[str, ...] = ("checkpoint_quantization",)
        if not user_quantization:
            keys += _QUANT_KEYS
        add("quantization", info.quantization, keys)
    if info.mla is not None:
        add("mla", info.mla, _MLA_KEYS + ("checkpoint_is_mla",))
    if archs and (archs[0] not in _DSA_ARCHS or info.source != "known_model"):
        dsa = archs[0] in _DSA_ARCHS and info.text_field("index_topk") is not None
        add("dsa_indexer", dsa, _DSA_KEYS)
    experts = next((v for f in _EXPERT_FIELDS if isinstance(v := info.text_field(f), int)), None)
    if experts is not None:
        add("num_experts", experts, ("checkpoint_num_experts",))
    known = info.layout if info.source == "known_model" else None
    for name, value, keys, cited in shape_rows(
        info.hf_config, info.quantization, user_quantization, known
    ):
        add(name, value, keys, info.cites.get(cited, ""))
    return rows


def flag_value(argv: list[str] | None, flag: str) -> str | None:
    """The value of the last ``flag X`` / ``flag=X`` in ``argv`` (None when absent)."""
    value = None
    args = list(argv or [])
    for k, arg in enumerate(args):
        if arg == flag and k + 1 < len(args) and not args[k + 1].startswith("--"):
            value = args[k + 1]
        elif arg.startswith(flag + "="):
            value = arg.partition("=")[2]
    return value


def checkpoint_facts(
    info: CheckpointInfo,
    user_quantization: str | None = None,
    rows: list[CheckpointFact] | None = None,
    declared_arch: str | None = None,
) -> dict[str, Value]:
    """Evaluator facts for ``info``; ``user_quantization`` is the launch's ``--quantization``.

    Without ``--quantization``, ``self.get_model_config().quantization`` is the
    checkpoint's method (``None`` when it has none), as SGLang's ``ModelConfig``
    derives it; with it, that key is left to the flag. ``checkpoint_quantization``,
    ``checkpoint_is_mla``, ``checkpoint_model_type`` and ``checkpoint_num_experts``
    are bare names for rule cards. A ``declared_arch`` (the request's explicit
    ``model_arch``) that differs from the checkpoint's wins: the architecture keys
    are left to it and the config dicts carry it instead.
    """
    rows = rows if rows is not None else fact_rows(info, user_quantization)
    out: dict[str, Value] = {}
    quant = info.quantization if info.quantization != "none" else None
    overridden = bool(declared_arch) and declared_arch not in info.architectures[:1]
    for row in rows:
        prov = Provenance("fact", f"{row.name} {row.value!r} from {row.source} {row.detail}")
        for key in row.keys:
            if key in _CONFIG_ROOTS or (row.name == "architecture" and overridden):
                continue
            value: Any = row.value
            if row.name == "architecture" and key != "model_arch":
                value = info.architectures
            elif row.name == "quantization":
                value = quant
            out[key] = Value(value, prov)
    if info.architectures:  # without one, these dicts would hide the name-guessed architecture
        hf = dict(info.hf_config)
        if overridden:
            hf["architectures"] = [declared_arch]
        config: dict[str, Any] = {"hf_config": hf, "hf_text_config": hf.get("text_config") or hf}
        if info.quantization is not None and not user_quantization:
            config["quantization"] = quant
        prov = Provenance("fact", f"model config from {info.source} {info.detail}")
        for key in _CONFIG_ROOTS:
            out[key] = Value(config, prov)
    return out
