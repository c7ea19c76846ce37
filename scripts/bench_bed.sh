#!/usr/bin/env bash
# The long version of the multi-host test bed's replica scenarios (docs/testing.md, "Faults with manager replicas"):
# each fault — the leader killed, its link to etcd cut, an etcd member killed, a server host lost, every manager
# killed — injected ROUNDS times in a row on one bed under one continuous load, the load's progress and the state
# checked after each round, the streams and leases at the end. The suite (scripts/test.sh) injects each once.
# Prints each round's figures (who leads when, how long Allocate was unavailable) and the tests' verdicts; the whole
# log goes to artifacts/bench-bed.log. As root (network namespaces); about ROUNDS × 1.5 min.
#
# usage: bash scripts/bench_bed.sh [ROUNDS (default 10)] [SCENARIO: a test of ReplicaScenarios, e.g. TheLeaderKilledUnderLoad
#                                                         (default: all five)]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=lib.sh
source scripts/lib.sh

ROUNDS=${1:-10}
SCENARIO=${2:-}
if ! [[ $ROUNDS =~ ^[0-9]+$ ]] || (( ROUNDS < 1 || ROUNDS > 100 )); then
  echo "bench_bed.sh: ROUNDS is '$ROUNDS': a number from 1 to 100" >&2
  exit 2
fi
ensure_packages "${NATIVE_PACKAGES[@]}" etcd-server iproute2
mkdir -p artifacts
dotnet build tests/RemoteCache.Manager.Tests -c Release -v q >artifacts/bench-bed-build.log 2>&1 ||
  { cat artifacts/bench-bed-build.log >&2; exit 1; }
RC_BED_ROUNDS=$ROUNDS dotnet test tests/RemoteCache.Manager.Tests -c Release --no-build \
  --filter "FullyQualifiedName~Cluster.ReplicaScenarios.$SCENARIO" --logger "console;verbosity=detailed" >artifacts/bench-bed.log 2>&1 && status=0 || status=$?
grep -E "^\s+(Passed|Failed) |round [0-9]+ of|unavailability|leads .* after|stepped down|refused writes|replaced by|Total tests|Passed!|Failed!" artifacts/bench-bed.log || true
if ! grep -q "^Total tests:" artifacts/bench-bed.log; then
  echo "bench_bed.sh: no scenario ran (is '$SCENARIO' a test of ReplicaScenarios?); see artifacts/bench-bed.log" >&2
  exit 1
fi
exit "$status"
