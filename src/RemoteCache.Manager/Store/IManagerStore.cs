using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache.Manager.Store;

/// <summary>
/// The manager's durable state: caches, servers and the event log. One implementation today (SQLite); a replicated
/// store is a later step, so nothing outside the store knows SQL.
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
