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

    /// <summary>Whether the store answers (health check).</summary>
    Task<bool> PingAsync(CancellationToken cancellationToken);
}
