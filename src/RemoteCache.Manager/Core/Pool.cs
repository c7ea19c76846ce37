using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.Admin;
using RemoteCache.Manager.Allocators;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Core;

/// <summary>
/// The pool of servers: the operators' calls (list, add, remove, drain, reclaim), probes and the fencing of servers
/// that answer, and the failure of servers that do not (or whose process ended).
/// </summary>
public sealed class Pool : StateUnit, IAsyncDisposable
{
    private readonly CacheServers _cacheServers;
    private readonly IServerAllocator _allocator;
    private readonly IServerAdmin _admin;
    private readonly VmCatalogue _catalogue;
    private readonly ManagerOptions _options;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;
    private readonly System.Collections.Concurrent.ConcurrentDictionary<string, ServerProbe> _probes;
    private readonly System.Collections.Concurrent.ConcurrentDictionary<string, Silence> _silences;

    public Pool(ManagerState state, CacheServers cacheServers, IServerAllocator allocator, IServerAdmin admin, VmCatalogue catalogue, ManagerOptions options,
                TimeProvider time, ILogger<Pool> logger)
        : base(state)
    {
        _cacheServers = cacheServers;
        _allocator = allocator;
        _admin = admin;
        _catalogue = catalogue;
        _options = options;
        _time = time;
        _logger = logger;
        _probes = state.Probes;
        _silences = state.Silences;
    }

    /// <summary>Every server, with what its last probe said.</summary>
    public IReadOnlyList<ServerRecord> Servers()
    {
        return View.Servers.Values.OrderBy(s => s.ServerId, StringComparer.Ordinal).Select(s =>
        {
            if (_probes.TryGetValue(s.ServerId, out var p))
                s = s with { MemoryLent = p.MemoryLent, LastProbe = p.At };
            if (_state.Heartbeats.TryGetValue(s.ServerId, out var beat) && beat.Sequence > 0)
                s = s with { LastHeartbeat = beat.At, MemoryLent = s.LastProbe is { } probed && probed > beat.At ? s.MemoryLent : beat.MemoryLent };
            return s;
        }).ToList();
    }

    public async Task<ServerRecord> AddServerAsync(IReadOnlyDictionary<string, string> endpoints, string vmType, bool spot, CancellationToken cancellationToken)
    {
        if (_allocator.Name != StaticPoolAllocator.AllocatorName)
            throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"this manager runs the {_allocator.Name} allocator; servers are added to a static pool only (--allocator static)");
        var type = _catalogue.Find(vmType) ?? throw new ManagerRefusal(RefusalKind.InvalidArgument, $"vm_type {Input.Quote(vmType)} is not in the catalogue");
        if (spot && type.SpotPerHour is null)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"vm_type {Input.Quote(vmType)} has no spot price");
        if (!endpoints.ContainsKey("tcp"))
            throw new ManagerRefusal(RefusalKind.InvalidArgument, "endpoints must include a tcp one (the admin interface is reached there)");
        var probeTarget = new ServerRecord("", endpoints, vmType, spot, StaticPoolAllocator.AllocatorName);
        var probe = await CheckAsync(probeTarget, expectedId: null, cancellationToken).ConfigureAwait(false);
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (_servers.ContainsKey(probe.ServerId))
                throw new ManagerRefusal(RefusalKind.AlreadyExists, $"server {probe.ServerId} is already in the pool");
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

    /// <summary>
    /// Checks a server through its admin interface before it takes caches: it answers under the key it admits by within
    /// three probe timeouts (as <paramref name="expectedId"/>, when given), lends regions of the catalogue's size and at
    /// least its VM type's memory. Refused FAILED_PRECONDITION otherwise, naming which.
    /// </summary>
    internal async Task<ServerProbe> CheckAsync(ServerRecord server, string? expectedId, CancellationToken cancellationToken)
    {
        ServerProbe probe;
        try
        {
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            timeout.CancelAfter(_options.ProbeTimeout * 3);
            probe = await _admin.ProbeAsync(server, timeout.Token).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RemoteCacheException or OperationCanceledException && !cancellationToken.IsCancellationRequested)
        {
            string key = server.Join is null ? "this manager's admission key" : $"{server.ServerId}'s key";
            throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"the admin interface at {Input.Quote(server.AdminEndpoint)} did not answer under {key}: {e.Message}");
        }
        if (expectedId is not null && probe.ServerId != expectedId)
            throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"{Input.Quote(server.AdminEndpoint)} answers as server {Input.Quote(probe.ServerId)}, not {expectedId}");
        if (probe.RegionBytes != _catalogue.RegionBytes)
            throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"the server {probe.ServerId} lends regions of {probe.RegionBytes} bytes; the catalogue's are {_catalogue.RegionBytes} (--region-size)");
        long needed = _catalogue.RegionsOf(_catalogue.Find(server.VmType)!) * _catalogue.RegionBytes;
        if (probe.MemoryLimit < needed)
            throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"the server {probe.ServerId} may lend {probe.MemoryLimit} bytes; a {server.VmType} lends {needed} (--memory-limit, or --lend)");
        return probe;
    }

    public async Task RemoveServerAsync(string serverId, CancellationToken cancellationToken)
    {
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var server = Server(serverId);
            if (server.CacheId != 0)
                throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"server {serverId} holds cache {server.CacheId}; drain it and wait for the cache to leave");
            // Out of the manager's care, a server keeps nothing it was granted: whatever it still holds (a cache deallocated
            // while it was unreachable) is dropped now, or ends with its lease.
            try
            {
                using var timeout = new CancellationTokenSource(_options.ProbeTimeout * 3);
                foreach (ulong held in (await _admin.ProbeAsync(server, timeout.Token).ConfigureAwait(false)).Held.Select(h => h.CacheId).Distinct())
                    await _cacheServers.DropQuietlyAsync(server, held).ConfigureAwait(false);
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

    /// <summary>
    /// Announces that <paramref name="serverId"/> goes after <paramref name="notice"/>. <paramref name="byHost"/>: its host
    /// wants the memory back (a joined server harvesting), so once its cache has left, the server stays, taking no cache
    /// until its host has memory to spare again, rather than being retired at the deadline.
    /// </summary>
    public async Task<DateTimeOffset> ReclaimServerAsync(string serverId, TimeSpan notice, CancellationToken cancellationToken, bool byHost = false)
    {
        if (notice <= TimeSpan.Zero || notice > TimeSpan.FromDays(1))
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"notice {notice} must be positive and at most a day");
        var deadline = _time.GetUtcNow() + notice;
        var server = await UpdateServerAsync(serverId, s =>
        {
            if (s.Status == ServerStatus.Failed)
                throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"server {serverId} has failed; there is nothing left to reclaim");
            return s with { Status = ServerStatus.Reclaiming, ReclaimDeadline = s.ReclaimDeadline is { } d && d < deadline ? d : deadline, HostDrained = byHost || s.HostDrained };
        }, (change, s, cache) => AddReclaimEvent(change, cache, s), cancellationToken).ConfigureAwait(false);
        return server.ReclaimDeadline!.Value;
    }

    private async Task<ServerRecord> UpdateServerAsync(string serverId, Func<ServerRecord, ServerRecord> update,
                                                       Action<StoreChange, ServerRecord, CacheRecord>? cacheEvent, CancellationToken cancellationToken)
    {
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
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

    /// <summary>
    /// Probes every server once. A server that answers is fenced: it drops every cache the manager has not granted it
    /// (a cache deallocated while it was unreachable, or any cache at all once it was declared failed), so that a server
    /// that comes back never serves what it was failed for. One that has missed every probe for
    /// <see cref="ManagerOptions.FailureTimeout"/> (over two rounds at least) is declared failed and its cache's watchers are told.
    /// </summary>
    public async Task ProbeAllAsync(CancellationToken cancellationToken)
    {
        // A joining server has no endpoints yet; a failed static (or joined) one is probed so that it is fenced if it answers.
        var servers = View.Servers.Values.Where(s => s.Status != ServerStatus.Joining && (s.Status != ServerStatus.Failed || s.Allocator == StaticPoolAllocator.AllocatorName)).ToList();
        var probes = servers.Select(async s => (Server: s, Result: await ProbeTwiceAsync(s, cancellationToken).ConfigureAwait(false)));
        foreach (var (server, result) in await Task.WhenAll(probes).ConfigureAwait(false))
        {
            var now = _time.GetUtcNow();
            if (result.Probe is { } probe)
            {
                _silences.TryRemove(server.ServerId, out _);
                _probes[server.ServerId] = probe with { At = now };
                await FenceAsync(server.ServerId, probe.Held).ConfigureAwait(false);
                // A static server is itself again once fenced; a joined one never is (it joins again as a new incarnation).
                if (server.Status == ServerStatus.Failed && server.CacheId == 0 && server.Join is null)
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

    // Has a server that answered drop every cache it holds that the manager has not granted it now (read after the probe
    // listed them: a cache granted later cannot be on the list, since its clients connect only after the grant is committed),
    // and catch up the lease of the one it was granted (a renewal it missed while unreachable).
    private async Task FenceAsync(string serverId, IReadOnlyList<HeldCache> held)
    {
        List<ulong> stale;
        ServerRecord? server;
        DateTimeOffset? lease = null;
        var view = View;
        if (!view.Servers.TryGetValue(serverId, out server))
            return;
        var granted = server.Status == ServerStatus.Failed ? null : (ulong?)server.CacheId;
        stale = held.Select(h => h.CacheId).Where(id => id != granted).Distinct().ToList();
        if (granted is { } id && view.Caches.TryGetValue(id, out var cache) && held.Any(h => h.CacheId == id && h.LeaseEnd < CacheServers.LeaseEndOnServers(cache)))
            lease = CacheServers.LeaseEndOnServers(cache);
        foreach (ulong cacheId in stale)
        {
            _logger.LogWarning("Server {ServerId} ({Status}) holds cache {CacheId}, which the manager has not granted it; dropping it",
                               serverId, server.Status, cacheId);
            await _cacheServers.DropQuietlyAsync(server, cacheId).ConfigureAwait(false);
        }
        if (lease is { } end)
            await _cacheServers.ExtendLeaseQuietlyAsync(server, server.CacheId, end).ConfigureAwait(false);
    }

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
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
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
            if (failed.CacheId == 0 && (failed.Allocator == LocalProcessAllocator.AllocatorName || failed.Join is not null))
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

    /// <summary>At shutdown: free local servers stop; the ones holding caches keep serving.</summary>
    public async ValueTask DisposeAsync()
    {
        await _state.EnterAsync(CancellationToken.None).ConfigureAwait(false);
        try
        {
            await _allocator.ShutdownAsync(_servers.Values.ToList(), CancellationToken.None).ConfigureAwait(false);
        }
        finally
        {
            _lock.Release();
        }
    }
}
