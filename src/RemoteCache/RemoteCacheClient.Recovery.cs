using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Interop;

namespace RemoteCache;

// Recovery from a server that went away and came back (RemoteCacheOptions.Reconnect): the regions it held are placed
// on a new connection to the same endpoint, which lends them again, empty; ContentLost tells the users first.
public sealed partial class RemoteCacheClient
{
    // How often a client looks at its servers when nothing failed: an idle client notices a server that went away (and
    // recovers from it) without waiting for an operation to fail. One non-blocking probe per server.
    internal static readonly TimeSpan HolderProbeInterval = TimeSpan.FromSeconds(1);

    private readonly CancellationTokenSource? _recoveryStop;
    private readonly Task? _recovery;
    // Completed by an operation that found its server gone; replaced by the watcher each time it wakes (never throws,
    // however many operations fail at once).
    private TaskCompletionSource _recoveryKick = new(TaskCreationOptions.RunContinuationsAsynchronously);

    // The capability each holder was last given (null without capabilities), by holder number: what a recovery presents
    // to the server that comes back. Guarded by _resize.
    private readonly List<string?> _holderCapabilities = new();

    private long _recoveries;

    /// <summary>Whether the client reconnects by itself to a server that went away and came back (<see cref="RemoteCacheOptions.Reconnect"/>).</summary>
    public bool Reconnect => _recovery is not null;

    /// <summary>How many times a server that came back was given its regions again (<see cref="RemoteCacheOptions.Reconnect"/>).</summary>
    public long Recoveries => Interlocked.Read(ref _recoveries);

    /// <summary>
    /// The servers of the cache, and whether each is connected: one non-blocking probe of each, cheap enough for a health
    /// check. A server that went away reads <see cref="RemoteCacheStatus.Disconnected"/> (or the reason it gave) until the
    /// client reconnected to it (<see cref="RemoteCacheOptions.Reconnect"/>); one cut off without closing its connections (a
    /// partition) reads <see cref="RemoteCacheStatus.Ok"/>, and its operations time out.
    /// </summary>
    /// <exception cref="ObjectDisposedException">The client is disposed.</exception>
    public IReadOnlyList<RemoteCacheServerState> CheckServers()
    {
        ThrowIfDisposed();
        var states = new List<RemoteCacheServerState>();
        lock (_resize)
        {
            foreach (int holder in HoldersInUse())
                states.Add(new RemoteCacheServerState(HolderEndpoint(holder), NativeMethods.CacheHolderStatus(_cache, (uint)holder)));
        }
        return states;
    }

    // Data-path hook (a completion's thread): an operation found its server gone; look now rather than at the next probe.
    private void KickRecovery() => Volatile.Read(ref _recoveryKick).TrySetResult();

    private async Task WatchServersAsync(TimeSpan firstDelay, TimeSpan maxDelay, CancellationToken stop)
    {
        var backoff = new Backoff(firstDelay, maxDelay);
        bool failing = false;
        while (!stop.IsCancellationRequested)
        {
            try
            {
                if (failing)
                    await Task.Delay(backoff.Next(), stop).ConfigureAwait(false);  // a failed operation does not cut a wait short
                else
                    await Task.WhenAny(Volatile.Read(ref _recoveryKick).Task, Task.Delay(HolderProbeInterval, stop)).ConfigureAwait(false);
                stop.ThrowIfCancellationRequested();
                // Failures from here on wake the next wait.
                Volatile.Write(ref _recoveryKick, new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously));
                var gone = await BlockingCall.Start(GoneHolders).ConfigureAwait(false);
                failing = false;
                foreach (var (holder, state) in gone)
                {
                    try
                    {
                        await BlockingCall.Start(() => Recover(holder, state)).ConfigureAwait(false);
                    }
                    catch (Exception e) when (e is RemoteCacheException or ArgumentException)
                    {
                        // Down still, or refusing (a limit the native cache names): try again after a while, saying so
                        // once per outage.
                        if (_recoveryLogged.Add(state.Endpoint))
                            Log.ReconnectFailing(_logger, Name, state.Endpoint, (e as RemoteCacheException)?.Status ?? RemoteCacheStatus.InvalidArgument, e.Message);
                        failing = true;
                    }
                }
                if (!failing)
                    backoff.Reset();
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                return;
            }
            catch (ObjectDisposedException)
            {
                return;  // the client closed under a probe
            }
            catch (Exception e)
            {
                // Ending here would leave every later outage unrecovered and unsaid.
                Log.RecoveryFailed(_logger, Name, e);
                failing = true;
            }
        }
    }

    // Endpoints whose reconnect failure was logged in the current outage (the watcher's own).
    private readonly HashSet<string> _recoveryLogged = new();

    private List<(int Holder, RemoteCacheServerState State)> GoneHolders()
    {
        var gone = new List<(int, RemoteCacheServerState)>();
        lock (_resize)
        {
            ThrowIfDisposed();
            foreach (int holder in HoldersInUse())
            {
                // Only a server that went away comes back to be reconnected: one that dropped the cache on purpose (its
                // lease ended, its manager dropped it: Expired, said in a notice) is left so.
                var status = NativeMethods.CacheHolderStatus(_cache, (uint)holder);
                if (status == RemoteCacheStatus.Disconnected)
                    gone.Add((holder, new RemoteCacheServerState(HolderEndpoint(holder), status)));
            }
        }
        return gone;
    }

    // Connects the endpoint of `holder` again (a new holder: the server lends the regions anew, empty) and moves every
    // region `holder` held there, each reported lost before it is served again. Throws RemoteCacheException while the
    // server cannot be reached or refuses; nothing has changed then.
    private void Recover(int holder, RemoteCacheServerState was)
    {
        t_recovering = this;
        try
        {
            RecoverLocked(holder, was);
        }
        finally
        {
            t_recovering = null;
        }
    }

    // The client whose recovery the calling thread runs (its ContentLost handlers run there).
    [ThreadStatic] private static RemoteCacheClient? t_recovering;

    private void RecoverLocked(int holder, RemoteCacheServerState was)
    {
        lock (_resize)
        {
            ThrowIfDisposed();
            var regions = new List<(int Region, int HolderRegion, long Size)>();
            int count = (int)NativeMethods.CacheRegionCount(_cache);
            for (int r = 0; r < count; r++)
            {
                Errors.ThrowIfFailed(NativeMethods.CacheRegionInfo(_cache, (uint)r, out var info), Name);
                if (info.Holder == holder)
                    regions.Add((r, (int)info.HolderRegion, (long)info.Size));
            }
            if (regions.Count == 0)
                return;  // let go meanwhile
            int lend = 0;
            foreach (var region in regions)
                lend = Math.Max(lend, region.HolderRegion + 1);
            string? capability = holder < _holderCapabilities.Count ? _holderCapabilities[holder] : null;
            Errors.ThrowIfFailed(NativeMethods.CacheAddHolder(_cache, was.Endpoint, capability, (uint)lend, out uint fresh), Name);
            SetHolderCapability((int)fresh, capability);
            string reason = $"server {was.Endpoint} went away ({was.Status}) and came back without them";
            foreach (var (region, holderRegion, size) in regions)
            {
                // Writes to the region wait from here to the commit; the fence returns at once, its server being gone.
                var fenced = NativeMethods.CacheMigrationBegin(_cache, (uint)region, 1, 0, RemoteCacheOptions.Milliseconds(_operationTimeout));
                if (fenced != RemoteCacheStatus.Ok)
                {
                    Log.RecoveryStopped(_logger, Name, was.Endpoint, region, fenced);
                    break;  // what is not moved stays on the gone holder: the next round takes it
                }
                try
                {
                    RaiseContentLost(region * size, size, reason);
                }
                catch (Exception e)
                {
                    // Not in the way of the commit: the region's writes wait for it.
                    Log.ContentLostHandlerFailed(_logger, Name, was.Endpoint, e);
                }
                Errors.ThrowIfFailed(NativeMethods.CacheMigrationCommit(_cache, (uint)region, fresh, (uint)holderRegion), Name);
            }
            Interlocked.Increment(ref _recoveries);
            _recoveryLogged.Remove(was.Endpoint);
            Volatile.Write(ref _failuresLogged, 0);  // the next outage is logged again
            Log.ServerRecovered(_logger, Name, was.Endpoint, regions.Count, (int)fresh);
        }
    }

    private const int MaxEndpointBytes = 1024;  // a holder's endpoint text: a host name and port, or a socket path

    // The endpoint of a holder as it was given when it joined.
    internal unsafe string HolderEndpoint(int holder)
    {
        byte* text = stackalloc byte[MaxEndpointBytes];
        Errors.ThrowIfFailed(NativeMethods.CacheHolderEndpoint(_cache, (uint)holder, text, MaxEndpointBytes), Name);
        return new string((sbyte*)text);
    }

    // Holders that hold a region of the address space. Under _resize.
    private List<int> HoldersInUse()
    {
        var used = new List<int>();
        int count = (int)NativeMethods.CacheRegionCount(_cache);
        for (int r = 0; r < count; r++)
        {
            Errors.ThrowIfFailed(NativeMethods.CacheRegionInfo(_cache, (uint)r, out var info), Name);
            if (!used.Contains((int)info.Holder))
                used.Add((int)info.Holder);
        }
        return used;
    }

    // Stops the watcher and waits for a recovery under way (bounded by the connect timeout). Before the native cache closes.
    private void StopRecovery()
    {
        if (_recovery is null)
            return;
        _recoveryStop!.Cancel();
        try
        {
            _recovery.Wait();
        }
        catch (AggregateException)
        {
            // It ended with the client: nothing to report.
        }
        _recoveryStop.Dispose();
    }

    internal void SetHolderCapability(int holder, string? capability)
    {
        while (_holderCapabilities.Count <= holder)
            _holderCapabilities.Add(null);
        _holderCapabilities[holder] = capability;
    }
}
