using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using RemoteCache.Admin;
using RemoteCache.Manager.Admin;
using RemoteCache.Manager.Allocators;
using RemoteCache.Manager.Slo;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Core;

/// <summary>
/// Replacements (Redy §6.2: a reclaimed or failed server's regions go to a new one): a tenant's mover begins one, has
/// regions copied to it, completes or abandons it; one whose mover does nothing for long is given back.
/// </summary>
public sealed class Replacements : StateUnit
{
    private readonly CacheServers _cacheServers;
    private readonly IServerAllocator _allocator;
    private readonly IServerAdmin _admin;
    private readonly ModelLibrary _models;
    private readonly ManagerOptions _options;
    private readonly ServerKeys _keys;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;

    public Replacements(ManagerState state, CacheServers cacheServers, IServerAllocator allocator, IServerAdmin admin, ModelLibrary models,
                        ManagerOptions options, ServerKeys keys, TimeProvider time, ILogger<Replacements> logger)
        : base(state)
    {
        _cacheServers = cacheServers;
        _allocator = allocator;
        _admin = admin;
        _models = models;
        _options = options;
        _keys = keys;
        _time = time;
        _logger = logger;
    }

    /// <summary>Rents a server to take the place of one of the cache's that is being reclaimed or has failed.</summary>
    public async Task<(CacheRecord Cache, ServerRecord Replacement)> BeginReplacementAsync(string tenant, ReplacementSpec request, CancellationToken cancellationToken)
    {
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var cache = Owned(tenant, request.CacheId);
            var old = ServerOf(cache, request.ServerId);
            if (cache.Replacements.TryGetValue(old.ServerId, out var pending))
            {
                var again = PendingReplacement(cache, old, pending, request.Mover);
                Activity(cache.CacheId, old.ServerId).Acted(_time.GetUtcNow());
                return (cache, again);
            }
            // Sized for the configuration it will run: the cache's, or that of the SLO it is being reshaped to.
            var sized = cache;
            if (request.Slo is not null)
            {
                var slo = request.Slo.For(cache.RecordSize);
                var (choice, reason) = _models.Choose(cache.Transport, slo);
                sized = cache with { Config = choice?.Config ?? throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"no configuration meets the SLO ({slo}): {reason}") };
            }
            else if (old.Status is not (ServerStatus.Reclaiming or ServerStatus.Failed))
            {
                throw new ManagerRefusal(RefusalKind.FailedPrecondition,
                    $"server {old.ServerId} of cache {cache.CacheId} is {old.Status.ToString().ToLowerInvariant()}: only a server being reclaimed or one that failed is replaced " +
                    "(or any, to reshape the cache to an SLO its servers cannot carry: give the SLO)");
            }
            var replacement = (await _cacheServers.AcquireSharesAsync(sized, 1, cancellationToken).ConfigureAwait(false))[0] with { CacheId = cache.CacheId };
            try
            {
                if (!replacement.Endpoints.ContainsKey(cache.Transport))
                    throw new ManagerRefusal(RefusalKind.ResourceExhausted, $"the replacement server {replacement.ServerId} does not listen on {cache.Transport}");
                var replacements = new Dictionary<string, ReplacementRecord>(cache.Replacements) { [old.ServerId] = new(replacement.ServerId, request.Mover) };
                var updated = cache with { Replacements = replacements, PricePerHour = cache.PricePerHour + _cacheServers.PriceOf(replacement) };
                var change = new StoreChange();
                change.PutCaches.Add(updated);
                change.PutServers.Add(replacement);
                await CommitAsync(change, cancellationToken).ConfigureAwait(false);
                Activity(cache.CacheId, old.ServerId).Acted(_time.GetUtcNow());
                _logger.LogInformation("Cache {CacheId}: server {Replacement} rented to replace {ServerId} ({Status})",
                                       cache.CacheId, replacement.ServerId, old.ServerId, old.Status);
                return (updated, replacement);
            }
            catch
            {
                await _allocator.ReleaseAsync(replacement with { CacheId = 0 }, _servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
                throw;
            }
        }
        finally
        {
            _lock.Release();
        }
    }

    /// <summary>
    /// Has the replacement of a server copy one region from it (the target pulls it through the admin interface, with
    /// a migration capability for the source). The copy runs outside the state lock: it takes about a second per GiB.
    /// </summary>
    public async Task<RegionPullResult> MoveRegionAsync(string tenant, MoveRegionSpec request, TimeSpan? timeout, CancellationToken cancellationToken)
    {
        CacheRecord cache;
        ServerRecord source, target;
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            (cache, source, target) = Pending(tenant, request.CacheId, request.ServerId, request.Mover);
        }
        finally
        {
            _lock.Release();
        }
        long regions = Math.Max(1u, request.Regions);
        if (request.SourceRegion + regions > cache.RegionsPerServer || request.TargetRegion + regions > cache.RegionsPerServer)
            throw new ManagerRefusal(RefusalKind.InvalidArgument,
                $"regions {request.SourceRegion}..+{regions} -> {request.TargetRegion}..+{regions}: a server lends cache {cache.CacheId} regions 0..{cache.RegionsPerServer - 1}");
        if (request.MaxMibPerS > int.MaxValue)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"max_mib_per_s {request.MaxMibPerS} is beyond any transport");
        if (source.Status == ServerStatus.Failed)
            throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"server {source.ServerId} failed ({source.FailureReason}): its regions cannot be copied");
        var pullTimeout = timeout ?? RegionPull.DefaultTimeout;
        var pull = new RegionPull
        {
            CacheId = cache.CacheId,
            SourceRegion = (int)request.SourceRegion,
            TargetRegion = (int)request.TargetRegion,
            Regions = (int)regions,
            SourceEndpoint = PullEndpoint(source, target, cache.Transport),
            // Valid for this copy only: the target presents it once, when it connects to the source.
            SourceCapability = RemoteCacheCapability.MintMigration(_keys.For(source), cache.CacheId, source.ServerId, _time.GetUtcNow() + pullTimeout + MigrationCapabilitySlack),
            Timeout = pullTimeout,
            MaxMibPerSecond = request.MaxMibPerS == 0 ? null : (int)request.MaxMibPerS,
        };
        var activity = Activity(cache.CacheId, source.ServerId);
        activity.CopyStarted();
        try
        {
            var result = await _admin.PullAsync(target, pull, cancellationToken).ConfigureAwait(false);
            for (int r = pull.TargetRegion; r < pull.TargetRegion + pull.Regions; r++)
                activity.Copied(r);
            _logger.LogInformation("Cache {CacheId}: regions {Source}..+{Regions} of {ServerId} copied to {Target}.. of {Replacement} ({Bytes} bytes in {Ms:0.0} ms)",
                                   cache.CacheId, pull.SourceRegion, pull.Regions, source.ServerId, pull.TargetRegion, target.ServerId, result.Bytes,
                                   result.Elapsed.TotalMilliseconds);
            return result;
        }
        catch (RemoteCacheException e)
        {
            var code = e.Status == RemoteCacheStatus.Timeout ? RefusalKind.DeadlineExceeded : RefusalKind.FailedPrecondition;
            throw new ManagerRefusal(code, $"copying regions {pull.SourceRegion}..+{pull.Regions} of cache {cache.CacheId} from server {source.ServerId} to {target.ServerId} failed: {e.Message}");
        }
        catch (ArgumentException e)
        {
            // The target refused the pull as asked: most likely the mover has not connected to the replacement yet (a
            // connection with its capability creates the cache there).
            throw new ManagerRefusal(RefusalKind.FailedPrecondition,
                $"server {target.ServerId} refused to copy regions {pull.SourceRegion}..+{pull.Regions} of cache {cache.CacheId} from {source.ServerId}: {e.Message}; " +
                "connect to the replacement with its capability before MoveRegion");
        }
        finally
        {
            activity.CopyEnded(_time.GetUtcNow());
        }
    }

    /// <summary>Puts the replacement in the replaced server's place and releases the replaced one.</summary>
    public async Task<CacheRecord> CompleteReplacementAsync(string tenant, ReplacementSpec request, CancellationToken cancellationToken)
    {
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var (cache, old, replacement) = Pending(tenant, request.CacheId, request.ServerId, request.Mover);
            if ((request.LostRegions ?? []).FirstOrDefault(r => r >= cache.RegionsPerServer, uint.MaxValue) is var wrong && wrong != uint.MaxValue)
                throw new ManagerRefusal(RefusalKind.InvalidArgument, $"lost region {wrong}: a server lends cache {cache.CacheId} regions 0..{cache.RegionsPerServer - 1}");
            // What the mover says it lost, and whatever this manager did not copy (a mover cannot make the others trust an empty region).
            var activity = Activity(cache.CacheId, old.ServerId);
            var lost = Enumerable.Range(0, cache.RegionsPerServer).Where(r => (request.LostRegions?.Contains((uint)r) ?? false) || !activity.WasCopied(r)).ToList();
            int index = cache.Servers.ToList().IndexOf(old.ServerId);
            var servers = cache.Servers.ToList();
            servers[index] = replacement.ServerId;
            var replacements = new Dictionary<string, ReplacementRecord>(cache.Replacements);
            replacements.Remove(old.ServerId);
            var lineage = cache.Lineage.Where(l => servers.Contains(l.Key)).ToDictionary(l => l.Key, l => l.Value);
            lineage[replacement.ServerId] = new LineageRecord(old.ServerId, lost);
            var updated = cache with { Servers = servers, Replacements = replacements, Lineage = lineage, PricePerHour = cache.PricePerHour - _cacheServers.PriceOf(old) };
            var change = new StoreChange();
            change.PutCaches.Add(updated);
            await _cacheServers.ReleaseFromCacheAsync(old, cache.CacheId, change).ConfigureAwait(false);
            AddEvent(change, updated, e =>
            {
                e.ServerReplaced = new ServerReplaced
                {
                    ServerId = old.ServerId, Replacement = replacement.ServerId, FirstRegion = (uint)(index * cache.RegionsPerServer),
                    Regions = (uint)cache.RegionsPerServer, RegionsMoved = (uint)(cache.RegionsPerServer - lost.Count),
                };
                e.ServerReplaced.ServerIds.AddRange(servers);
                e.ServerReplaced.LostRegions.AddRange(lost.Select(r => (uint)(index * cache.RegionsPerServer + r)));
            });
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            ForgetMover(cache.CacheId, old.ServerId);
            _logger.LogInformation("Cache {CacheId}: server {Replacement} replaced {ServerId} ({Moved} of {Regions} regions moved)",
                                   cache.CacheId, replacement.ServerId, old.ServerId, cache.RegionsPerServer - lost.Count, cache.RegionsPerServer);
            return updated;
        }
        finally
        {
            _lock.Release();
        }
    }

    /// <summary>Gives a replacement back; the cache is as before.</summary>
    public async Task<CacheRecord> AbandonReplacementAsync(string tenant, ReplacementSpec request, CancellationToken cancellationToken)
    {
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var cache = Owned(tenant, request.CacheId);
            if (!cache.Replacements.ContainsKey(request.ServerId))
                return cache;
            var (_, old, replacement) = Pending(tenant, request.CacheId, request.ServerId, request.Mover);
            var updated = await GiveBackLockedAsync(cache, old, replacement, notifyAgain: false, cancellationToken).ConfigureAwait(false);
            _logger.LogInformation("Cache {CacheId}: replacement {Replacement} of {ServerId} given back", cache.CacheId, replacement.ServerId, old.ServerId);
            return updated;
        }
        finally
        {
            _lock.Release();
        }
    }

    // Under the lock: gives `cache`'s pending replacement of `old` back (the cache is as before); with `notifyAgain`, old's
    // notice (ReclaimNotice or ServerFailed) goes out again, so that a client of the cache begins the move anew.
    private async Task<CacheRecord> GiveBackLockedAsync(CacheRecord cache, ServerRecord old, ServerRecord replacement, bool notifyAgain,
                                                        CancellationToken cancellationToken)
    {
        var replacements = new Dictionary<string, ReplacementRecord>(cache.Replacements);
        replacements.Remove(old.ServerId);
        var updated = cache with { Replacements = replacements, PricePerHour = cache.PricePerHour - _cacheServers.PriceOf(replacement) };
        var change = new StoreChange();
        change.PutCaches.Add(updated);
        await _cacheServers.ReleaseFromCacheAsync(replacement, cache.CacheId, change).ConfigureAwait(false);
        if (notifyAgain && old.Status == ServerStatus.Reclaiming)
            AddReclaimEvent(change, updated, old);
        else if (notifyAgain && old.Status == ServerStatus.Failed)
            AddFailureEvent(change, updated, old, old.FailureReason ?? "failed");
        await CommitAsync(change, cancellationToken).ConfigureAwait(false);
        ForgetMover(cache.CacheId, old.ServerId);
        return updated;
    }

    // Under the lock: gives back the pending replacements whose mover has done nothing for ReplacementIdleTimeout.
    internal async Task GiveBackIdleReplacementsAsync(DateTimeOffset now, CancellationToken cancellationToken)
    {
        foreach (var cache in _caches.Values.Where(c => c.Replacements.Count > 0).ToList())
            foreach (var (serverId, pending) in cache.Replacements)
            {
                var idle = Activity(cache.CacheId, serverId).IdleAt(now);
                if (idle < _options.ReplacementIdleTimeout || !_servers.TryGetValue(serverId, out var old) || !_servers.TryGetValue(pending.ServerId, out var replacement))
                    continue;
                var current = _caches[cache.CacheId];
                await GiveBackLockedAsync(current, old, replacement, notifyAgain: true, cancellationToken).ConfigureAwait(false);
                _logger.LogWarning("Cache {CacheId}: replacement {Replacement} of {ServerId} given back: its mover '{Mover}' did nothing for {Idle:0.0} s; " +
                                   "the server's notice goes out again", cache.CacheId, pending.ServerId, serverId, pending.Mover, idle.TotalSeconds);
            }
    }

    private static readonly TimeSpan MigrationCapabilitySlack = TimeSpan.FromMinutes(1);

    // Under the lock or the monitor: the cache's server `serverId`.
    private ServerRecord ServerOf(CacheRecord cache, string serverId) =>
        cache.Servers.Contains(serverId) && _servers.TryGetValue(serverId, out var s)
            ? s
            : throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"server {Input.Quote(serverId)} is not one of cache {cache.CacheId}'s");

    // Under the lock or the monitor: the cache, its server `serverId` and that server's pending replacement (of `mover`).
    private (CacheRecord Cache, ServerRecord Server, ServerRecord Replacement) Pending(string tenant, ulong cacheId, string serverId, string mover)
    {
        var cache = Owned(tenant, cacheId);
        var server = ServerOf(cache, serverId);
        if (!cache.Replacements.TryGetValue(server.ServerId, out var pending))
            throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"no replacement of server {server.ServerId} was begun for cache {cache.CacheId} (BeginReplacement first)");
        return (cache, server, PendingReplacement(cache, server, pending, mover));
    }

    private ServerRecord PendingReplacement(CacheRecord cache, ServerRecord old, ReplacementRecord pending, string mover) =>
        pending.Mover != mover
            ? throw new ManagerRefusal(RefusalKind.FailedPrecondition,
                $"another client of cache {cache.CacheId} ({Input.Quote(pending.Mover)}) is moving server {old.ServerId}'s regions; follow its ServerReplaced event", Refusals.MovedElsewhere)
            : _servers[pending.ServerId];

    /// <summary>
    /// The source as the target reaches it for a region pull: over verbs (RDMA READ, no source CPU) whenever both have
    /// it, whatever the cache's own transport — except that a shm cache's servers share a host, where a memory copy
    /// beats loopback RDMA — then over the cache's transport when both have it, else tcp.
    /// </summary>
    internal static string PullEndpoint(ServerRecord source, ServerRecord target, string transport)
    {
        foreach (var t in transport == "shm" ? new[] { "shm", "verbs" } : new[] { "verbs", transport })
            if (source.Endpoints.TryGetValue(t, out var e) && target.Endpoints.ContainsKey(t))
                return e;
        return source.AdminEndpoint;
    }
}
