using System;
using RemoteCache.Interop;

namespace RemoteCache.Admin;

/// <summary>
/// A region copy a target server makes from a source server (<see cref="CacheServerAdmin.PullRegionAsync"/>): the
/// middle step of moving a region (<see cref="RemoteCacheMover.BeginMigrationAsync(int, System.TimeSpan, bool, System.Threading.CancellationToken)"/>, then this on the target, then
/// <see cref="RemoteCacheMover.CommitMigration"/>).
/// </summary>
public sealed record RegionPull
{
    /// <summary>The cache: the one live cache with this id on each of the two servers.</summary>
    public required ulong CacheId { get; init; }

    /// <summary>The region to copy, among the regions the source lent the cache (<see cref="RemoteCacheRegion.HolderRegion"/>).</summary>
    public required int SourceRegion { get; init; }

    /// <summary>The source server as the target reaches it: its shm endpoint on one host, else tcp (or verbs).</summary>
    public required string SourceEndpoint { get; init; }

    /// <summary>A migration capability for the source (<see cref="RemoteCacheCapability.MintMigration"/>).</summary>
    public required string SourceCapability { get; init; }

    /// <summary>The region to overwrite, among the regions the target lent the cache.</summary>
    public required int TargetRegion { get; init; }

    /// <summary>
    /// Consecutive regions copied, from <see cref="SourceRegion"/> into <see cref="TargetRegion"/> on, one after another
    /// over one connection to the source (a cache of many small regions moves them in batches).
    /// </summary>
    public int Regions { get; init; } = 1;

    /// <summary>How long a pull may take when <see cref="Timeout"/> is null (RC_DEFAULT_PULL_TIMEOUT_MS).</summary>
    public static TimeSpan DefaultTimeout { get; } = TimeSpan.FromMilliseconds(NativeLimits.DefaultPullTimeoutMs);

    /// <summary>How long the target may take; null: <see cref="DefaultTimeout"/>.</summary>
    public TimeSpan? Timeout { get; init; }

    /// <summary>
    /// Paces the copy to at most this many MiB/s, leaving memory bandwidth and CPU to the data path (on a host where the
    /// copy and the cache's users share them); null: as fast as the transport goes. The move then takes longer: size
    /// the reclaim deadline for it.
    /// </summary>
    public int? MaxMibPerSecond { get; init; }
}

/// <summary>What a region pull did.</summary>
/// <param name="Bytes">Bytes copied: the regions' size.</param>
/// <param name="Elapsed">The copy's time on the target.</param>
/// <param name="OneSided">Whether it read with one-sided reads (shm, verbs) rather than request messages (tcp).</param>
public sealed record RegionPullResult(long Bytes, TimeSpan Elapsed, bool OneSided);
