#!/usr/bin/env bash
# The main job: YCSB on FASTER comparing, in one run and with the same data and memory budget, the log
# in memory (upper bound), TieredDevice(RemoteCache over SSD) whose cache is created with an SLO through a cache
# manager started in the process (it starts the remotecache-server; shared memory), SSD only (O_DIRECT) and an SMB
# file server (Samba's smbd on loopback). Read-only,
# uniform and Zipf, 1 and 2 threads; about 5 minutes here. Prints the table and the target ratios and
# writes artifacts/ycsb/results.csv, results.json and the charts chart.png, rounds.png and latency-cdf.png.
#
# usage: bash scripts/run.sh [ycsb flags]   (bash scripts/run.sh --help lists them: records, value size,
#        memory fraction, threads, devices, workload, distributions, duration, ...; --store garnet runs Garnet's
#        GETs instead: its log tier a RemoteCache vs its own SSD tier vs all in memory, docs/garnet.md)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=lib.sh
source scripts/lib.sh

ensure_packages "${NATIVE_PACKAGES[@]}" "${YCSB_PACKAGES[@]}"
build_ycsb || exit 1
exec dotnet "$YCSB_DLL" --out artifacts/ycsb "$@"
