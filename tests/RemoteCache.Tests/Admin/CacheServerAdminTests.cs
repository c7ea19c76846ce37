using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Runtime.Versioning;
using System.Security.Cryptography;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Admin;
using Xunit;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests.Admin;

/// <summary>
/// <see cref="CacheServerAdmin"/> against remotecache-server processes started with an admission key: stats and the
/// cache list follow a client's cache, a drop fails the client with Expired and lends the memory back, wrong keys and
/// open-mode servers are refused, a silent server fails calls within the timeout, and calls on one instance are
/// serialized.
/// </summary>
[SupportedOSPlatform("linux")]
public sealed class CacheServerAdminTests
{
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(60);

    private static async Task<CacheServerStats> WaitForMemoryLent(CacheServerAdmin admin, long want)
    {
        var watch = Stopwatch.StartNew();
        for (;;)
        {
            var stats = await admin.GetStatsAsync();
            if (stats.MemoryLent == want || watch.Elapsed > TimeSpan.FromSeconds(10))
                return stats;
            await Task.Delay(20);
        }
    }

    [Theory]
    [InlineData("tcp")]
    [InlineData("shm")]
    public async Task StatsAndListFollowACacheAndADropFailsItsClient(string transport)
    {
        using var server = new KeyedServer(transport);
        await WithTimeout(Limit, $"admin over {transport}", async () =>
        {
            await using var admin = await CacheServerAdmin.ConnectAsync(server.Process.Endpoint, server.Key, TimeSpan.FromSeconds(5));
            Assert.Equal(server.Process.Endpoint, admin.Endpoint);
            var stats = await admin.GetStatsAsync();
            Assert.Equal($"admin-{transport}", stats.ServerId);
            Assert.Equal(256 * MiB, stats.MemoryLimit);
            Assert.Equal(MiB, stats.RegionSize);
            Assert.Equal(0, stats.MemoryLent);
            Assert.Equal(0, stats.Caches);
            Assert.Equal(1, stats.AdminConnections);
            Assert.Equal(2, stats.ServerThreads);
            Assert.True(stats.Uptime < TimeSpan.FromMinutes(2), $"uptime {stats.Uptime}");
            Assert.Empty(await admin.ListCachesAsync());

            var leaseEnd = DateTimeOffset.UtcNow.AddMinutes(10);
            var options = server.CacheOptions(2, $"managed-{transport}", leaseEnd);
            var client = await RemoteCacheClient.OpenAsync(new[] { server.Process.Endpoint }, options);
            try
            {
                await client.WriteAsync(0, new byte[] { 1, 2, 3 });
                stats = await admin.GetStatsAsync();
                Assert.Equal(2 * MiB, stats.MemoryLent);
                Assert.Equal(2, stats.RegionsLent);
                Assert.Equal(1, stats.Caches);
                Assert.True(stats.DataConnections >= 1, $"{stats.DataConnections} data connections");
                var cache = Assert.Single(await admin.ListCachesAsync());
                Assert.Equal(options.CacheId, cache.CacheId);
                Assert.Equal(2, cache.Regions);
                Assert.InRange(cache.Connections, 1, stats.DataConnections);
                Assert.False(cache.Exclusive);
                Assert.Equal(leaseEnd.ToUnixTimeMilliseconds(), cache.LeaseEnd?.ToUnixTimeMilliseconds());

                Assert.Equal(1, await admin.DropCacheAsync(options.CacheId));
                RemoteCacheException? failure = null;
                var watch = Stopwatch.StartNew();
                var data = new byte[64];
                while (failure is null && watch.Elapsed < TimeSpan.FromSeconds(10))
                {
                    try
                    {
                        await client.ReadAsync(0, data);
                        await Task.Delay(10);
                    }
                    catch (RemoteCacheException e)
                    {
                        failure = e;
                    }
                }
                Assert.True(failure is not null, "the client's operations still succeed after its cache was dropped");
                Assert.Equal(RemoteCacheStatus.Expired, failure.Status);
            }
            finally
            {
                await DisposeWithTimeout(client);
            }
            stats = await WaitForMemoryLent(admin, 0);
            Assert.Equal(0, stats.MemoryLent);
            Assert.Equal(0, stats.Caches);
            Assert.Empty(await admin.ListCachesAsync());
            Assert.Equal(0, await admin.DropCacheAsync(options.CacheId));
        });
        server.Process.AssertRunning();
    }

    [Fact]
    public async Task WrongKeyIsRefusedWithAuth()
    {
        using var server = new KeyedServer("tcp");
        await WithTimeout(Limit, "a wrong key", async () =>
        {
            var e = await Assert.ThrowsAsync<RemoteCacheException>(
                () => CacheServerAdmin.ConnectAsync(server.Process.Endpoint, RandomNumberGenerator.GetBytes(32), TimeSpan.FromSeconds(5)));
            Assert.Equal(RemoteCacheStatus.Auth, e.Status);
            Assert.Contains("admission key", e.Message, StringComparison.Ordinal);
            await using var admin = await CacheServerAdmin.ConnectAsync(server.Process.Endpoint, server.Key, TimeSpan.FromSeconds(5));
            Assert.Equal(1, (await admin.GetStatsAsync()).AdminConnections);
        });
        server.Process.AssertRunning();
    }

    [Fact]
    public async Task OpenModeServerRefusesAdmin()
    {
        using var server = StartTcpServer();  // embedded, no admission key
        var e = await Assert.ThrowsAsync<RemoteCacheException>(
            () => CacheServerAdmin.ConnectAsync(server.Endpoints[0], RandomNumberGenerator.GetBytes(32), TimeSpan.FromSeconds(5)));
        Assert.Equal(RemoteCacheStatus.Auth, e.Status);
        Assert.Contains("open mode", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task SilentServerFailsCallsWithinTheTimeout()
    {
        using var server = new KeyedServer("tcp");
        await WithTimeout(Limit, "a paused server", async () =>
        {
            var timeout = TimeSpan.FromMilliseconds(500);
            await using var admin = await CacheServerAdmin.ConnectAsync(server.Process.Endpoint, server.Key, timeout);
            server.Process.Pause();
            try
            {
                var watch = Stopwatch.StartNew();
                var e = await Assert.ThrowsAsync<RemoteCacheException>(() => admin.GetStatsAsync());
                Assert.Equal(RemoteCacheStatus.Timeout, e.Status);
                Assert.True(watch.Elapsed >= timeout - TimeSpan.FromMilliseconds(50), $"failed after {watch.Elapsed}");
                Assert.True(watch.Elapsed < timeout + TimeSpan.FromSeconds(3), $"failed only after {watch.Elapsed}");
                // The exchange is out of step now: the instance says so at once.
                e = await Assert.ThrowsAsync<RemoteCacheException>(() => admin.ListCachesAsync());
                Assert.Equal(RemoteCacheStatus.Disconnected, e.Status);
            }
            finally
            {
                server.Process.Resume();
            }
        });
    }

    [Fact]
    public async Task CallsOnOneInstanceAreSerialized()
    {
        using var server = new KeyedServer("tcp");
        await WithTimeout(Limit, "concurrent calls", async () =>
        {
            await using var admin = await CacheServerAdmin.ConnectAsync(server.Process.Endpoint, server.Key, TimeSpan.FromSeconds(5));
            var calls = new List<Task>();
            for (int i = 0; i < 32; i++)
            {
                Task call = (i % 3) switch
                {
                    0 => admin.ListCachesAsync(),
                    1 => admin.GetStatsAsync(),
                    _ => admin.DropCacheAsync((ulong)i),
                };
                calls.Add(call);
            }
            await Task.WhenAll(calls);
            Assert.Equal(1, (await admin.GetStatsAsync()).AdminConnections);
        });
    }

    [Fact]
    public async Task DisposalCancellationAndArguments()
    {
        using var server = new KeyedServer("shm");
        var endpoint = server.Process.Endpoint;
        await Assert.ThrowsAsync<ArgumentNullException>(() => CacheServerAdmin.ConnectAsync(null!, server.Key, TimeSpan.FromSeconds(1)));
        await Assert.ThrowsAsync<ArgumentException>(() => CacheServerAdmin.ConnectAsync(endpoint, server.Key.AsMemory(1), TimeSpan.FromSeconds(1)));
        await Assert.ThrowsAsync<ArgumentOutOfRangeException>(() => CacheServerAdmin.ConnectAsync(endpoint, server.Key, TimeSpan.Zero));
        await Assert.ThrowsAsync<ArgumentException>(() => CacheServerAdmin.ConnectAsync("nonsense", server.Key, TimeSpan.FromSeconds(1)));
        var unsupported = await Assert.ThrowsAsync<RemoteCacheException>(
            () => CacheServerAdmin.ConnectAsync("verbs:127.0.0.1:1", server.Key, TimeSpan.FromSeconds(1)));
        Assert.Equal(RemoteCacheStatus.Unsupported, unsupported.Status);
        using (var cancelled = new CancellationTokenSource())
        {
            cancelled.Cancel();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(
                () => CacheServerAdmin.ConnectAsync(endpoint, server.Key, TimeSpan.FromSeconds(1), cancelled.Token));
        }

        var admin = await CacheServerAdmin.ConnectAsync(endpoint, server.Key, TimeSpan.FromSeconds(5));
        using (var cancelled = new CancellationTokenSource())
        {
            cancelled.Cancel();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => admin.GetStatsAsync(cancelled.Token));
        }
        Assert.Equal(0, (await admin.GetStatsAsync()).Caches);  // a cancelled call leaves the instance usable
        await admin.DisposeAsync();
        await Assert.ThrowsAsync<ObjectDisposedException>(() => admin.GetStatsAsync());
        admin.Dispose();  // twice is fine
    }

    // The listing of the one cache with this id once nobody is connected to it (a closed client's connections may
    // still be closing on the server).
    private static async Task<ServerCacheInfo?> WaitForIdle(CacheServerAdmin admin, ulong cacheId)
    {
        var watch = Stopwatch.StartNew();
        for (;;)
        {
            var cache = (await admin.ListCachesAsync()).SingleOrDefault(c => c.CacheId == cacheId);
            if (cache is null || cache.Connections == 0 || watch.Elapsed > TimeSpan.FromSeconds(10))
                return cache;
            await Task.Delay(20);
        }
    }

    // Issue 37: a cache admitted by a capability lives for its lease, whoever is connected. A client fills it and
    // closes (as `remotecache create --populate-from` does), another opens it with the same id, token and capability
    // and reads the bytes back; it is listed with 0 connections meanwhile, and a drop frees it at once.
    [Theory]
    [InlineData("tcp")]
    [InlineData("shm")]
    public async Task APopulatedCacheOutlivesItsClientUntilItIsDropped(string transport)
    {
        using var server = new KeyedServer(transport);
        await WithTimeout(Limit, $"populate and reopen over {transport}", async () =>
        {
            var options = server.CacheOptions(2, $"populated-{transport}", DateTimeOffset.UtcNow.AddMinutes(10));
            options.Token = $"populated-{transport}";  // without one the library picks a random token: another cache
            var data = RandomNumberGenerator.GetBytes(9000);
            long at = MiB - 4000;  // across the two regions
            var writer = await RemoteCacheClient.OpenAsync(new[] { server.Process.Endpoint }, options);
            try
            {
                await writer.WriteAsync(at, data);
            }
            finally
            {
                await DisposeWithTimeout(writer);
            }
            await using var admin = await CacheServerAdmin.ConnectAsync(server.Process.Endpoint, server.Key, TimeSpan.FromSeconds(5));
            var idle = await WaitForIdle(admin, options.CacheId);
            Assert.True(idle is not null, "the cache was freed when its client closed, before its lease ended");
            Assert.Equal(0, idle.Connections);
            Assert.Equal(2 * MiB, (await admin.GetStatsAsync()).MemoryLent);

            var reader = await RemoteCacheClient.OpenAsync(new[] { server.Process.Endpoint }, options);
            try
            {
                var back = new byte[data.Length];
                await reader.ReadAsync(at, back);
                Assert.Equal(data, back);
            }
            finally
            {
                await DisposeWithTimeout(reader);
            }
            Assert.Equal(0, (await WaitForIdle(admin, options.CacheId))?.Connections);
            Assert.Equal(1, await admin.DropCacheAsync(options.CacheId));
            var stats = await admin.GetStatsAsync();
            Assert.Equal(0, stats.MemoryLent);  // nobody was connected: the drop freed it at once
            Assert.Equal(0, stats.Caches);
        });
        server.Process.AssertRunning();
    }

    // ExtendLeaseAsync keeps an idle cache past its first lease end with its bytes; a shorter lease end keeps the
    // later one (and counts the cache); an id the server does not hold counts 0; bad lease ends are refused first.
    [Fact]
    public async Task ExtendLeaseKeepsAnIdleCachePastItsFirstLease()
    {
        using var server = new KeyedServer("shm");
        await WithTimeout(Limit, "extend lease", async () =>
        {
            var firstEnd = DateTimeOffset.UtcNow.AddSeconds(2);
            var options = server.CacheOptions(1, "extended", firstEnd);
            options.Token = "extended";  // without one the library picks a random token: another cache
            var data = RandomNumberGenerator.GetBytes(3000);
            var writer = await RemoteCacheClient.OpenAsync(new[] { server.Process.Endpoint }, options);
            try
            {
                await writer.WriteAsync(100, data);
            }
            finally
            {
                await DisposeWithTimeout(writer);
            }
            await using var admin = await CacheServerAdmin.ConnectAsync(server.Process.Endpoint, server.Key, TimeSpan.FromSeconds(5));
            var later = DateTimeOffset.UtcNow.AddMinutes(30);
            Assert.Equal(1, await admin.ExtendLeaseAsync(options.CacheId, later));
            Assert.Equal(1, await admin.ExtendLeaseAsync(options.CacheId, DateTimeOffset.UtcNow.AddSeconds(1)));
            var listed = Assert.Single(await admin.ListCachesAsync());
            Assert.Equal(later.ToUnixTimeMilliseconds(), listed.LeaseEnd?.ToUnixTimeMilliseconds());
            Assert.Equal(0, await admin.ExtendLeaseAsync(options.CacheId + 1, later));

            await Assert.ThrowsAsync<ArgumentOutOfRangeException>(
                () => admin.ExtendLeaseAsync(options.CacheId, DateTimeOffset.UtcNow + CacheServerAdmin.MaxLeaseAhead + TimeSpan.FromMinutes(1)));
            await Assert.ThrowsAsync<ArgumentOutOfRangeException>(() => admin.ExtendLeaseAsync(options.CacheId, DateTimeOffset.UnixEpoch));

            // The server checks leases every 250 ms: 1.5 s past the first end it would have freed the cache.
            var pastFirst = firstEnd + TimeSpan.FromSeconds(1.5) - DateTimeOffset.UtcNow;
            if (pastFirst > TimeSpan.Zero)
                await Task.Delay(pastFirst);
            Assert.Equal(MiB, (await admin.GetStatsAsync()).MemoryLent);
            options.Capabilities = new[] { server.Capability(options.CacheId, 1, later) };  // the first one has expired
            var reader = await RemoteCacheClient.OpenAsync(new[] { server.Process.Endpoint }, options);
            try
            {
                var back = new byte[data.Length];
                await reader.ReadAsync(100, back);
                Assert.Equal(data, back);
            }
            finally
            {
                await DisposeWithTimeout(reader);
            }
        });
        server.Process.AssertRunning();
    }

    [Fact]
    public void LimitsAreTheHeaders()
    {
        Assert.Equal(NativeAbi.Define("RC_MAX_LEASE_AHEAD_MS"), (long)CacheServerAdmin.MaxLeaseAhead.TotalMilliseconds);
        Assert.Equal<long>(CacheServerAdmin.MaxConnectionsPerServer, NativeAbi.Define("RC_MAX_ADMIN_CONNECTIONS"));
        Assert.Equal(NativeAbi.Define("RC_DEFAULT_ADMIN_TIMEOUT_MS"), (long)CacheServerAdmin.DefaultTimeout.TotalMilliseconds);
    }
}
