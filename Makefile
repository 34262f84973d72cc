# make demo   boot the all-in-one local DAC, show it working, tear it down
# make test   the whole suite (unit, store, system, e2e on Slurm 22.05/24.11/26.05) on the
#             installed wheel (scripts/test-installed), installing what it needs; the store
#             suite again on etcd 3.5 and 3.6; make test-dev runs it on the editable .venv
# make lint   ruff (lint and format check) and mypy, as configured in pyproject.toml
# Debian's own interpreter, as a site installs dac (README, docs/admin.md): one every user can
# run, whatever root's PATH puts first (a pyenv build under /root is root's alone)
PYTHON ?= /usr/bin/python3
# a TLS-re-signing proxy's CA, given as SSL_CERT_FILE, reaches pip too (the local DAC's own
# downloads take it and the proxy variables from daclocal/fetching.py)
ifneq ($(SSL_CERT_FILE),)
export PIP_CERT ?= $(SSL_CERT_FILE)
endif
VENV   := .venv
PY     := $(VENV)/bin/python
DEMO_DIR ?= .dac-local

.PHONY: deps system-deps demo test test-dev unit lint wheel schema bench clean libdacstage

deps: system-deps $(VENV)/.installed

# first: python3-venv among them, so the venv below is made once, without ensurepip's error
system-deps:
	@./scripts/install-system-deps

$(VENV)/.installed: pyproject.toml setup.py | system-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# setuptools warns of every editable install (folders named as packages): that is this
	@# checkout's layout, on purpose; -q keeps pip's own errors
	PYTHONWARNINGS=ignore::UserWarning $(PY) -m pip install -q -e '.[test,lint]'
	touch $@

demo: deps
	./scripts/demo $(DEMO_DIR)

# then the store suite on etcd 3.5 (Debian 13's) and 3.6 (built from the Go module proxy), fetched
# or built on first use and cached in /var/cache/dac-local (daclocal/etcd_releases.py)
ETCD_RELEASES_TOO = 3.5 3.6

# the C library of in-job stages and its example, with the system's cc (libdacstage/Makefile);
# the tests build it again from the installed package's sources, as users do
libdacstage:
	$(MAKE) -C libdacstage

test: deps libdacstage
	PYTHON="$(PYTHON)" DAC_TEST_ETCD_RELEASES_TOO="$(ETCD_RELEASES_TOO)" ./scripts/test-installed

test-dev: deps libdacstage
	@status=0; $(PY) -m pytest -q tests || status=1; \
	for e in $(ETCD_RELEASES_TOO); do echo "== tests/store on etcd $$e"; \
	  DAC_TEST_ETCD=$$e $(PY) -m pytest -q tests/store || status=1; done; exit $$status

lint: deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

wheel: deps
	rm -rf build/lib build/bdist.*  # stale copies of moved modules would ship
	$(PY) -m pip wheel -q --no-deps -w dist .

unit: deps
	$(PY) -m pytest -q tests/unit

schema: deps
	$(PY) -m daccore.settings.schema write

BENCHES = allocator pools_summary alloc_storm hot_path lifecycle concurrent_setups dacd_memory staging faults fuzz usersvc_flood injob_staging

# every bench runs even after one fails; the exit status says whether all met their budget
bench: deps
	@status=0; for b in $(BENCHES); do echo "== bench/$$b.py"; $(PY) bench/$$b.py || status=1; done; exit $$status

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis
