using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using Grpc.Core.Interceptors;
using Grpc.Net.Client;
using Microsoft.Extensions.DependencyInjection;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.V1;
using RemoteCache.Slo;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// Servers that join by themselves: join tokens, Join, heartbeats (forged, replayed, stale), the TTL, incarnations, and
/// <see cref="JoinedServer"/> against a manager in process.
/// </summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class MembershipTests
{
    private static AllocateRequest Request(long bytes) => new()
    {
        Capacity = (ulong)bytes, Transport = "tcp", RecordSize = 8,
        Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
    };

    private static async Task<TestManager> StartAsync(TimeSpan? ttl = null)
    {
        var manager = new TestManager(allocator: "static");
        manager.Options.HeartbeatInterval = TimeSpan.FromMilliseconds(250);
        manager.Options.HeartbeatTtl = ttl ?? TimeSpan.FromSeconds(1);
        await manager.StartAsync();
        return manager;
    }

    private static async Task<string> TokenAsync(TestManager manager, TimeSpan? ttl = null) =>
        (await manager.Operator().IssueJoinTokenAsync(new IssueJoinTokenRequest { Ttl = Duration.FromTimeSpan(ttl ?? TimeSpan.FromHours(1)), Description = "test" })).Secret;

    private static JoinedServerOptions Options(TestManager manager, string token, string listen = "tcp:127.0.0.1:0") => new()
    {
        Managers = { manager.Address! }, JoinToken = token, Name = "host-a", Listen = { listen }, RegionSize = 64 * MiB, MemoryLimit = 256 * MiB,
        MaxThreads = 1, Labels = { ["zone"] = "a" }, CallTimeout = TimeSpan.FromSeconds(5),
    };

    private static ServerMembership.ServerMembershipClient Members(TestManager manager, string? token) =>
        new(GrpcChannel.ForAddress(manager.Address!).CreateCallInvoker().Intercept(m =>
        {
            if (token is not null)
                m.Add("authorization", "Bearer " + token);
            return m;
        }));

    private static JoinRequest Join() => new() { Name = "raw", Cores = 1, Memory = (ulong)(256 * MiB), RegionBytes = (ulong)(64 * MiB) };

    private static HeartbeatRequest Beat(string serverId, byte[] key, ulong sequence, IEnumerable<string>? endpoints = null, DateTimeOffset? sent = null)
    {
        var body = new HeartbeatBody { Sequence = sequence, Sent = Timestamp.FromDateTimeOffset(sent ?? DateTimeOffset.UtcNow), MemoryLimit = (ulong)(256 * MiB) };
        foreach (string e in endpoints ?? Array.Empty<string>())
            body.Endpoints[e[..e.IndexOf(':')]] = e;
        byte[] bytes = body.ToByteArray();
        return new HeartbeatRequest { ServerId = serverId, Body = ByteString.CopyFrom(bytes), Mac = ByteString.CopyFrom(HeartbeatMac.Compute(key, serverId, bytes)) };
    }

    [Fact]
    public async Task AServerJoinsWithATokenAndIsRentedWithoutAnOperatorCall()
    {
        await using var manager = await StartAsync();
        string token = await TokenAsync(manager);
        var clock = Stopwatch.StartNew();
        await using var joined = await JoinedServer.JoinAsync(Options(manager, token));
        var allocatable = clock.Elapsed;
        Assert.StartsWith("host-a.", joined.ServerId);
        Assert.Equal("small", joined.VmType);

        var listed = (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers.Single();
        Assert.Equal(joined.ServerId, listed.ServerId);
        Assert.Equal(ServerState.Ready, listed.State);
        Assert.True(listed.Joined);
        Assert.Equal("a", listed.Labels["zone"]);
        Assert.Equal(joined.Endpoints[0], listed.Endpoints["tcp"]);
        var issued = (await manager.Operator().ListJoinTokensAsync(new ListJoinTokensRequest())).Tokens.Single();
        Assert.Equal(1UL, issued.Joins);
        Assert.Equal(issued.TokenId, listed.JoinTokenId);
        Assert.True(allocatable < TimeSpan.FromSeconds(5), $"join to allocatable took {allocatable}");

        // Rented as any pool server: the capability the manager minted for it (under its own key) admits the client.
        var alice = manager.Tenant(AliceKey);
        var cache = (await alice.AllocateAsync(Request(128 * MiB))).Cache;
        Assert.Equal(joined.ServerId, cache.Servers.Single().ServerId);
        await using (var client = await OpenAsync(cache))
        {
            var data = new byte[] { 9, 8, 7, 6, 5, 4, 3, 2 };
            await client.WriteAsync(64 * MiB, data);
            var back = new byte[8];
            await client.ReadAsync(64 * MiB, back);
            Assert.Equal(data, back);
        }

        // Its key is its own: a capability signed with the manager's admission key, which every server it starts or an
        // operator registers shares, admits nothing on a joined server.
        var forged = ClientOptions(cache);
        forged.Capabilities = new List<string> { RemoteCacheCapability.Mint(manager.AdmissionKey, cache.CacheId, joined.ServerId, 2, DateTimeOffset.UtcNow.AddMinutes(5)) };
        var refused = await Assert.ThrowsAsync<RemoteCacheException>(() => RemoteCacheClient.OpenAsync(cache.Servers.Select(s => s.Endpoint), forged));
        Assert.Equal(RemoteCacheStatus.Auth, refused.Status);
    }

    [Fact]
    public async Task JoinsWithABadExpiredOrRevokedTokenAreRefusedWithTheReasonAndRegisterNothing()
    {
        await using var manager = await StartAsync();
        var ops = manager.Operator();
        string live = await TokenAsync(manager);
        string id = live.Split('_')[1];

        async Task Refused(string? token, string says)
        {
            var e = await Assert.ThrowsAsync<RpcException>(() => Members(manager, token).JoinAsync(Join()).ResponseAsync);
            Assert.Equal(StatusCode.Unauthenticated, e.StatusCode);
            Assert.Contains(says, e.Status.Detail);
        }

        await Refused(null, "Join needs a join token");
        await Refused("garbage", "is not one a manager issues");
        await Refused(OpsKey, "an API key is no join token");
        await Refused($"rcj_000000000000_{live.Split('_', 3)[2]}", "not known to this manager");
        await Refused(live[..^4] + "AAAA", "not known to this manager");
        string shortLived = await TokenAsync(manager, TimeSpan.FromMilliseconds(300));
        await Task.Delay(400);
        await Refused(shortLived, "expired at");
        var revoked = await ops.RevokeJoinTokenAsync(new RevokeJoinTokenRequest { TokenId = id });
        Assert.NotNull(revoked.Revoked);
        await Refused(live, "was revoked at");
        Assert.Empty((await ops.ListServersAsync(new ListServersRequest())).Servers);

        // A join token is scoped to joining: as an API key it opens nothing.
        string other = await TokenAsync(manager);
        var asKey = await Assert.ThrowsAsync<RpcException>(() => manager.Operator(other).ListServersAsync(new ListServersRequest()).ResponseAsync);
        Assert.Equal(StatusCode.Unauthenticated, asKey.StatusCode);
        // Bad input in the join itself: refused by name, nothing registered.
        var badName = await Assert.ThrowsAsync<RpcException>(() => Members(manager, other).JoinAsync(new JoinRequest(Join()) { Name = "no spaces" }).ResponseAsync);
        Assert.Equal(StatusCode.InvalidArgument, badName.StatusCode);
        var tooSmall = await Assert.ThrowsAsync<RpcException>(() => Members(manager, other).JoinAsync(new JoinRequest(Join()) { Memory = (ulong)(64 * MiB) }).ResponseAsync);
        Assert.Equal(StatusCode.FailedPrecondition, tooSmall.StatusCode);
        Assert.Contains("less than any VM type", tooSmall.Status.Detail);
        var region = await Assert.ThrowsAsync<RpcException>(() => Members(manager, other).JoinAsync(new JoinRequest(Join()) { RegionBytes = (ulong)MiB }).ResponseAsync);
        Assert.Contains("the catalogue's are", region.Status.Detail);
        Assert.Empty((await ops.ListServersAsync(new ListServersRequest())).Servers);
    }

    [Fact]
    public async Task HeartbeatsForgedReplayedOrStaleAreRefusedAndEndpointsCannotBeClaimed()
    {
        await using var manager = await StartAsync(ttl: TimeSpan.FromSeconds(5));
        string token = await TokenAsync(manager);
        var members = Members(manager, token);
        var grant = await members.JoinAsync(Join());
        byte[] key = grant.AdmissionKey.ToByteArray();
        using var server = RemoteCacheServer.Start(new RemoteCacheServerOptions
        {
            Listen = { "tcp:127.0.0.1:0" }, RegionSize = 64 * MiB, MemoryLimit = 256 * MiB, MaxThreads = 1, AdmissionKey = key, ServerId = grant.ServerId,
        });
        var first = Beat(grant.ServerId, key, 1, server.Endpoints);
        Assert.Equal(ServerState.Ready, (await members.HeartbeatAsync(first)).State);

        async Task Refused(HeartbeatRequest beat, StatusCode status, string says)
        {
            var e = await Assert.ThrowsAsync<RpcException>(() => members.HeartbeatAsync(beat).ResponseAsync);
            Assert.Equal(status, e.StatusCode);
            Assert.Contains(says, e.Status.Detail);
        }

        await Refused(first, StatusCode.Unauthenticated, "not above the last accepted");
        await Refused(Beat(grant.ServerId, new byte[32], 2), StatusCode.Unauthenticated, "does not verify");
        var altered = Beat(grant.ServerId, key, 2);
        altered.Body = ByteString.CopyFrom(altered.Body.Concat(new byte[] { 0x28, 0x01 }).ToArray());
        await Refused(altered, StatusCode.Unauthenticated, "does not verify");
        await Refused(Beat(grant.ServerId, key, 2, sent: DateTimeOffset.UtcNow.AddMinutes(-10)), StatusCode.Unauthenticated, "more than the TTL");
        Assert.Equal(ServerState.Ready, (await members.HeartbeatAsync(Beat(grant.ServerId, key, 2))).State);
        await Refused(Beat(grant.ServerId, key, 3, new[] { "tcp:127.0.0.1:1" }), StatusCode.InvalidArgument, "never change");

        // Another joined server claiming the first one's endpoint is refused: the admin interface there does not answer
        // under its key. The first one stays as it was.
        var thief = await members.JoinAsync(Join());
        await Refused(Beat(thief.ServerId, thief.AdmissionKey.ToByteArray(), 1, server.Endpoints), StatusCode.FailedPrecondition, "did not answer under");
        var servers = (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers;
        Assert.Equal(ServerState.Ready, servers.Single(s => s.ServerId == grant.ServerId).State);
        Assert.Equal(ServerState.Joining, servers.Single(s => s.ServerId == thief.ServerId).State);
        // A heartbeat for a server that never joined verifies under no key anyone holds.
        await Refused(Beat("static-1", key, 1), StatusCode.Unauthenticated, "does not verify");
        // A wildcard endpoint is no address.
        var wild = await members.JoinAsync(Join());
        await Refused(Beat(wild.ServerId, wild.AdmissionKey.ToByteArray(), 1, new[] { "tcp:0.0.0.0:7300" }), StatusCode.InvalidArgument, "wildcard");
    }

    [Fact]
    public async Task AServerWhoseHeartbeatsStopIsFailedWithinTheTtlAndARestartIsANewIncarnation()
    {
        var ttl = TimeSpan.FromSeconds(1);
        await using var manager = await StartAsync(ttl);
        string token = await TokenAsync(manager);
        var joined = await JoinedServer.JoinAsync(Options(manager, token));
        string endpoint = joined.Endpoints[0], joinedId = joined.ServerId;
        await using var managed = manager.ManagedClient();
        await using var cache = await managed.CreateAsync(new ManagedCacheRequest { Capacity = 128 * MiB, Slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(50) } });
        var failed = new TaskCompletionSource<(ServerFailedEvent Event, TimeSpan After)>(TaskCreationOptions.RunContinuationsAsynchronously);
        var clock = new Stopwatch();
        using var watching = new System.Threading.CancellationTokenSource(TimeSpan.FromSeconds(30));
        var watch = Task.Run(async () =>
        {
            await foreach (var e in managed.WatchAsync(cache.CacheId, 0, watching.Token))
                if (e is ServerFailedEvent f)
                    failed.TrySetResult((f, clock.Elapsed));
        });
        await Task.Delay(300);  // the watch is under way

        // The host is gone (its heartbeats stop with it): failed within the TTL and a tick, its watchers told.
        clock.Start();
        await joined.DisposeAsync();
        var (gone, after) = await failed.Task.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.Equal(joinedId, gone.ServerId);
        Assert.Contains("no heartbeat", gone.Reason);
        Assert.True(after <= ttl + TimeSpan.FromSeconds(1), $"ServerFailed came {after.TotalSeconds:0.00} s after the host went; the TTL is {ttl.TotalSeconds} s");

        // The same host started again at the same endpoint is a new incarnation: another id, and the old one's record
        // (failed, its cache lost) is never taken for it.
        await using var again = await JoinedServer.JoinAsync(Options(manager, token, endpoint));
        Assert.NotEqual(joinedId, again.ServerId);
        var servers = (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers;
        Assert.Equal(ServerState.Ready, servers.Single(s => s.ServerId == again.ServerId).State);
        Assert.DoesNotContain(servers, s => s.ServerId == joinedId && s.State != ServerState.Failed);
        watching.Cancel();
        await Task.WhenAny(watch, Task.Delay(5000));
    }

    [Fact]
    public async Task ARestartBeforeTheTtlFailsTheOldIncarnationAtOnce()
    {
        await using var manager = await StartAsync(ttl: TimeSpan.FromSeconds(30));
        string token = await TokenAsync(manager);
        var first = await JoinedServer.JoinAsync(Options(manager, token));
        var alice = manager.Tenant(AliceKey);
        var cache = (await alice.AllocateAsync(Request(128 * MiB))).Cache;
        string endpoint = first.Endpoints[0], firstId = first.ServerId;
        Assert.Equal(firstId, cache.Servers.Single().ServerId);
        await first.DisposeAsync();

        // Well within the TTL: the new incarnation's endpoint check finds it answering where the old one was.
        await using var second = await JoinedServer.JoinAsync(Options(manager, token, endpoint));
        var servers = (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers;
        var old = servers.Single(s => s.ServerId == firstId);
        Assert.Equal(ServerState.Failed, old.State);
        Assert.Equal(cache.CacheId, old.CacheId);
        var events = new List<CacheEvent>();
        using var call = alice.WatchEvents(new WatchEventsRequest { CacheId = cache.CacheId, FromSequence = 1 });
        while (events.All(e => e.KindCase != CacheEvent.KindOneofCase.ServerFailed) && await call.ResponseStream.MoveNext(default))
            events.Add(call.ResponseStream.Current);
        Assert.Contains("new incarnation", events.Last().ServerFailed.Reason);
    }

    /// <summary>
    /// A server that leaves (an operator's SIGTERM to <c>serve</c>): its cache moves to another server with its content,
    /// its clients following, and the server is forgotten; nobody hears ServerFailed. A free server leaves within a heartbeat.
    /// </summary>
    [Fact]
    public async Task AServerThatLeavesHasItsCacheMovedAndIsForgottenWithNoFailure()
    {
        await using var manager = await StartAsync(TimeSpan.FromSeconds(2));
        string token = await TokenAsync(manager);
        var leaving = await JoinedServer.JoinAsync(Options(manager, token));
        try
        {
            await using var managed = new RemoteCacheManagerClient(new RemoteCacheManagerOptions { Address = manager.Address!, ApiKey = AliceKey });
            await using var cache = await managed.CreateAsync(new ManagedCacheRequest { Capacity = 128 * MiB, Transport = "tcp", Duration = TimeSpan.FromHours(1) });
            Assert.Equal(leaving.ServerId, cache.Info.Servers.Single().ServerId);
            var data = Enumerable.Range(0, 4096).Select(i => (byte)(i * 7)).ToArray();
            await cache.Client.WriteAsync(64 * MiB, data);
            var stayingOptions = Options(manager, token);
            stayingOptions.Name = "host-b";
            await using var staying = await JoinedServer.JoinAsync(stayingOptions);
            var seen = new List<ManagedCacheEvent>();
            using var watching = new CancellationTokenSource(TimeSpan.FromMinutes(1));
            var watch = Task.Run(async () =>
            {
                try
                {
                    await foreach (var e in managed.WatchAsync(cache.CacheId, 1, watching.Token))
                        lock (seen)
                            seen.Add(e);
                }
                catch (OperationCanceledException)
                {
                }
            });

            Assert.True(await leaving.LeaveAsync(TimeSpan.FromSeconds(30)), "the server did not leave");
            Assert.Equal(staying.ServerId, cache.Info.Servers.Single().ServerId);
            var back = new byte[data.Length];
            await cache.Client.ReadAsync(64 * MiB, back);
            Assert.Equal(data, back);
            var servers = (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers;
            Assert.Equal(new[] { staying.ServerId }, servers.Select(s => s.ServerId));
            await Task.Delay(TimeSpan.FromSeconds(3));  // past the TTL: still no failure of the server that left
            watching.Cancel();
            await watch;
            lock (seen)
            {
                Assert.Contains(seen, e => e is ReclaimNoticeEvent r && r.ServerId == leaving.ServerId);
                Assert.DoesNotContain(seen, e => e is ServerFailedEvent);
            }

            // Free (the cache deleted), a server leaves within a heartbeat.
            await cache.DeleteAsync();
            var clock = Stopwatch.StartNew();
            Assert.True(await staying.LeaveAsync(TimeSpan.FromSeconds(30)));
            Assert.True(clock.Elapsed < TimeSpan.FromSeconds(5), $"a free server took {clock.Elapsed.TotalSeconds:0.0} s to leave");
            Assert.DoesNotContain((await manager.Operator().ListServersAsync(new ListServersRequest())).Servers, s => s.ServerId == staying.ServerId);
        }
        finally
        {
            await leaving.DisposeAsync();
        }
    }

    /// <summary>With no manager answering, leaving gives up after the heartbeat TTL rather than the whole time given.</summary>
    [Fact]
    public async Task LeavingWithoutAManagerGivesUpAfterTheTtl()
    {
        var manager = await StartAsync(TimeSpan.FromSeconds(1));
        await using var joined = await JoinedServer.JoinAsync(Options(manager, await TokenAsync(manager)));
        await manager.DisposeAsync();
        var clock = Stopwatch.StartNew();
        Assert.False(await joined.LeaveAsync(TimeSpan.FromSeconds(60)));
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(10), $"leaving without a manager took {clock.Elapsed.TotalSeconds:0.0} s");
    }

    [Fact]
    public async Task AServerTheManagerFailedJoinsAgainAsANewIncarnation()
    {
        await using var manager = await StartAsync(ttl: TimeSpan.FromSeconds(30));
        string token = await TokenAsync(manager);
        await using var joined = await JoinedServer.JoinAsync(Options(manager, token));
        string first = joined.ServerId;
        var rejoined = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
        joined.Rejoined += id => rejoined.TrySetResult(id);

        // As after a partition longer than the TTL: the manager failed it while it could not hear it.
        await manager.App.Services.GetRequiredService<Pool>().ServerFailedAsync(first, "a test partition", default);
        string second = await rejoined.Task.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.NotEqual(first, second);
        Assert.Equal(2, joined.Incarnations);
        var servers = (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers;
        Assert.Equal(ServerState.Ready, servers.Single(s => s.ServerId == second).State);
        Assert.DoesNotContain(servers, s => s.ServerId == first);  // failed, free: forgotten
    }
}

/// <summary>Lending what the host does not use: the policy, and a joined server whose host takes memory back.</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class HarvestingTests
{
    private sealed class FakeHost(long total, long headroom) : IHostMemory
    {
        public long Headroom = headroom;

        public HostMemoryReading Read() => new(total, Volatile.Read(ref Headroom), 0, "test");
    }

    private static async Task<TestManager> StartManagerAsync()
    {
        var manager = new TestManager(allocator: "static");
        manager.Options.HeartbeatInterval = TimeSpan.FromMilliseconds(250);
        manager.Options.HeartbeatTtl = TimeSpan.FromSeconds(10);
        await manager.StartAsync();
        return manager;
    }

    // A harvesting server (1 core: a "small") on a host whose memory the test sets, with a reserve of 256 MiB.
    private static async Task<JoinedServer> JoinAsync(TestManager manager, IHostMemory host) => await JoinedServer.JoinAsync(new JoinedServerOptions
    {
        Managers = { manager.Address! }, JoinToken = (await manager.Operator().IssueJoinTokenAsync(new IssueJoinTokenRequest())).Secret, Name = "producer",
        Listen = { "tcp:127.0.0.1:0" }, RegionSize = 64 * MiB, MaxThreads = 1, LendAuto = true, Reserve = 256 * MiB, HostMemory = host,
        CallTimeout = TimeSpan.FromSeconds(5),
    });

    [Fact]
    public void ThePolicyLendsTheHeadroomLessTheReserveAndGivesBackInTimeOrDropsPastHalfTheReserve()
    {
        var policy = new LendPolicy(reserve: 400 * MiB, regionSize: 64 * MiB, cap: 10L << 30);
        var t = DateTimeOffset.UnixEpoch;
        // 1 GiB spare, 100 MiB of it held by the server already: 1 GiB + 100 MiB - 400 MiB, in whole regions.
        var first = policy.Decide(new HostMemoryReading(8L << 30, 1024 * MiB, 100 * MiB, "t"), 0, t);
        Assert.Equal(704 * MiB, first.Limit);
        Assert.Equal(0, first.GiveBack);
        // The host takes memory at 100 MiB/s: what is lent beyond the new limit goes back before half the reserve is gone.
        var falling = policy.Decide(new HostMemoryReading(8L << 30, 924 * MiB, 100 * MiB, "t"), 640 * MiB, t.AddSeconds(1));
        Assert.Equal(576 * MiB, falling.Limit);
        Assert.Equal(64 * MiB, falling.GiveBack);
        Assert.False(falling.DropNow);
        Assert.InRange(falling.By!.Value - t.AddSeconds(1), LendPolicy.MinDeadline, LendPolicy.MaxDeadline);
        // Past half the reserve: drop now.
        var late = policy.Decide(new HostMemoryReading(8L << 30, 150 * MiB, 100 * MiB, "t"), 640 * MiB, t.AddSeconds(2));
        Assert.True(late.DropNow);
        Assert.Equal(0, late.Limit);
        // Never beyond the cap, never below zero.
        Assert.Equal(128 * MiB, new LendPolicy(0, 64 * MiB, 128 * MiB).Decide(new HostMemoryReading(8L << 30, 4L << 30, 0, "t"), 0, t).Limit);
        Assert.Equal(0, new LendPolicy(1L << 30, 64 * MiB, 1L << 40).Decide(new HostMemoryReading(8L << 30, 1, 0, "t"), 0, t).Limit);
    }

    [Fact]
    public async Task AHostThatTakesMemoryBackHasItsCacheReclaimedThenDropped()
    {
        await using var manager = await StartManagerAsync();
        var host = new FakeHost(8L << 30, 1024 * MiB);
        await using var joined = await JoinAsync(manager, host);
        Assert.Equal(768 * MiB, joined.Lending);
        string serverId = joined.ServerId;
        var ops = manager.Operator();
        var alice = manager.Tenant(AliceKey);
        var cache = (await alice.AllocateAsync(new AllocateRequest { Capacity = (ulong)(128 * MiB), Transport = "tcp", RecordSize = 8, Duration = Duration.FromTimeSpan(TimeSpan.FromHours(1)) })).Cache;
        Assert.Equal(serverId, cache.Servers.Single().ServerId);
        await using var client = await OpenAsync(cache);
        await client.WriteAsync(0, new byte[] { 1, 2, 3 });
        using var events = alice.WatchEvents(new WatchEventsRequest { CacheId = cache.CacheId, FromSequence = 1 });

        async Task<CacheEvent> Next(CacheEvent.KindOneofCase kind)
        {
            using var timeout = new System.Threading.CancellationTokenSource(TimeSpan.FromSeconds(10));
            while (await events.ResponseStream.MoveNext(timeout.Token))
                if (events.ResponseStream.Current.KindCase == kind)
                    return events.ResponseStream.Current;
            throw new InvalidOperationException($"no {kind}");
        }

        // The host's processes grow: 300 MiB left, less than the reserve and the cache: the manager reclaims the cache,
        // with a deadline, and the server takes nothing new.
        var clock = Stopwatch.StartNew();
        Volatile.Write(ref host.Headroom, 300 * MiB);
        var notice = await Next(CacheEvent.KindOneofCase.ReclaimNotice);
        Assert.Equal(serverId, notice.ReclaimNotice.ServerId);
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(3), $"the reclaim notice came {clock.Elapsed.TotalSeconds:0.00} s after the host needed the memory");
        Assert.True(notice.ReclaimNotice.Deadline.ToDateTimeOffset() > DateTimeOffset.UtcNow);
        Assert.Equal(ServerState.Reclaiming, (await ops.ListServersAsync(new ListServersRequest())).Servers.Single(s => s.ServerId == serverId).State);
        Assert.Equal(0, joined.Lending);  // 300 MiB less the 256 MiB reserve: not one region

        // Faster than it can move: past half the reserve the server drops the cache; its client is told, the manager fails it.
        Volatile.Write(ref host.Headroom, 100 * MiB);
        var failed = await Next(CacheEvent.KindOneofCase.ServerFailed);
        Assert.Contains("its host needed", failed.ServerFailed.Reason);
        var gone = await Assert.ThrowsAnyAsync<RemoteCacheException>(async () =>
        {
            for (int i = 0; i < 200; i++, await Task.Delay(20))
                await client.ReadAsync(0, new byte[3]);
        });
        Assert.True(gone.Status == RemoteCacheStatus.Expired, gone.Message);
    }

    [Fact]
    public async Task AFreeServerWhoseHostHasLessThanItsTypeTakesNoCacheUntilTheHostHasItAgain()
    {
        await using var manager = await StartManagerAsync();
        var host = new FakeHost(8L << 30, 1024 * MiB);
        await using var joined = await JoinAsync(manager, host);
        Assert.Equal("small", joined.VmType);  // 256 MiB
        var ops = manager.Operator();
        var request = new AllocateRequest { Capacity = (ulong)(128 * MiB), Transport = "tcp", RecordSize = 8 };

        async Task<Server> Until(Func<Server, bool> done)
        {
            for (var deadline = DateTime.UtcNow.AddSeconds(10); ; await Task.Delay(50))
            {
                var server = (await ops.ListServersAsync(new ListServersRequest())).Servers.Single();
                if (done(server) || DateTime.UtcNow > deadline)
                    return server;
            }
        }

        Volatile.Write(ref host.Headroom, 400 * MiB);  // 144 MiB to spare: less than a small lends
        Assert.Equal(ServerState.Draining, (await Until(s => s.State == ServerState.Draining)).State);
        var refused = await Assert.ThrowsAsync<RpcException>(() => manager.Tenant(AliceKey).AllocateAsync(request).ResponseAsync);
        Assert.Equal(StatusCode.ResourceExhausted, refused.StatusCode);
        Volatile.Write(ref host.Headroom, 1024 * MiB);
        Assert.Equal(ServerState.Ready, (await Until(s => s.State == ServerState.Ready)).State);
        var cache = (await manager.Tenant(AliceKey).AllocateAsync(request)).Cache;
        Assert.Equal(joined.ServerId, cache.Servers.Single().ServerId);
        // An operator's drain is the operator's: the host having memory to spare does not undo it.
        await ops.DrainServerAsync(new DrainServerRequest { ServerId = joined.ServerId });
        await manager.Tenant(AliceKey).DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
        await Task.Delay(1000);  // heartbeats with memory to spare
        Assert.Equal(ServerState.Draining, (await ops.ListServersAsync(new ListServersRequest())).Servers.Single().State);
    }

    [Fact]
    public async Task AReserveLargerThanTheHostIsAClearErrorAtStart()
    {
        await using var manager = await StartManagerAsync();
        var small = new FakeHost(256 * MiB, 200 * MiB);
        var e = await Assert.ThrowsAsync<ArgumentException>(() => JoinAsync(manager, small));
        Assert.Contains("no less than all the host has", e.Message);
        var busy = new FakeHost(8L << 30, 300 * MiB);  // 44 MiB beyond the reserve: not a region
        var none = await Assert.ThrowsAsync<ArgumentException>(() => JoinAsync(manager, busy));
        Assert.Contains("not one region", none.Message);
        Assert.Empty((await manager.Operator().ListServersAsync(new ListServersRequest())).Servers);
    }
}

/// <summary>Extremes from the network on the membership calls: refused by name, nothing registered, the manager serving on.</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class MembershipBoundsTests
{
    [Fact]
    public async Task ExtremeNumbersAndHugeStringsAreRefusedAndRegisterNothing()
    {
        await using var manager = new TestManager(allocator: "static");
        await manager.StartAsync();
        string token = (await manager.Operator().IssueJoinTokenAsync(new IssueJoinTokenRequest())).Secret;
        var members = new ServerMembership.ServerMembershipClient(Grpc.Net.Client.GrpcChannel.ForAddress(manager.Address!).CreateCallInvoker()
            .Intercept(m => { m.Add("authorization", "Bearer " + token); return m; }));
        var good = new JoinRequest { Name = "x", Cores = 1, Memory = (ulong)(256 * MiB), RegionBytes = (ulong)(64 * MiB) };

        async Task Refused(JoinRequest request, StatusCode status)
        {
            var e = await Assert.ThrowsAsync<RpcException>(() => members.JoinAsync(request).ResponseAsync);
            Assert.Equal(status, e.StatusCode);
            Assert.True(e.Status.Detail.Length < 2000, "a refusal quotes a short prefix");
        }

        await Refused(new JoinRequest(good) { Memory = ulong.MaxValue }, StatusCode.InvalidArgument);
        await Refused(new JoinRequest(good) { Memory = 1UL << 63 }, StatusCode.InvalidArgument);
        await Refused(new JoinRequest(good) { Memory = 0 }, StatusCode.FailedPrecondition);
        await Refused(new JoinRequest(good) { RegionBytes = ulong.MaxValue }, StatusCode.InvalidArgument);
        await Refused(new JoinRequest(good) { RegionBytes = 0 }, StatusCode.FailedPrecondition);
        await Refused(new JoinRequest(good) { Cores = uint.MaxValue }, StatusCode.InvalidArgument);
        await Refused(new JoinRequest(good) { Cores = 0 }, StatusCode.InvalidArgument);
        await Refused(new JoinRequest(good) { Name = new string('a', 1 << 20) }, StatusCode.InvalidArgument);
        var labels = new JoinRequest(good);
        labels.Labels.Add("zone", new string('z', 1 << 20));
        await Refused(labels, StatusCode.InvalidArgument);
        var ops = manager.Operator();
        var ttl = await Assert.ThrowsAsync<RpcException>(() => ops.IssueJoinTokenAsync(new IssueJoinTokenRequest { Ttl = new Duration { Seconds = long.MaxValue } }).ResponseAsync);
        Assert.Equal(StatusCode.InvalidArgument, ttl.StatusCode);
        var negative = await Assert.ThrowsAsync<RpcException>(() => ops.IssueJoinTokenAsync(new IssueJoinTokenRequest { Ttl = new Duration { Seconds = -1 } }).ResponseAsync);
        Assert.Equal(StatusCode.InvalidArgument, negative.StatusCode);

        // A joined server's heartbeats at the extremes: a 1 MB body, sequence 2^64 - 1 then anything after it, sizes of 2^64 - 1.
        var grant = await members.JoinAsync(good);
        byte[] key = grant.AdmissionKey.ToByteArray();
        var huge = new HeartbeatRequest { ServerId = grant.ServerId, Body = ByteString.CopyFrom(new byte[1 << 20]) };
        huge.Mac = ByteString.CopyFrom(HeartbeatMac.Compute(key, grant.ServerId, huge.Body.Span));
        var big = await Assert.ThrowsAsync<RpcException>(() => members.HeartbeatAsync(huge).ResponseAsync);
        Assert.Equal(StatusCode.InvalidArgument, big.StatusCode);
        var body = new HeartbeatBody { Sequence = ulong.MaxValue, Sent = Timestamp.FromDateTimeOffset(DateTimeOffset.UtcNow), MemoryLimit = ulong.MaxValue, MemoryLent = ulong.MaxValue, GiveBack = ulong.MaxValue };
        var max = new HeartbeatRequest { ServerId = grant.ServerId, Body = body.ToByteString() };
        max.Mac = ByteString.CopyFrom(HeartbeatMac.Compute(key, grant.ServerId, max.Body.Span));
        var endpointless = await Assert.ThrowsAsync<RpcException>(() => members.HeartbeatAsync(max).ResponseAsync);  // a joining server must name its endpoints
        Assert.Equal(StatusCode.InvalidArgument, endpointless.StatusCode);
        var replay = await Assert.ThrowsAsync<RpcException>(() => members.HeartbeatAsync(max).ResponseAsync);
        Assert.True(replay.StatusCode is StatusCode.InvalidArgument or StatusCode.Unauthenticated, replay.Status.ToString());
        Assert.Equal(ServerState.Joining, (await ops.ListServersAsync(new ListServersRequest())).Servers.Single().State);
    }
}
