using System;
using System.Linq;
using System.Threading.Tasks;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Xunit;
using Xunit.Sdk;
using static RemoteCache.Manager.Tests.ManagedClientKit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>services.AddHealthChecks().AddRemoteCacheManager(): the managers serve, and the caches opened have their servers.</summary>
public sealed class ManagerHealthCheckTests
{
    private static string Describe(HealthReport report) =>
        string.Join("; ", report.Entries.Select(e => $"{e.Key}: {e.Value.Status} {e.Value.Description}"));

    private static async Task<HealthReportEntry> EventuallyAsync(HealthCheckService health, HealthStatus wanted)
    {
        var clock = System.Diagnostics.Stopwatch.StartNew();
        while (true)
        {
            var report = await health.CheckHealthAsync();
            if (report.Status == wanted)
                return report.Entries["remotecache-manager"];
            if (clock.Elapsed > Patience)
                throw new XunitException($"health did not become {wanted}: {Describe(report)}");
            await Task.Delay(100);
        }
    }

    [Fact]
    public async Task ServingManagersCurrentLeasesAndEveryServerAreHealthyAndEachFailureIsNamed()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var services = new ServiceCollection();
        services.AddLogging();
        services.AddRemoteCacheManager(o =>
        {
            o.Address = manager.Address!;
            o.ApiKey = AliceKey;
            o.CallTimeout = TimeSpan.FromSeconds(2);
            o.ReplaceServers = false;  // a failed server stays failed: the check must say so
        });
        services.AddHealthChecks().AddRemoteCacheManager();
        await using var provider = services.BuildServiceProvider();
        var health = provider.GetRequiredService<HealthCheckService>();
        var client = provider.GetRequiredService<RemoteCacheManagerClient>();

        var entry = await EventuallyAsync(health, HealthStatus.Healthy);
        Assert.Contains("1 of 1 manager(s) serve", entry.Description, StringComparison.Ordinal);

        var cache = await client.CreateAsync(Request(2 * 64 * MiB));
        entry = await EventuallyAsync(health, HealthStatus.Healthy);
        Assert.Contains("1 cache(s) open", entry.Description, StringComparison.Ordinal);

        var failed = cache.Info.Servers[^1];
        Assert.True(StopServer(failed.ServerId));
        entry = await EventuallyAsync(health, HealthStatus.Degraded);
        Assert.Contains(failed.Endpoint, entry.Description, StringComparison.Ordinal);

        await manager.StopAsync();
        entry = await EventuallyAsync(health, HealthStatus.Unhealthy);
        Assert.Contains("no manager serves", entry.Description, StringComparison.Ordinal);

        await cache.DisposeAsync();
        await client.DisposeAsync();
        entry = await EventuallyAsync(health, HealthStatus.Unhealthy);
        Assert.Contains("disposed", entry.Description, StringComparison.Ordinal);
    }
}
