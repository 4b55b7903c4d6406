# Two commands on a fresh machine (each creates .venv from requirements.lock when needed):
#   make demo   trains the default experiment on generated data and prints the final metrics
#   make test   runs the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
WORKDIR ?= runs/demo
PYTEST_ARGS ?=

.PHONY: venv demo test clean-demo

$(STAMP): requirements.lock setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m longtext_jax.main --config=configs/default.py --workdir=$(WORKDIR)

test: $(STAMP)
	$(PY) -m pytest -n 2 -q $(PYTEST_ARGS) tests

clean-demo:
	rm -rf $(WORKDIR)
