using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using RemoteCache.Slo;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// The load of the replica scenarios, all of it through the managed client given every manager's address (so it fails
/// over, follows the leader, resumes streams and renews leases through a change of leader as an application would):
/// <list type="bullet">
/// <item>alice's <see cref="Data"/> cache with a <see cref="VerifiedLoad"/> on its data client (renewed, reads and
/// writes checked), and her <see cref="Renewed"/> cache (renewed only; the one a server-loss scenario takes a server from);</item>
/// <item>bob's <see cref="Reshaped"/> cache, grown from one server to two and shrunk back over and over, and
/// <see cref="ChurnWorkers"/> workers that create a cache, write and read it, and delete it (Allocate/Deallocate churn);</item>
/// <item>alice's <see cref="Remote"/> cache, made and loaded by the bed's client program on a client host of its own
/// (<see cref="BedClient"/>): the same verified load, from another network namespace than the test process;</item>
/// <item>a <see cref="CacheWatcher"/> (WatchAsync from sequence 1) on each of the four long-lived caches.</item>
/// </list>
/// Every failure the managed client lets through (it retries a manager's unavailability itself, for up to its
/// CallTimeout) is recorded in <see cref="Unexpected"/>: a scenario expects none. Churn and reshapes run on bob's
/// account so that alice's caches stay as they are (a scenario compares them across its fault).
/// </summary>
public sealed class ReplicaLoad : IAsyncDisposable
{
    public const int ChurnWorkers = 2;

    // Bounds a fault's unavailability may take before a call fails: a new leader is elected within seconds.
    private static readonly TimeSpan CallTimeout = TimeSpan.FromSeconds(20);

    private readonly CancellationTokenSource _stop = new();
    private readonly List<Task> _workers = new();
    private readonly ConcurrentQueue<(DateTime Started, DateTime Done)> _allocated = new();
    private int _churnCycles, _reshapes;
    private bool _stopped;

    private ReplicaLoad(TimeSpan lease, RemoteCacheManagerClient alice, RemoteCacheManagerClient bob)
    {
        Lease = lease;
        Alice = alice;
        Bob = bob;
    }

    /// <summary>The lease of every cache: short, so that a renewal gap longer than half of it ends a lease within the scenario.</summary>
    public TimeSpan Lease { get; }

    public RemoteCacheManagerClient Alice { get; }

    public RemoteCacheManagerClient Bob { get; }

    public ManagedCache Data { get; private set; } = null!;

    public ManagedCache Renewed { get; private set; } = null!;

    public ManagedCache Reshaped { get; private set; } = null!;

    public VerifiedLoad DataLoad { get; private set; } = null!;

    public BedClient Remote { get; private set; } = null!;

    public IReadOnlyList<CacheWatcher> Watchers { get; private set; } = Array.Empty<CacheWatcher>();

    public CacheWatcher WatcherOf(ManagedCache cache) => Watchers.Single(w => w.CacheId == cache.CacheId);

    public int ChurnCycles => Volatile.Read(ref _churnCycles);

    public int Reshapes => Volatile.Read(ref _reshapes);

    /// <summary>What failed that should not have (with the time), from every part of the load.</summary>
    public ConcurrentQueue<string> Unexpected { get; } = new();

    /// <summary>The long-lived caches opened and renewed here (each watched).</summary>
    public IReadOnlyList<ManagedCache> LongLived => new[] { Data, Renewed, Reshaped };

    /// <summary>Every long-lived cache's id: those opened here and the client host's.</summary>
    public IReadOnlyList<ulong> LongLivedIds => LongLived.Select(c => c.CacheId).Append(Remote.CacheId).ToList();

    /// <summary>The managed clients' warnings (calls retried on another replica, renewals retried, streams resumed), for a failure's output.</summary>
    public ClientLog Warnings { get; private init; } = new();

    /// <summary>A managed client of the bed's managers (all their addresses) with <paramref name="apiKey"/>.</summary>
    public static RemoteCacheManagerClient Client(ClusterBed bed, string apiKey, ILoggerFactory? logs = null) => new(new RemoteCacheManagerOptions
    {
        Addresses = bed.ManagerAddresses.ToList(),
        ApiKey = apiKey,
        CallTimeout = CallTimeout,
        RetryLimit = TimeSpan.FromSeconds(1),
        Cache = new RemoteCacheOptions { OperationTimeout = TimeSpan.FromSeconds(5), ConnectTimeout = TimeSpan.FromSeconds(5), LoggerFactory = logs },
    });

    /// <summary>
    /// The longest time between two renewals of a long-lived cache (from its allocation on), as its watcher saw them: a
    /// lease ends when this passes half of it (renewals are made when half is left).
    /// </summary>
    public TimeSpan LongestRenewalGap => Watchers.Max(w =>
    {
        var times = w.Events.Where(e => e is CacheAllocatedEvent or LeaseRenewedEvent).Select(e => e.Time).ToList();
        return times.Zip(times.Skip(1), (a, b) => b - a).DefaultIfEmpty(TimeSpan.Zero).Max();
    });

    /// <summary>A tcp cache of <paramref name="capacity"/> (whole 64 MiB regions, one per small server) with a loose SLO.</summary>
    public ManagedCacheRequest Request(long capacity, string name) => new()
    {
        Capacity = capacity, Transport = "tcp", Lease = Lease, Name = name,
        Slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(50), RecordSize = 8, Retune = false },
    };

    /// <summary>Creates the long-lived caches, their watchers and the data load, and starts churn and reshapes.</summary>
    public static async Task<ReplicaLoad> StartAsync(ClusterBed bed, TimeSpan lease)
    {
        var logs = new ClientLog();
        var load = new ReplicaLoad(lease, Client(bed, AliceKey, logs), Client(bed, BobKey, logs)) { Warnings = logs };
        try
        {
            load.Data = await load.Alice.CreateAsync(load.Request(64 * MiB, "data"));
            load.Renewed = await load.Alice.CreateAsync(load.Request(64 * MiB, "renewed"));
            load.Reshaped = await load.Bob.CreateAsync(load.Request(64 * MiB, "reshaped"));
            load.Remote = await BedClient.StartAsync(bed, await bed.AddClientHostAsync(), AliceKey, lease);
            load.Watchers = new[]
            {
                new CacheWatcher(load.Alice, load.Data.CacheId), new CacheWatcher(load.Alice, load.Renewed.CacheId),
                new CacheWatcher(load.Bob, load.Reshaped.CacheId), new CacheWatcher(load.Alice, load.Remote.CacheId),
            };
            load.DataLoad = VerifiedLoad.Start(load.Data);
            for (int i = 0; i < ChurnWorkers; i++)
                load._workers.Add(Task.Run(() => load.ChurnAsync(load._stop.Token)));
            load._workers.Add(Task.Run(() => load.ReshapeAsync(load._stop.Token)));
            return load;
        }
        catch
        {
            await load.DisposeAsync();
            throw;
        }
    }

    /// <summary>
    /// When the first Create started after <paramref name="since"/> completed (one under way then may have been committed
    /// just before), waiting for one up to <paramref name="timeout"/>.
    /// </summary>
    public async Task<DateTime> FirstAllocationAfterAsync(DateTime since, TimeSpan timeout)
    {
        var waited = Stopwatch.StartNew();
        while (true)
        {
            var after = _allocated.Where(a => a.Started >= since).Select(a => a.Done).ToList();
            if (after.Count > 0)
                return after.Min();
            if (waited.Elapsed > timeout)
                throw new TimeoutException($"no cache was created within {timeout.TotalSeconds} s of {since:HH:mm:ss.fff}; unexpected: {string.Join(" | ", Unexpected)}");
            await Task.Delay(20);
        }
    }

    /// <summary>
    /// Waits until every part of the load made progress: <paramref name="cycles"/> more churn cycles and reshapes, 300
    /// more verified operations, and (unless null) a renewal of each long-lived cache seen by its watcher after
    /// <paramref name="renewedAfter"/> (the renewals and the streams both work, through whichever manager leads now).
    /// </summary>
    public async Task ProgressAsync(DateTime? renewedAfter, TimeSpan timeout, int cycles = 2)
    {
        int churn = ChurnCycles + cycles, reshapes = Reshapes + 1;
        var waited = Stopwatch.StartNew();
        await DataLoad.WaitForOperationsAsync(300, timeout);
        await Remote.WaitForOperationsAsync(300, timeout);
        while (ChurnCycles < churn || Reshapes < reshapes || renewedAfter is { } after && Watchers.Any(w => !w.RenewedAfter(after)))
        {
            if (waited.Elapsed > timeout)
                throw new TimeoutException(string.Create(CultureInfo.InvariantCulture,
                    $"the load made no progress within {timeout.TotalSeconds} s: churn {ChurnCycles}/{churn}, reshapes {Reshapes}/{reshapes}, renewed after {renewedAfter:HH:mm:ss.fff}: " +
                    $"{string.Join(", ", Watchers.Select(w => $"{w.CacheId}: {renewedAfter is { } t && w.RenewedAfter(t)}"))}; unexpected: {string.Join(" | ", Unexpected)}"));
            await Task.Delay(50);
        }
    }

    private async Task ChurnAsync(CancellationToken stop)
    {
        while (!stop.IsCancellationRequested)
        {
            try
            {
                // Not cancelled by `stop`: a cycle under way finishes, so that no churned cache is left behind.
                var started = DateTime.UtcNow;
                var cache = await Bob.CreateAsync(Request(64 * MiB, "churn"));
                _allocated.Enqueue((started, DateTime.UtcNow));
                var data = BitConverter.GetBytes(cache.CacheId);
                var back = new byte[8];
                await cache.Client.WriteAsync(8, data);
                await cache.Client.ReadAsync(8, back);
                if (!data.AsSpan().SequenceEqual(back))
                    throw new InvalidOperationException($"churned cache {cache.CacheId} read back other bytes");
                await cache.DeleteAsync();
                Interlocked.Increment(ref _churnCycles);
                // A pause: a steady stream of writes, not a flood that starves the managers and etcd on 2 cores.
                await Task.Delay(100, CancellationToken.None);
            }
            catch (Exception e)
            {
                Unexpected.Enqueue($"{DateTime.UtcNow:HH:mm:ss.fff} churn: {e.GetType().Name}: {e.Message}");
                await Task.Delay(100, CancellationToken.None);
            }
        }
    }

    // One server to two and back, checking each time that the client follows: after growing, a record on the second
    // server is written and read back; after shrinking, one server is left.
    private async Task ReshapeAsync(CancellationToken stop)
    {
        var cache = Reshaped;
        while (!stop.IsCancellationRequested)
        {
            try
            {
                await cache.ReshapeAsync(128 * MiB);
                if (cache.Info.Servers.Count != 2 || cache.Client.Capacity < 128 * MiB)
                    throw new InvalidOperationException($"grown to {cache.Info.Servers.Count} servers, capacity {cache.Client.Capacity}");
                var data = BitConverter.GetBytes(Reshapes + 1L);
                var back = new byte[8];
                await cache.Client.WriteAsync(64 * MiB + 8, data);
                await cache.Client.ReadAsync(64 * MiB + 8, back);
                if (!data.AsSpan().SequenceEqual(back))
                    throw new InvalidOperationException("the grown part read back other bytes");
                await cache.ReshapeAsync(64 * MiB);
                if (cache.Info.Servers.Count != 1 || cache.Client.Capacity != 64 * MiB)
                    throw new InvalidOperationException($"shrunk to {cache.Info.Servers.Count} servers, capacity {cache.Client.Capacity}");
                Interlocked.Increment(ref _reshapes);
                await Task.Delay(300, stop);
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
            }
            catch (Exception e)
            {
                Unexpected.Enqueue($"{DateTime.UtcNow:HH:mm:ss.fff} reshape: {e.GetType().Name}: {e.Message}");
                await Task.Delay(100, CancellationToken.None);
            }
        }
    }

    /// <summary>Stops churn and reshapes (each finishes its cycle), the watchers and the data load; the long-lived caches stay open.</summary>
    public async Task StopAsync()
    {
        if (_stopped)
            return;
        _stopped = true;
        _stop.Cancel();
        await Task.WhenAll(_workers);
        foreach (var w in Watchers)
            await w.StopAsync();
        if (DataLoad is not null)
            await DataLoad.StopAsync();
    }

    /// <summary>
    /// After <see cref="StopAsync"/>: every watcher's events are gapless and duplicate-free against the cache's log as
    /// the manager keeps it (read again from the same sequence), began at the allocation, and hold no deletion; and
    /// every long-lived cache is still open here (no lease ended: its handle was not closed by the manager).
    /// </summary>
    public async Task<IReadOnlyList<string>> CheckAsync()
    {
        var violations = new List<string>();
        foreach (var w in Watchers)
            violations.AddRange(await w.CheckAsync());
        foreach (var c in LongLived)
        {
            try
            {
                _ = c.Client;
            }
            catch (ObjectDisposedException e)
            {
                violations.Add($"cache {c.CacheId} ({c.Name}) was closed: {e.Message}");
            }
        }
        if (!Remote.Running)
            violations.Add($"the client program on {Remote.Host.Name} ended: {Remote.Summary}");
        return violations;
    }

    public string Summary => string.Create(CultureInfo.InvariantCulture,
        $"{ChurnCycles} churn cycles, {Reshapes} reshapes (1 → 2 → 1 servers), {DataLoad?.Summary}; {Remote?.Summary}; " +
        $"watchers: {string.Join(", ", Watchers.Select(w => w.Summary))}");

    public async ValueTask DisposeAsync()
    {
        await StopAsync();
        if (DataLoad is not null)
            await DataLoad.DisposeAsync();
        if (Remote is not null)
            await Remote.DisposeAsync();
        await Alice.DisposeAsync();
        await Bob.DisposeAsync();
        _stop.Dispose();
    }
}

/// <summary>Keeps the managed clients' warnings and errors (with the time), the last 200.</summary>
public sealed class ClientLog : ILoggerFactory, ILoggerProvider, ILogger
{
    private readonly ConcurrentQueue<string> _lines = new();
    private int _count;

    public int Count => Volatile.Read(ref _count);

    public IReadOnlyList<string> Lines => _lines.ToArray();

    public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
    {
        if (!IsEnabled(logLevel))
            return;
        Interlocked.Increment(ref _count);
        _lines.Enqueue($"{DateTime.UtcNow:HH:mm:ss.fff} {logLevel} {eventId.Id}: {formatter(state, exception)}");
        while (_lines.Count > 200)
            _lines.TryDequeue(out _);
    }

    public bool IsEnabled(LogLevel logLevel) => logLevel >= LogLevel.Warning;

    public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

    public ILogger CreateLogger(string categoryName) => this;

    public void AddProvider(ILoggerProvider provider)
    {
    }

    public void Dispose()
    {
    }
}

/// <summary>
/// A consumer of one cache's events (<see cref="RemoteCacheManagerClient.WatchAsync"/> from sequence 1) recording every
/// event it is handed, through failovers; <see cref="CheckAsync"/> compares them with the log read again.
/// </summary>
public sealed class CacheWatcher
{
    private readonly RemoteCacheManagerClient _client;
    private readonly List<ManagedCacheEvent> _events = new();
    private readonly CancellationTokenSource _stop = new();
    private readonly Task _running;
    private Exception? _error;

    public CacheWatcher(RemoteCacheManagerClient client, ulong cacheId, long from = 1)
    {
        _client = client;
        CacheId = cacheId;
        From = from;
        _running = Task.Run(RunAsync);
    }

    public ulong CacheId { get; }

    public long From { get; }

    public IReadOnlyList<ManagedCacheEvent> Events
    {
        get
        {
            lock (_events)
                return _events.ToList();
        }
    }

    public bool RenewedAfter(DateTime time) => Events.Any(e => e is LeaseRenewedEvent && e.Time.UtcDateTime > time);

    public int Count<T>() where T : ManagedCacheEvent => Events.Count(e => e is T);

    /// <summary>Waits for an event of type <typeparamref name="T"/> that <paramref name="match"/> accepts; returns it.</summary>
    public async Task<T> WaitForAsync<T>(Func<T, bool> match, TimeSpan timeout) where T : ManagedCacheEvent
    {
        var waited = Stopwatch.StartNew();
        while (true)
        {
            if (Events.OfType<T>().FirstOrDefault(match) is { } found)
                return found;
            if (waited.Elapsed > timeout || _running.IsCompleted)
                throw new TimeoutException($"cache {CacheId}: no {typeof(T).Name} within {timeout.TotalSeconds} s ({Summary}; {_error?.Message})");
            await Task.Delay(20);
        }
    }

    private async Task RunAsync()
    {
        try
        {
            await foreach (var e in _client.WatchAsync(CacheId, From, _stop.Token))
                lock (_events)
                    _events.Add(e);
        }
        catch (OperationCanceledException) when (_stop.IsCancellationRequested)
        {
        }
        catch (Exception e)
        {
            _error = e;
        }
    }

    public async Task StopAsync()
    {
        _stop.Cancel();
        await _running;
    }

    public string Summary => string.Create(CultureInfo.InvariantCulture,
        $"cache {CacheId}: {Events.Count} events ({string.Join(" ", Events.GroupBy(e => e.GetType().Name.Replace("Event", "", StringComparison.Ordinal)).Select(g => $"{g.Key}×{g.Count()}"))})");

    /// <summary>
    /// The events handed out (after <see cref="StopAsync"/>) against the log read again from <see cref="From"/> up to the
    /// last one handed out: the same sequences in the same order (none missed, none repeated, none the log does not
    /// hold), the first the allocation, none a deletion; and the stream did not fail.
    /// </summary>
    public async Task<IReadOnlyList<string>> CheckAsync()
    {
        var violations = new List<string>();
        var got = Events;
        if (_error is not null)
            violations.Add($"cache {CacheId}: the watch failed: {_error.GetType().Name}: {_error.Message}");
        if (got.Count == 0)
            return violations.Append($"cache {CacheId}: no event watched").ToList();
        if (From == 1 && got[0] is not CacheAllocatedEvent)
            violations.Add($"cache {CacheId}: the first event watched is {got[0]}, not the allocation");
        for (int i = 1; i < got.Count; i++)
            if (got[i].Sequence <= got[i - 1].Sequence)
                violations.Add($"cache {CacheId}: event {got[i].Sequence} came after {got[i - 1].Sequence} (repeated or out of order)");
        violations.AddRange(got.OfType<CacheDeletedEvent>().Select(e => $"cache {CacheId} was deleted: {e.Reason}"));

        var log = new List<ManagedCacheEvent>();
        using (var read = new CancellationTokenSource(TimeSpan.FromSeconds(15)))
        {
            try
            {
                await foreach (var e in _client.WatchAsync(CacheId, From, read.Token))
                {
                    log.Add(e);
                    if (e.Sequence >= got[^1].Sequence)
                        break;
                }
            }
            catch (OperationCanceledException)
            {
                violations.Add($"cache {CacheId}: reading the log again did not reach sequence {got[^1].Sequence} within 15 s");
            }
        }
        var watched = got.Select(e => e.Sequence).ToList();
        var kept = log.Select(e => e.Sequence).ToList();
        var missed = kept.Except(watched).ToList();
        var unknown = watched.Except(kept).ToList();
        if (missed.Count > 0)
            violations.Add($"cache {CacheId}: the watcher missed events {string.Join(", ", missed)} of {kept.Count} in the log");
        if (unknown.Count > 0)
            violations.Add($"cache {CacheId}: the watcher was handed events {string.Join(", ", unknown)}, which the log does not hold");
        return violations;
    }
}
