using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.ManagedClientKit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// The managed client's dynamics (Redy §6.2) end to end, on real remotecache-server processes: a reclaimed server's
/// regions moved to a replacement under verified writes, a failed one replaced and refilled, a deadline too short,
/// a second client of the cache following the first one's move, a mover that vanishes, no server to rent for a while.
/// </summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class ReplacementTests
{
    // 384 MiB: two small VMs of 3 regions of 64 MiB each.
    private const long TwoServers = 384 * MiB;
    private const int Slots = 4096;

    [Fact]
    public async Task AReclaimNoticeMovesTheServersRegionsToAReplacementWithoutLosingAWrite()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        // Two of the server's three regions move as one batch (one fence and one copy call), the third alone.
        // The client maps the replacement's pages while they are copied (shm): no write lost, no wrong read either way.
        await using var client = manager.ManagedClient(configure: o =>
        {
            o.MoveBatchBytes = 128 * MiB;
            o.MapMovedRegionsAhead = true;
        });
        // A 3 s lease, renewed every 1.5 s: renewals after the move present capabilities to the replacement.
        var cache = await client.CreateAsync(Request(TwoServers, lease: TimeSpan.FromSeconds(3)));
        var log = new EventLog(cache);
        var data = cache.Client;
        string reclaimed = cache.Info.Servers[1].ServerId;
        await MarkEveryMiBAsync(data);

        using var stop = new CancellationTokenSource();
        var writers = Enumerable.Range(0, 2).Select(w => Task.Run(() => StampAsync(data, w, stop.Token))).ToList();
        await Task.Delay(300);
        await ReclaimAsync(manager, reclaimed, TimeSpan.FromSeconds(60));
        await EventuallyAsync(() => log.Snapshot().OfType<ServerReplacedEvent>().Any(), "the reclaimed server was replaced");
        // Writes go on to the moved regions, now on the replacement, until the lease the servers had before the first
        // renewal after the move has ended: they are served only if that renewal reached the replacement too.
        await EventuallyAsync(() => log.Snapshot().SkipWhile(e => e is not ServerReplacedEvent).OfType<LeaseRenewedEvent>().Any(), "a renewal after the move");
        var renewed = log.Snapshot().SkipWhile(e => e is not ServerReplacedEvent).OfType<LeaseRenewedEvent>().First();
        await Task.Delay(renewed.Time + TimeSpan.FromSeconds(3.2) - DateTimeOffset.UtcNow);
        stop.Cancel();
        var written = await Task.WhenAll(writers);

        await CheckMarksAsync(data);
        await CheckStampsAsync(data, written);
        var events = log.Snapshot();
        var replaced = events.OfType<ServerReplacedEvent>().Single();
        Assert.Equal((reclaimed, 3, 3, 3), (replaced.ServerId, replaced.FirstRegion, replaced.Regions, replaced.RegionsMoved));
        var moves = events.OfType<RegionMovedEvent>().ToList();
        Assert.Equal(new[] { 3, 4, 5 }, moves.Select(m => m.Region));
        Assert.All(moves, m => Assert.False(m.Lost));
        Assert.Empty(events.OfType<RegionsLostEvent>());
        Assert.True(events.FindIndex(e => e is ReclaimNoticeEvent) < events.FindIndex(e => e is RegionMovedEvent), "the notice comes before the moves");
        Assert.Equal(replaced.Replacement, cache.Info.Servers[1].ServerId);
        Assert.Equal(replaced.ServerIds, cache.Info.Servers.Select(s => s.ServerId));
        Assert.Empty((await manager.Tenant(AliceKey).GetCacheAsync(new GetCacheRequest { CacheId = cache.CacheId })).Replacements);
        // The reclaimed server was let go at once (the local allocator stops it), long before its deadline.
        var servers = (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers;
        Assert.DoesNotContain(servers, s => s.ServerId == reclaimed);
        Assert.Equal(cache.CacheId, servers.Single(s => s.ServerId == replaced.Replacement).CacheId);
        Assert.Equal(2, data.ServerCount);
        Assert.Equal(TwoServers, data.Capacity);
        Assert.True(written.Sum(w => w.Count) > 100, "the writers ran");
        await cache.DeleteAsync();
    }

    [Fact]
    public async Task AFailedServerIsReplacedAndItsRegionsAreRefilledFromPopulateFrom()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        await using var client = manager.ManagedClient(configure: o => o.MoveBatchBytes = 192 * MiB);  // all three regions at once
        string path = Path.Combine(manager.StateDirectory, "source.bin");
        var source = new byte[300 * MiB];  // all of the first server's regions, and 1.7 of the second's
        new Random(11).NextBytes(source);
        await File.WriteAllBytesAsync(path, source);
        var request = Request(TwoServers);
        request.PopulateFrom = path;
        var cache = await client.CreateAsync(request);
        var log = new EventLog(cache);
        string failed = cache.Info.Servers[1].ServerId;

        Assert.True(StopServer(failed));
        await EventuallyAsync(() => log.Snapshot().OfType<ServerReplacedEvent>().Any(), "the failed server was replaced");
        await cache.Populated.WaitAsync(Patience);  // the refill of the lost regions
        await EventuallyAsync(() => log.Snapshot().OfType<PopulateProgressEvent>().Any(p => p.Done == p.Total && p.Total == source.Length - 192 * MiB),
                              "the refill's last progress event");

        var events = log.Snapshot();
        Assert.Equal(failed, events.OfType<ServerFailedEvent>().Single().ServerId);
        var lost = events.OfType<RegionsLostEvent>().Single();
        Assert.Equal((3, 3), (lost.FirstRegion, lost.Regions));
        var replaced = events.OfType<ServerReplacedEvent>().Single();
        Assert.Equal(0, replaced.RegionsMoved);
        Assert.Equal(new[] { 3, 4, 5 }, replaced.LostRegions);
        Assert.All(events.OfType<RegionMovedEvent>(), m => Assert.True(m.Lost));
        Assert.True(events.FindIndex(e => e is RegionsLostEvent) < events.FindLastIndex(e => e is PopulateProgressEvent));
        await VerifyAsync(cache.Client, source, source.Length);
        await WriteAndVerifyAsync(cache.Client, TwoServers - 4096, 4096);
        Assert.NotEqual(failed, cache.Info.Servers[1].ServerId);
        await cache.DeleteAsync();
    }

    [Fact]
    public async Task AnEncryptedCacheIsPlacedWithItsTrailersAndAFailedServersBlocksAreRefilledWhole()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var keys = new DerivedKeyProvider(Enumerable.Range(0, 32).Select(i => (byte)(i + 40)).ToArray());
        await using var client = manager.ManagedClient(configure: o =>
        {
            o.MoveBatchBytes = 192 * MiB;
            o.Cache.EncryptionKeyProvider = keys;
        });
        string path = Path.Combine(manager.StateDirectory, "source.bin");
        var source = new byte[300 * MiB + 1234];  // not whole blocks: the fill completes the last one with zeros
        new Random(12).NextBytes(source);
        await File.WriteAllBytesAsync(path, source);
        var request = Request(source.Length);
        request.PopulateFrom = path;
        var cache = await client.CreateAsync(request);
        var log = new EventLog(cache);
        Assert.Equal(4096, cache.Client.EncryptionBlockSize);
        Assert.Equal(TwoServers, cache.Info.Capacity);  // the manager was asked for the trailers too
        Assert.True(cache.Client.Capacity >= source.Length && cache.Client.Capacity < TwoServers, $"client capacity {cache.Client.Capacity}");
        await VerifyAsync(cache.Client, source, source.Length);

        string failed = cache.Info.Servers[1].ServerId;
        Assert.True(StopServer(failed));
        await EventuallyAsync(() => log.Snapshot().OfType<ServerReplacedEvent>().Any(), "the failed server was replaced");
        await EventuallyAsync(() => log.Snapshot().OfType<PopulateProgressEvent>().Count(p => p.Done == p.Total) >= 2, "the refill's last progress event");
        await cache.Populated.WaitAsync(Patience);
        Assert.All(log.Snapshot().OfType<PopulateProgressEvent>(), p => Assert.Null(p.Error));
        Assert.Equal((3, 3), log.Snapshot().OfType<RegionsLostEvent>().Select(l => (l.FirstRegion, l.Regions)).Single());
        // Every block the lost server held, the one across the servers' boundary too, was refilled and opens.
        await VerifyAsync(cache.Client, source, source.Length);
        await WriteAndVerifyAsync(cache.Client, cache.Client.Capacity - 4096, 4096);
        await cache.DeleteAsync();
    }

    [Fact]
    public async Task ADeadlineTooShortForTheMoveReportsTheRegionsNotYetMovedAsLost()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        // Paced to 32 MiB/s, a 64 MiB region takes 2 s to copy: a 3 s notice lets one of three move.
        await using var client = manager.ManagedClient(configure: o => o.MoveMaxMibPerSecond = 32);
        var cache = await client.CreateAsync(Request(TwoServers));
        var log = new EventLog(cache);
        var data = cache.Client;
        string reclaimed = cache.Info.Servers[1].ServerId;
        await MarkEveryMiBAsync(data);

        await ReclaimAsync(manager, reclaimed, TimeSpan.FromSeconds(3));
        await EventuallyAsync(() => log.Snapshot().OfType<ServerReplacedEvent>().Any(), "the reclaimed server was replaced");

        var events = log.Snapshot();
        var replaced = events.OfType<ServerReplacedEvent>().Single();
        Assert.InRange(replaced.RegionsMoved, 1, 2);
        var moved = events.OfType<RegionMovedEvent>().Where(m => !m.Lost).Select(m => m.Region).ToList();
        Assert.Equal(Enumerable.Range(3, replaced.RegionsMoved), moved);
        var lost = events.OfType<RegionsLostEvent>().Single();
        Assert.Equal((3 + replaced.RegionsMoved, 3 - replaced.RegionsMoved), (lost.FirstRegion, lost.Regions));
        Assert.Equal(Enumerable.Range(lost.FirstRegion, lost.Regions), replaced.LostRegions);
        const long region = 64 * MiB;
        await CheckMarksAsync(data, 0, (3 + replaced.RegionsMoved) * region);  // the first server's and the moved ones
        // A lost region is served by the replacement (its content is whatever part of the copy was done).
        await WriteAndVerifyAsync(data, lost.FirstRegion * region, 4096);
        await WriteAndVerifyAsync(data, TwoServers - 4096, 4096);
        await cache.DeleteAsync();
    }

    [Fact]
    public async Task AnotherClientOfTheCacheFollowsTheMoveAndReadsWhatTheMoverWrote()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        await using var first = manager.ManagedClient();
        await using var second = manager.ManagedClient();
        var mover = await first.CreateAsync(Request(TwoServers));
        var follower = await second.OpenAsync(mover.CacheId);
        var moverLog = new EventLog(mover);
        var followerLog = new EventLog(follower);
        await MarkEveryMiBAsync(mover.Client);

        await ReclaimAsync(manager, mover.Info.Servers[1].ServerId, TimeSpan.FromSeconds(60));
        await EventuallyAsync(() => moverLog.Snapshot().OfType<ServerReplacedEvent>().Any() && followerLog.Snapshot().OfType<ServerReplacedEvent>().Any(),
                              "both clients saw the replacement");
        await EventuallyAsync(() => follower.Info.Servers[1].ServerId == mover.Info.Servers[1].ServerId, "the follower switched");

        // One of the two moved the regions (whichever asked first); the other only switched.
        int moves = moverLog.Snapshot().OfType<RegionMovedEvent>().Count() + followerLog.Snapshot().OfType<RegionMovedEvent>().Count();
        Assert.Equal(3, moves);
        await CheckMarksAsync(follower.Client);
        var stamp = BitConverter.GetBytes(0x5eed_0f_f011_0123L);
        await mover.Client.WriteAsync(300 * MiB + 8, stamp);
        var back = new byte[8];
        await follower.Client.ReadAsync(300 * MiB + 8, back);
        Assert.Equal(stamp, back);  // both reach the replacement now
        await mover.DeleteAsync();
    }

    /// <summary>
    /// Two clients of a cache whose server is reclaimed with a notice too short for the move: the one that did not move
    /// the regions learns from the manager which were lost, reports them (RegionsLostEvent, ContentLost) before it
    /// serves them from the replacement, and still reads the moved ones.
    /// </summary>
    [Fact]
    public async Task AClientFollowingAMoveReportsTheRegionsTheMoverLost()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        // Paced to 32 MiB/s, a 64 MiB region takes 2 s to copy: a 3 s notice lets one or two of three move.
        await using var first = manager.ManagedClient(configure: o => o.MoveMaxMibPerSecond = 32);
        await using var second = manager.ManagedClient(configure: o => o.MoveMaxMibPerSecond = 32);
        var a = await first.CreateAsync(Request(TwoServers));
        var b = await second.OpenAsync(a.CacheId);
        var logs = new[] { new EventLog(a), new EventLog(b) };
        var contentLost = new[] { new List<(long Address, long Length)>(), new List<(long Address, long Length)>() };
        a.Client.ContentLost += (_, e) => { lock (contentLost[0]) contentLost[0].Add((e.Address, e.Length)); };
        b.Client.ContentLost += (_, e) => { lock (contentLost[1]) contentLost[1].Add((e.Address, e.Length)); };
        await MarkEveryMiBAsync(a.Client);

        await ReclaimAsync(manager, a.Info.Servers[1].ServerId, TimeSpan.FromSeconds(3));
        await EventuallyAsync(() => logs.All(l => l.Snapshot().OfType<RegionsLostEvent>().Any()), "both clients reported the lost regions");

        int mover = logs[0].Snapshot().OfType<RegionMovedEvent>().Any() ? 0 : 1, follower = 1 - mover;
        Assert.Empty(logs[follower].Snapshot().OfType<RegionMovedEvent>());
        var replaced = logs[mover].Snapshot().OfType<ServerReplacedEvent>().Single();
        Assert.InRange(replaced.RegionsMoved, 1, 2);
        var lost = logs[follower].Snapshot().OfType<RegionsLostEvent>().Single();
        Assert.Equal(logs[mover].Snapshot().OfType<RegionsLostEvent>().Single() with { Time = lost.Time, Reason = lost.Reason }, lost);
        Assert.Equal(Enumerable.Range(lost.FirstRegion, lost.Regions), replaced.LostRegions);
        const long region = 64 * MiB;
        Assert.Equal(Enumerable.Range(lost.FirstRegion, lost.Regions).Select(r => (r * region, region)), contentLost[follower]);
        Assert.Equal(contentLost[mover], contentLost[follower]);
        var handles = new[] { a, b };
        await CheckMarksAsync(handles[follower].Client, 0, (3 + replaced.RegionsMoved) * region);  // the first server's and the moved ones
        // The manager describes the replacement with what it lost, for a client that follows later.
        var described = await manager.Tenant(AliceKey).GetCacheAsync(new GetCacheRequest { CacheId = a.CacheId });
        Assert.Equal(replaced.ServerId, described.Servers[1].Replaced);
        Assert.Equal(replaced.LostRegions.Select(r => (uint)(r - 3)), described.Servers[1].LostRegions);
        await a.DeleteAsync();
    }

    /// <summary>
    /// A mover that completes a replacement saying nothing was lost, having copied one region of three: the manager reports
    /// the two it did not copy as lost, and refuses a lost region the server does not have. A copy asked for before the
    /// mover connected to the replacement is refused with a reason.
    /// </summary>
    [Fact]
    public async Task TheManagerReportsAsLostEveryRegionItDidNotCopy()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        await using var client = manager.ManagedClient(configure: o => o.ReplaceServers = false);
        var cache = await client.CreateAsync(Request(TwoServers));
        string reclaimed = cache.Info.Servers[1].ServerId;
        var alice = manager.Tenant(AliceKey);
        await ReclaimAsync(manager, reclaimed, TimeSpan.FromSeconds(60));
        var request = new ReplacementRequest { CacheId = cache.CacheId, ServerId = reclaimed, Mover = "careless" };
        var begun = await alice.BeginReplacementAsync(request);
        string replacement = begun.ServerId;
        var move = new MoveRegionRequest { CacheId = cache.CacheId, ServerId = reclaimed, Mover = "careless", SourceRegion = 1, TargetRegion = 1 };
        var early = await Assert.ThrowsAsync<Grpc.Core.RpcException>(async () => await alice.MoveRegionAsync(move));
        Assert.Equal(Grpc.Core.StatusCode.FailedPrecondition, early.StatusCode);
        Assert.Contains("connect to the replacement", early.Status.Detail);
        await new RemoteCacheMover(cache.Client).AddHolderAsync(begun.Endpoint, begun.Capability, (int)begun.Regions, CancellationToken.None);  // creates the cache there
        var past = move.Clone();
        past.Regions = 3;  // 1..3 of a server's 0..2
        var beyond = await Assert.ThrowsAsync<Grpc.Core.RpcException>(async () => await alice.MoveRegionAsync(past));
        Assert.Equal(Grpc.Core.StatusCode.InvalidArgument, beyond.StatusCode);
        Assert.Contains("regions 1..+3", beyond.Status.Detail);
        await alice.MoveRegionAsync(move);

        var wrong = request.Clone();
        wrong.LostRegions.Add(3);
        var refused = await Assert.ThrowsAsync<Grpc.Core.RpcException>(async () => await alice.CompleteReplacementAsync(wrong));
        Assert.Equal(Grpc.Core.StatusCode.InvalidArgument, refused.StatusCode);
        Assert.Contains("lost region 3", refused.Status.Detail);
        var completed = await alice.CompleteReplacementAsync(request);

        Assert.Equal((replacement, reclaimed), (completed.Servers[1].ServerId, completed.Servers[1].Replaced));
        Assert.Equal(new uint[] { 0, 2 }, completed.Servers[1].LostRegions);
        Assert.Equal("", completed.Servers[0].Replaced);
        await cache.DeleteAsync();
    }

    /// <summary>
    /// A mover that begins a replacement and is never heard of again: the manager gives the replacement back after
    /// ReplacementIdleTimeout and sends the reclaim notice again, and the cache's managed client, refused as long as the
    /// other mover held the move, now moves the regions; the vanished mover's calls are refused from then on.
    /// </summary>
    [Fact]
    public async Task AMoverThatVanishesHasItsReplacementGivenBackAndAnotherClientMovesTheRegions()
    {
        await using var manager = new TestManager(warm: 0);
        manager.Options.ReplacementIdleTimeout = TimeSpan.FromSeconds(1);
        await manager.StartAsync();
        await using var client = manager.ManagedClient();
        var cache = await client.CreateAsync(Request(TwoServers));
        var log = new EventLog(cache);
        string reclaimed = cache.Info.Servers[1].ServerId;
        await MarkEveryMiBAsync(cache.Client);
        var alice = manager.Tenant(AliceKey);
        var ghost = new ReplacementRequest
        {
            CacheId = cache.CacheId, ServerId = reclaimed, Mover = "ghost",
            Slo = new V1.Slo { ReadLatency = Google.Protobuf.WellKnownTypes.Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)), Throughput = 1e5 },
        };
        string ghostServer = (await alice.BeginReplacementAsync(ghost)).ServerId;

        await ReclaimAsync(manager, reclaimed, TimeSpan.FromSeconds(60));
        await EventuallyAsync(() => log.Snapshot().OfType<ServerReplacedEvent>().Any(), "the managed client replaced the server once the ghost's replacement was given back");

        var events = log.Snapshot();
        Assert.Equal(2, events.OfType<ReclaimNoticeEvent>().Count(n => n.ServerId == reclaimed));  // the notice, and again when the ghost's move was given back
        var replaced = events.OfType<ServerReplacedEvent>().Single();
        Assert.Equal((reclaimed, 3), (replaced.ServerId, replaced.RegionsMoved));
        Assert.NotEqual(ghostServer, replaced.Replacement);
        await CheckMarksAsync(cache.Client);
        var refused = await Assert.ThrowsAsync<Grpc.Core.RpcException>(async () =>
            await alice.MoveRegionAsync(new MoveRegionRequest { CacheId = cache.CacheId, ServerId = reclaimed, Mover = "ghost" }));
        Assert.Equal(Grpc.Core.StatusCode.FailedPrecondition, refused.StatusCode);
        var servers = (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers;
        Assert.DoesNotContain(servers, s => s.ServerId == ghostServer && s.CacheId == cache.CacheId);
        Assert.Empty((await alice.GetCacheAsync(new GetCacheRequest { CacheId = cache.CacheId })).Replacements);
        await cache.DeleteAsync();
    }

    /// <summary>
    /// A static pool with no free server when the notice comes: the manager refuses the replacement (no server to rent),
    /// the managed client asks again with a growing wait, and moves the regions once an operator adds a server.
    /// </summary>
    [Fact]
    public async Task WhenNoServerCanBeRentedTheClientAsksAgainUntilOneIsAdded()
    {
        await using var manager = new TestManager(allocator: "static");
        await manager.StartAsync();
        using var first = StartPoolServer(manager);
        using var second = StartPoolServer(manager);
        await AddToPoolAsync(manager, first);
        await using var client = manager.ManagedClient();
        var cache = await client.CreateAsync(Request(128 * MiB));
        var log = new EventLog(cache);
        Assert.Equal(first.ServerId, cache.Info.Servers.Single().ServerId);
        await MarkEveryMiBAsync(cache.Client);

        await ReclaimAsync(manager, first.ServerId, TimeSpan.FromSeconds(60));
        await EventuallyAsync(() => log.Snapshot().OfType<ReclaimNoticeEvent>().Any(), "the notice arrived");
        await Task.Delay(1500);  // a few refused attempts
        Assert.Empty(log.Snapshot().OfType<ServerReplacedEvent>());
        await AddToPoolAsync(manager, second);
        await EventuallyAsync(() => log.Snapshot().OfType<ServerReplacedEvent>().Any(), "the server was replaced once the pool had one to rent");

        var replaced = log.Snapshot().OfType<ServerReplacedEvent>().Single();
        Assert.Equal((first.ServerId, second.ServerId, replaced.Regions), (replaced.ServerId, replaced.Replacement, replaced.RegionsMoved));
        await CheckMarksAsync(cache.Client);
        await cache.DeleteAsync();
    }

    private static RemoteCacheServer StartPoolServer(TestManager manager) => RemoteCacheServer.Start(new RemoteCacheServerOptions
    {
        Listen = { "tcp:127.0.0.1:0" }, RegionSize = 64 * MiB, MemoryLimit = 256 * MiB, MaxThreads = 1, AdmissionKey = manager.AdmissionKey,
    });

    private static async Task AddToPoolAsync(TestManager manager, RemoteCacheServer server)
    {
        var add = new AddServerRequest { VmType = "small" };
        add.Endpoints.Add("tcp", server.Endpoints[0]);
        await manager.Operator().AddServerAsync(add);
    }

    [Fact]
    public async Task WithReplaceServersOffTheNoticeIsOnlyHandedOn()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        await using var client = manager.ManagedClient(configure: o => o.ReplaceServers = false);
        var cache = await client.CreateAsync(Request(TwoServers));
        var log = new EventLog(cache);
        string reclaimed = cache.Info.Servers[1].ServerId;
        await ReclaimAsync(manager, reclaimed, TimeSpan.FromSeconds(60));
        await EventuallyAsync(() => log.Snapshot().OfType<ReclaimNoticeEvent>().Any(), "the notice arrived");
        await Task.Delay(500);
        Assert.Empty(log.Snapshot().OfType<RegionMovedEvent>());
        var described = await manager.Tenant(AliceKey).GetCacheAsync(new GetCacheRequest { CacheId = cache.CacheId });
        Assert.Empty(described.Replacements);
        Assert.Equal(reclaimed, described.Servers[1].ServerId);
        await WriteAndVerifyAsync(cache.Client, TwoServers - 4096, 4096);
        await cache.DeleteAsync();
    }

    private static async Task ReclaimAsync(TestManager manager, string serverId, TimeSpan notice) =>
        await manager.Operator().ReclaimServerAsync(new ReclaimServerRequest { ServerId = serverId, Notice = Google.Protobuf.WellKnownTypes.Duration.FromTimeSpan(notice) });

    // Writes a pattern at the start of every MiB, to prove the content came along.
    private static async Task MarkEveryMiBAsync(RemoteCacheClient data)
    {
        for (long a = 0; a < data.Capacity; a += MiB)
            await data.WriteAsync(a, Pattern(a, 64));
    }

    private static async Task CheckMarksAsync(RemoteCacheClient data, long from = 0, long to = long.MaxValue)
    {
        var back = new byte[64];
        for (long a = from; a < Math.Min(to, data.Capacity); a += MiB)
        {
            await data.ReadAsync(a, back);
            Assert.True(back.AsSpan().SequenceEqual(Pattern(a, 64)), $"the mark at {a} was lost");
        }
    }

    // Until stopped: 8-byte stamps written all over the cache, each read back at once (a read after a write that
    // waited for a move sees it); returns the last stamp written at each address.
    private static async Task<Dictionary<long, long>> StampAsync(RemoteCacheClient data, int writer, CancellationToken stop)
    {
        var last = new Dictionary<long, long>();
        var random = new Random(writer);
        var buffer = new byte[8];
        var back = new byte[8];
        long stamp = (long)(writer + 1) << 40;
        long stride = data.Capacity / Slots;
        while (!stop.IsCancellationRequested)
        {
            long address = random.Next(Slots) * stride + 64 + writer * 8;  // past the MiB marks, apart from the other writer
            BitConverter.TryWriteBytes(buffer, ++stamp);
            await data.WriteAsync(address, buffer);
            await data.ReadAsync(address, back);
            Assert.Equal(stamp, BitConverter.ToInt64(back));
            last[address] = stamp;
        }
        return last;
    }

    private static async Task CheckStampsAsync(RemoteCacheClient data, IEnumerable<Dictionary<long, long>> written)
    {
        var back = new byte[8];
        foreach (var (address, stamp) in written.SelectMany(w => w))
        {
            await data.ReadAsync(address, back);
            Assert.True(stamp == BitConverter.ToInt64(back), $"the write of {stamp:x} at {address} was lost");
        }
    }
}
