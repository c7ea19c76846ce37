using System;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.Admin;
using RemoteCache.Manager.Cluster;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Core;

/// <summary>
/// The manager's state, shared by the units of its core (<see cref="TenantCalls"/>, <see cref="Replacements"/>,
/// <see cref="Pool"/>, <see cref="Duties"/>): caches, servers, what probes and movers last did, and the one way to
/// change it (<see cref="CommitAsync"/>). Changes run one at a time (<see cref="Lock"/>), are committed to the store
/// before they are visible, and publish their events after the commit. A refused request changes nothing: servers it
/// acquired are released and nothing is written. The maps of caches and servers change only under both the async lock
/// and their monitor (the caches map's), so readers need either.
/// </summary>
public sealed class ManagerState
{
    private readonly IManagerStore _store;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;
    private readonly ILeadership _leadership;
    private readonly SemaphoreSlim _lock = new(1, 1);
    private readonly Dictionary<ulong, CacheRecord> _caches = new();
    private readonly Dictionary<string, ServerRecord> _servers = new(StringComparer.Ordinal);
    private readonly System.Collections.Concurrent.ConcurrentDictionary<string, ServerProbe> _probes = new(StringComparer.Ordinal);
    private readonly System.Collections.Concurrent.ConcurrentDictionary<string, Silence> _silences = new(StringComparer.Ordinal);
    // What each pending replacement's mover last did (under the _caches monitor), by cache and replaced server; one
    // recovered from the store counts from the manager's start.
    private readonly Dictionary<(ulong CacheId, string ServerId), MoverActivity> _movers = new();
    private DateTimeOffset _started;

    /// <summary>Who leads: units ask it before what the store cannot fence.</summary>
    internal ILeadership Leadership => _leadership;

    public ManagerState(IManagerStore store, EventHub events, TimeProvider time, ILogger<ManagerState> logger, ManagerMetrics metrics, ILeadership leadership)
    {
        _store = store;
        Events = events;
        _time = time;
        _logger = logger;
        _leadership = leadership;
        _started = time.GetUtcNow();
        metrics.Observe(() => CacheCount, () => Events.Count, ServerMemory, () => leadership.Role == ManagerRole.Leader ? 1 : 0);
    }

    /// <summary>Live events to watchers.</summary>
    public EventHub Events { get; }

    /// <summary>Held while a change is made (one at a time).</summary>
    internal SemaphoreSlim Lock => _lock;

    /// <summary>The caches by id; its monitor guards both maps for readers without <see cref="Lock"/>.</summary>
    internal Dictionary<ulong, CacheRecord> Caches => _caches;

    internal Dictionary<string, ServerRecord> Servers => _servers;

    /// <summary>Each server's last answered probe.</summary>
    internal System.Collections.Concurrent.ConcurrentDictionary<string, ServerProbe> Probes => _probes;

    /// <summary>Each silent server's missed probes.</summary>
    internal System.Collections.Concurrent.ConcurrentDictionary<string, Silence> Silences => _silences;

    private int CacheCount
    {
        get
        {
            lock (_caches)
                return _caches.Count;
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

    // Under both locks, at the start of a leader's term: the maps hold these; movers, probes and silences start over.
    internal void StartOver(IEnumerable<CacheRecord> caches, IEnumerable<ServerRecord> servers)
    {
        _started = _time.GetUtcNow();
        _movers.Clear();
        _probes.Clear();
        _silences.Clear();
        Replace(caches, servers);
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

    internal MoverActivity Activity(ulong cacheId, string serverId)
    {
        lock (_caches)
        {
            if (!_movers.TryGetValue((cacheId, serverId), out var activity))
                _movers[(cacheId, serverId)] = activity = new MoverActivity(_started);
            return activity;
        }
    }

    internal void ForgetMover(ulong cacheId, string serverId)
    {
        lock (_caches)
            _movers.Remove((cacheId, serverId));
    }

    // Commits, then makes the change visible and tells watchers. Called under the lock (or before serving).
    internal async Task<IReadOnlyList<StoredEvent>> CommitAsync(StoreChange change, CancellationToken cancellationToken)
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

    internal void AddEvent(StoreChange change, CacheRecord cache, Action<CacheEvent> fill)
    {
        var time = Timestamp.FromDateTimeOffset(_time.GetUtcNow());
        change.Events.Add((cache.CacheId, cache.Tenant, sequence =>
        {
            var e = new CacheEvent { Sequence = (ulong)sequence, CacheId = cache.CacheId, Time = time };
            fill(e);
            return e.ToByteArray();
        }));
    }

    internal void AddReclaimEvent(StoreChange change, CacheRecord cache, ServerRecord server) =>
        AddEvent(change, cache, e => e.ReclaimNotice = new ReclaimNotice
        {
            ServerId = server.ServerId, FirstRegion = (uint)(cache.Servers.ToList().IndexOf(server.ServerId) * cache.RegionsPerServer),
            Regions = (uint)cache.RegionsPerServer, Deadline = Timestamp.FromDateTimeOffset(server.ReclaimDeadline!.Value),
        });

    internal void AddFailureEvent(StoreChange change, CacheRecord cache, ServerRecord server, string reason) =>
        AddEvent(change, cache, e => e.ServerFailed = new ServerFailed
        {
            ServerId = server.ServerId, FirstRegion = (uint)(cache.Servers.ToList().IndexOf(server.ServerId) * cache.RegionsPerServer),
            Regions = (uint)cache.RegionsPerServer, Reason = reason,
        });

    internal CacheRecord Owned(string tenant, ulong cacheId) =>
        _caches.TryGetValue(cacheId, out var cache) && cache.Tenant == tenant ? cache : throw NotFound(cacheId);

    // Another tenant's cache and no cache get the same answer: ids say nothing about who holds what.
    internal static ManagerRefusal NotFound(ulong cacheId) => new(RefusalKind.NotFound, $"cache {cacheId} does not exist (or is not yours)");

    internal ServerRecord Server(string serverId) =>
        _servers.TryGetValue(serverId, out var s) ? s : throw new ManagerRefusal(RefusalKind.NotFound, $"server {Input.Quote(serverId)} is not in the pool");

    private IEnumerable<Measurement<long>> ServerMemory()
    {
        List<ServerRecord> servers;
        lock (_caches)
            servers = _servers.Values.ToList();
        foreach (var s in servers)
            yield return new Measurement<long>(_probes.TryGetValue(s.ServerId, out var p) ? p.MemoryLent : 0, new KeyValuePair<string, object?>("server", s.ServerId),
                new KeyValuePair<string, object?>("vm_type", s.VmType), new KeyValuePair<string, object?>("state", s.Status.ToString().ToLowerInvariant()));
    }
}

    /// <summary>When a mover last acted, and the copies it has under way (a copy in flight is activity).</summary>
internal sealed class MoverActivity(DateTimeOffset since)
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

// A server's missed probes since its last answer: the first one's time and how many rounds.
internal sealed record Silence(DateTimeOffset Since, int Misses);
