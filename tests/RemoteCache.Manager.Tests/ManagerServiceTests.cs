using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using RemoteCache.Admin;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>The manager end to end: real server processes, real clients on the caches it allocates.</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class ManagerServiceTests
{
    private static AllocateRequest Request(long bytes, TimeSpan? lease = null, double readLatencyUs = 50) => new()
    {
        Capacity = (ulong)bytes,
        Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(readLatencyUs)), Throughput = 1e5 },
        RecordSize = 8,
        Name = "test",
        Transport = "tcp",
        Lease = lease is { } l ? Duration.FromTimeSpan(l) : null,
    };

    private static async Task<CacheServerStats> StatsAsync(TestManager manager, CacheServer server)
    {
        await using var admin = await CacheServerAdmin.ConnectAsync(server.Endpoint, manager.AdmissionKey, TimeSpan.FromSeconds(2), CancellationToken.None);
        return await admin.GetStatsAsync(CancellationToken.None);
    }

    // A dropped cache's memory is freed once its connections have closed, a moment after the drop.
    private static async Task<CacheServerStats> LentNothingAsync(TestManager manager, CacheServer server)
    {
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(5);
        while (true)
        {
            var stats = await StatsAsync(manager, server);
            if (stats.MemoryLent == 0 || DateTime.UtcNow > deadline)
            {
                Assert.Equal(0, stats.MemoryLent);
                return stats;
            }
            await Task.Delay(50);
        }
    }

    [Fact]
    public async Task AllocatesOverTwoServersAClientReadsWhatItWroteAndDeallocateFreesTheServers()
    {
        await using var manager = new TestManager(warm: 2);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        // 384 MiB: two small VMs of 3 regions (0.04/h) are cheaper than one medium (0.10/h).
        var response = await alice.AllocateAsync(Request(384 * MiB));
        var cache = response.Cache;
        Assert.Equal(2, cache.Servers.Count);
        Assert.All(cache.Servers, s => Assert.Equal("small", s.VmType));
        Assert.Equal(3u, cache.Servers[0].Regions);
        Assert.Equal(384UL * (ulong)MiB, cache.Capacity);
        Assert.Equal(0.04, cache.PricePerHour, 9);
        Assert.Equal("tcp", cache.Transport);
        Assert.NotEqual(cache.Servers[0].ServerId, cache.Servers[1].ServerId);
        Assert.True(cache.PredictedLatency.ToTimeSpan() <= TimeSpan.FromMicroseconds(50));

        var data = new byte[4096];
        await using (var client = await OpenAsync(cache))
        {
            Assert.Equal((long)cache.Capacity, client.Capacity);
            // One block on each server and one across the boundary between them.
            foreach (long address in new[] { 0L, 192 * MiB - 2048, (long)cache.Capacity - 4096 })
            {
                Random.Shared.NextBytes(data);
                await client.WriteAsync(address, data);
                var back = new byte[data.Length];
                await client.ReadAsync(address, back);
                Assert.Equal(data, back);
            }
            foreach (var server in cache.Servers)
                Assert.Equal(3 * 64 * MiB, (await StatsAsync(manager, server)).MemoryLent);

            await alice.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
            await Assert.ThrowsAsync<RemoteCacheException>(() => client.ReadAsync(0, data).AsTask());
        }
        // Read from the servers themselves: both still run (warm) and lend nothing.
        foreach (var server in cache.Servers)
        {
            var stats = await LentNothingAsync(manager, server);
            Assert.Equal(0, stats.Caches);
        }
        Assert.Empty((await alice.ListCachesAsync(new ListCachesRequest())).Caches);
        var e = await Assert.ThrowsAsync<RpcException>(() => alice.GetCacheAsync(new GetCacheRequest { CacheId = cache.CacheId }).ResponseAsync);
        Assert.Equal(StatusCode.NotFound, e.StatusCode);
    }

    [Fact]
    public async Task EveryRefusalHasItsStatusAndSaysWhyAndLeavesNoTrace()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        async Task<RpcException> Refused(Func<Task> call)
        {
            var e = await Assert.ThrowsAsync<RpcException>(call);
            return e;
        }
        var tooBig = await Refused(() => manager.Tenant(BobKey).AllocateAsync(Request(64L << 30)).ResponseAsync);
        Assert.Equal(StatusCode.ResourceExhausted, tooBig.StatusCode);
        Assert.Contains("regions", tooBig.Status.Detail);

        var quota = await Refused(() => alice.AllocateAsync(Request(AliceQuota + 1)).ResponseAsync);
        Assert.Equal(StatusCode.ResourceExhausted, quota.StatusCode);
        Assert.Contains("quota", quota.Status.Detail);

        var slo = await Refused(() => alice.AllocateAsync(Request(64 * MiB, readLatencyUs: 1)).ResponseAsync);
        Assert.Equal(StatusCode.FailedPrecondition, slo.StatusCode);
        Assert.Contains("no configuration meets the SLO", slo.Status.Detail);

        var zero = await Refused(() => alice.AllocateAsync(Request(0)).ResponseAsync);
        Assert.Equal(StatusCode.InvalidArgument, zero.StatusCode);
        var transport = await Refused(() => alice.AllocateAsync(new AllocateRequest { Capacity = 1, Transport = "carrier-pigeon" }).ResponseAsync);
        Assert.Equal(StatusCode.InvalidArgument, transport.StatusCode);
        Assert.Contains("carrier-pigeon", transport.Status.Detail);

        var missing = await Refused(() => alice.GetCacheAsync(new GetCacheRequest { CacheId = 12345 }).ResponseAsync);
        Assert.Equal(StatusCode.NotFound, missing.StatusCode);

        // Nothing was rented for any of them: no server runs, no cache exists.
        Assert.Empty((await manager.Operator().ListServersAsync(new ListServersRequest())).Servers);
        Assert.Empty((await alice.ListCachesAsync(new ListCachesRequest())).Caches);
    }

    [Fact]
    public async Task AServerThatCannotListenForVerbsIsRefusedWithItsOwnReason()
    {
        // Loopback has no RDMA device on any host: the local server started for the placement exits at once.
        await using var manager = new TestManager(warm: 0, verbsAddress: "127.0.0.1");
        await manager.StartAsync();
        var request = Request(64 * MiB);
        request.Transport = "verbs";
        var refused = await Assert.ThrowsAsync<RpcException>(() => manager.Tenant(AliceKey).AllocateAsync(request).ResponseAsync);
        Assert.Equal(StatusCode.ResourceExhausted, refused.StatusCode);
        Assert.Contains("cannot rent the VMs of the placement", refused.Status.Detail);
        Assert.Matches(@"did not start: it exited: .*remotecache-server: \S", refused.Status.Detail);
        Assert.Empty((await manager.Operator().ListServersAsync(new ListServersRequest())).Servers);
    }

    [Fact]
    public async Task UnauthenticatedAndCrossTenantCallsAreRefused()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var none = await Assert.ThrowsAsync<RpcException>(() => manager.Tenant(null).ListCachesAsync(new ListCachesRequest()).ResponseAsync);
        Assert.Equal(StatusCode.Unauthenticated, none.StatusCode);
        Assert.Contains("no API key", none.Status.Detail);
        var wrong = await Assert.ThrowsAsync<RpcException>(() => manager.Tenant("not-a-key").ListCachesAsync(new ListCachesRequest()).ResponseAsync);
        Assert.Equal(StatusCode.Unauthenticated, wrong.StatusCode);
        Assert.Contains("not known", wrong.Status.Detail);
        var tenantAsOperator = await Assert.ThrowsAsync<RpcException>(() => manager.Operator(AliceKey).ListServersAsync(new ListServersRequest()).ResponseAsync);
        Assert.Equal(StatusCode.PermissionDenied, tenantAsOperator.StatusCode);
        Assert.Contains("operator", tenantAsOperator.Status.Detail);
        var operatorAsTenant = await Assert.ThrowsAsync<RpcException>(() => manager.Tenant(OpsKey).ListCachesAsync(new ListCachesRequest()).ResponseAsync);
        Assert.Equal(StatusCode.PermissionDenied, operatorAsTenant.StatusCode);

        var cache = (await manager.Tenant(AliceKey).AllocateAsync(Request(64 * MiB))).Cache;
        var bob = manager.Tenant(BobKey);
        Assert.Empty((await bob.ListCachesAsync(new ListCachesRequest())).Caches);
        foreach (var call in new Func<Task>[]
        {
            () => bob.GetCacheAsync(new GetCacheRequest { CacheId = cache.CacheId }).ResponseAsync,
            () => bob.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId }).ResponseAsync,
            () => bob.RenewLeaseAsync(new RenewLeaseRequest { CacheId = cache.CacheId }).ResponseAsync,
            () => bob.ReallocateAsync(new ReallocateRequest { CacheId = cache.CacheId, Capacity = 1 }).ResponseAsync,
            async () =>
            {
                using var watch = bob.WatchEvents(new WatchEventsRequest { CacheId = cache.CacheId, FromSequence = 1 });
                await watch.ResponseStream.MoveNext(CancellationToken.None);
            },
        })
        {
            var e = await Assert.ThrowsAsync<RpcException>(call);
            Assert.Equal(StatusCode.NotFound, e.StatusCode);  // the same as a cache that does not exist
        }
        Assert.Single((await manager.Tenant(AliceKey).ListCachesAsync(new ListCachesRequest())).Caches);
    }

    [Fact]
    public async Task AnExpiredLeaseFreesTheCacheEverywhere()
    {
        await using var manager = new TestManager(warm: 1);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var allocated = await alice.AllocateAsync(Request(64 * MiB, lease: TimeSpan.FromSeconds(3)));
        var cache = allocated.Cache;
        using var watch = alice.WatchEvents(new WatchEventsRequest { CacheId = cache.CacheId, FromSequence = allocated.EventSequence });
        await using var client = await OpenAsync(cache);
        await client.WriteAsync(0, new byte[8]);
        var kinds = new List<CacheEvent.KindOneofCase>();
        while (await watch.ResponseStream.MoveNext(CancellationToken.None))
            kinds.Add(watch.ResponseStream.Current.KindCase);  // the stream ends after CacheDeleted
        Assert.Equal(new[] { CacheEvent.KindOneofCase.CacheAllocated, CacheEvent.KindOneofCase.LeaseExpiring, CacheEvent.KindOneofCase.CacheDeleted }, kinds);
        var e = await Assert.ThrowsAsync<RemoteCacheException>(() => client.ReadAsync(0, new byte[8]).AsTask());
        Assert.Equal(RemoteCacheStatus.Expired, e.Status);
        Assert.Empty((await alice.ListCachesAsync(new ListCachesRequest())).Caches);
        await LentNothingAsync(manager, cache.Servers[0]);
    }

    [Fact]
    public async Task RenewingTheLeaseKeepsTheCache()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var cache = (await alice.AllocateAsync(Request(64 * MiB, lease: TimeSpan.FromSeconds(3)))).Cache;
        await using var client = await OpenAsync(cache);
        for (int i = 0; i < 4; i++)
        {
            await Task.Delay(1500);
            var renewed = await alice.RenewLeaseAsync(new RenewLeaseRequest { CacheId = cache.CacheId });
            await client.RenewAsync(renewed.Servers.Select(s => s.Capability).ToList());
        }
        await client.WriteAsync(0, new byte[8]);  // 6 s after a 3 s lease began
        Assert.Single((await alice.ListCachesAsync(new ListCachesRequest())).Caches);
    }

    [Fact]
    public async Task AManagerRestartedMidWorkloadRecoversAndWatchersMissNothing()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var allocated = await alice.AllocateAsync(Request(128 * MiB, lease: TimeSpan.FromMinutes(5)));
        var cache = allocated.Cache;
        await using var client = await OpenAsync(cache);
        using var stop = new CancellationTokenSource();
        long operations = 0;
        var workload = Task.Run(async () =>
        {
            var buffer = new byte[64];
            while (!stop.IsCancellationRequested)
            {
                long address = Random.Shared.NextInt64((long)cache.Capacity / 64) * 64;
                await client.WriteAsync(address, buffer);
                await client.ReadAsync(address, buffer);
                Interlocked.Increment(ref operations);
            }
        });

        await manager.StopAsync();
        long whileDown = Interlocked.Read(ref operations);
        await Task.Delay(500);
        Assert.True(Interlocked.Read(ref operations) > whileDown, "the cache stopped serving while the manager was down");
        await manager.StartAsync();
        alice = manager.Tenant(AliceKey);
        var recovered = await alice.GetCacheAsync(new GetCacheRequest { CacheId = cache.CacheId });
        Assert.Equal(cache.Servers.Select(s => s.ServerId), recovered.Servers.Select(s => s.ServerId));
        Assert.Equal(cache.Token, recovered.Token);
        var renewed = await alice.RenewLeaseAsync(new RenewLeaseRequest { CacheId = cache.CacheId });
        await client.RenewAsync(renewed.Servers.Select(s => s.Capability).ToList());
        stop.Cancel();
        await workload;

        // A watcher resuming from the allocation sees every event since, across the restart, in order.
        using var watch = alice.WatchEvents(new WatchEventsRequest { CacheId = cache.CacheId, FromSequence = allocated.EventSequence });
        Assert.True(await watch.ResponseStream.MoveNext(CancellationToken.None));
        Assert.Equal(allocated.EventSequence, watch.ResponseStream.Current.Sequence);
        Assert.True(await watch.ResponseStream.MoveNext(CancellationToken.None));
        Assert.Equal(CacheEvent.KindOneofCase.LeaseRenewed, watch.ResponseStream.Current.KindCase);
        Assert.True(watch.ResponseStream.Current.Sequence > allocated.EventSequence);
    }

    [Fact]
    public async Task AKilledServerIsReportedToWatchersWithinTheProbePeriod()
    {
        await using var manager = new TestManager(warm: 0, probePeriod: TimeSpan.FromMilliseconds(500));
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var allocated = await alice.AllocateAsync(Request(384 * MiB));
        var cache = allocated.Cache;
        // From the event after the allocation, not only new ones: the kill must not race the call reaching the manager.
        using var watch = alice.WatchEvents(new WatchEventsRequest { CacheId = cache.CacheId, FromSequence = allocated.EventSequence + 1 });
        var next = watch.ResponseStream.MoveNext(CancellationToken.None);
        var killed = Stopwatch.StartNew();
        Assert.True(StopServer(cache.Servers[1].ServerId));
        Assert.True(await next.WaitAsync(TimeSpan.FromSeconds(5)));
        var failed = watch.ResponseStream.Current;
        Assert.Equal(CacheEvent.KindOneofCase.ServerFailed, failed.KindCase);
        Assert.Equal(cache.Servers[1].ServerId, failed.ServerFailed.ServerId);
        Assert.Equal(3u, failed.ServerFailed.FirstRegion);
        Assert.Equal(3u, failed.ServerFailed.Regions);
        Assert.True(killed.Elapsed < TimeSpan.FromSeconds(2), $"reported after {killed.Elapsed}");
        var servers = (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers;
        Assert.Equal(ServerState.Failed, servers.Single(s => s.ServerId == cache.Servers[1].ServerId).State);
    }

    [Fact]
    public async Task AReclaimAnnouncesItsDeadlineThenTheServerGoes()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var allocated = await alice.AllocateAsync(Request(64 * MiB));
        var cache = allocated.Cache;
        // From the allocation on: a stream of only new events might subscribe after the notice was sent.
        using var watch = alice.WatchEvents(new WatchEventsRequest { CacheId = cache.CacheId, FromSequence = allocated.EventSequence + 1 });
        var reclaim = await manager.Operator().ReclaimServerAsync(new ReclaimServerRequest { ServerId = cache.Servers[0].ServerId, Notice = Duration.FromTimeSpan(TimeSpan.FromSeconds(1)) });
        Assert.True(await watch.ResponseStream.MoveNext(CancellationToken.None));
        var notice = watch.ResponseStream.Current.ReclaimNotice;
        Assert.Equal(cache.Servers[0].ServerId, notice.ServerId);
        Assert.Equal(reclaim.Deadline, notice.Deadline);
        Assert.True(await watch.ResponseStream.MoveNext(CancellationToken.None));
        Assert.Equal(CacheEvent.KindOneofCase.ServerFailed, watch.ResponseStream.Current.KindCase);
        Assert.True(DateTimeOffset.UtcNow >= reclaim.Deadline.ToDateTimeOffset());
        Assert.False(StopServer(cache.Servers[0].ServerId));  // already gone
    }
    [Fact]
    public async Task ReplacementsAreRefusedWithWhatAndWhyAndGivenBackOrFreedWithTheCache()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var cache = (await alice.AllocateAsync(Request(384 * MiB))).Cache;  // two small VMs of 3 regions
        string id = cache.Servers[1].ServerId;
        var begin = new ReplacementRequest { CacheId = cache.CacheId, ServerId = id, Mover = "mover-a" };

        var e = await Assert.ThrowsAsync<RpcException>(() => alice.BeginReplacementAsync(begin).ResponseAsync);
        Assert.Equal(StatusCode.FailedPrecondition, e.StatusCode);
        Assert.Contains($"server {id} of cache {cache.CacheId} is ready", e.Status.Detail);
        e = await Assert.ThrowsAsync<RpcException>(() => alice.BeginReplacementAsync(new ReplacementRequest { CacheId = cache.CacheId, ServerId = "nobody", Mover = "m" }).ResponseAsync);
        Assert.Contains("'nobody' is not one of cache", e.Status.Detail);
        e = await Assert.ThrowsAsync<RpcException>(() => alice.BeginReplacementAsync(new ReplacementRequest { CacheId = cache.CacheId, ServerId = id }).ResponseAsync);
        Assert.Equal(StatusCode.InvalidArgument, e.StatusCode);
        Assert.Contains("mover", e.Status.Detail);
        e = await Assert.ThrowsAsync<RpcException>(() => manager.Tenant(BobKey).BeginReplacementAsync(begin).ResponseAsync);
        Assert.Equal(StatusCode.NotFound, e.StatusCode);

        await manager.Operator().ReclaimServerAsync(new ReclaimServerRequest { ServerId = id, Notice = Duration.FromTimeSpan(TimeSpan.FromMinutes(5)) });
        var replacement = await alice.BeginReplacementAsync(begin);
        Assert.NotEqual(id, replacement.ServerId);
        Assert.Equal(3u, replacement.Regions);
        Assert.Equal(replacement.ServerId, (await alice.BeginReplacementAsync(begin)).ServerId);  // asked again: the same one
        var described = await alice.GetCacheAsync(new GetCacheRequest { CacheId = cache.CacheId });
        Assert.Equal(cache.Servers.Select(s => s.ServerId), described.Servers.Select(s => s.ServerId));  // not in place yet
        Assert.Equal((id, replacement.ServerId), (described.Replacements.Single().Replaces, described.Replacements.Single().Server.ServerId));
        Assert.False(string.IsNullOrEmpty(described.Replacements.Single().Server.Capability));

        var other = begin.Clone();
        other.Mover = "mover-b";
        e = await Assert.ThrowsAsync<RpcException>(() => alice.BeginReplacementAsync(other).ResponseAsync);
        Assert.Equal(StatusCode.FailedPrecondition, e.StatusCode);
        Assert.Contains(e.Trailers, t => t.Key == Refusals.Trailer && t.Value == Refusals.MovedElsewhere);
        Assert.Contains("('mover-a') is moving", e.Status.Detail);
        e = await Assert.ThrowsAsync<RpcException>(() => alice.MoveRegionAsync(new MoveRegionRequest { CacheId = cache.CacheId, ServerId = id, Mover = "mover-a", SourceRegion = 3 }).ResponseAsync);
        Assert.Equal(StatusCode.InvalidArgument, e.StatusCode);
        Assert.Contains("regions 0..2", e.Status.Detail);
        e = await Assert.ThrowsAsync<RpcException>(() => alice.MoveRegionAsync(new MoveRegionRequest { CacheId = cache.CacheId, ServerId = cache.Servers[0].ServerId, Mover = "mover-a" }).ResponseAsync);
        Assert.Contains("no replacement of server", e.Status.Detail);

        // Given back: the cache is as it was and the replacement is free again (the local allocator stops it).
        var abandoned = await alice.AbandonReplacementAsync(begin);
        Assert.Empty(abandoned.Replacements);
        Assert.Equal(cache.Servers.Select(s => s.ServerId), abandoned.Servers.Select(s => s.ServerId));
        Assert.DoesNotContain((await manager.Operator().ListServersAsync(new ListServersRequest())).Servers, s => s.ServerId == replacement.ServerId);

        // A cache deleted with a replacement under way frees it too.
        var second = await alice.BeginReplacementAsync(begin);
        await alice.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
        Assert.DoesNotContain((await manager.Operator().ListServersAsync(new ListServersRequest())).Servers, s => s.CacheId == cache.CacheId);
        Assert.NotEqual(replacement.ServerId, second.ServerId);
    }
}

[CollectionDefinition(nameof(ManagerServiceTests), DisableParallelization = true)]
public sealed class ManagerServiceCollection
{
}

/// <summary>TLS: with a certificate the manager serves https only.</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class ManagerTlsTests
{
    [Fact]
    public async Task ServesTlsWithTheGivenCertificate()
    {
        await using var manager = new TestManager(warm: 0);
        manager.UseTls();
        await manager.StartAsync();
        Assert.Equal("https", manager.Address!.Scheme);
        Assert.Empty((await manager.Tenant(AliceKey).ListCachesAsync(new ListCachesRequest())).Caches);
        // Plain HTTP/2 to the TLS port gets no answer a gRPC client accepts.
        using var plain = Grpc.Net.Client.GrpcChannel.ForAddress(new UriBuilder(manager.Address!) { Scheme = "http" }.Uri);
        var client = new CacheManager.CacheManagerClient(plain);
        var e = await Assert.ThrowsAsync<RpcException>(() => client.ListCachesAsync(new ListCachesRequest(), deadline: DateTime.UtcNow.AddSeconds(5)).ResponseAsync);
        Assert.NotEqual(StatusCode.OK, e.StatusCode);
    }
}
