using System;
using System.Diagnostics;
using RemoteCache;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>
/// The remotecache device's cache on a server this process starts and opens directly, without the manager: for
/// --transport verbs, which the manager cannot place (its SLO planner has no verbs model: models/ holds the shm and
/// tcp ones measured on this machine, and figures measured under Soft-RoCE emulation would mislead it). The device
/// configures the cache one-sided, as the manager's SLO would: reads are RDMA READs the server's CPU never sees.
/// </summary>
internal sealed class DirectCache : IDisposable
{
    private readonly RemoteCacheServer _server;

    private DirectCache(RemoteCacheServer server, RemoteCacheClient client, TimeSpan openTime)
    {
        _server = server;
        Client = client;
        OpenTime = openTime;
    }

    /// <summary>The open cache; the device owns it once it has it.</summary>
    public RemoteCacheClient Client { get; }

    /// <summary>Server start and open together.</summary>
    public TimeSpan OpenTime { get; }

    /// <summary>The endpoint the cache is reached by.</summary>
    public string Endpoint => _server.Endpoints[0];

    /// <summary>Starts a server listening on <paramref name="listen"/> (port 0: any) and opens an exclusive cache of at least <paramref name="bytes"/> on it.</summary>
    public static DirectCache Open(string listen, long bytes)
    {
        var clock = Stopwatch.StartNew();
        var (regionSize, regions) = Program.CacheRegions(bytes);
        var server = RemoteCacheServer.Start(new RemoteCacheServerOptions
        {
            Listen = { listen },
            RegionSize = regionSize,
            MemoryLimit = regions * regionSize,
        });
        try
        {
            var client = RemoteCacheClient.Open(server.Endpoints, new RemoteCacheOptions
            {
                RegionsPerServer = regions,
                Exclusive = true,
                SessionCapacity = ControlPlane.SessionCapacity,
            });
            return new DirectCache(server, client, clock.Elapsed);
        }
        catch
        {
            server.Dispose();
            throw;
        }
    }

    /// <summary>Stops the server (after the device, which owns the client, is disposed).</summary>
    public void Dispose() => _server.Dispose();
}
