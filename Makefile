# sglang-triage: two commands set up a fresh machine.
#   make run   venv + install + ingest the default releases + serve on 127.0.0.1:8000
#   make test  venv + install (dev extras) + the whole suite (unit, integration, eval gate)

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export ANONYMIZED_TELEMETRY := False

.PHONY: run test install install-dev ingest serve lint bench clean browser sandbox

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch first, pinned: 2.13.0 is a CPU build already on disk here; an unpinned
# torch would pull several GB of CUDA wheels.
$(VENV)/.torch: | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.torch
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

ingest: install
	$(BIN)/sglang-triage ingest --defaults

serve: install
	@echo ""
	@echo "sglang-triage is starting on http://$(HOST):$(PORT)  (docs: http://$(HOST):$(PORT)/docs)"
	@echo "Try it:"
	@echo "  curl -s -X POST http://$(HOST):$(PORT)/triage -H 'content-type: text/plain' --data-binary @examples/seed_attempt1.log | python3 -m json.tool"
	@echo ""
	$(BIN)/sglang-triage serve --host $(HOST) --port $(PORT)

run: sandbox ingest serve

# Debian's chromium for the browser tests (tests/service/web); a no-op when it exists.
browser:
	sh scripts/install-browser.sh

# bubblewrap, the OS sandbox replay runs in (without it replay is off); a no-op when present.
sandbox:
	sh scripts/install-debian.sh /usr/bin/bwrap bubblewrap

test: install-dev browser sandbox
	$(BIN)/ruff check kb ingest service evals tests bench
	$(BIN)/lint-imports
	$(BIN)/pytest -q

# BENCH_ALL=1 adds bench/ingest_all.py (every release since 0.5.0, ~15 minutes).
BENCH_ALL ?=
bench: install-dev
	BENCH_ALL=$(BENCH_ALL) $(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
