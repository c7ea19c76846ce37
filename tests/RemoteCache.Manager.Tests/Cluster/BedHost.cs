using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Net;
using System.Threading.Tasks;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// One "host" of the bed: a network namespace whose <c>eth0</c> (one end of a veth pair, the other end on the bed's bridge)
/// has <see cref="Address"/>/24, with <c>lo</c> up. Programs run in it with <see cref="Start"/>.
/// </summary>
public sealed class BedHost
{
    private readonly Bed _bed;
    private readonly List<BedProcess> _processes = new();

    internal BedHost(Bed bed, string name, string ns, string hostLink, IPAddress address, string? memoryCgroup)
    {
        _bed = bed;
        Name = name;
        Namespace = ns;
        HostLink = hostLink;
        Address = address;
        MemoryCgroup = memoryCgroup;
    }

    /// <summary>
    /// The host's memory cgroup (a directory of cgroup v1's memory hierarchy), when it was made with a memory limit: every
    /// process it starts runs in it. Null otherwise.
    /// </summary>
    public string? MemoryCgroup { get; }

    /// <summary>A counter of its memory cgroup (<c>memory.usage_in_bytes</c>, ...): its first number.</summary>
    public long CgroupValue(string file) =>
        long.Parse(File.ReadAllText(Path.Combine(MemoryCgroup ?? throw new InvalidOperationException($"host {Name} has no memory cgroup"), file)).Split('\n')[0].Trim(),
                   CultureInfo.InvariantCulture);

    /// <summary>How many of its processes the kernel's OOM killer took (<c>memory.oom_control</c>'s oom_kill).</summary>
    public int OomKills
    {
        get
        {
            string control = File.ReadAllText(Path.Combine(MemoryCgroup ?? throw new InvalidOperationException($"host {Name} has no memory cgroup"), "memory.oom_control"));
            var line = control.Split('\n').Single(l => l.StartsWith("oom_kill ", StringComparison.Ordinal));
            return int.Parse(line["oom_kill ".Length..], CultureInfo.InvariantCulture);
        }
    }

    /// <summary>The bed's name for it ("etcd1", "mgr1", "srv3", "cli1").</summary>
    public string Name { get; }

    /// <summary>The network namespace (<c>ip netns exec</c> it to look around while a test is paused in a debugger).</summary>
    public string Namespace { get; }

    /// <summary>The veth end on the bridge, in the root namespace.</summary>
    public string HostLink { get; }

    public IPAddress Address { get; }

    /// <summary>Whether <see cref="CutLinkAsync"/> is in force.</summary>
    public bool LinkCut { get; private set; }

    /// <summary>Whether <see cref="RemoveAsync"/> took it away.</summary>
    public bool Removed { get; private set; }

    public IReadOnlyList<BedProcess> Processes
    {
        get
        {
            lock (_processes)
                return _processes.ToList();
        }
    }

    /// <summary>Runs <paramref name="program"/> in this host; its output goes to a log file named after <paramref name="name"/>.</summary>
    public BedProcess Start(string name, string program, IEnumerable<string> args, IReadOnlyDictionary<string, string>? environment = null)
    {
        if (Removed)
            throw new InvalidOperationException($"host {Name} was removed");
        var process = BedProcess.Start(this, name, program, args, Path.Combine(_bed.Directory, "logs", $"{Name}.{name}.log"), environment);
        lock (_processes)
            _processes.Add(process);
        return process;
    }

    /// <summary>
    /// Takes the host off the network: its <c>eth0</c> goes down from inside the namespace, so packets to and from it are
    /// dropped (peers see silence, as with a pulled cable). Not from the bridge's side: that removes the namespace's
    /// route, and its traffic would leave by another way instead of being lost (FACTS.md).
    /// </summary>
    public async Task CutLinkAsync()
    {
        await Ip.InAsync(Namespace, "link", "set", "eth0", "down").ConfigureAwait(false);
        LinkCut = true;
    }

    /// <summary>Puts <c>eth0</c> back up (its address stayed; the subnet's route comes back with the link).</summary>
    public async Task RestoreLinkAsync()
    {
        await Ip.InAsync(Namespace, "link", "set", "eth0", "up").ConfigureAwait(false);
        LinkCut = false;
    }

    /// <summary>
    /// Drops what this host sends to <paramref name="peer"/> (a blackhole route in the namespace): a selective cut, e.g.
    /// a manager's link to etcd while its clients still reach it. This host's own new connections to the peer fail at
    /// once (EINVAL); the peer sees silence — so to make a host see only silence from peers, block it on the peers' side
    /// (each etcd host blocks the manager's address: the manager's requests arrive, no answer comes back).
    /// </summary>
    public async Task BlockAsync(IPAddress peer)
    {
        await Ip.InAsync(Namespace, "route", "add", "blackhole", peer + "/32").ConfigureAwait(false);
        lock (_blocked)
            _blocked.Add(peer);
    }

    /// <summary>Undoes <see cref="BlockAsync"/>.</summary>
    public async Task UnblockAsync(IPAddress peer)
    {
        await Ip.InAsync(Namespace, "route", "del", "blackhole", peer + "/32").ConfigureAwait(false);
        lock (_blocked)
            _blocked.Remove(peer);
    }

    /// <summary>The peers <see cref="BlockAsync"/> blocks now.</summary>
    public IReadOnlyList<IPAddress> Blocked
    {
        get
        {
            lock (_blocked)
                return _blocked.ToList();
        }
    }

    private readonly HashSet<IPAddress> _blocked = new();

    /// <summary>Every process in the namespace (the bed's and any they started), as the kernel sees it.</summary>
    public async Task<IReadOnlyList<int>> PidsAsync()
    {
        var (code, output) = await Ip.RunAsync(new[] { "netns", "pids", Namespace }, check: false).ConfigureAwait(false);
        return code != 0 ? Array.Empty<int>() : Bed.ParsePids(output);
    }

    /// <summary>kill -9 of everything running in the host (a power cut); the namespace and its link stay.</summary>
    public async Task KillAllAsync()
    {
        await Ip.SignalAsync("KILL", await PidsAsync().ConfigureAwait(false)).ConfigureAwait(false);
        foreach (var p in Processes)
            await Task.WhenAny(p.Exited, Task.Delay(TimeSpan.FromSeconds(10))).ConfigureAwait(false);
    }

    /// <summary>The whole host lost: everything in it killed, its link and namespace deleted. Its address answers no more.</summary>
    public async Task RemoveAsync()
    {
        if (Removed)
            return;
        await KillAllAsync().ConfigureAwait(false);
        // The bridge's end first: deleting a namespace frees its devices later, in the background, and a run that
        // checks for leftovers right after would see the veth still there.
        await Ip.RunAsync(new[] { "link", "del", HostLink }, check: false).ConfigureAwait(false);
        await Ip.RunAsync(new[] { "netns", "del", Namespace }, check: false).ConfigureAwait(false);
        if (MemoryCgroup is not null)
            await RemoveCgroupAsync(MemoryCgroup).ConfigureAwait(false);
        Removed = true;
    }

    /// <summary>Removes a memory cgroup once the processes in it are gone (they leave it as they exit); false if it stayed.</summary>
    internal static async Task<bool> RemoveCgroupAsync(string cgroup)
    {
        for (int i = 0; i < 100; i++)
        {
            try
            {
                if (Directory.Exists(cgroup))
                    Directory.Delete(cgroup);
                return true;
            }
            catch (IOException)
            {
                await Task.Delay(100).ConfigureAwait(false);  // a process still exiting
            }
        }
        return false;
    }

    internal async Task DisposeProcessesAsync()
    {
        foreach (var p in Processes)
            await p.DisposeAsync().ConfigureAwait(false);
    }

    public override string ToString() => string.Create(CultureInfo.InvariantCulture, $"{Name} ({Address}, netns {Namespace})");
}
