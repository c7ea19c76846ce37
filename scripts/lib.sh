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

# apt_for_suite DIR SUITE ARGS...: apt-get ARGS with the host's configuration when SUITE is empty; else with sources,
# lists and caches of its own under DIR/apt-SUITE that list SUITE of the Debian archive alone (the host's keyring still
# verifies it; the host's sources stay as they are). The mirror: RC_RXE_DEBIAN_MIRROR (default deb.debian.org).
apt_for_suite() {
  local base=$1 suite=$2
  shift 2
  [[ -n $suite ]] || { apt-get "$@"; return; }
  local dir=$base/apt-$suite
  local opts=(-o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=$dir/sources.list.d"
    -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache")
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/sources.list.d"
  echo "deb ${RC_RXE_DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite main" >"$dir/sources.list"
  # The lists are fetched once a day at most.
  if [[ -z $(find "$dir/lists" -maxdepth 1 -name '*Packages*' -mtime -1 -print -quit) ]]; then
    apt-get "${opts[@]}" update -q >&2 || return
  fi
  apt-get "${opts[@]}" "$@"
}

# What tests/rdma-vm/smbdirect-kernel.sh needs to build the RDMA VM's kernel.
KERNEL_BUILD_PACKAGES=(build-essential bc bison flex libelf-dev libssl-dev cpio kmod xz-utils patch)

# The YCSB main job's baselines: smbd (samba) and its client library (libsmbclient) for SMB, fio for the
# SSD reference. The tests run a small main job too.
YCSB_PACKAGES=(samba libsmbclient fio)

# build_dotnet_app PROJECT LOG: builds a .NET project in Release; returns non-zero, with the log's tail on stderr,
# when it cannot.
build_dotnet_app() {
  local project=$1 log=$2
  if ! command -v dotnet >/dev/null 2>&1; then
    echo "the .NET SDK is not installed (https://dot.net): 10.0 or later (the libraries target net8.0 and net10.0)" >&2
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
YCSB_DLL=benchmarks/Ycsb/bin/Release/net10.0/RemoteCache.Benchmarks.Ycsb.dll
build_ycsb() { build_dotnet_app benchmarks/Ycsb build/ycsb-build.log; }

# build_cli: builds the remotecache CLI (src/RemoteCache.Cli); it is then $CLI_DLL.
CLI_DLL=src/RemoteCache.Cli/bin/Release/net10.0/RemoteCache.Cli.dll
build_cli() { build_dotnet_app src/RemoteCache.Cli build/cli-build.log; }

# build_rdma_vm_charts: builds benchmarks/RdmaVmCharts (the RDMA VM harness's charts); it is then $RDMA_VM_CHARTS_DLL.
RDMA_VM_CHARTS_DLL=benchmarks/RdmaVmCharts/bin/Release/net10.0/RemoteCache.Benchmarks.RdmaVmCharts.dll
build_rdma_vm_charts() { build_dotnet_app benchmarks/RdmaVmCharts build/rdma-vm-charts-build.log; }

# The .NET 8 runtimes the net8.0 test legs run on (the newest 8.0 patch this machine's NuGet source serves; .NET 8
# left support on 2026-11-10, so it changes no more).
NET8_RUNTIME_VERSION=8.0.31

# dotnet_with_net8: prints the path of a `dotnet` that runs net8.0 programs on .NET 8 itself, not rolled forward to
# a newer runtime. The machine's SDK may come with its own runtime only; this makes build/dotnet-net8, a dotnet root
# holding the machine's SDK and runtimes (linked) and the .NET 8 runtime and ASP.NET Core runtime from their NuGet
# runtime packs (the files a self-contained .NET 8 app ships), once per SDK and runtime version.
dotnet_with_net8() {
  local system root stamp work packages fx
  system="$(dirname "$(readlink -f "$(command -v dotnet)")")"
  root="$PWD/build/dotnet-net8"
  stamp="$root/.made-for-$(dotnet --version)-$NET8_RUNTIME_VERSION"
  if [[ -f $stamp ]]; then
    echo "$root/dotnet"
    return
  fi
  rm -rf "$root"
  work="$root/.download"
  packages="$work/packages"
  mkdir -p "$work"
  cat >"$work/download.csproj" <<XML
<Project Sdk="Microsoft.NET.Sdk">
  <PropertyGroup><TargetFramework>net8.0</TargetFramework></PropertyGroup>
  <ItemGroup>
    <PackageDownload Include="Microsoft.NETCore.App.Runtime.linux-x64" Version="[$NET8_RUNTIME_VERSION]" />
    <PackageDownload Include="Microsoft.AspNetCore.App.Runtime.linux-x64" Version="[$NET8_RUNTIME_VERSION]" />
  </ItemGroup>
</Project>
XML
  # Outside the repository: its Directory.Build.props and central package versions are not for this project.
  echo '<Project />' >"$work/Directory.Build.props"
  echo '<Project />' >"$work/Directory.Packages.props"
  if ! dotnet restore "$work/download.csproj" --packages "$packages" >"$work/restore.log" 2>&1; then
    tail -20 "$work/restore.log" >&2
    echo "dotnet_with_net8: the .NET $NET8_RUNTIME_VERSION runtime packs did not restore (log above)" >&2
    return 1
  fi
  # The muxer finds the SDK and the runtimes beside itself, so it is a copy; the SDK is linked file by file (it
  # too locates the muxer it starts test hosts with from its own path); the rest are symbolic links.
  cp "$system/dotnet" "$root/dotnet"
  cp -al "$system/sdk" "$root/sdk" 2>/dev/null || cp -a "$system/sdk" "$root/sdk"
  ln -s "$system/host" "$root/host"
  ln -s "$system/packs" "$root/packs"
  for fx in "$system"/shared/*/*; do
    mkdir -p "$root/shared/$(basename "$(dirname "$fx")")"
    ln -s "$fx" "$root/shared/$(basename "$(dirname "$fx")")/$(basename "$fx")"
  done
  for fx in Microsoft.NETCore.App Microsoft.AspNetCore.App; do
    local pack="$packages/${fx,,}.runtime.linux-x64/$NET8_RUNTIME_VERSION/runtimes/linux-x64"
    mkdir -p "$root/shared/$fx/$NET8_RUNTIME_VERSION"
    cp "$pack"/lib/net8.0/* "$root/shared/$fx/$NET8_RUNTIME_VERSION/"
    if [[ -d $pack/native ]]; then cp "$pack"/native/* "$root/shared/$fx/$NET8_RUNTIME_VERSION/"; fi
  done
  rm -rf "$work"
  if ! "$root/dotnet" --list-runtimes | grep -q "Microsoft.NETCore.App $NET8_RUNTIME_VERSION"; then
    echo "dotnet_with_net8: $root/dotnet does not list the .NET $NET8_RUNTIME_VERSION runtime" >&2
    return 1
  fi
  touch "$stamp"
  echo "$root/dotnet"
}

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
