using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using RemoteCache.Admin;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// A <c>remotecache-server</c> in its own host: tcp on the host's address, port 7300, a "small" VM of the test catalogue
/// (64 MiB regions, 256 MiB, one thread), admitting by the managers' admission key.
/// </summary>
public sealed class BedServer
{
    public const int Port = 7300;
    public const string VmType = "small";
    private readonly ManagerFiles _files;

    internal BedServer(BedHost host, ManagerFiles files)
    {
        Host = host;
        _files = files;
    }

    public BedHost Host { get; }

    /// <summary>Its tcp endpoint, which is also its server id (a server's id is its first endpoint as bound).</summary>
    public string Endpoint => $"tcp:{Host.Address}:{Port}";

    public string ServerId => Endpoint;

    public BedProcess? Process { get; private set; }

    /// <summary>Adds host <paramref name="name"/> and starts a server there.</summary>
    public static async Task<BedServer> StartAsync(Bed bed, ManagerFiles files, string name)
    {
        var server = new BedServer(await bed.AddHostAsync(name).ConfigureAwait(false), files);
        await server.StartAsync().ConfigureAwait(false);
        return server;
    }

    /// <summary>Starts (or restarts, after a kill) the server process and waits for its "ready".</summary>
    public async Task StartAsync()
    {
        if (Process is { HasExited: false })
            throw new InvalidOperationException($"{ServerId} is running");
        Process = Host.Start("server", RemoteCacheServer.ExecutablePath, new[]
        {
            "--listen", Endpoint, "--region-size", "64M", "--memory-limit", "256M", "--threads", "1", "--admission-key", _files.AdmissionKeyFile,
        });
        await Process.WaitForOutputAsync("ready", TimeSpan.FromSeconds(10)).ConfigureAwait(false);
    }

    /// <summary>What AddServer takes for it (with the operator's key, through any manager).</summary>
    public AddServerRequest AddRequest()
    {
        var add = new AddServerRequest { VmType = VmType };
        add.Endpoints.Add("tcp", Endpoint);
        return add;
    }

    /// <summary>The caches it holds now, through its admin interface (authenticated by the admission key).</summary>
    public async Task<IReadOnlyList<ServerCacheInfo>> ListCachesAsync(TimeSpan? timeout = null)
    {
        await using var admin = await CacheServerAdmin.ConnectAsync(Endpoint, _files.AdmissionKey, timeout ?? TimeSpan.FromSeconds(2)).ConfigureAwait(false);
        return await admin.ListCachesAsync().ConfigureAwait(false);
    }

    public override string ToString() => $"{ServerId} on {Host}";
}

/// <summary>Registers bed servers with a manager (static allocator).</summary>
public static class BedServers
{
    /// <summary>Starts servers srv1…srvN, each in its own host.</summary>
    public static async Task<IReadOnlyList<BedServer>> StartAsync(Bed bed, ManagerFiles files, int count, int first = 1)
    {
        var servers = new List<BedServer>();
        for (int i = first; i < first + count; i++)
            servers.Add(await BedServer.StartAsync(bed, files, $"srv{i}").ConfigureAwait(false));
        return servers;
    }

    /// <summary>AddServer for each (the manager checks each through its admin interface); returns what the manager recorded.</summary>
    public static async Task<IReadOnlyList<Server>> AddAllAsync(BedManager manager, IEnumerable<BedServer> servers)
    {
        var added = new List<Server>();
        foreach (var s in servers)
            added.Add(await manager.Operator().AddServerAsync(s.AddRequest(), deadline: DateTime.UtcNow.AddSeconds(10)).ResponseAsync.ConfigureAwait(false));
        return added;
    }
}
