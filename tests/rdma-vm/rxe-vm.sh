#!/usr/bin/env bash
# rxe-vm.sh: runs a command inside a throwaway Linux VM that has a working RDMA verbs stack (Soft-RoCE,
# rdma_rxe), so the verbs transport can be exercised on machines without RDMA hardware. The host kernel
# here has no RDMA modules (and containers cannot load any), so the verbs stack has to live in a guest.
#
#   usage: tests/rdma-vm/rxe-vm.sh [--mem MB] [--smp N] [--timeout S] [--add PATH]... [--module NAME]...
#                                  [--deb PACKAGE[/SUITE]]... [--kernel DIR] -- COMMAND...
#
#   --mem MB       guest memory (default 1024)
#   --smp N        guest CPUs (default 2: perftest and our tests poll on both ends of a connection)
#   --timeout S    wall-clock limit for the whole VM, boot included (default 600)
#   --add PATH     copy a file or directory into the VM at the same absolute path, with the shared
#                  libraries its ELF files need (repeatable)
#   --module NAME  also load this kernel module of the guest kernel, after those it depends on (repeatable)
#   --deb PACKAGE  unpack this Debian package (apt-get download, cached) into the VM, with the shared
#                  libraries its ELF files need; nothing of it is installed on the host (repeatable);
#                  PACKAGE/SUITE takes it from another suite of the Debian archive (e.g. bookworm-backports),
#                  through an apt configuration of its own: the host's sources stay as they are
#   --kernel DIR   boot this kernel instead of Debian's: DIR holds vmlinux, config, modules.builtin and release
#                  (smbdirect-kernel.sh's output); every module the VM loads must be built into it
#
# The VM boots Debian's stock kernel under qemu (TCG: KVM does not work here), loads the RDMA modules,
# gives eth0 10.0.2.15/24 (qemu user networking), creates rxe0 on eth0 and runs COMMAND with /bin/sh
# (busybox) in /tmp. Client and server both use 10.0.2.15; rxe loops the traffic back internally.
# COMMAND's stdout+stderr come back on stdout; its exit status is this script's exit status, except:
#   124  the VM did not finish within --timeout
#   125  the VM did not come up (module load, rxe0 creation, kernel panic); the guest log goes to stderr
# One line on stderr reports the boot time. Timings inside the VM are emulated: compare only with
# figures measured in the same boot (e.g. perftest's ib_write_lat), never with the host.
#
# Always in the VM: busybox applets, rdma-core's libibverbs and librdmacm, the rxe provider, ibv_devinfo,
# rdma (iproute2) and perftest's ib_write_lat, ib_read_lat, ib_write_bw, ib_read_bw, ib_send_lat.
#
# Environment (optional):
#   RC_RXE_CACHE        where the unpacked kernel is kept (default /var/tmp/remotecache-rxe-vm)
#   RC_RXE_CONSOLE_LOG  also save the guest's kernel console to this file
#   RC_RXE_DEBIAN_MIRROR  the Debian archive --deb PACKAGE/SUITE fetches from (default http://deb.debian.org/debian)
set -euo pipefail
# Host-side lib/ELF parsing must not depend on the caller's locale.
export LC_ALL=C

usage() { sed -n '6,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "rxe-vm: $*" >&2; exit 2; }

MEM=1024 SMP=2 TIMEOUT=600
ADDS=() EXTRA_MODULES=() DEBS=() KERNEL_DIR=""
while (($#)); do
  case $1 in
    --mem) [[ $# -ge 2 ]] || die "--mem needs a value"; MEM=$2; shift 2 ;;
    --smp) [[ $# -ge 2 ]] || die "--smp needs a value"; SMP=$2; shift 2 ;;
    --timeout) [[ $# -ge 2 ]] || die "--timeout needs a value"; TIMEOUT=$2; shift 2 ;;
    --add) [[ $# -ge 2 ]] || die "--add needs a path"; ADDS+=("$2"); shift 2 ;;
    --module) [[ $# -ge 2 ]] || die "--module needs a name"; EXTRA_MODULES+=("$2"); shift 2 ;;
    --deb) [[ $# -ge 2 ]] || die "--deb needs a package"; DEBS+=("$2"); shift 2 ;;
    --kernel) [[ $# -ge 2 ]] || die "--kernel needs a directory"; KERNEL_DIR=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
(($#)) || { usage >&2; die "no command given"; }
[[ $MEM =~ ^[0-9]+$ && $SMP =~ ^[0-9]+$ && $TIMEOUT =~ ^[0-9]+$ ]] || die "--mem, --smp and --timeout take integers"
# Joined like ssh does: the words form one shell command line for the guest's /bin/sh.
CMD="$*"

CACHE=${RC_RXE_CACHE:-/var/tmp/remotecache-rxe-vm}
# shellcheck source=../../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"   # apt_for_suite
MULTIARCH=/usr/lib/x86_64-linux-gnu
RXE_PROVIDER=$MULTIARCH/libibverbs/librxe-rdmav34.so
RXE_DRIVER=/etc/libibverbs.d/rxe.driver

# ---- host packages -------------------------------------------------------------------------------

PACKAGES=(qemu-system-x86 rdma-core ibverbs-providers ibverbs-utils perftest busybox-static cpio kmod iproute2
  libibverbs-dev librdmacm-dev)

is_elf() { [[ $(od -An -tx1 -N4 "$1" 2>/dev/null) == " 7f 45 4c 46" ]]; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

ensure_host_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    die "missing Debian packages (run as root to install them): ${missing[*]}"
  fi
  echo "rxe-vm: installing ${missing[*]}" >&2
  # Try without refreshing the lists first: it is the common case and much faster; stale or absent
  # lists make the install fail, and then one update is enough.
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  fi
}
ensure_host_packages

# ---- guest kernel: Debian's stock image, unpacked once into the cache ----------------------------

# kernel_package: the versioned linux-image-* package that linux-image-amd64 currently points at.
kernel_package() {
  apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ && !found { print $2; found = 1 }'
}

ensure_kernel() {
  mkdir -p "$CACHE"
  # Serialise concurrent runs: two harnesses must not unpack into the same directory at once.
  exec 9>"$CACHE/.lock"
  flock 9
  if ! compgen -G "$CACHE/kernel/boot/vmlinuz-*" >/dev/null; then
    local pkg tmp
    pkg=$(kernel_package)
    if [[ -z $pkg ]]; then
      apt-get update -q >&2 || true
      pkg=$(kernel_package)
    fi
    [[ -n $pkg ]] || die "cannot resolve the package linux-image-amd64 depends on (apt-cache depends)"
    echo "rxe-vm: fetching $pkg into $CACHE (once)" >&2
    tmp=$(mktemp -d "$CACHE/unpack.XXXXXX")
    # apt downloads as the unprivileged _apt user when it can write the target directory.
    if id _apt >/dev/null 2>&1; then chown _apt "$tmp"; fi
    # apt-get download only fetches the .deb: nothing is installed on (or loaded into) the host.
    (cd "$tmp" && apt-get download -q "$pkg" >&2)
    dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/kernel"
    rm -rf "$CACHE/kernel"
    mv "$tmp/kernel" "$CACHE/kernel"  # atomic: an interrupted unpack never looks like a cached kernel
    rm -rf "$tmp"
    echo "$pkg" > "$CACHE/kernel.package"
  fi
  VMLINUZ=$(compgen -G "$CACHE/kernel/boot/vmlinuz-*" | sort -V | tail -n 1)
  KVER=${VMLINUZ##*/vmlinuz-}
  KERNEL=$CACHE/vmlinux-$KVER
  [[ -e $KERNEL ]] || extract_vmlinux "$VMLINUZ" "$KERNEL" || KERNEL=$VMLINUZ
  exec 9>&-
}

# extract_vmlinux BZIMAGE OUT: the uncompressed kernel ELF inside a bzImage. qemu boots it directly
# through its PVH entry point (Debian's kernels have CONFIG_PVH), which skips the in-guest decompression
# of the xz payload: that alone takes ~6 s under TCG, twice the rest of the boot. The payload is found
# by its compression magic, as the kernel's own scripts/extract-vmlinux does.
extract_vmlinux() {
  local image=$1 out=$2 magic tool offset
  local fallback="rxe-vm: note: booting the compressed kernel (slower)"
  if ! grep -q '^CONFIG_PVH=y' "$CACHE/kernel/boot/config-$KVER" 2>/dev/null; then
    echo "$fallback: $KVER has no PVH entry point" >&2
    return 1
  fi
  for magic in $'\xfd7zXZ:xz' $'\x28\xb5\x2f\xfd:zstd' $'\x1f\x8b\x08:gzip'; do
    tool=${magic##*:}
    command -v "$tool" >/dev/null 2>&1 || continue
    while IFS=: read -r offset _; do
      # Trailing bytes after the stream make the decompressors complain; the output is still whole.
      tail -c +"$((offset + 1))" "$image" | "$tool" -dc > "$out.tmp" 2>/dev/null || true
      if is_elf "$out.tmp"; then
        mv "$out.tmp" "$out"
        return 0
      fi
    done < <(grep -abo "${magic%:*}" "$image" | head -n 3)
  done
  rm -f "$out.tmp"
  echo "$fallback: no kernel ELF found inside $image" >&2
  return 1
}
if [[ -n $KERNEL_DIR ]]; then
  for f in vmlinux config modules.builtin release; do
    [[ -f $KERNEL_DIR/$f ]] || die "--kernel $KERNEL_DIR: no $f there (tests/rdma-vm/smbdirect-kernel.sh makes one)"
  done
  KERNEL=$KERNEL_DIR/vmlinux
  KVER=$(<"$KERNEL_DIR/release")
  # No modules of its own: the module check below finds each in modules.builtin or stops.
  MODDIR=$KERNEL_DIR
else
  ensure_kernel
  MODDIR=$CACHE/kernel/lib/modules/$KVER
  [[ -d $MODDIR ]] || die "no modules for $KVER in $CACHE/kernel (delete $CACHE to refetch)"
fi

# ---- the initramfs -------------------------------------------------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rxe-vm.XXXXXX")
QEMU_PID=""
# shellcheck disable=SC2317  # called through the traps
cleanup() {
  if [[ -n $QEMU_PID ]]; then kill "$QEMU_PID" 2>/dev/null || true; fi  # timeout passes it on to qemu
  rm -rf "$WORK"
}
trap cleanup EXIT
# Interrupted or with a closed stdout (e.g. piped into head): still stop qemu and remove $WORK.
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 141' PIPE
ROOT=$WORK/root
# Merged-/usr layout like the host, so a library keeps the path ldd reported whichever alias it used;
# /bin stays a real directory for busybox's applets, the real tools go to /usr/bin.
mkdir -p "$ROOT"/{bin,dev,proc,sys,tmp,mods,etc/libibverbs.d,lib64,usr/bin,usr/sbin,"$MULTIARCH"}
ln -s usr/lib "$ROOT/lib"

declare -A COPIED=()   # host path -> 1, so shared libraries are resolved once
LIB_DIRS=()            # directories holding copied libraries: the guest's LD_LIBRARY_PATH

# copy_libs FILE: copies the shared libraries ldd resolves for FILE to the same paths in the guest.
copy_libs() {
  local lib dir
  is_elf "$1" || return 0
  # Static executables, objects and archives make ldd fail; they need nothing.
  while IFS= read -r lib; do
    if [[ $lib == "NOTFOUND "* ]]; then
      echo "rxe-vm: warning: $1 needs ${lib#NOTFOUND }, which ldd cannot find" >&2
      continue
    fi
    [[ -n ${COPIED[$lib]:-} ]] && continue
    COPIED[$lib]=1
    mkdir -p "$ROOT${lib%/*}"
    cp -L "$lib" "$ROOT$lib"
    dir=${lib%/*}
    [[ " ${LIB_DIRS[*]-} " == *" $dir "* ]] || LIB_DIRS+=("$dir")
  # ldd's own complaints ("FILE: /lib/.../libc.so.6: version `GLIBC_2.38' not found", of a library this host's glibc
  # is too old for, such as Garnet's native device, which nothing here loads) start with a path too: only
  # "PATH (0x…)" lines are libraries.
  done < <(ldd "$1" 2>/dev/null | awk '
    $2 == "=>" && $3 == "not" { print "NOTFOUND " $1; next }
    $2 == "=>" && $3 ~ /^\// { print $3; next }
    $1 ~ /^\// && $2 ~ /^\(/ { print $1 }')
}

# add_path PATH: PATH (file or directory tree) at the same absolute path in the guest, plus libraries.
add_path() {
  local src f
  src=$(realpath -s "$1")
  [[ -e $src ]] || die "--add $1: no such file or directory"
  if [[ -d $src ]]; then
    # "$src/." copies the contents, also when $src itself is a symlink to a directory.
    mkdir -p "$ROOT$src"
    cp -a "$src/." "$ROOT$src/"
    while IFS= read -r -d '' f; do copy_libs "$f"; done < <(find -H "$src" -type f -print0)
  else
    mkdir -p "$ROOT${src%/*}"
    # -L: a symlinked tool (e.g. via /etc/alternatives) must arrive as the real file.
    cp -L "$src" "$ROOT$src"
    copy_libs "$src"
  fi
}

# busybox-static provides the shell, mount, insmod, ip and the usual applets.
cp -L "$(command -v busybox)" "$ROOT/bin/busybox"
copy_libs "$ROOT/bin/busybox"   # nothing for busybox-static, but harmless if a dynamic one is found
for applet in $("$ROOT/bin/busybox" --list); do
  [[ $applet == busybox ]] || ln -sf busybox "$ROOT/bin/$applet"
done

# The dynamic loader at the path every x86-64 binary names.
cp -L /lib64/ld-linux-x86-64.so.2 "$ROOT/lib64/"

# The verbs stack: libibverbs finds the rxe provider through /etc/libibverbs.d/rxe.driver.
for tool in ibv_devinfo rdma ib_write_lat ib_read_lat ib_write_bw ib_read_bw ib_send_lat; do
  path=$(command -v "$tool") || die "$tool not found on the host"
  add_path "$(readlink -f "$path")"
done
for lib in "$MULTIARCH"/libibverbs.so.1 "$MULTIARCH"/librdmacm.so.1 "$RXE_PROVIDER" "$RXE_DRIVER"; do
  [[ -e $lib ]] || die "$lib is missing (packages libibverbs1, librdmacm1, ibverbs-providers)"
  add_path "$lib"
done

for a in ${ADDS[@]+"${ADDS[@]}"}; do add_path "$a"; done

# --deb: packages unpacked into the guest's merged-/usr layout (a package's /lib, /bin, /sbin land under /usr),
# with the libraries their ELF files need (ldd also looks among the unpacked ones).
if ((${#DEBS[@]})); then
  DEB_CACHE=$CACHE/debs
  DEB_ROOT=$WORK/debroot
  mkdir -p "$DEB_CACHE" "$DEB_ROOT"
  for spec in "${DEBS[@]}"; do
    pkg=${spec%%/*} suite="" dir=$DEB_CACHE
    if [[ $spec == */* ]]; then
      suite=${spec#*/}
      dir=$DEB_CACHE/$suite
    fi
    mkdir -p "$dir"
    if ! compgen -G "$dir/${pkg}_*.deb" >/dev/null &&
      ! (cd "$dir" && apt_for_suite "$CACHE" "$suite" download "$spec" >/dev/null 2>&1); then
      # The command runs without it (and says so if it needs it): a missing package is not a broken VM.
      echo "rxe-vm: warning: --deb $spec: apt-get download failed; the VM goes without it" >&2
      continue
    fi
    dpkg -x "$(compgen -G "$dir/${pkg}_*.deb" | sort -V | tail -n 1)" "$DEB_ROOT"
  done
  for d in lib bin sbin; do
    [[ -d $DEB_ROOT/$d && ! -L $DEB_ROOT/$d ]] || continue
    mkdir -p "$DEB_ROOT/usr/$d"
    cp -a "$DEB_ROOT/$d/." "$DEB_ROOT/usr/$d/"
    rm -rf "${DEB_ROOT:?}/$d"
  done
  cp -a "$DEB_ROOT/." "$ROOT/"
  DEB_LIBS=$DEB_ROOT/usr/lib/x86_64-linux-gnu:$DEB_ROOT/usr/lib
  while IFS= read -r -d '' f; do
    LD_LIBRARY_PATH=$DEB_LIBS copy_libs "$f"
  done < <(find "$DEB_ROOT" -type f -print0)
fi

# Kernel modules, in dependency order (crc32_generic is not a symbol dependency of rdma_rxe, but rxe
# computes its ICRC through the crypto API and `rdma link add` fails with ENOENT without it).
MODULES=(virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci configfs crc32_generic
  failover net_failover virtio_net udp_tunnel ip6_udp_tunnel ib_core ib_uverbs iw_cm ib_cm rdma_cm rdma_ucm
  rdma_rxe)
# --module: each after the modules it depends on (modinfo reads that from the .ko itself).
module_file() { [[ -d $MODDIR/kernel ]] || return 0; find "$MODDIR/kernel" -name "$1.ko" -o -name "$1.ko.xz" -o -name "$1.ko.zst" -o -name "$1.ko.gz" | head -n 1; }
with_dependencies() {
  local m=$1 ko dep
  [[ " ${MODULES[*]} " == *" $m "* ]] && return 0
  ko=$(module_file "$m")
  if [[ -n $ko ]]; then
    for dep in $(modinfo -F depends "$ko" 2>/dev/null | tr ',' ' '); do with_dependencies "$dep"; done
  fi
  [[ " ${MODULES[*]} " == *" $m "* ]] || MODULES+=("$m")
}
for m in ${EXTRA_MODULES[@]+"${EXTRA_MODULES[@]}"}; do with_dependencies "$m"; done
LOAD=()
for m in "${MODULES[@]}"; do
  ko=$(module_file "$m")
  if [[ -z $ko ]]; then
    # Built into this kernel: nothing to load.
    grep -q "/$m.ko\$" "$MODDIR/modules.builtin" 2>/dev/null && continue
    die "kernel module $m is neither in $KVER's modules nor built in"
  fi
  # busybox insmod cannot decompress, so modules go in plain.
  case $ko in
    *.xz) xz -dc "$ko" ;;
    *.zst) zstd -qdc "$ko" ;;
    *.gz) gzip -dc "$ko" ;;
    *) cat "$ko" ;;
  esac > "$ROOT/mods/$m.ko"
  LOAD+=("$m")
done

# A token per run, so the markers cannot be confused with anything the command prints.
TOKEN="rxevm$RANDOM$RANDOM"
LD_PATH=$(IFS=:; echo "${LIB_DIRS[*]-}")
printf '%s\n' "$CMD" > "$ROOT/cmd.sh"

# /init runs as PID 1. Setup messages and the command's output go to the second serial port (ttyS1),
# which carries nothing else; the kernel's console (ttyS0) goes to a log file that is shown only when
# the VM fails to come up. That keeps kernel messages from interleaving with the command's output.
cat > "$ROOT/init" <<EOF
#!/bin/sh
export PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin HOME=/tmp
# The output port is a tty (which keeps the command's stdio line-buffered, so output streams live);
# TERM=dumb stops tools such as GoogleTest from colouring it.
export TERM=dumb
export LD_LIBRARY_PATH=$LD_PATH
out=/dev/ttyS1
log() { echo "@@$TOKEN LOG@@ \$*" > \$out; }
fail() {
  log "\$*"
  dmesg | tail -n 20 | while IFS= read -r l; do log "dmesg: \$l"; done
  echo "@@$TOKEN END rc=125@@" > \$out
  poweroff -f
}
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
exec </dev/null
mkdir -p /dev/shm /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# /tmp becomes a tmpfs too, keeping whatever --add put there.
mkdir -p /.tmp
mount -t tmpfs -o mode=1777 tmpfs /.tmp
cp -a /tmp/. /.tmp/
find /tmp -mindepth 1 -maxdepth 1 -exec rm -rf {} +
mount -o move /.tmp /tmp
chmod 1777 /tmp
for m in ${LOAD[*]}; do
  insmod /mods/\$m.ko || fail "insmod \$m failed"
done
ip link set lo up
ip link set eth0 up || fail "no eth0 (virtio_net did not probe)"
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2 dev eth0
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 failed"
# Memory registration pins pages; the default 8 MiB locked-memory limit is far too small for a cache.
ulimit -l unlimited || fail "ulimit -l unlimited failed"
cd /tmp
read -r up _ < /proc/uptime
echo "@@$TOKEN BEGIN uptime=\$up@@" > \$out
sh /cmd.sh > \$out 2>&1
rc=\$?
echo "@@$TOKEN END rc=\$rc@@" > \$out
sync
poweroff -f
EOF
chmod +x "$ROOT/init"

INITRD=$WORK/initrd.img
(cd "$ROOT" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$INITRD"

# ---- boot and relay ------------------------------------------------------------------------------

CONSOLE=$WORK/console.log
mkfifo "$WORK/out"
START=$EPOCHREALTIME
# qemu runs in the background, writing the guest's output port into a FIFO that this shell reads, so
# its pid is known and an interrupted run can stop it (see cleanup).
# mitigations=off: the guest's speculation workarounds only cost emulated cycles here.
# tsc=reliable: the guest's TSC sync check fails under emulation and the kernel falls back to the HPET,
# which makes every clock_gettime an emulated MMIO access (~1.4 us instead of ~0.25 us). qemu derives
# all vCPUs' TSCs from the host's, so trusting it is sound; perftest times with rdtsc either way.
timeout -k 10 "$TIMEOUT" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m "$MEM" -smp "$SMP" \
  -kernel "$KERNEL" -initrd "$INITRD" \
  -append "console=ttyS0 quiet panic=-1 mitigations=off tsc=reliable" \
  -display none -vga none -monitor none -no-reboot \
  -serial "file:$CONSOLE" -chardev stdio,id=out,signal=off -serial chardev:out \
  -nic user,model=virtio-net-pci </dev/null >"$WORK/out" 2>"$WORK/qemu.err" &
QEMU_PID=$!

rc=""
ready=""
while IFS= read -r line || [[ -n $line ]]; do
  line=${line%$'\r'}   # the guest tty turns \n into \r\n
  [[ -n $rc ]] && continue
  case $line in
    *"@@$TOKEN LOG@@ "*) echo "rxe-vm(guest): ${line#*"@@$TOKEN LOG@@ "}" >&2 ;;
    *"@@$TOKEN BEGIN "*)
      ready=$(awk -v s="$START" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.1f", e - s }')
      up=${line#*uptime=}; up=${up%@@*}
      echo "rxe-vm: VM ready in ${ready} s (guest kernel uptime ${up} s)" >&2 ;;
    *"@@$TOKEN END rc="*)
      # A command whose last line had no newline leaves it in front of the marker.
      [[ $line == "@@$TOKEN END"* ]] || printf '%s\n' "${line%%"@@$TOKEN END"*}"
      rc=${line#*"@@$TOKEN END rc="}; rc=${rc%%@@*} ;;
    *) printf '%s\n' "$line" ;;
  esac
done < "$WORK/out"
qemu_rc=0
wait "$QEMU_PID" || qemu_rc=$?
QEMU_PID=""
if [[ -n ${RC_RXE_CONSOLE_LOG:-} ]]; then cp "$CONSOLE" "$RC_RXE_CONSOLE_LOG"; fi

if [[ -z $rc ]]; then
  if [[ $qemu_rc == 124 || $qemu_rc == 137 ]]; then
    echo "rxe-vm: the VM did not finish within ${TIMEOUT} s" >&2
    rc=124
  else
    echo "rxe-vm: the VM stopped without finishing the command (qemu exit status $qemu_rc)" >&2
    rc=125
  fi
  echo "rxe-vm: --- qemu stderr ---" >&2
  cat "$WORK/qemu.err" >&2
  echo "rxe-vm: --- last guest console lines ---" >&2
  tail -n 40 "$CONSOLE" >&2 || true
elif [[ $rc == 125 && -z $ready ]]; then
  echo "rxe-vm: the VM failed to set up RDMA; last guest console lines:" >&2
  tail -n 20 "$CONSOLE" >&2 || true
fi
exit "$rc"
