using System;
using System.Collections.Generic;
using System.Collections.Immutable;
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
/// change it (<see cref="Stage"/>, or <see cref="CommitAsync"/> to wait for the commit). It is held twice:
/// <list type="bullet">
/// <item>the working maps (<see cref="Caches"/>, <see cref="Servers"/>): what changes are built on, one at a time under
/// <see cref="Lock"/> (entered with <see cref="EnterAsync"/>). A change is made in them when it is staged, so the next
/// change builds on it while it commits;</item>
/// <item>the view (<see cref="View"/>): what the store has committed, which readers see. A change becomes visible, and
/// its events are published, only once committed.</item>
/// </list>
/// Staged changes commit in their order, as many in one store transaction as fit (a group commit: the store's
/// round trip is paid once for all the changes staged while the previous commit was under way). A change the store
/// does not take fails with every change staged after it (they were built on it), and the working maps become the view
/// again before the next change is built. A refused request changes nothing: servers it acquired are released and
/// nothing is written.
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
    private readonly System.Collections.Concurrent.ConcurrentDictionary<string, Heartbeat> _heartbeats = new(StringComparer.Ordinal);
    // What each pending replacement's mover last did (under the _caches monitor), by cache and replaced server; one
    // recovered from the store counts from the manager's start.
    private readonly Dictionary<(ulong CacheId, string ServerId), MoverActivity> _movers = new();
    private DateTimeOffset _started;
    private volatile StateView _view = StateView.Empty;

    // The commit queue (under its own monitor): changes staged and not yet sent to the store, whether a commit loop
    // runs, and whether the working maps hold a change the store did not take.
    private readonly object _queueGate = new();
    private readonly List<Staged> _queue = new();
    private bool _committing;
    private bool _stale;
    private Task _lastStaged = Task.CompletedTask;

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

    /// <summary>Held while a change is built and staged (one at a time); entered with <see cref="EnterAsync"/>.</summary>
    internal SemaphoreSlim Lock => _lock;

    /// <summary>The working caches by id (under <see cref="Lock"/>): the committed ones and those of changes staged since.</summary>
    internal Dictionary<ulong, CacheRecord> Caches => _caches;

    /// <summary>The working servers by id (under <see cref="Lock"/>).</summary>
    internal Dictionary<string, ServerRecord> Servers => _servers;

    /// <summary>What the store has committed, for readers (no lock).</summary>
    internal StateView View => _view;

    /// <summary>
    /// Takes <see cref="Lock"/> to build a change; the working maps are the view again first if a change staged before
    /// was not taken by the store.
    /// </summary>
    internal async Task EnterAsync(CancellationToken cancellationToken)
    {
        await _lock.WaitAsync(cancellationToken).ConfigureAwait(false);
        ResetIfStale();
    }

    // Under the lock: whether the working maps were stale (and are the view again now).
    private bool ResetIfStale()
    {
        lock (_queueGate)
        {
            if (!_stale)
                return false;
            _stale = false;
        }
        var view = _view;
        ReplaceWorking(view.Caches.Values, view.Servers.Values);
        return true;
    }

    /// <summary>Each server's last answered probe.</summary>
    internal System.Collections.Concurrent.ConcurrentDictionary<string, ServerProbe> Probes => _probes;

    /// <summary>Each joined server's last accepted heartbeat in this term.</summary>
    internal System.Collections.Concurrent.ConcurrentDictionary<string, Heartbeat> Heartbeats => _heartbeats;

    /// <summary>When this manager's term as leader (or its run) began: a server's silence counts from then at the earliest.</summary>
    internal DateTimeOffset TermStarted => _started;

    /// <summary>Each silent server's missed probes.</summary>
    internal System.Collections.Concurrent.ConcurrentDictionary<string, Silence> Silences => _silences;

    private int CacheCount => _view.Caches.Count;

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
            await QuietAsync().ConfigureAwait(false);
            var snapshot = await _store.LoadAsync(cancellationToken).ConfigureAwait(false);
            Replace(snapshot.Caches, snapshot.Servers);
        }
        finally
        {
            _lock.Release();
        }
    }

    /// <summary>
    /// Under the lock: ends once every change staged so far is committed or failed, so that a state read from the store
    /// after it has nothing in flight to land on it (a leader deposed and elected again, a follower that led a moment ago).
    /// </summary>
    internal Task QuietAsync()
    {
        Task last;
        lock (_queueGate)
            last = _lastStaged;
        return last.ContinueWith(static _ => { }, CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
    }

    // Under the lock, at the start of a leader's term: the maps and the view hold these; movers, probes and silences start over.
    internal void StartOver(IReadOnlyCollection<CacheRecord> caches, IReadOnlyCollection<ServerRecord> servers)
    {
        _started = _time.GetUtcNow();
        lock (_movers)
            _movers.Clear();
        _probes.Clear();
        _silences.Clear();
        _heartbeats.Clear();
        Replace(caches, servers);
    }

    // Under the lock, with nothing in flight (QuietAsync): the view and the working maps become these.
    private void Replace(IReadOnlyCollection<CacheRecord> caches, IReadOnlyCollection<ServerRecord> servers)
    {
        _view = StateView.Of(caches, servers);
        ReplaceWorking(caches, servers);
        lock (_queueGate)
            _stale = false;
    }

    // Under the lock: the working maps become these.
    private void ReplaceWorking(IEnumerable<CacheRecord> caches, IEnumerable<ServerRecord> servers)
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
        lock (_movers)
        {
            if (!_movers.TryGetValue((cacheId, serverId), out var activity))
                _movers[(cacheId, serverId)] = activity = new MoverActivity(_started);
            return activity;
        }
    }

    internal void ForgetMover(ulong cacheId, string serverId)
    {
        lock (_movers)
            _movers.Remove((cacheId, serverId));
    }

    /// <summary>
    /// Stages <paramref name="change"/> and waits until it is committed and visible (a token that ends the wait does not
    /// withdraw the change: it commits or fails as if waited for).
    /// </summary>
    internal async Task<IReadOnlyList<StoredEvent>> CommitAsync(StoreChange change, CancellationToken cancellationToken) =>
        await Stage(change).WaitAsync(cancellationToken).ConfigureAwait(false);

    /// <summary>
    /// Under the lock: makes <paramref name="change"/> in the working maps and queues it for the store. The task ends
    /// once it is committed, visible in <see cref="View"/> and its events published (with the events, their sequences
    /// given), or with why the store did not take it, or with <see cref="StoreConflictException"/> when it was built on a
    /// change the store did not take. The caller may leave the lock before it ends: that is what lets changes commit together.
    /// </summary>
    internal Task<IReadOnlyList<StoredEvent>> Stage(StoreChange change)
    {
        if (ResetIfStale())
            throw new StoreConflictException("the change was built on one the store did not take (the state is read again); it was not made");
        var staged = new Staged(change);
        bool start;
        lock (_queueGate)
        {
            _queue.Add(staged);
            _lastStaged = staged.Committed.Task;
            start = !_committing;
            _committing = true;
        }
        Apply(change, _caches, _servers);
        if (start)
            _ = Task.Run(CommitLoopAsync);
        return staged.Committed.Task;
    }

    private static void Apply(StoreChange change, Dictionary<ulong, CacheRecord> caches, Dictionary<string, ServerRecord> servers)
    {
        foreach (ulong id in change.DeleteCaches)
            caches.Remove(id);
        foreach (var cache in change.PutCaches)
            caches[cache.CacheId] = cache;
        foreach (string id in change.DeleteServers)
            servers.Remove(id);
        foreach (var server in change.PutServers)
            servers[server.ServerId] = server;
    }

    // Commits what is queued, in order, as many changes a transaction as the store takes, until the queue is empty.
    private async Task CommitLoopAsync()
    {
        while (true)
        {
            List<Staged> batch;
            lock (_queueGate)
            {
                if (_queue.Count == 0)
                {
                    _committing = false;
                    return;
                }
                // Merging only saves writes (the store's own two are written once), so the sum bounds the merged change.
                int count = 1, writes = _queue[0].Change.Writes;
                while (count < _queue.Count && writes + _queue[count].Change.Writes - 2 <= StoreChange.MaxWrites)
                    writes += _queue[count++].Change.Writes - 2;
                batch = _queue.GetRange(0, count);
                _queue.RemoveRange(0, count);
            }
            try
            {
                await CommitBatchAsync(batch).ConfigureAwait(false);
            }
            catch (Exception e)
            {
                // Never a waiter left waiting, nor a loop that ends with changes queued behind it.
                _logger.LogError(e, "Committing {Count} staged changes failed", batch.Count);
                foreach (var staged in batch)
                    staged.Committed.TrySetException(e);
            }
        }
    }

    private async Task CommitBatchAsync(List<Staged> batch)
    {
        var merged = StoreChange.Merge(batch.Select(b => b.Change).ToList());
        merged.Time = _time.GetUtcNow();  // the events' append time, by this manager's clock (what retention compares)
        IReadOnlyList<StoredEvent> events;
        try
        {
            events = await _store.ApplyAsync(merged, CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception e)
        {
            await FailAsync(batch, e).ConfigureAwait(false);
            return;
        }
        var view = _view;
        foreach (var staged in batch)
        {
            view = view.With(staged.Change);
            foreach (string id in staged.Change.DeleteServers)
            {
                _probes.TryRemove(id, out _);
                _silences.TryRemove(id, out _);
                _heartbeats.TryRemove(id, out _);
            }
        }
        _view = view;
        Events.Publish(events);
        int at = 0;
        foreach (var staged in batch)
        {
            int count = staged.Change.Events.Count;
            staged.Committed.SetResult(events.Skip(at).Take(count).ToList());
            at += count;
        }
    }

    // The store did not take `batch`: it fails, and so does every change staged after it (built on it); the working maps
    // become the view again before the next change is built.
    private async Task FailAsync(List<Staged> batch, Exception e)
    {
        try
        {
            if (e is StoreFencedException)
            {
                // Another manager leads now: this one's term is over (its watchdog would see it too, later).
                _leadership.StepDown(e.Message);
            }
            else if (e is StoreConflictException || e is StoreUnavailableException { OutcomeUnknown: true })
            {
                // What this manager holds is no longer what the store holds: it reads the store's state again, so that its
                // next change is built on it (rather than failing the same way forever).
                await ReloadQuietlyAsync().ConfigureAwait(false);
            }
        }
        finally
        {
            List<Staged> after;
            lock (_queueGate)
            {
                _stale = true;
                after = _queue.ToList();
                _queue.Clear();
            }
            foreach (var staged in batch)
                staged.Committed.TrySetException(e);
            foreach (var staged in after)
                staged.Committed.TrySetException(e is StoreFencedException
                    ? new StoreFencedException(e.Message)
                    : new StoreConflictException($"the change was built on one the store did not take ({e.Message}); it was not made"));
        }
    }

    // The view becomes the store's state (the working maps follow at the next change: they are stale).
    private async Task ReloadQuietlyAsync()
    {
        try
        {
            var snapshot = await _store.LoadAsync(CancellationToken.None).ConfigureAwait(false);
            _view = StateView.Of(snapshot.Caches, snapshot.Servers);
            _logger.LogWarning("Reloaded the state from the store after a change it did not take: {Caches} caches, {Servers} servers", snapshot.Caches.Count, snapshot.Servers.Count);
        }
        catch (Exception e)
        {
            _logger.LogError("Could not reload the state from the store after a change it did not take: {Reason}", e.Message);
        }
    }

    // A change staged and what became of it.
    private sealed class Staged(StoreChange change)
    {
        public StoreChange Change { get; } = change;

        public TaskCompletionSource<IReadOnlyList<StoredEvent>> Committed { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
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
        foreach (var s in _view.Servers.Values)
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

/// <summary>A joined server's last accepted heartbeat: when, its sequence, and the memory it said it may lend and lends.</summary>
internal sealed record Heartbeat(DateTimeOffset At, ulong Sequence, long MemoryLimit, long MemoryLent);

// A server's missed probes since its last answer: the first one's time and how many rounds.
internal sealed record Silence(DateTimeOffset Since, int Misses);

/// <summary>The caches and servers as committed: an immutable pair, replaced whole after each commit.</summary>
internal sealed record StateView(ImmutableDictionary<ulong, CacheRecord> Caches, ImmutableDictionary<string, ServerRecord> Servers)
{
    public static readonly StateView Empty = new(ImmutableDictionary<ulong, CacheRecord>.Empty, ImmutableDictionary.Create<string, ServerRecord>(StringComparer.Ordinal));

    public static StateView Of(IEnumerable<CacheRecord> caches, IEnumerable<ServerRecord> servers) =>
        new(Empty.Caches.SetItems(caches.Select(c => KeyValuePair.Create(c.CacheId, c))), Empty.Servers.SetItems(servers.Select(s => KeyValuePair.Create(s.ServerId, s))));

    /// <summary>This view with <paramref name="change"/> made.</summary>
    public StateView With(StoreChange change) => new(
        Caches.RemoveRange(change.DeleteCaches).SetItems(change.PutCaches.Select(c => KeyValuePair.Create(c.CacheId, c))),
        Servers.RemoveRange(change.DeleteServers).SetItems(change.PutServers.Select(s => KeyValuePair.Create(s.ServerId, s))));
}
