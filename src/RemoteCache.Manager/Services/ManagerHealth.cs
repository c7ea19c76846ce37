using System.Linq;
using System.Threading.Tasks;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using RemoteCache.Manager.Cluster;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Services;

/// <summary>
/// The gRPC health service (grpc.health.v1): service <c>""</c> is SERVING while the store answers and a leader is known
/// (this manager or another: a follower serves reads and names the leader); <see cref="LeaderService"/> is SERVING only
/// on the leader, for load balancers that send writes there. Every check's description names the role.
/// </summary>
public static class ManagerHealth
{
    /// <summary>The health service name that is SERVING only on the leader.</summary>
    public const string LeaderService = "remotecache.manager.v1.Leader";

    private const string LeaderTag = "leader";

    internal static void Add(IServiceCollection services, IManagerStore store, string storeKind)
    {
        services.AddGrpcHealthChecks(o =>
        {
            o.Services.Clear();
            o.Services.Map("", c => !c.Tags.Contains(LeaderTag));
            o.Services.Map(LeaderService, _ => true);
        })
        .AddAsyncCheck("store", async ct =>
            await store.PingAsync(ct).ConfigureAwait(false) ? HealthCheckResult.Healthy() : HealthCheckResult.Unhealthy($"the {storeKind} store does not answer"))
        .Add(new HealthCheckRegistration("replica", sp => new RoleCheck(sp.GetRequiredService<ILeadership>(), leaderOnly: false), null, null))
        .Add(new HealthCheckRegistration("leader", sp => new RoleCheck(sp.GetRequiredService<ILeadership>(), leaderOnly: true), null, new[] { LeaderTag }));
    }

    private sealed class RoleCheck(ILeadership leadership, bool leaderOnly) : IHealthCheck
    {
        public Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, System.Threading.CancellationToken cancellationToken) =>
            Task.FromResult(leadership.Role switch
            {
                ManagerRole.Leader => HealthCheckResult.Healthy("leader"),
                ManagerRole.Follower when !leaderOnly => HealthCheckResult.Healthy($"follower of {leadership.LeaderAddress}"),
                ManagerRole.Follower => HealthCheckResult.Unhealthy($"follower of {leadership.LeaderAddress}"),
                _ => HealthCheckResult.Unhealthy("no leader is known"),
            });
    }
}
