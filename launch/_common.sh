# shellcheck shell=bash
# Sourced by the launch scripts. Finds the Ray CLI of the environment adarl is installed in and
# puts that environment first on PATH: Ray runs job entrypoints (`python -m adarl.launch`) with
# the PATH the node was started with, and a bare `python` from elsewhere lacks adarl's packages
# (measured: without this, jobs ran the system Python).
#
# Override with RAY_BIN=/path/to/env/bin/ray.

ADARL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ -z "${RAY_BIN:-}" ]]; then
  if command -v ray >/dev/null 2>&1; then
    RAY_BIN="$(command -v ray)"
  elif [[ -x "$ADARL_ROOT/.venv/bin/ray" ]]; then
    RAY_BIN="$ADARL_ROOT/.venv/bin/ray"
  else
    echo "error: no Ray CLI found. Run 'make setup' (creates $ADARL_ROOT/.venv), activate the" \
      "environment adarl is installed in, or set RAY_BIN=/path/to/bin/ray." >&2
    exit 1
  fi
fi
if [[ ! -x "$RAY_BIN" ]]; then
  echo "error: RAY_BIN=$RAY_BIN is not an executable Ray CLI." >&2
  exit 1
fi
PATH="$(dirname "$RAY_BIN"):$PATH"
export PATH RAY_BIN ADARL_ROOT
# Ray's GCS keeps the events of the last 100k tasks by default (~3.2 MiB per 1000 actor calls,
# measured with Ray 2.60): a long run grows it by hundreds of MiB for a history it never reads.
export RAY_task_events_max_num_task_in_gcs="${RAY_task_events_max_num_task_in_gcs:-1000}"
