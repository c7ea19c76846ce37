using System;
using System.Diagnostics;
using System.Security.Cryptography;
using RemoteCache;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>
/// The remotecache device's cache on a server this process starts and opens directly, without the manager: for
/// --transport verbs, which the manager cannot place (its SLO planner has no verbs model: models/ holds the shm and
/// tcp ones measured on this machine, and figures measured under Soft-RoCE emulation would mislead it). The device
/// configures the cache one-sided, as the manager's SLO would: reads are RDMA READs the server's CPU never sees. The
/// server listens on a real network interface for the run, so it admits by capability only (a fresh admission key,
/// one capability for this cache), as the manager's servers do: nobody else on that network can rent its memory.
/// </summary>
internal sealed class DirectCache : IDisposable
{
    // Longer than any run: the cache's lease on the server ends with its capability.
    private static readonly TimeSpan CapabilityLifetime = TimeSpan.FromDays(1);

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
        byte[] key = RandomNumberGenerator.GetBytes(RemoteCacheCapability.MinAdmissionKeyBytes);
        var server = RemoteCacheServer.Start(new RemoteCacheServerOptions
        {
            Listen = { listen },
            RegionSize = regionSize,
            MemoryLimit = regions * regionSize,
            AdmissionKey = key,
        });
        try
        {
            var options = new RemoteCacheOptions
            {
                RegionsPerServer = regions,
                Exclusive = true,
                SessionCapacity = ControlPlane.SessionCapacity,
            };
            options.Capabilities = new[] { RemoteCacheCapability.Mint(key, options.CacheId, server.ServerId, regions, DateTimeOffset.UtcNow + CapabilityLifetime) };
            var client = RemoteCacheClient.Open(server.Endpoints, options);
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
