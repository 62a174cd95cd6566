"""Query embeddings without torch: a BERT sentence encoder's forward pass in NumPy.

Triage embeds one short query now and then (the search fallback), yet
importing sentence-transformers pulls in torch and transformers: some 450 MB
of resident memory in every API worker. :class:`NumpyBertEncoder` computes the
same vectors from the same model folder with NumPy alone:

* tokens from the folder's ``tokenizer.json`` (Hugging Face ``tokenizers``,
  truncated at the model's ``max_seq_length`` as sentence-transformers does);
* the BERT encoder (embeddings, post-norm self-attention and GELU feed-forward
  layers) with the weights of ``model.safetensors``, memory-mapped read-only,
  so only the pages a query touches become resident and API workers share them
  through the page cache;
* mean pooling over the tokens and L2 normalisation (the folder's
  ``modules.json`` must say exactly that).

Each text is encoded on its own, without padding, so no attention mask is
needed. Vectors match sentence-transformers' to float32 rounding (see
``tests/kb/test_minilm.py``). Folders of another shape raise
:class:`~kb.errors.ConfigError`; the KB then falls back to
sentence-transformers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kb.errors import ConfigError

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}

_lock = threading.Lock()
_encoders: dict[str, NumpyBertEncoder] = {}


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file as a read-only memory-mapped array.

    The format is an 8-byte little-endian header length, a JSON header of
    ``{name: {dtype, shape, data_offsets}}`` and the raw little-endian data.
    """
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out: dict[str, np.ndarray] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(meta["dtype"])
        if dtype is None:
            raise ConfigError(f"{path.name}: tensor {name} has unsupported dtype {meta['dtype']}")
        start, end = meta["data_offsets"]
        out[name] = raw[8 + size + start : 8 + size + end].view(dtype).reshape(meta["shape"])
    return out


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    out: np.ndarray = (x - mu) / np.sqrt(var + eps) * w + b
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to within 1.2e-7 (Numerical Recipes' ``erfcc``, Chebyshev fit)."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = (
        -z * z
        - 1.26551223
        + t
        * (
            1.00002368
            + t
            * (
                0.37409196
                + t
                * (
                    0.09678418
                    + t
                    * (
                        -0.18628806
                        + t
                        * (
                            0.27886807
                            + t
                            * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                        )
                    )
                )
            )
        )
    )
    r = 1.0 - t * np.exp(poly)
    out: np.ndarray = np.where(x >= 0, r, -r)
    return out


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


class NumpyBertEncoder:
    """A sentence-transformers BERT folder (mean pooling, normalised) run in NumPy.

    ``key`` and ``dim`` equal :class:`~kb.embedder.Embedder`'s for
    the same folder, so its vectors are comparable with the KB's.
    """

    def __init__(self, model_path: str) -> None:
        path = Path(model_path)
        if not path.is_absolute() or not path.is_dir():
            raise ConfigError(f"embedding model must be an absolute local folder: {model_path}")
        cfg = _read_json_object(path / "config.json")
        modules = [m.get("type", "") for m in _read_json_list(path / "modules.json")]
        pooling = (
            _read_json_object(path / "1_Pooling" / "config.json")
            if (path / "1_Pooling").is_dir()
            else {}
        )
        if (
            cfg.get("model_type") != "bert"
            or cfg.get("hidden_act") != "gelu"
            or cfg.get("position_embedding_type", "absolute") != "absolute"
            or [m.rsplit(".", 1)[-1] for m in modules] != ["Transformer", "Pooling", "Normalize"]
            or not pooling.get("pooling_mode_mean_tokens")
            or any(
                v
                for k, v in pooling.items()
                if k.startswith("pooling_mode_") and k != "pooling_mode_mean_tokens"
            )
        ):
            raise ConfigError(f"{path}: not a mean-pooled, normalised BERT sentence encoder")
        from tokenizers import Tokenizer

        self.path = str(path)
        self.name = path.name
        self.dim = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        max_len = (
            int(_read_json_object(path / "sentence_bert_config.json").get("max_seq_length") or 0)
            if (path / "sentence_bert_config.json").exists()
            else 0
        )
        self.max_len = min(
            max_len or cfg["max_position_embeddings"], cfg["max_position_embeddings"]
        )
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_len)
        w = load_safetensors(path / "model.safetensors")
        w = {k.removeprefix("bert."): v for k, v in w.items()}
        try:
            self.emb = (
                w["embeddings.word_embeddings.weight"],
                w["embeddings.position_embeddings.weight"],
                w["embeddings.token_type_embeddings.weight"][0],
                w["embeddings.LayerNorm.weight"],
                w["embeddings.LayerNorm.bias"],
            )
            self.layers = [
                self._layer(w, f"encoder.layer.{i}.") for i in range(int(cfg["num_hidden_layers"]))
            ]
        except KeyError as exc:
            raise ConfigError(f"{path}: missing BERT weight {exc}") from exc

    @staticmethod
    def _layer(w: dict[str, np.ndarray], p: str) -> dict[str, np.ndarray]:
        """One layer's weights as views of the mapped file (``x @ W.T`` for a Linear)."""
        a = p + "attention."
        return {
            "q_w": w[f"{a}self.query.weight"].T,
            "q_b": w[f"{a}self.query.bias"],
            "k_w": w[f"{a}self.key.weight"].T,
            "k_b": w[f"{a}self.key.bias"],
            "v_w": w[f"{a}self.value.weight"].T,
            "v_b": w[f"{a}self.value.bias"],
            "out_w": w[f"{a}output.dense.weight"].T,
            "out_b": w[f"{a}output.dense.bias"],
            "ln1_w": w[f"{a}output.LayerNorm.weight"],
            "ln1_b": w[f"{a}output.LayerNorm.bias"],
            "ff1_w": w[p + "intermediate.dense.weight"].T,
            "ff1_b": w[p + "intermediate.dense.bias"],
            "ff2_w": w[p + "output.dense.weight"].T,
            "ff2_b": w[p + "output.dense.bias"],
            "ln2_w": w[p + "output.LayerNorm.weight"],
            "ln2_b": w[p + "output.LayerNorm.bias"],
        }

    @property
    def key(self) -> str:
        return f"{self.name}:{self.dim}"

    def _forward(self, ids: list[int]) -> np.ndarray:
        word, pos, tok_type, ln_w, ln_b = self.emb
        n = len(ids)
        x = _layer_norm(word[ids] + pos[:n] + tok_type, ln_w, ln_b, self.eps)
        h, d = self.heads, self.dim // self.heads
        for L in self.layers:
            q, k, v = (
                (x @ L[f"{p}_w"] + L[f"{p}_b"]).reshape(n, h, d).transpose(1, 0, 2) for p in "qkv"
            )
            scores = q @ k.transpose(0, 2, 1) / np.sqrt(d)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(1, 0, 2).reshape(n, self.dim)
            x = _layer_norm(ctx @ L["out_w"] + L["out_b"] + x, L["ln1_w"], L["ln1_b"], self.eps)
            ff = _gelu(x @ L["ff1_w"] + L["ff1_b"]) @ L["ff2_w"] + L["ff2_b"]
            x = _layer_norm(ff + x, L["ln2_w"], L["ln2_b"], self.eps)
        pooled = x.mean(0)
        out: np.ndarray = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        return out

    def encode(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        """L2-normalised float32 vectors, one row per text."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(list(texts))
        return np.stack([self._forward(e.ids) for e in encodings]).astype(np.float32)


def _read_json(path: Path) -> object:
    try:
        data: object = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    return data


def _read_json_object(path: Path) -> dict[str, Any]:
    """A model file holding a JSON object (``config.json`` and the like)."""
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return data


def _read_json_list(path: Path) -> list[dict[str, Any]]:
    """A model file holding a JSON list of objects (``modules.json``)."""
    data = _read_json(path)
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        raise ConfigError(f"{path}: not a JSON list of objects")
    return data


def get_query_encoder(model_path: str) -> NumpyBertEncoder:
    """A process-wide cached :class:`NumpyBertEncoder` (ConfigError if the folder is no BERT)."""
    with _lock:
        enc = _encoders.get(model_path)
        if enc is None:
            enc = NumpyBertEncoder(model_path)
            _encoders[model_path] = enc
        return enc
