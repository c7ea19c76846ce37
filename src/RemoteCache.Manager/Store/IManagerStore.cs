using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache.Manager.Store;

/// <summary>
/// The manager's durable state: caches, servers and the event log, in SQLite (<see cref="SqliteManagerStore"/>, one
/// manager) or etcd (<see cref="EtcdManagerStore"/>, shared); nothing outside a store knows its engine. A store that
/// cannot be reached throws <see cref="StoreUnavailableException"/>, one that another writer changed under a change
/// throws <see cref="StoreConflictException"/>; either way the change was not made (unless the message says its outcome
/// is unknown: the answer of a commit was lost and could not be learnt after).
/// </summary>
public interface IManagerStore : IAsyncDisposable
{
    /// <summary>Everything, as last committed.</summary>
    Task<StoreSnapshot> LoadAsync(CancellationToken cancellationToken);

    /// <summary>Commits <paramref name="change"/> atomically; returns the events appended, with their sequence numbers.</summary>
    Task<IReadOnlyList<StoredEvent>> ApplyAsync(StoreChange change, CancellationToken cancellationToken);

    /// <summary>The events of <paramref name="cacheId"/> with a sequence of at least <paramref name="fromSequence"/>, in order.</summary>
    Task<IReadOnlyList<StoredEvent>> EventsAsync(ulong cacheId, long fromSequence, CancellationToken cancellationToken);

    /// <summary>
    /// Bounds the event log. By age: every event appended before <paramref name="olderThan"/> goes, in sequence order
    /// up to the first that is younger (so a clock that stepped back between two managers keeps events longer, never
    /// shorter); a deleted cache's events, its CacheDeleted last, go this way. By count: of each live cache that holds
    /// more than <paramref name="perCacheCap"/> events, the oldest beyond that many go (the newest always stays). A cache's floor
    /// (<see cref="EventFloorAsync"/>) is raised in the same transaction as the deletions below it, so that a crash
    /// at any instant leaves no deleted event above a floor. Sequences are not given back: the next event continues
    /// after the last ever given. The sequence that changes are compared on (etcd's <c>meta/sequence</c>) is not
    /// written, so compaction never refuses a concurrent change nor is refused by one.
    /// </summary>
    Task<CompactionResult> CompactEventsAsync(DateTimeOffset olderThan, int perCacheCap, CancellationToken cancellationToken);

    /// <summary>
    /// The lowest sequence of <paramref name="cacheId"/>'s events that compaction has kept: every event of the cache
    /// below it was removed (1: none ever was). A reader that must not miss an event reads the events first and the
    /// floor after: a floor raised in between then refuses a read that was whole (safe), never passes one that was not.
    /// </summary>
    Task<long> EventFloorAsync(ulong cacheId, CancellationToken cancellationToken);

    /// <summary>Every join token as last committed (revoked and expired ones until they are deleted).</summary>
    Task<IReadOnlyList<JoinTokenRecord>> JoinTokensAsync(CancellationToken cancellationToken);

    /// <summary>Whether the store answers (health check).</summary>
    Task<bool> PingAsync(CancellationToken cancellationToken);
}
