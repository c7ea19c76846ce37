#!/usr/bin/env bash
# Runs every test suite of the repository (CI runs exactly this, through .ci/run):
#   0. installs the Debian packages it needs (only when something is missing; root or sudo)
#   1. native-release  build/native        RelWithDebInfo, GoogleTest suites via ctest
#   2. native-asan     build/native-asan   clang-14, -DRC_SANITIZE=address,undefined, ctest
#   3. native-tsan     build/native-tsan   clang-14, -DRC_SANITIZE=thread, ctest
#   4. fuzz            build/native-fuzz   clang-14 libFuzzer: 7 targets, an equal share of RC_FUZZ_SECONDS
#                                          each, from generated seeds (fuzz/CMakeLists.txt lists them)
#      (the native builds are the configure presets release, asan, tsan and fuzz of CMakePresets.json)
#   5. dotnet          dotnet test RemoteCache.sln on the newest target framework (net10.0)
#   5b. dotnet-net8    the test projects that target net8.0 too (RemoteCache.Net8.slnf), on the .NET 8 runtime
#                      (build/dotnet-net8: the machine's SDK beside .NET 8 from its NuGet runtime packs)
#   6. packaging       tests/packaging/run.sh: dotnet pack, then a project outside the repository restores the
#                      packages and runs a quickstart against the packaged remotecache-server
#   7. rdma-vm         tests/rdma-vm/run.sh: a qemu VM with Soft-RoCE runs the conformance suite over
#                      verbs, the verbs benchmarks and perftest (the verbs tests must run there, not skip), and
#                      SMB Direct and NFS over RDMA beside RemoteCache; its kernel (with SMB Direct) builds in the
#                      background, at idle priority, from the start
# and prints a summary table. Exit status is non-zero when any suite failed.
#
# usage: bash scripts/test.sh [--quick]     --quick: step 1 only (plus package check)
# environment (all optional):
#   RC_BUILD_ROOT     where the build directories go (default: build)
#   RC_FUZZ_SECONDS   fuzzing time of all targets together (default: 150)
#   RC_CTEST_JOBS     parallel ctest jobs (default: nproc, at most 2)
#   RC_SKIP_APT=1     never call apt-get (fail later if something is missing)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=lib.sh
source scripts/lib.sh

QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

BUILD_ROOT="${RC_BUILD_ROOT:-build}"
FUZZ_SECONDS="${RC_FUZZ_SECONDS:-150}"
CTEST_JOBS="${RC_CTEST_JOBS:-$(native_build_jobs)}"
CTEST_TIMEOUT=300
# The C compiler of the clang presets (CMakePresets.json), for the sanitizer probe below.
CLANG_C=clang-14

# etcd-server: the manager's etcd store is tested against a real etcd member. iproute2: the manager tests' cluster
# bed (tests/RemoteCache.Manager.Tests/Cluster, docs/testing.md) makes network namespaces with `ip`; its scenarios
# run inside `dotnet test` below, as root, and skip (saying why) when not root.
PACKAGES=("${NATIVE_PACKAGES[@]}" "${YCSB_PACKAGES[@]}" "${KERNEL_BUILD_PACKAGES[@]}" clang-14 libclang-rt-14-dev llvm-14
          redis-server etcd-server iproute2)
if (( QUICK )); then
  PACKAGES=("${NATIVE_PACKAGES[@]}" "${YCSB_PACKAGES[@]}")
fi

# ---- bookkeeping --------------------------------------------------------------------------------

SUITE_NAMES=()
SUITE_RESULTS=()
SUITE_SECONDS=()
SCRIPT_START=$SECONDS

banner() {
  echo
  echo "=================================================================================="
  echo "== $*"
  echo "=================================================================================="
}

fmt_duration() {
  local s=$1
  printf '%dm%02ds' $((s / 60)) $((s % 60))
}

# Each suite's output is also kept here, so the summary can repeat what failed where a reader of only
# the end of the output (a CI page) sees it.
SUITE_LOG_DIR=artifacts/test
mkdir -p "$SUITE_LOG_DIR"
# Lines that name a failure in the suites' own formats: GoogleTest's and the harnesses' FAILED, ctest's
# (Failed), dotnet test's (xUnit) "Failed <test>" and its message, the sanitizers' and libFuzzer's ==ERROR.
FAILURE_PATTERN='FAILED|\(Failed\)|^\s*Failed [A-Za-z_]|^\s*(Error Message|Assert\.|Expected|Actual)|==ERROR'

# run_suite NAME FUNCTION: runs FUNCTION in a subshell with errexit; records passed/failed/skipped.
# A function reports "skipped" by exiting with status 200.
run_suite() {
  local name=$1 fn=$2 start=$SECONDS rc result
  banner "$name"
  set +e
  ( set -euo pipefail; "$fn" ) 2>&1 | tee "$SUITE_LOG_DIR/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  case $rc in
    0) result=passed ;;
    200) result=skipped ;;
    *) result=failed ;;
  esac
  SUITE_NAMES+=("$name")
  SUITE_RESULTS+=("$result")
  SUITE_SECONDS+=($((SECONDS - start)))
  echo "-- $name: $result in $(fmt_duration $((SECONDS - start)))"
}

summary() {
  local i passed=0 failed=0
  echo
  echo "=================================================================================="
  printf '%-18s %-8s %s\n' "suite" "result" "duration"
  printf '%-18s %-8s %s\n' "------------------" "--------" "--------"
  for i in "${!SUITE_NAMES[@]}"; do
    printf '%-18s %-8s %s\n' "${SUITE_NAMES[$i]}" "${SUITE_RESULTS[$i]}" "$(fmt_duration "${SUITE_SECONDS[$i]}")"
    case "${SUITE_RESULTS[$i]}" in
      passed) passed=$((passed + 1)) ;;
      failed) failed=$((failed + 1)) ;;
    esac
  done
  echo "total time: $(fmt_duration $((SECONDS - SCRIPT_START)))"
  for i in "${!SUITE_NAMES[@]}"; do
    [[ "${SUITE_RESULTS[$i]}" == failed ]] || continue
    echo
    echo "-- what failed in ${SUITE_NAMES[$i]} (from $SUITE_LOG_DIR/${SUITE_NAMES[$i]}.log):"
    grep -E -A3 "$FAILURE_PATTERN" "$SUITE_LOG_DIR/${SUITE_NAMES[$i]}.log" | cut -c1-300 | head -60 || true
  done
  echo "$passed passed, $failed failed"
  (( failed == 0 ))
}

# ---- step 0: packages ---------------------------------------------------------------------------

step_packages() {
  ensure_packages "${PACKAGES[@]}"
}

# ---- sanitizer environment ----------------------------------------------------------------------

# Sanitizer runtimes of clang 14 / gcc 12 cannot start when the kernel randomizes mmap with more
# bits than they expect (vm.mmap_rnd_bits > 28 on newer kernels): TSan dies with "unexpected memory
# mapping", ASan with a SEGV. A tiny probe program finds out; the fix is to run without address
# randomization (setarch -R, inherited by every child: the build runs the test binaries to list
# their tests) or, failing that (setarch is refused in some containers), to lower mmap_rnd_bits.
SAN_WRAP=()
SYMBOLIZER=""
for s in /usr/bin/llvm-symbolizer-14 /usr/lib/llvm-14/bin/llvm-symbolizer; do
  if [[ -x $s ]]; then SYMBOLIZER=$s; break; fi
done
if [[ -z $SYMBOLIZER ]] && command -v llvm-symbolizer >/dev/null 2>&1; then SYMBOLIZER="$(command -v llvm-symbolizer)"; fi
SYM_OPT=""
if [[ -n $SYMBOLIZER ]]; then SYM_OPT=":external_symbolizer_path=$SYMBOLIZER"; fi

# prepare_sanitizer KIND (address|thread): sets SAN_WRAP, exports *_OPTIONS.
prepare_sanitizer() {
  local kind=$1 dir="$BUILD_ROOT/sanitizer-probe"
  mkdir -p "$dir"
  cat > "$dir/probe.c" <<'EOF'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static int counter;
static void* run(void* arg) { (void)arg; __atomic_fetch_add(&counter, 1, __ATOMIC_SEQ_CST); return NULL; }
int main(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, run, NULL) != 0) return 1;
  pthread_join(t, NULL);
  char* p = malloc(16);
  p[0] = (char)counter;
  int r = p[0];
  free(p);
  printf("sanitizer probe ok (%d)\n", r);
  return 0;
}
EOF
  local flags
  if [[ $kind == thread ]]; then flags="-fsanitize=thread"; else flags="-fsanitize=address,undefined"; fi
  "$CLANG_C" -g $flags "$dir/probe.c" -o "$dir/probe-$kind" -lpthread

  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1:strict_init_order=1${SYM_OPT}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${SYM_OPT}"
  export TSAN_OPTIONS="second_deadlock_stack=1:history_size=4${SYM_OPT}"
  export LSAN_OPTIONS="${SYM_OPT#:}"
  export RC_UNDER_SANITIZER=1

  SAN_WRAP=()
  if timeout 60 "$dir/probe-$kind" >"$dir/probe-$kind.log" 2>&1; then
    echo "sanitizer probe ($kind): runs as is"
    return 0
  fi
  echo "sanitizer probe ($kind) failed (vm.mmap_rnd_bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo '?')):"
  head -n 5 "$dir/probe-$kind.log" | sed 's/^/  | /'
  if grep -q 'LeakSanitizer has encountered a fatal error\|LeakSanitizer does not work under ptrace' "$dir/probe-$kind.log"; then
    echo "LeakSanitizer cannot run here (ptrace restricted): continuing with detect_leaks=0"
    export ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}"
    if timeout 60 "$dir/probe-$kind" >"$dir/probe-$kind.log" 2>&1; then return 0; fi
  fi
  local arch
  arch="$(uname -m)"
  if timeout 60 setarch "$arch" -R "$dir/probe-$kind" >"$dir/probe-$kind.log" 2>&1; then
    echo "workaround: running sanitized builds and tests under 'setarch $arch -R' (no ASLR)"
    SAN_WRAP=(setarch "$arch" -R)
    return 0
  fi
  local bits
  bits="$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo '')"
  if [[ -n $bits ]] && (( bits > 28 )) && as_root sh -c 'echo 28 > /proc/sys/vm/mmap_rnd_bits' 2>/dev/null; then
    echo "workaround: lowered vm.mmap_rnd_bits from $bits to 28"
    if timeout 60 "$dir/probe-$kind" >"$dir/probe-$kind.log" 2>&1; then return 0; fi
  fi
  echo "test.sh: $kind sanitizer programs cannot run on this machine:" >&2
  cat "$dir/probe-$kind.log" >&2
  return 1
}

# ---- native build + ctest -----------------------------------------------------------------------

# native_suite PRESET BUILD_DIR: configure with the preset, build, ctest (all under SAN_WRAP if set).
native_suite() {
  local preset=$1 dir=$2
  local t0=$SECONDS
  BUILD_WRAP=("${SAN_WRAP[@]}")
  build_native_preset "$preset" "$dir"
  echo "-- configure + build: $(fmt_duration $((SECONDS - t0)))"
  t0=$SECONDS
  local rc=0
  "${SAN_WRAP[@]}" ctest --test-dir "$dir" --output-on-failure --timeout "$CTEST_TIMEOUT" \
    -j "$CTEST_JOBS" --no-tests=error || rc=$?
  echo "-- ctest: $(fmt_duration $((SECONDS - t0)))"
  return $rc
}

step_release() {
  native_suite release "$BUILD_ROOT/native"
}

step_asan() {
  prepare_sanitizer address
  native_suite asan "$BUILD_ROOT/native-asan"
}

step_tsan() {
  prepare_sanitizer thread
  native_suite tsan "$BUILD_ROOT/native-tsan"
}

# ---- fuzzing ------------------------------------------------------------------------------------

step_fuzz() {
  prepare_sanitizer address
  local dir="$BUILD_ROOT/native-fuzz" t0=$SECONDS
  # The default target includes fuzz-corpus, which runs fuzz-seeds into $dir/fuzz/seeds/<target>.
  BUILD_WRAP=("${SAN_WRAP[@]}")
  build_native_preset fuzz "$dir"
  echo "-- configure + build: $(fmt_duration $((SECONDS - t0)))"

  # Every target (name:max_len) fuzzes for an equal share of FUZZ_SECONDS from its own seeds, into
  # its own corpus (kept between runs), artifacts directory and log.
  local targets=(fuzz-frame:41000 fuzz-tcp-framing:4096 fuzz-connect:4096 fuzz-response:4096 fuzz-sequence:8192
                 fuzz-admin:4096 fuzz-unseal:4200)
  local share=$((FUZZ_SECONDS / ${#targets[@]}))
  if (( share < 1 )); then share=1; fi
  local seeds_root="$dir/fuzz/seeds"
  if [[ -z "$(ls -A "$seeds_root" 2>/dev/null)" ]]; then
    "${SAN_WRAP[@]}" "$dir/fuzz/fuzz-seeds" "$seeds_root"
  fi
  echo "fuzzing ${#targets[@]} targets for ${share}s each (RC_FUZZ_SECONDS=$FUZZ_SECONDS)"

  local entry name max_len fuzzer seeds corpus artifacts log rc found failed=()
  for entry in "${targets[@]}"; do
    name=${entry%%:*}
    max_len=${entry#*:}
    fuzzer="$dir/fuzz/$name" seeds="$seeds_root/$name" corpus="$dir/corpus/$name"
    artifacts="$dir/artifacts/$name" log="$dir/$name.log"
    mkdir -p "$corpus" "$artifacts"
    rm -f "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*
    echo
    echo "-- $name: ${share}s; seeds: $(ls "$seeds" 2>/dev/null | wc -l) files in $seeds; corpus: $corpus; log: $log"

    # NEW/REDUCE progress lines go to the log only; everything else (pulses, stats, crash reports)
    # also to the console.
    rc=0
    set +e
    timeout --kill-after=30 $((share + 240)) "${SAN_WRAP[@]}" "$fuzzer" \
      -max_total_time="$share" -max_len="$max_len" -timeout=25 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "$seeds" 2>&1 |
      tee "$log" | grep --line-buffered -vE '^#[0-9]+[[:space:]]+(NEW|REDUCE)[[:space:]]'
    rc=${PIPESTATUS[0]}
    set -e
    found="$(ls "$artifacts" 2>/dev/null || true)"
    if (( rc != 0 )) || [[ -n $found ]]; then
      echo "$name FAILED (exit $rc)."
      if [[ -n $found ]]; then
        echo "reproducers in $artifacts: $found"
        echo "reproduce with: ${SAN_WRAP[*]:+${SAN_WRAP[*]} }$fuzzer $artifacts/<file>"
      fi
      failed+=("$name")
      continue
    fi
    echo "$name: no crash in ${share}s ($(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') runs," \
      "$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 || true))"
  done
  if (( ${#failed[@]} > 0 )); then
    echo "fuzzing FAILED: ${failed[*]} (logs in $dir/<target>.log)"
    return 1
  fi
}

# ---- .NET (placeholder until the solution exists) -----------------------------------------------

step_dotnet() {
  if [[ ! -f RemoteCache.sln ]]; then
    echo "dotnet: no solution yet (skipped)"
    return 200
  fi
  if ! command -v dotnet >/dev/null 2>&1; then
    echo "test.sh: RemoteCache.sln exists but the dotnet SDK is not installed" >&2
    return 1
  fi
  dotnet test RemoteCache.sln -f "$(dotnet_property RemoteCacheAppFramework)"
}

# The projects that target .NET 8 as well (RemoteCache.Net8.slnf: the test projects whose TargetFrameworks are
# $(RemoteCacheFrameworks)), on the .NET 8 runtime itself (dotnet_with_net8 in lib.sh), not rolled forward. The
# multi-host cluster bed (RemoteCache.Manager.Tests.Cluster: network namespaces, a dozen processes per scenario, what
# the control plane does across hosts) runs in the dotnet suite only: it tests distribution, not the runtime, and it
# is minutes of the CI run's hour.
step_dotnet_net8() {
  local dotnet8
  dotnet8="$(dotnet_with_net8)"
  "$dotnet8" --list-runtimes
  "$dotnet8" test RemoteCache.Net8.slnf -f net8.0 --filter "FullyQualifiedName!~RemoteCache.Manager.Tests.Cluster."
}

# dotnet_property NAME: a property of Directory.Build.props, as MSBuild evaluates it.
dotnet_property() {
  dotnet msbuild tests/RemoteCache.Tests -getProperty:"$1"
}

# ---- NuGet packages ------------------------------------------------------------------------------

step_packaging() {
  bash tests/packaging/run.sh
}

# ---- RDMA: the verbs transport on Soft-RoCE in a VM -----------------------------------------------

step_rdma_vm() {
  RC_RDMA_VM_REQUIRE_VERBS=1 bash tests/rdma-vm/run.sh
}

# ---- main ---------------------------------------------------------------------------------------

banner "packages"
set +e
( set -euo pipefail; step_packages )
rc=$?
set -e
if (( rc != 0 )); then
  echo "test.sh: installing the required packages failed; nothing can be built" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

# The RDMA VM suite boots a kernel with SMB Direct, built from source once per machine (minutes when cold). Its build
# starts now at idle priority, so that it takes only what the suites before that one leave of the cores; the suite
# waits for it on the build's lock (tests/rdma-vm/smbdirect-kernel.sh) and finds it built, or builds what is left.
KERNEL_BUILD_PID=""
if (( ! QUICK )); then
  mkdir -p "$BUILD_ROOT"
  chrt --idle 0 nice -n 19 bash tests/rdma-vm/smbdirect-kernel.sh >"$BUILD_ROOT/smbdirect-kernel.log" 2>&1 &
  KERNEL_BUILD_PID=$!
fi

run_suite native-release step_release
if (( ! QUICK )); then
  run_suite native-asan step_asan
  run_suite native-tsan step_tsan
  run_suite fuzz step_fuzz
  run_suite dotnet step_dotnet
  run_suite dotnet-net8 step_dotnet_net8
  run_suite packaging step_packaging
  run_suite rdma-vm step_rdma_vm
fi
# Finished by now (the rdma-vm suite waited for it); its log says how, should that suite have failed.
if [[ -n $KERNEL_BUILD_PID ]]; then wait "$KERNEL_BUILD_PID" || echo "test.sh: the kernel build failed: $BUILD_ROOT/smbdirect-kernel.log" >&2; fi

summary
