# Shared by scripts/run.sh and scripts/test.sh: package installation and the native build.
# Source it from the repository root.

as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "need root or sudo to run: $*" >&2
    return 1
  fi
}

pkg_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# ensure_packages PKG...: installs the Debian packages that are missing (RC_SKIP_APT=1: never).
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    pkg_installed "$p" || missing+=("$p")
  done
  if (( ${#missing[@]} == 0 )); then
    echo "all packages present: $*"
    return 0
  fi
  echo "missing packages: ${missing[*]}"
  if [[ "${RC_SKIP_APT:-0}" == 1 ]]; then
    echo "RC_SKIP_APT=1: not installing" >&2
    return 1
  fi
  as_root apt-get update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

# The packages every native build needs (rdma-core for the verbs transport, libssl-dev for libcrypto).
NATIVE_PACKAGES=(cmake ninja-build g++ libgtest-dev libgmock-dev python3 libibverbs-dev librdmacm-dev libssl-dev)

# The YCSB main job's baselines: smbd (samba) and its client library (libsmbclient) for SMB, fio for the
# SSD reference. The tests run a small main job too.
YCSB_PACKAGES=(samba libsmbclient fio)

# build_dotnet_app PROJECT LOG: builds a .NET project in Release; returns non-zero, with the log's tail on stderr,
# when it cannot.
build_dotnet_app() {
  local project=$1 log=$2
  if ! command -v dotnet >/dev/null 2>&1; then
    echo "the .NET SDK is not installed (https://dot.net); the libraries target net8.0" >&2
    return 1
  fi
  mkdir -p build
  if ! dotnet build -c Release "$project" >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "building $project failed (log above, all of it in $log)" >&2
    return 1
  fi
}

# build_ycsb: builds benchmarks/Ycsb (the main job); the tool is then $YCSB_DLL.
YCSB_DLL=benchmarks/Ycsb/bin/Release/net8.0/RemoteCache.Benchmarks.Ycsb.dll
build_ycsb() { build_dotnet_app benchmarks/Ycsb build/ycsb-build.log; }

# build_cli: builds the remotecache CLI (src/RemoteCache.Cli); it is then $CLI_DLL.
CLI_DLL=src/RemoteCache.Cli/bin/Release/net8.0/RemoteCache.Cli.dll
build_cli() { build_dotnet_app src/RemoteCache.Cli build/cli-build.log; }

# Parallel build jobs: at most 2, so that a build leaves room on the small machines this runs on.
native_build_jobs() {
  local jobs
  jobs="$(nproc 2>/dev/null || echo 1)"
  (( jobs > 2 )) && jobs=2
  echo "$jobs"
}

# build_native DIR [cmake args...]: configures and builds src/RemoteCache.Native into DIR, under the
# command prefix in the BUILD_WRAP array if set (sanitized builds run their test binaries to list tests).
BUILD_WRAP=()
build_native() {
  local dir=$1
  shift
  "${BUILD_WRAP[@]}" cmake -S src/RemoteCache.Native -B "$dir" -G Ninja "$@"
  "${BUILD_WRAP[@]}" cmake --build "$dir" -j "$(native_build_jobs)"
}

# build_native_preset PRESET DIR [cmake args...]: like build_native, with the configure preset PRESET
# of CMakePresets.json (where the native variants are defined). DIR replaces the preset's binaryDir.
build_native_preset() {
  local preset=$1 dir=$2
  shift 2
  "${BUILD_WRAP[@]}" cmake -S src/RemoteCache.Native --preset "$preset" -B "$dir" "$@"
  "${BUILD_WRAP[@]}" cmake --build "$dir" -j "$(native_build_jobs)"
}
