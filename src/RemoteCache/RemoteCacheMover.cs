using System;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>
/// The primitives that move a cache's regions between servers while it is in use (Redy §6.2, remotecache.h's migration
/// section): what a mover drives, such as the managed client (ManagedCache) when a server is reclaimed, fails or is
/// replaced for a new SLO. Applications reading and writing a cache need none of it; a cache moved by its manager is
/// moved by the managed client.
/// </summary>
public sealed class RemoteCacheMover
{
    private readonly RemoteCacheClient _client;

    /// <summary>Moves the regions of <paramref name="client"/>'s cache (for as long as the client is open).</summary>
    public RemoteCacheMover(RemoteCacheClient client)
    {
        ArgumentNullException.ThrowIfNull(client);
        _client = client;
    }

    /// <summary>The client whose cache this moves.</summary>
    public RemoteCacheClient Client => _client;

    /// <summary>Regions of the address space now.</summary>
    public int RegionCount
    {
        get
        {
            _client.ThrowIfDisposed();
            return (int)NativeMethods.CacheRegionCount(_client.Handle);
        }
    }

    /// <summary>
    /// Servers the cache has connected to, in the order they joined (its "holders"): the servers it opened on or grew
    /// onto and those added by <see cref="AddHolderAsync"/>. One left without a region is let go but keeps its number.
    /// </summary>
    public int HolderCount
    {
        get
        {
            _client.ThrowIfDisposed();
            return (int)NativeMethods.CacheHolderCount(_client.Handle);
        }
    }

    /// <summary>Where region <paramref name="region"/> lives now.</summary>
    /// <exception cref="ArgumentException">The cache has no such region.</exception>
    public RemoteCacheRegion GetRegion(int region)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(region);
        _client.ThrowIfDisposed();
        Errors.ThrowIfFailed(NativeMethods.CacheRegionInfo(_client.Handle, (uint)region, out var info), _client.Name);
        return new RemoteCacheRegion(region, (int)info.Holder, (int)info.HolderRegion, (long)info.Size, info.Moving != 0);
    }

    /// <summary>The endpoint of holder <paramref name="holder"/>, as given when it joined.</summary>
    /// <exception cref="ArgumentException">The cache has no such holder.</exception>
    public string GetHolderEndpoint(int holder)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(holder);
        _client.ThrowIfDisposed();
        return _client.HolderEndpoint(holder);
    }

    /// <summary>
    /// Connects a server that lends <paramref name="regions"/> regions to this cache (created empty there) but holds
    /// none of its address space until <see cref="CommitMigration"/> places a region on it: the target of a migration.
    /// Returns its holder number.
    /// </summary>
    /// <param name="endpoint">The server.</param>
    /// <param name="capability">Its capability for this cache when the cache was opened with capabilities; otherwise null.</param>
    /// <param name="regions">Regions it lends, 1..<see cref="RemoteCacheOptions.MaxRegionsPerServer"/>.</param>
    /// <param name="cancellationToken">Stops the wait before the connect starts; a connect under way finishes (it is
    /// bounded by <see cref="RemoteCacheOptions.ConnectTimeout"/>).</param>
    /// <exception cref="RemoteCacheException">The server refused or could not be reached; the cache is as it was.</exception>
    public Task<int> AddHolderAsync(string endpoint, string? capability, int regions, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrEmpty(endpoint);
        ArgumentOutOfRangeException.ThrowIfLessThan(regions, 1);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(regions, RemoteCacheOptions.MaxRegionsPerServer);
        _client.ThrowIfDisposed();
        if (cancellationToken.IsCancellationRequested)
            return Task.FromCanceled<int>(cancellationToken);
        return BlockingCall.Start(() =>
        {
            Errors.ThrowIfFailed(NativeMethods.CacheAddHolder(_client.Handle, endpoint, capability, (uint)regions, out uint holder), _client.Name);
            lock (_client.ResizeLock)
                _client.SetHolderCapability((int)holder, capability);
            Log.HolderAdded(_client.Logger, _client.Name, endpoint, (int)holder, regions);
            return (int)holder;
        });
    }

    /// <summary>
    /// Starts moving region <paramref name="region"/>: from now on writes to it wait in the client (as do operations
    /// that follow a waiting one and touch it), reads of it still go to its current server, other regions are not
    /// touched. Completes once no operation sent before can still change the region on its current server: then its
    /// content may be copied (the new server pulls it, driven by the manager), and <see cref="CommitMigration"/> or
    /// <see cref="AbortMigration"/> ends the move. An operation that waits longer than
    /// <see cref="RemoteCacheOptions.OperationTimeout"/> fails with <see cref="RemoteCacheStatus.Timeout"/>.
    /// </summary>
    /// <param name="region">The region (<see cref="RegionCount"/>).</param>
    /// <param name="timeout">How long to wait for operations already sent; the region is not moving if it runs out.</param>
    /// <param name="pauseReads">Reads of the region wait too, instead of going to its current server (Redy's move without
    /// "unpaused reads": for comparisons).</param>
    /// <param name="cancellationToken">Stops the wait before it starts.</param>
    /// <exception cref="RemoteCacheException">Operations sent before did not finish within <paramref name="timeout"/>
    /// (<see cref="RemoteCacheStatus.Timeout"/>), or the kernel lacks what the fence needs (<see cref="RemoteCacheStatus.Unsupported"/>).</exception>
    /// <exception cref="ArgumentException">No such region, or it is moving already.</exception>
    public Task BeginMigrationAsync(int region, TimeSpan timeout, bool pauseReads = false, CancellationToken cancellationToken = default) =>
        BeginMigrationAsync(region, 1, timeout, pauseReads, cancellationToken);

    /// <summary>
    /// Starts moving regions [<paramref name="firstRegion"/>, + <paramref name="count"/>) together, as
    /// <see cref="BeginMigrationAsync(int, TimeSpan, bool, CancellationToken)"/> does one: one wait for the operations
    /// already sent covers them all, so that a cache of many small regions moves them in batches. Each is then committed
    /// or aborted on its own; writes to one wait until it is.
    /// </summary>
    /// <exception cref="RemoteCacheException">Operations sent before did not finish within <paramref name="timeout"/>
    /// (<see cref="RemoteCacheStatus.Timeout"/>: none of the regions is moving then).</exception>
    /// <exception cref="ArgumentException">A region past the cache, or one already moving (none of them moves then).</exception>
    public Task BeginMigrationAsync(int firstRegion, int count, TimeSpan timeout, bool pauseReads = false, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(firstRegion);
        ArgumentOutOfRangeException.ThrowIfLessThan(count, 1);
        ArgumentOutOfRangeException.ThrowIfLessThan(timeout, TimeSpan.FromMilliseconds(1));
        ArgumentOutOfRangeException.ThrowIfGreaterThan(timeout, TimeSpan.FromMilliseconds(uint.MaxValue));
        _client.ThrowIfDisposed();
        if (cancellationToken.IsCancellationRequested)
            return Task.FromCanceled(cancellationToken);
        return BlockingCall.Start(() =>
        {
            uint flags = pauseReads ? NativeLimits.MigrationPauseReads : 0;
            Errors.ThrowIfFailed(NativeMethods.CacheMigrationBegin(_client.Handle, (uint)firstRegion, (uint)count, flags, (uint)timeout.TotalMilliseconds), _client.Name);
            for (int r = firstRegion; r < firstRegion + count; r++)
                Log.MigrationBegun(_client.Logger, _client.Name, r);
        });
    }

    /// <summary>
    /// Ends a migration with region <paramref name="region"/> on region <paramref name="holderRegion"/> of holder
    /// <paramref name="holder"/> (same size, holding no other region): the waiting operations go there, in order. A
    /// holder left without a region is let go (once the lanes have moved on its server frees the cache's share: at once
    /// without an admission key, else when its lease ends or the manager drops it).
    /// </summary>
    /// <exception cref="ArgumentException">The region is not moving, or the place does not fit.</exception>
    public void CommitMigration(int region, int holder, int holderRegion)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(region);
        ArgumentOutOfRangeException.ThrowIfNegative(holder);
        ArgumentOutOfRangeException.ThrowIfNegative(holderRegion);
        _client.ThrowIfDisposed();
        Errors.ThrowIfFailed(NativeMethods.CacheMigrationCommit(_client.Handle, (uint)region, (uint)holder, (uint)holderRegion), _client.Name);
        Log.MigrationCommitted(_client.Logger, _client.Name, region, holder, holderRegion);
    }

    /// <summary>
    /// Maps regions [<paramref name="firstHolderRegion"/>, + <paramref name="count"/>) of holder
    /// <paramref name="holder"/> into this process now, for all its sessions, so that the operations after
    /// <see cref="CommitMigration"/> places regions there do not map their pages one fault at a time on the data path
    /// (shm: one pass over the pages, ~0.1 s per GiB on a small VM; tcp and verbs map nothing and complete at once).
    /// A mover calls it while the target copies the regions. Pages the target does not have yet are allocated, as the
    /// first write would.
    /// </summary>
    /// <param name="holder">The target (<see cref="AddHolderAsync"/>).</param>
    /// <param name="firstHolderRegion">The first of its regions.</param>
    /// <param name="count">How many.</param>
    /// <param name="cancellationToken">Stops before the next region; a region under way is finished.</param>
    /// <exception cref="ArgumentException">No such holder, or it lends fewer regions.</exception>
    public Task MapRegionsAheadAsync(int holder, int firstHolderRegion, int count, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(holder);
        ArgumentOutOfRangeException.ThrowIfNegative(firstHolderRegion);
        ArgumentOutOfRangeException.ThrowIfLessThan(count, 1);
        _client.ThrowIfDisposed();
        if (cancellationToken.IsCancellationRequested)
            return Task.FromCanceled(cancellationToken);
        return BlockingCall.Start(() =>
        {
            for (int r = firstHolderRegion; r < firstHolderRegion + count; r++)
            {
                cancellationToken.ThrowIfCancellationRequested();
                Errors.ThrowIfFailed(NativeMethods.CacheMapRegionAhead(_client.Handle, (uint)holder, (uint)r), _client.Name);
            }
        });
    }

    /// <summary>Ends a migration with the region where it was; the waiting operations go there.</summary>
    /// <exception cref="ArgumentException">The region is not moving.</exception>
    public void AbortMigration(int region)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(region);
        _client.ThrowIfDisposed();
        Errors.ThrowIfFailed(NativeMethods.CacheMigrationAbort(_client.Handle, (uint)region), _client.Name);
        Log.MigrationAborted(_client.Logger, _client.Name, region);
    }

    /// <summary>Lets go of a holder that holds no region (the target of an aborted migration).</summary>
    /// <exception cref="ArgumentException">It holds a region, or there is no such holder.</exception>
    public void RemoveHolder(int holder)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(holder);
        _client.ThrowIfDisposed();
        Errors.ThrowIfFailed(NativeMethods.CacheRemoveHolder(_client.Handle, (uint)holder), _client.Name);
    }

    /// <summary>
    /// The client addresses whose content bytes [<paramref name="address"/>, +<paramref name="length"/>) of the regions hold:
    /// the same range for a plain cache; for an encrypted one the whole blocks stored there (none for the key check's
    /// block). Length 0: none.
    /// </summary>
    public (long Address, long Length) ClientRangeOf(long address, long length)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(address);
        ArgumentOutOfRangeException.ThrowIfNegative(length);
        return _client.ClientRange(address, length);
    }

    /// <summary>
    /// Tells this client's users (<see cref="RemoteCacheClient.ContentLost"/>) that bytes [<paramref name="address"/>, +
    /// <paramref name="length"/>) of the regions (region index × region size, as <see cref="GetRegion"/> counts them) lost
    /// their content; for an encrypted cache they hear of the whole blocks those bytes held. The managed client calls it for each region it moves to a
    /// replacement without its content (a failed server's, or one whose reclaim deadline came first), before the region
    /// is served again, so that no reader takes the replacement's bytes for what it wrote.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException">The range is not within the regions.</exception>
    public void ReportContentLost(long address, long length, string reason)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(address);
        ArgumentOutOfRangeException.ThrowIfLessThan(length, 1);
        long regions = _client.ServerBytes();
        ArgumentOutOfRangeException.ThrowIfGreaterThan(length, regions - Math.Min(address, regions), nameof(length));
        ArgumentException.ThrowIfNullOrEmpty(reason);
        _client.ThrowIfDisposed();
        _client.RaiseContentLost(address, length, reason);
    }
}
