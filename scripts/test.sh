#!/usr/bin/env bash
# Set up and run the whole test suite: lint, import contracts, pytest (benchmarks run once, untimed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
export PATH="$PWD/.tools/helm:$PATH"
.venv/bin/ruff check .
.venv/bin/python -m pytest -q --benchmark-disable --durations=30 "$@"  # the slowest: where CI time goes
