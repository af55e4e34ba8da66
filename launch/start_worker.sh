#!/usr/bin/env bash
# Join a worker machine to a running adarl Ray cluster. Run it on each worker machine.
#
#   launch/start_worker.sh HEAD_IP[:PORT] [--num-cpus N] [--num-gpus N] [any `ray start` option]
#
# PORT defaults to 6379 (the head's GCS port, `--port` of launch/start_head.sh). The worker must
# use the same RAY_AUTH_MODE as the head (default here: disabled, as in start_head.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

if (($# < 1)) || [[ "$1" == -* ]]; then
  echo "usage: launch/start_worker.sh HEAD_IP[:PORT] [ray start options...]" >&2
  exit 2
fi
head_address="$1"
shift
[[ "$head_address" == *:* ]] || head_address="$head_address:6379"

export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
echo "adarl: joining the Ray cluster at $head_address (RAY_AUTH_MODE=$RAY_AUTH_MODE) with $RAY_BIN"
exec "$RAY_BIN" start --address="$head_address" --disable-usage-stats "$@"
