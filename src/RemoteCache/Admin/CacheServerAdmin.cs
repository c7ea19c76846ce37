using System;
using System.Collections.Generic;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Interop;

namespace RemoteCache.Admin;

/// <summary>
/// An admin connection to one cache server (<c>remotecache_admin.h</c>): what a cache manager uses to see what a
/// server really holds, to keep the caches it renews, and to drop caches it deallocates. The server authenticates it with its admission key, which
/// never travels (a challenge and HMAC-SHA256 on every request and reply; docs/admin.md).
/// </summary>
/// <remarks>
/// <para>
/// Thread-safe: calls on one instance run one at a time, in the order they were made. The native calls block (each
/// bounded by <see cref="Timeout"/>), so they run on the thread pool, never on the caller's thread.
/// </para>
/// <para>
/// Cancelling a call returns at once with <see cref="OperationCanceledException"/>; a request already sent still
/// completes or times out in the background (within <see cref="Timeout"/>), and the next call waits for it. A
/// cancelled <see cref="DropCacheAsync"/> may therefore have dropped the caches.
/// </para>
/// <para>
/// A call that times out or gets a reply that does not verify breaks the connection: later calls fail with
/// <see cref="RemoteCacheStatus.Disconnected"/>. Dispose the instance and connect again.
/// </para>
/// </remarks>
public sealed class CacheServerAdmin : IAsyncDisposable, IDisposable
{
    /// <summary>Admin connections a server holds at once, apart from its data connections (RC_MAX_ADMIN_CONNECTIONS).</summary>
    public const int MaxConnectionsPerServer = NativeLimits.MaxAdminConnections;

    /// <summary>The timeout the native library uses when given none (RC_DEFAULT_ADMIN_TIMEOUT_MS).</summary>
    public static readonly TimeSpan DefaultTimeout = TimeSpan.FromMilliseconds(NativeLimits.DefaultAdminTimeoutMs);

    private readonly AdminHandle _handle;
    // Held from the start of a native call to its end, even when its caller stopped waiting: calls never overlap.
    // Never disposed: a call finishing in the background releases it after the instance was disposed.
    private readonly SemaphoreSlim _gate = new(1, 1);
    private int _disposed;

    private CacheServerAdmin(AdminHandle handle, string endpoint, TimeSpan timeout)
    {
        _handle = handle;
        Endpoint = endpoint;
        Timeout = timeout;
    }

    /// <summary>The server endpoint this instance is connected to.</summary>
    public string Endpoint { get; }

    /// <summary>The bound of every call (and of the connect).</summary>
    public TimeSpan Timeout { get; }

    /// <summary>
    /// Connects to a server's <c>tcp:</c> or <c>shm:</c> endpoint and authenticates with its admission key.
    /// </summary>
    /// <param name="endpoint">One of the server's endpoints: "tcp:HOST:PORT" or "shm:PATH" (verbs endpoints carry no admin connections).</param>
    /// <param name="admissionKey">The server's admission key (its <c>--admission-key</c> file's bytes), at least <see cref="RemoteCacheCapability.MinAdmissionKeyBytes"/> bytes.</param>
    /// <param name="timeout">Bounds the connect and every later call, 1 ms to <see cref="uint.MaxValue"/> ms.</param>
    /// <param name="cancellationToken">Cancels the wait; a connect under way then finishes in the background and is closed.</param>
    /// <returns>The connected, authenticated instance.</returns>
    /// <exception cref="ArgumentNullException"><paramref name="endpoint"/> is null.</exception>
    /// <exception cref="ArgumentException">The endpoint is malformed or the key too short (thrown before anything starts, or from the task).</exception>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="timeout"/> is out of range.</exception>
    /// <exception cref="RemoteCacheException">
    /// <see cref="RemoteCacheStatus.Auth"/>: the key is not the server's, or the server runs in open mode (no admission
    /// key: nobody can authenticate); <see cref="RemoteCacheStatus.Limit"/>: the server holds
    /// <see cref="MaxConnectionsPerServer"/> authenticated admin connections; <see cref="RemoteCacheStatus.Timeout"/> or
    /// <see cref="RemoteCacheStatus.Disconnected"/>: no server answered in time; <see cref="RemoteCacheStatus.Unsupported"/>:
    /// a verbs endpoint.
    /// </exception>
    /// <exception cref="OperationCanceledException"><paramref name="cancellationToken"/> was cancelled.</exception>
    /// <exception cref="InvalidOperationException">The native library is not the version this assembly needs.</exception>
    public static async Task<CacheServerAdmin> ConnectAsync(string endpoint, ReadOnlyMemory<byte> admissionKey, TimeSpan timeout,
                                                            CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(endpoint);
        if (endpoint.Length == 0)
            throw new ArgumentException("the endpoint is empty", nameof(endpoint));
        if (admissionKey.Length < RemoteCacheCapability.MinAdmissionKeyBytes)
            throw new ArgumentException(
                $"an admission key has at least {RemoteCacheCapability.MinAdmissionKeyBytes} bytes; this one has {admissionKey.Length}",
                nameof(admissionKey));
        if (timeout < TimeSpan.FromMilliseconds(1) || timeout.TotalMilliseconds > uint.MaxValue)
            throw new ArgumentOutOfRangeException(nameof(timeout), timeout, $"from 1 ms to {uint.MaxValue} ms");
        NativeMethods.EnsureCompatible();
        cancellationToken.ThrowIfCancellationRequested();
        var key = admissionKey.ToArray();  // the caller may reuse its memory once this returns
        var connecting = BlockingCall.Start(() => Connect(endpoint, key, timeout));
        try
        {
            return await connecting.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested && !connecting.IsCompleted)
        {
            _ = connecting.ContinueWith(static t =>
            {
                if (t.IsCompletedSuccessfully)
                    t.Result.Dispose();
                else
                    _ = t.Exception;  // observed: the caller has gone
            }, CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
            throw;
        }
    }

    private static unsafe CacheServerAdmin Connect(string endpoint, byte[] key, TimeSpan timeout)
    {
        RemoteCacheStatus status;
        AdminHandle handle;
        fixed (byte* k = key)
            status = NativeMethods.AdminConnect(endpoint, k, (nuint)key.Length, (uint)timeout.TotalMilliseconds, out handle);
        if (status != RemoteCacheStatus.Ok)
        {
            handle.Dispose();
            throw Errors.For(status, Describe(endpoint), -1, 0);
        }
        return new CacheServerAdmin(handle, endpoint, timeout);
    }

    /// <summary>What the server lends and holds now.</summary>
    /// <param name="cancellationToken">Cancels the wait (see the remarks of <see cref="CacheServerAdmin"/>).</param>
    /// <returns>The server's stats.</returns>
    /// <exception cref="RemoteCacheException">The server failed to answer in time, refused, or went away.</exception>
    /// <exception cref="ObjectDisposedException">This instance was disposed.</exception>
    /// <exception cref="OperationCanceledException"><paramref name="cancellationToken"/> was cancelled.</exception>
    public Task<CacheServerStats> GetStatsAsync(CancellationToken cancellationToken = default) =>
        CallAsync(GetStats, cancellationToken);

    private unsafe CacheServerStats GetStats()
    {
        var stats = new RcServerStats { Size = (uint)sizeof(RcServerStats) };
        ThrowIfFailed(NativeMethods.AdminStats(_handle, &stats));
        var id = new ReadOnlySpan<byte>(stats.ServerId, NativeLimits.MaxServerIdBytes + 1);
        int end = id.IndexOf((byte)0);
        return new CacheServerStats
        {
            ServerId = Encoding.UTF8.GetString(end < 0 ? id : id[..end]),
            MemoryLimit = (long)stats.MemoryLimit,
            MemoryLent = (long)stats.MemoryLent,
            RegionSize = (long)stats.RegionSize,
            Caches = (int)stats.Caches,
            RegionsLent = (int)stats.RegionsLent,
            DataConnections = (int)stats.DataConnections,
            AdminConnections = (int)stats.AdminConnections,
            ServerThreads = (int)stats.ServerThreads,
            Uptime = TimeSpan.FromMilliseconds(stats.UptimeMs),
        };
    }

    /// <summary>Every cache the server holds, oldest first.</summary>
    /// <param name="cancellationToken">Cancels the wait (see the remarks of <see cref="CacheServerAdmin"/>).</param>
    /// <returns>The caches; caches created or dropped while a long list is fetched may or may not appear.</returns>
    /// <exception cref="RemoteCacheException">The server failed to answer in time, refused, or went away.</exception>
    /// <exception cref="ObjectDisposedException">This instance was disposed.</exception>
    /// <exception cref="OperationCanceledException"><paramref name="cancellationToken"/> was cancelled.</exception>
    public Task<IReadOnlyList<ServerCacheInfo>> ListCachesAsync(CancellationToken cancellationToken = default) =>
        CallAsync(ListCaches, cancellationToken);

    private unsafe IReadOnlyList<ServerCacheInfo> ListCaches()
    {
        var buffer = new RcAdminCache[64];
        for (;;)
        {
            uint count;
            fixed (RcAdminCache* caches = buffer)
                ThrowIfFailed(NativeMethods.AdminListCaches(_handle, caches, (uint)buffer.Length, out count));
            if (count <= (uint)buffer.Length)
            {
                var list = new List<ServerCacheInfo>((int)count);
                for (int i = 0; i < (int)count; i++)
                    list.Add(ToInfo(buffer[i]));
                return list;
            }
            buffer = new RcAdminCache[count + count / 4];  // room for caches created before the next try
        }
    }

    private static ServerCacheInfo ToInfo(in RcAdminCache c) => new()
    {
        CacheId = c.CacheId,
        Regions = (int)c.Regions,
        Connections = (int)c.Connections,
        ServerThreads = (int)c.ServerThreads,
        Exclusive = c.Exclusive != 0,
        LeaseEnd = c.LeaseEndUnixMs == 0 ? null : DateTimeOffset.FromUnixTimeMilliseconds((long)c.LeaseEndUnixMs),
    };

    /// <summary>
    /// Drops every cache with this id (what a manager does when it deallocates one): their clients' operations fail
    /// with <see cref="RemoteCacheStatus.Expired"/>, and their memory is lent back once their connections have closed
    /// (at once for a cache nobody is connected to).
    /// </summary>
    /// <param name="cacheId">The id; every cache with it is dropped, whatever its token.</param>
    /// <param name="cancellationToken">Cancels the wait (see the remarks of <see cref="CacheServerAdmin"/>).</param>
    /// <returns>How many caches were dropped (0 when the server holds none with this id).</returns>
    /// <exception cref="RemoteCacheException">The server failed to answer in time, refused, or went away.</exception>
    /// <exception cref="ObjectDisposedException">This instance was disposed.</exception>
    /// <exception cref="OperationCanceledException"><paramref name="cancellationToken"/> was cancelled.</exception>
    public Task<int> DropCacheAsync(ulong cacheId, CancellationToken cancellationToken = default) =>
        CallAsync(() =>
        {
            ThrowIfFailed(NativeMethods.AdminDropCache(_handle, cacheId, out uint dropped));
            return (int)dropped;
        }, cancellationToken);

    /// <summary>How far past the server's clock <see cref="ExtendLeaseAsync"/> may set a lease end (RC_MAX_LEASE_AHEAD_MS: 30 days).</summary>
    public static readonly TimeSpan MaxLeaseAhead = TimeSpan.FromMilliseconds(NativeLimits.MaxLeaseAheadMs);

    /// <summary>
    /// Extends the lease of every cache with this id on the server to <paramref name="leaseEnd"/>, whether or not a
    /// client is connected (what a manager does when it renews a lease). With an admission key a server keeps a
    /// cache's memory until its lease ends or it is dropped, whoever is connected; a client's
    /// <see cref="RemoteCacheClient.Renew"/> reaches the server only while that client is connected, so a manager
    /// renewing the lease of a cache nobody has open tells the servers here. A lease is only ever extended: a cache
    /// whose lease already ends later keeps it (and is counted).
    /// </summary>
    /// <param name="cacheId">The id; every cache with it is extended, whatever its token.</param>
    /// <param name="leaseEnd">The new lease end: after the Unix epoch and at most <see cref="MaxLeaseAhead"/> past now.</param>
    /// <param name="cancellationToken">Cancels the wait (see the remarks of <see cref="CacheServerAdmin"/>).</param>
    /// <returns>How many caches the server holds with this id (0 when none: nothing is created).</returns>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="leaseEnd"/> is not after the Unix epoch, or more
    /// than <see cref="MaxLeaseAhead"/> past this machine's clock (checked before anything is sent).</exception>
    /// <exception cref="RemoteCacheException"><see cref="RemoteCacheStatus.InvalidArgument"/>: the server refused the
    /// lease end as more than <see cref="MaxLeaseAhead"/> past its own clock (the connection stays usable); otherwise the
    /// server failed to answer in time, refused, or went away (a server older than this operation refuses it as
    /// unknown, with <see cref="RemoteCacheStatus.Protocol"/>).</exception>
    /// <exception cref="ObjectDisposedException">This instance was disposed.</exception>
    /// <exception cref="OperationCanceledException"><paramref name="cancellationToken"/> was cancelled (the lease may
    /// have been extended).</exception>
    public Task<int> ExtendLeaseAsync(ulong cacheId, DateTimeOffset leaseEnd, CancellationToken cancellationToken = default)
    {
        long unixMs = leaseEnd.ToUnixTimeMilliseconds();
        if (unixMs <= 0)
            throw new ArgumentOutOfRangeException(nameof(leaseEnd), leaseEnd, "a lease end is after the Unix epoch");
        if (leaseEnd - DateTimeOffset.UtcNow > MaxLeaseAhead)
            throw new ArgumentOutOfRangeException(nameof(leaseEnd), leaseEnd, $"a lease end is at most {MaxLeaseAhead} past now");
        return CallAsync(() =>
        {
            ThrowIfFailed(NativeMethods.AdminExtendLease(_handle, cacheId, (ulong)unixMs, out uint caches));
            return (int)caches;
        }, cancellationToken);
    }

    /// <summary>
    /// Makes this (the target) server copy a region of a cache from another (the source) server, straight into its own
    /// region of the same cache: pipelined one-sided reads where the source's endpoint allows them, request messages
    /// otherwise. The source admits the target with <see cref="RegionPull.SourceCapability"/>, read-only. The call
    /// returns when the copy is done or has failed; it may take up to <see cref="RegionPull.Timeout"/> plus
    /// <see cref="Timeout"/>.
    /// </summary>
    /// <exception cref="ArgumentException">A field of <paramref name="pull"/> is out of range (checked before anything is sent).</exception>
    /// <exception cref="RemoteCacheException">The pull failed; its message names what failed, on which server. A failed pull
    /// may leave the target region partly overwritten.</exception>
    /// <exception cref="ObjectDisposedException">This instance was disposed.</exception>
    /// <exception cref="OperationCanceledException"><paramref name="cancellationToken"/> was cancelled (the pull goes on
    /// on the target until it ends).</exception>
    public Task<RegionPullResult> PullRegionAsync(RegionPull pull, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(pull);
        ArgumentOutOfRangeException.ThrowIfNegative(pull.SourceRegion);
        ArgumentOutOfRangeException.ThrowIfNegative(pull.TargetRegion);
        if (pull.Regions is < 1 or > RemoteCacheOptions.MaxRegionsPerServer)
            throw new ArgumentOutOfRangeException(nameof(pull), pull.Regions, $"Regions is 1..{RemoteCacheOptions.MaxRegionsPerServer}");
        ArgumentException.ThrowIfNullOrEmpty(pull.SourceEndpoint);
        ArgumentException.ThrowIfNullOrEmpty(pull.SourceCapability);
        if (Encoding.UTF8.GetByteCount(pull.SourceEndpoint) > NativeLimits.MaxPullEndpointBytes)
            throw new ArgumentException($"a source endpoint has at most {NativeLimits.MaxPullEndpointBytes} bytes", nameof(pull));
        if (pull.MaxMibPerSecond is < 1)
            throw new ArgumentOutOfRangeException(nameof(pull), pull.MaxMibPerSecond, "MaxMibPerSecond is at least 1 (null: unpaced)");
        uint timeoutMs = pull.Timeout is { } t
            ? (uint)Math.Clamp(t.TotalMilliseconds, 1, uint.MaxValue)
            : 0;
        return CallAsync(() =>
        {
            using var strings = new Utf8StringArray(new[] { pull.SourceEndpoint, pull.SourceCapability });
            RcPullResult result;
            unsafe
            {
                var request = new RcPullRequest
                {
                    CacheId = pull.CacheId,
                    SourceRegion = (uint)pull.SourceRegion,
                    TargetRegion = (uint)pull.TargetRegion,
                    SourceEndpoint = strings.Pointers[0],
                    SourceCapability = strings.Pointers[1],
                    TimeoutMs = timeoutMs,
                    MaxMibPerS = (uint)(pull.MaxMibPerSecond ?? 0),
                    Regions = (uint)pull.Regions,
                };
                ThrowIfFailed(NativeMethods.AdminPullRegion(_handle, in request, out result));
            }
            return new RegionPullResult((long)result.Bytes, TimeSpan.FromTicks((long)(result.ElapsedNs / 100)), result.OneSided != 0);
        }, cancellationToken);
    }

    private async Task<T> CallAsync<T>(Func<T> call, CancellationToken cancellationToken)
    {
        ObjectDisposedException.ThrowIf(Volatile.Read(ref _disposed) != 0, this);
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        Task<T> running;
        try
        {
            ObjectDisposedException.ThrowIf(Volatile.Read(ref _disposed) != 0, this);
            running = BlockingCall.Start(call);
        }
        catch
        {
            _gate.Release();
            throw;
        }
        _ = running.ContinueWith(static (t, gate) =>
        {
            _ = t.Exception;  // observed here too: a cancelled caller no longer waits for it
            ((SemaphoreSlim)gate!).Release();
        }, _gate, CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
        return await running.WaitAsync(cancellationToken).ConfigureAwait(false);
    }

    // On the thread of the native call: the native error text belongs to it.
    private void ThrowIfFailed(RemoteCacheStatus status)
    {
        if (status != RemoteCacheStatus.Ok)
            throw Errors.For(status, Describe(Endpoint), -1, 0);
    }

    private static string Describe(string endpoint) => $"admin connection to {endpoint}";

    /// <summary>Closes the connection; a call still running finishes first (within <see cref="Timeout"/>).</summary>
    public void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return;
        // The handle's reference count keeps it open until a native call in flight returns.
        _handle.Dispose();
    }

    /// <summary>Closes the connection, as <see cref="Dispose"/> does.</summary>
    /// <returns>A completed task.</returns>
    public ValueTask DisposeAsync()
    {
        Dispose();
        return default;
    }
}
