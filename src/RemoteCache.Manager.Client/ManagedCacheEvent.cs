using System;
using System.Collections.Generic;
using System.Text;

namespace RemoteCache;

/// <summary>
/// Something that happened to a managed cache, as the manager recorded it (<see cref="Sequence"/> &gt; 0, increasing) or
/// as this client saw it (<see cref="PopulateProgressEvent"/>, sequence 0).
/// </summary>
public abstract record ManagedCacheEvent(ulong CacheId, long Sequence, DateTimeOffset Time)
{
    // ", Name = [a, b]" for an event's ToString.
    private protected static void AppendList<T>(StringBuilder builder, string name, IReadOnlyList<T> items) =>
        builder.Append(", ").Append(name).Append(" = [").AppendJoin(", ", items).Append(']');
}

/// <summary>The cache was allocated with <paramref name="Capacity"/> bytes.</summary>
public sealed record CacheAllocatedEvent(ulong CacheId, long Sequence, DateTimeOffset Time, long Capacity) : ManagedCacheEvent(CacheId, Sequence, Time);

/// <summary>The cache now spans <paramref name="ServerIds"/> (a reshape); its clients have followed, or are about to.</summary>
public sealed record CacheReshapedEvent(ulong CacheId, long Sequence, DateTimeOffset Time, long Capacity, IReadOnlyList<string> ServerIds)
    : ManagedCacheEvent(CacheId, Sequence, Time)
{
    /// <summary>Prints the members for ToString, the lists' items rather than their type's name.</summary>
    protected override bool PrintMembers(StringBuilder builder)
    {
        base.PrintMembers(builder);
        builder.Append(", Capacity = ").Append(Capacity);
        ManagedCacheEvent.AppendList(builder, nameof(ServerIds), ServerIds);
        return true;
    }
}

/// <summary>The cache runs a new data-path configuration (a reshape to a new SLO).</summary>
public sealed record ConfigChangedEvent(ulong CacheId, long Sequence, DateTimeOffset Time, CacheConfig Config) : ManagedCacheEvent(CacheId, Sequence, Time);

/// <summary>The lease was renewed until <paramref name="Expires"/>.</summary>
public sealed record LeaseRenewedEvent(ulong CacheId, long Sequence, DateTimeOffset Time, DateTimeOffset Expires) : ManagedCacheEvent(CacheId, Sequence, Time);

/// <summary>The lease ends at <paramref name="Expires"/> unless it is renewed (a client that renews it is late).</summary>
public sealed record LeaseExpiringEvent(ulong CacheId, long Sequence, DateTimeOffset Time, DateTimeOffset Expires) : ManagedCacheEvent(CacheId, Sequence, Time);

/// <summary>
/// The server holding regions [<paramref name="FirstRegion"/>, + <paramref name="Regions"/>) of the cache will be
/// reclaimed at <paramref name="Deadline"/>; its content is lost then unless moved.
/// </summary>
public sealed record ReclaimNoticeEvent(ulong CacheId, long Sequence, DateTimeOffset Time, string ServerId, int FirstRegion, int Regions, DateTimeOffset Deadline)
    : ManagedCacheEvent(CacheId, Sequence, Time);

/// <summary>The server holding regions [<paramref name="FirstRegion"/>, + <paramref name="Regions"/>) failed; their content is lost.</summary>
public sealed record ServerFailedEvent(ulong CacheId, long Sequence, DateTimeOffset Time, string ServerId, int FirstRegion, int Regions, string Reason)
    : ManagedCacheEvent(CacheId, Sequence, Time);

/// <summary>
/// Server <paramref name="ServerId"/> was replaced by <paramref name="Replacement"/>, which now holds regions
/// [<paramref name="FirstRegion"/>, + <paramref name="Regions"/>); <paramref name="RegionsMoved"/> of them were copied,
/// the cache's regions <paramref name="LostRegions"/> lost their content. The cache now spans <paramref name="ServerIds"/>.
/// Every client of the cache reports the lost ones (<see cref="RegionsLostEvent"/>, <see cref="RemoteCacheClient.ContentLost"/>)
/// before it serves them from the replacement.
/// </summary>
public sealed record ServerReplacedEvent(ulong CacheId, long Sequence, DateTimeOffset Time, string ServerId, string Replacement, int FirstRegion, int Regions,
                                         int RegionsMoved, IReadOnlyList<string> ServerIds, IReadOnlyList<int> LostRegions)
    : ManagedCacheEvent(CacheId, Sequence, Time)
{
    /// <summary>Prints the members for ToString, the lists' items rather than their type's name.</summary>
    protected override bool PrintMembers(StringBuilder builder)
    {
        base.PrintMembers(builder);
        builder.Append(", ServerId = ").Append(ServerId).Append(", Replacement = ").Append(Replacement)
               .Append(", FirstRegion = ").Append(FirstRegion).Append(", Regions = ").Append(Regions).Append(", RegionsMoved = ").Append(RegionsMoved);
        ManagedCacheEvent.AppendList(builder, nameof(ServerIds), ServerIds);
        ManagedCacheEvent.AppendList(builder, nameof(LostRegions), LostRegions);
        return true;
    }
}

/// <summary>
/// This client moved region <paramref name="Region"/> of the cache off server <paramref name="ServerId"/>
/// (<paramref name="Done"/> of <paramref name="Total"/> regions of that server): its content was copied in
/// <paramref name="Elapsed"/>, or, when <paramref name="Lost"/> (the server failed, or its deadline came first), the
/// replacement serves the region without it (empty, or holding the part of the copy that was done).
/// </summary>
public sealed record RegionMovedEvent(ulong CacheId, DateTimeOffset Time, string ServerId, int Region, int Done, int Total, TimeSpan Elapsed, bool Lost)
    : ManagedCacheEvent(CacheId, 0, Time);

/// <summary>
/// The content of regions [<paramref name="FirstRegion"/>, + <paramref name="Regions"/>) was lost (<paramref name="Reason"/>):
/// a replacement server serves them again, empty or with part of a copy cut short (treat their bytes as undefined
/// until rewritten); a cache created with populateFrom refills them from the file (<see cref="PopulateProgressEvent"/>).
/// </summary>
public sealed record RegionsLostEvent(ulong CacheId, DateTimeOffset Time, int FirstRegion, int Regions, string Reason) : ManagedCacheEvent(CacheId, 0, Time);

/// <summary>The cache was deleted (by a client, or because its lease ended); the stream ends with it.</summary>
public sealed record CacheDeletedEvent(ulong CacheId, long Sequence, DateTimeOffset Time, string Reason) : ManagedCacheEvent(CacheId, Sequence, Time);

/// <summary>
/// Filling the cache from a file (<see cref="ManagedCacheRequest.PopulateFrom"/>): <paramref name="Done"/> of
/// <paramref name="Total"/> bytes written; the last one has Done = Total, or the <paramref name="Error"/> that stopped it.
/// </summary>
public sealed record PopulateProgressEvent(ulong CacheId, DateTimeOffset Time, long Done, long Total, string? Error)
    : ManagedCacheEvent(CacheId, 0, Time);
