using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Core;

/// <summary>
/// A unit of the manager's core: works on the shared <see cref="ManagerState"/>, under the names the state had when it
/// was one class (so that code moved out of it reads as it did): <c>_caches</c> and <c>_servers</c> are the working maps
/// (under the lock), <see cref="View"/> what readers see.
/// </summary>
public abstract class StateUnit
{
    private protected readonly ManagerState _state;
    private protected readonly SemaphoreSlim _lock;
    private protected readonly Dictionary<ulong, CacheRecord> _caches;
    private protected readonly Dictionary<string, ServerRecord> _servers;

    private protected StateUnit(ManagerState state)
    {
        _state = state;
        _lock = state.Lock;
        _caches = state.Caches;
        _servers = state.Servers;
    }

    /// <summary>What the store has committed, for readers.</summary>
    private protected StateView View => _state.View;

    private protected Task<IReadOnlyList<StoredEvent>> Stage(StoreChange change) => _state.Stage(change);

    private protected Task<IReadOnlyList<StoredEvent>> CommitAsync(StoreChange change, CancellationToken cancellationToken) => _state.CommitAsync(change, cancellationToken);

    private protected void AddEvent(StoreChange change, CacheRecord cache, Action<CacheEvent> fill) => _state.AddEvent(change, cache, fill);

    private protected void AddReclaimEvent(StoreChange change, CacheRecord cache, ServerRecord server) => _state.AddReclaimEvent(change, cache, server);

    private protected void AddFailureEvent(StoreChange change, CacheRecord cache, ServerRecord server, string reason) => _state.AddFailureEvent(change, cache, server, reason);

    private protected CacheRecord Owned(string tenant, ulong cacheId) => _state.Owned(tenant, cacheId);

    private protected static ManagerRefusal NotFound(ulong cacheId) => ManagerState.NotFound(cacheId);

    private protected ServerRecord Server(string serverId) => _state.Server(serverId);

    private protected MoverActivity Activity(ulong cacheId, string serverId) => _state.Activity(cacheId, serverId);

    private protected void ForgetMover(ulong cacheId, string serverId) => _state.ForgetMover(cacheId, serverId);
}
