using System;

namespace RemoteCache;

/// <summary>How to open a cache: its identity, its size on each server and its data-path configuration.</summary>
public sealed class RemoteCacheOptions
{
    /// <summary>Names the cache on its servers; clients opening the same id share the cache. Default: random.</summary>
    public ulong CacheId { get; set; } = (ulong)Random.Shared.NextInt64(1, long.MaxValue);

    /// <summary>Secret fixed by the first client of the cache; later ones must present it (at most 64 bytes of UTF-8).</summary>
    public string Token { get; set; } = "";

    /// <summary>Regions requested from each server (the region size is the server's).</summary>
    public uint RegionsPerServer { get; set; } = 1;

    /// <summary>The data-path configuration.</summary>
    public CacheConfig Config { get; set; } = CacheConfig.HighThroughput;

    /// <summary>Operations outstanding per lane at most.</summary>
    public uint SessionCapacity { get; set; } = 4096;

    /// <summary>An operation older than this fails with <see cref="RemoteCacheException"/> (status Timeout).</summary>
    public TimeSpan OperationTimeout { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>How long opening may wait for each server.</summary>
    public TimeSpan ConnectTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Native sessions the client spreads its callers over (each is used by one thread at a time).
    /// Default: the processor count, at most 4.
    /// </summary>
    public int Lanes { get; set; } = Math.Clamp(Environment.ProcessorCount, 1, 4);

    /// <summary>A name for messages and exceptions. Default: "cache &lt;id&gt;".</summary>
    public string? Name { get; set; }
}
