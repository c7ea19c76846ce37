using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Placement;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Allocators;

/// <summary>
/// Where VMs come from: local remotecache-server processes on this host (<see cref="LocalProcessAllocator"/>), or a
/// static pool an operator runs (<see cref="StaticPoolAllocator"/>). The manager calls it under its state lock, with the
/// servers it knows; an allocator keeps no state of its own that the store does not hold, beyond running processes.
/// </summary>
public interface IServerAllocator
{
    /// <summary>"local" or "static" (<see cref="ServerRecord.Allocator"/>).</summary>
    string Name { get; }

    /// <summary>What can be rented now, given the servers the manager knows.</summary>
    IReadOnlyList<VmOffer> Offers(IReadOnlyCollection<ServerRecord> servers);

    /// <summary>A server of <paramref name="type"/> in the market asked for, ready to take a cache (not yet assigned).</summary>
    /// <exception cref="AllocatorException">None could be had; the message says why.</exception>
    Task<ServerRecord> AcquireAsync(VmType type, bool spot, IReadOnlyCollection<ServerRecord> servers, CancellationToken cancellationToken);

    /// <summary>
    /// <paramref name="server"/> no longer holds a cache. Returns the record to keep (free), or null when the server is
    /// gone (a local process stopped because no warm one is wanted).
    /// </summary>
    Task<ServerRecord?> ReleaseAsync(ServerRecord server, IReadOnlyCollection<ServerRecord> servers, CancellationToken cancellationToken);

    /// <summary>The server's time is up (a reclaim's deadline, or it was declared failed): a local process is killed; a static one is the operator's.</summary>
    Task RetireAsync(ServerRecord server, CancellationToken cancellationToken);

    /// <summary>
    /// At start, before serving: the servers of the last run, as this allocator finds them now (local processes
    /// re-adopted, or marked failed); a local process that no record names (the last manager died before recording it)
    /// is stopped.
    /// </summary>
    Task<IReadOnlyList<ServerRecord>> RecoverAsync(IReadOnlyList<ServerRecord> stored, CancellationToken cancellationToken);

    /// <summary>At shutdown: free local servers are stopped; servers holding caches keep serving while the manager is away.</summary>
    Task ShutdownAsync(IReadOnlyCollection<ServerRecord> servers, CancellationToken cancellationToken);
}

/// <summary>An allocator could not provide a server; the message says why.</summary>
public sealed class AllocatorException : System.Exception
{
    public AllocatorException(string message) : base(message)
    {
    }

    public AllocatorException(string message, System.Exception inner) : base(message, inner)
    {
    }
}
