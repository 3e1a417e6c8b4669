# dlrm_exp — `make help` lists the targets. Every target installs what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The set `make install` put into $(VENV) last, recorded there: it stays the default for every
# target, so `make test` or `make gpu-check` after `make install TORCH=... FBGEMM=...` keeps it.
-include $(VENV)/.installed.mk
# The tested default set (CPU build); on CUDA machines: make install FBGEMM=fbgemm-gpu==1.8.0.
# Supported ranges (pyproject.toml; docs/install.md has the combinations tried):
#   torch 2.11 to 2.14, fbgemm-gpu(-cpu) 1.6.0 to 1.9.0, torchrec 1.6.1 to 1.9.2, matched by
#   release: torch 2.11 + fbgemm 1.6.0 + torchrec 1.6.1, 2.13 + 1.8.0 + 1.8.0, 2.14 + 1.9.0 + 1.9.2.
TORCH ?= torch==2.13.0
FBGEMM ?= fbgemm-gpu-cpu==1.8.0
TORCHREC ?= torchrec==1.8.0
# torchrec's run-time needs, pinned to the tested versions (pyproject.toml declares ranges).
PINS ?= torchmetrics==1.9.0 tensordict==0.15.3 pyre-extensions==0.0.32 iopath==0.1.10
# A value in single quotes for the shell, its own single quotes kept ('\'').
squote := '
shell_quote = '$(subst $(squote),$(squote)\$(squote)$(squote),$(1))'
# One stamp per set (its hash): asking for another set installs it.
STAMP := $(VENV)/.installed-$(shell printf '%s' $(call shell_quote,$(TORCH) $(FBGEMM) $(TORCHREC) $(PINS)) | md5sum | cut -c1-12)
# make compat: the oldest supported set, in its own environment.
COMPAT_VENV ?= .venv-compat
COMPAT_SET ?= TORCH=torch==2.11.0 FBGEMM=fbgemm-gpu-cpu==1.6.0 TORCHREC=torchrec==1.6.1

.DEFAULT_GOAL := help
.PHONY: help install run test lint format bench gpu-check compat tensorboard clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first (the local CPU wheel), then FBGEMM, then this package with torchrec's needs pinned;
# torchrec last and without its declared deps (they name the CUDA fbgemm-gpu and
# torchmetrics==1.0.3): installed before, every later pip call would print a red "ERROR: ...
# torchrec requires fbgemm-gpu, which is not installed" for a dependency that is deliberately
# the CPU build. setuptools' build chatter stays in pip's log (-q), but for its one warning about
# editable installs (harmless: the checkout is the package); errors still show.
# One FBGEMM build at a time: fbgemm-gpu and fbgemm-gpu-cpu both own the fbgemm_gpu package, so
# switching (FBGEMM=fbgemm-gpu==1.8.0 in a .venv made with the default) removes the other first.
FBGEMM_NAME = $(firstword $(subst =, ,$(subst <, ,$(subst >, ,$(FBGEMM)))))
OTHER_FBGEMM = $(if $(filter fbgemm-gpu-cpu,$(FBGEMM_NAME)),fbgemm-gpu,fbgemm-gpu-cpu)
$(STAMP): pyproject.toml | $(PY)
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "$(VENV) holds \
	Python $$($(PY) -c 'import platform; print(platform.python_version())'); dlrm_exp needs 3.11 \
	or newer: rm -rf $(VENV), then make install VENV=$(VENV) PYTHON=python3.11 (or newer)"; exit 1; }
	$(PY) -m pip install -q --upgrade pip
	if $(PY) -m pip show -q $(OTHER_FBGEMM) >/dev/null 2>&1; then \
		$(PY) -m pip uninstall -q -y $(OTHER_FBGEMM); fi
	$(PY) -m pip install "$(TORCH)" "$(FBGEMM)"
	$(PY) -m pip install -q -e ".[dev,launchers]" $(PINS)
	$(PY) -m pip install --no-deps "$(TORCHREC)"
	rm -f $(VENV)/.installed-*
	printf 'TORCH ?= %s\nFBGEMM ?= %s\nTORCHREC ?= %s\nPINS ?= %s\n' \
		$(call shell_quote,$(TORCH)) $(call shell_quote,$(FBGEMM)) \
		$(call shell_quote,$(TORCHREC)) $(call shell_quote,$(PINS)) \
		| sed 's/#/\\#/g' > $(VENV)/.installed.mk
	touch $@

install: $(STAMP) ## create .venv and install the pinned stack (torch, fbgemm, torchrec, hydra, ...)

run: $(STAMP) ## run the default experiment (tiny DLRM, synthetic data, CPU)
	$(PY) -m dlrm_exp $(ARGS)

# Two pytest-xdist workers: about a third of the suite's time is one-core Python (composing,
# planning, asserting) that a second worker overlaps with the other's runs; tests/parallel.py
# keeps the tests that share a run on one worker. TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2
test: $(STAMP) ## run the test suite (fast and end-to-end; under 8 minutes on 2 cores)
	$(PY) -m pytest -q $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS)) $(PYTEST_ARGS)

lint: $(STAMP) ## ruff lint and format check
	$(PY) -m ruff check src tests
	$(PY) -m ruff format --check src tests

format: $(STAMP) ## ruff format and autofix
	$(PY) -m ruff format src tests
	$(PY) -m ruff check --fix src tests

# Every benchmark runs, also past one that misses a target or fails; each appends its targets
# to $(BENCH_TARGETS), and the last step prints them as one table and fails if one is missed
# or a benchmark recorded none.
BENCHES := training preprocess loader parquet quality inference utilization fast
BENCH_TARGETS ?= outputs/bench_targets.jsonl
comma := ,
empty :=
space := $(empty) $(empty)
bench: $(STAMP) ## framework vs TorchRec loop, preprocessing, loaders, quality bars, inference, utilization; a table of targets, exit 1 if one is missed
	@mkdir -p $(dir $(BENCH_TARGETS)) && rm -f $(BENCH_TARGETS); status=0; \
	for bench in $(BENCHES); do \
		args=$$([ $$bench = training ] && echo "$(ARGS)"); \
		echo "== python -m dlrm_exp.bench.$$bench $$args"; \
		DLRM_EXP_BENCH_TARGETS=$(BENCH_TARGETS) $(PY) -m dlrm_exp.bench.$$bench $$args || status=1; \
	done; \
	$(PY) -m dlrm_exp.bench.targets $(BENCH_TARGETS) --expect $(subst $(space),$(comma),$(BENCHES)) \
		|| status=1; \
	exit $$status

# On a CUDA machine, install the CUDA stack first: make install TORCH=<cuda torch> FBGEMM=fbgemm-gpu==1.8.0
# Each CUDA test is one single-rank job: GPU_WORKERS of them share the GPU (tests/parallel.py).
GPU_WORKERS ?= 4
gpu-check: $(STAMP) ## the CUDA-marked tests: every sharding type with fused_uvm_caching + NCCL, CUDA pipelines (skips without CUDA)
	@$(PY) -c "import subprocess, sys, torch; sys.exit(0 if torch.cuda.is_available() else 4 \
		if torch.version.cuda is None and subprocess.run('nvidia-smi -L 2>/dev/null | grep -q ^GPU', \
		shell=True).returncode == 0 else 3)"; found=$$?; \
	if [ $$found = 0 ]; then \
		$(PY) -m pytest -q -m cuda tests $(if $(filter-out 0,$(GPU_WORKERS)),-n $(GPU_WORKERS)) $(PYTEST_ARGS); \
	elif [ $$found = 3 ]; then \
		echo "gpu-check skipped: no CUDA device here (torch.cuda.is_available() is False); the GPU path is not checked here"; \
	elif [ $$found = 4 ]; then \
		echo "gpu-check failed: this machine has a GPU (nvidia-smi) but the torch in $(VENV) is a CPU build: install a CUDA torch (docs/install.md)"; exit 1; \
	else \
		echo "gpu-check failed: torch does not import in $(VENV)"; exit 1; \
	fi

# A second environment with the oldest supported stack (torch 2.11 from PyPI brings its CUDA
# libraries: a few GB); runs the fast tests there. Not part of make test.
compat: ## the fast tests on the oldest supported torch / torchrec / fbgemm, in .venv-compat
	$(MAKE) install VENV=$(COMPAT_VENV) $(COMPAT_SET) PINS="torchmetrics==1.9.0 tensordict==0.15.3"
	$(COMPAT_VENV)/bin/python -c "import dlrm_exp, torch, torchrec, fbgemm_gpu; print('compat:', torch.__version__, torchrec.__version__, fbgemm_gpu.__version__)"
	$(COMPAT_VENV)/bin/python -m pytest -q -m "not slow and not cuda" $(PYTEST_ARGS)

tensorboard: $(STAMP) ## compare runs in TensorBoard (scalars + HParams)
	$(VENV)/bin/tensorboard --logdir outputs

clean: ## remove caches (keeps .venv and outputs/)
	rm -rf .pytest_cache .ruff_cache src/*.egg-info
