using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Placement;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Allocators;

/// <summary>
/// Servers an operator runs and registers (AddServer), each as a VM of a catalogue type: a cache rents free ones; the
/// manager never starts or stops them.
/// </summary>
public sealed class StaticPoolAllocator : IServerAllocator
{
    public const string AllocatorName = "static";

    private readonly VmCatalogue _catalogue;

    public StaticPoolAllocator(VmCatalogue catalogue) => _catalogue = catalogue;

    public string Name => AllocatorName;

    public IReadOnlyList<VmOffer> Offers(IReadOnlyCollection<ServerRecord> servers) =>
        Free(servers).GroupBy(s => (s.VmType, s.Spot))
            .Select(g => _catalogue.Find(g.Key.VmType) is { } type ? new VmOffer(type, g.Key.Spot, g.Count()) : null)
            .OfType<VmOffer>()
            .ToList();

    public Task<ServerRecord> AcquireAsync(VmType type, bool spot, IReadOnlyCollection<ServerRecord> servers, CancellationToken cancellationToken) =>
        Free(servers).FirstOrDefault(s => s.VmType == type.Name && s.Spot == spot) is { } server
            ? Task.FromResult(server)
            : throw new AllocatorException($"no free {(spot ? "spot" : "on-demand")} server of type {type.Name} in the pool");

    public Task<ServerRecord?> ReleaseAsync(ServerRecord server, IReadOnlyCollection<ServerRecord> servers, CancellationToken cancellationToken) =>
        Task.FromResult<ServerRecord?>(server with { CacheId = 0 });

    public Task RetireAsync(ServerRecord server, CancellationToken cancellationToken) => Task.CompletedTask;

    public Task<IReadOnlyList<ServerRecord>> RecoverAsync(IReadOnlyList<ServerRecord> stored, CancellationToken cancellationToken) =>
        Task.FromResult(stored);

    public Task ShutdownAsync(IReadOnlyCollection<ServerRecord> servers, CancellationToken cancellationToken) => Task.CompletedTask;

    private static IEnumerable<ServerRecord> Free(IEnumerable<ServerRecord> servers) =>
        servers.Where(s => s.Allocator == AllocatorName && s.CacheId == 0 && s.Status == ServerStatus.Ready).OrderBy(s => s.ServerId, System.StringComparer.Ordinal);
}
