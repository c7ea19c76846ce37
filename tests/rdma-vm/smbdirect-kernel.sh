#!/usr/bin/env bash
# smbdirect-kernel.sh: builds the RDMA VM's kernel with SMB Direct (ksmbd's and cifs's), which Debian's kernels lack,
# from Debian's own kernel source (linux-source-6.12 of bookworm-backports, downloaded, not installed), and prints the
# directory that holds it:
#   vmlinux             the uncompressed kernel ELF (qemu boots it through its PVH entry point)
#   config              its .config: x86_64 allnoconfig + tests/rdma-vm/smbdirect.config, only what the VM uses and
#                       all of it built in (no module support, no modules to load); small, so a cold build is short
# The source gets tests/rdma-vm/kernel-patches/*.patch first, if there are any (fixes of bugs the VM's tests meet; each
# says why), each skipped where the source has it already.
#   modules.builtin     what is built in, as rxe-vm.sh's module check reads it
#   release             the kernel release (uname -r)
#   build-seconds       how long the cold build took here
# It is built once per machine: the directory is keyed by the source package's version and a hash of the config
# fragment, the patches and this script, under RC_RXE_CACHE (default /var/tmp/remotecache-rxe-vm), and a build that fails or is
# interrupted leaves nothing there. Progress and the build's tail on failure go to stderr.
#
# usage: tests/rdma-vm/smbdirect-kernel.sh
# environment (optional):
#   RC_RXE_CACHE      the cache directory (shared with rxe-vm.sh; the source package is kept in its debs/)
#   RC_RXE_DEBIAN_MIRROR  the Debian archive the source comes from (default http://deb.debian.org/debian)
#   RC_KERNEL_JOBS    parallel jobs of the build (default: nproc)
set -euo pipefail
export LC_ALL=C

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=../../scripts/lib.sh
source "$ROOT/scripts/lib.sh"

# Debian's 6.12 (bookworm-backports), not bookworm's own 6.1: ksmbd in 6.1.192 corrupts its list of a file's opens
# when FASTER's workers open and write segment files concurrently (an oops in ksmbd_smb_check_shared_mode, then
# RCU stalls; docs/rdma.md).
SOURCE_PACKAGE=linux-source-6.12
SOURCE_SUITE=bookworm-backports
FRAGMENT=$HERE/smbdirect.config
CACHE=${RC_RXE_CACHE:-/var/tmp/remotecache-rxe-vm}
JOBS=${RC_KERNEL_JOBS:-$(nproc)}

die() { echo "smbdirect-kernel: $*" >&2; exit 1; }

# The kernel build's tools. The source is a Debian package that holds a tarball under /usr/src: downloaded (once, into
# the cache) from its suite, never installed.
ensure_packages "${KERNEL_BUILD_PACKAGES[@]}" >&2

mkdir -p "$CACHE"
exec 9>"$CACHE/.smbdirect-kernel.lock"
flock 9   # two harnesses at once download and build it once
debs=$CACHE/debs/$SOURCE_SUITE
mkdir -p "$debs"
if ! compgen -G "$debs/${SOURCE_PACKAGE}_*.deb" >/dev/null; then
  (cd "$debs" && apt_for_suite "$CACHE" "$SOURCE_SUITE" download "$SOURCE_PACKAGE" >&2) ||
    die "could not download $SOURCE_PACKAGE from $SOURCE_SUITE"
fi
deb=$(compgen -G "$debs/${SOURCE_PACKAGE}_*.deb" | sort -V | tail -n 1)
version=$(dpkg-deb -f "$deb" Version)
shopt -s nullglob   # no patches: none to apply
PATCHES=("$HERE"/kernel-patches/*.patch)
shopt -u nullglob
key=$(cat "$FRAGMENT" ${PATCHES[@]+"${PATCHES[@]}"} "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
OUT=$CACHE/smbdirect-kernel-$version-$key
if [[ -f $OUT/vmlinux ]]; then
  echo "$OUT"
  exit 0
fi

WORK=$(mktemp -d "$CACHE/smbdirect-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$SECONDS
echo "smbdirect-kernel: building a kernel with SMB Direct from $SOURCE_PACKAGE $version ($JOBS jobs; once per machine)" >&2
tarball=$(dpkg-deb -c "$deb" | awk '{ print $NF }' | grep -E '^\./usr/src/linux-source-[0-9.]+\.tar\.xz$' | head -n 1)
[[ -n $tarball ]] || die "$deb holds no /usr/src/linux-source-*.tar.xz"
dpkg-deb --fsys-tarfile "$deb" | tar -xO "$tarball" | tar -xJ -C "$WORK"
src=$(find "$WORK" -mindepth 1 -maxdepth 1 -type d -name 'linux-source-*' | head -n 1)
[[ -n $src ]] || die "$tarball holds no linux-source-* directory"

for p in ${PATCHES[@]+"${PATCHES[@]}"}; do
  if patch -d "$src" -p1 -R --dry-run --silent <"$p" >/dev/null 2>&1; then
    echo "smbdirect-kernel: $(basename "$p"): the source has it already" >&2
  elif patch -d "$src" -p1 --forward --silent <"$p" >&2; then
    echo "smbdirect-kernel: applied $(basename "$p")" >&2
  else
    die "$(basename "$p") does not apply to $SOURCE_PACKAGE $version"
  fi
done

log=$WORK/build.log
make_kernel() {
  # ARCH=x86_64, not the host's default (SRCARCH x86): allnoconfig would otherwise make a 32-bit kernel.
  if ! make -C "$src" ARCH=x86_64 -j"$JOBS" "$@" >>"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "make $* failed (the tail of the log above)"
  fi
}
# From nothing: allnoconfig, then the fragment adds what the VM uses (olddefconfig fills in what those select).
make_kernel allnoconfig
# Each line of the fragment: enable NAME or disable NAME (comments and blank lines aside).
wanted=() unwanted=()
while read -r verb name _; do
  case $verb in
    ''|'#'*) continue ;;
    enable) "$src/scripts/config" --file "$src/.config" --enable "$name"; wanted+=("$name") ;;
    disable) "$src/scripts/config" --file "$src/.config" --disable "$name"; unwanted+=("$name") ;;
    *) die "$FRAGMENT: '$verb $name' is neither enable nor disable" ;;
  esac
done <"$FRAGMENT"
make_kernel olddefconfig
# olddefconfig drops what a dependency refuses: every option the fragment enables must have stayed built in.
missing=()
for name in "${wanted[@]}"; do
  grep -q "^CONFIG_$name=y\$" "$src/.config" || missing+=("$name")
done
((${#missing[@]} == 0)) || die "the configuration lost ${missing[*]} (a dependency is off): see $FRAGMENT"
# ... and every option it disables must have stayed off (one that something selects, or that only EXPERT can turn off,
# comes back on: the line would be a lie).
back=()
for name in ${unwanted[@]+"${unwanted[@]}"}; do
  if grep -q "^CONFIG_$name=[ym]\$" "$src/.config"; then back+=("$name"); fi
done
((${#back[@]} == 0)) || die "the configuration turned ${back[*]} back on (selected, or needs EXPERT to be off): see $FRAGMENT"

make_kernel vmlinux
release=$(make -s -C "$src" ARCH=x86_64 kernelrelease)
stage=$WORK/out
mkdir -p "$stage"
cp "$src/vmlinux" "$stage/vmlinux"
cp "$src/.config" "$stage/config"
cp "$src/modules.builtin" "$stage/modules.builtin" 2>/dev/null || : >"$stage/modules.builtin"
echo "$release" >"$stage/release"
echo $((SECONDS - start)) >"$stage/build-seconds"
rm -rf "$OUT"
mv "$stage" "$OUT"   # atomic: an interrupted build never looks like a built kernel
echo "smbdirect-kernel: built $release in $(( (SECONDS - start) / 60 ))m$(( (SECONDS - start) % 60 ))s: $OUT" >&2
echo "$OUT"
