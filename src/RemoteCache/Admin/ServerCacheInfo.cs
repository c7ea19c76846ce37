using System;

namespace RemoteCache.Admin;

/// <summary>
/// One cache a server holds (<see cref="CacheServerAdmin.ListCachesAsync"/>). Caches are named by id and token, so
/// several may share a <see cref="CacheId"/>.
/// </summary>
public sealed record ServerCacheInfo
{
    /// <summary>The cache id (<see cref="RemoteCacheOptions.CacheId"/>).</summary>
    public ulong CacheId { get; init; }

    /// <summary>Regions the server lends it.</summary>
    public int Regions { get; init; }

    /// <summary>Its data connections.</summary>
    public int Connections { get; init; }

    /// <summary>Server threads polling its connections (its s).</summary>
    public int ServerThreads { get; init; }

    /// <summary>Whether it was opened exclusively (<see cref="RemoteCacheOptions.Exclusive"/>).</summary>
    public bool Exclusive { get; init; }

    /// <summary>When the server drops it (the latest expiry of its capabilities); null for no lease (open mode).</summary>
    public DateTimeOffset? LeaseEnd { get; init; }
}
