using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using RemoteCache.Manager.V1;
using Xunit;
using Xunit.Abstractions;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// Servers that join by themselves on the multi-host bed: 3 etcd members, 2 managers, and <c>remotecache serve --join</c>
/// in three server hosts with a token an operator issued; no AddServer anywhere.
/// </summary>
[Collection(ClusterCollection.Name)]
public sealed class MembershipScenarios
{
    private static readonly TimeSpan Ttl = TimeSpan.FromSeconds(2);
    private static readonly TimeSpan Settle = TimeSpan.FromSeconds(20);
    private readonly ITestOutputHelper _output;

    public MembershipScenarios(ITestOutputHelper output) => _output = output;

    private void Log(string text) => _output.WriteLine($"{DateTime.UtcNow:HH:mm:ss.fff} {text}");

    /// <summary>
    /// Servers join across hosts and are rented; one host cut off is failed within the heartbeat TTL (its cache's watcher
    /// told, a cache on another server serving on with every read verified), and when its link comes back it hears that it
    /// was failed and joins again as a new incarnation; the leader killed, heartbeats go to its successor and no server
    /// is failed for it.
    /// </summary>
    [ClusterFact]
    public async Task ServersJoinAcrossHostsAndOneCutOffIsFailedWithinTheTtlThenJoinsAgainAsANewServer()
    {
        var bed = await ClusterBed.StartAsync(managers: 0, servers: 0, register: false);
        try
        {
            var args = new[] { "--heartbeat-interval", "0.5", "--heartbeat-ttl", Ttl.TotalSeconds.ToString(System.Globalization.CultureInfo.InvariantCulture) };
            await bed.AddManagerAsync(args);
            await bed.AddManagerAsync(args);
            var leader = await bed.LeaderAsync(Settle);
            string token = (await leader.Operator().IssueJoinTokenAsync(new IssueJoinTokenRequest { Description = "bed" }, deadline: DateTime.UtcNow.AddSeconds(10))).Secret;
            string tokenFile = Path.Combine(bed.Bed.Directory, "join.token");
            File.WriteAllText(tokenFile, token + "\n");
            File.SetUnixFileMode(tokenFile, UnixFileMode.UserRead | UnixFileMode.UserWrite);
            string managers = string.Join(",", bed.ManagerAddresses.Select(a => a.ToString().TrimEnd('/')));

            var hosts = new List<BedHost>();
            var serves = new List<BedProcess>();
            for (int i = 1; i <= 3; i++)
            {
                var host = await bed.Bed.AddHostAsync($"srv{i}");
                hosts.Add(host);
                serves.Add(host.Start("serve", "dotnet", new[]
                {
                    Path.Combine(AppContext.BaseDirectory, "RemoteCache.Cli.dll"), "serve", "--join", managers, "--join-token", tokenFile,
                    "--listen", $"tcp:{host.Address}:7300", "--lend", "256M", "--threads", "1", "--name", host.Name, "--label", $"zone={host.Name}",
                }, new Dictionary<string, string> { ["DOTNET_NOLOGO"] = "1" }));
            }
            foreach (var serve in serves)
                await serve.WaitForOutputAsync("ready", Settle);
            var servers = await ServersAsync(leader);
            Assert.Equal(3, servers.Count);
            Assert.All(servers, s => Assert.Equal(ServerState.Ready, s.State));
            Assert.Equal(hosts.Select(h => h.Name).OrderBy(n => n), servers.Select(s => s.Labels["zone"]).OrderBy(n => n));
            Log($"joined: {string.Join(", ", servers.Select(s => $"{s.ServerId} at {s.Endpoints["tcp"]}"))}");

            // Rented without an operator call; a verified load on one cache, the other's server is cut off.
            var served = await bed.AllocateAsync(128 * MiB, leader);
            var lost = await bed.AllocateAsync(128 * MiB, leader);
            await using (var client = await OpenAsync(lost))
                await client.WriteAsync(0, new byte[8]);
            await using var load = await served.StartVerifiedLoadAsync();
            await load.WaitForOperationsAsync(200, Settle);
            string victimId = lost.Servers.Single().ServerId;
            var victim = hosts.Single(h => servers.Single(s => s.ServerId == victimId).Endpoints["tcp"].Contains(h.Address.ToString() + ":", StringComparison.Ordinal));
            await using var managed = new RemoteCacheManagerClient(new RemoteCacheManagerOptions { Addresses = bed.ManagerAddresses.ToList(), ApiKey = AliceKey });
            var failedAt = new TaskCompletionSource<DateTime>(TaskCreationOptions.RunContinuationsAsynchronously);
            using var watching = new CancellationTokenSource(TimeSpan.FromMinutes(2));
            var watch = Task.Run(async () =>
            {
                await foreach (var e in managed.WatchAsync(lost.CacheId, 1, watching.Token))
                    if (e is ServerFailedEvent f && f.ServerId == victimId)
                        failedAt.TrySetResult(DateTime.UtcNow);
            });
            await Task.Delay(500);
            await victim.CutLinkAsync();
            var cut = DateTime.UtcNow;
            var detected = await failedAt.Task.WaitAsync(Settle) - cut;
            Log($"{victimId} cut off: ServerFailed at its cache's watcher after {detected.TotalSeconds:0.00} s (TTL {Ttl.TotalSeconds} s)");
            // The TTL counts from the last heartbeat, which left up to an interval before the cut.
            Assert.True(detected <= Ttl + TimeSpan.FromSeconds(1), $"ServerFailed came {detected.TotalSeconds:0.00} s after the cut; the TTL is {Ttl.TotalSeconds} s");
            await load.WaitForOperationsAsync(200, Settle);

            // Back: it hears it was failed, drops what it held and joins again under a new id.
            await victim.RestoreLinkAsync();
            var rejoined = await EventuallyAsync(async () => (await ServersAsync(leader)).Where(s => s.Labels["zone"] == victim.Name && s.ServerId != victimId && s.State == ServerState.Ready).ToList(),
                                                 list => list.Count == 1);
            Log($"{victim.Name} joined again as {rejoined.Single().ServerId}");

            // The leader killed: heartbeats go to the other manager; no server is failed for it.
            await leader.KillAsync();
            var next = await bed.LeaderAsync(Settle);
            await Task.Delay(Ttl * 3);
            var after = await ServersAsync(next);
            Assert.All(after.Where(s => s.ServerId != victimId), s => Assert.Equal(ServerState.Ready, s.State));
            await load.WaitForOperationsAsync(200, Settle);
            await load.StopAsync();
            Assert.True(load.Failures == 0 && load.Mismatches == 0, load.Summary);
            watching.Cancel();
            await Task.WhenAny(watch, Task.Delay(5000));
        }
        catch
        {
            _output.WriteLine(bed.Bed.Diagnostics());
            throw;
        }
        finally
        {
            await bed.DisposeAsync();
        }
    }

    /// <summary>
    /// A host takes its memory back: srv1 is a memory cgroup of 1 GiB whose <c>remotecache serve --lend auto --reserve
    /// 384M</c> lends what the host leaves; a producer process in the same cgroup grows its working set in steps of 128 MiB
    /// while a managed cache with a verified load lives on srv1. When what srv1 lends no longer fits beside the producer,
    /// the cache is moved to srv2 (or, if the host needs the memory faster, dropped and reported lost): 0 processes
    /// OOM-killed, 0 wrong reads, and after each step the manager's view of srv1 says what it lends.
    /// </summary>
    [ClusterFact]
    public async Task AHostTakesItsMemoryBackAndTheCacheOnItMovesOrIsReportedLostNeverAProcessKilled()
    {
        var bed = await ClusterBed.StartAsync(managers: 0, servers: 0, register: false);
        string cgroup = Path.Combine("/sys/fs/cgroup/memory", bed.Bed.RunId + "-srv1");
        try
        {
            var manager = await bed.AddManagerAsync(new[] { "--heartbeat-interval", "0.25", "--heartbeat-ttl", "3" });
            await bed.LeaderAsync(Settle);
            string token = (await manager.Operator().IssueJoinTokenAsync(new IssueJoinTokenRequest(), deadline: DateTime.UtcNow.AddSeconds(10))).Secret;
            string tokenFile = Path.Combine(bed.Bed.Directory, "join.token");
            File.WriteAllText(tokenFile, token + "\n");
            File.SetUnixFileMode(tokenFile, UnixFileMode.UserRead | UnixFileMode.UserWrite);
            Directory.CreateDirectory(cgroup);
            File.WriteAllText(Path.Combine(cgroup, "memory.limit_in_bytes"), (1L << 30).ToString(System.Globalization.CultureInfo.InvariantCulture));
            // ip netns exec mounts a sysfs of the namespace's own, without the cgroup file systems: mounted again here (in
            // the mount namespace ip gave the process), as a host has them, so that the server reads its cgroup as it would.
            string InCgroup(string command) =>
                "mount -t tmpfs cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/memory && mount -t cgroup -o memory memory /sys/fs/cgroup/memory && " +
                $"echo $$ > {cgroup}/cgroup.procs && exec {command}";
            string Serve(BedHost host, string lend) =>
                $"dotnet {Path.Combine(AppContext.BaseDirectory, "RemoteCache.Cli.dll")} serve --join {manager.Origin} --join-token {tokenFile} " +
                $"--listen tcp:{host.Address}:7300 --threads 1 --name {host.Name} {lend}";

            var producerHost = await bed.Bed.AddHostAsync("srv1");
            var serve1 = producerHost.Start("serve", "sh", new[] { "-c", InCgroup(Serve(producerHost, "--lend auto --reserve 384M --verbose")) },
                                            new Dictionary<string, string> { ["DOTNET_NOLOGO"] = "1" });
            await serve1.WaitForOutputAsync("ready", Settle);
            Log($"srv1: {serve1.LastLine("joined as ")}");
            await using var managed = new RemoteCacheManagerClient(new RemoteCacheManagerOptions { Addresses = bed.ManagerAddresses.ToList(), ApiKey = AliceKey });
            await using var cache = await managed.CreateAsync(new ManagedCacheRequest { Capacity = 128 * MiB, Duration = TimeSpan.FromHours(1) });
            string srv1Id = cache.Info.Servers.Single().ServerId;
            Assert.StartsWith("srv1.", srv1Id);
            await using var load = VerifiedLoad.Start(cache);
            await load.WaitForOperationsAsync(500, Settle);
            // The server the cache can move to.
            var spareHost = await bed.Bed.AddHostAsync("srv2");
            var serve2 = spareHost.Start("serve", "dotnet", Serve(spareHost, "--lend 256M").Split(' ').Skip(1), new Dictionary<string, string> { ["DOTNET_NOLOGO"] = "1" });
            await serve2.WaitForOutputAsync("ready", Settle);

            string script = Path.Combine(bed.Bed.Directory, "producer.py");
            File.WriteAllText(script, ProducerScript);
            var producer = producerHost.Start("producer", "sh", new[] { "-c", InCgroup($"python3 -u {script} 128,256,384,512,640") });
            await producer.WaitForOutputAsync("ready", Settle);
            foreach (int step in new[] { 128, 256, 384, 512, 640 })
            {
                await producer.WaitForOutputAsync($"step {step}", Settle);
                await Task.Delay(1500);
                var srv1 = (await ServersAsync(manager)).FirstOrDefault(s => s.ServerId == srv1Id);
                long usage = long.Parse(File.ReadAllText(Path.Combine(cgroup, "memory.usage_in_bytes")).Trim(), System.Globalization.CultureInfo.InvariantCulture);
                Log($"producer at {step} MiB: cgroup usage {usage >> 20} MiB; srv1 {(srv1 is null ? "none" : $"{srv1.ServerId} {srv1.State} lent {srv1.MemoryLent >> 20} MiB")}; " +
                    $"cache on {string.Join(",", cache.Info.Servers.Select(x => x.ServerId))}; load {load.Summary}");
            }
            Assert.False(producer.HasExited, "the producer was killed");
            Assert.Contains("oom_kill 0", File.ReadAllText(Path.Combine(cgroup, "memory.oom_control")));
            Assert.False(serve1.HasExited, "srv1's server was killed");
            // Moved to srv2, or reported lost and replaced: either way it is no longer on srv1, and the manager places
            // nothing there while the producer holds the memory.
            Assert.DoesNotContain(cache.Info.Servers, x => x.ServerId.StartsWith("srv1.", StringComparison.Ordinal));
            Assert.DoesNotContain(await ServersAsync(manager), s => s.ServerId.StartsWith("srv1.", StringComparison.Ordinal) && s.State == ServerState.Ready);
            // The cache left in time: srv1 stays what it was (no new incarnation), taking no cache until its host has memory.
            var kept = (await ServersAsync(manager)).Single(s => s.ServerId == srv1Id);
            Assert.True(kept.State is ServerState.Reclaiming or ServerState.Draining, $"{srv1Id} is {kept.State}");
            Assert.False(serve1.Printed("joined again"), "srv1 joined again: " + serve1.LastLine("joined again"));
            await load.WaitForOperationsAsync(200, Settle);
            await load.StopAsync();
            Log(load.Summary);
            Assert.Equal(0, load.Mismatches);
        }
        catch
        {
            _output.WriteLine(bed.Bed.Diagnostics());
            throw;
        }
        finally
        {
            await bed.DisposeAsync();
            if (Directory.Exists(cgroup))
                Directory.Delete(cgroup);
        }
    }

    // Grows its working set to each step's MiB (every page written), printing "step N", two seconds apart; then holds it.
    private const string ProducerScript = """
        import sys, time
        hold = []
        print("ready")
        for mib in map(int, sys.argv[1].split(",")):
            while len(hold) * 16 < mib:
                hold.append(bytearray(b"\x01" * (16 << 20)))
            print("step %d" % mib)
            time.sleep(2)
        print("done")
        time.sleep(3600)
        """;

    private static async Task<IReadOnlyList<Server>> ServersAsync(BedManager manager) =>
        (await manager.Operator().ListServersAsync(new ListServersRequest(), deadline: DateTime.UtcNow.AddSeconds(10))).Servers;

    private static async Task<T> EventuallyAsync<T>(Func<Task<T>> read, Func<T, bool> done)
    {
        var deadline = DateTime.UtcNow + Settle;
        while (true)
        {
            var value = await read();
            if (done(value) || DateTime.UtcNow > deadline)
                return done(value) ? value : throw new TimeoutException($"not so after {Settle.TotalSeconds} s");
            await Task.Delay(100);
        }
    }
}
