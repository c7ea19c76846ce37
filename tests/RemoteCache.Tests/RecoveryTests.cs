using System;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Xunit;
using Xunit.Sdk;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>
/// A server killed and started again at its endpoint (RemoteCacheOptions.Reconnect): the client fails fast meanwhile,
/// reports the lost content before serving it again, and serves again without being reopened.
/// </summary>
public sealed class RecoveryTests
{
    private static RemoteCacheOptions Reconnecting(string name)
    {
        var options = Options(2, name: name);
        options.OperationTimeout = TimeSpan.FromSeconds(20);  // far above "fast": a failure must not wait for it
        options.ReconnectDelay = TimeSpan.FromMilliseconds(50);
        options.ReconnectMaxDelay = TimeSpan.FromMilliseconds(400);
        return options;
    }

    private static async Task<RemoteCacheException> FailsFast(Func<ValueTask> operation, string what)
    {
        var clock = Stopwatch.StartNew();
        var e = await Assert.ThrowsAsync<RemoteCacheException>(async () => await operation());
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(2), $"{what} took {clock.Elapsed.TotalMilliseconds:F0} ms to fail; it must fail at once");
        Assert.Equal(RemoteCacheStatus.Disconnected, e.Status);
        return e;
    }

    private static async Task WaitUntil(Func<bool> condition, TimeSpan limit, Func<string> what)
    {
        var clock = Stopwatch.StartNew();
        while (!condition())
        {
            if (clock.Elapsed > limit)
                throw new XunitException($"not within {limit.TotalSeconds} s: {what()}");
            await Task.Delay(20);
        }
    }

    private static byte[] Pattern(int length, int seed)
    {
        var bytes = new byte[length];
        new Random(seed).NextBytes(bytes);
        return bytes;
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task ServerRestartedAtItsEndpointServesAgainEmpty(string transport)
    {
        var first = ServerProcess.Start(transport);
        ServerProcess? second = null;
        try
        {
            await WithTimeout(TimeSpan.FromSeconds(60), $"restart over {transport}", async () =>
            {
                await using var client = RemoteCacheClient.Open(new[] { first.Endpoint }, Reconnecting($"restart-{transport}"));
                var lost = new ConcurrentQueue<(long Address, long Length, long RecoveriesAtReport)>();
                client.ContentLost += (_, e) => lost.Enqueue((e.Address, e.Length, client.Recoveries));
                var pattern = Pattern(64 << 10, 1);
                await client.WriteAsync(4096, pattern);
                Assert.All(client.CheckServers(), s => Assert.True(s.IsConnected, s.ToString()));

                first.KillHard();
                await FailsFast(() => client.ReadAsync(4096, new byte[4096]), "a read after the kill");
                await FailsFast(() => client.WriteAsync(0, new byte[4096]), "a write after the kill");
                await WaitUntil(() => client.CheckServers().Any(s => !s.IsConnected), TimeSpan.FromSeconds(5),
                                () => $"CheckServers still says {string.Join(", ", client.CheckServers())}");
                Assert.Equal(0, client.Recoveries);
                Assert.Empty(lost);

                second = ServerProcess.Start(transport, listen: first.Endpoint);
                await WaitUntil(() => client.Recoveries == 1, TimeSpan.FromSeconds(10), () => $"no recovery; servers {string.Join(", ", client.CheckServers())}");
                Assert.All(client.CheckServers(), s => Assert.True(s.IsConnected, s.ToString()));
                // The whole space was on the server that went: reported lost, region by region, before it was served.
                Assert.Equal(client.Capacity, lost.Sum(l => l.Length));
                Assert.All(lost, l => Assert.Equal(0, l.RecoveriesAtReport));

                var read = new byte[pattern.Length];
                await client.ReadAsync(4096, read);
                Assert.True(read.All(b => b == 0), "the restarted server lent the regions anew: they read as zeros");
                await client.WriteAsync(4096, pattern);
                await client.ReadAsync(4096, read);
                AssertSameBytes(pattern, read, "written after the recovery");
            });
        }
        finally
        {
            second?.Dispose();
            first.Dispose();
        }
    }

    [Fact]
    public async Task AContentLostHandlerThatThrowsStrandsNoRegion()
    {
        var first = ServerProcess.Start("shm");
        ServerProcess? second = null;
        try
        {
            await WithTimeout(TimeSpan.FromSeconds(60), "a throwing handler", async () =>
            {
                await using var client = RemoteCacheClient.Open(new[] { first.Endpoint }, Reconnecting("throwing-handler"));
                int calls = 0;
                client.ContentLost += (_, _) =>
                {
                    Interlocked.Increment(ref calls);
                    throw new InvalidOperationException("the handler's own bug");
                };
                first.KillHard();
                second = ServerProcess.Start("shm", listen: first.Endpoint);
                await WaitUntil(() => client.Recoveries == 1, TimeSpan.FromSeconds(10), () => $"no recovery; servers {string.Join(", ", client.CheckServers())}");
                Assert.True(calls >= 1, "the handler was called");
                // Each region was committed to the new connection despite the handler: writes do not wait on a fence.
                var pattern = Pattern(4096, 3);
                var read = new byte[pattern.Length];
                for (long address = 0; address < client.Capacity; address += client.Capacity / 4)
                {
                    await client.WriteAsync(address, pattern);
                    await client.ReadAsync(address, read);
                    AssertSameBytes(pattern, read, $"written at {address} after the recovery");
                }

                // And the watcher lives on: a second outage is recovered too.
                second.KillHard();
                second.Dispose();
                second = ServerProcess.Start("shm", listen: first.Endpoint);
                await WaitUntil(() => client.Recoveries == 2, TimeSpan.FromSeconds(10), () => $"no second recovery; servers {string.Join(", ", client.CheckServers())}");
            });
        }
        finally
        {
            second?.Dispose();
            first.Dispose();
        }
    }

    [Fact]
    public async Task OnlyTheRestartedServersRegionsAreLostTheOthersServeThroughout()
    {
        using var steady = ServerProcess.Start("tcp");
        var flaky = ServerProcess.Start("tcp");
        ServerProcess? back = null;
        try
        {
            await WithTimeout(TimeSpan.FromSeconds(60), "one of two servers restarted", async () =>
            {
                await using var client = RemoteCacheClient.Open(new[] { steady.Endpoint, flaky.Endpoint }, Reconnecting("two-servers"));
                long half = client.Capacity / 2;
                var lost = new ConcurrentQueue<(long Address, long Length)>();
                client.ContentLost += (_, e) => lost.Enqueue((e.Address, e.Length));
                var kept = Pattern(8192, 2);
                await client.WriteAsync(100, kept);

                flaky.KillHard();
                await FailsFast(() => client.ReadAsync(half + 100, new byte[512]), "a read of the killed server's half");
                var read = new byte[kept.Length];
                await client.ReadAsync(100, read);  // the other server's half is not disturbed
                AssertSameBytes(kept, read, "the steady server's half during the outage");

                back = ServerProcess.Start("tcp", listen: flaky.Endpoint);
                await WaitUntil(() => client.Recoveries == 1, TimeSpan.FromSeconds(10), () => "no recovery");
                Assert.Equal(half, lost.Sum(l => l.Length));
                Assert.All(lost, l => Assert.True(l.Address >= half, $"reported lost at {l.Address}, in the steady server's half"));
                await client.ReadAsync(100, read);
                AssertSameBytes(kept, read, "the steady server's half after the recovery");
                await client.WriteAsync(half + 100, kept);
                await client.ReadAsync(half + 100, read);
                AssertSameBytes(kept, read, "the restarted server's half after the recovery");
                Assert.Equal(2, client.CheckServers().Count);
            });
        }
        finally
        {
            back?.Dispose();
            flaky.Dispose();
        }
    }

    [Fact]
    public async Task WithoutReconnectTheClientStaysDisconnected()
    {
        var first = ServerProcess.Start("tcp");
        ServerProcess? second = null;
        try
        {
            var options = Reconnecting("no-reconnect");
            options.Reconnect = false;
            await using var client = RemoteCacheClient.Open(new[] { first.Endpoint }, options);
            first.KillHard();
            second = ServerProcess.Start("tcp", listen: first.Endpoint);
            await FailsFast(() => client.ReadAsync(0, new byte[64]), "a read after the kill");
            await Task.Delay(RemoteCacheClient.HolderProbeInterval * 2);
            Assert.Equal(0, client.Recoveries);
            Assert.All(client.CheckServers(), s => Assert.Equal(RemoteCacheStatus.Disconnected, s.Status));
            await FailsFast(() => client.ReadAsync(0, new byte[64]), "a read after the restart");
        }
        finally
        {
            second?.Dispose();
            first.Dispose();
        }
    }

    [Fact]
    public async Task ServerThatStaysDownIsRetriedWithBackOffAndDisposeDoesNotWait()
    {
        var server = ServerProcess.Start("tcp");
        try
        {
            var client = RemoteCacheClient.Open(new[] { server.Endpoint }, Reconnecting("stays-down"));
            server.KillHard();
            await FailsFast(() => client.ReadAsync(0, new byte[64]), "a read after the kill");
            await Task.Delay(TimeSpan.FromSeconds(1.5));  // several attempts, each refused at once
            Assert.Equal(0, client.Recoveries);
            var clock = Stopwatch.StartNew();
            await DisposeWithTimeout(client);
            Assert.True(clock.Elapsed < TimeSpan.FromSeconds(5), $"dispose took {clock.Elapsed}");
            Assert.Throws<ObjectDisposedException>(() => client.CheckServers());
        }
        finally
        {
            server.Dispose();
        }
    }
}

/// <summary>A client in a hosted app (the generic host, as ASP.NET Core runs it) and its health check across a server restart.</summary>
public sealed class HostedRecoveryTests
{
    [Fact]
    public async Task HealthFollowsTheServerAndTheDiClientServesAgainAfterItsRestart()
    {
        var first = ServerProcess.Start("tcp");
        ServerProcess? second = null;
        try
        {
            var builder = Microsoft.Extensions.Hosting.Host.CreateApplicationBuilder();
            builder.Services.AddRemoteCache(o =>
            {
                o.Endpoints.Add(first.Endpoint);
                o.Cache.Name = "hosted";
                o.Cache.ReconnectDelay = TimeSpan.FromMilliseconds(50);
                o.Cache.ReconnectMaxDelay = TimeSpan.FromMilliseconds(400);
            });
            builder.Services.AddHealthChecks().AddRemoteCache();
            RemoteCacheClient client;
            using (var host = builder.Build())
            {
                await host.StartAsync();
                var health = host.Services.GetRequiredService<HealthCheckService>();
                var report = await health.CheckHealthAsync();
                Assert.True(report.Status == HealthStatus.Healthy, Describe(report));
                client = host.Services.GetRequiredService<RemoteCacheClient>();
                int lost = 0;
                client.ContentLost += (_, _) => Interlocked.Increment(ref lost);
                await client.WriteAsync(0, new byte[] { 1, 2, 3 });

                first.KillHard();
                report = await Eventually(health, HealthStatus.Unhealthy);
                var entry = report.Entries["remotecache"];
                Assert.Contains(first.Endpoint, entry.Description, StringComparison.Ordinal);
                Assert.Contains("reconnecting", entry.Description, StringComparison.Ordinal);

                second = ServerProcess.Start("tcp", listen: first.Endpoint);
                await Eventually(health, HealthStatus.Healthy);
                Assert.True(lost > 0, "the lost content was reported");
                var back = new byte[3];
                await client.WriteAsync(0, new byte[] { 4, 5, 6 });
                await client.ReadAsync(0, back);
                Assert.Equal(new byte[] { 4, 5, 6 }, back);
                await host.StopAsync();
            }
            // The container disposed the client: a check of it says so, and does not throw.
            var disposed = RemoteCacheHealthCheck.Check(client, HealthStatus.Unhealthy);
            Assert.Equal(HealthStatus.Unhealthy, disposed.Status);
            Assert.Contains("disposed", disposed.Description, StringComparison.Ordinal);
        }
        finally
        {
            second?.Dispose();
            first.Dispose();
        }
    }

    [Fact]
    public async Task ACacheThatCannotBeOpenedIsUnhealthyNotAnException()
    {
        var services = new ServiceCollection();
        services.AddLogging();
        services.AddRemoteCache(o =>
        {
            o.Endpoints.Add("tcp:127.0.0.1:9");  // discard port: nothing listens
            o.Cache.ConnectTimeout = TimeSpan.FromSeconds(2);
        });
        services.AddHealthChecks().AddRemoteCache(failureStatus: HealthStatus.Degraded);
        await using var provider = services.BuildServiceProvider();
        var report = await provider.GetRequiredService<HealthCheckService>().CheckHealthAsync();
        Assert.Equal(HealthStatus.Degraded, report.Status);
        Assert.Contains("could not be opened", report.Entries["remotecache"].Description, StringComparison.Ordinal);
    }

    private static string Describe(HealthReport report) =>
        string.Join("; ", report.Entries.Select(e => $"{e.Key}: {e.Value.Status} {e.Value.Description}"));

    private static async Task<HealthReport> Eventually(HealthCheckService health, HealthStatus wanted)
    {
        var clock = Stopwatch.StartNew();
        while (true)
        {
            var report = await health.CheckHealthAsync();
            if (report.Status == wanted)
                return report;
            if (clock.Elapsed > TimeSpan.FromSeconds(10))
                throw new XunitException($"health did not become {wanted} within 10 s: {Describe(report)}");
            await Task.Delay(50);
        }
    }
}
