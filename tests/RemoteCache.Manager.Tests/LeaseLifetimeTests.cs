using System;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using RemoteCache.Admin;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>A cache placed by the manager lives for its lease, whoever is connected (Redy's Create(capacity, SLO, duration, file)).</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class LeaseLifetimeTests
{
    private static AllocateRequest Request(string transport, TimeSpan lease) => new()
    {
        Capacity = (ulong)(64 * MiB), Transport = transport, RecordSize = 8, Name = "lease",
        Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
        Lease = Duration.FromTimeSpan(lease),
    };

    private static byte[] Pattern(int length, int seed)
    {
        var data = new byte[length];
        new Random(seed).NextBytes(data);
        return data;
    }

    private static async Task<CacheServerStats> StatsAsync(TestManager manager, Cache cache)
    {
        var server = (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers.Single(s => s.ServerId == cache.Servers[0].ServerId);
        await using var admin = await CacheServerAdmin.ConnectAsync(server.Endpoints["tcp"], manager.AdmissionKey, TimeSpan.FromSeconds(2), CancellationToken.None);
        return await admin.GetStatsAsync(CancellationToken.None);
    }

    [Theory]
    [InlineData("tcp")]
    [InlineData("shm")]
    public async Task WhatWasWrittenIsThereWhenTheCacheIsOpenedAgainAfterEveryClientLeft(string transport)
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var cache = (await manager.Tenant(AliceKey).AllocateAsync(Request(transport, TimeSpan.FromMinutes(1)))).Cache;
        var data = Pattern(1 << 16, 1);
        await using (var writer = await OpenAsync(cache))
            await writer.WriteAsync(40 * MiB, data);

        // Nobody is connected (the server notices the closes on its own threads: shortly after the client returns): the
        // server still lends the cache its memory.
        var idle = await StatsAsync(manager, cache);
        for (var waited = System.Diagnostics.Stopwatch.StartNew(); idle.DataConnections > 0 && waited.Elapsed < TimeSpan.FromSeconds(5);)
        {
            await Task.Delay(20);
            idle = await StatsAsync(manager, cache);
        }
        Assert.Equal(0, idle.DataConnections);
        Assert.Equal(64 * MiB, idle.MemoryLent);

        await using var reader = await OpenAsync(cache);
        var back = new byte[data.Length];
        await reader.ReadAsync(40 * MiB, back);
        Assert.Equal(data, back);
    }

    [Fact]
    public async Task ACreatePopulatedFromAFileKeepsItsContentAfterTheCommandExits()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        string file = Path.Combine(manager.StateDirectory, "populate.bin");
        var data = Pattern(3 << 20, 2);
        await File.WriteAllBytesAsync(file, data);
        var start = new ProcessStartInfo("dotnet") { RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (string a in new[] { "exec", Path.Combine(AppContext.BaseDirectory, "RemoteCache.Cli.dll"), "create", "--capacity", "64MiB",
                                     "--read-latency-us", "50", "--transport", "tcp", "--lease", "60s", "--populate-from", file, "--json" })
            start.ArgumentList.Add(a);
        start.Environment["REMOTECACHE_MANAGER"] = manager.Address!.ToString();
        start.Environment["REMOTECACHE_API_KEY"] = AliceKey;
        using (var process = Process.Start(start)!)
        {
            var output = process.StandardOutput.ReadToEndAsync();
            var error = process.StandardError.ReadToEndAsync();
            await process.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(60));
            Assert.True(process.ExitCode == 0, $"exit {process.ExitCode}: {await error} {await output}");
        }

        var cache = (await manager.Tenant(AliceKey).ListCachesAsync(new ListCachesRequest())).Caches.Single();
        await using var client = await OpenAsync(cache);
        var back = new byte[data.Length];
        await client.ReadAsync(0, back);
        Assert.Equal(data, back);
    }

    [Fact]
    public async Task ARenewalReachesTheServersOfACacheNobodyIsConnectedTo()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var cache = (await alice.AllocateAsync(Request("tcp", TimeSpan.FromSeconds(3)))).Cache;
        var data = Pattern(4096, 3);
        await using (var writer = await OpenAsync(cache))
            await writer.WriteAsync(0, data);
        var renewed = await alice.RenewLeaseAsync(new RenewLeaseRequest { CacheId = cache.CacheId, ExtendBy = Duration.FromTimeSpan(TimeSpan.FromSeconds(60)) });

        // Past the first lease's end: the servers were told of the renewal, though no client presented its capabilities.
        await Task.Delay(TimeSpan.FromSeconds(4.5));
        var opened = new Cache(cache);
        opened.Servers.Clear();
        opened.Servers.AddRange(renewed.Servers);
        await using var reader = await OpenAsync(opened);
        var back = new byte[data.Length];
        await reader.ReadAsync(0, back);
        Assert.Equal(data, back);
    }

    [Fact]
    public async Task ALeaseThatEndsFreesACacheNobodyIsConnectedTo()
    {
        await using var manager = new TestManager(warm: 1);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var cache = (await alice.AllocateAsync(Request("tcp", TimeSpan.FromSeconds(2)))).Cache;
        await using (var writer = await OpenAsync(cache))
            await writer.WriteAsync(0, new byte[] { 9 });
        var ends = cache.Lease.Expires.ToDateTimeOffset();

        // Freed within a second of the lease's end (the manager's tick and the server's own expiry both run well within it).
        while (DateTimeOffset.UtcNow < ends + TimeSpan.FromSeconds(1))
            await Task.Delay(100);
        Assert.Empty((await alice.ListCachesAsync(new ListCachesRequest())).Caches);
        var stats = await StatsAsync(manager, cache);
        Assert.Equal(0, stats.MemoryLent);
        Assert.Equal(0, stats.Caches);
    }
}
