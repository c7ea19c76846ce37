#!/usr/bin/env bash
# The main job: YCSB on FASTER comparing, in one run and with the same data and memory budget, the log
# in memory (upper bound), TieredDevice(RemoteCache over SSD) whose cache is created with an SLO through a cache
# manager started in the process (it starts the remotecache-server; shared memory), SSD only (O_DIRECT) and an SMB
# file server (Samba's smbd on loopback). Read-only,
# uniform and Zipf, 1 and 2 threads; about 5 minutes here. Prints the table and the target ratios and
# writes artifacts/ycsb/results.csv, results.json and the charts chart.png, rounds.png and latency-cdf.png.
#
# usage: bash scripts/run.sh [ycsb flags]   (bash scripts/run.sh --help lists them: records, value size,
#        memory fraction, threads, devices, workload, distributions, duration, ...)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=lib.sh
source scripts/lib.sh

ensure_packages "${NATIVE_PACKAGES[@]}" "${YCSB_PACKAGES[@]}"
if ! command -v dotnet >/dev/null 2>&1; then
  echo "run.sh: the .NET SDK is not installed (https://dot.net); the libraries target net8.0" >&2
  exit 1
fi
mkdir -p build
if ! dotnet build -c Release benchmarks/Ycsb >build/ycsb-build.log 2>&1; then
  tail -40 build/ycsb-build.log >&2
  echo "run.sh: building benchmarks/Ycsb failed (log above, all of it in build/ycsb-build.log)" >&2
  exit 1
fi
exec dotnet benchmarks/Ycsb/bin/Release/net8.0/RemoteCache.Benchmarks.Ycsb.dll --out artifacts/ycsb "$@"
