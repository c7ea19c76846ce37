#!/usr/bin/env bash
# RDMA VM harness: the verbs transport against raw verbs, on Soft-RoCE inside one throwaway VM.
#
#   1. installs the Debian packages it needs (only when missing) and builds src/RemoteCache.Native in
#      Release into build/rdma-vm (rdma-core present, so the verbs transport is compiled in);
#   2. boots ONE VM (tests/rdma-vm/rxe-vm.sh) and runs there, each under a section marker:
#      ibv_devinfo -v; perftest baselines (ib_read_lat, ib_write_lat, ib_write_bw);
#      the conformance suite's verbs instantiation; remotecache-bench over verbs (8 B read, 8 B write,
#      batched 16 B writes; connect time for a 64 MiB and a 1 GiB cache; a 128 MiB region pull against
#      ib_read_bw); the two file servers over RDMA, each exporting a tmpfs folder: SMB Direct (the kernel's ksmbd,
#      cifs mounted with rdma) and NFS over RDMA (kernel nfsd, proto=rdma), read with fio next to RemoteCache
#      reads of the same sizes and depths; a verbs SLO model (remotecache slo model --quick); FASTER YCSB
#      (benchmarks/Ycsb, .NET) with its log on each mount against the tiered device whose cache tier is a
#      RemoteCache over verbs, placed by the manager with that model;
#   3. prints a summary (perftest figures, our p50s and ops/s, the ratios against their targets), draws the file
#      server comparison (benchmarks/RdmaVmCharts) and writes artifacts/rdma-vm/{output.txt,console.txt,
#      summary.json,file-servers.png,ycsb.png}.
#
# The VM boots a kernel with SMB Direct, which Debian's kernels lack: tests/rdma-vm/smbdirect-kernel.sh builds it
# from Debian's linux-source-6.1 once per machine (a few minutes cold; cached after) and the whole harness runs on it.
#
# Everything inside the VM is emulated (qemu TCG), so absolute times mean little: only the ratios
# against perftest measured in the same boot are meaningful.
#
# Exit status: non-zero when the build fails, the VM does not boot or finish, or a verbs conformance test
# fails, or FASTER YCSB in the guest reads a wrong value or does not finish, or SMB Direct was not measured (the
# kernel did not build, or the share is not mounted over SMB Direct: its rows then say why, and no figure of SMB over
# TCP is ever reported as SMB Direct). Missed performance targets and other unavailable sections are reported, not
# fatal.
#
# usage: bash tests/rdma-vm/run.sh
# environment (all optional):
#   RC_RDMA_VM_MEM            guest memory in MB (default 2048: the bench's cache is registered memory)
#   RC_RDMA_VM_TIMEOUT        limit for the VM in seconds, boot included (default 540)
#   RC_RDMA_VM_SMP            guest CPUs (default 2, one per host core here)
#   RC_RDMA_VM_REQUIRE_VERBS  1: also fail when the verbs conformance tests are skipped or absent
#   RC_RDMA_VM_YCSB           FASTER YCSB in the guest through the manager (a verbs model measured first), the log
#                             on NFS over RDMA against the tiered device over verbs (about two minutes more; guest
#                             memory 3072 MB, limit 1200 s): auto (default) runs
#                             it when the .NET SDK is installed, 1 fails without it, 0 skips it
#   RC_RDMA_VM_YCSB_ARGS      its flags but --devices, which the harness sets per mount (default: readonly, 400000
#                             records, 1 thread, 3 rounds of 2 s)
#   RC_RDMA_VM_SMBDIRECT      1 (default): boot the kernel with SMB Direct and measure it (see above); 0: boot Debian's
#                             stock kernel, and the SMB Direct rows say "not measured" (not a failure then)
#   RC_RDMA_VM_SMB_MOUNT      rdma (default) or tcp: mount the share over TCP instead (SMB3 over loopback TCP), to see
#                             the harness refuse it: its rows are not measured and the harness fails
#   RC_SKIP_APT=1             never call apt-get (see scripts/lib.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# shellcheck source-path=SCRIPTDIR/../.. source=scripts/lib.sh
source scripts/lib.sh

START=$SECONDS
HERE=tests/rdma-vm
BUILD_DIR=build/rdma-vm
OUT_DIR=artifacts/rdma-vm
VM_MEM=${RC_RDMA_VM_MEM:-2048}
VM_TIMEOUT=${RC_RDMA_VM_TIMEOUT:-540}
VM_SMP=${RC_RDMA_VM_SMP:-2}

banner() { printf '\n== %s\n' "$*"; }
# Whatever ends the harness (a failed build included), say how it ended and how long it took.
# shellcheck disable=SC2317  # called through the trap
on_exit() {
  local rc=$? s=$((SECONDS - START)) verdict=passed
  ((rc == 0)) || verdict="FAILED (exit $rc)"
  printf 'rdma-vm harness: %s after %dm%02ds\n' "$verdict" $((s / 60)) $((s % 60))
}
trap on_exit EXIT

# ---- 1. packages and build ---------------------------------------------------------------------

banner "packages"
# The build needs rdma-core's headers (else the verbs transport is compiled out); the rest is rxe-vm.sh's.
packages=("${NATIVE_PACKAGES[@]}")
for p in libibverbs-dev librdmacm-dev qemu-system-x86 rdma-core ibverbs-providers ibverbs-utils perftest \
  busybox-static cpio kmod iproute2 fio libtirpc-common; do
  [[ " ${packages[*]} " == *" $p "* ]] || packages+=("$p")
done
ensure_packages "${packages[@]}"

banner "build ($BUILD_DIR, Release)"
build_native "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release

# The test binary is tests/remotecache-tests (src/RemoteCache.Native/tests/CMakeLists.txt); the tools sit
# at the top of the build tree, where the tests (RC_SERVER_PATH) and the bench (next to itself) find the
# server. Paths are absolute because the VM mirrors them.
ABS_BUILD="$ROOT/$BUILD_DIR"
TESTS_BIN="$ABS_BUILD/tests/remotecache-tests"
BENCH_BIN="$ABS_BUILD/remotecache-bench"
SERVER_BIN="$ABS_BUILD/remotecache-server"
for f in "$TESTS_BIN" "$BENCH_BIN" "$SERVER_BIN"; do
  [[ -x $f ]] || { echo "rdma-vm: $f was not built" >&2; exit 1; }
done

# The bench must know the flags and the verbs transport; if it does not (yet), its sections are skipped
# and reported as not available instead of failing inside the VM.
BENCH_OK=1
bench_help=$("$BENCH_BIN" --help 2>&1) || true
for flag in --transport verbs --op --size --batch --qdepth --client-threads --server-threads --seconds --json \
  --submit-time; do
  if [[ $bench_help != *"$flag"* ]]; then
    echo "rdma-vm: remotecache-bench --help does not mention '$flag'; bench sections skipped" >&2
    BENCH_OK=0
  fi
done

# FASTER YCSB in the guest, through the manager: benchmarks/Ycsb built as scripts/run.sh builds it, and the
# remotecache CLI that measures the verbs model the manager plans with, each staged with only the linux-x64 native
# assets; YCSB's with this build's native library and server (the verbs transport compiled in, whatever the .NET
# build's native copy has). The .NET host and shared frameworks go into the VM beside them.
GUEST_YCSB="" GUEST_CLI="" YCSB_ADDS=() YCSB_ARGS="" YCSB_TIMEOUT=0
YCSB_MODE=${RC_RDMA_VM_YCSB:-auto}
[[ $YCSB_MODE =~ ^(auto|0|1)$ ]] || { echo "rdma-vm: RC_RDMA_VM_YCSB is auto, 0 or 1, not '$YCSB_MODE'" >&2; exit 2; }
if [[ $YCSB_MODE == auto ]] && ! command -v dotnet >/dev/null 2>&1; then
  echo "rdma-vm: no .NET SDK here, so no FASTER YCSB in the guest (RC_RDMA_VM_YCSB=1 makes that an error)" >&2
  YCSB_MODE=0
fi
# stage_dotnet_app BIN STAGE: a .NET app's build output without the other platforms' native assets (~550 MB) and
# without a publish/ folder that packaging may have left there.
stage_dotnet_app() {
  local bin=$1 stage=$2
  rm -rf "$stage"
  mkdir -p "$stage/runtimes"
  find "$bin" -mindepth 1 -maxdepth 1 ! -name runtimes ! -name publish -exec cp -a {} "$stage/" \;
  cp -a "$bin/runtimes/linux-x64" "$stage/runtimes/"
}
if [[ $YCSB_MODE != 0 ]]; then
  banner "FASTER YCSB and the remotecache CLI for the guest"
  build_ycsb || exit 1
  build_cli || exit 1
  stage="$ROOT/build/rdma-vm-ycsb"
  stage_dotnet_app "$(dirname "$YCSB_DLL")" "$stage"
  cp "$ABS_BUILD/libremotecache.so" "$SERVER_BIN" "$stage/runtimes/linux-x64/native/"
  GUEST_YCSB="$stage/$(basename "$YCSB_DLL")"
  cli_stage="$ROOT/build/rdma-vm-cli"
  stage_dotnet_app "$(dirname "$CLI_DLL")" "$cli_stage"
  GUEST_CLI="$cli_stage/$(basename "$CLI_DLL")"
  dotnet_root="$(dirname "$(readlink -f "$(command -v dotnet)")")"
  # .NET's cryptography (the manager's keys) loads libssl at run time, so ldd of the binaries does not bring it.
  # awk reads all of ldconfig's output (no early exit): under pipefail, a writer cut off by SIGPIPE fails the harness.
  libssl="$(ldconfig -p | awk '$1 == "libssl.so.3" && /x86-64/ && !found { print $NF; found = 1 }')"
  [[ -n $libssl ]] || { echo "rdma-vm: no libssl.so.3 on this host for .NET in the guest" >&2; exit 1; }
  YCSB_ADDS=(--add "$stage" --add "$cli_stage" --add "$dotnet_root/dotnet" --add "$dotnet_root/host" --add "$dotnet_root/shared"
             --add "$libssl")
  YCSB_ARGS=${RC_RDMA_VM_YCSB_ARGS:-"--workload readonly --records 400000 --threads 1 --rounds 3 --duration 2 --no-fio"}
  [[ " $YCSB_ARGS " != *" --devices "* ]] || { echo "rdma-vm: RC_RDMA_VM_YCSB_ARGS must not set --devices (the harness sets them per mount)" >&2; exit 2; }
  YCSB_TIMEOUT=300
  VM_MEM=${RC_RDMA_VM_MEM:-3072}
  VM_TIMEOUT=${RC_RDMA_VM_TIMEOUT:-1200}
fi

# The kernel: one with SMB Direct (ksmbd's and cifs's), built here once per machine, for the whole boot, so that
# every baseline is measured in the same boot as RemoteCache. SMB_SKIP, when set, is why SMB Direct is not measured.
SMB_MODE=${RC_RDMA_VM_SMBDIRECT:-1}
SMB_MOUNT=${RC_RDMA_VM_SMB_MOUNT:-rdma}
[[ $SMB_MODE =~ ^(0|1)$ ]] || { echo "rdma-vm: RC_RDMA_VM_SMBDIRECT is 0 or 1, not '$SMB_MODE'" >&2; exit 2; }
[[ $SMB_MOUNT =~ ^(rdma|tcp)$ ]] || { echo "rdma-vm: RC_RDMA_VM_SMB_MOUNT is rdma or tcp, not '$SMB_MOUNT'" >&2; exit 2; }
KERNEL_ARGS=() SMB_SKIP="" SMB_DEBS=()
if [[ $SMB_MODE == 1 ]]; then
  banner "kernel with SMB Direct (tests/rdma-vm/smbdirect-kernel.sh: built once per machine)"
  if kernel_dir=$(bash "$HERE/smbdirect-kernel.sh"); then
    KERNEL_ARGS=(--kernel "$kernel_dir")
    echo "booting $(<"$kernel_dir/release") from $kernel_dir (built in $(<"$kernel_dir/build-seconds") s)"
    # bookworm's ksmbd-tools (3.4.7) fails every tree connect; backports' 3.5.2 works (docs/rdma.md).
    SMB_DEBS=(--deb ksmbd-tools/bookworm-backports --deb cifs-utils --deb libnl-genl-3-200)
  else
    SMB_SKIP="the kernel with SMB Direct did not build (tests/rdma-vm/smbdirect-kernel.sh failed: its output is above), so the VM boots Debian's stock kernel, which has no SMB Direct"
    echo "rdma-vm: $SMB_SKIP" >&2
  fi
else
  SMB_SKIP="RC_RDMA_VM_SMBDIRECT=0: Debian's stock kernel, which has no SMB Direct"
fi

# ---- 2. the guest script -----------------------------------------------------------------------

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
GUEST="$ROOT/$OUT_DIR/guest.sh"
# Runs under busybox sh in the VM. Every section prints "===== rdma-vm: NAME =====" first and
# "===== rdma-vm: NAME done rc=N seconds=S =====" last; summarize.py splits the output on these. Each tool runs
# under its own timeout so one hang costs one section, not the whole VM. The whole script normally takes
# 1.5 min on an idle host (the conformance suite ~1 min of it) and up to ~4 min on a busy one; each
# timeout is several times its tool's normal duration, and the VM's own limit is the backstop.
cat > "$GUEST" <<EOF
#!/bin/sh
export RC_VERBS_ADDR=10.0.2.15
ADDR=\$RC_VERBS_ADDR
TESTS=$TESTS_BIN
BENCH=$BENCH_BIN
BENCH_OK=$BENCH_OK
YCSB_DLL=$GUEST_YCSB
CLI_DLL=$GUEST_CLI
DOTNET=${dotnet_root:-}/dotnet
YCSB_ARGS="$YCSB_ARGS"
YCSB_TIMEOUT=$YCSB_TIMEOUT
SMB_SKIP="$SMB_SKIP"
SMB_MOUNT=$SMB_MOUNT
EOF
cat >> "$GUEST" <<'EOF'
begin() { SECTION=$1; SECTION_START=$(date +%s); echo; echo "===== rdma-vm: $1 ====="; }
end() { echo "===== rdma-vm: $SECTION done rc=$1 seconds=$(($(date +%s) - SECTION_START)) ====="; }

# perftest NAME TOOL ARGS...: TOOL as server in the background, then as client to $ADDR, in one section.
# The client's table comes first; the server's own copy follows after "--- server side ---".
# perftest calibrates its cycle counter against gettimeofday; under emulation on a busy host that can
# fail ("Correlation coefficient r^2 < 0.9") and the table then reads "inf", so such a run is repeated once.
perftest() {
  name=$1; shift
  begin "$name"
  attempt=1
  while :; do
    echo "\$ $* $ADDR   (attempt $attempt)"
    timeout 60 "$@" > /tmp/perftest-server.log 2>&1 &
    srv=$!
    # The client fails outright if the server is not listening yet (TCP port 18515 for the exchange).
    i=0
    while [ $i -lt 100 ] && ! netstat -ltn 2>/dev/null | grep -q ':18515 '; do sleep 0.1; i=$((i + 1)); done
    timeout 30 "$@" "$ADDR" > /tmp/perftest-client.log 2>&1
    rc=$?
    [ $rc -eq 0 ] || kill $srv 2>/dev/null
    wait $srv
    cat /tmp/perftest-client.log
    if [ $attempt -lt 2 ] && { [ $rc -ne 0 ] || grep -Eq ' (inf|-?nan) ' /tmp/perftest-client.log; }; then
      echo "--- no valid result (exit $rc); retrying ---"
      attempt=$((attempt + 1))
      continue
    fi
    break
  done
  echo "--- server side ---"
  cat /tmp/perftest-server.log
  end $rc
}

# bench NAME ARGS...: remotecache-bench over verbs (it spawns its own server on $RC_VERBS_ADDR).
bench() {
  name=$1; shift
  begin "$name"
  if [ "$BENCH_OK" != 1 ]; then
    echo "not available: remotecache-bench lacks the needed flags or the verbs transport"
    end 127
    return
  fi
  echo "\$ remotecache-bench --transport verbs $*"
  timeout 60 "$BENCH" --transport verbs "$@" --seconds 2 --json 2>&1
  end $?
}

begin devinfo
ibv_devinfo -v | head -n 40
end $?
echo "locked-memory limit: $(ulimit -l)"

# No "-I 8" variant of ib_write_lat: perftest does not know rxe as an inline-capable device and turns
# inline data off whatever -I says ("Device not recognized to implement inline feature").
begin conformance
echo "\$ RC_VERBS_ADDR=$ADDR remotecache-tests --gtest_filter='*verbs*'"
timeout 300 "$TESTS" --gtest_filter='*verbs*' 2>&1
end $?

# Five rounds, each baseline right before the RemoteCache figure it is compared with: the emulated
# timings drift within a boot, and the summary takes the median of the per-round ratios.
# --submit-time: how much of a lone request's latency is spent inside ibv_post_send (rxe does its protocol
# work, the peer's side and the acknowledgement included, inside that system call).
for round in 1 2 3 4 5; do
  perftest ib_read_lat_$round ib_read_lat -s 8 -n 2000
  bench bench_read_$round --op read --size 8 --batch 1 --qdepth 1 --client-threads 0 --server-threads 0 --submit-time
  perftest ib_write_lat_$round ib_write_lat -s 8 -n 2000
  bench bench_write_$round --op write --size 8 --batch 1 --qdepth 1 --client-threads 0 --server-threads 0 --submit-time
  perftest ib_write_bw_$round ib_write_bw -s 16 -n 20000
  bench bench_write_batch_$round --op write --size 16 --batch 64 --qdepth 8 --client-threads 0 --server-threads 1
done
# Connect time against cache size: the server registers each region once and binds a memory window per
# connection, so joining a 1 GiB cache should cost what joining a 64 MiB one does.
bench connect_64m --op connect --cache-bytes 64M
bench connect_1g --op connect --cache-bytes 1G
# A region pull (live migration) over verbs is RDMA READs of the source's region: against ib_read_bw.
perftest ib_read_bw ib_read_bw -s 65536 -n 2000
bench bench_pull --op pull --cache-bytes 128M

# The file servers over RDMA, each exporting a tmpfs folder (so that no disk is measured) to a mount over rxe0:
#  - SMB Direct, Redy's baseline: the kernel's SMB3 server (ksmbd, whose TCP listener is bound to lo only, so that
#    10.0.2.15 speaks SMB Direct alone) and the kernel's client (cifs, mounted with rdma). The mount is checked to be
#    SMB Direct (the rdma option and a connected SMBDirect transport in /proc/fs/cifs/DebugData) before every
#    section that measures it; otherwise the section prints "not measured: WHY" and the harness fails.
#  - NFS over RDMA: the kernel NFS server (NFSv4.2, port 20049) and the client with proto=rdma. NFSv4's grace period
#    is cut to 10 s so that the first open does not wait 90 s.
# fio reads 512 B and 4 KiB at random, O_DIRECT, at depth 1 and 32 on each, next to remotecache-bench reading the
# same sizes at the same depth (one-sided, c=0 s=0) from a cache as large as the file.
begin nfs_setup
mkdir -p /proc/fs/nfsd /var/lib/nfs /export /mnt/nfs
touch /var/lib/nfs/etab /var/lib/nfs/rmtab
mount -t nfsd nfsd /proc/fs/nfsd && mount -t tmpfs tmpfs /export &&
  echo "/export 10.0.2.0/24(rw,no_root_squash,insecure,fsid=0,no_subtree_check)" > /etc/exports &&
  exportfs -ra && { rpc.mountd -N 2 -N 3 & sleep 1; } &&
  echo 10 > /proc/fs/nfsd/nfsv4gracetime && echo 10 > /proc/fs/nfsd/nfsv4leasetime &&
  rpc.nfsd -N 3 --rdma=20049 --no-udp 4 2>/dev/null; grep -q rdma /proc/fs/nfsd/portlist &&
  timeout 60 mount.nfs 10.0.2.15:/ /mnt/nfs -o vers=4.2,proto=rdma,port=20049 &&
  grep ' /mnt/nfs ' /proc/mounts && dd if=/dev/zero of=/mnt/nfs/file bs=1M count=64 2>/dev/null
nfs_rc=$?
end $nfs_rc

# smb_direct_check: whether /mnt/smb is SMB Direct; if not, prints "not measured: WHY" and fails.
smb_direct_check() {
  opts=$(awk '$2 == "/mnt/smb" && $3 == "cifs" { print $4 }' /proc/mounts)
  if [ -z "$opts" ]; then
    echo "not measured: /mnt/smb is not a cifs mount"
    return 1
  fi
  case ",$opts," in
    *,rdma,*) ;;
    *) echo "not measured: the share is mounted over TCP, not SMB Direct (no rdma among the mount's options: $(echo "$opts" | cut -c1-120))"
       return 1 ;;
  esac
  # cifs_debug.c prints the SMBDirect transport's state in hex; 2 is SMBD_CONNECTED.
  transport=$(grep -o 'SMBDirect.*transport status: [0-9a-f]*' /proc/fs/cifs/DebugData 2>/dev/null | head -n 1)
  case "$transport" in
    *"transport status: 2") echo "verified: $transport" ;;
    *) echo "not measured: cifs reports no connected SMB Direct transport (DebugData: ${transport:-no SMBDirect line})"
       return 1 ;;
  esac
}
begin smb_setup
smb_rc=1
if [ -n "$SMB_SKIP" ]; then
  echo "not measured: $SMB_SKIP"
else
  mkdir -p /srv/share /mnt/smb /etc/ksmbd /run /var/run
  grep -q '^root:' /etc/passwd 2>/dev/null || echo 'root:x:0:0:root:/tmp:/bin/sh' >> /etc/passwd
  grep -q '^root:' /etc/group 2>/dev/null || echo 'root:x:0:' >> /etc/group
  printf '%s\n' '[global]' '	netbios name = rcvm' '	bind interfaces only = yes' '	interfaces = lo' \
    '[share]' '	path = /srv/share' '	read only = no' '	force user = root' > /etc/ksmbd/ksmbd.conf
  if [ "$SMB_MOUNT" = tcp ]; then
    smb_source=//127.0.0.1/share smb_options=vers=3.0,username=rc,password=rcpass,cache=none
  else
    smb_source=//10.0.2.15/share smb_options=rdma,vers=3.0,username=rc,password=rcpass,cache=none
  fi
  mount -t tmpfs tmpfs /srv/share && ksmbd.adduser -a rc -p rcpass > /dev/null && ksmbd.mountd &&
    echo "\$ mount.cifs $smb_source /mnt/smb -o $smb_options" &&
    timeout 60 mount.cifs "$smb_source" /mnt/smb -o "$smb_options" && smb_direct_check &&
    dd if=/dev/zero of=/mnt/smb/file bs=1M count=64 2>/dev/null && smb_direct_check > /dev/null
  smb_rc=$?
  [ $smb_rc -eq 0 ] || dmesg | grep -iE 'cifs|ksmbd|smbd' | tail -n 10
fi
end $smb_rc

# fio_read NAME FILE SIZE DEPTH: fio random reads of FILE (64 MiB) in JSON.
fio_read() {
  timeout 60 fio --name="$1" --filename="$2" --size=64M --rw=randread --bs="$3" --iodepth="$4" \
    --ioengine=libaio --direct=1 --runtime=3 --time_based --output-format=json 2>&1
}
# Interleaved rounds at depth 1: the emulated timings drift within a boot (one boot's 512 B depth-1 ratio fell to 8.6x
# from 11-17x in others, and one boot's rounds ran 7.0, 11.2, 10.7x); the summary reports the round with the median ratio
# and every round's ratio. Five rounds of the row with the target (512 B), three of 4 KiB. At depth 1
# perftest's ib_read_lat of the same size runs too: in a slow boot a raw RDMA READ itself is only ~5x faster than an
# SMB Direct read under emulation, and the summary says so beside the ratio.
for round in 1 2 3 4 5; do
for size in 512 4096; do
  [ $size -eq 4096 ] && [ $round -gt 3 ] && continue
  for depth in 1 32; do
    # Depth 32 has no target: one round of it (the summary takes the rounds a row has).
    [ $depth -eq 32 ] && [ $round -gt 1 ] && continue
    sfx=${size}_${depth}_${round}
    begin nfs_fio_$sfx
    if [ $nfs_rc -eq 0 ]; then
      fio_read nfs /mnt/nfs/file $size $depth
      end $?
    else
      echo "not available: the NFS-over-RDMA mount failed"
      end 1
    fi
    begin smb_fio_$sfx
    if [ $smb_rc -ne 0 ]; then
      echo "not measured: the SMB Direct share is not mounted (see smb_setup)"
      end 1
    elif smb_direct_check; then
      fio_read smb /mnt/smb/file $size $depth
      end $?
    else
      end 1
    fi
    # At depth 1, raw verbs too: the emulator's ceiling for a one-sided read against the file servers in this boot.
    if [ $depth -eq 1 ]; then
      perftest ib_read_lat_cmp_$sfx ib_read_lat -s $size -n 2000
    fi
    bench bench_cmp_$sfx --op read --size $size --batch 1 --qdepth $depth --client-threads 0 \
      --server-threads 0 --cache-bytes 64M
  done
done
done
# FASTER YCSB readonly (unless RC_RDMA_VM_YCSB=0), the remotecache device's cache placed by the manager as in the
# main job: first the verbs model it plans with, measured here on rxe0 (`remotecache slo model --quick`: the shipped
# models are shm and tcp, and emulated RDMA's figures belong to this VM only); then, per mount, FASTER's log in
# O_DIRECT files on it (the ssd device: files under --data-dir), and, on the SMB Direct mount (the NFS one when SMB
# Direct is not there), the tiered device whose cache tier is a RemoteCache over verbs (its file tier on that mount).
# Its SLO is loose (reads under 500 µs, 10 000 reads/s): under TCG a 512 B read takes tens of µs, not Redy's 10.
# .NET runs ~14x slower under TCG; the sections take about three minutes.
# ycsb NAME MOUNT_RC DIR DEVICES WHY: one run of the tool with its log under DIR, unless MOUNT_RC says DIR is not there.
ycsb() {
  begin "$1"
  if [ "$2" -ne 0 ]; then
    echo "$5"
    end 1
    return
  fi
  if [ "$1" = ycsb_smb ] && ! smb_direct_check; then
    end 1
    return
  fi
  flags=$YCSB_ARGS
  # The extended mode (--dynamics) follows the tiered device, so it goes only to the run that has that device.
  case ",$4," in
    *,remotecache,*) ;;
    *) flags=$(echo " $flags " | sed -e 's/ --dynamics-seconds [^ ]*/ /' -e 's/ --dynamics / /') ;;
  esac
  YCSB_FLAGS="$flags --devices $4 --data-dir $3/ycsb --transport verbs --verbs-address $ADDR --models /tmp/models --slo-read-us 500 --slo-ops 10000"
  echo "\$ dotnet $YCSB_DLL $YCSB_FLAGS"
  # shellcheck disable=SC2086  # a list of flags
  # Into a file, not the console: redirected, the tool prints its table 160 columns wide.
  timeout "$YCSB_TIMEOUT" "$DOTNET" "$YCSB_DLL" $YCSB_FLAGS --out /tmp/$1 > /tmp/$1.log 2>&1
  rc=$?
  cat /tmp/$1.log
  echo "--- results.json ---"
  cat /tmp/$1/results.json 2>/dev/null
  echo
  end $rc
}
if [ -n "$YCSB_DLL" ]; then
  export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_ROOT=$(dirname "$DOTNET")
  begin verbs_model
  mkdir -p /tmp/models
  echo "\$ remotecache slo model --transport verbs --verbs-address $ADDR --record-size 512 --quick --operations read --bench $BENCH"
  timeout 240 "$DOTNET" "$CLI_DLL" slo model --transport verbs --verbs-address "$ADDR" --record-size 512 --quick --operations read \
    --bench "$BENCH" --out /tmp/models/verbs-512.json 2>&1
  model_rc=$?
  cat /tmp/models/verbs-512.json 2>/dev/null
  echo
  end $model_rc
  if [ $model_rc -ne 0 ]; then
    smb_devices=ssd nfs_devices=ssd
    echo "no verbs model for the manager to plan with: FASTER's log on the file servers alone"
  elif [ $smb_rc -eq 0 ]; then
    smb_devices=ssd,remotecache nfs_devices=ssd
  else
    smb_devices=ssd nfs_devices=ssd,remotecache
  fi
  ycsb ycsb_smb $smb_rc /mnt/smb $smb_devices "not measured: the SMB Direct share is not mounted (see smb_setup)"
  ycsb ycsb_nfs $nfs_rc /mnt/nfs $nfs_devices "not available: the NFS-over-RDMA mount failed"
fi
# The harness judges the sections; the script itself always succeeds.
exit 0
EOF

# ---- 3. one boot --------------------------------------------------------------------------------

banner "VM (Soft-RoCE under qemu TCG; timeout ${VM_TIMEOUT} s)"
set +e
RC_RXE_CONSOLE_LOG="$ROOT/$OUT_DIR/console.txt" \
  bash "$HERE/rxe-vm.sh" --mem "$VM_MEM" --smp "$VM_SMP" --timeout "$VM_TIMEOUT" --add "$ABS_BUILD" --add "$GUEST" \
  --module nfsd --module rpcrdma --module nfsv4 --deb nfs-kernel-server --deb nfs-common --deb libwrap0 --deb libnfsidmap1 \
  ${KERNEL_ARGS[@]+"${KERNEL_ARGS[@]}"} ${SMB_DEBS[@]+"${SMB_DEBS[@]}"} \
  --add "$(command -v fio)" --add /etc/netconfig ${YCSB_ADDS[@]+"${YCSB_ADDS[@]}"} \
  -- sh "$GUEST" 2>&1 | tee "$OUT_DIR/output.txt"
vm_rc=${PIPESTATUS[0]}
set -e

# ---- 4. summary ---------------------------------------------------------------------------------

banner "summary"
set +e
python3 "$HERE/summarize.py" --vm-rc "$vm_rc" --require-verbs "${RC_RDMA_VM_REQUIRE_VERBS:-0}" --require-smbdirect "$SMB_MODE" \
  --seconds "$((SECONDS - START))" --json "$OUT_DIR/summary.json" "$OUT_DIR/output.txt"
rc=$?
set -e
# The file servers' charts, when a .NET SDK is here to draw them (ScottPlot, as the YCSB tool's); a chart that
# cannot be drawn fails the harness.
charts=""
if [[ -f $OUT_DIR/summary.json ]] && command -v dotnet >/dev/null 2>&1; then
  if build_rdma_vm_charts &&
    dotnet "$RDMA_VM_CHARTS_DLL" "$OUT_DIR/summary.json" "$OUT_DIR"; then
    charts="  charts: $OUT_DIR/file-servers.png, $OUT_DIR/ycsb.png"
  else
    echo "rdma-vm: the charts could not be drawn (see above)" >&2
    rc=1
  fi
fi
echo "raw output: $OUT_DIR/output.txt  guest console: $OUT_DIR/console.txt  summary: $OUT_DIR/summary.json$charts"
exit "$rc"
