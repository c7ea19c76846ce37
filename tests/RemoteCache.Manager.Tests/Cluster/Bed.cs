using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Net;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// A multi-host test bed on this one machine: a Linux bridge in the root namespace with <see cref="Gateway"/> (x.x.x.1/24)
/// on it, and one network namespace per host (<see cref="AddHostAsync"/>) joined to the bridge by a veth pair. The test
/// process stays in the root namespace and reaches every host's address through the bridge.
/// </summary>
/// <remarks>
/// <para>
/// Names: every namespace, link and bridge the bed makes starts with <see cref="RunId"/> = <see cref="NamePrefix"/> +
/// the test process's pid (5 base-36 digits) + a sequence digit, short enough for interface names (15 characters at
/// most). A name whose pid is dead (or is this process's, from a bed that was never disposed) is a leftover of a
/// crashed run and is removed by the next bed; a live pid's are another run's, left alone.
/// </para>
/// <para>Dispose kills every process in its hosts and removes every namespace, link and bridge it made, whatever happened.</para>
/// </remarks>
public sealed class Bed : IAsyncDisposable
{
    /// <summary>What every name the bed makes starts with; nothing else on a machine should.</summary>
    public const string NamePrefix = "rcb";

    /// <summary>Set to 1 to keep the bed's directory (logs, etcd data) after the run.</summary>
    public const string KeepVariable = "RC_BED_KEEP";

    private static readonly HashSet<string> Live = new();
    private static int _sequence;
    private readonly List<BedHost> _hosts = new();
    private readonly List<IAsyncDisposable> _owned = new();
    private int _disposed;

    private Bed(string runId, string subnet, string directory)
    {
        RunId = runId;
        Subnet = subnet;
        Directory = directory;
    }

    public string RunId { get; }

    /// <summary>The hosts' /24, as its first three octets ("10.77.12").</summary>
    public string Subnet { get; }

    public string Bridge => RunId + "br";

    /// <summary>The root namespace's address on the bridge: how the test process reaches the hosts.</summary>
    public IPAddress Gateway => IPAddress.Parse(Subnet + ".1");

    /// <summary>Logs (logs/HOST.PROCESS.log), etcd data directories, the managers' files.</summary>
    public string Directory { get; }

    public IReadOnlyList<BedHost> Hosts
    {
        get
        {
            lock (_hosts)
                return _hosts.ToList();
        }
    }

    /// <summary>Why a bed cannot be made on this machine (not root, no <c>ip</c>, no etcd), or null.</summary>
    public static string? Unavailable => Ip.Unavailable();

    /// <summary>Removes leftovers of crashed runs, then makes the bridge.</summary>
    public static async Task<Bed> CreateAsync()
    {
        if (Unavailable is { } why)
            throw new InvalidOperationException(why);
        await RemoveLeftoversAsync().ConfigureAwait(false);
        int pid = Environment.ProcessId;
        string runId = NamePrefix + Base36(pid, 5) + Base36(Interlocked.Increment(ref _sequence) % 36, 1);
        lock (Live)
            Live.Add(runId);
        string dir = System.IO.Directory.CreateTempSubdirectory($"rcbed-{runId}-").FullName;
        System.IO.Directory.CreateDirectory(Path.Combine(dir, "logs"));
        var bed = new Bed(runId, await FreeSubnetAsync(runId).ConfigureAwait(false), dir);
        try
        {
            await Ip.RunAsync("link", "add", bed.Bridge, "type", "bridge").ConfigureAwait(false);
            await Ip.RunAsync("addr", "add", bed.Gateway + "/24", "dev", bed.Bridge).ConfigureAwait(false);
            await Ip.RunAsync("link", "set", bed.Bridge, "up").ConfigureAwait(false);
            return bed;
        }
        catch
        {
            await bed.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    /// <summary>
    /// A new host: namespace <c>RUNID-NAME</c>, <c>eth0</c> with the next address of the subnet (from .2 on, in the order
    /// hosts are added), <c>lo</c> up.
    /// </summary>
    /// <summary>Where the bed's memory cgroups go (cgroup v1's memory controller, as this kernel mounts it).</summary>
    public const string MemoryCgroupRoot = "/sys/fs/cgroup/memory";

    /// <param name="name">The host's name.</param>
    /// <param name="memoryLimit">
    /// Bytes: the host is also a memory cgroup (v1) of this limit, named as its namespace, and every process it starts
    /// runs in it, seeing it as a host's processes see theirs (<see cref="BedHost.MemoryCgroup"/>). Null: no cgroup.
    /// </param>
    public async Task<BedHost> AddHostAsync(string name, long? memoryLimit = null)
    {
        int index;
        lock (_hosts)
            index = _hosts.Count + 2;
        if (index > 254)
            throw new InvalidOperationException("a bed has at most 253 hosts");
        string ns = $"{RunId}-{name}", hostLink = $"{RunId}v{index}", peer = $"{RunId}p{index}";
        string? cgroup = memoryLimit is null ? null : Path.Combine(MemoryCgroupRoot, ns);
        var host = new BedHost(this, name, ns, hostLink, IPAddress.Parse($"{Subnet}.{index}"), cgroup);
        lock (_hosts)
            _hosts.Add(host);  // before anything exists, so that a failure half-way is still cleaned up
        if (cgroup is not null)
        {
            System.IO.Directory.CreateDirectory(cgroup);
            await File.WriteAllTextAsync(Path.Combine(cgroup, "memory.limit_in_bytes"), memoryLimit!.Value.ToString(CultureInfo.InvariantCulture)).ConfigureAwait(false);
        }
        await Ip.RunAsync("netns", "add", ns).ConfigureAwait(false);
        await Ip.RunAsync("link", "add", hostLink, "type", "veth", "peer", "name", peer).ConfigureAwait(false);
        await Ip.RunAsync("link", "set", peer, "netns", ns).ConfigureAwait(false);
        await Ip.RunAsync("link", "set", hostLink, "master", Bridge).ConfigureAwait(false);
        await Ip.RunAsync("link", "set", hostLink, "up").ConfigureAwait(false);
        await Ip.InAsync(ns, "link", "set", peer, "name", "eth0").ConfigureAwait(false);
        await Ip.InAsync(ns, "addr", "add", host.Address + "/24", "dev", "eth0").ConfigureAwait(false);
        await Ip.InAsync(ns, "link", "set", "eth0", "up").ConfigureAwait(false);
        await Ip.InAsync(ns, "link", "set", "lo", "up").ConfigureAwait(false);
        return host;
    }

    public BedHost Host(string name) => Hosts.Single(h => h.Name == name);

    /// <summary>Disposed with the bed, before its hosts go (clients, channels, the parts of the bed built on it).</summary>
    public T Own<T>(T disposable) where T : IAsyncDisposable
    {
        lock (_owned)
            _owned.Add(disposable);
        return disposable;
    }

    /// <summary>The last lines of every process's log, for a failed scenario's output.</summary>
    public string Diagnostics(int linesPerProcess = 30)
    {
        var text = new StringBuilder();
        text.AppendLine(CultureInfo.InvariantCulture, $"bed {RunId}, subnet {Subnet}.0/24, directory {Directory}");
        foreach (var host in Hosts)
            foreach (var p in host.Processes)
            {
                text.AppendLine(CultureInfo.InvariantCulture, $"==== {host} · {p.Name} (pid {p.Pid}{(p.HasExited ? ", exited" : "")}) · {p.LogFile}");
                text.AppendLine(p.Tail(linesPerProcess));
            }
        return text.ToString();
    }

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return;
        List<IAsyncDisposable> owned;
        lock (_owned)
            owned = Enumerable.Reverse(_owned).ToList();
        foreach (var o in owned)
        {
            try
            {
                await o.DisposeAsync().ConfigureAwait(false);
            }
            catch (Exception e)
            {
                // The hosts must go whatever a part failed to close.
                Console.Error.WriteLine($"bed {RunId}: disposing {o.GetType().Name} failed: {e.Message}");
            }
        }
        foreach (var host in Hosts)
        {
            await host.RemoveAsync().ConfigureAwait(false);
            await host.DisposeProcessesAsync().ConfigureAwait(false);
        }
        await Ip.RunAsync(new[] { "link", "del", Bridge }, check: false).ConfigureAwait(false);
        lock (Live)
            Live.Remove(RunId);
        if (Environment.GetEnvironmentVariable(KeepVariable) != "1")
        {
            try
            {
                System.IO.Directory.Delete(Directory, recursive: true);
            }
            catch (IOException)
            {
                // A file still being written by a process that is going away; the temp directory is the system's to clean.
            }
        }
    }

    /// <summary>Namespaces and links named by <see cref="NamePrefix"/> that belong to no live run: removed, their processes killed.</summary>
    public static async Task<IReadOnlyList<string>> RemoveLeftoversAsync()
    {
        var removed = new List<string>();
        var (_, namespaces) = await Ip.RunAsync(new[] { "netns", "list" }, check: false).ConfigureAwait(false);
        foreach (string ns in namespaces.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)
                                        .Select(l => l.Split(' ')[0]).Where(IsLeftover))
        {
            var (_, pids) = await Ip.RunAsync(new[] { "netns", "pids", ns }, check: false).ConfigureAwait(false);
            await Ip.SignalAsync("KILL", ParsePids(pids)).ConfigureAwait(false);
            await Ip.RunAsync(new[] { "netns", "del", ns }, check: false).ConfigureAwait(false);
            removed.Add(ns);
        }
        if (System.IO.Directory.Exists(MemoryCgroupRoot))
        {
            foreach (string cgroup in System.IO.Directory.GetDirectories(MemoryCgroupRoot, NamePrefix + "*").Where(d => IsLeftover(Path.GetFileName(d))))
            {
                await Ip.SignalAsync("KILL", ParsePids(await File.ReadAllTextAsync(Path.Combine(cgroup, "cgroup.procs")).ConfigureAwait(false))).ConfigureAwait(false);
                if (await BedHost.RemoveCgroupAsync(cgroup).ConfigureAwait(false))
                    removed.Add(cgroup);
            }
        }
        // Veth ends before bridges (either order works; this one leaves no port on a deleted bridge in between).
        var (_, links) = await Ip.RunAsync(new[] { "-o", "link", "show" }, check: false).ConfigureAwait(false);
        var names = links.Split('\n', StringSplitOptions.RemoveEmptyEntries)
                         .Select(l => l.Split(':', 3)).Where(p => p.Length == 3).Select(p => p[1].Trim().Split('@')[0])
                         .Where(IsLeftover).OrderBy(n => n.EndsWith("br", StringComparison.Ordinal)).ToList();
        foreach (string link in names)
        {
            await Ip.RunAsync(new[] { "link", "del", link }, check: false).ConfigureAwait(false);
            removed.Add(link);
        }
        return removed;
    }

    // A bed's name: the run id (NamePrefix, 5 base-36 digits of a pid, a sequence digit) and one of the suffixes the bed
    // uses, nothing else (an unrelated "rcbridge0" is not one). A leftover when that pid is dead, or is this process and
    // the run is not one of its live beds.
    private static readonly System.Text.RegularExpressions.Regex BedName =
        new($"^({NamePrefix}([0-9a-z]{{5}})[0-9a-z])(br|[vp][0-9]{{1,3}}|-[a-z0-9]+)$", System.Text.RegularExpressions.RegexOptions.CultureInvariant);

    private const int PidMaxLimit = 4194304;  // the kernel's PID_MAX_LIMIT on 64-bit

    private static bool IsLeftover(string name)
    {
        var match = BedName.Match(name);
        if (!match.Success || !TryParseBase36(match.Groups[2].Value, out int pid) || pid > PidMaxLimit)
            return false;
        if (pid == Environment.ProcessId)
        {
            lock (Live)
                return !Live.Contains(match.Groups[1].Value);
        }
        return !System.IO.Directory.Exists($"/proc/{pid}");
    }

    internal static IReadOnlyList<int> ParsePids(string text) =>
        text.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)
            .Select(l => int.TryParse(l, NumberStyles.None, CultureInfo.InvariantCulture, out int p) ? p : -1).Where(p => p > 0).ToList();

    // 10.A.B.0/24 from the run id, A in 64..127: no address of this machine may be in it already (another bed's gateway
    // would be), so two runs at once do not share a subnet.
    private static async Task<string> FreeSubnetAsync(string runId)
    {
        var (_, addresses) = await Ip.RunAsync("-o", "-4", "addr", "show").ConfigureAwait(false);
        uint hash = 2166136261;
        foreach (char c in runId)
            hash = (hash ^ c) * 16777619;
        for (int attempt = 0; attempt < 64; attempt++)
        {
            uint h = hash + (uint)attempt * 7919;
            string subnet = string.Create(CultureInfo.InvariantCulture, $"10.{64 + h % 64}.{(h >> 8) % 256}");
            if (!addresses.Contains($" {subnet}.", StringComparison.Ordinal))
                return subnet;
        }
        throw new InvalidOperationException("no free 10.64-127.x.0/24 subnet for the bed");
    }

    private const string Digits = "0123456789abcdefghijklmnopqrstuvwxyz";

    private static string Base36(int value, int width)
    {
        var s = new char[width];
        for (int i = width - 1; i >= 0; i--, value /= 36)
            s[i] = Digits[value % 36];
        return new string(s);
    }

    private static bool TryParseBase36(string text, out int value)
    {
        value = 0;
        foreach (char c in text)
        {
            int d = Digits.IndexOf(c, StringComparison.Ordinal);
            if (d < 0)
                return false;
            value = value * 36 + d;
        }
        return true;
    }
}
