using System;
using System.Collections.Generic;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>How to open a cache: its identity, its size on each server and its data-path configuration.</summary>
public sealed class RemoteCacheOptions
{
    /// <summary>Bytes of UTF-8 a <see cref="Token"/> may have (RC_MAX_TOKEN_BYTES of remotecache.h).</summary>
    public const int MaxTokenBytes = NativeLimits.MaxTokenBytes;

    /// <summary>Regions a cache may ask of each server (RC_MAX_REGIONS_PER_SERVER).</summary>
    public const uint MaxRegionsPerServer = NativeLimits.MaxRegionsPerServer;

    /// <summary>The default <see cref="SessionCapacity"/> (RC_DEFAULT_SESSION_CAPACITY).</summary>
    public const uint DefaultSessionCapacity = NativeLimits.DefaultSessionCapacity;

    /// <summary>
    /// Names the cache on its servers, together with <see cref="Token"/>: clients that give the same id and the
    /// same token share the cache. Default: random.
    /// </summary>
    public ulong CacheId { get; set; } = (ulong)Random.Shared.NextInt64(1, long.MaxValue);

    /// <summary>
    /// The cache's shared secret (at most <see cref="MaxTokenBytes"/> bytes of UTF-8). A cache is named by
    /// (<see cref="CacheId"/>, token): give the same token to share a cache with other clients; another token names
    /// another cache. Null or empty (the default): a random token, so the cache is this client's alone.
    /// </summary>
    public string? Token { get; set; }

    /// <summary>
    /// Whether this client must be the cache's only client: no other client may open it while this one has it
    /// open, and the open fails with <see cref="RemoteCacheException"/> (status <see cref="RcStatus.InUse"/>) if
    /// another client has it open already. RemoteCacheDevice requires it. Default: false.
    /// </summary>
    public bool Exclusive { get; set; }

    /// <summary>
    /// One capability per endpoint, in endpoint order (the text that <see cref="RemoteCacheCapability.Mint"/> or
    /// <c>remotecache-capability</c> prints), for servers started with an admission key; servers in open mode
    /// ignore them. Null (the default): none.
    /// </summary>
    public IReadOnlyList<string>? Capabilities { get; set; }

    /// <summary>Regions requested from each server, 1..<see cref="MaxRegionsPerServer"/> (the region size is the server's).</summary>
    public uint RegionsPerServer { get; set; } = 1;

    /// <summary>
    /// The data-path configuration. Null (the default): <see cref="CacheConfig.HighThroughput"/> for the client, and
    /// <see cref="CacheConfig.OneSided"/> once a RemoteCacheDevice takes the cache (it reconfigures a cache opened
    /// without one).
    /// </summary>
    public CacheConfig? Config { get; set; }

    /// <summary>Operations outstanding per lane at most. Default: <see cref="DefaultSessionCapacity"/>, as in the native library.</summary>
    public uint SessionCapacity { get; set; } = DefaultSessionCapacity;

    /// <summary>An operation older than this fails with <see cref="RemoteCacheException"/> (status Timeout).</summary>
    public TimeSpan OperationTimeout { get; set; } = TimeSpan.FromMilliseconds(NativeLimits.DefaultOpTimeoutMs);

    /// <summary>How long opening may wait for each server.</summary>
    public TimeSpan ConnectTimeout { get; set; } = TimeSpan.FromMilliseconds(NativeLimits.DefaultConnectTimeoutMs);

    /// <summary>
    /// Native sessions the client spreads its callers over (each is used by one thread at a time).
    /// Default: the processor count, at most 4.
    /// </summary>
    public int Lanes { get; set; } = Math.Clamp(Environment.ProcessorCount, 1, 4);

    /// <summary>A name for messages and exceptions. Default: "cache &lt;id&gt;".</summary>
    public string? Name { get; set; }
}
