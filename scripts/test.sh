#!/usr/bin/env bash
# Set up (scripts/bootstrap.sh), then run the linter and the test suite.
# Extra arguments go to pytest, e.g. `scripts/test.sh -m slow` for the long end-to-end runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
.venv/bin/ruff check logquake tests benchmarks
if [ $# -eq 0 ]; then set -- -m "not slow"; fi
.venv/bin/python -m pytest "$@"
