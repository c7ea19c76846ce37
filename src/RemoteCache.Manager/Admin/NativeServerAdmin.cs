using System;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Admin;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Admin;

/// <summary>
/// <see cref="IServerAdmin"/> over the servers' native admin interface (<see cref="CacheServerAdmin"/>, on the
/// server's tcp endpoint): one authenticated connection per call, so a server that restarted or a connection that
/// timed out never leaves a handle in an unknown state behind.
/// </summary>
public sealed class NativeServerAdmin : IServerAdmin
{
    /// <summary>Bounds each native call; the caller's token bounds the whole probe.</summary>
    private static readonly TimeSpan s_callTimeout = TimeSpan.FromSeconds(2);

    private static readonly TimeSpan s_freePoll = TimeSpan.FromMilliseconds(2);

    private readonly ServerKeys _keys;

    public NativeServerAdmin(ServerKeys keys) => _keys = keys;

    public async Task<ServerProbe> ProbeAsync(ServerRecord server, CancellationToken cancellationToken)
    {
        await using var admin = await CacheServerAdmin.ConnectAsync(server.AdminEndpoint, _keys.For(server), s_callTimeout, cancellationToken).ConfigureAwait(false);
        var stats = await admin.GetStatsAsync(cancellationToken).ConfigureAwait(false);
        var caches = await admin.ListCachesAsync(cancellationToken).ConfigureAwait(false);
        return new ServerProbe(stats.ServerId, stats.MemoryLimit, stats.MemoryLent, stats.RegionSize, stats.Caches, stats.DataConnections,
                               caches.Select(c => new HeldCache(c.CacheId, c.LeaseEnd)).ToList());
    }

    public async Task<int> DropAsync(ServerRecord server, ulong cacheId, CancellationToken cancellationToken)
    {
        await using var admin = await CacheServerAdmin.ConnectAsync(server.AdminEndpoint, _keys.For(server), s_callTimeout, cancellationToken).ConfigureAwait(false);
        var before = await admin.GetStatsAsync(cancellationToken).ConfigureAwait(false);
        long freeing = (await admin.ListCachesAsync(cancellationToken).ConfigureAwait(false)).Where(c => c.CacheId == cacheId).Sum(c => (long)c.Regions) * before.RegionSize;
        int dropped = await admin.DropCacheAsync(cacheId, cancellationToken).ConfigureAwait(false);
        // The server frees a dropped cache's memory as its connections close, a moment later (longer for committed
        // memory): handed out again before that, the server would refuse the next cache for want of memory. Only that
        // cache's memory is waited for: a server being fenced may also hold the one it was granted.
        while (dropped > 0 && (await admin.GetStatsAsync(cancellationToken).ConfigureAwait(false)).MemoryLent > before.MemoryLent - freeing)
            await Task.Delay(s_freePoll, cancellationToken).ConfigureAwait(false);
        return dropped;
    }

    public async Task<int> ExtendLeaseAsync(ServerRecord server, ulong cacheId, DateTimeOffset leaseEnd, CancellationToken cancellationToken)
    {
        await using var admin = await CacheServerAdmin.ConnectAsync(server.AdminEndpoint, _keys.For(server), s_callTimeout, cancellationToken).ConfigureAwait(false);
        return await admin.ExtendLeaseAsync(cacheId, leaseEnd, cancellationToken).ConfigureAwait(false);
    }

    public async Task<RegionPullResult> PullAsync(ServerRecord target, RegionPull pull, CancellationToken cancellationToken)
    {
        await using var admin = await CacheServerAdmin.ConnectAsync(target.AdminEndpoint, _keys.For(target), s_callTimeout, cancellationToken).ConfigureAwait(false);
        return await admin.PullRegionAsync(pull, cancellationToken).ConfigureAwait(false);
    }
}
