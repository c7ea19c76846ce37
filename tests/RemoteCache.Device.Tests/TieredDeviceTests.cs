using System;
using FASTER.core;
using Xunit;

namespace RemoteCache.Device.Tests;

/// <summary>TieredDevice owns its tiers: when it cannot be made or initialized, their caches go back to the server.</summary>
public sealed class TieredDeviceTests : IDisposable
{
    private const long Region = 1L << 20;

    // The server's memory lent shows whether every cache was closed: an embedded server reports it.
    private readonly RemoteCacheServer _server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = new[] { "tcp:127.0.0.1:0" }, RegionSize = Region, MemoryLimit = 16 * Region, MaxThreads = 1 });

    public void Dispose() => _server.Dispose();

    private RemoteCacheDevice CacheDevice(int regions) =>
        new(RemoteCacheClient.Open(_server.Endpoints, new RemoteCacheOptions { RegionsPerServer = regions, Exclusive = true }), ownsCache: true);

    [Fact]
    public void TierThatRefusesInitializeGetsEveryTierDisposed()
    {
        // The first tier refuses 2 MiB segments (its 3 MiB do not divide into them); the second, never initialized,
        // is released too: FASTER drops a device whose Initialize threw, and nobody else would dispose them.
        var tiered = new TieredDevice(CacheDevice(3), CacheDevice(4));
        Assert.Equal(7 * Region, _server.MemoryInUse);
        Assert.Throws<FasterException>(() => tiered.Initialize(2 * Region, new LightEpoch()));
        Waits.ForNoMemoryInUse(_server);
        tiered.Dispose();  // harmless
    }

    [Fact]
    public void ConstructorThatRefusesTheCommitPointDisposesTheTiers()
    {
        var tiers = new IDevice[] { CacheDevice(1), CacheDevice(2) };
        Assert.Equal(3 * Region, _server.MemoryInUse);
        Assert.Throws<ArgumentOutOfRangeException>(() => new TieredDevice(2, tiers));
        Waits.ForNoMemoryInUse(_server);
    }

    [Fact]
    public void ConstructorGivenANullTierDisposesTheOthers()
    {
        var tiers = new IDevice[] { CacheDevice(1), null! };
        Assert.Throws<ArgumentException>(() => new TieredDevice(tiers));
        Waits.ForNoMemoryInUse(_server);
    }
}
