namespace RemoteCache;

/// <summary>Where one region of a cache's address space lives now (<see cref="RemoteCacheMover.GetRegion"/>).</summary>
/// <param name="Index">The region: it holds [Index × Size, (Index + 1) × Size) when the cache's regions share a size.</param>
/// <param name="Holder">The server it lives on, numbered in the order the cache's servers joined (<see cref="RemoteCacheMover.GetHolderEndpoint"/>).</param>
/// <param name="HolderRegion">Its index among the regions that server lent the cache.</param>
/// <param name="Size">Bytes.</param>
/// <param name="Moving">Whether it is migrating: between <see cref="RemoteCacheMover.BeginMigrationAsync(int, System.TimeSpan, bool, System.Threading.CancellationToken)"/> and the commit or abort.</param>
public readonly record struct RemoteCacheRegion(int Index, int Holder, int HolderRegion, long Size, bool Moving);
