#!/usr/bin/env bash
# A two-node Ray cluster on this one machine (a head and a worker, each with its own CPUs), an
# adarl run on it with the actors spread over both nodes by the resource plan, and both nodes
# stopped again. It rehearses a multi-node run without a second machine (docs/operations.md).
#
#   launch/local_multinode.sh [HYDRA OVERRIDES...]
#   e.g. launch/local_multinode.sh trainer.total_steps=3 rollout=hf
#
# Environment: ADARL_MULTINODE_CPUS (CPUs of each node, default 2; ADARL_MULTINODE_WORKER_CPUS
# for the worker alone), ADARL_MULTINODE_DIR (work directory: the run directory, logs,
# actors.json; default a new mktemp directory). ADARL_MULTINODE_PRIVATE_RUN_DIR=1 gives the worker
# node a run directory of its own (an empty tmpfs mounted over it in a private mount namespace,
# root only): what a node without the shared file system sees; the run must refuse to start.
#
# Other programs on the machine are left alone: the cluster uses free, non-default ports and its
# own temp dir (so a bare `ray.init()` elsewhere does not join it), and it is stopped by killing
# exactly the processes marked with this script's reaper token (adarl/reaper.py), never with
# `ray stop` (which stops every Ray cluster of the user). Exit status: the run's.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
PYTHON="$(dirname "$RAY_BIN")/python"

cpus="${ADARL_MULTINODE_CPUS:-2}"
worker_cpus="${ADARL_MULTINODE_WORKER_CPUS:-$cpus}"
work="${ADARL_MULTINODE_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/adarl-multinode.XXXXXX")}"
mkdir -p "$work/run"
# Unix socket paths must stay short: Ray's temp dir gets a short name of its own.
ray_tmp="$(mktemp -d /tmp/adarl-ray.XXXXXX)"
read -r port dashboard_port < <("$PYTHON" - <<'PY'
import socket

sockets = [socket.socket() for _ in range(2)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in sockets))
PY
)

# Every process the two `ray start`s spawn inherits this mark; the clean-up kills exactly them.
ADARL_REAPER_TOKEN="multinode-$("$PYTHON" -c 'import uuid; print(uuid.uuid4().hex)')"
export ADARL_REAPER_TOKEN
export RAY_AUTH_MODE=disabled
# shellcheck disable=SC2329  # run by the EXIT trap below
cleanup() {
  "$PYTHON" -m adarl.reaper --token "$ADARL_REAPER_TOKEN" || true
  rm -rf "$ray_tmp"
}
trap cleanup EXIT

echo "adarl: head node: 127.0.0.1:$port, $cpus CPUs (temp dir $ray_tmp)"
"$RAY_BIN" start --head --port="$port" --num-cpus="$cpus" --num-gpus=0 \
  --temp-dir="$ray_tmp" --include-dashboard=true --dashboard-host=127.0.0.1 \
  --dashboard-port="$dashboard_port" --disable-usage-stats >"$work/head.log" 2>&1
echo "adarl: worker node: $worker_cpus CPUs, joining 127.0.0.1:$port"
worker_start=("$RAY_BIN" start --address="127.0.0.1:$port" --num-cpus="$worker_cpus" --num-gpus=0
  --disable-usage-stats)
if [[ "${ADARL_MULTINODE_PRIVATE_RUN_DIR:-0}" == 1 ]]; then
  echo "adarl: the worker node gets a private, empty $work/run (no shared file system)"
  # The node's processes stay in this mount namespace after `ray start` returns.
  # shellcheck disable=SC2016  # expanded by the inner bash, from its own arguments
  unshare --mount --propagation private bash -c \
    'mount -t tmpfs tmpfs "$1" && shift && exec "$@"' _ "$work/run" "${worker_start[@]}" \
    >"$work/worker.log" 2>&1
else
  "${worker_start[@]}" >"$work/worker.log" 2>&1
fi

status=0
(
  cd "$ADARL_ROOT"
  "$PYTHON" -m adarl.launch cluster.address="127.0.0.1:$port" hydra.run.dir="$work/run" "$@"
) || status=$?

# Where each actor ran, as Ray recorded it (dead actors included), by node.
"$RAY_BIN" list actors --address="http://127.0.0.1:$dashboard_port" --detail --limit 1000 \
  --format=json >"$work/actors.json" 2>/dev/null || true
"$PYTHON" - "$work/actors.json" <<'PY' || true
import json
import sys

try:
    actors = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit("adarl: no actor list (the dashboard's state API did not answer)")
by_node = {}
for actor in actors:
    by_node.setdefault(actor.get("node_id") or "?", []).append(actor["class_name"])
for node, names in sorted(by_node.items()):
    print(f"adarl: node {node[:12]}: {', '.join(sorted(names))}")
PY
echo "adarl: run directory $work/run, exit status $status"
exit "$status"
