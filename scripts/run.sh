#!/usr/bin/env bash
# Set up (scripts/bootstrap.sh), then run one logquake test; arguments go to `logquake run`
# (with none: 5 nodes, 45 s of partition and kill faults; `--nemesis none` is the calm run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/logquake run "$@"
