#!/usr/bin/env bash
# Start the head node of a Ray cluster for adarl. Run it on the head machine.
#
#   launch/start_head.sh [--port 6379] [--dashboard-port 8265] [--dashboard-host 127.0.0.1]
#                        [--num-cpus N] [--num-gpus N] [any other `ray start` option]
#
# Workers join with `launch/start_worker.sh HEAD_IP:6379`; jobs are submitted to
# http://127.0.0.1:8265 with launch/submit.sh (on the head, or through an SSH tunnel:
# `ssh -L 8265:127.0.0.1:8265 HEAD`). Add --block to keep this command in the foreground
# (Ctrl-C stops the node). Stop a background node with launch/stop.sh.
#
# Exposure: the dashboard / job API (which runs any code it is sent) listens on 127.0.0.1 only,
# unless --dashboard-host names another address (e.g. the head's private IP, for submitting from
# other machines; combine with RAY_AUTH_MODE=token). Ray's own gRPC ports (GCS --port, raylet,
# object manager, workers) listen on every interface whatever is passed (Ray 2.60, measured: it
# also rewrites a --node-ip-address of 127.0.0.1 to the machine's address), as workers on other
# machines must reach them: keep the cluster on a private network or behind a firewall.
#
# Token authentication: Ray turns it on by itself when ~/.ray/auth_token exists (any earlier
# `ray.init()` writes one), and `ray job submit` then fails with AuthenticationError unless the
# submitter also sets RAY_AUTH_MODE=token. So this script starts the head with auth disabled
# unless RAY_AUTH_MODE is set explicitly; on a shared network use RAY_AUTH_MODE=token here and
# on every submitting machine (see docs/cluster.md).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"

export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"

port=6379
dashboard_port=8265
# Local only by default: with auth disabled, anyone who can reach this port can run code on the
# cluster. Workers do not need it (they join through the GCS port).
dashboard_host=127.0.0.1
passthrough=()
while (($# > 0)); do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    --port=*) port="${1#*=}"; shift ;;
    --dashboard-port) dashboard_port="$2"; shift 2 ;;
    --dashboard-port=*) dashboard_port="${1#*=}"; shift ;;
    --dashboard-host) dashboard_host="$2"; shift 2 ;;
    --dashboard-host=*) dashboard_host="${1#*=}"; shift ;;
    *) passthrough+=("$1"); shift ;;
  esac
done

echo "adarl: starting the Ray head (GCS port $port, dashboard/job API $dashboard_host:$dashboard_port," \
  "RAY_AUTH_MODE=$RAY_AUTH_MODE) with $RAY_BIN"
echo "adarl: workers join with: launch/start_worker.sh $(hostname -I 2>/dev/null | awk '{print $1}'):$port"
if [[ "$dashboard_host" == 127.0.0.1 || "$dashboard_host" == localhost ]]; then
  echo "adarl: submit jobs on this machine with: launch/submit.sh ... (job API on 127.0.0.1 only;"
  echo "adarl:   from elsewhere: ssh -L $dashboard_port:127.0.0.1:$dashboard_port <head>, or --dashboard-host <private ip>)"
else
  echo "adarl: submit jobs with:  RAY_ADDRESS=http://$dashboard_host:$dashboard_port launch/submit.sh ..."
fi
exec "$RAY_BIN" start --head \
  --port="$port" \
  --dashboard-host="$dashboard_host" \
  --dashboard-port="$dashboard_port" \
  --include-dashboard=true \
  --disable-usage-stats \
  ${passthrough[@]+"${passthrough[@]}"}
