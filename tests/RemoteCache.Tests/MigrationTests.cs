using System;
using System.Linq;
using System.Runtime.Versioning;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Admin;
using Xunit;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>
/// Moving a cache region by region to another server while verified I/O runs (Redy §6.2): the client's migration
/// members hold the region's writes, the target server pulls it from the source through the admin interface
/// (<see cref="CacheServerAdmin.PullRegionAsync"/>, authorized by a migration capability), and the commit places it on
/// the target. Every read is checked against what was written; the emptied source frees the cache's memory.
/// </summary>
[SupportedOSPlatform("linux")]
public sealed class MigrationTests
{
    private const int Regions = 3;

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task EveryRegionMovesToANewServerUnderVerifiedIo(string transport)
    {
        using var source = new KeyedServer(transport, $"source-{transport}");
        using var target = new KeyedServer(transport, $"target-{transport}");
        var leaseEnd = DateTimeOffset.UtcNow.AddMinutes(10);
        var options = source.CacheOptions(Regions, $"migrate-{transport}", leaseEnd);
        await WithTimeout(TimeSpan.FromSeconds(60), $"migration over {transport}", async () =>
        {
            await using var client = await RemoteCacheClient.OpenAsync(new[] { source.Process.Endpoint }, options);
            await using var sourceAdmin = await CacheServerAdmin.ConnectAsync(source.Process.Endpoint, source.Key, TimeSpan.FromSeconds(10));
            await using var targetAdmin = await CacheServerAdmin.ConnectAsync(target.Process.Endpoint, target.Key, TimeSpan.FromSeconds(10));
            Assert.Equal(Regions, new RemoteCacheMover(client).RegionCount);
            Assert.Equal(1, new RemoteCacheMover(client).HolderCount);

            int holder = await new RemoteCacheMover(client).AddHolderAsync(target.Process.Endpoint, target.Capability(options.CacheId, Regions, leaseEnd), Regions);
            Assert.Equal(1, holder);
            Assert.Equal(target.Process.Endpoint, new RemoteCacheMover(client).GetHolderEndpoint(holder));
            Assert.Equal(Regions * MiB, (await targetAdmin.GetStatsAsync()).MemoryLent);  // lent, empty, before any move
            var beyond = await Assert.ThrowsAsync<ArgumentException>(() => new RemoteCacheMover(client).MapRegionsAheadAsync(holder, Regions - 1, 2));
            Assert.Contains($"no region {Regions}", beyond.Message);
            await Assert.ThrowsAsync<ArgumentException>(() => new RemoteCacheMover(client).MapRegionsAheadAsync(holder + 1, 0, 1));

            var io = new CheckedIo(client, 0, (int)client.Capacity, seed: 9100) { Label = $"{transport} migration" };
            int stop = 0;
            var ioTask = Task.Run(() => io.RunAsync(ops: 400, maxInFlight: 16, maxLength: 64 << 10, keepGoing: () => Volatile.Read(ref stop) == 0));
            async Task Progress(int more)
            {
                int before = io.Completed;
                while (io.Completed < before + more && !ioTask.IsCompleted)
                    await Task.Delay(1);
            }
            try
            {
                // Region 1 to the target's last region, then 0 and 2 to the others: a region need not keep its index.
                foreach (var (region, to) in new[] { (1, 2), (0, 0), (2, 1) })
                {
                    await Progress(50);
                    await new RemoteCacheMover(client).BeginMigrationAsync(region, TimeSpan.FromSeconds(5));
                    var moving = new RemoteCacheMover(client).GetRegion(region);
                    Assert.True(moving.Moving);
                    Assert.Equal(0, moving.Holder);
                    var mapped = new RemoteCacheMover(client).MapRegionsAheadAsync(holder, to, 1);  // as the managed client does, while the target copies
                    var pulled = await targetAdmin.PullRegionAsync(new RegionPull
                    {
                        CacheId = options.CacheId,
                        SourceRegion = moving.HolderRegion,
                        SourceEndpoint = source.Process.Endpoint,
                        SourceCapability = RemoteCacheCapability.MintMigration(source.Key, options.CacheId, source.Process.ServerId,
                                                                               DateTimeOffset.UtcNow.AddMinutes(1)),
                        TargetRegion = to,
                    });
                    Assert.Equal(MiB, pulled.Bytes);
                    Assert.Equal(transport == "shm", pulled.OneSided);
                    await mapped;
                    new RemoteCacheMover(client).CommitMigration(region, holder, to);
                    Assert.Equal(new RemoteCacheRegion(region, holder, to, MiB, false), new RemoteCacheMover(client).GetRegion(region));
                }
                // What the manager does last: the old server drops the cache. It is lease-lived (registry.h), so it is
                // there whether or not idle lanes still hold connections to it. Nothing the I/O does reaches it any more.
                Assert.Equal(1, await sourceAdmin.DropCacheAsync(options.CacheId));
                await Progress(200);
            }
            finally
            {
                Volatile.Write(ref stop, 1);
                await ioTask;
            }
            await io.VerifyAllAsync("every region on its new server");
            Assert.True(io.Reads > 100 && io.Writes > 100, $"reads {io.Reads}, writes {io.Writes}");

            Assert.Equal(1, client.ServerCount);
            Assert.Equal(Regions * MiB, client.Capacity);
            for (int i = 0; i < 500 && (await sourceAdmin.GetStatsAsync()).MemoryLent != 0; i++)
                await Task.Delay(20);
            Assert.Equal(0, (await sourceAdmin.GetStatsAsync()).MemoryLent);
        });
    }

    [Fact]
    public async Task AnAbortedMoveLeavesTheRegionAndARefusedPullNamesWhy()
    {
        using var source = new KeyedServer("tcp", "abort-source");
        using var target = new KeyedServer("tcp", "abort-target");
        var leaseEnd = DateTimeOffset.UtcNow.AddMinutes(10);
        var options = source.CacheOptions(Regions, "migrate-abort", leaseEnd);
        await WithTimeout(TimeSpan.FromSeconds(60), "an aborted move", async () =>
        {
            await using var client = await RemoteCacheClient.OpenAsync(new[] { source.Process.Endpoint }, options);
            await using var targetAdmin = await CacheServerAdmin.ConnectAsync(target.Process.Endpoint, target.Key, TimeSpan.FromSeconds(10));
            int holder = await new RemoteCacheMover(client).AddHolderAsync(target.Process.Endpoint, target.Capability(options.CacheId, 1, leaseEnd), 1);
            var data = Enumerable.Range(0, 4096).Select(i => (byte)i).ToArray();
            await client.WriteAsync(MiB + 100, data);

            await new RemoteCacheMover(client).BeginMigrationAsync(1, TimeSpan.FromSeconds(5));
            // A client's capability is no migration capability: the source refuses the target, and the pull says so.
            var refused = await Assert.ThrowsAsync<RemoteCacheException>(() => targetAdmin.PullRegionAsync(new RegionPull
            {
                CacheId = options.CacheId,
                SourceRegion = 1,
                SourceEndpoint = source.Process.Endpoint,
                SourceCapability = source.Capability(options.CacheId, Regions, leaseEnd),
                TargetRegion = 0,
            }));
            Assert.Equal(RemoteCacheStatus.Auth, refused.Status);
            await Assert.ThrowsAsync<ArgumentOutOfRangeException>(() => targetAdmin.PullRegionAsync(new RegionPull
            {
                CacheId = options.CacheId,
                SourceRegion = 1,
                SourceEndpoint = source.Process.Endpoint,
                SourceCapability = "unused: refused before anything is sent",
                TargetRegion = 0,
                MaxMibPerSecond = 0,
            }));
            Assert.Contains("migration capability", refused.Message, StringComparison.Ordinal);
            await Assert.ThrowsAsync<ArgumentException>(() => new RemoteCacheMover(client).BeginMigrationAsync(1, TimeSpan.FromSeconds(1)));  // moving already

            // A write to the moving region waits; the abort sends it to the source after all.
            var write = client.WriteAsync(MiB + 100, new byte[] { 7 }).AsTask();
            await Task.Delay(50);
            Assert.False(write.IsCompleted);
            new RemoteCacheMover(client).AbortMigration(1);
            await write;
            Assert.Equal(new RemoteCacheRegion(1, 0, 1, MiB, false), new RemoteCacheMover(client).GetRegion(1));
            var back = new byte[4096];
            await client.ReadAsync(MiB + 100, back);
            data[0] = 7;
            Assert.Equal(data, back);

            Assert.Throws<ArgumentException>(() => new RemoteCacheMover(client).CommitMigration(1, holder, 0));  // not moving
            new RemoteCacheMover(client).RemoveHolder(holder);
            // The target's share is lease-lived (registry.h): let go, it stays idle until the manager drops it there.
            for (int i = 0; i < 500 && (await targetAdmin.ListCachesAsync()).Any(c => c.Connections != 0); i++)
                await Task.Delay(20);
            Assert.Equal(0, Assert.Single(await targetAdmin.ListCachesAsync()).Connections);
            Assert.Equal(MiB, (await targetAdmin.GetStatsAsync()).MemoryLent);
            Assert.Equal(1, await targetAdmin.DropCacheAsync(options.CacheId));
            Assert.Equal(0, (await targetAdmin.GetStatsAsync()).MemoryLent);
        });
    }
}
