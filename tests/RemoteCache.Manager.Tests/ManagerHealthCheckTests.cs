using System;
using System.Linq;
using System.Threading.Tasks;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Microsoft.Extensions.Logging;
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

/// <summary>What a managed client logs when nothing goes wrong.</summary>
public sealed class ManagedClientLogTests
{
    [Fact]
    public async Task OpeningAndClosingACacheLogsNothingOfGrpcAndNothingAboveInformation()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var sink = new Microsoft.Extensions.Logging.Testing.FakeLogCollector();
        using var loggers = Microsoft.Extensions.Logging.LoggerFactory.Create(b => b
            .SetMinimumLevel(Microsoft.Extensions.Logging.LogLevel.Trace)
            .AddProvider(new Microsoft.Extensions.Logging.Testing.FakeLoggerProvider(sink)));
        await using (var client = manager.ManagedClient(configure: o => o.Cache.LoggerFactory = loggers))
        {
            var cache = await client.CreateAsync(Request(64 * MiB));
            await using (var events = cache.Events.GetAsyncEnumerator())
                Assert.True(await events.MoveNextAsync());  // the event stream is open when the cache closes
            await cache.DeleteAsync();
            await cache.DisposeAsync();
        }
        var records = sink.GetSnapshot();
        Assert.DoesNotContain(records, r => r.Category?.StartsWith("Grpc", StringComparison.Ordinal) == true);
        Assert.DoesNotContain(records, r => r.Level > Microsoft.Extensions.Logging.LogLevel.Information);
        Assert.Contains(records, r => r.Category == typeof(RemoteCacheManagerClient).FullName);  // it does log, itself
    }
}

/// <summary>What a managed cache's events print: their fields, lists item by item.</summary>
public sealed class ManagedCacheEventTextTests
{
    [Fact]
    public void EventsWithListsPrintTheirItems()
    {
        var time = DateTimeOffset.UnixEpoch;
        string replaced = new ServerReplacedEvent(7, 3, time, "s1", "s9", 4, 2, 1, new[] { "s0", "s9" }, new[] { 5 }).ToString();
        Assert.Contains("ServerIds = [s0, s9]", replaced, StringComparison.Ordinal);
        Assert.Contains("LostRegions = [5]", replaced, StringComparison.Ordinal);
        Assert.Contains("Replacement = s9", replaced, StringComparison.Ordinal);
        Assert.Contains("CacheId = 7", replaced, StringComparison.Ordinal);
        string reshaped = new CacheReshapedEvent(7, 4, time, 1 << 20, new[] { "s0" }).ToString();
        Assert.Contains("ServerIds = [s0]", reshaped, StringComparison.Ordinal);
        Assert.Contains("Capacity = 1048576", reshaped, StringComparison.Ordinal);
        Assert.DoesNotContain("System.", replaced + reshaped, StringComparison.Ordinal);
    }
}
