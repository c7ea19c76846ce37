using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.Admin;
using RemoteCache.Manager.Allocators;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Placement;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Core;

/// <summary>
/// What a cache does with its servers, for the units that change caches: rents more at its share, prices them, has
/// them drop the cache or extend its lease, releases them, removes a cache with its servers.
/// </summary>
public sealed class CacheServers : StateUnit
{
    private readonly IServerAllocator _allocator;
    private readonly IServerAdmin _admin;
    private readonly VmCatalogue _catalogue;
    private readonly ManagerOptions _options;
    private readonly ILogger _logger;

    public CacheServers(ManagerState state, IServerAllocator allocator, IServerAdmin admin, VmCatalogue catalogue, ManagerOptions options, ILogger<CacheServers> logger)
        : base(state)
    {
        _allocator = allocator;
        _admin = admin;
        _catalogue = catalogue;
        _options = options;
        _logger = logger;
    }

    // More servers for a cache at its share (regions per server), cheapest first.
    internal async Task<List<ServerRecord>> AcquireSharesAsync(CacheRecord cache, int count, CancellationToken cancellationToken)
    {
        var request = new PlacementRequest(count * (long)cache.RegionsPerServer * cache.RegionBytes, cache.Config.ServerThreads, cache.Duration);
        var offers = _allocator.Offers(_servers.Values.ToList())
            .Where(o => _catalogue.RegionsOf(o.Type) >= cache.RegionsPerServer).ToList();
        var eligible = offers.Where(o => o.Type.Cores >= Math.Max(1, cache.Config.ServerThreads) &&
                                         (!o.Spot || _catalogue.SpotPolicy.Allows(cache.Duration, cache.RegionsPerServer * cache.RegionBytes)))
                             .OrderBy(o => o.Type.PricePerHour(o.Spot)).ToList();
        if (eligible.Sum(o => o.Count) < count)
            throw new ManagerRefusal(RefusalKind.ResourceExhausted,
                $"growing the cache needs {count} more VM(s) with {cache.RegionsPerServer} regions and {Math.Max(1, cache.Config.ServerThreads)} core(s); {eligible.Sum(o => o.Count)} are available ({request.CapacityBytes} bytes)");
        var acquired = new List<ServerRecord>();
        try
        {
            foreach (var offer in eligible)
                for (int i = 0; i < offer.Count && acquired.Count < count; i++)
                {
                    var s = await _allocator.AcquireAsync(offer.Type, offer.Spot, _servers.Values.Where(v => acquired.All(a => a.ServerId != v.ServerId)).ToList(), cancellationToken)
                                            .ConfigureAwait(false);
                    acquired.Add(s);
                }
            return acquired;
        }
        catch (AllocatorException e)
        {
            foreach (var s in acquired)
                await _allocator.ReleaseAsync(s, _servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
            throw new ManagerRefusal(RefusalKind.ResourceExhausted, $"cannot rent more VMs: {e.Message}");
        }
    }

    internal double PriceOf(ServerRecord server) =>
        _catalogue.Find(server.VmType) is { } type ? type.PricePerHour(server.Spot && type.SpotPerHour is not null) : 0;

    // Under the lock: drops the cache on its servers, returns them, deletes it, tells its watchers.
    internal async Task RemoveCacheAsync(CacheRecord cache, string reason, CancellationToken cancellationToken) =>
        await (await StageRemovalAsync(cache, reason).ConfigureAwait(false)).WaitAsync(cancellationToken).ConfigureAwait(false);

    // Under the lock: drops the cache on its servers (but those in `dropped`: done already), returns them and stages its
    // deletion. The task returned ends once the deletion is committed (its watchers told); it may be waited for outside the lock.
    internal async Task<Task> StageRemovalAsync(CacheRecord cache, string reason, IReadOnlySet<string>? dropped = null)
    {
        var change = new StoreChange();
        foreach (string id in ServerIdsOf(cache))
            if (_servers.TryGetValue(id, out var server))
                await ReleaseFromCacheAsync(server, cache.CacheId, change, drop: dropped?.Contains(id) != true).ConfigureAwait(false);
        change.DeleteCaches.Add(cache.CacheId);
        AddEvent(change, cache, e => e.CacheDeleted = new CacheDeleted { Reason = reason });
        return RemovedAsync(Stage(change), cache, reason);
    }

    private async Task RemovedAsync(Task committing, CacheRecord cache, string reason)
    {
        await committing.ConfigureAwait(false);
        foreach (string id in cache.Replacements.Keys)
            ForgetMover(cache.CacheId, id);
        _logger.LogInformation("Deleted cache {CacheId} of {Tenant}: {Reason}", cache.CacheId, cache.Tenant, reason);
    }

    // Every server of `cache`, its replacements' included.
    private static IEnumerable<string> ServerIdsOf(CacheRecord cache) => cache.Servers.Concat(cache.Replacements.Values.Select(r => r.ServerId));

    /// <summary>
    /// Outside the lock, before a removal of <paramref name="cache"/> (as committed) is staged: its servers drop it, all at
    /// once. A drop is a few round trips to a server, which under the lock would hold every other change up. Returns the
    /// servers asked (a failed one is not), so that the removal asks only those the cache gained since.
    /// </summary>
    internal async Task<IReadOnlySet<string>> DropAheadAsync(CacheRecord cache)
    {
        var servers = View.Servers;
        var live = ServerIdsOf(cache).Where(id => servers.TryGetValue(id, out var s) && s.Status != ServerStatus.Failed).Select(id => servers[id]).ToList();
        await Task.WhenAll(live.Select(s => DropQuietlyAsync(s, cache.CacheId))).ConfigureAwait(false);
        return live.Select(s => s.ServerId).ToHashSet(StringComparer.Ordinal);
    }

    // Under the lock: the server drops the cache (unless it failed, or `drop` is false: it did already) and goes back to its
    // allocator, into `change`.
    internal async Task ReleaseFromCacheAsync(ServerRecord server, ulong cacheId, StoreChange change, bool drop = true)
    {
        if (drop && server.Status != ServerStatus.Failed)
            await DropQuietlyAsync(server, cacheId).ConfigureAwait(false);
        var kept = server.Status == ServerStatus.Failed && server.Allocator == LocalProcessAllocator.AllocatorName
            ? null
            : await _allocator.ReleaseAsync(server with { CacheId = 0 }, _servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
        if (kept is null)
            change.DeleteServers.Add(server.ServerId);
        else
            change.PutServers.Add(kept);
    }

    internal async Task ExtendLeaseQuietlyAsync(ServerRecord server, ulong cacheId, DateTimeOffset leaseEnd)
    {
        try
        {
            using var timeout = new CancellationTokenSource(_options.ProbeTimeout * 3);
            await _admin.ExtendLeaseAsync(server, cacheId, leaseEnd, timeout.Token).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RemoteCacheException or OperationCanceledException)
        {
            _logger.LogWarning("Could not extend cache {CacheId}'s lease on {ServerId}: {Reason}; its next answered probe tries again", cacheId, server.ServerId, e.Message);
        }
    }

    internal async Task DropQuietlyAsync(ServerRecord server, ulong cacheId)
    {
        try
        {
            using var timeout = new CancellationTokenSource(_options.ProbeTimeout * 3);
            // The store fences every change, but not a server's memory: a leader deposed without knowing it yet (its view
            // stale: the cache renewed or placed there by its successor) must not free it.
            if (!await _state.Leadership.ConfirmAsync(timeout.Token).ConfigureAwait(false))
            {
                _logger.LogWarning("Not dropping cache {CacheId} on {ServerId}: this manager's leadership is not confirmed", cacheId, server.ServerId);
                return;
            }
            await _admin.DropAsync(server, cacheId, timeout.Token).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RemoteCacheException or OperationCanceledException)
        {
            // The server's own lease check frees the cache when its capabilities expire.
            _logger.LogWarning("Could not drop cache {CacheId} on {ServerId}: {Reason}; it is freed there when its lease ends", cacheId, server.ServerId, e.Message);
        }
    }


    // A lease end as servers hold it: the capability's whole milliseconds.
    internal static DateTimeOffset LeaseEndOnServers(CacheRecord cache) => DateTimeOffset.FromUnixTimeMilliseconds(cache.LeaseExpires.ToUnixTimeMilliseconds());
}
