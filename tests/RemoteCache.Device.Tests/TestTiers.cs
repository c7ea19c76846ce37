using System;
using FASTER.core;

namespace RemoteCache.Device.Tests;

/// <summary>The tiered devices the tests build: a RemoteCacheDevice over a new exclusive cache, then a next tier.</summary>
public static class TestTiers
{
    /// <summary>A device over a new exclusive cache of <paramref name="regions"/> regions of the server at <paramref name="endpoint"/>.</summary>
    public static RemoteCacheDevice CacheDevice(string endpoint, int regions, string name)
    {
        var cache = RemoteCacheClient.Open(new[] { endpoint }, new RemoteCacheOptions
        {
            RegionsPerServer = regions,
            Name = name,
            OperationTimeout = TimeSpan.FromSeconds(5),
            Exclusive = true,
        });
        return new RemoteCacheDevice(cache, ownsCache: true);
    }

    /// <summary>TieredDevice(a new cache's device, <paramref name="next"/>), which owns both; <paramref name="next"/> is disposed if the cache cannot be opened.</summary>
    public static TieredDevice OverCache(string endpoint, int regions, IDevice next, string name)
    {
        RemoteCacheDevice cache;
        try
        {
            cache = CacheDevice(endpoint, regions, name);
        }
        catch
        {
            next.Dispose();
            throw;
        }
        return new TieredDevice(cache, next);
    }

    /// <summary>The cache tier of a device built by <see cref="OverCache"/>.</summary>
    public static RemoteCacheDevice CacheTier(this TieredDevice tiered) => (RemoteCacheDevice)tiered.Tiers[0];
}
