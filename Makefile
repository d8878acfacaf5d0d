# clew: `make demo` and `make test` do all set-up on a fresh machine.
# PY: the first of PY_CANDIDATES on PATH that is Python >= 3.11 (3.11 first: the lock and the CPU
# torch wheel are made for it; asked of the interpreter itself,
# so a pyenv shim without its version installed is skipped); `make PY=/path/to/python` overrides.
PY_CANDIDATES := python3.11 python3.12 python3.13 python3
PY_OK := import sys; sys.exit(sys.version_info < (3, 11))
ifeq ($(origin PY),undefined)
PY := $(firstword $(foreach p,$(PY_CANDIDATES),$(shell $(p) -c '$(PY_OK)' >/dev/null 2>&1 && echo $(p))))
endif
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
INDEX ?= .demo-index
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test check lint typecheck format bench eval clean

$(STAMP): pyproject.toml requirements.lock
	@test -n "$(PY)" || { echo "need Python >= 3.11: none of $(PY_CANDIDATES) on PATH is one; install one or run make PY=/path/to/python3.11"; exit 1; }
	@$(PY) -c '$(PY_OK)' >/dev/null 2>&1 || { echo "PY=$(PY) is not a Python >= 3.11 (or not on PATH)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==26.3
	# torch first, pinned to the CPU build (a plain requirement would pull a CUDA build)
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c requirements.lock -e '.[dev,torch,bench,serve,postgres,ray,langchain,llamaindex,haystack]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/clew ingest data/sample --index $(INDEX)
	$(BIN)/clew search "ERR-4413" --index $(INDEX) --k 3 --explain
	$(BIN)/clew search "customer was billed twice" --index $(INDEX) --k 3 --explain
	$(BIN)/clew search "what else broke after the pgbouncer migration" --index $(INDEX) --k 3 --explain
	$(BIN)/clew ask "What does ERR-4413 mean?" --index $(INDEX)
	$(BIN)/clew ask "which services are affected if pgbouncer-core runs out of connections" --index $(INDEX) --expand --rerank features
	$(BIN)/clew ask "Which volcano erupted in Iceland in 2010?" --index $(INDEX)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff format --check src tests bench
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

format: $(STAMP)
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

# Speed: embedder (onnx vs torch), ingest vs raw encoder, search per stage (SciFact and a
# synthetic 100k-chunk index, HNSW recall), BM25 vs tantivy and FTS5, the HTTP service under
# load, agent memory (ingest, recall, forget, footprint) -> bench/results/*.md
bench: $(STAMP)
	$(BIN)/python bench/embedder.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/search.py
	$(BIN)/python bench/lexical.py
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/memory.py

# Quality on ../shared/data (ablations, oracle, gates in eval/gates.yaml) -> bench/results/quality.md
eval: $(STAMP)
	$(BIN)/python bench/quality.py --feature-model eval/features-all.json

clean:
	rm -rf $(INDEX) bench/.work .pytest_cache .mypy_cache .ruff_cache
