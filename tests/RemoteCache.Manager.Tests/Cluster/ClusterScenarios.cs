using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Grpc.Core;
using RemoteCache.Manager.V1;
using Xunit;
using Xunit.Abstractions;
using static RemoteCache.Manager.Tests.Cluster.ClusterInvariants;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// Scenarios on the multi-host bed that need no manager leadership: one manager on a 3-member etcd cluster, four servers,
/// the test process as the client. Each bed is fresh; on failure the output holds every process's last log lines.
/// </summary>
[Collection(ClusterCollection.Name)]
public sealed class ClusterScenarios
{
    private static readonly TimeSpan Settle = TimeSpan.FromSeconds(15);
    private readonly ITestOutputHelper _output;

    public ClusterScenarios(ITestOutputHelper output) => _output = output;

    // Runs a scenario on a fresh bed; on failure, the bed's logs go to the test's output; the bed is removed whatever happens.
    private async Task OnBedAsync(Func<ClusterBed, Task> scenario, int servers = 4)
    {
        var cluster = await ClusterBed.StartAsync(servers: servers);
        try
        {
            await scenario(cluster);
        }
        catch
        {
            _output.WriteLine(cluster.Bed.Diagnostics());
            throw;
        }
        finally
        {
            await cluster.DisposeAsync();
        }
    }

    /// <summary>(a) 3 etcd members, a manager and 4 servers in their own hosts: caches placed over the bridge, read and written, freed.</summary>
    [ClusterFact]
    public Task CachesArePlacedReadAndWrittenAcrossHosts() => OnBedAsync(async bed =>
    {
        var one = await bed.AllocateAsync(128 * MiB);
        var two = await bed.AllocateAsync(512 * MiB);  // two small servers' worth: the address space spans two hosts
        Assert.Single(one.Servers);
        Assert.Equal(2, two.Servers.Count);
        Assert.All(one.Servers.Concat(two.Servers), s => Assert.StartsWith($"tcp:{bed.Bed.Subnet}.", s.Endpoint, StringComparison.Ordinal));

        await using (var a = await one.StartVerifiedLoadAsync())
        await using (var b = await two.StartVerifiedLoadAsync())
        {
            await a.WaitForOperationsAsync(500, Settle);
            await b.WaitForOperationsAsync(500, Settle);
            Holds(Consistent(await bed.SnapshotAsync(), new[] { one.CacheId, two.CacheId }), await bed.SnapshotAsync());
            await a.StopAsync();
            await b.StopAsync();
            Assert.True(a.Failures == 0 && a.Mismatches == 0, a.Summary);
            Assert.True(b.Failures == 0 && b.Mismatches == 0, b.Summary);
        }

        var alice = bed.Manager.Tenant();
        await alice.DeallocateAsync(new DeallocateRequest { CacheId = one.CacheId });
        await alice.DeallocateAsync(new DeallocateRequest { CacheId = two.CacheId });
        var end = await EventuallyAsync(() => bed.SnapshotAsync(), s => Consistent(s).Concat(Empty(s)), Settle);
        Assert.Empty(end.Caches);
    });

    /// <summary>
    /// (b) The etcd leader killed -9 and restarted while allocations and deallocations go on. Allowed: a manager call
    /// that fails with UNAVAILABLE (the store did not answer; nothing changed unless committed, which the retry finds out),
    /// ABORTED (a conflicting change) or DEADLINE_EXCEEDED, retried — an Allocate with the same request_id (so a retry
    /// of one that was committed returns the same cache), a Deallocate until it succeeds or says NOT_FOUND after a
    /// retry. Anything else fails the scenario. Afterwards: only the long-lived cache is listed (no churned cache left
    /// or duplicated), servers hold only what the manager granted, and the long-lived cache's client saw no failure.
    /// </summary>
    [ClusterFact]
    public Task TheEtcdLeaderKilledAndRestartedUnderAllocations() => OnBedAsync(async bed =>
    {
        var steady = await bed.AllocateAsync(128 * MiB);
        await using var load = await steady.StartVerifiedLoadAsync();
        var churn = new Churn(bed.Manager);
        using var stop = new CancellationTokenSource();
        var running = Task.Run(() => churn.RunAsync(stop.Token));
        try
        {
            await churn.WaitCyclesAsync(3, Settle);
            var leader = await bed.Etcd.LeaderAsync() ?? bed.Etcd.Members[0];
            _output.WriteLine($"killing etcd leader {leader.Name} after {churn.Cycles} cycles");
            await bed.Etcd.KillAsync(leader);
            await churn.WaitCyclesAsync(3, Settle);  // two members are a quorum: the manager carries on
            await bed.Etcd.RestartAsync(leader);
            await bed.Etcd.WaitQuorumAsync(Settle);
            await churn.WaitCyclesAsync(3, Settle);
        }
        finally
        {
            stop.Cancel();
            await running;
        }
        _output.WriteLine($"{churn.Cycles} cycles; allowed failures: {churn.Allowed.Count} ({string.Join(" | ", churn.Allowed.Take(5))})");
        foreach (string note in churn.RefusedButDone)
            _output.WriteLine("refused, but carried out: " + note);
        Assert.True(churn.Unexpected.IsEmpty, "unexpected failures: " + string.Join(" | ", churn.Unexpected));

        await load.StopAsync();
        Assert.True(load.Failures == 0 && load.Mismatches == 0, load.Summary);
        var end = await EventuallyAsync(() => bed.SnapshotAsync(), s => Consistent(s, new[] { steady.CacheId }), Settle);
        Assert.Equal(new[] { steady.CacheId }, end.Caches.Select(c => c.CacheId));
    });

    /// <summary>
    /// (c) A server host's link cut: the manager fails it after --failure-timeout (2 s here), while the client of a
    /// cache on another server sees no failed operation. The cut server's cache (opened before) is dropped by the
    /// server when the link comes back (fenced: a failed server serves nothing it was failed for).
    /// </summary>
    [ClusterFact]
    public Task AServerHostCutOffIsFailedWhileOtherCachesServe() => OnBedAsync(async bed =>
    {
        var served = await bed.AllocateAsync(128 * MiB);
        var lost = await bed.AllocateAsync(128 * MiB);
        await using (var client = await OpenAsync(lost))
            await client.WriteAsync(0, new byte[8]);  // the cache now exists on its server
        var victim = bed.Server(lost.Servers.Single().ServerId);
        await using var load = await served.StartVerifiedLoadAsync();
        await load.WaitForOperationsAsync(200, Settle);

        await victim.Host.CutLinkAsync();
        var failedAt = DateTime.UtcNow;
        var failed = await EventuallyAsync(() => bed.SnapshotAsync(),
            s => s.Servers.Single(x => x.ServerId == victim.ServerId).State == ServerState.Failed ? Array.Empty<string>() : new[] { $"{victim.ServerId} not failed yet" },
            Settle);
        _output.WriteLine($"{victim.ServerId} failed {(DateTime.UtcNow - failedAt).TotalSeconds:0.0} s after its link was cut");
        Assert.All(failed.Servers.Where(s => s.ServerId != victim.ServerId), s => Assert.NotEqual(ServerState.Failed, s.State));
        await load.WaitForOperationsAsync(200, Settle);

        await victim.Host.RestoreLinkAsync();
        var end = await EventuallyAsync(() => bed.SnapshotAsync(),
            s => Consistent(s, new[] { served.CacheId }).Concat(s.Held.TryGetValue(victim.ServerId, out var h) && h.Count == 0 ? Array.Empty<string>() : new[] { $"{victim.ServerId} still holds a cache" }),
            Settle);
        await load.StopAsync();
        Assert.True(load.Failures == 0 && load.Mismatches == 0, load.Summary);
        Assert.Equal(ServerState.Failed, end.Servers.Single(s => s.ServerId == victim.ServerId).State);
    });

    /// <summary>
    /// (d) The manager killed -9 and restarted on etcd: every cache is still there with the same servers, token and lease,
    /// the servers still hold them after the restarted manager's probes (nothing fenced away), a cache's client saw no
    /// failure while the manager was down, and the next Allocate takes the only free server (nothing rented twice).
    /// </summary>
    [ClusterFact]
    public Task TheManagerKilledAndRestartedLosesAndDuplicatesNothing() => OnBedAsync(async bed =>
    {
        var caches = new List<Cache>();
        for (int i = 0; i < 3; i++)
            caches.Add(await bed.AllocateAsync(128 * MiB));
        var opened = caches.Select(c => c.CacheId).ToArray();
        foreach (var c in caches.Skip(1))
            await using (var client = await OpenAsync(c))
                await client.WriteAsync(0, new byte[8]);
        await using var load = await caches[0].StartVerifiedLoadAsync();
        await load.WaitForOperationsAsync(200, Settle);
        var before = await EventuallyAsync(() => bed.SnapshotAsync(), s => Consistent(s, opened), Settle);

        await bed.Manager.KillAsync();
        await load.WaitForOperationsAsync(200, Settle);  // the data path does not go through the manager
        var restarted = DateTime.UtcNow;
        await bed.Manager.StartAsync();

        // After a probe of every server by the restarted manager, so that fencing had its chance to drop something.
        var after = await EventuallyAsync(() => bed.SnapshotAsync(),
            s => s.Servers.Where(x => x.LastProbe is null || x.LastProbe.ToDateTime() < restarted).Select(x => $"{x.ServerId} not probed since the restart"),
            Settle);
        Holds(NothingLostOrDuplicated(before, after).Concat(Consistent(after, opened)), after);

        var next = await bed.AllocateAsync(128 * MiB);
        var free = before.Servers.Single(s => s.CacheId == 0).ServerId;
        Assert.Equal(free, next.Servers.Single().ServerId);
        var full = await Assert.ThrowsAsync<RpcException>(() => bed.AllocateAsync(128 * MiB));
        Assert.Equal(StatusCode.ResourceExhausted, full.StatusCode);
        Holds(NothingLostOrDuplicated(before, await bed.SnapshotAsync(), added: new[] { next.CacheId }), await bed.SnapshotAsync());

        await load.StopAsync();
        Assert.True(load.Failures == 0 && load.Mismatches == 0, load.Summary);
    });

    // Nothing listed, nothing rented, nothing held.
    private static IEnumerable<string> Empty(ClusterSnapshot s) =>
        s.Caches.Select(c => $"cache {c.CacheId} still listed")
         .Concat(s.Servers.Where(x => x.CacheId != 0).Select(x => $"{x.ServerId} still rented by {x.CacheId}"))
         .Concat(s.Held.Where(h => h.Value.Count > 0).Select(h => $"{h.Key} still holds {h.Value.Count} caches"));
}

/// <summary>
/// Allocate, open and verify, deallocate, over and over, through one manager, retrying what a store outage may refuse
/// (<see cref="IsAllowed"/>); every other failure is recorded as unexpected. Reusable by the leadership scenarios (the
/// manager to call may change between calls: <see cref="Manager"/> is settable).
/// </summary>
public sealed class Churn
{
    private int _cycles;

    public Churn(BedManager manager) => Manager = manager;

    public BedManager Manager { get; set; }

    public int Cycles => Volatile.Read(ref _cycles);

    /// <summary>Failures that were allowed and retried.</summary>
    public ConcurrentQueue<string> Allowed { get; } = new();

    public ConcurrentQueue<string> Unexpected { get; } = new();

    /// <summary>
    /// Refused calls that had in fact been carried out, as their retry shows: an Allocate whose retry returned a cache
    /// created before the refusal, a Deallocate whose retry found the cache gone. Not failures of the scenario (the retry
    /// is what a client does), but a refusal that says "not made" about a change that was made is worth reading.
    /// </summary>
    public ConcurrentQueue<string> RefusedButDone { get; } = new();

    /// <summary>The refusals a store outage may cause: retried.</summary>
    public static bool IsAllowed(RpcException e) => e.StatusCode is StatusCode.Unavailable or StatusCode.Aborted or StatusCode.DeadlineExceeded;

    /// <summary>Runs cycles until <paramref name="stop"/>; a cycle under way is finished first, so that no churned cache is left behind.</summary>
    public async Task RunAsync(CancellationToken stop)
    {
        while (!stop.IsCancellationRequested)
        {
            try
            {
                await CycleAsync();
                Interlocked.Increment(ref _cycles);
            }
            catch (Exception e)
            {
                Unexpected.Enqueue($"{DateTime.UtcNow:HH:mm:ss.fff} {e.GetType().Name}: {e.Message}");
                await Task.Delay(100, CancellationToken.None);
            }
        }
    }

    private async Task CycleAsync()
    {
        string requestId = Guid.NewGuid().ToString("N");
        RpcException? refused = null;
        DateTime refusedAt = default;
        var cache = await RetryAsync("Allocate", async () =>
        {
            try
            {
                return (await Manager.Tenant().AllocateAsync(ClusterBed.Request(64 * TestManager.MiB, requestId), deadline: DateTime.UtcNow.AddSeconds(10))).Cache;
            }
            catch (RpcException e)
            {
                (refused, refusedAt) = (e, DateTime.UtcNow);
                throw;
            }
        });
        if (refused is not null && cache.Created.ToDateTime() < refusedAt)
            RefusedButDone.Enqueue($"Allocate refused with {refused.StatusCode} at {refusedAt:HH:mm:ss.fff}, yet its retry returned cache {cache.CacheId} created at {cache.Created.ToDateTime():HH:mm:ss.fff} ({refused.Status.Detail})");
        await using (var client = await TestManager.OpenAsync(cache))
        {
            var data = BitConverter.GetBytes(cache.CacheId);
            await client.WriteAsync(8, data);
            var back = new byte[8];
            await client.ReadAsync(8, back);
            if (!data.AsSpan().SequenceEqual(back))
                throw new InvalidOperationException($"cache {cache.CacheId} read back other bytes");
        }
        bool retried = false;
        await RetryAsync("Deallocate", async () =>
        {
            try
            {
                await Manager.Tenant().DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId }, deadline: DateTime.UtcNow.AddSeconds(10));
            }
            catch (RpcException e) when (e.StatusCode == StatusCode.NotFound && retried)
            {
                // An earlier try was carried out though its answer was lost or said otherwise.
                RefusedButDone.Enqueue($"Deallocate of cache {cache.CacheId} refused, yet its retry found it gone");
            }
            finally
            {
                retried = true;
            }
            return true;
        });
    }

    // Until the call succeeds or fails in a way that is not allowed; an outage longer than RetryLimit is a failure too.
    private async Task<T> RetryAsync<T>(string name, Func<Task<T>> call)
    {
        var deadline = DateTime.UtcNow + RetryLimit;
        while (true)
        {
            try
            {
                return await call();
            }
            catch (RpcException e) when (IsAllowed(e) && DateTime.UtcNow < deadline)
            {
                Allowed.Enqueue($"{DateTime.UtcNow:HH:mm:ss.fff} {name}: {e.StatusCode}: {e.Status.Detail}");
                await Task.Delay(100);
            }
        }
    }

    /// <summary>How long a call is retried through allowed failures.</summary>
    public static TimeSpan RetryLimit { get; } = TimeSpan.FromSeconds(30);

    /// <summary>Waits until <paramref name="more"/> cycles beyond the count now have completed (liveness).</summary>
    public async Task WaitCyclesAsync(int more, TimeSpan timeout)
    {
        int target = Cycles + more;
        var deadline = DateTime.UtcNow + timeout;
        while (Cycles < target)
        {
            if (DateTime.UtcNow > deadline)
                throw new TimeoutException($"the churn made no progress to {target} cycles within {timeout.TotalSeconds} s; unexpected: {string.Join(" | ", Unexpected)}");
            await Task.Delay(50);
        }
    }
}
