#!/usr/bin/env bash
# The native data path's benchmark against references measured in the same run (shared-memory and
# loopback-TCP round trips, redis-server on loopback), printed as a table of targets and ratios; raw
# rows go to artifacts/bench-native.json. (The main job, scripts/run.sh, is the YCSB comparison.)
#
# usage: bash scripts/bench_native.sh [--seconds T] [--quick]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=lib.sh
source scripts/lib.sh

ensure_packages "${NATIVE_PACKAGES[@]}" redis-server
mkdir -p build
if ! build_native build/bench -DCMAKE_BUILD_TYPE=Release -DRC_BUILD_TESTS=OFF >build/bench.log 2>&1; then
  cat build/bench.log >&2
  echo "run.sh: the native build failed (log above, also in build/bench.log)" >&2
  exit 1
fi
python3 scripts/bench_native.py build/bench "$@"
