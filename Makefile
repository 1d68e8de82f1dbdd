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

.PHONY: install demo test lint unit integration bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[test]"
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

test: lint
	$(BIN)/pytest -q -rA -p no:cacheprovider

clean:
	rm -rf $(VENV) $(DEMO_DIR) .parallel-rag build dist *.egg-info
