using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using RemoteCache.Manager.V1;
using Xunit;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>Skips a cluster scenario, with the reason, where a bed cannot be made (not root, no <c>ip</c>, no etcd).</summary>
public sealed class ClusterFactAttribute : FactAttribute
{
    public ClusterFactAttribute()
    {
        if (Bed.Unavailable is { } why)
            Skip = why;
    }
}

/// <summary>The cluster scenarios run one at a time, and alone: each starts a dozen processes on a 2-core machine, and failure detection runs on seconds.</summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class ClusterCollection
{
    public const string Name = "Cluster bed";
}

/// <summary>
/// The usual bed of a scenario: 3 etcd members (etcd1–3), managers (mgr1…) with <c>--store etcd</c>, cache servers
/// (srv1…), and client hosts (cli1…) when asked for, each in its own namespace; disposed as a whole. The test process
/// is the default client, in the root namespace.
/// </summary>
public sealed class ClusterBed : IAsyncDisposable
{
    private readonly List<BedManager> _managers = new();
    private readonly List<BedServer> _servers = new();

    private ClusterBed(Bed bed, EtcdCluster etcd, ManagerFiles files)
    {
        Bed = bed;
        Etcd = etcd;
        Files = files;
    }

    public Bed Bed { get; }

    public EtcdCluster Etcd { get; }

    public ManagerFiles Files { get; }

    public IReadOnlyList<BedManager> Managers => _managers;

    /// <summary>The first manager (the only one until managers elect a leader).</summary>
    public BedManager Manager => _managers[0];

    public IReadOnlyList<BedServer> Servers => _servers;

    /// <summary>
    /// Starts etcd, <paramref name="managers"/> managers and <paramref name="servers"/> servers; with
    /// <paramref name="register"/>, adds every server to the first manager's pool.
    /// </summary>
    public static async Task<ClusterBed> StartAsync(int managers = 1, int servers = 4, bool register = true)
    {
        var bed = await Bed.CreateAsync();
        try
        {
            var etcd = await EtcdCluster.StartAsync(bed);
            var cluster = new ClusterBed(bed, etcd, ManagerFiles.Create(bed));
            for (int i = 0; i < servers; i++)
                await cluster.AddServerAsync(register: false);
            for (int i = 0; i < managers; i++)
                await cluster.AddManagerAsync();
            // Through the leader, once there is one (also with one manager: it answers reads before it is elected, and
            // a write before then is refused not-leader).
            if (register)
                Assert.All(await BedServers.AddAllAsync(await cluster.LeaderAsync(TimeSpan.FromSeconds(15)), cluster.Servers),
                           s => Assert.Equal(ServerState.Ready, s.State));
            return cluster;
        }
        catch
        {
            await bed.DisposeAsync();
            throw;
        }
    }

    /// <summary>One more manager (mgrN) on the same etcd cluster and files.</summary>
    public async Task<BedManager> AddManagerAsync(IReadOnlyList<string>? extraArgs = null)
    {
        var manager = await BedManager.StartAsync(Bed, Files, Etcd, $"mgr{_managers.Count + 1}", extraArgs);
        _managers.Add(manager);
        return manager;
    }

    /// <summary>Every manager's address (what a managed client's <c>Addresses</c> takes).</summary>
    public IReadOnlyList<Uri> ManagerAddresses => _managers.Select(m => m.Address).ToList();

    /// <summary>
    /// The one running manager whose health says it leads, once exactly one does; fails after <paramref name="timeout"/>
    /// (no leader, or two that both say so: the latter is never right, even for a moment).
    /// </summary>
    public async Task<BedManager> LeaderAsync(TimeSpan timeout)
    {
        var waited = System.Diagnostics.Stopwatch.StartNew();
        while (true)
        {
            var leaders = new List<BedManager>();
            foreach (var m in _managers.Where(m => m.Running))
                if (await m.IsLeaderAsync())
                    leaders.Add(m);
            Assert.True(leaders.Count <= 1, $"two managers say they lead: {string.Join(", ", leaders.Select(m => m.Host.Name))}");
            if (leaders.Count == 1)
                return leaders[0];
            if (waited.Elapsed > timeout)
                throw new TimeoutException($"no manager leads after {timeout.TotalSeconds} s");
            await Task.Delay(50);
        }
    }

    /// <summary>One more server (srvN), added to the first manager's pool unless <paramref name="register"/> is false.</summary>
    public async Task<BedServer> AddServerAsync(bool register = true)
    {
        var server = await BedServer.StartAsync(Bed, Files, $"srv{_servers.Count + 1}");
        _servers.Add(server);
        if (register)
            await BedServers.AddAllAsync(Manager, new[] { server });
        return server;
    }

    /// <summary>A host for a client program (cli1…); the test process itself reaches every host from the root namespace.</summary>
    public Task<BedHost> AddClientHostAsync() => Bed.AddHostAsync($"cli{Bed.Hosts.Count(h => h.Name.StartsWith("cli", StringComparison.Ordinal)) + 1}");

    public BedServer Server(string serverId) => _servers.Single(s => s.ServerId == serverId);

    /// <summary>The state through <paramref name="via"/> (the first manager by default) and every server.</summary>
    public Task<ClusterSnapshot> SnapshotAsync(BedManager? via = null) => ClusterInvariants.TakeAsync(via ?? Manager, _servers);

    /// <summary>A tcp cache of <paramref name="bytes"/> with a loose read-latency SLO (any small server meets it).</summary>
    public static AllocateRequest Request(long bytes, string? requestId = null) => new()
    {
        Capacity = (ulong)bytes, Transport = "tcp", RecordSize = 8, RequestId = requestId ?? "",
        Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
    };

    public async Task<Cache> AllocateAsync(long bytes, BedManager? via = null) =>
        (await (via ?? Manager).Tenant().AllocateAsync(Request(bytes), deadline: DateTime.UtcNow.AddSeconds(20))).Cache;

    public ValueTask DisposeAsync() => Bed.DisposeAsync();
}
