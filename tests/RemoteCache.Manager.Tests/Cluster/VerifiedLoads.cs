using System.Threading.Tasks;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Tests.Cluster;

public static class VerifiedLoads
{
    /// <summary>Opens the cache as the manager allocated it (<see cref="TestManager.OpenAsync"/>) and starts a verified load on it.</summary>
    public static async Task<VerifiedLoad> StartVerifiedLoadAsync(this Cache cache, int slots = 256) =>
        VerifiedLoad.Start(await TestManager.OpenAsync(cache).ConfigureAwait(false), cache.CacheId, (long)cache.Capacity, slots);
}
