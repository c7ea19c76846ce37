using System;
using System.Collections.Generic;
using System.Linq;
using System.Security.Cryptography;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.Allocators;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Placement;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Slo;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;
using RemoteCache.Slo;
using PlacementResult = RemoteCache.Manager.Placement.Placement;

namespace RemoteCache.Manager.Core;

/// <summary>
/// The tenants' calls on their caches: Allocate (and its retries), Reallocate, Deallocate, RenewLease, Get, List, and
/// the backlog of a cache's events. Each sees the caller's tenant's caches only.
/// </summary>
public sealed class TenantCalls : StateUnit
{
    private readonly CacheServers _cacheServers;
    private readonly IManagerStore _store;
    private readonly IServerAllocator _allocator;
    private readonly VmCatalogue _catalogue;
    private readonly ModelLibrary _models;
    private readonly ManagerOptions _options;
    private readonly ApiKeyStore _keys;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;
    private readonly ManagerMetrics _metrics;

    public TenantCalls(ManagerState state, CacheServers cacheServers, IManagerStore store, IServerAllocator allocator, VmCatalogue catalogue, ModelLibrary models,
                       ManagerOptions options, ApiKeyStore keys, TimeProvider time, ILogger<TenantCalls> logger, ManagerMetrics metrics)
        : base(state)
    {
        _cacheServers = cacheServers;
        _store = store;
        _allocator = allocator;
        _catalogue = catalogue;
        _models = models;
        _options = options;
        _keys = keys;
        _time = time;
        _logger = logger;
        _metrics = metrics;
    }

    public async Task<(CacheRecord Cache, long Sequence)> AllocateAsync(string tenant, AllocateSpec request, CancellationToken cancellationToken)
    {
        var clock = ManagerMetrics.Time();
        try
        {
            var result = await AllocateCoreAsync(tenant, request, cancellationToken).ConfigureAwait(false);
            _metrics.Allocated("ok", clock.Elapsed);
            return result;
        }
        catch (ManagerRefusal e)
        {
            RefusedAllocate(tenant, e.Kind.ToString(), e.Message, clock.Elapsed);
            throw;
        }
    }

    /// <summary>Counts and logs an Allocate refused (<paramref name="code"/>: the refusal's kind, as its status is named), here or before it got here.</summary>
    public void RefusedAllocate(string tenant, string code, string reason, TimeSpan elapsed)
    {
        _metrics.Allocated(code, elapsed);
        _logger.LogInformation("Refused an Allocate of tenant {Tenant}: {Code} {Reason}", tenant, code, reason);
    }

    private async Task<(CacheRecord, long)> AllocateCoreAsync(string tenant, AllocateSpec request, CancellationToken cancellationToken)
    {
        long capacity = request.Capacity;
        var slo = request.Slo;
        TimeSpan? duration = request.Duration;
        var lease = request.Lease ?? _options.DefaultLease;
        if (lease < _options.MinLease || lease > _options.MaxLease)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"lease {lease} must be between {_options.MinLease} and {_options.MaxLease}");
        var transports = string.IsNullOrEmpty(request.Transport) ? _options.Transports : new List<string> { request.Transport };
        if (!string.IsNullOrEmpty(request.Transport) && !_options.Transports.Contains(request.Transport))
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"transport {Input.Quote(request.Transport)} is not offered (offered: {string.Join(", ", _options.Transports)})");

        Task<IReadOnlyList<StoredEvent>> committing;
        CacheRecord cache;
        List<ServerRecord> rented;
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (await RetriedAllocateAsync(tenant, request, cancellationToken).ConfigureAwait(false) is { } retried)
                return retried;
            long used = _caches.Values.Where(c => c.Tenant == tenant).Sum(c => c.CapacityBytes);
            if (_keys.QuotaOf(tenant) is { } quota && used + capacity > quota)
                throw new ManagerRefusal(RefusalKind.ResourceExhausted,
                    $"tenant '{tenant}' holds {used} bytes of its quota of {quota}; {capacity} more would exceed it");

            var search = ManagerMetrics.Time();
            var (choice, placement) = Choose(slo, capacity, duration, transports);
            _metrics.Searched(search.Elapsed);

            var acquired = new List<ServerRecord>();
            ulong id = NewCacheId();
            try
            {
                foreach (var vm in placement.Vms)
                {
                    var server = await _allocator.AcquireAsync(vm.Type, vm.Spot, _servers.Values.Where(s => acquired.All(a => a.ServerId != s.ServerId)).ToList(), cancellationToken)
                                                 .ConfigureAwait(false);
                    acquired.Add(server);
                    _servers[server.ServerId] = server;  // a new local server must not be offered again in this loop
                }
                if (acquired.Any(s => !s.Endpoints.ContainsKey(choice.Transport)))
                    throw new ManagerRefusal(RefusalKind.ResourceExhausted, $"a server of the placement does not listen on {choice.Transport}");
                var now = _time.GetUtcNow();
                cache = new CacheRecord
                {
                    CacheId = id, Tenant = tenant, Name = request.Name,
                    Token = Convert.ToBase64String(RandomNumberGenerator.GetBytes(24)),
                    RequestedBytes = capacity, Slo = ToRecord(slo), Config = choice.Config, Transport = choice.Transport,
                    RecordSize = slo.RecordSize, Servers = acquired.Select(s => s.ServerId).ToList(),
                    RegionsPerServer = placement.RegionsPerServer, RegionBytes = placement.RegionBytes,
                    Created = now, LeaseExpires = now + lease, LeaseLength = lease, Duration = duration,
                    PricePerHour = placement.PricePerHour, PredictedLatencyUs = choice.PredictedLatencyUs, PredictedThroughput = choice.PredictedThroughput,
                    RequestId = request.RequestId, AllocateRequest = request.Sent.Text,
                };
                var change = new StoreChange();
                change.PutCaches.Add(cache);
                foreach (var s in acquired)
                    change.PutServers.Add(s with { CacheId = id });
                var placed = cache;
                AddEvent(change, cache, e => e.CacheAllocated = new CacheAllocated { Capacity = (ulong)placed.CapacityBytes });
                // Staged, it commits outside the lock, with the changes staged while the one before it commits.
                committing = Stage(change);
                rented = acquired.ToList();
                acquired.Clear();
            }
            catch (AllocatorException e)
            {
                throw new ManagerRefusal(RefusalKind.ResourceExhausted, $"cannot rent the VMs of the placement: {e.Message}");
            }
            finally
            {
                // All or nothing: whatever was acquired for a refused request goes back.
                await ReleaseAcquiredAsync(acquired).ConfigureAwait(false);
            }
        }
        finally
        {
            _lock.Release();
        }

        IReadOnlyList<StoredEvent> events;
        try
        {
            // Not cancellable: the change commits or fails whether waited for or not, and its servers go back only if it failed.
            events = await committing.ConfigureAwait(false);
        }
        catch
        {
            await _state.EnterAsync(CancellationToken.None).ConfigureAwait(false);
            try
            {
                await ReleaseAcquiredAsync(rented).ConfigureAwait(false);
            }
            finally
            {
                _lock.Release();
            }
            throw;
        }
        _logger.LogInformation("Allocated cache {CacheId} ({Name}) for {Tenant}: {Capacity} bytes on {Servers} ({Transport}, {Config}), ${Price:0.####}/h",
                               cache.CacheId, cache.Name, tenant, cache.CapacityBytes, string.Join(", ", cache.Servers), cache.Transport, cache.Config, cache.PricePerHour);
        return (cache, events[0].Sequence);
    }

    // Under the lock: servers acquired for a cache that was not made go back to their allocator.
    private async Task ReleaseAcquiredAsync(IEnumerable<ServerRecord> acquired)
    {
        foreach (var server in acquired)
        {
            _servers.Remove(server.ServerId);
            var kept = await _allocator.ReleaseAsync(server, _servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
            if (kept is not null)
                _servers[kept.ServerId] = kept;
        }
    }

    // Under the lock. An Allocate retried with its request_id (the first answer was lost: the manager restarted, the
    // connection dropped) gets the cache the first placed while that lives, with the first answer's event sequence;
    // null: no request_id, or no live cache of this tenant placed with it. Only the tenant's own caches are looked at,
    // so another tenant's request_id reveals nothing.
    private async Task<(CacheRecord, long)?> RetriedAllocateAsync(string tenant, AllocateSpec request, CancellationToken cancellationToken)
    {
        if (request.RequestId is not { Length: > 0 } requestId)
            return null;
        var earlier = _caches.Values.FirstOrDefault(c => c.Tenant == tenant && c.RequestId == requestId);
        if (earlier is null)
            return null;
        var differ = request.Sent.DifferingFrom(earlier.AllocateRequest);
        if (differ.Count > 0)
            throw new ManagerRefusal(RefusalKind.AlreadyExists,
                $"request_id {Input.Quote(requestId)} already placed cache {earlier.CacheId} with other parameters " +
                $"({string.Join(", ", differ)} differ): a retry repeats its request; another request needs another request_id");
        // A cache's first event is its CacheAllocated (the event log is append-only).
        var events = await _store.EventsAsync(earlier.CacheId, 0, cancellationToken).ConfigureAwait(false);
        long sequence = events.FirstOrDefault(e => CacheEvent.Parser.ParseFrom(e.Payload).KindCase == CacheEvent.KindOneofCase.CacheAllocated)?.Sequence ?? 0;
        _logger.LogInformation("Allocate of {Tenant} retried with its request id: cache {CacheId} again", tenant, earlier.CacheId);
        return (earlier, sequence);
    }

    /// <summary>
    /// Runs what an Allocate does that changes nothing (the configuration search and placement on each transport offered,
    /// the encoding of its records and event, a capability), so that a replica's first Allocate — a new leader's, while
    /// clients wait on a failover — does not pay for compiling them.
    /// </summary>
    public async Task WarmAsync(CancellationToken cancellationToken)
    {
        // The state as stored (what a takeover reads first), then what an Allocate runs on it.
        await _state.RefreshAsync(cancellationToken).ConfigureAwait(false);
        var slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(100) };
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            foreach (string transport in _options.Transports)
            {
                try
                {
                    Choose(slo, _catalogue.RegionBytes, null, new[] { transport });
                }
                catch (ManagerRefusal)
                {
                    // An empty pool or no model for the transport: what ran is warm all the same.
                }
            }
        }
        finally
        {
            _lock.Release();
        }
        var now = _time.GetUtcNow();
        var cache = new CacheRecord
        {
            CacheId = 1, Tenant = "warm", Name = "warm", Token = "", RequestedBytes = _catalogue.RegionBytes, Slo = ToRecord(slo),
            Config = new RemoteCache.CacheConfig(0, 1, 1, 1), Transport = _options.Transports[0], RecordSize = slo.RecordSize, Servers = new[] { "warm" },
            RegionsPerServer = 1, RegionBytes = _catalogue.RegionBytes, Created = now, LeaseExpires = now, LeaseLength = TimeSpan.Zero, PricePerHour = 0,
        };
        var server = new ServerRecord("warm", new Dictionary<string, string> { [cache.Transport] = "" }, "warm", false, _allocator.Name);
        JsonSerializer.Deserialize<CacheRecord>(JsonSerializer.SerializeToUtf8Bytes(cache, RecordJson.Options), RecordJson.Options);
        JsonSerializer.Deserialize<ServerRecord>(JsonSerializer.SerializeToUtf8Bytes(server, RecordJson.Options), RecordJson.Options);
        new CacheEvent { Sequence = 1, CacheId = 1, Time = Timestamp.FromDateTimeOffset(now), CacheAllocated = new CacheAllocated { Capacity = 1 } }.ToByteArray();
    }

    // The cheapest (configuration, placement) over the transports, ties to the first transport listed.
    private (ConfigChoice, PlacementResult) Choose(RemoteCacheSlo slo, long capacity, TimeSpan? duration, IReadOnlyList<string> transports)
    {
        var reasons = new List<string>();
        (ConfigChoice Choice, PlacementResult Placement)? best = null;
        bool anyConfig = false;
        var offers = _allocator.Offers(_servers.Values.ToList());
        foreach (string transport in transports)
        {
            var (choice, reason) = _models.Choose(transport, slo);
            if (choice is null)
            {
                reasons.Add(reason!);
                continue;
            }
            anyConfig = true;
            var (placement, refusal) = Placer.Place(new PlacementRequest(capacity, choice.Config.ServerThreads, duration), offers, _catalogue);
            if (placement is null)
            {
                reasons.Add($"{transport} ({choice.Config}): {refusal!.Reason}");
                continue;
            }
            if (best is null || placement.PricePerHour < best.Value.Placement.PricePerHour - 1e-12)
                best = (choice, placement);
        }
        if (best is { } found)
            return found;
        throw new ManagerRefusal(anyConfig ? RefusalKind.ResourceExhausted : RefusalKind.FailedPrecondition,
            (anyConfig ? "no VMs can hold the cache: " : $"no configuration meets the SLO ({slo}): ") + string.Join("; ", reasons));
    }

    public async Task DeallocateAsync(string tenant, ulong cacheId, CancellationToken cancellationToken)
    {
        // Its servers drop it before the lock is taken (Get: only the tenant's own cache is dropped).
        var dropped = await _cacheServers.DropAheadAsync(Get(tenant, cacheId)).ConfigureAwait(false);
        Task removed;
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var cache = Owned(tenant, cacheId);
            removed = await _cacheServers.StageRemovalAsync(cache, "deallocated by its tenant", dropped).ConfigureAwait(false);
        }
        finally
        {
            _lock.Release();
        }
        await removed.ConfigureAwait(false);
    }

    public CacheRecord Get(string tenant, ulong cacheId) =>
        View.Caches.TryGetValue(cacheId, out var cache) && cache.Tenant == tenant ? cache : throw NotFound(cacheId);

    public IReadOnlyList<CacheRecord> List(string tenant) =>
        View.Caches.Values.Where(c => c.Tenant == tenant).OrderBy(c => c.Created).ToList();

    public async Task<CacheRecord> RenewLeaseAsync(string tenant, ulong cacheId, TimeSpan? extendBy, CancellationToken cancellationToken)
    {
        TimeSpan? by = extendBy;
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var cache = Owned(tenant, cacheId);
            var length = by ?? cache.LeaseLength;
            if (length > _options.MaxLease)
                throw new ManagerRefusal(RefusalKind.InvalidArgument, $"extend_by {length} is longer than the longest lease, {_options.MaxLease}");
            var renewed = cache with { LeaseExpires = _time.GetUtcNow() + length, ExpiryWarned = false };
            var change = new StoreChange();
            change.PutCaches.Add(renewed);
            AddEvent(change, renewed, e => e.LeaseRenewed = new LeaseRenewed { Expires = Timestamp.FromDateTimeOffset(renewed.LeaseExpires) });
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            // The servers learn the new end now, so that a cache nobody is connected to (whose clients present no new
            // capability) lives on; one that misses it is caught up by its next answered probe (FenceAsync).
            foreach (string id in renewed.Servers.Concat(renewed.Replacements.Values.Select(r => r.ServerId)))
                if (_servers.TryGetValue(id, out var server) && server.Status != ServerStatus.Failed)
                    await _cacheServers.ExtendLeaseQuietlyAsync(server, renewed.CacheId, CacheServers.LeaseEndOnServers(renewed)).ConfigureAwait(false);
            return renewed;
        }
        finally
        {
            _lock.Release();
        }
    }

    public async Task<(CacheRecord Cache, bool ConfigChanged, IReadOnlyList<string> Added, IReadOnlyList<string> Removed)> ReallocateAsync(
        string tenant, ReallocateSpec request, CancellationToken cancellationToken)
    {
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var cache = Owned(tenant, request.CacheId);
            var updated = cache;
            if (request.Slo is not null)
            {
                var slo = request.Slo.For(cache.RecordSize);
                var (choice, reason) = _models.Choose(cache.Transport, slo);
                if (choice is null)
                    throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"no configuration meets the SLO ({slo}): {reason}");
                int cores = cache.Servers.Min(id => _catalogue.Find(_servers[id].VmType)?.Cores ?? 0);
                if (choice.Config.ServerThreads > cores)
                    throw new ManagerRefusal(RefusalKind.FailedPrecondition,
                        $"the SLO ({slo}) needs {choice.Config} with {choice.Config.ServerThreads} server threads; the cache's VMs have {cores} core(s): " +
                        "it needs new servers and its content moved over (BeginReplacement with the SLO for each server, then Reallocate again)",
                        Refusals.MigrationRequired);
                updated = updated with { Slo = ToRecord(slo), Config = choice.Config, PredictedLatencyUs = choice.PredictedLatencyUs, PredictedThroughput = choice.PredictedThroughput };
            }
            var added = new List<ServerRecord>();
            var removed = new List<string>();
            long capacity = request.Capacity ?? cache.RequestedBytes;
            if (capacity != cache.RequestedBytes)
            {
                long share = cache.RegionsPerServer * cache.RegionBytes;
                int servers = checked((int)WholeServers.Servers(capacity, share));  // capacity is bounded far below share × 2^31
                if (_keys.QuotaOf(tenant) is { } quota && servers > cache.Servers.Count)
                {
                    long used = _caches.Values.Where(c => c.Tenant == tenant).Sum(c => c.CapacityBytes);
                    if (used + (servers - cache.Servers.Count) * share > quota)
                        throw new ManagerRefusal(RefusalKind.ResourceExhausted, $"tenant '{tenant}' holds {used} bytes of its quota of {quota}; growing to {capacity} would exceed it");
                }
                if (servers > cache.Servers.Count)
                    added.AddRange(await _cacheServers.AcquireSharesAsync(updated, servers - cache.Servers.Count, cancellationToken).ConfigureAwait(false));
                else
                    removed.AddRange(cache.Servers.Skip(servers));
                var kept = cache.Servers.Take(Math.Min(servers, cache.Servers.Count)).Select(id => _servers[id]).Concat(added).ToList();
                updated = updated with
                {
                    RequestedBytes = capacity,
                    Servers = kept.Select(s => s.ServerId).ToList(),
                    Lineage = cache.Lineage.Where(l => kept.Any(s => s.ServerId == l.Key)).ToDictionary(l => l.Key, l => l.Value),
                    PricePerHour = kept.Sum(_cacheServers.PriceOf),
                };
            }
            bool configChanged = updated.Config != cache.Config;
            var change = new StoreChange();
            change.PutCaches.Add(updated);
            foreach (var s in added)
                change.PutServers.Add(s with { CacheId = cache.CacheId });
            foreach (string id in removed)
            {
                await _cacheServers.DropQuietlyAsync(_servers[id], cache.CacheId).ConfigureAwait(false);
                var kept = await _allocator.ReleaseAsync(_servers[id], _servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
                if (kept is null)
                    change.DeleteServers.Add(id);
                else
                    change.PutServers.Add(kept);
            }
            if (configChanged)
                AddEvent(change, updated, e => e.ConfigChanged = new ConfigChanged { Config = EventProtos.ToProto(updated.Config) });
            if (added.Count > 0 || removed.Count > 0)
                AddEvent(change, updated, e =>
                {
                    e.CacheReshaped = new CacheReshaped { Capacity = (ulong)updated.CapacityBytes };
                    e.CacheReshaped.ServerIds.AddRange(updated.Servers);
                });
            try
            {
                await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            }
            catch
            {
                foreach (var s in added)
                    await _allocator.ReleaseAsync(s, _servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
                throw;
            }
            return (updated, configChanged, added.Select(s => s.ServerId).ToList(), removed);
        }
        finally
        {
            _lock.Release();
        }
    }


    /// <summary>
    /// The stored events of a cache of <paramref name="tenant"/> from <paramref name="fromSequence"/> on, and whether the
    /// cache still exists (a deleted one's events stay readable by its tenant).
    /// </summary>
    public async Task<(IReadOnlyList<StoredEvent> Events, bool Live)> BacklogAsync(string tenant, ulong cacheId, long fromSequence, CancellationToken cancellationToken)
    {
        bool live = View.Caches.TryGetValue(cacheId, out var c) && c.Tenant == tenant;
        var events = await _store.EventsAsync(cacheId, Math.Max(fromSequence, 1), cancellationToken).ConfigureAwait(false);
        if (!live && (events.Count == 0 || events.Any(e => e.Tenant != tenant)))
        {
            // A deleted cache's events stay readable by its tenant for the retention window (a watcher resuming after
            // the deletion gets it); once they are compacted away too, the cache is as unknown as one that never was.
            var all = events.Count > 0 ? events : await _store.EventsAsync(cacheId, 1, cancellationToken).ConfigureAwait(false);
            if (all.Count == 0 || all[0].Tenant != tenant)
                throw NotFound(cacheId);
        }
        // Read after the events (IManagerStore.EventFloorAsync): a compaction in between refuses a whole backlog, never
        // passes one with a hole. Only the cache's tenant gets here, so the floor tells nobody else anything.
        long floor = await _store.EventFloorAsync(cacheId, cancellationToken).ConfigureAwait(false);
        if (fromSequence < floor)
            throw new ManagerRefusal(RefusalKind.OutOfRange,
                $"cache {cacheId}'s events before sequence {floor} were compacted away (events are kept {_options.EventRetention.TotalSeconds:0} s, " +
                $"at most {_options.EventsPerCache} per cache), so sequence {fromSequence} can no longer be streamed: read the cache's current state " +
                $"(GetCache) and watch from sequence {floor}, or from 0 for new events only", Refusals.EventsCompacted);
        return (events, live);
    }

    private ulong NewCacheId()
    {
        while (true)
        {
            // Random, below 2^63 (SQLite integers are signed), never 0: ids of caches on a server never collide across managers' restarts.
            ulong id = BitConverter.ToUInt64(RandomNumberGenerator.GetBytes(8)) >> 1;
            if (id != 0 && !_caches.ContainsKey(id))
                return id;
        }
    }

    internal static SloRecord ToRecord(RemoteCacheSlo slo) =>
        new(slo.ReadLatency?.TotalMicroseconds, slo.WriteLatency?.TotalMicroseconds, slo.Throughput == double.Epsilon ? 0 : slo.Throughput);
}
