#!/usr/bin/env bash
# Set up and run Stowage's main job: the simulator comparing schedulers on the bundled trace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/stowage simulate "$@"
