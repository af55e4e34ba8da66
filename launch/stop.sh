#!/usr/bin/env bash
# Stop the Ray node on this machine (head or worker): `ray stop`, which stops EVERY Ray process
# of this user on this machine, including local clusters of other programs.
#
#   launch/stop.sh [--force] [any `ray stop` option]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
exec "$RAY_BIN" stop "$@"
