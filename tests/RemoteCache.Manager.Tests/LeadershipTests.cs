using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using Grpc.Health.V1;
using Grpc.Net.Client;
using Microsoft.Extensions.DependencyInjection;
using RemoteCache.Manager.Cluster;
using RemoteCache.Manager.Services;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// Replicas on one etcd prefix: one leads and does every write; the others serve reads and refer the rest to it; a
/// leader that stops hands over, one that is deposed commits nothing, one cut off from etcd steps down in time.
/// </summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class LeadershipTests : IClassFixture<EtcdFixture>
{
    private readonly EtcdFixture _fixture;

    public LeadershipTests(EtcdFixture fixture) => _fixture = fixture;

    // Replicas of one state: a static pool, and the first one's admission key.
    private static TestManager Replica(string endpoints, string prefix, TestManager? first = null)
    {
        var manager = new TestManager(warm: 0, allocator: "static", failureTimeout: TimeSpan.FromMinutes(5));
        manager.Options.Store = ManagerOptions.EtcdStore;
        manager.Options.EtcdEndpoints = endpoints;
        manager.Options.EtcdPrefix = prefix;
        if (first is not null)
            manager.Options.AdmissionKey = Path.Combine(first.StateDirectory, "admission.key");
        return manager;
    }

    private static AllocateRequest Small(string name) => new()
    {
        Capacity = (ulong)(64 * MiB), Transport = "tcp", RecordSize = 8, Name = name,
        Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
    };

    private static async Task<FencingTests.StaticServer> AddServerAsync(TestManager leader)
    {
        var server = await FencingTests.StaticServer.StartAsync(leader);
        var add = new AddServerRequest { VmType = "small" };
        add.Endpoints.Add("tcp", server.Endpoint);
        await leader.Operator().AddServerAsync(add);
        return server;
    }

    private static string Origin(TestManager manager) => manager.Address!.GetLeftPart(UriPartial.Authority);

    private static async Task<HealthCheckResponse.Types.ServingStatus> HealthAsync(TestManager manager, string service)
    {
        using var channel = GrpcChannel.ForAddress(manager.Address!);
        return (await new Health.HealthClient(channel).CheckAsync(new HealthCheckRequest { Service = service })).Status;
    }

    private static void AssertReferredTo(RpcException refused, TestManager leader)
    {
        Assert.Equal(StatusCode.Unavailable, refused.StatusCode);
        Assert.Equal(Refusals.NotLeader, refused.Trailers.GetValue(Refusals.Trailer));
        Assert.Equal(Origin(leader), refused.Trailers.GetValue(Refusals.LeaderTrailer));
        Assert.Contains("nothing was done", refused.Status.Detail);
    }

    [Fact]
    public async Task OneReplicaLeadsTheOthersServeReadsAndReferEverythingElseToIt()
    {
        string prefix = $"/replicas-{Guid.NewGuid():N}/";
        await using var leader = Replica(_fixture.Etcd.Endpoint, prefix);
        await leader.StartAsync();
        Assert.Equal(ManagerRole.Leader, leader.Leadership.Role);
        await using var follower = Replica(_fixture.Etcd.Endpoint, prefix, leader);
        await follower.StartAsync();
        Assert.Equal(ManagerRole.Follower, follower.Leadership.Role);
        Assert.Equal(Origin(leader), follower.Leadership.LeaderAddress);
        await using var server = await AddServerAsync(leader);

        var placed = (await leader.Tenant(AliceKey).AllocateAsync(Small("led"))).Cache;
        // Reads are served by the follower, from etcd as of the call.
        Assert.Equal(placed.Token, (await follower.Tenant(AliceKey).GetCacheAsync(new GetCacheRequest { CacheId = placed.CacheId })).Token);
        Assert.Equal(placed.CacheId, Assert.Single((await follower.Tenant(AliceKey).ListCachesAsync(new ListCachesRequest())).Caches).CacheId);
        Assert.Equal(server.Id, Assert.Single((await follower.Operator().ListServersAsync(new ListServersRequest())).Servers).ServerId);
        // Still the tenant's own only.
        Assert.Empty((await follower.Tenant(BobKey).ListCachesAsync(new ListCachesRequest())).Caches);

        // Writes and watches are referred to the leader, having done nothing.
        var expires = placed.Lease.Expires.ToDateTimeOffset();
        AssertReferredTo(await Assert.ThrowsAsync<RpcException>(() => follower.Tenant(AliceKey).RenewLeaseAsync(new RenewLeaseRequest { CacheId = placed.CacheId }).ResponseAsync), leader);
        AssertReferredTo(await Assert.ThrowsAsync<RpcException>(() => follower.Tenant(AliceKey).AllocateAsync(Small("follower")).ResponseAsync), leader);
        AssertReferredTo(await Assert.ThrowsAsync<RpcException>(() => follower.Operator().DrainServerAsync(new DrainServerRequest { ServerId = server.Id }).ResponseAsync), leader);
        using (var watch = follower.Tenant(AliceKey).WatchEvents(new WatchEventsRequest { CacheId = placed.CacheId, FromSequence = 1 }))
            AssertReferredTo(await Assert.ThrowsAsync<RpcException>(() => watch.ResponseStream.MoveNext(CancellationToken.None)), leader);
        var after = await leader.Tenant(AliceKey).GetCacheAsync(new GetCacheRequest { CacheId = placed.CacheId });
        Assert.Equal(expires, after.Lease.Expires.ToDateTimeOffset());
        Assert.Single((await leader.Tenant(AliceKey).ListCachesAsync(new ListCachesRequest())).Caches);
        Assert.Equal(ServerState.Ready, (await leader.Operator().ListServersAsync(new ListServersRequest())).Servers.Single().State);

        // The gauge and health: both serve; only the leader serves the leader's service.
        using (var leading = new MetricsTests.Recorder(follower.App.Services.GetRequiredService<Core.ManagerMetrics>().Meter))
            Assert.Equal(0, Assert.Single(leading.Observe("remotecache.manager.leader")).Value);
        Assert.Equal(HealthCheckResponse.Types.ServingStatus.Serving, await HealthAsync(leader, ""));
        Assert.Equal(HealthCheckResponse.Types.ServingStatus.Serving, await HealthAsync(leader, ManagerHealth.LeaderService));
        Assert.Equal(HealthCheckResponse.Types.ServingStatus.Serving, await HealthAsync(follower, ""));
        Assert.Equal(HealthCheckResponse.Types.ServingStatus.NotServing, await HealthAsync(follower, ManagerHealth.LeaderService));
        await leader.Tenant(AliceKey).DeallocateAsync(new DeallocateRequest { CacheId = placed.CacheId });
    }

    [Fact]
    public async Task ALeaderThatStopsHandsOverAndItsWatchersGoOnWithTheNextFromTheirLastSequence()
    {
        string prefix = $"/handover-{Guid.NewGuid():N}/";
        var first = Replica(_fixture.Etcd.Endpoint, prefix);
        await first.StartAsync();
        await using var second = Replica(_fixture.Etcd.Endpoint, prefix, first);
        await second.StartAsync();
        await using var server = await AddServerAsync(first);
        var placed = await first.Tenant(AliceKey).AllocateAsync(Small("handed-over"));
        using var watch = first.Tenant(AliceKey).WatchEvents(new WatchEventsRequest { CacheId = placed.Cache.CacheId, FromSequence = placed.EventSequence });
        Assert.True(await watch.ResponseStream.MoveNext(CancellationToken.None));
        ulong last = watch.ResponseStream.Current.Sequence;
        var renewed = await first.Tenant(AliceKey).RenewLeaseAsync(new RenewLeaseRequest { CacheId = placed.Cache.CacheId });
        Assert.True(await watch.ResponseStream.MoveNext(CancellationToken.None));
        last = watch.ResponseStream.Current.Sequence;

        var stopped = Stopwatch.StartNew();
        var stopping = first.StopAsync();
        // The open stream ends with the manager (its watcher goes on with the next one).
        Assert.False(await watch.ResponseStream.MoveNext(CancellationToken.None));
        await stopping;
        await first.DisposeAsync();
        Assert.Equal(ManagerRole.Leader, await second.RoleAsync(ManagerRole.Leader, seconds: 5));
        var handover = stopped.Elapsed;

        // The new leader has the state: it renews the cache's lease, and a watcher goes on from its last sequence with
        // no event missed or repeated.
        var again = await second.Tenant(AliceKey).RenewLeaseAsync(new RenewLeaseRequest { CacheId = placed.Cache.CacheId });
        Assert.True(again.Lease.Expires.ToDateTimeOffset() >= renewed.Lease.Expires.ToDateTimeOffset());
        using var resumed = second.Tenant(AliceKey).WatchEvents(new WatchEventsRequest { CacheId = placed.Cache.CacheId, FromSequence = last + 1 });
        Assert.True(await resumed.ResponseStream.MoveNext(CancellationToken.None));
        Assert.Equal(CacheEvent.KindOneofCase.LeaseRenewed, resumed.ResponseStream.Current.KindCase);
        Assert.True(resumed.ResponseStream.Current.Sequence > last);
        await second.Tenant(AliceKey).DeallocateAsync(new DeallocateRequest { CacheId = placed.Cache.CacheId });
        Assert.True(handover < TimeSpan.FromSeconds(5), $"the hand-over took {handover.TotalSeconds:0.0} s");
    }

    [Fact]
    public async Task ADeposedLeaderCommitsNothingAndFollowsItsSuccessor()
    {
        string prefix = $"/deposed-{Guid.NewGuid():N}/";
        await using var first = Replica(_fixture.Etcd.Endpoint, prefix);
        await first.StartAsync();
        await using var second = Replica(_fixture.Etcd.Endpoint, prefix, first);
        await second.StartAsync();
        await using var server = await AddServerAsync(first);
        var placed = (await first.Tenant(AliceKey).AllocateAsync(Small("deposed"))).Cache;

        // The leader key goes (as when etcd ends a lease the leader still believes it holds): the follower takes the lead
        // while the first manager still thinks it leads.
        using (var etcd = new dotnet_etcd.EtcdClient(_fixture.Etcd.Endpoint))
            await etcd.DeleteAsync(prefix + "meta/leader");
        Assert.Equal(ManagerRole.Leader, await second.RoleAsync(ManagerRole.Leader, seconds: 5));

        // It finds out within a poll (its key is another's) or at its next write (fenced): either way its write is refused
        // as not the leader's, nothing is committed, and it follows.
        var refused = await Assert.ThrowsAsync<RpcException>(() => first.Tenant(AliceKey).RenewLeaseAsync(new RenewLeaseRequest { CacheId = placed.CacheId }).ResponseAsync);
        Assert.Equal(StatusCode.Unavailable, refused.StatusCode);
        Assert.Equal(Refusals.NotLeader, refused.Trailers.GetValue(Refusals.Trailer));
        var cache = await second.Tenant(AliceKey).GetCacheAsync(new GetCacheRequest { CacheId = placed.CacheId });
        Assert.Equal(placed.Lease.Expires, cache.Lease.Expires);
        Assert.Equal(ManagerRole.Follower, await first.RoleAsync(ManagerRole.Follower, seconds: 5));
        Assert.Equal(Origin(second), first.Leadership.LeaderAddress);
        await second.Tenant(AliceKey).DeallocateAsync(new DeallocateRequest { CacheId = placed.CacheId });
    }

    [Fact]
    public async Task ALeaderCutOffFromEtcdStepsDownBeforeItsLeaseCouldEndAndLeadsAgainWhenEtcdIsBack()
    {
        await using var etcd = await EtcdProcess.StartAsync();
        string prefix = $"/cut-{Guid.NewGuid():N}/";
        await using var leader = Replica(etcd.Endpoint, prefix);
        await leader.StartAsync();
        var lease = leader.Options.LeaderLease;

        // A frozen member answers nothing: no keep-alive is answered, so the leader steps down within three quarters of
        // its lease (plus the watchdog's and the keep-alive's periods), before etcd could end the lease and let another lead.
        var clock = Stopwatch.StartNew();
        etcd.Signal("STOP");
        try
        {
            var role = await leader.RoleAsync(ManagerRole.NoLeader, ManagerRole.Follower, seconds: lease.TotalSeconds * 2);
            Assert.True(clock.Elapsed < lease, $"stepped down after {clock.Elapsed.TotalSeconds:0.00} s; its lease is {lease.TotalSeconds} s");
            var refused = await Assert.ThrowsAsync<RpcException>(() => leader.Tenant(AliceKey).AllocateAsync(Small("cut")).ResponseAsync);
            Assert.Equal(StatusCode.Unavailable, refused.StatusCode);
            Assert.NotEqual(HealthCheckResponse.Types.ServingStatus.Serving, await HealthAsync(leader, ManagerHealth.LeaderService));
        }
        finally
        {
            etcd.Signal("CONT");
        }
        Assert.Equal(ManagerRole.Leader, await leader.RoleAsync(ManagerRole.Leader, seconds: 15));
    }
}
