"""The NumPy query encoder gives sentence-transformers' vectors for the same model folder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kb.embedder import get_embedder
from kb.errors import ConfigError
from kb.query_encoder import NumpyBertEncoder, load_safetensors
from service.settings import Settings

TEXTS = [
    "speculative_eagle_topk must be 1 with the trtllm_mha attention backend",
    "AssertionError in ServerArgs._handle_speculative_decoding",
    "def f(server_args):\n    assert server_args.tp_size % server_args.dp_size == 0, 'tp'",
    "Ünïcödé and 中文 text, emoji 🙂 and a very long tail " + "page_size " * 400,  # truncated
    "",
]


@pytest.fixture(scope="module")
def model_dir() -> str:
    return Settings().resolved_embedding_model()


def test_vectors_equal_sentence_transformers(model_dir: str) -> None:
    want = get_embedder(model_dir).encode(TEXTS)
    got = NumpyBertEncoder(model_dir).encode(TEXTS)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.abs(got - want).max() < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert NumpyBertEncoder(model_dir).encode([]).shape == (0, want.shape[1])


def test_the_api_process_never_imports_torch(model_dir: str) -> None:
    code = (
        "import sys; from kb.query_encoder import NumpyBertEncoder; "
        f"NumpyBertEncoder({model_dir!r}).encode(['topk']); "
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_weights_are_memory_mapped_read_only(model_dir: str) -> None:
    w = load_safetensors(Path(model_dir) / "model.safetensors")
    word = w["embeddings.word_embeddings.weight"]
    assert word.shape == (30522, 384) and not word.flags.writeable
    assert isinstance(word.base, np.memmap) or isinstance(word, np.memmap)


def test_other_folders_are_refused_for_the_fallback(model_dir: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="absolute local folder"):
        NumpyBertEncoder("relative/model")
    other = tmp_path / "model"
    shutil.copytree(model_dir, other, ignore=shutil.ignore_patterns("model.safetensors"))
    pooling = other / "1_Pooling" / "config.json"
    cfg = json.loads(pooling.read_text())
    pooling.write_text(
        json.dumps(cfg | {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True})
    )
    with pytest.raises(ConfigError, match="mean-pooled"):
        NumpyBertEncoder(str(other))


def test_the_kb_uses_it_unless_told_otherwise(cache_settings: Settings, tmp_path: Path) -> None:
    from kb.knowledge import KnowledgeBase

    settings = cache_settings.model_copy(update={"kb_dir": tmp_path / "kb"})
    fast = KnowledgeBase(settings)
    assert isinstance(fast.query_embedder, NumpyBertEncoder)
    slow = KnowledgeBase(settings.model_copy(update={"query_encoder": "sentence-transformers"}))
    assert slow.query_embedder is slow.embedder
    assert fast.query_embedder.key == slow.embedder.key
