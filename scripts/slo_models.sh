#!/usr/bin/env bash
# Measures the SLO performance models shipped in models/: shm and tcp, records of 8 B, 64 B, 512 B and 4 KiB, reads
# and writes, one model at a time (each spawns its own servers; two at once would measure each other).
#   bash scripts/slo_models.sh [--note TEXT] [TRANSPORT-SIZE ...]    e.g. bash scripts/slo_models.sh shm-8 tcp-4096
# Existing model files are kept and resumed (remove one to measure it again). See docs/slo-model.md.
# Seconds per point (measured + warm-up) are chosen per model so that each run takes about 5 minutes on a 2-core machine
# (each point is the median of 3 runs by default, so a model takes about 15):
# the models whose sweeps measure most of their grid (tcp at 8 B and 64 B, where throughput keeps rising with b and q)
# get shorter points.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib.sh
source scripts/lib.sh
note="measured by scripts/slo_models.sh on a machine shared with other work"
if [[ "${1:-}" == "--note" ]]; then note="$2"; shift 2; fi
models=("$@")
declare -A timing=(
  [shm-8]="0.5 0.2" [shm-64]="0.4 0.15" [shm-512]="0.5 0.2" [shm-4096]="0.5 0.2"
  [tcp-8]="0.3 0.1" [tcp-64]="0.3 0.1" [tcp-512]="0.5 0.2" [tcp-4096]="0.5 0.2"
)
if [[ ${#models[@]} -eq 0 ]]; then
  models=(shm-8 shm-64 shm-512 shm-4096 tcp-8 tcp-64 tcp-512 tcp-4096)
fi
build_cli
cli=(dotnet "$CLI_DLL")
mkdir -p models
for m in "${models[@]}"; do
  transport=${m%-*} size=${m#*-}
  read -r seconds warmup <<<"${timing[$m]:-0.5 0.2}"
  resume=()
  [[ -e models/$m.json ]] && resume=(--resume)
  echo "== $m ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg))"
  "${cli[@]}" slo model --transport "$transport" --record-size "$size" --out "models/$m.json" \
    --seconds "$seconds" --warmup "$warmup" --note "$note" "${resume[@]}"
done
