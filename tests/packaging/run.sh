#!/usr/bin/env bash
# The NuGet packages as a user gets them (scripts/test.sh runs this as the `packaging` suite):
#   1. `dotnet pack RemoteCache.sln -c Release` into a temporary folder: exactly RemoteCache, RemoteCache.Device,
#      the remotecache tool (RemoteCache.Cli), the manager's contract (RemoteCache.Manager.Contract), the managed
#      client (RemoteCache.Manager.Client), the remotecache-manager tool (RemoteCache.Manager), Garnet's device factory
#      (RemoteCache.Garnet) and the remotecache-garnet tool (RemoteCache.Garnet.Host) (.nupkg + .snupkg)
#      come out; the packable projects rebuilt from scratch pack to the same bytes (deterministic builds);
#   2. the listings: RemoteCache holds lib/<framework>/RemoteCache.dll for each of its frameworks and runtimes/linux-x64/native/libremotecache.so,
#      remotecache-server, remotecache-capability and remotecache-admin (ELF files) and not remotecache-bench or
#      remotecache-abi;
#      RemoteCache.Device holds its assembly and depends on RemoteCache (same version) and Microsoft.FASTER.Core;
#      RemoteCache.Garnet holds its net10.0 assembly (Garnet targets .NET 10 only) and depends on RemoteCache,
#      RemoteCache.Manager.Client (same version) and Microsoft.Garnet;
#      the symbol packages hold the PDBs; with a git remote (origin), the nuspecs must name it and the PDBs carry
#      SourceLink (without one, neither can, and a note says so);
#   3. a consumer project (tests/packaging/consumer) copied outside the repository, so that none of its
#      Directory.*.props apply, restores the two packages from the packed folder (plus the machine's usual NuGet
#      sources) into a fresh packages folder, so that a stale package in the global cache cannot stand in for the
#      packed one; the machine's global packages folder serves every other package, as a fallback folder without
#      the two RemoteCache ids;
#   4. the consumer is built for net8.0 and net10.0 (both frameworks the packages target) and published; in every
#      output the four native files are present and the three programs have mode 755 (the package's buildTransitive
#      targets); the net8.0 build runs on .NET 8 itself (scripts/lib.sh's dotnet_with_net8), the net10.0 build and
#      the publish output on .NET 10; run from each, it starts remotecache-server
#      from RemoteCacheServer.ExecutablePath as a separate process, writes and reads a cache on it, and writes and
#      reads a sector through a RemoteCacheDevice over a second, exclusive cache;
#   5. the tool is installed from the packed folder (dotnet tool install --tool-path) and `remotecache slo search`
#      answers from a model of the repository; 6. the remotecache-manager tool installs and serves;
#   7. the README's install commands (the block after <!-- packaging-test: install -->) run as written in a new
#      project with a home of its own: the packages restore, the tools install globally and answer --help, and the
#      remotecache tool takes at most 30 MiB installed (its package at most 30 MiB unpacked, step 2).
# A native asset missing from the package, or not executable after restore, fails one of these steps.
#
# usage: bash tests/packaging/run.sh
# environment (optional):
#   RC_PACKAGING_KEEP=1   keep the temporary directory (its path is printed)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

if ! command -v dotnet >/dev/null 2>&1; then
  echo "packaging: the dotnet SDK is not installed" >&2
  exit 1
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/remotecache-packaging.XXXXXX")"
case "$WORK/" in
  "$ROOT"/*) echo "packaging: the temporary directory $WORK is inside the repository; set TMPDIR elsewhere" >&2; exit 1 ;;
esac
SERVER_PID=""
cleanup() {
  # The consumer stops its server; if the consumer itself was killed (timeout), its server is stopped here.
  if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
  fi
  if [[ "${RC_PACKAGING_KEEP:-0}" == 1 ]]; then
    echo "packaging: kept $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

FEED="$WORK/feed"
CONSUMER="$WORK/consumer"
PACKAGES="$WORK/packages"
FALLBACK="$WORK/global-packages-without-remotecache"

VERSION="$(dotnet msbuild src/RemoteCache/RemoteCache.csproj -getProperty:Version)"
DEVICE_VERSION="$(dotnet msbuild src/RemoteCache.Device/RemoteCache.Device.csproj -getProperty:Version)"
if [[ -z $VERSION || $VERSION != "$DEVICE_VERSION" ]]; then
  echo "packaging: RemoteCache has version '$VERSION', RemoteCache.Device '$DEVICE_VERSION'" >&2
  exit 1
fi
echo "packaging: version $VERSION, work directory $WORK"

# ---- 1. pack -------------------------------------------------------------------------------------
t0=$SECONDS
dotnet pack RemoteCache.sln -c Release -o "$FEED" -m:1 -nologo
echo "-- pack: $((SECONDS - t0))s"

# ---- 1b. deterministic: the managed code rebuilt from scratch packs to the same bytes ------------------
# Every packable project is rebuilt (the Rebuild target, so every referenced assembly is compiled again) and packed
# again; each package must hold the same files with the same bytes. Only the OPC part that NuGet names with a new
# GUID on every pack (package/services/metadata/core-properties/*.psmdcp, and _rels/.rels that points at it) may
# differ. The native files are CMake's build, not rebuilt here.
t0=$SECONDS
for project in $(dotnet sln RemoteCache.sln list | grep '^src/.*\.csproj$'); do
  [[ "$(dotnet msbuild "$project" -getProperty:IsPackable)" == true ]] || continue
  dotnet build "$project" -c Release --no-incremental -m:1 -nologo -v:q >/dev/null
done
dotnet pack RemoteCache.sln -c Release --no-build -o "$WORK/feed-again" -m:1 -nologo -v:q >/dev/null
python3 - "$FEED" "$WORK/feed-again" <<'EOF'
import os, sys, zipfile

first, again = sys.argv[1:]
errors = []
volatile = lambda name: name.endswith(".psmdcp") or name == "_rels/.rels"
for package in sorted(os.listdir(first)):
    if not package.endswith(".nupkg"):
        continue
    other = os.path.join(again, package)
    if not os.path.exists(other):
        errors.append(f"{package} was not produced by the second pack")
        continue
    with zipfile.ZipFile(os.path.join(first, package)) as a, zipfile.ZipFile(other) as b:
        names_a = {n for n in a.namelist() if not volatile(n)}
        names_b = {n for n in b.namelist() if not volatile(n)}
        if names_a != names_b:
            errors.append(f"{package}: files differ: only first {sorted(names_a - names_b)}, only second {sorted(names_b - names_a)}")
        differing = [n for n in sorted(names_a & names_b) if a.read(n) != b.read(n)]
        if differing:
            errors.append(f"{package}: rebuilt, these files differ: {differing}")
        else:
            print(f"  {package}: {len(names_a)} files, the same bytes after a rebuild")
if errors:
    print("packaging: the build is not deterministic:", *errors, sep="\n  ", file=sys.stderr)
    sys.exit(1)
EOF
echo "-- rebuild and pack again: $((SECONDS - t0))s"

# ---- 2. what the packages hold -------------------------------------------------------------------
# With a git remote (origin) on a host the SDK's SourceLink knows (GitHub, GitLab, Azure DevOps, Bitbucket), the
# nuspecs name the repository and the PDBs carry SourceLink; with none, or a local path (a clone of a clone, as CI
# makes), neither is possible and only a note is printed.
REMOTE="$(git remote get-url origin 2>/dev/null || true)"
case "$REMOTE" in
  *github.com*|*gitlab.com*|*dev.azure.com*|*visualstudio.com*|*bitbucket.org*) ;;
  *) [[ -n $REMOTE ]] && echo "packaging: origin ($REMOTE) is not a host SourceLink maps; not requiring repository urls"
     REMOTE="" ;;
esac
FRAMEWORKS="$(dotnet msbuild src/RemoteCache/RemoteCache.csproj -getProperty:TargetFrameworks)"
python3 - "$FEED" "$VERSION" "$REMOTE" "$FRAMEWORKS" <<'EOF'
import os, sys, zipfile, xml.etree.ElementTree as ET

feed, version, remote = sys.argv[1], sys.argv[2], sys.argv[3]
# Every package holds its assemblies once per framework the libraries target.
frameworks = sys.argv[4].split(";")
if len(frameworks) < 2:
    sys.exit(f"packaging: the libraries target {frameworks}; expected net8.0 and net10.0")
errors = []
expected = {f"{i}.{version}.{ext}" for i in ("RemoteCache", "RemoteCache.Device", "RemoteCache.Cli", "RemoteCache.Manager.Contract", "RemoteCache.Manager.Client", "RemoteCache.Manager",
                                            "RemoteCache.Garnet", "RemoteCache.Garnet.Host") for ext in ("nupkg", "snupkg")}
present = set(os.listdir(feed))
if present != expected:
    errors.append(f"the pack produced {sorted(present)}; expected exactly {sorted(expected)}")

def nuspec(z, pid):
    root = ET.fromstring(z.read(f"{pid}.nuspec"))
    ns = {"n": root.tag[1:].split("}")[0]} if root.tag.startswith("{") else {"n": ""}
    return root, ns

def check(pid, required, forbidden, deps, assemblies="lib/{tfm}", max_installed=None, tfms=None):
    """required and assemblies may name {tfm}: such a file must be there for every framework (of tfms, if given)."""
    tfms = tfms or frameworks
    required = [r.format(tfm=f) for r in required for f in (tfms if "{tfm}" in r else [None])]
    path = os.path.join(feed, f"{pid}.{version}.nupkg")
    if not os.path.exists(path):
        return
    with zipfile.ZipFile(path) as z:
        infos = {i.filename: i for i in z.infolist()}
        print(f"{pid}.{version}.nupkg:")
        for name, info in sorted(infos.items()):
            print(f"  {info.file_size:>9}  {name}")
        installed = sum(i.file_size for i in infos.values())
        print(f"  {installed / 2**20:.1f} MiB installed ({os.path.getsize(path) / 2**20:.1f} MiB packed)")
        if max_installed is not None and installed > max_installed:
            errors.append(f"{pid}: {installed / 2**20:.1f} MiB installed, more than {max_installed / 2**20:.0f} MiB")
        for name in required:
            if name not in infos:
                errors.append(f"{pid}: {name} is missing from the package")
            elif name.startswith("runtimes/"):
                if z.read(name)[:4] != b"\x7fELF":
                    errors.append(f"{pid}: {name} is not an ELF file")
        for name in forbidden:
            if name in infos:
                errors.append(f"{pid}: {name} must not be in the package")
        root, ns = nuspec(z, pid)
        meta = root.find("n:metadata", ns)
        def text(tag):
            e = meta.find(f"n:{tag}", ns)
            return e.text if e is not None else None
        for tag in ("id", "version", "authors", "description", "readme", "tags"):
            if not text(tag):
                errors.append(f"{pid}: the nuspec has no <{tag}>")
        if text("license") != "MIT" or meta.find("n:license", ns).get("type") != "expression":
            errors.append(f"{pid}: the nuspec's license is {text('license')!r}, not the expression MIT")
        if "LICENSE" not in infos:
            errors.append(f"{pid}: the package holds no LICENSE file")
        if text("id") != pid or text("version") != version:
            errors.append(f"{pid}: the nuspec says {text('id')} {text('version')}")
        if text("readme") and text("readme") not in infos:
            errors.append(f"{pid}: the readme {text('readme')} is not in the package")
        got = {d.get("id"): d.get("version") for d in meta.iter(f"{{{ns['n']}}}dependency")}
        for dep, ver in deps.items():
            if dep not in got:
                errors.append(f"{pid}: no dependency on {dep} (dependencies: {got})")
            elif ver is not None and got[dep] != ver:
                errors.append(f"{pid}: depends on {dep} {got[dep]}, expected {ver}")
        print(f"  dependencies: {', '.join(f'{k} {v}' for k, v in got.items())}")
        repo = meta.find("n:repository", ns)
        url = repo.get("url") if repo is not None else None
        print(f"  repository: {url or '(no url)'}, commit {repo.get('commit') if repo is not None else '?'}")
        if remote and not url:
            errors.append(f"{pid}: the repository has a remote ({remote}) but the nuspec names no repository url")
    spath = os.path.join(feed, f"{pid}.{version}.snupkg")
    if os.path.exists(spath):
        with zipfile.ZipFile(spath) as z:
            for tfm in tfms:
                pdb = f"{assemblies.format(tfm=tfm)}/{pid}.pdb"
                if pdb not in z.namelist():
                    errors.append(f"{pid}: the symbol package has no {pdb} ({z.namelist()})")
                else:
                    # The SourceLink map is stored as plain JSON in the portable PDB's blob heap.
                    has_link = b'{"documents":' in z.read(pdb)
                    print(f"  {pid}.{version}.snupkg: {pdb}, SourceLink {'present' if has_link else 'absent'}")
                    if remote and not has_link:
                        errors.append(f"{pid}: the repository has a remote ({remote}) but {pdb} has no SourceLink")

native = "runtimes/linux-x64/native/"
check("RemoteCache",
      ["lib/{tfm}/RemoteCache.dll", native + "libremotecache.so", native + "remotecache-server",
       native + "remotecache-capability", native + "remotecache-admin", "buildTransitive/RemoteCache.targets",
       "LICENSE", "contentFiles/any/any/remotecache-models/shm-512.json", "contentFiles/any/any/remotecache-models/tcp-512.json"],
      [native + "remotecache-bench", native + "remotecache-abi"], {})
check("RemoteCache.Device", ["lib/{tfm}/RemoteCache.Device.dll"], [],
      {"RemoteCache": version, "Microsoft.FASTER.Core": None})
tool = "tools/{tfm}/any/"
check("RemoteCache.Cli",
      [tool + "RemoteCache.Cli.dll", tool + "DotnetToolSettings.xml", tool + "RemoteCache.dll",
       tool + native + "libremotecache.so"],
      [], {}, assemblies="tools/{tfm}/any", max_installed=30 * 2**20)
check("RemoteCache.Manager.Contract", ["lib/{tfm}/RemoteCache.Manager.Contract.dll"], [], {"Google.Protobuf": None, "Grpc.Core.Api": None})
check("RemoteCache.Manager",
      [tool + "RemoteCache.Manager.dll", tool + "DotnetToolSettings.xml", tool + "RemoteCache.Manager.Contract.dll",
       tool + native + "remotecache-server", tool + "remotecache-models/shm-8.json", tool + "remotecache-models/tcp-8.json"],
      [], {}, assemblies="tools/{tfm}/any")
newest = [frameworks[-1]]  # Microsoft.Garnet targets the newest .NET only
check("RemoteCache.Garnet", ["lib/{tfm}/RemoteCache.Garnet.dll"], ["lib/net8.0/RemoteCache.Garnet.dll"],
      {"RemoteCache": version, "RemoteCache.Manager.Client": version, "Microsoft.Garnet": None}, tfms=newest)
check("RemoteCache.Garnet.Host",
      [tool + "RemoteCache.Garnet.Host.dll", tool + "DotnetToolSettings.xml", tool + "RemoteCache.Garnet.dll", tool + "Garnet.host.dll",
       tool + native + "libremotecache.so"],
      [], {}, assemblies="tools/{tfm}/any", tfms=newest)
if not remote:
    print("packaging: note: the repository has no git remote, so the packages name no repository url and the PDBs "
          "carry no SourceLink")
if errors:
    print("packaging: the packages are wrong:", *errors, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print("packaging: package contents ok")
EOF

# ---- 3. a consumer outside the repository --------------------------------------------------------
mkdir -p "$CONSUMER" "$PACKAGES" "$FALLBACK"
cp tests/packaging/consumer/Consumer.csproj tests/packaging/consumer/Program.cs "$CONSUMER/"
# MSBuild looks for these upwards from the project; empty ones here stop the search (whatever /tmp holds).
for f in Directory.Build.props Directory.Build.targets Directory.Packages.props; do
  echo '<Project />' > "$WORK/$f"
done

# Every package of the global packages folder except the two under test, as a read-only fallback folder: the
# other packages need no download, and RemoteCache can only come from the packed folder.
GLOBAL="$(dotnet nuget locals global-packages --list | sed -n 's/^global-packages: //p')"
GLOBAL="${GLOBAL%/}"
if [[ -d $GLOBAL ]]; then
  for dir in "$GLOBAL"/*/; do
    [[ -d $dir ]] || continue
    id="$(basename "$dir")"
    case "$id" in remotecache | remotecache.device | remotecache.cli) continue ;; esac
    ln -s "${dir%/}" "$FALLBACK/$id"
  done
fi
# The packed folder as a source; the usual sources (user and machine NuGet.Config) still apply.
cat > "$CONSUMER/nuget.config" <<EOF
<?xml version="1.0" encoding="utf-8"?>
<configuration>
  <packageSources>
    <add key="remotecache-packed" value="$FEED" />
  </packageSources>
  <fallbackPackageFolders>
    <add key="global-packages-without-remotecache" value="$FALLBACK" />
  </fallbackPackageFolders>
  <config>
    <add key="globalPackagesFolder" value="$PACKAGES" />
  </config>
</configuration>
EOF
echo "packaging: NuGet sources of the consumer:"
(cd "$CONSUMER" && dotnet nuget list source --format short)

t0=$SECONDS
dotnet restore "$CONSUMER/Consumer.csproj" -p:RemoteCachePackageVersion="$VERSION" -nologo
echo "-- restore: $((SECONDS - t0))s"

# The two packages were extracted into the fresh packages folder from the packed folder, byte for byte.
python3 - "$FEED" "$PACKAGES" "$VERSION" <<'EOF'
import base64, hashlib, json, os, sys

feed, packages, version = sys.argv[1:]
errors = []
for pid in ("RemoteCache", "RemoteCache.Device"):
    d = os.path.join(packages, pid.lower(), version)
    meta = os.path.join(d, ".nupkg.metadata")
    if not os.path.exists(meta):
        errors.append(f"{pid} {version} was not restored into {packages}")
        continue
    with open(meta) as f:
        m = json.load(f)
    with open(os.path.join(feed, f"{pid}.{version}.nupkg"), "rb") as f:
        packed = base64.b64encode(hashlib.sha512(f.read()).digest()).decode()
    if os.path.normpath(m.get("source", "")) != os.path.normpath(feed):
        errors.append(f"{pid} came from {m.get('source')}, not from {feed}")
    if m.get("contentHash") != packed:
        errors.append(f"{pid}: the restored package is not the packed one")
    print(f"{pid} {version}: restored from {m.get('source')}")
if errors:
    print("packaging:", *errors, sep="\n  ", file=sys.stderr)
    sys.exit(1)
EOF
echo "packaging: the native files as NuGet extracted them:"
ls -l "$PACKAGES/remotecache/$VERSION/runtimes/linux-x64/native/" || true

# check_native DIR WHAT: the four native files in DIR/runtimes/linux-x64/native, the programs executable by every
# user (NuGet extracts them with mode 0744; the package's buildTransitive targets set 0755 in build and publish output).
check_native() {
  local dir="$1/runtimes/linux-x64/native" what=$2 f mode bad=0
  echo "packaging: the native files in the $what:"
  ls -l "$dir/" || true
  for f in libremotecache.so remotecache-server remotecache-capability remotecache-admin; do
    if [[ ! -f "$dir/$f" ]]; then
      echo "packaging: $f is not in the $what ($dir)" >&2
      bad=1
    fi
  done
  for f in remotecache-server remotecache-capability remotecache-admin; do
    [[ -f "$dir/$f" ]] || continue
    mode="$(stat -c '%a' "$dir/$f")"
    if [[ $mode != 755 ]]; then
      echo "packaging: $f has mode $mode in the $what, not 755" >&2
      bad=1
    fi
  done
  for f in remotecache-bench remotecache-abi; do
    if [[ -e "$dir/$f" ]]; then
      echo "packaging: $f must not be in the $what" >&2
      bad=1
    fi
  done
  return $bad
}

# run_consumer DOTNET DLL WHAT: runs the quickstart; its output goes to the console and to $WORK/consumer.log.
run_consumer() {
  local dotnet=$1 dll=$2 what=$3 log="$WORK/consumer.log" rc=0 t0=$SECONDS
  timeout --kill-after=10 180 "$dotnet" "$dll" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
  SERVER_PID="$(sed -n 's/^remotecache-server (pid \([0-9]*\)) ready.*/\1/p' "$log" | head -n 1)"
  echo "-- consumer ($what): $((SECONDS - t0))s, exit $rc"
  if (( rc != 0 )); then
    echo "packaging: the consumer failed from its $what (exit $rc)" >&2
    return 1
  fi
}

# ---- 4. build, publish and run the quickstart -----------------------------------------------------
t0=$SECONDS
dotnet build "$CONSUMER/Consumer.csproj" -c Release --no-restore -p:RemoteCachePackageVersion="$VERSION" -nologo
echo "-- build: $((SECONDS - t0))s"
DOTNET8="$(source scripts/lib.sh && dotnet_with_net8)"
check_native "$CONSUMER/bin/Release/net8.0" "net8.0 build output"
run_consumer "$DOTNET8" "$CONSUMER/bin/Release/net8.0/Consumer.dll" "net8.0 build output, on .NET 8"
grep -q "^runtime: .NET 8\." "$WORK/consumer.log" || { echo "packaging: the net8.0 consumer did not run on .NET 8" >&2; exit 1; }
check_native "$CONSUMER/bin/Release/net10.0" "net10.0 build output"
run_consumer dotnet "$CONSUMER/bin/Release/net10.0/Consumer.dll" "net10.0 build output"

t0=$SECONDS
dotnet publish "$CONSUMER/Consumer.csproj" -c Release -f net10.0 --no-restore --no-build -o "$WORK/publish" \
  -p:RemoteCachePackageVersion="$VERSION" -nologo
echo "-- publish: $((SECONDS - t0))s"
check_native "$WORK/publish" "publish output"
run_consumer dotnet "$WORK/publish/Consumer.dll" "publish output"

# ---- 5. the remotecache tool ------------------------------------------------------------------------
t0=$SECONDS
(cd "$CONSUMER" && dotnet tool install RemoteCache.Cli --tool-path "$WORK/tool" --version "$VERSION" \
   --configfile "$CONSUMER/nuget.config")
echo "-- tool install: $((SECONDS - t0))s"
rc=0
"$WORK/tool/remotecache" slo search --model "$ROOT/models/shm-8.json" --latency-us 1000 --throughput 1000 || rc=$?
if (( rc != 0 )); then
  echo "packaging: the installed remotecache tool failed (exit $rc)" >&2
  exit 1
fi

# ---- 6. the remotecache-manager tool: installs, starts with no configuration, serves ---------------------
(cd "$CONSUMER" && dotnet tool install RemoteCache.Manager --tool-path "$WORK/tool" --version "$VERSION" \
   --configfile "$CONSUMER/nuget.config")
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$WORK/tool/remotecache-manager" --state-dir "$WORK/manager-state" --listen "http://127.0.0.1:$port" >"$WORK/manager.log" 2>&1 &
manager=$!
for _ in $(seq 1 150); do
  grep -q "serving on" "$WORK/manager.log" && break
  kill -0 "$manager" 2>/dev/null || break
  sleep 0.2
done
kill "$manager" 2>/dev/null || true
wait "$manager" 2>/dev/null || true
if ! grep -q "serving on" "$WORK/manager.log" || ! grep -q "generated .*keys.json" "$WORK/manager.log"; then
  echo "packaging: the installed remotecache-manager did not start:" >&2
  cat "$WORK/manager.log" >&2
  exit 1
fi
echo "packaging: remotecache-manager started and served (log: $WORK/manager.log)"

# ---- 7. the README's install commands, as a user runs them --------------------------------------------
# The block after "<!-- packaging-test: install -->" in README.md, line by line, in a new console project with a home
# of its own (~ is a temporary folder). Its pack line is not run again: ~/remotecache-feed is the folder packed above.
# Restore sees the machine's NuGet sources and, as in step 3, the global packages without the RemoteCache ids.
t0=$SECONDS
READ_HOME="$WORK/readme-home"
APP="$WORK/readme-app"
mkdir -p "$READ_HOME/.nuget/NuGet" "$APP"
ln -s "$FEED" "$READ_HOME/remotecache-feed"
if [[ -f $HOME/.nuget/NuGet/NuGet.Config ]]; then
  cp "$HOME/.nuget/NuGet/NuGet.Config" "$READ_HOME/.nuget/NuGet/"
fi
python3 - "$ROOT/README.md" >"$WORK/readme-install.sh" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
block = re.search(r"<!-- packaging-test: install -->\s*```sh\n(.*?)```", text, re.S)
if not block:
    sys.exit("packaging: README.md has no ```sh block after <!-- packaging-test: install -->")
lines = [l for l in block.group(1).splitlines() if l.strip() and not l.lstrip().startswith("dotnet pack ")]
if not any("dotnet tool install" in l for l in lines) or not any("dotnet add package" in l for l in lines):
    sys.exit("packaging: the README's install block has no dotnet add package or dotnet tool install line")
print("set -euo pipefail")
print("\n".join(lines))
PY
cat >"$APP/NuGet.Config" <<XML
<?xml version="1.0" encoding="utf-8"?>
<configuration>
  <fallbackPackageFolders><add key="global-without-remotecache" value="$FALLBACK" /></fallbackPackageFolders>
</configuration>
XML
(
  cd "$APP"
  export HOME="$READ_HOME" DOTNET_CLI_HOME="$READ_HOME" NUGET_PACKAGES="$WORK/readme-packages" DOTNET_NOLOGO=1 DOTNET_CLI_TELEMETRY_OPTOUT=1
  dotnet new console --name ReadmeApp --output . >/dev/null
  bash "$WORK/readme-install.sh"
  dotnet build -nologo -v:q >/dev/null
  "$READ_HOME/.dotnet/tools/remotecache" --help >/dev/null
  "$READ_HOME/.dotnet/tools/remotecache-manager" --help >/dev/null
  "$READ_HOME/.dotnet/tools/remotecache-garnet" --help >/dev/null
)
output="$(dirname "$(find "$APP/bin/Debug" -name ReadmeApp.dll | head -1)")"
for f in runtimes/linux-x64/native/libremotecache.so runtimes/linux-x64/native/remotecache-server remotecache-models/shm-512.json; do
  if [[ ! -f $output/$f ]]; then
    echo "packaging: the README's project has no $f in its output ($output)" >&2
    exit 1
  fi
done
installed=$(du -sm "$READ_HOME/.dotnet/tools/.store/remotecache.cli" | cut -f1)
echo "-- README install commands: $((SECONDS - t0))s; the remotecache tool takes ${installed} MiB installed"
if (( installed > 30 )); then
  echo "packaging: the remotecache tool takes ${installed} MiB installed; at most 30" >&2
  exit 1
fi
echo "packaging: passed"
