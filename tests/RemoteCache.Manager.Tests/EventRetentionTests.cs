using System;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using Microsoft.Extensions.DependencyInjection;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.ManagedClientKit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>The event log's retention seen from watchers: a compacted sequence is refused and named, never skipped.</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class EventRetentionTests
{
    private static AllocateRequest Allocate() => new()
    {
        Capacity = (ulong)(64 * MiB), Transport = "tcp", RecordSize = 8, Name = "retained",
        Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
    };

    // A manager that keeps two events per cache (the window is the default day: only the cap bites), with a cache whose
    // allocation and first renewal were compacted away: returns the cache and the first sequence still kept.
    private static async Task<(ulong CacheId, ulong Allocated, ulong Floor)> CompactedCacheAsync(TestManager manager)
    {
        manager.Options.EventsPerCache = 2;
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var allocated = await alice.AllocateAsync(Allocate());
        ulong id = allocated.Cache.CacheId;
        for (int i = 0; i < 3; i++)
            await alice.RenewLeaseAsync(new RenewLeaseRequest { CacheId = id });
        await manager.App.Services.GetRequiredService<Duties>().CompactEventsAsync(CancellationToken.None);
        return (id, allocated.EventSequence, allocated.EventSequence + 2);
    }

    [Fact]
    public async Task AWatcherOfACompactedSequenceIsToldSoAndOneFromTheFloorOrFromNowIsServed()
    {
        await using var manager = new TestManager(warm: 1);
        var (id, allocated, floor) = await CompactedCacheAsync(manager);
        var alice = manager.Tenant(AliceKey);

        using (var watch = alice.WatchEvents(new WatchEventsRequest { CacheId = id, FromSequence = allocated }))
        {
            var e = await Assert.ThrowsAsync<RpcException>(() => watch.ResponseStream.MoveNext(CancellationToken.None));
            Assert.Equal(StatusCode.OutOfRange, e.StatusCode);
            Assert.Contains(e.Trailers, t => t.Key == Refusals.Trailer && t.Value == Refusals.EventsCompacted);
            Assert.Contains($"before sequence {floor}", e.Status.Detail);
            Assert.Contains($"sequence {allocated} can no longer", e.Status.Detail);
        }
        // Another tenant learns nothing of it: the same NOT_FOUND as a cache that does not exist.
        using (var watch = manager.Tenant(BobKey).WatchEvents(new WatchEventsRequest { CacheId = id, FromSequence = allocated }))
            Assert.Equal(StatusCode.NotFound, (await Assert.ThrowsAsync<RpcException>(() => watch.ResponseStream.MoveNext(CancellationToken.None))).StatusCode);

        using (var watch = alice.WatchEvents(new WatchEventsRequest { CacheId = id, FromSequence = floor }))
        {
            Assert.True(await watch.ResponseStream.MoveNext(CancellationToken.None));
            Assert.Equal(floor, watch.ResponseStream.Current.Sequence);
            Assert.Equal(CacheEvent.KindOneofCase.LeaseRenewed, watch.ResponseStream.Current.KindCase);
        }
        // From 0 (new events only) nothing was compacted that it asks for.
        using (var watch = alice.WatchEvents(new WatchEventsRequest { CacheId = id, FromSequence = 0 }))
        {
            await alice.DeallocateAsync(new DeallocateRequest { CacheId = id });
            Assert.True(await watch.ResponseStream.MoveNext(CancellationToken.None));
            Assert.Equal(CacheEvent.KindOneofCase.CacheDeleted, watch.ResponseStream.Current.KindCase);
            Assert.True(watch.ResponseStream.Current.Sequence > floor + 1);
        }
    }

    [Fact]
    public async Task TheManagedClientSurfacesTheRefusalAndAManagedCacheFollowsTheCurrentStateInstead()
    {
        await using var manager = new TestManager(warm: 1);
        var (id, allocated, floor) = await CompactedCacheAsync(manager);
        await using var client = manager.ManagedClient();

        // WatchAsync does not retry it: resuming would skip events.
        var e = await Assert.ThrowsAsync<RemoteCacheManagerException>(async () =>
        {
            await foreach (var _ in client.WatchAsync(id, (long)allocated))
            {
            }
        });
        Assert.Equal(StatusCode.OutOfRange, e.Status);
        Assert.True(e.EventsCompacted);
        Assert.Contains($"before sequence {floor}", e.Message);

        // OpenAsync follows the cache's events from its allocation on, which are gone: the handle carries on from the
        // cache as it is and new events, and is not closed.
        await using var cache = await client.OpenAsync(id);
        var log = new EventLog(cache);
        var alice = manager.Tenant(AliceKey);
        // Renewed until one renewal's event arrives: one made before the new stream began is not streamed.
        await EventuallyAsync(() =>
        {
            if (log.Snapshot().OfType<LeaseRenewedEvent>().Any())
                return true;
            alice.RenewLease(new RenewLeaseRequest { CacheId = id });
            return false;
        }, "a renewal's event reaches the managed cache after the refusal");
        Assert.All(log.Snapshot(), ev => Assert.True(ev.Sequence == 0 || ev.Sequence > (long)floor + 1, $"event {ev.Sequence} was compacted away"));
        await cache.Client.WriteAsync(0, new byte[8]);
    }
}
