using System;
using System.Linq;
using FASTER.core;

namespace RemoteCache.Device.Tests;

/// <summary>The tiered devices the tests build: a RemoteCacheDevice over a new exclusive cache, then a next tier.</summary>
public static class TestTiers
{
    /// <summary>The key of the tests' encrypted caches.</summary>
    public static byte[] TestKey { get; } = Enumerable.Range(0, RemoteCacheOptions.EncryptionKeyBytes).Select(i => (byte)(i * 7 + 1)).ToArray();

    /// <summary>Options for the tests' encrypted device caches: blocks of a FASTER sector.</summary>
    public static RemoteCacheOptions Encrypted() => new() { EncryptionKey = TestKey, EncryptionBlockSize = 512 };

    /// <summary>
    /// A device over a new exclusive cache of <paramref name="regions"/> regions of the server at <paramref name="endpoint"/>,
    /// encrypted with <see cref="TestKey"/> if <paramref name="encrypted"/>.
    /// </summary>
    public static RemoteCacheDevice CacheDevice(string endpoint, int regions, string name, bool encrypted = false)
    {
        var options = encrypted ? Encrypted() : new RemoteCacheOptions();
        options.RegionsPerServer = regions;
        options.Name = name;
        options.OperationTimeout = TimeSpan.FromSeconds(5);
        options.Exclusive = true;
        var cache = RemoteCacheClient.Open(new[] { endpoint }, options);
        return new RemoteCacheDevice(cache, ownsCache: true);
    }

    /// <summary>TieredDevice(a new cache's device, <paramref name="next"/>), which owns both; <paramref name="next"/> is disposed if the cache cannot be opened.</summary>
    public static TieredDevice OverCache(string endpoint, int regions, IDevice next, string name, bool encrypted = false)
    {
        RemoteCacheDevice cache;
        try
        {
            cache = CacheDevice(endpoint, regions, name, encrypted);
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
