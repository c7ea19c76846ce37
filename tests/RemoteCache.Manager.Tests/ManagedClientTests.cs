using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Manager.V1;
using RemoteCache.Slo;
using Xunit;
using static RemoteCache.Manager.Tests.ManagedClientKit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// The managed client end to end: a manager in this process, real remotecache-server processes, caches created,
/// filled, reshaped and deleted through RemoteCacheManagerClient and used through their data clients.
/// </summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class ManagedClientTests
{
    [Fact]
    public async Task CreateOnTwoServersReadsBackAcrossThemAndDeleteLeavesNothingUsable()
    {
        await using var manager = new TestManager(warm: 2);
        await manager.StartAsync();
        await using var client = manager.ManagedClient();
        // 384 MiB: two small VMs of 3 regions are the cheapest placement.
        var cache = await client.CreateAsync(Request(384 * MiB));
        var data = cache.Client;
        Assert.Equal(2, cache.Info.Servers.Count);
        Assert.Equal(2, data.ServerCount);
        Assert.Equal(cache.Info.Capacity, data.Capacity);
        Assert.Equal(cache.Info.Config, data.Config);
        long boundary = data.Capacity / 2;
        await WriteAndVerifyAsync(data, boundary - 300_000, 600_000);  // across the two servers
        await WriteAndVerifyAsync(data, 0, 4096);
        await WriteAndVerifyAsync(data, data.Capacity - 4096, 4096);
        Assert.Contains(await client.ListAsync(), c => c.CacheId == cache.CacheId && c.Servers.Count == 2);

        await cache.DeleteAsync();
        var refused = Assert.Throws<ObjectDisposedException>(() => cache.Client);
        Assert.Contains(cache.CacheId.ToString(), refused.Message);
        Assert.Contains("deleted", refused.Message);
        var held = await Assert.ThrowsAsync<ObjectDisposedException>(() => data.ReadAsync(0, new byte[8]).AsTask());
        Assert.Contains(cache.CacheId.ToString(), held.ObjectName);
        await Assert.ThrowsAsync<ObjectDisposedException>(() => cache.ReshapeAsync(2 * cache.Info.Capacity));
        await Assert.ThrowsAsync<ObjectDisposedException>(() => cache.DeleteAsync());
        Assert.DoesNotContain(await client.ListAsync(), c => c.CacheId == cache.CacheId);
    }

    [Fact]
    public async Task PopulateFromFillsThePrefixOfTheFileInTheForegroundAndInTheBackground()
    {
        // Servers that commit memory ahead, as a fill would be run (and the second cache lands where the first was
        // just deleted: the manager hands a server out again only once it has freed the first cache's memory).
        await using var manager = new TestManager(warm: 2, commitMemory: true);
        await manager.StartAsync();
        await using var client = manager.ManagedClient();
        string path = Path.Combine(manager.StateDirectory, "source.bin");
        var source = new byte[72 * MiB];
        new Random(7).NextBytes(source);
        await File.WriteAllBytesAsync(path, source);

        // Foreground: the first 40 MiB of a 72 MiB file, written before CreateAsync returns.
        var request = Request(40 * MiB);
        request.PopulateFrom = path;
        await using (var cache = await client.CreateAsync(request))
        {
            Assert.True(cache.Populated.IsCompletedSuccessfully);
            Assert.Equal(cache.Info.Config, cache.Client.Config);  // the fill's queue depth is its own
            await VerifyAsync(cache.Client, source, 40 * MiB);
            var beyond = new byte[4096];
            await cache.Client.ReadAsync(40 * MiB, beyond);
            Assert.All(beyond, b => Assert.Equal(0, b));  // the rest of the cache stays as allocated
            await cache.DeleteAsync();
        }

        // Background: all of it, with progress events ending at the total.
        request = Request(72 * MiB);
        request.PopulateFrom = path;
        request.PopulateInBackground = true;
        await using (var cache = await client.CreateAsync(request))
        {
            var log = new EventLog(cache);
            await cache.Populated.WaitAsync(Patience);
            Assert.Equal(cache.Info.Config, cache.Client.Config);
            await VerifyAsync(cache.Client, source, 72 * MiB);
            await EventuallyAsync(() => log.Snapshot().OfType<PopulateProgressEvent>().Any(p => p.Done == p.Total), "the last progress event");
            var progress = log.Snapshot().OfType<PopulateProgressEvent>().ToList();
            Assert.All(progress, p => Assert.Null(p.Error));
            Assert.Equal(72 * MiB, progress[^1].Total);
            Assert.True(progress.Select(p => p.Done).SequenceEqual(progress.Select(p => p.Done).Order()), "progress never goes back");
            await cache.DeleteAsync();
        }

        // A file that is not there: refused before anything is allocated.
        request = Request(MiB);
        request.PopulateFrom = path + ".missing";
        await Assert.ThrowsAsync<ArgumentException>(() => client.CreateAsync(request));
        Assert.Empty(await client.ListAsync());
    }

    [Fact]
    public async Task GrowAndShrinkUnderConcurrentVerifiedIo()
    {
        await using var manager = new TestManager(warm: 2);
        await manager.StartAsync();
        await using var client = manager.ManagedClient();
        await using var cache = await client.CreateAsync(Request(128 * MiB));
        var data = cache.Client;
        long first = data.Capacity;
        Assert.Equal(1, data.ServerCount);

        // Two writers, each in its own half of the first server's range, that verify every write while the cache
        // grows and shrinks.
        using var stop = new CancellationTokenSource();
        long verified = 0;
        var load = Enumerable.Range(0, 2).Select(worker => Task.Run(async () =>
        {
            var random = new Random(worker);
            long half = first / 2;
            for (int round = 1; !stop.IsCancellationRequested; round++)
            {
                long address = worker * half + (random.NextInt64(0, half - 65536) & ~7L);
                await WriteAndVerifyAsync(data, address, 1 + random.Next(65536), round);
                Interlocked.Increment(ref verified);
            }
        })).ToArray();

        for (int round = 0; round < 2; round++)
        {
            long before = Interlocked.Read(ref verified);
            await cache.ReshapeAsync(2 * first);
            Assert.Equal(2, data.ServerCount);
            Assert.Equal(2 * first, data.Capacity);
            Assert.Equal(2, cache.Info.Servers.Count);
            await WriteAndVerifyAsync(data, first - 1000, 2000);  // across the old end
            await WriteAndVerifyAsync(data, 2 * first - 4096, 4096);

            await cache.ReshapeAsync(first);
            Assert.Equal(1, data.ServerCount);
            Assert.Equal(first, data.Capacity);
            await Assert.ThrowsAsync<ArgumentOutOfRangeException>(() => data.WriteAsync(first, new byte[8]).AsTask());
            await EventuallyAsync(() => Interlocked.Read(ref verified) > before + 20, "the load went on");
        }
        stop.Cancel();
        await Task.WhenAll(load);  // any failed or wrong read fails the test here
        Assert.Single((await client.ListAsync()).Single(c => c.CacheId == cache.CacheId).Servers);
    }

    [Fact]
    public async Task ANewSloIsAppliedLiveWhenTheServersCarryItAndOtherwiseTheCacheMovesToServersThatDo()
    {
        await using var manager = new TestManager(warm: 2);
        await manager.StartAsync();
        await using var client = manager.ManagedClient();
        await using var cache = await client.CreateAsync(Request(128 * MiB));
        var log = new EventLog(cache);
        var data = cache.Client;
        var before = data.Config;
        Assert.Equal(1, before.ServerThreads);  // a small VM has one core
        string small = cache.Info.Servers.Single().ServerId;

        // Synthetic model: latency 5 + 2·b·q/(s+1) µs; 6 µs at s = 1 needs b·q = 1.
        await cache.ReshapeAsync(0, new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(6), Throughput = 1e5 });
        Assert.Equal(new CacheConfig(0, 1, 1, 1), data.Config);
        Assert.Equal(data.Config, cache.Info.Config);
        Assert.Equal(small, cache.Info.Servers.Single().ServerId);
        await WriteAndVerifyAsync(data, 0, 100_000);
        for (long a = 0; a < data.Capacity; a += MiB)
            await data.WriteAsync(a, Pattern(a, 64, seed: 3));

        // 7 M ops/s needs s = 2: two cores, which a small VM does not have: the cache moves to a medium one.
        await cache.ReshapeAsync(0, new RemoteCacheSlo { Throughput = 7e6 });
        Assert.Equal(2, data.Config.ServerThreads);
        Assert.Equal(data.Config, cache.Info.Config);
        var server = cache.Info.Servers.Single();
        Assert.NotEqual(small, server.ServerId);
        Assert.Equal("medium", server.VmType);
        Assert.Equal(128 * MiB, data.Capacity);
        var back = new byte[64];
        for (long a = 0; a < data.Capacity; a += MiB)
        {
            await data.ReadAsync(a, back);
            Assert.True(back.AsSpan().SequenceEqual(Pattern(a, 64, seed: 3)), $"the content at {a} did not come along");
        }
        await EventuallyAsync(() => log.Snapshot().OfType<ServerReplacedEvent>().Any(), "the replacement event arrived");
        Assert.Equal(2, log.Snapshot().OfType<RegionMovedEvent>().Count(m => !m.Lost));
        Assert.DoesNotContain((await manager.Operator().ListServersAsync(new ListServersRequest())).Servers, s => s.ServerId == small && s.CacheId != 0);

        // An SLO no configuration meets is refused, and the cache stays where it is.
        var refused = await Assert.ThrowsAsync<RemoteCacheManagerException>(() => cache.ReshapeAsync(0, new RemoteCacheSlo { Throughput = 2e7 }));
        Assert.Equal(Grpc.Core.StatusCode.FailedPrecondition, refused.Status);
        Assert.Contains("no configuration meets the SLO", refused.Message);
        Assert.Equal(server.ServerId, cache.Info.Servers.Single().ServerId);
        await WriteAndVerifyAsync(data, 0, 100_000);
    }

    [Fact]
    public async Task AReshapeMadeElsewhereIsFollowedAndTheEventStreamResumesAcrossAManagerRestart()
    {
        await using var manager = new TestManager(warm: 2);
        await manager.StartAsync();
        await using var client = manager.ManagedClient();
        await using var cache = await client.CreateAsync(Request(128 * MiB, lease: TimeSpan.FromSeconds(30)));
        var data = cache.Client;
        long share = data.Capacity;
        var log = new EventLog(cache);
        await EventuallyAsync(() => log.Snapshot().OfType<CacheAllocatedEvent>().Any(), "the allocation event arrived");

        // Another process (here: another client) grows the cache; this one follows.
        await using (var other = manager.ManagedClient())
        await using (var second = await other.OpenAsync(cache.CacheId))
            await second.ReshapeAsync(2 * share);
        await EventuallyAsync(() => data.ServerCount == 2, "the cache followed the grow");
        await WriteAndVerifyAsync(data, 2 * share - 4096, 4096);

        // The manager goes away: I/O is not disturbed.
        await manager.StopAsync();
        for (int i = 0; i < 50; i++)
            await WriteAndVerifyAsync(data, i * 100_000, 4096, i);

        // It comes back, and the cache is shrunk before this client's stream has resumed: nothing is missed.
        await manager.StartAsync();
        await manager.Tenant(AliceKey).ReallocateAsync(new ReallocateRequest { CacheId = cache.CacheId, Capacity = (ulong)share });
        await EventuallyAsync(() => data.ServerCount == 1, "the cache followed the shrink made while its stream was down");
        await Assert.ThrowsAsync<ArgumentOutOfRangeException>(() => data.WriteAsync(share, new byte[8]).AsTask());
        await WriteAndVerifyAsync(data, 0, 4096);

        await EventuallyAsync(() => log.Snapshot().OfType<CacheReshapedEvent>().Count() == 2, "both reshapes were seen");
        var events = log.Snapshot().Where(e => e.Sequence > 0).ToList();
        Assert.Equal(events.Select(e => e.Sequence).Distinct().Order(), events.Select(e => e.Sequence));  // in order, once each
        var reshapes = events.OfType<CacheReshapedEvent>().ToList();
        Assert.Equal(2, reshapes[0].ServerIds.Count);
        Assert.Single(reshapes[1].ServerIds);

        await cache.DeleteAsync();
        await log.Reading.WaitAsync(Patience);  // the stream ends with the deletion
        Assert.IsType<CacheDeletedEvent>(log.Snapshot().Last(e => e.Sequence > 0));
    }

    [Fact]
    public async Task TheLeaseIsRenewedWhileTheCacheIsOpenAndEndsWhenItIsNot()
    {
        await using var manager = new TestManager(warm: 2);
        await manager.StartAsync();
        await using var client = manager.ManagedClient();
        var cache = await client.CreateAsync(Request(64 * MiB, lease: TimeSpan.FromSeconds(2)));
        var log = new EventLog(cache);
        var created = cache.LeaseExpires;
        // Three lease lengths: without renewals the manager would have freed it.
        var until = DateTime.UtcNow + TimeSpan.FromSeconds(6);
        for (int i = 0; DateTime.UtcNow < until; i++)
        {
            await WriteAndVerifyAsync(cache.Client, (i % 1000) * 4096L, 4096, i);
            await Task.Delay(20);
        }
        Assert.True(cache.LeaseExpires > created + TimeSpan.FromSeconds(3), $"lease still ends at {cache.LeaseExpires:O} (created with {created:O})");
        Assert.True(log.Snapshot().OfType<LeaseRenewedEvent>().Count() >= 3);
        Assert.Contains(await client.ListAsync(), c => c.CacheId == cache.CacheId);

        // Closed here without a delete: nobody renews, and the manager frees it when the lease ends.
        ulong id = cache.CacheId;
        await cache.DisposeAsync();
        Assert.Throws<ObjectDisposedException>(() => cache.Client);
        var deadline = DateTime.UtcNow + Patience;
        while ((await client.ListAsync()).Any(c => c.CacheId == id))
        {
            Assert.True(DateTime.UtcNow < deadline, "the unrenewed lease never ended");
            await Task.Delay(200);
        }
    }
}
