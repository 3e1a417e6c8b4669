# dlrm_exp — `make help` lists the targets. Every target installs what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build by default; on CUDA machines: make install FBGEMM=fbgemm-gpu==1.8.0
TORCH ?= torch==2.13.0
FBGEMM ?= fbgemm-gpu-cpu==1.8.0
TORCHREC ?= torchrec==1.8.0
STAMP := $(VENV)/.installed-$(subst ==,-,$(FBGEMM))

.DEFAULT_GOAL := help
.PHONY: help install run test test-all lint format bench gpu-check tensorboard clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first (the local CPU wheel), then FBGEMM; torchrec without its declared deps (they name
# the CUDA fbgemm-gpu and torchmetrics==1.0.3); then this package with its pinned needs.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install "$(TORCH)" "$(FBGEMM)"
	$(PY) -m pip install --no-deps "$(TORCHREC)"
	$(PY) -m pip install -e ".[dev,launchers]"
	touch $@

install: $(STAMP) ## create .venv and install the pinned stack (torch, fbgemm, torchrec, hydra, ...)

run: $(STAMP) ## run the default experiment (tiny DLRM, synthetic data, CPU)
	$(PY) -m dlrm_exp $(ARGS)

test: $(STAMP) ## run the test suite (fast and end-to-end; under 10 minutes on 2 cores)
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP) ## ruff lint and format check
	$(PY) -m ruff check src tests
	$(PY) -m ruff format --check src tests

format: $(STAMP) ## ruff format and autofix
	$(PY) -m ruff format src tests
	$(PY) -m ruff check --fix src tests

bench: $(STAMP) ## framework vs TorchRec loop, preprocessing, loaders, quality bars, inference, utilization
	$(PY) -m dlrm_exp.bench.training $(ARGS)
	$(PY) -m dlrm_exp.bench.preprocess
	$(PY) -m dlrm_exp.bench.loader
	$(PY) -m dlrm_exp.bench.quality
	$(PY) -m dlrm_exp.bench.inference
	$(PY) -m dlrm_exp.bench.utilization

# On a CUDA machine, install the CUDA stack first: make install TORCH=<cuda torch> FBGEMM=fbgemm-gpu==1.8.0
gpu-check: $(STAMP) ## the CUDA-marked tests: every sharding type with fused_uvm_caching + NCCL, CUDA pipelines (skips without CUDA)
	@if $(PY) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then \
		$(PY) -m pytest -q -m cuda tests/gpu $(PYTEST_ARGS); \
	else \
		echo "gpu-check skipped: no CUDA device here (torch.cuda.is_available() is False); the GPU path is unverified"; \
	fi

tensorboard: $(STAMP) ## compare runs in TensorBoard (scalars + HParams)
	$(VENV)/bin/tensorboard --logdir outputs

clean: ## remove caches (keeps .venv and outputs/)
	rm -rf .pytest_cache .ruff_cache src/*.egg-info
