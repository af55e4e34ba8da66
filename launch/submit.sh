#!/usr/bin/env bash
# Submit an adarl run to a running Ray cluster as a Ray job.
#
#   launch/submit.sh [HYDRA OVERRIDES...]
#   launch/submit.sh [ray job submit options...] -- [HYDRA OVERRIDES...]
#
#   e.g. RAY_ADDRESS=http://10.0.0.1:8265 launch/submit.sh --no-wait -- \
#          +experiment=ada_seq_balance hydra.run.dir=/shared/adarl/runs/seq_balance_1
#
# Runs `python -m adarl.launch OVERRIDES` on the head node, in a copy of this checkout
# (`--working-dir`, without .venv, outputs, wandb and other local artifacts), with the Python
# environment the head was started with (launch/start_head.sh). Environment:
#   RAY_ADDRESS       the head's job API (default http://127.0.0.1:8265)
#   ADARL_ENTRYPOINT  the command the overrides are appended to (default "python -m adarl.launch")
#   ADARL_WORKING_DIR the directory shipped as the job's working dir (default: this checkout)
#   WANDB_API_KEY, WANDB_MODE, WANDB_ENTITY, WANDB_PROJECT, WANDB_BASE_URL: forwarded to the job
#                     when set (note: the job's runtime env, key included, shows in the dashboard)
#   RAY_AUTH_MODE     set to "token" when the cluster uses token authentication
# Without `hydra.run.dir=/absolute/path`, outputs land in the job's temporary working directory
# on the head node, which Ray deletes; give a path on the head's disk or a shared filesystem.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

submit_options=()
overrides=()
if [[ " $* " == *" -- "* ]]; then
  while (($# > 0)) && [[ "$1" != "--" ]]; do
    submit_options+=("$1")
    shift
  done
  shift # the "--"
fi
overrides=("$@")

read -r -a entrypoint <<<"${ADARL_ENTRYPOINT:-python -m adarl.launch}"
address="${RAY_ADDRESS:-http://127.0.0.1:8265}"

if [[ -z "${ADARL_ENTRYPOINT:-}" ]] && [[ " ${overrides[*]-} " != *" hydra.run.dir="* ]]; then
  echo "adarl: note: no hydra.run.dir=/absolute/path given: the run directory will be inside" \
    "the job's temporary working directory on the head node (deleted by Ray)." >&2
fi

# Built with Python for correct JSON quoting of whatever the environment holds.
runtime_env_json="$("$(dirname "$RAY_BIN")/python" - <<'PY'
import json, os

# Never uploaded: environments, run outputs, caches, VCS data (Ray also honours .gitignore).
# gitignore syntax; no trailing "/", so whole directories are skipped without being walked.
excludes = [
    "/.venv", "/venv", "/.git", "/outputs", "/multirun", "/runs", "/wandb", "/build", "/dist",
    "/.cache", "__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", ".ruff_cache",
    ".hypothesis", ".ipynb_checkpoints",
]
forwarded = ["WANDB_API_KEY", "WANDB_MODE", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_BASE_URL"]
env_vars = {name: os.environ[name] for name in forwarded if os.environ.get(name)}
print(json.dumps({"excludes": excludes, "env_vars": env_vars}))
PY
)"

exec "$RAY_BIN" job submit \
  --address="$address" \
  --working-dir="${ADARL_WORKING_DIR:-$ADARL_ROOT}" \
  --runtime-env-json="$runtime_env_json" \
  ${submit_options[@]+"${submit_options[@]}"} \
  -- "${entrypoint[@]}" ${overrides[@]+"${overrides[@]}"}
