using System;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using System.Linq;
using System.Security.Cryptography;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using Microsoft.Extensions.Logging;
using RemoteCache.Admin;
using RemoteCache.Manager.Admin;
using RemoteCache.Manager.Allocators;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Cluster;
using RemoteCache.Manager.Placement;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Slo;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;
using RemoteCache.Slo;
using PlacementResult = RemoteCache.Manager.Placement.Placement;

namespace RemoteCache.Manager.Core;

/// <summary>
/// The manager's state and every change to it: caches, servers, leases and the event log. Changes run one at a time
/// (a lock), are committed to the store before they are visible, and publish their events after the commit. A refused
/// request changes nothing: servers it acquired are released and nothing is written. The maps of caches and servers
/// change only under both the async lock and their monitor, so readers need either.
/// </summary>
public sealed class ManagerCore : IAsyncDisposable
{
    private readonly IManagerStore _store;
    private readonly IServerAllocator _allocator;
    private readonly IServerAdmin _admin;
    private readonly VmCatalogue _catalogue;
    private readonly ModelLibrary _models;
    private readonly ManagerOptions _options;
    private readonly byte[] _admissionKey;
    private readonly ApiKeyStore _keys;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;
    private readonly ManagerMetrics _metrics;
    private readonly SemaphoreSlim _lock = new(1, 1);
    private readonly Dictionary<ulong, CacheRecord> _caches = new();
    private readonly Dictionary<string, ServerRecord> _servers = new(StringComparer.Ordinal);
    private readonly System.Collections.Concurrent.ConcurrentDictionary<string, ServerProbe> _probes = new(StringComparer.Ordinal);
    private readonly System.Collections.Concurrent.ConcurrentDictionary<string, Silence> _silences = new(StringComparer.Ordinal);
    // What each pending replacement's mover last did (under the _caches monitor), by cache and replaced server; one
    // recovered from the store counts from the manager's start.
    private readonly Dictionary<(ulong CacheId, string ServerId), MoverActivity> _movers = new();
    private readonly ILeadership _leadership;
    private DateTimeOffset _started;

    public ManagerCore(IManagerStore store, IServerAllocator allocator, IServerAdmin admin, VmCatalogue catalogue, ModelLibrary models,
                       ManagerOptions options, byte[] admissionKey, ApiKeyStore keys, TimeProvider time, ILogger<ManagerCore> logger, ManagerMetrics metrics,
                       ILeadership leadership)
    {
        _leadership = leadership;
        _store = store;
        _allocator = allocator;
        _admin = admin;
        _catalogue = catalogue;
        _models = models;
        _options = options;
        _admissionKey = admissionKey;
        _keys = keys;
        _time = time;
        _logger = logger;
        _metrics = metrics;
        _started = time.GetUtcNow();
        metrics.Observe(() => CacheCount, () => Events.Count, ServerMemory);
    }

    /// <summary>Live events to watchers.</summary>
    public EventHub Events { get; } = new();

    public VmCatalogue Catalogue => _catalogue;

    public IServerAllocator Allocator => _allocator;

    private int CacheCount
    {
        get
        {
            lock (_caches)
                return _caches.Count;
        }
    }

    /// <summary>
    /// Takes the state over as its (new) leader: loads it as last committed, adopts its servers, and tells the watchers of
    /// caches that lost a server meanwhile. A pending replacement's mover counts as active from now, and every server's
    /// failure detection starts over.
    /// </summary>
    public async Task TakeOverAsync(CancellationToken cancellationToken)
    {
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var snapshot = await _store.LoadAsync(cancellationToken).ConfigureAwait(false);
            var recovered = await _allocator.RecoverAsync(snapshot.Servers, cancellationToken).ConfigureAwait(false);
            var change = new StoreChange();
            foreach (var old in snapshot.Servers.Where(o => recovered.All(r => r.ServerId != o.ServerId)))
                change.DeleteServers.Add(old.ServerId);
            lock (_caches)
            {
                _started = _time.GetUtcNow();
                _movers.Clear();
                _probes.Clear();
                _silences.Clear();
                Replace(snapshot.Caches, recovered);
            }
            foreach (var server in recovered)
            {
                var before = snapshot.Servers.First(s => s.ServerId == server.ServerId);
                if (before != server)
                    change.PutServers.Add(server);
                if (server.Status == ServerStatus.Failed && before.Status != ServerStatus.Failed && _caches.TryGetValue(server.CacheId, out var cache))
                    AddFailureEvent(change, cache, server, server.FailureReason ?? "failed");
            }
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            _logger.LogInformation("Took over {Caches} caches and {Servers} servers; last event sequence {Sequence}", _caches.Count, _servers.Count, snapshot.LastSequence);
        }
        finally
        {
            _lock.Release();
        }
    }

    /// <summary>
    /// A follower's view: the state as the store holds it now (a follower changes nothing, so what it holds is only ever
    /// what it read last).
    /// </summary>
    /// <exception cref="StoreUnavailableException">The store did not answer.</exception>
    public async Task RefreshAsync(CancellationToken cancellationToken)
    {
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var snapshot = await _store.LoadAsync(cancellationToken).ConfigureAwait(false);
            lock (_caches)
                Replace(snapshot.Caches, snapshot.Servers);
        }
        finally
        {
            _lock.Release();
        }
    }

    // Under both locks: what the maps hold becomes these.
    private void Replace(IEnumerable<CacheRecord> caches, IEnumerable<ServerRecord> servers)
    {
        _caches.Clear();
        foreach (var cache in caches)
            _caches[cache.CacheId] = cache;
        _servers.Clear();
        foreach (var server in servers)
            _servers[server.ServerId] = server;
    }

    // ---- tenants ---------------------------------------------------------------------------------------------

    public async Task<(CacheRecord Cache, long Sequence)> AllocateAsync(string tenant, AllocateRequest request, CancellationToken cancellationToken)
    {
        var clock = ManagerMetrics.Time();
        try
        {
            var result = await AllocateCoreAsync(tenant, request, cancellationToken).ConfigureAwait(false);
            _metrics.Allocated("ok", clock.Elapsed);
            return result;
        }
        catch (ManagerException e)
        {
            _metrics.Allocated(e.Code.ToString(), clock.Elapsed);
            _logger.LogInformation("Refused an Allocate of tenant {Tenant}: {Code} {Reason}", tenant, e.Code, e.Message);
            throw;
        }
    }

    private async Task<(CacheRecord, long)> AllocateCoreAsync(string tenant, AllocateRequest request, CancellationToken cancellationToken)
    {
        long capacity = Input.Capacity(request.Capacity, "capacity");
        var slo = ToSlo(request.Slo, Input.RecordSize(request.RecordSize, "record_size"));
        TimeSpan? duration = request.Duration is null ? null : Input.Positive(request.Duration, "duration");
        var lease = Input.PositiveOr(request.Lease, "lease", _options.DefaultLease);
        if (lease < _options.MinLease || lease > _options.MaxLease)
            throw new ManagerException(StatusCode.InvalidArgument, $"lease {lease} must be between {_options.MinLease} and {_options.MaxLease}");
        var transports = string.IsNullOrEmpty(request.Transport) ? _options.Transports : new List<string> { request.Transport };
        if (!string.IsNullOrEmpty(request.Transport) && !_options.Transports.Contains(request.Transport))
            throw new ManagerException(StatusCode.InvalidArgument, $"transport {Input.Quote(request.Transport)} is not offered (offered: {string.Join(", ", _options.Transports)})");

        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (await RetriedAllocateAsync(tenant, request, cancellationToken).ConfigureAwait(false) is { } retried)
                return retried;
            long used = _caches.Values.Where(c => c.Tenant == tenant).Sum(c => c.CapacityBytes);
            if (_keys.QuotaOf(tenant) is { } quota && used + capacity > quota)
                throw new ManagerException(StatusCode.ResourceExhausted,
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
                    lock (_caches)
                        _servers[server.ServerId] = server;  // a new local server must not be offered again in this loop
                }
                if (acquired.Any(s => !s.Endpoints.ContainsKey(choice.Transport)))
                    throw new ManagerException(StatusCode.ResourceExhausted, $"a server of the placement does not listen on {choice.Transport}");
                var now = _time.GetUtcNow();
                var cache = new CacheRecord
                {
                    CacheId = id, Tenant = tenant, Name = request.Name,
                    Token = Convert.ToBase64String(RandomNumberGenerator.GetBytes(24)),
                    RequestedBytes = capacity, Slo = ToRecord(slo), Config = choice.Config, Transport = choice.Transport,
                    RecordSize = slo.RecordSize, Servers = acquired.Select(s => s.ServerId).ToList(),
                    RegionsPerServer = placement.RegionsPerServer, RegionBytes = placement.RegionBytes,
                    Created = now, LeaseExpires = now + lease, LeaseLength = lease, Duration = duration,
                    PricePerHour = placement.PricePerHour, PredictedLatencyUs = choice.PredictedLatencyUs, PredictedThroughput = choice.PredictedThroughput,
                    RequestId = request.RequestId.Length == 0 ? null : request.RequestId, AllocateRequest = AsSent(request),
                };
                var change = new StoreChange();
                change.PutCaches.Add(cache);
                foreach (var s in acquired)
                    change.PutServers.Add(s with { CacheId = id });
                AddEvent(change, cache, e => e.CacheAllocated = new CacheAllocated { Capacity = (ulong)cache.CapacityBytes });
                var events = await CommitAsync(change, cancellationToken).ConfigureAwait(false);
                acquired.Clear();
                _logger.LogInformation("Allocated cache {CacheId} ({Name}) for {Tenant}: {Capacity} bytes on {Servers} ({Transport}, {Config}), ${Price:0.####}/h",
                                       id, cache.Name, tenant, cache.CapacityBytes, string.Join(", ", cache.Servers), cache.Transport, cache.Config, cache.PricePerHour);
                return (cache, events[0].Sequence);
            }
            catch (AllocatorException e)
            {
                throw new ManagerException(StatusCode.ResourceExhausted, $"cannot rent the VMs of the placement: {e.Message}");
            }
            finally
            {
                // All or nothing: whatever was acquired for a refused request goes back.
                foreach (var server in acquired)
                {
                    lock (_caches)
                        _servers.Remove(server.ServerId);
                    var kept = await _allocator.ReleaseAsync(server, _servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
                    if (kept is not null)
                        lock (_caches)
                            _servers[kept.ServerId] = kept;
                }
            }
        }
        finally
        {
            _lock.Release();
        }
    }

    // Under the lock. An Allocate retried with its request_id (the first answer was lost: the manager restarted, the
    // connection dropped) gets the cache the first placed while that lives, with the first answer's event sequence;
    // null: no request_id, or no live cache of this tenant placed with it. Only the tenant's own caches are looked at,
    // so another tenant's request_id reveals nothing.
    private async Task<(CacheRecord, long)?> RetriedAllocateAsync(string tenant, AllocateRequest request, CancellationToken cancellationToken)
    {
        string requestId = request.RequestId;
        if (requestId.Length == 0)
            return null;
        var earlier = _caches.Values.FirstOrDefault(c => c.Tenant == tenant && c.RequestId == requestId);
        if (earlier is null)
            return null;
        var differ = DifferingFields(earlier.AllocateRequest, request);
        if (differ.Count > 0)
            throw new ManagerException(StatusCode.AlreadyExists,
                $"request_id {Input.Quote(requestId)} already placed cache {earlier.CacheId} with other parameters " +
                $"({string.Join(", ", differ)} differ): a retry repeats its request; another request needs another request_id");
        // A cache's first event is its CacheAllocated (the event log is append-only).
        var events = await _store.EventsAsync(earlier.CacheId, 0, cancellationToken).ConfigureAwait(false);
        long sequence = events.FirstOrDefault(e => CacheEvent.Parser.ParseFrom(e.Payload).KindCase == CacheEvent.KindOneofCase.CacheAllocated)?.Sequence ?? 0;
        _logger.LogInformation("Allocate of {Tenant} retried with its request id: cache {CacheId} again", tenant, earlier.CacheId);
        return (earlier, sequence);
    }

    // The request as the cache keeps it for comparing retries: without its request_id, protobuf in base64.
    private static string AsSent(AllocateRequest request)
    {
        var sent = request.Clone();
        sent.RequestId = "";
        return Convert.ToBase64String(sent.ToByteArray());
    }

    // The fields (proto names) in which a retry differs from the request that placed the cache (compared as sent).
    private static List<string> DifferingFields(string? stored, AllocateRequest retry)
    {
        var first = stored is null ? new AllocateRequest() : AllocateRequest.Parser.ParseFrom(Convert.FromBase64String(stored));
        var asked = retry.Clone();
        asked.RequestId = "";
        return AllocateRequest.Descriptor.Fields.InFieldNumberOrder()
                              .Where(f => !Equals(f.Accessor.GetValue(first), f.Accessor.GetValue(asked)))
                              .Select(f => f.Name).ToList();
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
        throw new ManagerException(anyConfig ? StatusCode.ResourceExhausted : StatusCode.FailedPrecondition,
            (anyConfig ? "no VMs can hold the cache: " : $"no configuration meets the SLO ({slo}): ") + string.Join("; ", reasons));
    }

    public async Task DeallocateAsync(string tenant, ulong cacheId, CancellationToken cancellationToken)
    {
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var cache = Owned(tenant, cacheId);
            await RemoveCacheAsync(cache, "deallocated by its tenant", CancellationToken.None).ConfigureAwait(false);
        }
        finally
        {
            _lock.Release();
        }
    }

    public CacheRecord Get(string tenant, ulong cacheId)
    {
        lock (_caches)
            return Owned(tenant, cacheId);
    }

    public IReadOnlyList<CacheRecord> List(string tenant)
    {
        lock (_caches)
            return _caches.Values.Where(c => c.Tenant == tenant).OrderBy(c => c.Created).ToList();
    }

    public async Task<CacheRecord> RenewLeaseAsync(string tenant, ulong cacheId, Duration? extendBy, CancellationToken cancellationToken)
    {
        TimeSpan? by = Input.PositiveOrDefault(extendBy, "extend_by");
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var cache = Owned(tenant, cacheId);
            var length = by ?? cache.LeaseLength;
            if (length > _options.MaxLease)
                throw new ManagerException(StatusCode.InvalidArgument, $"extend_by {length} is longer than the longest lease, {_options.MaxLease}");
            var renewed = cache with { LeaseExpires = _time.GetUtcNow() + length, ExpiryWarned = false };
            var change = new StoreChange();
            change.PutCaches.Add(renewed);
            AddEvent(change, renewed, e => e.LeaseRenewed = new LeaseRenewed { Expires = Timestamp.FromDateTimeOffset(renewed.LeaseExpires) });
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            // The servers learn the new end now, so that a cache nobody is connected to (whose clients present no new
            // capability) lives on; one that misses it is caught up by its next answered probe (FenceAsync).
            foreach (string id in renewed.Servers.Concat(renewed.Replacements.Values.Select(r => r.ServerId)))
                if (_servers.TryGetValue(id, out var server) && server.Status != ServerStatus.Failed)
                    await ExtendLeaseQuietlyAsync(server, renewed.CacheId, LeaseEndOnServers(renewed)).ConfigureAwait(false);
            return renewed;
        }
        finally
        {
            _lock.Release();
        }
    }

    public async Task<(CacheRecord Cache, bool ConfigChanged, IReadOnlyList<string> Added, IReadOnlyList<string> Removed)> ReallocateAsync(
        string tenant, ReallocateRequest request, CancellationToken cancellationToken)
    {
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var cache = Owned(tenant, request.CacheId);
            var updated = cache;
            if (request.Slo is not null)
            {
                var slo = ToSlo(request.Slo, cache.RecordSize);
                var (choice, reason) = _models.Choose(cache.Transport, slo);
                if (choice is null)
                    throw new ManagerException(StatusCode.FailedPrecondition, $"no configuration meets the SLO ({slo}): {reason}");
                int cores = cache.Servers.Min(id => _catalogue.Find(_servers[id].VmType)?.Cores ?? 0);
                if (choice.Config.ServerThreads > cores)
                    throw new ManagerException(StatusCode.FailedPrecondition,
                        $"the SLO ({slo}) needs {choice.Config} with {choice.Config.ServerThreads} server threads; the cache's VMs have {cores} core(s): " +
                        "it needs new servers and its content moved over (BeginReplacement with the SLO for each server, then Reallocate again)",
                        Refusals.MigrationRequired);
                updated = updated with { Slo = ToRecord(slo), Config = choice.Config, PredictedLatencyUs = choice.PredictedLatencyUs, PredictedThroughput = choice.PredictedThroughput };
            }
            var added = new List<ServerRecord>();
            var removed = new List<string>();
            long capacity = request.Capacity == 0 ? cache.RequestedBytes : Input.Capacity(request.Capacity, "capacity");
            if (capacity != cache.RequestedBytes)
            {
                long share = cache.RegionsPerServer * cache.RegionBytes;
                int servers = checked((int)WholeServers.Servers(capacity, share));  // capacity is bounded far below share × 2^31
                if (_keys.QuotaOf(tenant) is { } quota && servers > cache.Servers.Count)
                {
                    long used = _caches.Values.Where(c => c.Tenant == tenant).Sum(c => c.CapacityBytes);
                    if (used + (servers - cache.Servers.Count) * share > quota)
                        throw new ManagerException(StatusCode.ResourceExhausted, $"tenant '{tenant}' holds {used} bytes of its quota of {quota}; growing to {capacity} would exceed it");
                }
                if (servers > cache.Servers.Count)
                    added.AddRange(await AcquireSharesAsync(updated, servers - cache.Servers.Count, cancellationToken).ConfigureAwait(false));
                else
                    removed.AddRange(cache.Servers.Skip(servers));
                var kept = cache.Servers.Take(Math.Min(servers, cache.Servers.Count)).Select(id => _servers[id]).Concat(added).ToList();
                updated = updated with
                {
                    RequestedBytes = capacity,
                    Servers = kept.Select(s => s.ServerId).ToList(),
                    Lineage = cache.Lineage.Where(l => kept.Any(s => s.ServerId == l.Key)).ToDictionary(l => l.Key, l => l.Value),
                    PricePerHour = kept.Sum(PriceOf),
                };
            }
            bool configChanged = updated.Config != cache.Config;
            var change = new StoreChange();
            change.PutCaches.Add(updated);
            foreach (var s in added)
                change.PutServers.Add(s with { CacheId = cache.CacheId });
            foreach (string id in removed)
            {
                await DropQuietlyAsync(_servers[id], cache.CacheId).ConfigureAwait(false);
                var kept = await _allocator.ReleaseAsync(_servers[id], _servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
                if (kept is null)
                    change.DeleteServers.Add(id);
                else
                    change.PutServers.Add(kept);
            }
            if (configChanged)
                AddEvent(change, updated, e => e.ConfigChanged = new ConfigChanged { Config = Protos.ToProto(updated.Config) });
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

    // More servers for a cache at its share (regions per server), cheapest first.
    private async Task<List<ServerRecord>> AcquireSharesAsync(CacheRecord cache, int count, CancellationToken cancellationToken)
    {
        var request = new PlacementRequest(count * (long)cache.RegionsPerServer * cache.RegionBytes, cache.Config.ServerThreads, cache.Duration);
        var offers = _allocator.Offers(_servers.Values.ToList())
            .Where(o => _catalogue.RegionsOf(o.Type) >= cache.RegionsPerServer).ToList();
        var eligible = offers.Where(o => o.Type.Cores >= Math.Max(1, cache.Config.ServerThreads) &&
                                         (!o.Spot || _catalogue.SpotPolicy.Allows(cache.Duration, cache.RegionsPerServer * cache.RegionBytes)))
                             .OrderBy(o => o.Type.PricePerHour(o.Spot)).ToList();
        if (eligible.Sum(o => o.Count) < count)
            throw new ManagerException(StatusCode.ResourceExhausted,
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
            throw new ManagerException(StatusCode.ResourceExhausted, $"cannot rent more VMs: {e.Message}");
        }
    }

    private double PriceOf(ServerRecord server) =>
        _catalogue.Find(server.VmType) is { } type ? type.PricePerHour(server.Spot && type.SpotPerHour is not null) : 0;

    /// <summary>The servers of <paramref name="cache"/> as a client needs them: endpoint, regions and a capability valid until the lease ends.</summary>
    public IReadOnlyList<CacheServer> ServersOf(CacheRecord cache)
    {
        lock (_caches)
            return cache.Servers.Where(_servers.ContainsKey).Select(id => ToCacheServer(cache, _servers[id])).ToList();
    }

    private CacheServer ToCacheServer(CacheRecord cache, ServerRecord server) => new()
    {
        ServerId = server.ServerId,
        Endpoint = server.Endpoints.TryGetValue(cache.Transport, out var e) ? e : "",
        Regions = (uint)cache.RegionsPerServer,
        RegionSize = (ulong)cache.RegionBytes,
        Capability = RemoteCacheCapability.Mint(_admissionKey, cache.CacheId, server.ServerId, cache.RegionsPerServer, cache.LeaseExpires),
        VmType = server.VmType,
        Spot = server.Spot,
        Replaced = cache.Lineage.TryGetValue(server.ServerId, out var lineage) ? lineage.Replaced : "",
        LostRegions = { lineage?.LostRegions.Select(r => (uint)r) ?? [] },
    };

    /// <summary>The cache as the contract describes it: its servers and pending replacements, with capabilities for the current lease.</summary>
    public Cache Describe(CacheRecord cache)
    {
        var proto = Protos.ToProto(cache, ServersOf(cache));
        proto.Replacements.AddRange(ReplacementsOf(cache));
        return proto;
    }

    /// <summary>The servers rented to replace some of <paramref name="cache"/>'s, with capabilities for the current lease.</summary>
    public IReadOnlyList<Replacement> ReplacementsOf(CacheRecord cache)
    {
        lock (_caches)
            return cache.Replacements
                .Where(r => _servers.ContainsKey(r.Value.ServerId))
                .Select(r => new Replacement { Replaces = r.Key, Server = ToCacheServer(cache, _servers[r.Value.ServerId]) })
                .ToList();
    }

    // ---- replacements (Redy §6.2: a reclaimed or failed server's regions go to a new one) -----------------------

    /// <summary>Rents a server to take the place of one of the cache's that is being reclaimed or has failed.</summary>
    public async Task<(CacheRecord Cache, ServerRecord Replacement)> BeginReplacementAsync(string tenant, ReplacementRequest request, CancellationToken cancellationToken)
    {
        CheckMover(request.Mover);
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
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
                var slo = ToSlo(request.Slo, cache.RecordSize);
                var (choice, reason) = _models.Choose(cache.Transport, slo);
                sized = cache with { Config = choice?.Config ?? throw new ManagerException(StatusCode.FailedPrecondition, $"no configuration meets the SLO ({slo}): {reason}") };
            }
            else if (old.Status is not (ServerStatus.Reclaiming or ServerStatus.Failed))
            {
                throw new ManagerException(StatusCode.FailedPrecondition,
                    $"server {old.ServerId} of cache {cache.CacheId} is {old.Status.ToString().ToLowerInvariant()}: only a server being reclaimed or one that failed is replaced " +
                    "(or any, to reshape the cache to an SLO its servers cannot carry: give the SLO)");
            }
            var replacement = (await AcquireSharesAsync(sized, 1, cancellationToken).ConfigureAwait(false))[0] with { CacheId = cache.CacheId };
            try
            {
                if (!replacement.Endpoints.ContainsKey(cache.Transport))
                    throw new ManagerException(StatusCode.ResourceExhausted, $"the replacement server {replacement.ServerId} does not listen on {cache.Transport}");
                var replacements = new Dictionary<string, ReplacementRecord>(cache.Replacements) { [old.ServerId] = new(replacement.ServerId, request.Mover) };
                var updated = cache with { Replacements = replacements, PricePerHour = cache.PricePerHour + PriceOf(replacement) };
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
    /// a migration capability for the source). Runs outside the state lock: a copy takes about a second per GiB.
    /// </summary>
    public async Task<RegionPullResult> MoveRegionAsync(string tenant, MoveRegionRequest request, TimeSpan? timeout, CancellationToken cancellationToken)
    {
        CheckMover(request.Mover);
        CacheRecord cache;
        ServerRecord source, target;
        lock (_caches)
            (cache, source, target) = Pending(tenant, request.CacheId, request.ServerId, request.Mover);
        long regions = Math.Max(1u, request.Regions);
        if (request.SourceRegion + regions > cache.RegionsPerServer || request.TargetRegion + regions > cache.RegionsPerServer)
            throw new ManagerException(StatusCode.InvalidArgument,
                $"regions {request.SourceRegion}..+{regions} -> {request.TargetRegion}..+{regions}: a server lends cache {cache.CacheId} regions 0..{cache.RegionsPerServer - 1}");
        if (request.MaxMibPerS > int.MaxValue)
            throw new ManagerException(StatusCode.InvalidArgument, $"max_mib_per_s {request.MaxMibPerS} is beyond any transport");
        if (source.Status == ServerStatus.Failed)
            throw new ManagerException(StatusCode.FailedPrecondition, $"server {source.ServerId} failed ({source.FailureReason}): its regions cannot be copied");
        var pullTimeout = timeout ?? RegionPull.DefaultTimeout;
        var pull = new RegionPull
        {
            CacheId = cache.CacheId,
            SourceRegion = (int)request.SourceRegion,
            TargetRegion = (int)request.TargetRegion,
            Regions = (int)regions,
            SourceEndpoint = PullEndpoint(source, target, cache.Transport),
            // Valid for this copy only: the target presents it once, when it connects to the source.
            SourceCapability = RemoteCacheCapability.MintMigration(_admissionKey, cache.CacheId, source.ServerId, _time.GetUtcNow() + pullTimeout + MigrationCapabilitySlack),
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
            var code = e.Status == RemoteCacheStatus.Timeout ? StatusCode.DeadlineExceeded : StatusCode.FailedPrecondition;
            throw new ManagerException(code, $"copying regions {pull.SourceRegion}..+{pull.Regions} of cache {cache.CacheId} from server {source.ServerId} to {target.ServerId} failed: {e.Message}");
        }
        catch (ArgumentException e)
        {
            // The target refused the pull as asked: most likely the mover has not connected to the replacement yet (a
            // connection with its capability creates the cache there).
            throw new ManagerException(StatusCode.FailedPrecondition,
                $"server {target.ServerId} refused to copy regions {pull.SourceRegion}..+{pull.Regions} of cache {cache.CacheId} from {source.ServerId}: {e.Message}; " +
                "connect to the replacement with its capability before MoveRegion");
        }
        finally
        {
            activity.CopyEnded(_time.GetUtcNow());
        }
    }

    /// <summary>Puts the replacement in the replaced server's place and releases the replaced one.</summary>
    public async Task<CacheRecord> CompleteReplacementAsync(string tenant, ReplacementRequest request, CancellationToken cancellationToken)
    {
        CheckMover(request.Mover);
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var (cache, old, replacement) = Pending(tenant, request.CacheId, request.ServerId, request.Mover);
            if (request.LostRegions.FirstOrDefault(r => r >= cache.RegionsPerServer, uint.MaxValue) is var wrong && wrong != uint.MaxValue)
                throw new ManagerException(StatusCode.InvalidArgument, $"lost region {wrong}: a server lends cache {cache.CacheId} regions 0..{cache.RegionsPerServer - 1}");
            // What the mover says it lost, and whatever this manager did not copy (a mover cannot make the others trust an empty region).
            var activity = Activity(cache.CacheId, old.ServerId);
            var lost = Enumerable.Range(0, cache.RegionsPerServer).Where(r => request.LostRegions.Contains((uint)r) || !activity.WasCopied(r)).ToList();
            int index = cache.Servers.ToList().IndexOf(old.ServerId);
            var servers = cache.Servers.ToList();
            servers[index] = replacement.ServerId;
            var replacements = new Dictionary<string, ReplacementRecord>(cache.Replacements);
            replacements.Remove(old.ServerId);
            var lineage = cache.Lineage.Where(l => servers.Contains(l.Key)).ToDictionary(l => l.Key, l => l.Value);
            lineage[replacement.ServerId] = new LineageRecord(old.ServerId, lost);
            var updated = cache with { Servers = servers, Replacements = replacements, Lineage = lineage, PricePerHour = cache.PricePerHour - PriceOf(old) };
            var change = new StoreChange();
            change.PutCaches.Add(updated);
            await ReleaseFromCacheAsync(old, cache.CacheId, change).ConfigureAwait(false);
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
    public async Task<CacheRecord> AbandonReplacementAsync(string tenant, ReplacementRequest request, CancellationToken cancellationToken)
    {
        CheckMover(request.Mover);
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
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
        var updated = cache with { Replacements = replacements, PricePerHour = cache.PricePerHour - PriceOf(replacement) };
        var change = new StoreChange();
        change.PutCaches.Add(updated);
        await ReleaseFromCacheAsync(replacement, cache.CacheId, change).ConfigureAwait(false);
        if (notifyAgain && old.Status == ServerStatus.Reclaiming)
            AddReclaimEvent(change, updated, old);
        else if (notifyAgain && old.Status == ServerStatus.Failed)
            AddFailureEvent(change, updated, old, old.FailureReason ?? "failed");
        await CommitAsync(change, cancellationToken).ConfigureAwait(false);
        ForgetMover(cache.CacheId, old.ServerId);
        return updated;
    }

    // Under the lock: gives back the pending replacements whose mover has done nothing for ReplacementIdleTimeout.
    private async Task GiveBackIdleReplacementsAsync(DateTimeOffset now, CancellationToken cancellationToken)
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

    private MoverActivity Activity(ulong cacheId, string serverId)
    {
        lock (_caches)
        {
            if (!_movers.TryGetValue((cacheId, serverId), out var activity))
                _movers[(cacheId, serverId)] = activity = new MoverActivity(_started);
            return activity;
        }
    }

    private void ForgetMover(ulong cacheId, string serverId)
    {
        lock (_caches)
            _movers.Remove((cacheId, serverId));
    }

    /// <summary>When a mover last acted, and the copies it has under way (a copy in flight is activity).</summary>
    private sealed class MoverActivity(DateTimeOffset since)
    {
        private readonly object _gate = new();
        private DateTimeOffset _last = since;
        private int _copies;
        private readonly HashSet<int> _copied = new();

        public void Acted(DateTimeOffset now)
        {
            lock (_gate)
                _last = now;
        }

        public void CopyStarted()
        {
            lock (_gate)
                _copies++;
        }

        public void CopyEnded(DateTimeOffset now)
        {
            lock (_gate)
            {
                _copies--;
                _last = now;
            }
        }

        /// <summary>Target region <paramref name="region"/> was copied (a manager restarted since knows of no copy).</summary>
        public void Copied(int region)
        {
            lock (_gate)
                _copied.Add(region);
        }

        public bool WasCopied(int region)
        {
            lock (_gate)
                return _copied.Contains(region);
        }

        /// <summary>How long the mover has done nothing; zero while a copy is under way.</summary>
        public TimeSpan IdleAt(DateTimeOffset now)
        {
            lock (_gate)
                return _copies > 0 ? TimeSpan.Zero : now - _last;
        }
    }

    private static readonly TimeSpan MigrationCapabilitySlack = TimeSpan.FromMinutes(1);

    private static void CheckMover(string mover)
    {
        if (string.IsNullOrEmpty(mover))
            throw new ManagerException(StatusCode.InvalidArgument, $"mover must name the client moving the cache (1 to {ContractLimits.MaxMoverLength} characters)");
    }

    // Under the lock or the monitor: the cache's server `serverId`.
    private ServerRecord ServerOf(CacheRecord cache, string serverId) =>
        cache.Servers.Contains(serverId) && _servers.TryGetValue(serverId, out var s)
            ? s
            : throw new ManagerException(StatusCode.FailedPrecondition, $"server {Input.Quote(serverId)} is not one of cache {cache.CacheId}'s");

    // Under the lock or the monitor: the cache, its server `serverId` and that server's pending replacement (of `mover`).
    private (CacheRecord Cache, ServerRecord Server, ServerRecord Replacement) Pending(string tenant, ulong cacheId, string serverId, string mover)
    {
        var cache = Owned(tenant, cacheId);
        var server = ServerOf(cache, serverId);
        if (!cache.Replacements.TryGetValue(server.ServerId, out var pending))
            throw new ManagerException(StatusCode.FailedPrecondition, $"no replacement of server {server.ServerId} was begun for cache {cache.CacheId} (BeginReplacement first)");
        return (cache, server, PendingReplacement(cache, server, pending, mover));
    }

    private ServerRecord PendingReplacement(CacheRecord cache, ServerRecord old, ReplacementRecord pending, string mover) =>
        pending.Mover != mover
            ? throw new ManagerException(StatusCode.FailedPrecondition,
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

    // ---- watchers --------------------------------------------------------------------------------------------

    /// <summary>
    /// The stored events of a cache of <paramref name="tenant"/> from <paramref name="fromSequence"/> on, and whether the
    /// cache still exists (a deleted one's events stay readable by its tenant).
    /// </summary>
    public async Task<(IReadOnlyList<StoredEvent> Events, bool Live)> BacklogAsync(string tenant, ulong cacheId, long fromSequence, CancellationToken cancellationToken)
    {
        bool live;
        lock (_caches)
            live = _caches.TryGetValue(cacheId, out var c) && c.Tenant == tenant;
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
            throw new ManagerException(StatusCode.OutOfRange,
                $"cache {cacheId}'s events before sequence {floor} were compacted away (events are kept {_options.EventRetention.TotalSeconds:0} s, " +
                $"at most {_options.EventsPerCache} per cache), so sequence {fromSequence} can no longer be streamed: read the cache's current state " +
                $"(GetCache) and watch from sequence {floor}, or from 0 for new events only", Refusals.EventsCompacted);
        return (events, live);
    }

    // ---- operators -------------------------------------------------------------------------------------------

    /// <summary>Every server, with what its last probe said.</summary>
    public IReadOnlyList<ServerRecord> Servers()
    {
        lock (_caches)
            return _servers.Values.OrderBy(s => s.ServerId, StringComparer.Ordinal)
                .Select(s => _probes.TryGetValue(s.ServerId, out var p) ? s with { MemoryLent = p.MemoryLent, LastProbe = p.At } : s).ToList();
    }

    public async Task<ServerRecord> AddServerAsync(IReadOnlyDictionary<string, string> endpoints, string vmType, bool spot, CancellationToken cancellationToken)
    {
        if (_allocator.Name != StaticPoolAllocator.AllocatorName)
            throw new ManagerException(StatusCode.FailedPrecondition, $"this manager runs the {_allocator.Name} allocator; servers are added to a static pool only (--allocator static)");
        var type = _catalogue.Find(vmType) ?? throw new ManagerException(StatusCode.InvalidArgument, $"vm_type {Input.Quote(vmType)} is not in the catalogue");
        if (spot && type.SpotPerHour is null)
            throw new ManagerException(StatusCode.InvalidArgument, $"vm_type {Input.Quote(vmType)} has no spot price");
        if (!endpoints.ContainsKey("tcp"))
            throw new ManagerException(StatusCode.InvalidArgument, "endpoints must include a tcp one (the admin interface is reached there)");
        var probeTarget = new ServerRecord("", endpoints, vmType, spot, StaticPoolAllocator.AllocatorName);
        ServerProbe probe;
        try
        {
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            timeout.CancelAfter(_options.ProbeTimeout * 3);
            probe = await _admin.ProbeAsync(probeTarget, timeout.Token).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RemoteCacheException or OperationCanceledException && !cancellationToken.IsCancellationRequested)
        {
            throw new ManagerException(StatusCode.FailedPrecondition, $"the server at {Input.Quote(endpoints["tcp"])} did not answer the admin interface with this manager's admission key: {e.Message}");
        }
        if (probe.RegionBytes != _catalogue.RegionBytes)
            throw new ManagerException(StatusCode.FailedPrecondition, $"the server {probe.ServerId} lends regions of {probe.RegionBytes} bytes; the catalogue's are {_catalogue.RegionBytes} (--region-size)");
        long needed = _catalogue.RegionsOf(type) * _catalogue.RegionBytes;
        if (probe.MemoryLimit < needed)
            throw new ManagerException(StatusCode.FailedPrecondition, $"the server {probe.ServerId} may lend {probe.MemoryLimit} bytes; a {vmType} lends {needed} (--memory-limit)");
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (_servers.ContainsKey(probe.ServerId))
                throw new ManagerException(StatusCode.AlreadyExists, $"server {probe.ServerId} is already in the pool");
            var server = probeTarget with { ServerId = probe.ServerId, LastProbe = _time.GetUtcNow(), MemoryLent = probe.MemoryLent };
            var change = new StoreChange();
            change.PutServers.Add(server);
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            return server;
        }
        finally
        {
            _lock.Release();
        }
    }

    public async Task RemoveServerAsync(string serverId, CancellationToken cancellationToken)
    {
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var server = Server(serverId);
            if (server.CacheId != 0)
                throw new ManagerException(StatusCode.FailedPrecondition, $"server {serverId} holds cache {server.CacheId}; drain it and wait for the cache to leave");
            // Out of the manager's care, a server keeps nothing it was granted: whatever it still holds (a cache deallocated
            // while it was unreachable) is dropped now, or ends with its lease.
            try
            {
                using var timeout = new CancellationTokenSource(_options.ProbeTimeout * 3);
                foreach (ulong held in (await _admin.ProbeAsync(server, timeout.Token).ConfigureAwait(false)).Held.Select(h => h.CacheId).Distinct())
                    await DropQuietlyAsync(server, held).ConfigureAwait(false);
            }
            catch (Exception e) when (e is RemoteCacheException or OperationCanceledException)
            {
                _logger.LogWarning("Server {ServerId} leaves the pool unreached ({Reason}); what it holds ends with its lease", serverId, e.Message);
            }
            await _allocator.RetireAsync(server, cancellationToken).ConfigureAwait(false);
            var change = new StoreChange();
            change.DeleteServers.Add(serverId);
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _lock.Release();
        }
    }

    public Task<ServerRecord> DrainServerAsync(string serverId, CancellationToken cancellationToken) =>
        UpdateServerAsync(serverId, s => s.Status == ServerStatus.Ready ? s with { Status = ServerStatus.Draining } : s, null, cancellationToken);

    public async Task<DateTimeOffset> ReclaimServerAsync(string serverId, TimeSpan notice, CancellationToken cancellationToken)
    {
        if (notice <= TimeSpan.Zero || notice > TimeSpan.FromDays(1))
            throw new ManagerException(StatusCode.InvalidArgument, $"notice {notice} must be positive and at most a day");
        var deadline = _time.GetUtcNow() + notice;
        var server = await UpdateServerAsync(serverId, s =>
        {
            if (s.Status == ServerStatus.Failed)
                throw new ManagerException(StatusCode.FailedPrecondition, $"server {serverId} has failed; there is nothing left to reclaim");
            return s with { Status = ServerStatus.Reclaiming, ReclaimDeadline = s.ReclaimDeadline is { } d && d < deadline ? d : deadline };
        }, (change, s, cache) => AddReclaimEvent(change, cache, s), cancellationToken).ConfigureAwait(false);
        return server.ReclaimDeadline!.Value;
    }

    private async Task<ServerRecord> UpdateServerAsync(string serverId, Func<ServerRecord, ServerRecord> update,
                                                       Action<StoreChange, ServerRecord, CacheRecord>? cacheEvent, CancellationToken cancellationToken)
    {
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var server = update(Server(serverId));
            var change = new StoreChange();
            change.PutServers.Add(server);
            if (cacheEvent is not null && _caches.TryGetValue(server.CacheId, out var cache))
                cacheEvent(change, server, cache);
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            return server;
        }
        finally
        {
            _lock.Release();
        }
    }

    // ---- background: probes, leases, deadlines ---------------------------------------------------------------

    /// <summary>
    /// Probes every server once. A server that answers is fenced: it drops every cache the manager has not granted it
    /// (a cache deallocated while it was unreachable, or any cache at all once it was declared failed), so that a server
    /// that comes back never serves what it was failed for. One that has missed every probe for
    /// <see cref="ManagerOptions.FailureTimeout"/> (over two rounds at least) is declared failed and its cache's watchers are told.
    /// </summary>
    public async Task ProbeAllAsync(CancellationToken cancellationToken)
    {
        List<ServerRecord> servers;
        lock (_caches)
            servers = _servers.Values.Where(s => s.Status != ServerStatus.Failed || s.Allocator == StaticPoolAllocator.AllocatorName).ToList();
        var probes = servers.Select(async s => (Server: s, Result: await ProbeTwiceAsync(s, cancellationToken).ConfigureAwait(false)));
        foreach (var (server, result) in await Task.WhenAll(probes).ConfigureAwait(false))
        {
            var now = _time.GetUtcNow();
            if (result.Probe is { } probe)
            {
                _silences.TryRemove(server.ServerId, out _);
                _probes[server.ServerId] = probe with { At = now };
                await FenceAsync(server.ServerId, probe.Held).ConfigureAwait(false);
                if (server.Status == ServerStatus.Failed && server.CacheId == 0)
                    await UpdateServerAsync(server.ServerId, s => s with { Status = ServerStatus.Ready, FailureReason = null }, null, cancellationToken).ConfigureAwait(false);
            }
            else if (server.Status != ServerStatus.Failed)
            {
                var silence = _silences.AddOrUpdate(server.ServerId, _ => new Silence(now, 1), (_, s) => s with { Misses = s.Misses + 1 });
                if (silence.Misses >= 2 && now - silence.Since >= _options.FailureTimeout)
                    await ServerFailedAsync(server.ServerId, $"{result.Error} (no answer for {(now - silence.Since).TotalSeconds:0.0} s, {silence.Misses} probe rounds)",
                                            cancellationToken).ConfigureAwait(false);
                else
                    _logger.LogInformation("Server {ServerId} missed a probe ({Misses} in a row): {Error}", server.ServerId, silence.Misses, result.Error);
            }
        }
    }

    // A server's missed probes since its last answer: the first one's time and how many rounds.
    private sealed record Silence(DateTimeOffset Since, int Misses);

    // Has a server that answered drop every cache it holds that the manager has not granted it now (read after the probe
    // listed them: a cache granted later cannot be on the list, since its clients connect only after the grant is committed),
    // and catch up the lease of the one it was granted (a renewal it missed while unreachable).
    private async Task FenceAsync(string serverId, IReadOnlyList<HeldCache> held)
    {
        List<ulong> stale;
        ServerRecord? server;
        DateTimeOffset? lease = null;
        lock (_caches)
        {
            if (!_servers.TryGetValue(serverId, out server))
                return;
            var granted = server.Status == ServerStatus.Failed ? null : (ulong?)server.CacheId;
            stale = held.Select(h => h.CacheId).Where(id => id != granted).Distinct().ToList();
            if (granted is { } id && _caches.TryGetValue(id, out var cache) && held.Any(h => h.CacheId == id && h.LeaseEnd < LeaseEndOnServers(cache)))
                lease = LeaseEndOnServers(cache);
        }
        foreach (ulong cacheId in stale)
        {
            _logger.LogWarning("Server {ServerId} ({Status}) holds cache {CacheId}, which the manager has not granted it; dropping it",
                               serverId, server.Status, cacheId);
            await DropQuietlyAsync(server, cacheId).ConfigureAwait(false);
        }
        if (lease is { } end)
            await ExtendLeaseQuietlyAsync(server, server.CacheId, end).ConfigureAwait(false);
    }

    // A lease end as servers hold it: the capability's whole milliseconds.
    private static DateTimeOffset LeaseEndOnServers(CacheRecord cache) => DateTimeOffset.FromUnixTimeMilliseconds(cache.LeaseExpires.ToUnixTimeMilliseconds());

    private async Task<(ServerProbe? Probe, string? Error)> ProbeTwiceAsync(ServerRecord server, CancellationToken cancellationToken)
    {
        string? error = null;
        for (int attempt = 0; attempt < 2; attempt++)
        {
            try
            {
                using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
                timeout.CancelAfter(_options.ProbeTimeout);
                var probe = await _admin.ProbeAsync(server, timeout.Token).ConfigureAwait(false);
                if (probe.ServerId != server.ServerId)
                    return (null, $"{server.AdminEndpoint} is now server '{probe.ServerId}'");
                return (probe, null);
            }
            catch (Exception e) when (e is RemoteCacheException or OperationCanceledException && !cancellationToken.IsCancellationRequested)
            {
                error = e is OperationCanceledException ? $"no answer to a probe within {_options.ProbeTimeout.TotalMilliseconds:0} ms" : e.Message;
            }
        }
        return (null, error);
    }

    /// <summary>Declares <paramref name="serverId"/> failed (its process ended, or it missed its probes).</summary>
    public async Task ServerFailedAsync(string serverId, string reason, CancellationToken cancellationToken)
    {
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (!_servers.TryGetValue(serverId, out var server) || server.Status == ServerStatus.Failed)
                return;
            _logger.LogWarning("Server {ServerId} failed: {Reason}", serverId, reason);
            // A failed server is never half failed: a local one is stopped now (SIGKILL ends a stopped process too), so that it
            // cannot come back serving its caches; a static one is fenced by its next answered probe (FenceAsync).
            await _allocator.RetireAsync(server, cancellationToken).ConfigureAwait(false);
            var change = new StoreChange();
            var failed = server with { Status = ServerStatus.Failed, FailureReason = reason };
            if (failed.CacheId == 0 && failed.Allocator == LocalProcessAllocator.AllocatorName)
                change.DeleteServers.Add(serverId);
            else
                change.PutServers.Add(failed);
            if (_caches.TryGetValue(server.CacheId, out var cache))
                AddFailureEvent(change, cache, failed, reason);
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _lock.Release();
        }
    }

    private async Task WarnLeasesAsync(IEnumerable<CacheRecord> caches, CancellationToken cancellationToken)
    {
        var warn = new StoreChange();
        foreach (var cache in caches.ToList())
        {
            var warned = cache with { ExpiryWarned = true };
            warn.PutCaches.Add(warned);
            AddEvent(warn, warned, e => e.LeaseExpiring = new LeaseExpiring { Expires = Timestamp.FromDateTimeOffset(warned.LeaseExpires) });
        }
        if (warn.PutCaches.Count > 0)
            await CommitAsync(warn, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// Ends expired leases (the cache is freed everywhere), warns leases about to end, gives back replacements whose mover
    /// is gone, retires servers past their reclaim deadline.
    /// </summary>
    public async Task TickAsync(CancellationToken cancellationToken)
    {
        var now = _time.GetUtcNow();
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            // Every lease is warned before it ends, also one whose warning window passed between two ticks (a tick held up
            // behind the lock for longer than a short lease's window): its watchers then see the warning late, never not at all.
            await WarnLeasesAsync(_caches.Values.Where(c => !c.ExpiryWarned && c.LeaseExpires - now <= c.LeaseLength * _options.LeaseWarningShare),
                                  cancellationToken).ConfigureAwait(false);
            foreach (var cache in _caches.Values.Where(c => c.LeaseExpires <= now).ToList())
                await RemoveCacheAsync(cache, $"its lease ended at {cache.LeaseExpires:O}", cancellationToken).ConfigureAwait(false);
            await GiveBackIdleReplacementsAsync(now, cancellationToken).ConfigureAwait(false);
            foreach (var server in _servers.Values.Where(s => s.Status == ServerStatus.Reclaiming && s.ReclaimDeadline <= now).ToList())
            {
                await _allocator.RetireAsync(server, cancellationToken).ConfigureAwait(false);
                var change = new StoreChange();
                if (_caches.TryGetValue(server.CacheId, out var cache))
                {
                    var failed = server with { Status = ServerStatus.Failed, FailureReason = "reclaimed at its deadline" };
                    change.PutServers.Add(failed);
                    AddFailureEvent(change, cache, failed, failed.FailureReason);
                }
                else
                {
                    change.DeleteServers.Add(server.ServerId);
                }
                await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            }
        }
        finally
        {
            _lock.Release();
        }
    }

    /// <summary>How often the leader compacts the event log (<see cref="CompactEventsAsync"/>).</summary>
    public static readonly TimeSpan CompactionPeriod = TimeSpan.FromMinutes(1);

    /// <summary>
    /// Bounds the event log (<see cref="ManagerOptions.EventRetention"/>, <see cref="ManagerOptions.EventsPerCache"/>):
    /// each run removes what aged out or overflowed since the last, so its cost follows what it removes. Not under the
    /// state lock: the store orders it with changes itself, and a change need not wait for it.
    /// </summary>
    public async Task CompactEventsAsync(CancellationToken cancellationToken)
    {
        var result = await _store.CompactEventsAsync(_time.GetUtcNow() - _options.EventRetention, _options.EventsPerCache, cancellationToken).ConfigureAwait(false);
        if (result.Events > 0)
            _logger.LogInformation("Compacted the event log: {Events} events of {Caches} caches removed", result.Events, result.Caches);
    }

    /// <summary>At shutdown: free local servers stop; the ones holding caches keep serving.</summary>
    public async ValueTask DisposeAsync()
    {
        await _lock.WaitAsync().ConfigureAwait(false);
        try
        {
            await _allocator.ShutdownAsync(_servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
        }
        finally
        {
            _lock.Release();
        }
    }

    // ---- helpers ---------------------------------------------------------------------------------------------

    // Under the lock: drops the cache on its servers, returns them, deletes it, tells its watchers.
    private async Task RemoveCacheAsync(CacheRecord cache, string reason, CancellationToken cancellationToken)
    {
        var change = new StoreChange();
        foreach (string id in cache.Servers.Concat(cache.Replacements.Values.Select(r => r.ServerId)))
            if (_servers.TryGetValue(id, out var server))
                await ReleaseFromCacheAsync(server, cache.CacheId, change).ConfigureAwait(false);
        change.DeleteCaches.Add(cache.CacheId);
        AddEvent(change, cache, e => e.CacheDeleted = new CacheDeleted { Reason = reason });
        await CommitAsync(change, cancellationToken).ConfigureAwait(false);
        foreach (string id in cache.Replacements.Keys)
            ForgetMover(cache.CacheId, id);
        _logger.LogInformation("Deleted cache {CacheId} of {Tenant}: {Reason}", cache.CacheId, cache.Tenant, reason);
    }

    // Under the lock: the server drops the cache (unless it failed) and goes back to its allocator, into `change`.
    private async Task ReleaseFromCacheAsync(ServerRecord server, ulong cacheId, StoreChange change)
    {
        if (server.Status != ServerStatus.Failed)
            await DropQuietlyAsync(server, cacheId).ConfigureAwait(false);
        var kept = server.Status == ServerStatus.Failed && server.Allocator == LocalProcessAllocator.AllocatorName
            ? null
            : await _allocator.ReleaseAsync(server with { CacheId = 0 }, _servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
        if (kept is null)
            change.DeleteServers.Add(server.ServerId);
        else
            change.PutServers.Add(kept);
    }

    private async Task ExtendLeaseQuietlyAsync(ServerRecord server, ulong cacheId, DateTimeOffset leaseEnd)
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

    private async Task DropQuietlyAsync(ServerRecord server, ulong cacheId)
    {
        try
        {
            using var timeout = new CancellationTokenSource(_options.ProbeTimeout * 3);
            await _admin.DropAsync(server, cacheId, timeout.Token).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RemoteCacheException or OperationCanceledException)
        {
            // The server's own lease check frees the cache when its capabilities expire.
            _logger.LogWarning("Could not drop cache {CacheId} on {ServerId}: {Reason}; it is freed there when its lease ends", cacheId, server.ServerId, e.Message);
        }
    }

    // Commits, then makes the change visible and tells watchers. Called under the lock (or before serving).
    private async Task<IReadOnlyList<StoredEvent>> CommitAsync(StoreChange change, CancellationToken cancellationToken)
    {
        IReadOnlyList<StoredEvent> events;
        change.Time = _time.GetUtcNow();  // the events' append time, by this manager's clock (what retention compares)
        try
        {
            events = await _store.ApplyAsync(change, cancellationToken).ConfigureAwait(false);
        }
        catch (StoreFencedException e)
        {
            // Another manager leads now: this one's term is over (its watchdog would see it too, later).
            _leadership.StepDown(e.Message);
            throw;
        }
        catch (Exception e) when (e is StoreConflictException || e is StoreUnavailableException { OutcomeUnknown: true })
        {
            // What this manager holds is no longer what the store holds: it takes the store's state again, so that its next
            // change is built on it (rather than failing the same way forever).
            await ReloadQuietlyAsync().ConfigureAwait(false);
            throw;
        }
        lock (_caches)
        {
            foreach (ulong id in change.DeleteCaches)
                _caches.Remove(id);
            foreach (var cache in change.PutCaches)
                _caches[cache.CacheId] = cache;
            foreach (string id in change.DeleteServers)
            {
                _servers.Remove(id);
                _probes.TryRemove(id, out _);
                _silences.TryRemove(id, out _);
            }
            foreach (var server in change.PutServers)
                _servers[server.ServerId] = server;
        }
        Events.Publish(events);
        return events;
    }

    private async Task ReloadQuietlyAsync()
    {
        try
        {
            var snapshot = await _store.LoadAsync(CancellationToken.None).ConfigureAwait(false);
            lock (_caches)
                Replace(snapshot.Caches, snapshot.Servers);
            _logger.LogWarning("Reloaded the state from the store after a change it did not take: {Caches} caches, {Servers} servers", snapshot.Caches.Count, snapshot.Servers.Count);
        }
        catch (StoreUnavailableException e)
        {
            _logger.LogError("Could not reload the state from the store after a change it did not take: {Reason}", e.Message);
        }
    }

    private void AddEvent(StoreChange change, CacheRecord cache, Action<CacheEvent> fill)
    {
        var time = Timestamp.FromDateTimeOffset(_time.GetUtcNow());
        change.Events.Add((cache.CacheId, cache.Tenant, sequence =>
        {
            var e = new CacheEvent { Sequence = (ulong)sequence, CacheId = cache.CacheId, Time = time };
            fill(e);
            return e.ToByteArray();
        }));
    }

    private void AddReclaimEvent(StoreChange change, CacheRecord cache, ServerRecord server) =>
        AddEvent(change, cache, e => e.ReclaimNotice = new ReclaimNotice
        {
            ServerId = server.ServerId, FirstRegion = (uint)(cache.Servers.ToList().IndexOf(server.ServerId) * cache.RegionsPerServer),
            Regions = (uint)cache.RegionsPerServer, Deadline = Timestamp.FromDateTimeOffset(server.ReclaimDeadline!.Value),
        });

    private void AddFailureEvent(StoreChange change, CacheRecord cache, ServerRecord server, string reason) =>
        AddEvent(change, cache, e => e.ServerFailed = new ServerFailed
        {
            ServerId = server.ServerId, FirstRegion = (uint)(cache.Servers.ToList().IndexOf(server.ServerId) * cache.RegionsPerServer),
            Regions = (uint)cache.RegionsPerServer, Reason = reason,
        });

    private CacheRecord Owned(string tenant, ulong cacheId) =>
        _caches.TryGetValue(cacheId, out var cache) && cache.Tenant == tenant ? cache : throw NotFound(cacheId);

    // Another tenant's cache and no cache get the same answer: ids say nothing about who holds what.
    private static ManagerException NotFound(ulong cacheId) => new(StatusCode.NotFound, $"cache {cacheId} does not exist (or is not yours)");

    private ServerRecord Server(string serverId) =>
        _servers.TryGetValue(serverId, out var s) ? s : throw new ManagerException(StatusCode.NotFound, $"server {Input.Quote(serverId)} is not in the pool");

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

    private IEnumerable<Measurement<long>> ServerMemory()
    {
        List<ServerRecord> servers;
        lock (_caches)
            servers = _servers.Values.ToList();
        foreach (var s in servers)
            yield return new Measurement<long>(_probes.TryGetValue(s.ServerId, out var p) ? p.MemoryLent : 0, new KeyValuePair<string, object?>("server", s.ServerId),
                new KeyValuePair<string, object?>("vm_type", s.VmType), new KeyValuePair<string, object?>("state", s.Status.ToString().ToLowerInvariant()));
    }

    // An unset or empty SLO asks for nothing: the cheapest configuration (one that does any work at all).
    private static RemoteCacheSlo ToSlo(V1.Slo? slo, int recordSize)
    {
        var result = new RemoteCacheSlo
        {
            ReadLatency = slo?.ReadLatency is { } r ? Input.Positive(r, "slo.read_latency") : null,
            WriteLatency = slo?.WriteLatency is { } w ? Input.Positive(w, "slo.write_latency") : null,
            Throughput = slo?.Throughput ?? 0,
            RecordSize = recordSize,
        };
        if (result.ReadLatency is null && result.WriteLatency is null && result.Throughput == 0)
            result.Throughput = double.Epsilon;
        if (result.Problem() is { } problem)
            throw new ManagerException(StatusCode.InvalidArgument, $"the SLO {problem}");
        return result;
    }

    private static SloRecord ToRecord(RemoteCacheSlo slo) =>
        new(slo.ReadLatency?.TotalMicroseconds, slo.WriteLatency?.TotalMicroseconds, slo.Throughput == double.Epsilon ? 0 : slo.Throughput);
}
