using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.Allocators;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Core;

/// <summary>
/// The leader's duties (<see cref="ManagerWorker"/> runs them): taking the state over at the start of a term, ending and
/// warning leases, giving back idle replacements, retiring servers past their reclaim deadline, compacting the event log.
/// (Probing the servers is the <see cref="Pool"/>'s.)
/// </summary>
public sealed class Duties : StateUnit
{
    private readonly CacheServers _cacheServers;
    private readonly Replacements _replacements;
    private readonly IManagerStore _store;
    private readonly IServerAllocator _allocator;
    private readonly ManagerOptions _options;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;

    public Duties(ManagerState state, CacheServers cacheServers, Replacements replacements, IManagerStore store, IServerAllocator allocator,
                  ManagerOptions options, TimeProvider time, ILogger<Duties> logger)
        : base(state)
    {
        _cacheServers = cacheServers;
        _replacements = replacements;
        _store = store;
        _allocator = allocator;
        _options = options;
        _time = time;
        _logger = logger;
    }

    /// <summary>
    /// Takes the state over as its (new) leader: loads it as last committed, adopts its servers, and tells the watchers of
    /// caches that lost a server meanwhile. A pending replacement's mover counts as active from now, and every server's
    /// failure detection starts over.
    /// </summary>
    public async Task TakeOverAsync(CancellationToken cancellationToken)
    {
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            await _state.QuietAsync().ConfigureAwait(false);  // a change of an earlier term still in flight lands before the state is read
            var snapshot = await _store.LoadAsync(cancellationToken).ConfigureAwait(false);
            var recovered = await _allocator.RecoverAsync(snapshot.Servers, cancellationToken).ConfigureAwait(false);
            var change = new StoreChange();
            foreach (var old in snapshot.Servers.Where(o => recovered.All(r => r.ServerId != o.ServerId)))
                change.DeleteServers.Add(old.ServerId);
            _state.StartOver(snapshot.Caches, recovered);
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
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            // Every lease is warned before it ends, also one whose warning window passed between two ticks (a tick held up
            // behind the lock for longer than a short lease's window): its watchers then see the warning late, never not at all.
            await WarnLeasesAsync(_caches.Values.Where(c => !c.ExpiryWarned && c.LeaseExpires - now <= c.LeaseLength * _options.LeaseWarningShare),
                                  cancellationToken).ConfigureAwait(false);
            foreach (var cache in _caches.Values.Where(c => c.LeaseExpires <= now).ToList())
                await _cacheServers.RemoveCacheAsync(cache, $"its lease ended at {cache.LeaseExpires:O}", cancellationToken).ConfigureAwait(false);
            await _replacements.GiveBackIdleReplacementsAsync(now, cancellationToken).ConfigureAwait(false);
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
                else if (server.HostDrained)
                {
                    // Its host took the memory back and the cache left in time: the server stays, taking no cache until
                    // its host has memory to spare again (its heartbeats say when).
                    change.PutServers.Add(server with { Status = ServerStatus.Draining, ReclaimDeadline = null });
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

}
