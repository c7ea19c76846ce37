#!/usr/bin/env bash
# Before/after figures for a change to the data path: builds REF (default: origin's main, else HEAD) in
# a temporary git worktree and the working tree, both Release, then runs scripts/bench_compare.py, which
# interleaves the four native configurations of docs/performance.md on the two builds and prints the ratios.
#
# usage: bash scripts/bench_compare.sh [REF] [--rounds N] [--seconds T] [--only TEXT] [--busy N]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=lib.sh
source scripts/lib.sh

REF=HEAD
if [[ $# -gt 0 && $1 != --* ]]; then REF=$1; shift; fi
ensure_packages "${NATIVE_PACKAGES[@]}"
WORKTREE="$ROOT/build/bench-before-src"  # a fixed path: build/bench-before's CMake cache names it
git worktree remove --force "$WORKTREE" >/dev/null 2>&1 || rm -rf "$WORKTREE"
git worktree prune
git worktree add --detach "$WORKTREE" "$REF" >/dev/null
trap 'git worktree remove --force "$WORKTREE" >/dev/null 2>&1 || true' EXIT
mkdir -p build
echo "building $REF (before) and the working tree (after), Release"
(cd "$WORKTREE" && build_native "$ROOT/build/bench-before" -DCMAKE_BUILD_TYPE=Release -DRC_BUILD_TESTS=OFF) \
  >build/bench-before.log 2>&1 || { cat build/bench-before.log >&2; exit 1; }
build_native build/bench -DCMAKE_BUILD_TYPE=Release -DRC_BUILD_TESTS=OFF >build/bench.log 2>&1 ||
  { cat build/bench.log >&2; exit 1; }
python3 scripts/bench_compare.py build/bench-before build/bench "$@"
