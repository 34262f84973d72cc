# make demo   boot the all-in-one local DAC, show it working, tear it down
# make test   the whole suite on the installed wheel (scripts/test-installed), installing what
#             it needs; make test-dev runs it on the editable .venv instead, for a quick loop
# make lint   ruff and mypy, as configured in pyproject.toml
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
DEMO_DIR ?= .dac-local

.PHONY: deps demo test test-dev unit lint wheel schema bench clean

deps: $(VENV)/.installed
	@./scripts/install-system-deps

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV) || { ./scripts/install-system-deps && rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,lint]'
	touch $@

demo: deps
	./scripts/demo $(DEMO_DIR)

test: deps
	./scripts/test-installed

test-dev: deps
	$(PY) -m pytest -q tests

lint: deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

wheel: deps
	$(PY) -m pip wheel -q --no-deps -w dist .

unit: deps
	$(PY) -m pytest -q tests/unit

schema: deps
	$(PY) -m daccore.schema write

BENCHES = allocator pools_summary alloc_storm hot_path lifecycle concurrent_setups dacd_memory staging

# every bench runs even after one fails; the exit status says whether all met their budget
bench: deps
	@status=0; for b in $(BENCHES); do echo "== bench/$$b.py"; $(PY) bench/$$b.py || status=1; done; exit $$status

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis
