using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Grpc.Core;
using RemoteCache.Manager.V1;
using RemoteCache.Slo;

namespace RemoteCache;

/// <summary>
/// A cache rented through the manager and open here: <see cref="Client"/> reads and writes it; <see cref="ReshapeAsync"/>
/// and <see cref="DeleteAsync"/> change it (Redy's Reshape and Delete). While it is open the client renews its lease
/// (when half of it is left) and follows the manager's events (<see cref="Events"/>), resuming after a lost connection
/// from the last event it saw; a reshape made elsewhere (another process, the command line) is followed here. A
/// manager that is down disturbs neither: reads and writes go to the servers directly.
/// </summary>
public sealed partial class ManagedCache : IAsyncDisposable, IDisposable
{
    // Bytes per populate write, and writes in flight: large enough that the data path streams, small enough that the
    // file read of one chunk overlaps the writes of the others.
    private const int PopulateChunk = 1 << 20;
    private const int PopulateDepth = 8;

    private static readonly TimeSpan ProgressPeriod = TimeSpan.FromMilliseconds(250);
    private static readonly TimeSpan DeletionEventWait = TimeSpan.FromSeconds(1);
    private static readonly TimeSpan MinRenewTimeout = TimeSpan.FromSeconds(2);

    // Why the handle ends when its user disposed the data client (a FASTER device that owns it, for example): the
    // lease is no longer renewed, and the cache is deleted through RemoteCacheManagerClient.DeleteAsync(id).
    private const string DataClientClosed = "its data client was closed; the lease is no longer renewed";

    private readonly RemoteCacheManagerClient _manager;
    private readonly RemoteCacheClient _client;
    private readonly RemoteCacheOptions _opened;  // what _client was opened with: an encrypted cache's layout
    private readonly RemoteCacheMover _regions;  // moves the client's regions on a reclaim, a failure or a reshape
    private readonly SemaphoreSlim _gate = new(1, 1);  // one change of the cache's shape, config or servers at a time
    // The data client's holders change, and capabilities are presented to them, one at a time: a renewal runs beside a
    // move (which holds _gate for as long as the move takes) and presents one capability per holder as they are then.
    private readonly SemaphoreSlim _holders = new(1, 1);
    private readonly object _stateLock = new();  // read-modify-writes of _state (renewals run beside the changes)
    private readonly CancellationTokenSource _stop = new();
    private readonly EventFeed _feed = new();
    private readonly Task _renewing;
    private readonly Task _watching;
    private Cache _state;
    private string? _gone;
    private Task _populated = Task.CompletedTask;
    // Set when the event stream hands on the cache's deletion: DeleteAsync lets it through before the stream ends.
    private readonly TaskCompletionSource _deletionSeen = new(TaskCreationOptions.RunContinuationsAsynchronously);

    internal ManagedCache(RemoteCacheManagerClient manager, Cache state, RemoteCacheClient client, RemoteCacheOptions opened, string name, long watchFrom)
    {
        _manager = manager;
        _opened = opened;
        _state = state;
        _client = client;
        _regions = new RemoteCacheMover(client);
        Name = name;
        CacheId = state.CacheId;
        _renewing = Task.Run(() => RenewLoopAsync(_stop.Token));
        _watching = Task.Run(() => WatchLoopAsync(watchFrom, _stop.Token));
    }

    /// <summary>The manager's id of the cache.</summary>
    public ulong CacheId { get; }

    /// <summary>The name used in messages and logs: the cache's name and id.</summary>
    public string Name { get; }

    /// <summary>
    /// The data API: reads, writes, sessions, a FASTER device. It follows reshapes (its <see cref="RemoteCacheClient.Capacity"/>
    /// changes) and is closed when the cache is deleted or this handle disposed.
    /// </summary>
    /// <exception cref="ObjectDisposedException">The cache was deleted (the message says why) or this handle disposed.</exception>
    public RemoteCacheClient Client
    {
        get
        {
            ThrowIfGone();
            return _client;
        }
    }

    /// <summary>The cache as last heard from the manager (servers, configuration, lease).</summary>
    public ManagedCacheInfo Info => Contract.FromProto(Volatile.Read(ref _state));

    /// <summary>When the lease ends unless it is renewed again (it is renewed while the cache is open here).</summary>
    public DateTimeOffset LeaseExpires => Volatile.Read(ref _state).Lease.Expires.ToDateTimeOffset();

    /// <summary>How long a renewal extends the lease (it is renewed when half of it is left).</summary>
    public TimeSpan LeaseLength => Volatile.Read(ref _state).Lease.Length?.ToTimeSpan() ?? TimeSpan.Zero;

    /// <summary>Completes when filling from <see cref="ManagedCacheRequest.PopulateFrom"/> is done (at once if none was asked), or faults with why it stopped.</summary>
    public Task Populated => Volatile.Read(ref _populated);

    /// <summary>
    /// The cache's events: those received since it was opened here (the last 1024 kept), then live ones, until the
    /// cache is deleted or this handle disposed. Each enumeration gets all of them; a slow reader loses the oldest
    /// beyond 1024 unread.
    /// </summary>
    public IAsyncEnumerable<ManagedCacheEvent> Events => _feed;

    /// <summary>
    /// Changes the capacity and/or the SLO (Redy's Reshape). Growing appends the servers the manager grants; shrinking
    /// cuts the address space after the kept servers first (I/O past the new capacity then fails with
    /// <see cref="ArgumentOutOfRangeException"/>) and then releases the rest. I/O below the smaller capacity goes on
    /// undisturbed either way. A new SLO whose configuration the cache's servers can carry is applied live; one they
    /// cannot (more server threads than their cores) first moves the cache onto new servers, one server's regions at a
    /// time (writes to the region being copied wait, reads go on; <see cref="RegionMovedEvent"/>s report progress), and
    /// the old servers are released. A capacity change or a new configuration is all or nothing; a move that fails
    /// part-way leaves the servers already replaced in place (each replacement is complete in itself).
    /// </summary>
    /// <param name="capacity">Bytes wanted (0: unchanged). Whole servers are added or removed: the capacity becomes the smallest multiple of a server's share that holds it.</param>
    /// <param name="slo">The new SLO, or null to keep the current one.</param>
    /// <param name="cancellationToken">Stops waiting for the manager; a reshape the manager already made is still followed.</param>
    /// <exception cref="RemoteCacheManagerException">The manager refused (no capacity, quota, no VMs with the cores the SLO needs) or did not answer.</exception>
    /// <exception cref="RemoteCacheException">A new server could not be reached; the manager's change was undone.</exception>
    /// <exception cref="ObjectDisposedException">The cache was deleted or this handle disposed.</exception>
    public async Task ReshapeAsync(long capacity, RemoteCacheSlo? slo = null, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(capacity);
        if (slo?.Problem() is { } problem)
            throw new ArgumentException($"{Name}: the SLO {problem}", nameof(slo));
        ThrowIfGone();
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            ThrowIfGone();
            await ReshapeLockedAsync(capacity, slo, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _gate.Release();
        }
    }

    private async Task ReshapeLockedAsync(long capacity, RemoteCacheSlo? slo, CancellationToken cancellationToken)
    {
        var before = _state;
        if (capacity != 0)
            capacity = _opened.ServerBytesFor(capacity);  // the manager and the servers count an encrypted cache's trailers too
        long share = (long)before.Servers[0].Regions * (long)before.Servers[0].RegionSize;
        int servers = capacity == 0 ? before.Servers.Count : (int)Math.Min(int.MaxValue, WholeServers.Servers(capacity, share));
        var request = new ReallocateRequest { CacheId = CacheId, Capacity = (ulong)capacity };
        if (slo is not null)
            request.Slo = Contract.ToProto(slo);

        // Shrinking: stop using the tail before the manager frees it, so no operation reaches a server that dropped the cache.
        bool shrinking = servers < before.Servers.Count;
        if (shrinking)
            await WithHoldersAsync(() => _client.ShrinkAsync(servers), CancellationToken.None).ConfigureAwait(false);
        ReallocateResponse response;
        try
        {
            response = await ReallocateOrMoveLockedAsync(request, cancellationToken).ConfigureAwait(false);
        }
        catch when (shrinking)
        {
            var tail = before.Servers.Skip(servers).ToList();
            await WithHoldersAsync(() => _client.GrowAsync(tail.Select(s => s.Endpoint).ToList(), tail.Select(s => s.Capability).ToList()), CancellationToken.None)
                .ConfigureAwait(false);
            throw;
        }
        var after = response.Cache;
        try
        {
            await ApplyLockedAsync(after, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RemoteCacheException or ArgumentException)
        {
            // All or nothing: the manager takes back what it granted (its tail servers, its new configuration).
            Log.ReshapeUndone(_manager.Logger, Name, e.Message);
            if (response.Added.Count > 0 && _client.ServerCount > before.Servers.Count)
                await WithHoldersAsync(() => _client.ShrinkAsync(before.Servers.Count), CancellationToken.None).ConfigureAwait(false);
            var undo = new ReallocateRequest { CacheId = CacheId, Capacity = before.Capacity, Slo = before.Slo };
            await _manager.CallAsync("Reallocate (undoing a reshape)", (m, o) => m.Grpc.ReallocateAsync(undo, o), CancellationToken.None).ConfigureAwait(false);
            throw;
        }
        Log.Reshaped(_manager.Logger, Name, before.Servers.Count, (long)before.Capacity, after.Servers.Count, (long)after.Capacity, Contract.FromProto(after.Config));
    }

    // Reallocate; when the SLO needs servers the cache's cannot be (more cores), the cache first moves onto new ones.
    private async Task<ReallocateResponse> ReallocateOrMoveLockedAsync(ReallocateRequest request, CancellationToken cancellationToken)
    {
        try
        {
            return await _manager.CallAsync("Reallocate", (m, o) => m.Grpc.ReallocateAsync(request, o), cancellationToken).ConfigureAwait(false);
        }
        catch (RemoteCacheManagerException e) when (e.MigrationRequired && request.Slo is not null)
        {
            await MoveToNewServersLockedAsync(request.Slo, cancellationToken).ConfigureAwait(false);
            return await _manager.CallAsync("Reallocate", (m, o) => m.Grpc.ReallocateAsync(request, o), cancellationToken).ConfigureAwait(false);
        }
    }

    /// <summary>
    /// Deletes the cache (Redy's Delete): the manager frees it on every server and returns its VMs. Afterwards
    /// <see cref="Client"/>, the client it returned and this handle's methods throw <see cref="ObjectDisposedException"/>.
    /// </summary>
    /// <exception cref="RemoteCacheManagerException">The manager did not answer; the cache is still there (and its lease still renewed).</exception>
    public async Task DeleteAsync(CancellationToken cancellationToken = default)
    {
        ThrowIfGone();
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            ThrowIfGone();
            await _manager.DeallocateAsync(CacheId, cancellationToken).ConfigureAwait(false);
        }
        catch (RemoteCacheManagerException e) when (e.Status == StatusCode.NotFound)
        {
            // Already gone (its lease ended, or another client deleted it): what Delete wants.
        }
        finally
        {
            _gate.Release();
        }
        // The manager sends the deletion to watchers as it answers: a moment for it to reach the stream, whose readers
        // would otherwise see it end without it (not long: a stream that is down does not hold Delete up).
        await Task.WhenAny(_deletionSeen.Task, Task.Delay(DeletionEventWait, cancellationToken)).ConfigureAwait(false);
        Gone("it was deleted by this client");
    }

    internal async Task DeleteQuietlyAsync(string why)
    {
        Gone(why);
        await StopLoopsAsync().ConfigureAwait(false);
        await _manager.DeallocateQuietlyAsync(CacheId).ConfigureAwait(false);
    }

    // ---- lease -------------------------------------------------------------------------------------------------

    // Renews when half the lease is left, until the cache is gone. A renewal goes through CallAsync, which carries it
    // across replicas through a failover; one that still fails is tried again (waits up to RetryLimit) until it succeeds
    // or the manager says the cache is gone (NOT_FOUND), even past the lease's end as this client saw it: only the
    // manager ends a lease.
    private async Task RenewLoopAsync(CancellationToken stop)
    {
        var retry = new Backoff(_manager.Options.RetryLimit);
        try
        {
            while (true)
            {
                var lease = Volatile.Read(ref _state).Lease;
                var due = lease.Expires.ToDateTimeOffset() - (lease.Length?.ToTimeSpan() ?? TimeSpan.Zero) / 2;
                var wait = due - DateTimeOffset.UtcNow;
                if (wait > TimeSpan.Zero)
                    await Task.Delay(wait, stop).ConfigureAwait(false);
                try
                {
                    var renewed = await _manager.CallAsync("RenewLease", (m, o) => m.Grpc.RenewLeaseAsync(new RenewLeaseRequest { CacheId = CacheId }, o), stop,
                                                           RenewTimeout(LeaseExpires - DateTimeOffset.UtcNow, _manager.Options.CallTimeout))
                                                .ConfigureAwait(false);
                    await ApplyRenewalAsync(renewed, stop).ConfigureAwait(false);
                    retry.Reset();
                }
                catch (RemoteCacheManagerException e) when (e.Status == StatusCode.NotFound)
                {
                    Gone($"the manager no longer has it ({e.Message})");
                    return;
                }
                catch (ObjectDisposedException) when (!stop.IsCancellationRequested)
                {
                    Gone(DataClientClosed);
                    return;
                }
                catch (Exception e) when (e is RemoteCacheManagerException or RemoteCacheException or ArgumentException && !stop.IsCancellationRequested)
                {
                    var delay = retry.Next();
                    Log.RenewFailed(_manager.Logger, Name, LeaseExpires, delay.TotalMilliseconds, e.Message);
                    await Task.Delay(delay, stop).ConfigureAwait(false);
                }
            }
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
        }
    }

    // How long one renewal (its attempts on every replica) may take: half of the lease left, so that a renewal stuck on a
    // replica whose host vanished (no answer until the deadline) leaves time for another, which starts at the next
    // replica; at least MinRenewTimeout (a renewal near or past the lease's end still gets a fair chance) and at most
    // CallTimeout.
    internal static TimeSpan RenewTimeout(TimeSpan leaseLeft, TimeSpan callTimeout)
    {
        var timeout = leaseLeft / 2;
        if (timeout < MinRenewTimeout)
            timeout = MinRenewTimeout;
        return timeout < callTimeout ? timeout : callTimeout;
    }

    // Not under _gate: a move holds it for as long as it takes, and the servers must have the new capabilities before
    // the old ones expire.
    private async Task ApplyRenewalAsync(RenewLeaseResponse renewed, CancellationToken stop)
    {
        if (!Volatile.Read(ref _state).Servers.Select(s => s.ServerId).SequenceEqual(renewed.Servers.Select(s => s.ServerId)))
        {
            // Reshaped (or a server replaced) since the last look: follow it, with capabilities of the renewed lease.
            await _gate.WaitAsync(stop).ConfigureAwait(false);
            try
            {
                await FollowLockedAsync(stop).ConfigureAwait(false);
            }
            finally
            {
                _gate.Release();
            }
            return;
        }
        var servers = AllServers(renewed.Servers, renewed.Replacements).ToList();
        await WithHoldersAsync(() => RenewLockedAsync(servers), stop).ConfigureAwait(false);
        UpdateState(state =>
        {
            var next = state.Clone();
            next.Lease = renewed.Lease;
            next.Servers.Clear();
            next.Servers.AddRange(renewed.Servers);
            next.Replacements.Clear();
            next.Replacements.AddRange(renewed.Replacements);
            return next;
        });
    }

    // The cache's servers and the replacements rented for some of them: every server holding a capability of the lease.
    private static IEnumerable<CacheServer> AllServers(IEnumerable<CacheServer> servers, IEnumerable<Replacement> replacements) =>
        servers.Concat(replacements.Select(r => r.Server));

    // Changes _state; `change` may run more than once.
    private void UpdateState(Func<Cache, Cache> change)
    {
        lock (_stateLock)
            Volatile.Write(ref _state, change(_state));
    }

    // `cache` as the manager returned it from a change, keeping a lease renewed meanwhile (and its capabilities).
    private void AdoptState(Cache cache) => UpdateState(current =>
    {
        if (current.Lease.Expires.ToDateTimeOffset() <= cache.Lease.Expires.ToDateTimeOffset())
            return cache;
        var renewed = AllServers(current.Servers, current.Replacements).ToDictionary(s => s.ServerId, s => s.Capability);
        var next = cache.Clone();
        next.Lease = current.Lease;
        foreach (var server in AllServers(next.Servers, next.Replacements))
            if (renewed.TryGetValue(server.ServerId, out var capability))
                server.Capability = capability;
        return next;
    });

    private async Task WithHoldersAsync(Action change, CancellationToken cancellationToken) =>
        await WithHoldersAsync(() =>
        {
            change();
            return Task.CompletedTask;
        }, cancellationToken).ConfigureAwait(false);

    private async Task WithHoldersAsync(Func<Task> change, CancellationToken cancellationToken)
    {
        await _holders.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            await change().ConfigureAwait(false);
        }
        finally
        {
            _holders.Release();
        }
    }

    // ---- events ------------------------------------------------------------------------------------------------

    private async Task WatchLoopAsync(long from, CancellationToken stop)
    {
        try
        {
            while (true)
            {
                try
                {
                    await foreach (var e in _manager.WatchAsync(CacheId, from, stop).ConfigureAwait(false))
                        await HandleAsync(e, stop).ConfigureAwait(false);
                    return;
                }
                catch (RemoteCacheManagerException e) when (e.EventsCompacted && from != 0)
                {
                    // Events this handle has not seen were compacted away (it was away longer than the manager keeps
                    // them, or opened an old cache): the cache as it is now stands for them, then only new ones follow.
                    // An event committed between that read and the new stream is seen by its effect at the next renewal
                    // (which compares the servers), not as an event. From 0, the refusal cannot come again: no loop.
                    Log.EventsCompacted(_manager.Logger, Name, e.Message);
                    await CatchUpAsync(stop).ConfigureAwait(false);
                    from = 0;
                }
            }
        }
        catch (RemoteCacheManagerException e) when (e.Status == StatusCode.NotFound)
        {
            Gone($"the manager no longer has it ({e.Message})");
        }
        catch (ObjectDisposedException) when (!stop.IsCancellationRequested)
        {
            Gone(DataClientClosed);
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
        }
    }

    // Follows the cache as the manager now has it, as after an event that changed it.
    private async Task CatchUpAsync(CancellationToken stop)
    {
        await _gate.WaitAsync(stop).ConfigureAwait(false);
        try
        {
            await FollowLockedAsync(stop).ConfigureAwait(false);
        }
        catch (Exception ex) when ((ex is RemoteCacheException or ArgumentException or RemoteCacheManagerException { Status: not StatusCode.NotFound }) && !stop.IsCancellationRequested)
        {
            Log.FollowFailed(_manager.Logger, Name, ex.Message);
        }
        finally
        {
            _gate.Release();
        }
    }

    // Acts on one event, then hands it to the readers of Events.
    private async Task HandleAsync(ManagedCacheEvent managed, CancellationToken stop)
    {
        bool follow = managed switch
        {
            CacheReshapedEvent r => !r.ServerIds.SequenceEqual(Volatile.Read(ref _state).Servers.Select(s => s.ServerId)),
            ServerReplacedEvent r => !r.ServerIds.SequenceEqual(Volatile.Read(ref _state).Servers.Select(s => s.ServerId)),
            ConfigChangedEvent c => c.Config != Contract.FromProto(Volatile.Read(ref _state).Config),
            _ => false,
        };
        if (follow)
        {
            await _gate.WaitAsync(stop).ConfigureAwait(false);
            try
            {
                await FollowLockedAsync(stop).ConfigureAwait(false);
            }
            catch (Exception ex) when (ex is RemoteCacheManagerException or RemoteCacheException or ArgumentException && !stop.IsCancellationRequested)
            {
                Log.FollowFailed(_manager.Logger, Name, ex.Message);
            }
            finally
            {
                _gate.Release();
            }
        }
        _feed.Publish(managed);
        if (_manager.Options.ReplaceServers)
        {
            // Handed on first, so that readers see the notice before the progress of the move it starts.
            if (managed is ReclaimNoticeEvent notice)
                await ReplaceAsync(notice.ServerId, notice.Deadline, null, stop).ConfigureAwait(false);
            else if (managed is ServerFailedEvent failed)
                await ReplaceAsync(failed.ServerId, null, failed.Reason, stop).ConfigureAwait(false);
        }
        if (managed is CacheDeletedEvent deleted)
        {
            _deletionSeen.TrySetResult();
            Gone($"it was deleted: {deleted.Reason}");
        }
    }

    // Reads the cache as the manager now has it and follows a change made elsewhere.
    private async Task FollowLockedAsync(CancellationToken stop)
    {
        var cache = await _manager.CallAsync("GetCache", (m, o) => m.Grpc.GetCacheAsync(new GetCacheRequest { CacheId = CacheId }, o), stop).ConfigureAwait(false);
        var had = _state;
        await ApplyLockedAsync(cache, stop).ConfigureAwait(false);
        if (cache.Servers.Count != had.Servers.Count)
            Log.Reshaped(_manager.Logger, Name, had.Servers.Count, (long)had.Capacity, cache.Servers.Count, (long)cache.Capacity, Contract.FromProto(cache.Config));
    }

    // Brings the data client to `cache`: servers replaced in place (ServerReplaced: their regions switch to the
    // replacement, whose content the client that moved them copied), servers appended or cut (whole servers at the end,
    // as the manager reshapes), the capabilities of a renewed lease, the configuration; then it is the state.
    private async Task ApplyLockedAsync(Cache cache, CancellationToken cancellationToken)
    {
        var have = _state.Servers.Take(_client.ServerCount).ToList();
        var want = cache.Servers;
        for (int i = 0; i < Math.Min(have.Count, want.Count); i++)
            if (have[i].ServerId != want[i].ServerId)
            {
                string reason = $"another client of the cache moved server {have[i].ServerId}'s regions to {want[i].ServerId} without their content";
                var lost = await MoveShareLockedAsync(i, have[i].ServerId, want[i], ShareMove.Follow, null, reason, cancellationToken).ConfigureAwait(false);
                ReportLost(lost, reason, refill: false);
            }
        await WithHoldersAsync(async () =>
        {
            if (want.Count < have.Count)
                await _client.ShrinkAsync(want.Count).ConfigureAwait(false);
            else if (want.Count > have.Count)
                await _client.GrowAsync(want.Skip(have.Count).Select(s => s.Endpoint).ToList(), want.Skip(have.Count).Select(s => s.Capability).ToList())
                             .ConfigureAwait(false);
            if (cache.Lease.Expires.ToDateTimeOffset() > _state.Lease.Expires.ToDateTimeOffset())
                await RenewLockedAsync(AllServers(cache.Servers, cache.Replacements)).ConfigureAwait(false);
        }, cancellationToken).ConfigureAwait(false);
        await _client.ReconfigureAsync(Contract.FromProto(cache.Config)).ConfigureAwait(false);  // the one it runs changes nothing
        AdoptState(cache);
    }

    // Presents the capabilities of `servers` to the holders they belong to (by endpoint); a holder let go gets none.
    private Task RenewLockedAsync(IEnumerable<CacheServer> servers)
    {
        var byEndpoint = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (var server in servers)
            byEndpoint[server.Endpoint] = server.Capability;
        var capabilities = Enumerable.Range(0, _regions.HolderCount)
                                     .Select(h => byEndpoint.GetValueOrDefault(_regions.GetHolderEndpoint(h)))
                                     .ToList();
        return _client.RenewAsync(capabilities);
    }

    // ---- populate ----------------------------------------------------------------------------------------------

    internal Task StartPopulate(string path, long length)
    {
        _populateSource = (path, length);
        var task = Task.Run(() => PopulateAsync(path, 0, length, _stop.Token));
        Volatile.Write(ref _populated, task);
        return task;
    }

    // Writes bytes [start, end) of the file at the same addresses.
    private async Task PopulateAsync(string path, long start, long end, CancellationToken stop)
    {
        long length = end - start;
        var clock = Stopwatch.StartNew();
        var lastReport = TimeSpan.Zero;
        try
        {
            using var file = File.OpenHandle(path, FileMode.Open, FileAccess.Read, FileShare.Read, FileOptions.SequentialScan);
            await SetFillQueueDepthAsync(filling: true, stop).ConfigureAwait(false);
            var buffers = new byte[PopulateDepth][];
            var writes = new Task[PopulateDepth];
            long done = 0;
            for (long offset = 0, slot = 0; offset < length; slot = (slot + 1) % PopulateDepth)
            {
                if (writes[slot] is { } previous)
                {
                    await previous.ConfigureAwait(false);
                    done += buffers[slot].Length;  // every chunk but the last is full
                }
                buffers[slot] ??= GC.AllocateUninitializedArray<byte>(PopulateChunk, pinned: true);
                int n = (int)Math.Min(PopulateChunk, length - offset);
                ReadExactly(file, path, buffers[slot].AsSpan(0, n), start + offset);
                // An encrypted cache is written in whole blocks: the file's last one is completed with zeros.
                int written = _opened.Encrypted ? (int)Math.Min(PopulateChunk, (long)(n + _opened.EncryptionBlockSize - 1) / _opened.EncryptionBlockSize * _opened.EncryptionBlockSize) : n;
                buffers[slot].AsSpan(n, written - n).Clear();
                writes[slot] = _client.WriteAsync(start + offset, buffers[slot].AsMemory(0, written), stop).AsTask();
                offset += n;
                if (clock.Elapsed - lastReport >= ProgressPeriod)
                {
                    lastReport = clock.Elapsed;
                    _feed.Publish(new PopulateProgressEvent(CacheId, DateTimeOffset.UtcNow, done, length, null));
                }
            }
            await Task.WhenAll(writes.Where(w => w is not null)).ConfigureAwait(false);
            _feed.Publish(new PopulateProgressEvent(CacheId, DateTimeOffset.UtcNow, length, length, null));
            Log.Populated(_manager.Logger, Name, path, length, clock.Elapsed.TotalMilliseconds);
        }
        catch (Exception e)
        {
            _feed.Publish(new PopulateProgressEvent(CacheId, DateTimeOffset.UtcNow, 0, length, e.Message));
            throw;
        }
        finally
        {
            if (Volatile.Read(ref _gone) is null)
            {
                try
                {
                    await SetFillQueueDepthAsync(filling: false, stop).ConfigureAwait(false);
                }
                catch (Exception e) when (e is OperationCanceledException or ObjectDisposedException)
                {
                    // Closed meanwhile: nothing to restore.
                }
            }
        }
    }

    // A fill keeps PopulateDepth writes in flight; a queue depth chosen for the SLO's latency (often 1) would send them
    // one frame at a time over tcp (a fill at 1.6-2.0 GB/s against 2.1-2.5 GB/s with 8 here). The queue depth is the
    // client's own window, no server core is involved: it is raised for the fill and the manager's configuration comes
    // back when the fill ends (a change followed meanwhile applies the manager's configuration at once).
    private async Task SetFillQueueDepthAsync(bool filling, CancellationToken stop)
    {
        await _gate.WaitAsync(stop).ConfigureAwait(false);
        try
        {
            var config = Contract.FromProto(_state.Config);
            if (filling && config.QueueDepth < PopulateDepth)
                config = config with { QueueDepth = PopulateDepth };
            await _client.ReconfigureAsync(config, stop).ConfigureAwait(false);  // the one it runs changes nothing
        }
        finally
        {
            _gate.Release();
        }
    }

    private static void ReadExactly(Microsoft.Win32.SafeHandles.SafeFileHandle file, string path, Span<byte> buffer, long offset)
    {
        while (buffer.Length > 0)
        {
            int n = RandomAccess.Read(file, buffer, offset);
            if (n == 0)
                throw new IOException($"{path} ended at byte {offset} while filling the cache from it (was it truncated?)");
            buffer = buffer[n..];
            offset += n;
        }
    }

    // ---- lifetime ----------------------------------------------------------------------------------------------

    private void ThrowIfGone()
    {
        if (Volatile.Read(ref _gone) is { } why)
            throw new ObjectDisposedException(Name, $"{Name} cannot be used: {why}");
    }

    // The cache is no longer usable here: stop the loops, close the data client, end the event stream. Idempotent.
    private void Gone(string why)
    {
        if (Interlocked.CompareExchange(ref _gone, why, null) is not null)
            return;
        _stop.Cancel();
        _client.Dispose();
        _feed.Complete();
        _manager.Forget(this);
        Log.ManagedCacheClosed(_manager.Logger, Name, why);
    }

    private async Task StopLoopsAsync()
    {
        try
        {
            await Task.WhenAll(_renewing, _watching).ConfigureAwait(false);
        }
        catch (Exception)
        {
            // The loops end by cancellation here; what else stopped them was logged or ended the handle already.
        }
        try
        {
            await RentRetries().ConfigureAwait(false);  // they end at the stop
            await Populated.ConfigureAwait(false);
        }
        catch (Exception)
        {
            // A fill's failure was reported through Populated and the event stream; a replacement's was logged.
        }
    }

    /// <summary>
    /// Closes the cache here: the lease is no longer renewed (the manager frees the cache when it ends, unless another
    /// client renews it) and the data client is closed. Use <see cref="DeleteAsync"/> to free it now.
    /// </summary>
    public async ValueTask DisposeAsync()
    {
        Gone("this handle was disposed (the cache stays allocated until it is deleted or its lease ends)");
        await StopLoopsAsync().ConfigureAwait(false);
    }

    /// <inheritdoc cref="DisposeAsync"/>
    public void Dispose() => DisposeAsync().AsTask().GetAwaiter().GetResult();
}
