using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Security.Cryptography;
using System.Threading;
using System.Threading.Tasks;
using Grpc.Core;
using RemoteCache.Manager.V1;

namespace RemoteCache;

// The cache's dynamics (Redy §6.2): a server reclaimed or failed is replaced, its regions moved one by one.
public sealed partial class ManagedCache
{
    // Attempts at a region's fence before the move gives up (each bounded by FenceTimeout): a fence times out only when
    // a session keeps an operation in flight that long.
    private const int FenceAttempts = 3;

    // Attempts at a region's copy (a failed one is retried once: a connection lost in passing).
    private const int CopyAttempts = 2;

    // Names this handle to the manager as the client moving the cache (BeginReplacement's `mover`).
    private readonly string _mover = Convert.ToHexString(RandomNumberGenerator.GetBytes(12));

    // The file and length of populateFrom, to refill regions whose content was lost.
    private (string Path, long Length)? _populateSource;

    private enum ShareMove
    {
        // Copy each region before it switches (a reclaim notice).
        Copy,

        // Switch each region without its content (the server failed): it starts empty on the replacement.
        Empty,

        // Switch each region: another client of the cache moved it (ServerReplaced), and says which lost their content.
        Follow,
    }

    private TimeSpan FenceTimeout => _manager.Options.Cache.OperationTimeout * 2;

    // Waits before asking again for a replacement the manager could not rent: doubling up to this.
    private static readonly TimeSpan RentRetryLimit = TimeSpan.FromSeconds(30);

    // Replacements asked for again later (the manager had no server to rent), awaited when the handle closes.
    private readonly List<Task> _rentRetries = new();

    // Replaces server `serverId` (reclaimed at `deadline`, or failed for `failure`) and moves its regions there. When the
    // manager has no server to rent, it asks again later (in the background, so that events go on being handled) for as
    // long as the server is the cache's and, for a reclaim, its deadline has not passed (then a failure event follows).
    private async Task ReplaceAsync(string serverId, DateTimeOffset? deadline, string? failure, CancellationToken stop, Backoff? backoff = null)
    {
        try
        {
            await _gate.WaitAsync(stop).ConfigureAwait(false);
        }
        catch (OperationCanceledException)
        {
            return;
        }
        try
        {
            int index = _state.Servers.Select(s => s.ServerId).ToList().IndexOf(serverId);
            if (index < 0 || index >= _client.ServerCount)
                return;  // replaced already (a reclaim's deadline ends in a failure event), or not among the servers used here
            var request = new ReplacementRequest { CacheId = CacheId, ServerId = serverId, Mover = _mover };
            var mode = failure is null ? ShareMove.Copy : ShareMove.Empty;
            await ReplaceServerLockedAsync(index, request, mode, deadline, failure ?? $"server {serverId} was reclaimed before they could be copied", stop)
                .ConfigureAwait(false);
        }
        catch (RemoteCacheManagerException e) when (e.Status == StatusCode.ResourceExhausted && !stop.IsCancellationRequested &&
                                                     (deadline is null || deadline > DateTimeOffset.UtcNow))
        {
            var retry = backoff ?? new Backoff(RentRetryLimit);
            var wait = retry.Next();
            Log.RentRetry(_manager.Logger, Name, serverId, e.Message, wait.TotalMilliseconds);
            RetryLater(serverId, deadline, failure, wait, retry, stop);
        }
        catch (Exception e) when (e is RemoteCacheManagerException or RemoteCacheException or ArgumentException && !stop.IsCancellationRequested)
        {
            Log.ReplaceFailed(_manager.Logger, Name, serverId, e.Message);
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
        }
        finally
        {
            _gate.Release();
        }
    }

    private void RetryLater(string serverId, DateTimeOffset? deadline, string? failure, TimeSpan wait, Backoff backoff, CancellationToken stop)
    {
        var task = Task.Run(async () =>
        {
            try
            {
                await Task.Delay(wait, stop).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                return;
            }
            await ReplaceAsync(serverId, deadline, failure, stop, backoff).ConfigureAwait(false);
        });
        lock (_rentRetries)
        {
            _rentRetries.RemoveAll(t => t.IsCompleted);
            _rentRetries.Add(task);
        }
    }

    // The replacements still being asked for again (awaited at close).
    private Task RentRetries()
    {
        lock (_rentRetries)
            return Task.WhenAll(_rentRetries.ToList());
    }

    // Moves the cache onto servers with the cores `slo` needs, one server's regions at a time (Reshape).
    private async Task MoveToNewServersLockedAsync(Manager.V1.Slo slo, CancellationToken cancellationToken)
    {
        for (int i = 0; i < _client.ServerCount; i++)
        {
            string serverId = _state.Servers[i].ServerId;
            var request = new ReplacementRequest { CacheId = CacheId, ServerId = serverId, Mover = _mover, Slo = slo };
            if (!await ReplaceServerLockedAsync(i, request, ShareMove.Copy, null, $"copying them off server {serverId} failed", cancellationToken).ConfigureAwait(false))
                throw new RemoteCacheManagerException(StatusCode.FailedPrecondition, $"{Name}: another client of the cache is moving server {serverId}; reshape again once it is done");
        }
    }

    // Rents the replacement `request` names, moves share `index` onto it and puts it in place; false (nothing done)
    // when another client of the cache moves that server.
    private async Task<bool> ReplaceServerLockedAsync(int index, ReplacementRequest request, ShareMove mode, DateTimeOffset? deadline, string lostReason,
                                                      CancellationToken cancellationToken)
    {
        CacheServer replacement;
        try
        {
            replacement = await _manager.CallAsync("BeginReplacement", (m, o) => m.Grpc.BeginReplacementAsync(request, o), cancellationToken).ConfigureAwait(false);
        }
        catch (RemoteCacheManagerException e) when (e.Refusal == Refusals.MovedElsewhere)
        {
            Log.MovedElsewhere(_manager.Logger, Name, request.ServerId);
            return false;
        }
        var clock = Stopwatch.StartNew();
        var lost = await MoveShareLockedAsync(index, request.ServerId, replacement, mode, deadline, lostReason, cancellationToken).ConfigureAwait(false);
        int regions = (int)replacement.Regions;
        var complete = new ReplacementRequest { CacheId = CacheId, ServerId = request.ServerId, Mover = _mover };
        complete.LostRegions.AddRange(lost.Select(r => (uint)(r - index * regions)));
        var cache = await _manager.CallAsync("CompleteReplacement", (m, o) => m.Grpc.CompleteReplacementAsync(complete, o), cancellationToken).ConfigureAwait(false);
        AdoptState(cache);
        Log.ServerReplaced(_manager.Logger, Name, request.ServerId, replacement.ServerId, regions - lost.Count, regions, clock.Elapsed.TotalMilliseconds);
        ReportLost(lost, lostReason, refill: true);
        return true;
    }

    // Moves the regions of share `index` (those server `from` lent) to `to`, one at a time: from a region's fence to its
    // commit, writes to it wait in the client, reads go on to `from`, other regions are not touched. Returns the
    // regions whose content did not come along (Copy: the copy failed or `deadline` passed; Empty: all; Follow: those
    // the manager lists for `to`, or all when `to` did not replace `from` itself).
    private async Task<List<int>> MoveShareLockedAsync(int index, string from, CacheServer to, ShareMove mode, DateTimeOffset? deadline, string? lostReason,
                                                       CancellationToken stop)
    {
        var followLost = to.Replaced == from ? to.LostRegions.Select(r => (int)r).ToHashSet() : Enumerable.Range(0, (int)to.Regions).ToHashSet();
        int regions = (int)to.Regions;
        int holder;
        try
        {
            await _holders.WaitAsync(stop).ConfigureAwait(false);
            try
            {
                holder = await _regions.AddHolderAsync(to.Endpoint, to.Capability, regions, stop).ConfigureAwait(false);
                // A renewal since `to`'s capability was minted lists it among the replacements: present the renewed one.
                var state = Volatile.Read(ref _state);
                if (state.Replacements.Any(r => r.Server.ServerId == to.ServerId))
                    await RenewLockedAsync(AllServers(state.Servers, state.Replacements)).ConfigureAwait(false);
            }
            finally
            {
                _holders.Release();
            }
        }
        catch (Exception) when (mode != ShareMove.Follow)
        {
            // Nothing moved yet: the manager takes its server back and the cache is as before.
            var abandon = new ReplacementRequest { CacheId = CacheId, ServerId = from, Mover = _mover };
            await _manager.CallAsync("AbandonReplacement", (m, o) => m.Grpc.AbandonReplacementAsync(abandon, o), CancellationToken.None).ConfigureAwait(false);
            throw;
        }
        var lost = new List<int>();
        Task? mapping = null;
        for (int k = 0, count; k < regions; k += count)
        {
            count = BatchAt(index * regions + k, regions - k);
            int first = index * regions + k;
            var clock = Stopwatch.StartNew();
            int sourceRegion = _regions.GetRegion(first).HolderRegion;
            await FenceAsync(first, count, stop).ConfigureAwait(false);
            var fenced = clock.Elapsed;
            bool copied = false;
            if (mode == ShareMove.Copy)
            {
                // With MapMovedRegionsAhead the client maps the replacement's pages of the batch while they are copied. Never
                // waited for (over shm a GiB takes longer to map than to copy, and the batch's writes wait until its commit):
                // a batch whose predecessor's mapping still runs faults its pages in.
                if (_manager.Options.MapMovedRegionsAhead && (mapping is null || mapping.IsCompleted))
                {
                    if (mapping is not null)
                        await mapping.ConfigureAwait(false);
                    mapping = _regions.MapRegionsAheadAsync(holder, k, count, stop);
                }
                long size = _regions.GetRegion(first).Size;
                int pace = MovePaceMibPerSecond(_manager.Options.MoveMaxMibPerSecond, (regions - k) * size, deadline - DateTimeOffset.UtcNow);
                copied = await CopyRegionsAsync(from, sourceRegion, k, count, count * size, pace, deadline, stop).ConfigureAwait(false);
            }
            var copiedAt = clock.Elapsed;
            for (int i = 0; i < count; i++)
            {
                int region = first + i;
                bool kept = mode == ShareMove.Follow ? !followLost.Contains(k + i) : copied;
                if (!kept)
                {
                    // Before the region is served again: no reader may take the replacement's bytes for what it wrote.
                    var size = _regions.GetRegion(region).Size;
                    _regions.ReportContentLost(region * size, size, lostReason ?? "not copied");
                    lost.Add(region);
                }
                await WithHoldersAsync(() => _regions.CommitMigration(region, holder, k + i), stop).ConfigureAwait(false);  // may let a holder go
                if (mode != ShareMove.Follow)
                    _feed.Publish(new RegionMovedEvent(CacheId, DateTimeOffset.UtcNow, from, region, k + i + 1, regions, clock.Elapsed, !kept));
            }
            var elapsed = clock.Elapsed;
            Log.RegionsMoved(_manager.Logger, Name, first, count, from, elapsed.TotalMilliseconds, fenced.TotalMilliseconds,
                             (copiedAt - fenced).TotalMilliseconds, (elapsed - copiedAt).TotalMilliseconds);
        }
        if (mapping is not null)
            await mapping.ConfigureAwait(false);
        return lost;
    }

    // How many regions from `first` on (at most `left`) move together: consecutive on their holder too, adding up to at
    // most MoveBatchBytes (a region that size or larger moves alone).
    private int BatchAt(int first, int left)
    {
        var start = _regions.GetRegion(first);
        int count = 1;
        while (count < left && (count + 1) * start.Size <= _manager.Options.MoveBatchBytes)
        {
            var next = _regions.GetRegion(first + count);
            if (next.Holder != start.Holder || next.HolderRegion != start.HolderRegion + count || next.Size != start.Size)
                break;
            count++;
        }
        return count;
    }

    // Waits until no write sent before can still change regions [first, + count) where they are
    // (RemoteCacheMover.BeginMigrationAsync).
    private async Task FenceAsync(int first, int count, CancellationToken stop)
    {
        for (int attempt = 1; ; attempt++)
        {
            try
            {
                await _regions.BeginMigrationAsync(first, count, FenceTimeout, pauseReads: false, stop).ConfigureAwait(false);
                return;
            }
            catch (RemoteCacheException e) when (e.Status == RemoteCacheStatus.Timeout && attempt < FenceAttempts)
            {
                // A session kept an operation in flight past the fence's bound: its operation times out meanwhile.
            }
        }
    }

    /// <summary>
    /// The pace of the next copy, MiB/s (0: unpaced): <paramref name="configured"/> when set; else the rate that moves the
    /// <paramref name="bytesLeft"/> still to move by half <paramref name="timeLeft"/> (the deadline's), at least
    /// <see cref="RemoteCacheManagerOptions.AutomaticMovePaceMibPerSecond"/>; with no deadline, that least pace.
    /// </summary>
    internal static int MovePaceMibPerSecond(int? configured, long bytesLeft, TimeSpan? timeLeft)
    {
        if (configured is { } pace)
            return pace;
        if (timeLeft is not { } left)
            return RemoteCacheManagerOptions.AutomaticMovePaceMibPerSecond;
        if (left <= TimeSpan.Zero)
            return 0;  // no time to spare: as fast as the transport goes
        double needed = bytesLeft / (double)(1 << 20) / (left.TotalSeconds / 2);
        if (needed >= int.MaxValue)
            return 0;
        return Math.Max(RemoteCacheManagerOptions.AutomaticMovePaceMibPerSecond, (int)Math.Ceiling(needed));
    }

    // Has the replacement copy `count` regions (the manager drives its pull); false when they could not be copied before
    // the deadline, or failed twice (the source failed, or was reclaimed meanwhile). A manager that does not answer is
    // retried until the deadline.
    private async Task<bool> CopyRegionsAsync(string from, int sourceRegion, int targetRegion, int count, long bytes, int paceMibPerSecond,
                                              DateTimeOffset? deadline, CancellationToken stop)
    {
        // A paced copy takes bytes / pace at least: the call may take twice that, however short CallTimeout is.
        var callTimeout = _manager.Options.CallTimeout;
        if (paceMibPerSecond > 0 && TimeSpan.FromSeconds(2.0 * bytes / ((long)paceMibPerSecond << 20)) is var paced && paced > callTimeout)
            callTimeout = paced;
        var request = new MoveRegionRequest
        {
            CacheId = CacheId, ServerId = from, Mover = _mover, SourceRegion = (uint)sourceRegion, TargetRegion = (uint)targetRegion,
            MaxMibPerS = (uint)paceMibPerSecond, Regions = (uint)count,
        };
        int failures = 0;
        while (true)
        {
            var left = (deadline ?? DateTimeOffset.MaxValue) - DateTimeOffset.UtcNow;
            if (left <= TimeSpan.Zero)
                return false;
            try
            {
                var timeout = left < callTimeout ? left : callTimeout;
                await _manager.CallAsync("MoveRegion", (m, o) => m.Grpc.MoveRegionAsync(request, o), stop, timeout).ConfigureAwait(false);
                return true;
            }
            catch (RemoteCacheManagerException e) when (e.Status == StatusCode.Unavailable)
            {
                // CallAsync tried every replica, with its waits, for the whole timeout: try again while the deadline allows.
            }
            catch (RemoteCacheManagerException e)
            {
                Log.RegionNotCopied(_manager.Logger, Name, sourceRegion, count, from, e.Message);
                if (++failures == CopyAttempts)
                    return false;
            }
        }
    }

    // Tells the readers of Events which regions lost their content, and with `refill` (the client that moved them) refills
    // them from populateFrom.
    private void ReportLost(List<int> lost, string reason, bool refill)
    {
        if (lost.Count == 0)
            return;
        long regionSize = (long)_state.Servers[0].RegionSize;
        var refills = new List<(long Start, long End)>();
        for (int i = 0; i < lost.Count;)
        {
            int first = lost[i], count = 1;
            while (i + count < lost.Count && lost[i + count] == first + count)
                count++;
            i += count;
            _feed.Publish(new RegionsLostEvent(CacheId, DateTimeOffset.UtcNow, first, count, reason));
            Log.RegionsLost(_manager.Logger, Name, first, count, reason);
            // The file's bytes sit at the client's addresses: an encrypted cache's regions hold fewer of them, and others.
            var (start, length) = _regions.ClientRangeOf(first * regionSize, count * regionSize);
            if (_populateSource is { } source && length > 0 && start < source.Length)
                refills.Add((start, Math.Min(source.Length, start + length)));
        }
        if (!refill || refills.Count == 0 || _populateSource is not { } file)
            return;
        var previous = Populated;
        var task = Task.Run(async () =>
        {
            await previous.ContinueWith(_ => { }, TaskScheduler.Default).ConfigureAwait(false);  // one fill at a time
            foreach (var (start, end) in refills)
                await PopulateAsync(file.Path, start, end, _stop.Token).ConfigureAwait(false);
        });
        Volatile.Write(ref _populated, task);
    }
}
