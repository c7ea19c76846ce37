using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Admin;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Admin;

/// <summary>What a server says about itself when probed.</summary>
/// <param name="ServerId">Its identity (must be the one the manager knows it by).</param>
/// <param name="MemoryLimit">Bytes it may lend.</param>
/// <param name="MemoryLent">Bytes lent right now.</param>
/// <param name="RegionBytes">Its region size.</param>
/// <param name="Caches">Caches it holds.</param>
/// <param name="Connections">Data connections.</param>
/// <param name="Held">The caches it holds and when their leases end there (what the manager fences against what it granted).</param>
public sealed record ServerProbe(string ServerId, long MemoryLimit, long MemoryLent, long RegionBytes, int Caches, int Connections, IReadOnlyList<HeldCache> Held)
{
    /// <summary>When the manager received it.</summary>
    public DateTimeOffset At { get; init; }
}

/// <summary>A cache a server holds: its id and when the server drops it (null: no lease).</summary>
public sealed record HeldCache(ulong CacheId, DateTimeOffset? LeaseEnd);

/// <summary>
/// The manager's side of the servers' native admin interface (remotecache_admin.h): probe a server, drop a cache.
/// Authenticated with the admission key the manager shares with its servers.
/// </summary>
public interface IServerAdmin
{
    /// <summary>Probes <paramref name="server"/>; throws <see cref="RemoteCacheException"/> when it does not answer in time.</summary>
    Task<ServerProbe> ProbeAsync(ServerRecord server, CancellationToken cancellationToken);

    /// <summary>
    /// Drops every cache with <paramref name="cacheId"/> on <paramref name="server"/> and returns how many, once the
    /// server has freed their memory (a server holds one cache), so that the server can be handed out again.
    /// </summary>
    Task<int> DropAsync(ServerRecord server, ulong cacheId, CancellationToken cancellationToken);

    /// <summary>
    /// Extends the lease of every cache with <paramref name="cacheId"/> on <paramref name="server"/> to
    /// <paramref name="leaseEnd"/> (never shortens it) and returns how many, so that a renewed cache nobody is connected to
    /// outlives its old lease there.
    /// </summary>
    Task<int> ExtendLeaseAsync(ServerRecord server, ulong cacheId, DateTimeOffset leaseEnd, CancellationToken cancellationToken);

    /// <summary>Has <paramref name="target"/> copy a region of a cache from another server (<see cref="CacheServerAdmin.PullRegionAsync"/>).</summary>
    Task<RegionPullResult> PullAsync(ServerRecord target, RegionPull pull, CancellationToken cancellationToken);
}
