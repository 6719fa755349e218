#!/usr/bin/env bash
# Set up and run the whole test suite: lint, import contracts, pytest (benchmarks run once, untimed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
export PATH="$PWD/.tools/helm:$PATH"
.venv/bin/ruff check .
# Two workers (CI has two cores), each taking whole files: a module's stack, cluster or server starts once, and
# the session's control plane once per worker. `-n 0` after the command runs serially; `-n auto` uses every core.
.venv/bin/python -m pytest -q --benchmark-disable --durations=30 -n 2 --dist loadfile "$@"  # durations: where CI time goes
