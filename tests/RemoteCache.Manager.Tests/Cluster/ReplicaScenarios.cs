using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Threading.Tasks;
using Grpc.Core;
using Grpc.Health.V1;
using RemoteCache.Manager.Services;
using RemoteCache.Manager.V1;
using Xunit;
using Xunit.Abstractions;
using static RemoteCache.Manager.Tests.Cluster.ClusterInvariants;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// Faults with manager replicas: 3 etcd members, 3 managers (one leader), 7 cache servers, each in its own host, and the
/// test process as the client host. Each scenario runs on a fresh bed under the same load (<see cref="ReplicaLoad"/>:
/// allocate/deallocate churn, leases renewed, watchers, reshapes and a data-path client, all through the managed client
/// given the 3 managers' addresses), injects one fault, waits until every part of the load went on through it, then
/// stops the load and checks: no unexpected failure anywhere, 0 failed data-path operations, every watcher's stream
/// gapless and duplicate-free, no lease ended, alice's caches (never touched by the load) as before the fault, the
/// long-lived caches the only ones left, and the cluster consistent (no server in two caches, none leaked, servers
/// holding only what the manager granted).
/// </summary>
[Collection(ClusterCollection.Name)]
public sealed class ReplicaScenarios
{
    private static readonly TimeSpan Settle = TimeSpan.FromSeconds(15);

    // Leases of 15 s are renewed when 7.5 s are left: a renewal gap longer than that ends a lease within a scenario.
    // Not shorter: on a busy 2-core machine (the solution's other tests, other builds) a starved leader can miss its
    // etcd keep-alives and step down and back up for a few seconds with no fault injected at all.
    private static readonly TimeSpan ShortLease = TimeSpan.FromSeconds(15);

    private readonly ITestOutputHelper _output;

    public ReplicaScenarios(ITestOutputHelper output) => _output = output;

    private void Log(string text) => _output.WriteLine($"{DateTime.UtcNow:HH:mm:ss.fff} {text}");

    /// <summary>
    /// Set to N to inject each scenario's fault N times in a row on one bed under one continuous load, checking after
    /// each (the long version, a benchmark: <c>scripts/bench_bed.sh</c>); the suite injects it once.
    /// </summary>
    public const string RoundsVariable = "RC_BED_ROUNDS";

    private static int Rounds =>
        int.TryParse(Environment.GetEnvironmentVariable(RoundsVariable), out int rounds) && rounds is >= 1 and <= 100 ? rounds : 1;

    /// <summary>
    /// Runs <paramref name="fault"/> on a fresh bed under the load (<see cref="Rounds"/> times, each followed by the load's
    /// progress and the state's checks), then the final checks; the fault returns the caches it meant to change (their
    /// servers), which are left out of the before/after comparison.
    /// </summary>
    private async Task UnderLoadAsync(Func<ClusterBed, ReplicaLoad, Task<IReadOnlyList<ulong>>> fault, TimeSpan? lease = null)
    {
        var total = Stopwatch.StartNew();
        // One spare server per round beyond the first: a fault that takes a server host away takes one each round.
        var bed = await ClusterBed.StartAsync(managers: 3, servers: 7 + Rounds);
        Log($"bed up in {total.Elapsed.TotalSeconds:0.0} s: {bed.Bed.RunId}, managers {string.Join(", ", bed.Managers.Select(m => m.Origin))}");
        ReplicaLoad? load = null;
        try
        {
            load = await ReplicaLoad.StartAsync(bed, lease ?? ShortLease);
            await load.ProgressAsync(renewedAfter: null, Settle);
            var before = await SnapshotAsync(bed, AliceKey);
            Log($"load running: {load.Summary}");

            var moved = new List<ulong>();
            for (int round = 1; round <= Rounds; round++)
            {
                var faultAt = DateTime.UtcNow;
                moved.AddRange(await fault(bed, load));
                await load.ProgressAsync(faultAt, Settle + load.Lease / 2);  // each cache renewed since the fault, and watched
                Log($"load went on after the fault{(Rounds > 1 ? $" (round {round} of {Rounds})" : "")}: {load.Summary}");
                if (round < Rounds)
                {
                    // Between rounds, what the load and the state must hold at any time (the streams are checked at the end).
                    Assert.True(load.Unexpected.IsEmpty, "unexpected failures: " + string.Join(" | ", load.Unexpected));
                    Assert.True(load.DataLoad.Failures == 0 && load.DataLoad.Mismatches == 0, load.DataLoad.Summary);
                    Assert.True(load.Remote.Failures == 0 && load.Remote.Mismatches == 0, load.Remote.Summary);
                    var now = await SnapshotAsync(bed, AliceKey);
                    Holds(NothingLostOrDuplicated(Without(before, moved), Without(now, moved), renewing: true), now);
                }
            }

            await load.StopAsync();
            Assert.True(load.Unexpected.IsEmpty, "unexpected failures: " + string.Join(" | ", load.Unexpected));
            Assert.True(load.DataLoad.Failures == 0 && load.DataLoad.Mismatches == 0, load.DataLoad.Summary);
            Assert.True(load.Remote.Failures == 0 && load.Remote.Mismatches == 0, load.Remote.Summary);
            var violations = await load.CheckAsync();
            Assert.True(violations.Count == 0, "load: " + string.Join("; ", violations));
            int expiring = load.Watchers.Sum(w => w.Count<LeaseExpiringEvent>());
            Log($"longest renewal gap {load.LongestRenewalGap.TotalSeconds:0.0} s (a lease of {load.Lease.TotalSeconds:0} s is renewed every " +
                $"{load.Lease.TotalSeconds / 2:0} s); {expiring} LeaseExpiring events; {load.Warnings.Count} client warnings");

            // The long-lived caches are all that is left (no churned cache left behind or allocated twice), consistent,
            // and alice's as they were but for the leases, renewed meanwhile.
            var longLived = load.LongLivedIds.ToArray();
            var end = await EventuallyAsync(() => SnapshotAsync(bed, AliceKey, BobKey),
                s => Consistent(s, longLived).Concat(s.Caches.Select(c => c.CacheId).Order().SequenceEqual(longLived.Order())
                    ? Array.Empty<string>() : new[] { $"caches listed: {string.Join(", ", s.Caches.Select(c => c.CacheId))}; expected {string.Join(", ", longLived)}" }),
                Settle);
            Assert.All(end.Caches, c => Assert.True(c.Lease.Expires.ToDateTime() > DateTime.UtcNow, $"cache {c.CacheId}'s lease ended at {c.Lease.Expires}"));
            var after = await SnapshotAsync(bed, AliceKey);
            Holds(NothingLostOrDuplicated(Without(before, moved), Without(after, moved), renewing: true), after);
            Log($"checked; {total.Elapsed.TotalSeconds:0.0} s in all");
        }
        catch
        {
            if (load is not null)
            {
                _output.WriteLine($"load: {load.Summary}; unexpected: {string.Join(" | ", load.Unexpected)}");
                _output.WriteLine($"managed clients' last warnings:\n{string.Join("\n", load.Warnings.Lines.TakeLast(40))}");
            }
            _output.WriteLine(bed.Bed.Diagnostics());
            throw;
        }
        finally
        {
            if (load is not null)
                await load.DisposeAsync();
            await bed.DisposeAsync();
        }
    }

    // Through any running manager (followers serve reads from the store); the caches of the tenants given.
    private static async Task<ClusterSnapshot> SnapshotAsync(ClusterBed bed, params string[] tenants)
    {
        var via = bed.Managers.First(m => m.Running);
        return await TakeAsync(via, bed.Servers, tenants);
    }

    private static ClusterSnapshot Without(ClusterSnapshot s, IReadOnlyList<ulong> caches) =>
        s with { Caches = s.Caches.Where(c => !caches.Contains(c.CacheId)).ToList() };

    /// <summary>
    /// (a) The leader's manager killed -9 under allocations, renewals, watches and reshapes: another leads within
    /// seconds, every call the load makes meanwhile is carried over by the managed client, and the killed one, restarted,
    /// follows. Records how long the managers could not allocate (kill → the first Create that completed).
    /// </summary>
    [ClusterFact]
    public Task TheLeaderKilledUnderLoad() => UnderLoadAsync(async (bed, load) =>
    {
        var leader = await bed.LeaderAsync(Settle);
        var killedAt = DateTime.UtcNow;
        await leader.KillAsync();
        Log($"killed the leader {leader.Host.Name}");
        var next = await bed.LeaderAsync(Settle);
        var elected = DateTime.UtcNow;
        var allocated = await load.FirstAllocationAfterAsync(killedAt, Settle);
        Assert.NotSame(leader, next);
        Log($"{next.Host.Name} leads {(elected - killedAt).TotalSeconds:0.00} s after the kill; " +
            $"unavailability (kill → first Allocate started after it completed): {(allocated - killedAt).TotalSeconds:0.00} s");

        await leader.StartAsync();
        await FollowsAsync(leader, next);
        return Array.Empty<ulong>();
    });

    /// <summary>
    /// (b) The leader's link to etcd cut (every etcd host drops what it sends to the leader's address; clients still
    /// reach it): it steps down before its etcd lease could end (it answers not-leader, and its health stops saying
    /// leader), another leads, and when the link is back the old one follows.
    /// </summary>
    [ClusterFact]
    public Task TheLeadersLinkToEtcdCut() => UnderLoadAsync(async (bed, load) =>
    {
        var leader = await bed.LeaderAsync(Settle);
        foreach (var member in bed.Etcd.Members)
            await member.Host.BlockAsync(leader.Host.Address);
        var cutAt = Stopwatch.StartNew();
        Log($"cut {leader.Host.Name}'s link to etcd");

        // Stepped down: a write is refused not-leader at once (a leader in its term would try its store, which does not
        // answer). Its health: the last SERVING answer for the leader service, and the first NOT_SERVING one (a check
        // waits on the store's ping, which does not answer either: no answer comes for a while).
        TimeSpan? refused = null, notServing = null, lastServing = null;
        var health = Task.Run(async () =>
        {
            while (notServing is null && cutAt.Elapsed < TimeSpan.FromSeconds(12))
            {
                var asked = cutAt.Elapsed;
                var status = await leader.HealthAsync(ManagerHealth.LeaderService, TimeSpan.FromSeconds(6));
                if (status == HealthCheckResponse.Types.ServingStatus.Serving)
                    lastServing = asked;
                else if (status is not null)
                    notServing = cutAt.Elapsed;
                await Task.Delay(50);
            }
        });
        while (refused is null)
        {
            Assert.True(cutAt.Elapsed < TimeSpan.FromSeconds(10), $"{leader.Host.Name} still leads {cutAt.Elapsed.TotalSeconds:0.0} s after its link to etcd was cut");
            if (await RefusesAsNotLeaderAsync(leader))
                refused = cutAt.Elapsed;
            else
                await Task.Delay(50);
        }
        await health;
        Assert.True(notServing is not null, $"{leader.Host.Name}'s health did not answer NOT_SERVING for the leader service within 12 s");
        var next = await bed.LeaderAsync(Settle);
        Assert.NotSame(leader, next);
        Log($"{leader.Host.Name} refused writes as not-leader after {refused!.Value.TotalSeconds:0.00} s; its health said leader last when asked at " +
            $"{(lastServing is { } last ? $"{last.TotalSeconds:0.00} s" : "— (never after the cut)")}, NOT_SERVING at {notServing!.Value.TotalSeconds:0.00} s; {next.Host.Name} leads after {cutAt.Elapsed.TotalSeconds:0.00} s");
        // Its etcd lease is 2 s; it steps down at 3/4 of it after its last answered keep-alive (~1.5 s, plus a poll;
        // generous here for a busy machine). Its health never says leader once it has stepped down.
        Assert.True(refused < TimeSpan.FromSeconds(4), $"stepped down only after {refused.Value.TotalSeconds:0.00} s");
        Assert.True(lastServing is null || lastServing < refused, $"its health said leader at {lastServing?.TotalSeconds:0.00} s, after it refused as not-leader at {refused.Value.TotalSeconds:0.00} s");

        foreach (var member in bed.Etcd.Members)
            await member.Host.UnblockAsync(leader.Host.Address);
        await FollowsAsync(leader, next);
        Log($"{leader.Host.Name} follows {next.Host.Name} once its link is back");
        return Array.Empty<ulong>();
    });

    /// <summary>(c) The etcd leader killed -9 and restarted on its data while the managers serve the load.</summary>
    [ClusterFact]
    public Task AnEtcdMemberKilledAndRestartedUnderLoad() => UnderLoadAsync(async (bed, load) =>
    {
        var member = await bed.Etcd.LeaderAsync() ?? bed.Etcd.Members[0];
        var leader = await bed.LeaderAsync(Settle);
        var killedAt = DateTime.UtcNow;
        await bed.Etcd.KillAsync(member);
        Log($"killed etcd member {member.Name} (the etcd leader); {leader.Host.Name} led the managers");
        // Two members are a quorum: the load goes on, and every lease is renewed before the member comes back (so that
        // the two disturbances are one lease period apart, not added up).
        await load.ProgressAsync(killedAt, Settle + load.Lease / 2, cycles: 1);
        var allocated = await load.FirstAllocationAfterAsync(killedAt, Settle);
        Log($"unavailability (kill → first Allocate started after it completed): {(allocated - killedAt).TotalSeconds:0.00} s; {(await bed.LeaderAsync(Settle)).Host.Name} leads");
        await bed.Etcd.RestartAsync(member);
        await bed.Etcd.WaitQuorumAsync(Settle);
        var now = await bed.LeaderAsync(Settle);
        Log($"{member.Name} restarted; {now.Host.Name} leads the managers{(now == leader ? " (still)" : "")}");
        return Array.Empty<ulong>();
    });

    /// <summary>
    /// (d) A whole server host lost (its processes killed, its link and namespace deleted) under one of alice's caches:
    /// the manager fails that server, the failure reaches the cache's watcher, the cache's client replaces the server,
    /// and every other cache is untouched (the data cache's client sees no failure; the churn and reshapes go on).
    /// </summary>
    [ClusterFact]
    public Task AServerHostLostUnderLoad() => UnderLoadAsync(async (bed, load) =>
    {
        var cache = load.Renewed;
        var victim = bed.Server(cache.Info.Servers.Single().ServerId);
        var watcher = load.WatcherOf(cache);
        var lostAt = DateTime.UtcNow;
        await victim.Host.RemoveAsync();
        Log($"removed host {victim.Host.Name} ({victim.ServerId}), the server of cache {cache.CacheId}");
        var failed = await watcher.WaitForAsync<ServerFailedEvent>(e => e.ServerId == victim.ServerId, Settle);
        var replaced = await watcher.WaitForAsync<ServerReplacedEvent>(e => e.ServerId == victim.ServerId, Settle);
        Log($"{victim.ServerId} failed {(failed.Time.UtcDateTime - lostAt).TotalSeconds:0.0} s after its host went ({failed.Reason}); " +
            $"replaced by {replaced.Replacement} {(replaced.Time.UtcDateTime - lostAt).TotalSeconds:0.0} s after");
        // The handle follows on its own event stream, which may be a moment behind the watcher's.
        await EventuallyTrueAsync(() => Task.FromResult(cache.Info.Servers.All(s => s.ServerId != victim.ServerId)), $"cache {cache.CacheId}'s handle still names {victim.ServerId}");
        foreach (var other in load.Watchers.Where(w => w != watcher))
            Assert.DoesNotContain(other.Events, e => e is ServerFailedEvent or ServerReplacedEvent);
        var pool = (await SnapshotAsync(bed)).Servers;
        Assert.Equal(ServerState.Failed, pool.Single(s => s.ServerId == victim.ServerId).State);
        // Failed: the servers whose hosts went (this one, and the earlier rounds' in the long version), and no other.
        Assert.All(pool.Where(s => !bed.Server(s.ServerId).Host.Removed), s => Assert.NotEqual(ServerState.Failed, s.State));
        return new[] { cache.CacheId };
    });

    /// <summary>
    /// (e) All three managers killed -9 at once and restarted: the state in etcd is intact, a leader is elected, the
    /// watchers resume without a gap and no lease ended (the managers are back well within the lease: 20 s here, so
    /// that the renewal due when they went down, with 10 s left, outlives their restart, 4-5 s on a busy 2-core machine).
    /// </summary>
    [ClusterFact]
    public Task AllManagersKilledAndRestarted() => UnderLoadAsync(async (bed, load) =>
    {
        var killedAt = DateTime.UtcNow;
        await Task.WhenAll(bed.Managers.Select(m => m.KillAsync()));
        Log("killed all managers");
        await Task.WhenAll(bed.Managers.Select(m => m.StartAsync()));
        var restarted = DateTime.UtcNow;
        var leader = await bed.LeaderAsync(Settle);
        var allocated = await load.FirstAllocationAfterAsync(killedAt, Settle);
        Log($"managers answering {(restarted - killedAt).TotalSeconds:0.00} s after the kill, {leader.Host.Name} leads after {(DateTime.UtcNow - killedAt).TotalSeconds:0.00} s; " +
            $"unavailability (kill → first Allocate started after it completed): {(allocated - killedAt).TotalSeconds:0.00} s");
        return Array.Empty<ulong>();
    }, lease: TimeSpan.FromSeconds(20));

    // A write this manager would carry out as leader is refused UNAVAILABLE not-leader at once: a follower's answer.
    private static async Task<bool> RefusesAsNotLeaderAsync(BedManager manager)
    {
        try
        {
            await manager.Tenant().DeallocateAsync(new DeallocateRequest { CacheId = 1 }, deadline: DateTime.UtcNow.AddMilliseconds(500));
            return false;
        }
        catch (RpcException e)
        {
            return e.StatusCode == StatusCode.Unavailable && e.Trailers.GetValue(Refusals.Trailer) == Refusals.NotLeader;
        }
    }

    // A replica that came back follows the leader: serving, not as leader, and it names the leader in its refusals.
    private static async Task FollowsAsync(BedManager replica, BedManager leader)
    {
        await EventuallyTrueAsync(async () =>
            await replica.HealthAsync("") == HealthCheckResponse.Types.ServingStatus.Serving
            && await replica.HealthAsync(ManagerHealth.LeaderService) == HealthCheckResponse.Types.ServingStatus.NotServing,
            $"{replica.Host.Name} does not follow");
        var refused = await Assert.ThrowsAsync<RpcException>(() =>
            replica.Tenant().DeallocateAsync(new DeallocateRequest { CacheId = 1 }, deadline: DateTime.UtcNow.AddSeconds(5)).ResponseAsync);
        Assert.Equal(Refusals.NotLeader, refused.Trailers.GetValue(Refusals.Trailer));
        Assert.Equal(leader.Origin, refused.Trailers.GetValue(Refusals.LeaderTrailer));
    }

    private static async Task EventuallyTrueAsync(Func<Task<bool>> check, string what)
    {
        var waited = Stopwatch.StartNew();
        while (!await check())
        {
            Assert.True(waited.Elapsed < Settle, $"{what} after {Settle.TotalSeconds} s");
            await Task.Delay(100);
        }
    }
}
