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
                                                 list => list.Count == 1, Describe);
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
    /// A host takes its memory back: every host of the servers and of YCSB is a memory cgroup (the bed's), srv1 one of 1 GiB running two servers (<c>remotecache serve --lend auto
    /// --reserve 384M</c>: each lends what the host leaves), one holding a managed cache under a verified load, the other
    /// the cache of a FasterKV under YCSB (the tiered device over tcp, files under it) on a client host of its own; a
    /// producer service in the same cgroup, timing its own requests, grows its working set in steps of 128 MiB. When what
    /// srv1 lends no longer fits beside the producer, the caches are moved to srv2 and srv3 (or, if the host needs the
    /// memory faster, dropped and reported lost; FASTER's reads then fall through to its files): 0 processes OOM-killed,
    /// 0 wrong reads in either client, and after each step the manager's view of srv1's servers says what they lend.
    /// </summary>
    [ClusterFact]
    public async Task AHostTakesItsMemoryBackAndTheCachesOnItMoveOrAreReportedLostNeverAProcessKilled()
    {
        var bed = await ClusterBed.StartAsync(managers: 0, servers: 0, register: false);
        try
        {
            var manager = await bed.AddManagerAsync(new[] { "--heartbeat-interval", "0.25", "--heartbeat-ttl", "3" });
            await bed.LeaderAsync(Settle);
            string token = (await manager.Operator().IssueJoinTokenAsync(new IssueJoinTokenRequest(), deadline: DateTime.UtcNow.AddSeconds(10))).Secret;
            string tokenFile = Path.Combine(bed.Bed.Directory, "join.token");
            File.WriteAllText(tokenFile, token + "\n");
            File.SetUnixFileMode(tokenFile, UnixFileMode.UserRead | UnixFileMode.UserWrite);
            string Serve(BedHost host, int port, string lend) =>
                $"{Path.Combine(AppContext.BaseDirectory, "RemoteCache.Cli.dll")} serve --join {manager.Origin} --join-token {tokenFile} " +
                $"--listen tcp:{host.Address}:{port} --threads 1 --name {host.Name} {lend}";
            var environment = new Dictionary<string, string> { ["DOTNET_NOLOGO"] = "1" };

            // Every server host is a memory cgroup of 1 GiB; srv1 is the one whose own processes will want it back.
            var producerHost = await bed.Bed.AddHostAsync("srv1", 1L << 30);
            var lenders = new[] { 7300, 7301 }.Select(port => producerHost.Start($"serve{port}", "dotnet", Serve(producerHost, port, "--lend auto --reserve 384M --verbose").Split(' '), environment)).ToList();
            foreach (var lender in lenders)
            {
                await lender.WaitForOutputAsync("ready", Settle);
                Log($"srv1: {lender.LastLine("joined as ")}");
            }
            await using var managed = new RemoteCacheManagerClient(new RemoteCacheManagerOptions { Addresses = bed.ManagerAddresses.ToList(), ApiKey = AliceKey });
            await using var cache = await managed.CreateAsync(new ManagedCacheRequest { Capacity = 128 * MiB, Duration = TimeSpan.FromHours(1) });
            Assert.StartsWith("srv1.", cache.Info.Servers.Single().ServerId);
            await using var load = VerifiedLoad.Start(cache);
            await load.WaitForOperationsAsync(500, Settle);
            // FasterKV under YCSB: its reads check every value, and it exits non-zero on a wrong read or a device that failed.
            var ycsb = await StartYcsbAsync(bed, manager);
            Assert.StartsWith("srv1.", ycsb.Server);
            var srv1Ids = new[] { cache.Info.Servers.Single().ServerId, ycsb.Server };
            // The servers the caches can move to.
            foreach (string name in new[] { "srv2", "srv3" })
            {
                var spareHost = await bed.Bed.AddHostAsync(name, 1L << 30);
                var spare = spareHost.Start("serve", "dotnet", Serve(spareHost, 7300, "--lend 256M").Split(' '), environment);
                await spare.WaitForOutputAsync("ready", Settle);
            }

            // The producer: a service timing its own requests, growing its working set by 128 MiB every 2 s of requests.
            string script = Path.Combine(AppContext.BaseDirectory, "producer.py");
            var producer = producerHost.Start("producer", "python3", new[] { "-u", script, "128,256,384,512,640", "2", "1" });
            await producer.WaitForOutputAsync("ready", Settle);
            foreach (int step in new[] { 128, 256, 384, 512, 640 })
            {
                await producer.WaitForOutputAsync($"step {step} ", Settle);
                var view = (await ServersAsync(manager)).Where(s => srv1Ids.Contains(s.ServerId));
                long usage = producerHost.CgroupValue("memory.usage_in_bytes");
                Log($"producer at {step} MiB ({producer.LastLine($"step {step} ")}): cgroup usage {usage >> 20} MiB; " +
                    string.Join(", ", view.Select(s => $"{s.ServerId} {s.State} lent {s.MemoryLent >> 20} MiB")) +
                    $"; plain cache on {string.Join(",", cache.Info.Servers.Select(x => x.ServerId))}, load {load.Summary}");
                // Before the host wants its memory: the manager's view is each server's own report, the caches they hold.
                if (step == 128)
                {
                    Assert.Contains(view, s => s.ServerId == srv1Ids[0] && s.State == ServerState.Ready && s.MemoryLent >= 128 * MiB);
                    Assert.Contains(view, s => s.ServerId == srv1Ids[1] && s.State == ServerState.Ready && s.MemoryLent > 0);
                }
            }
            // YCSB ran through the steps: every value it read was the one it wrote, whether its cache moved or was lost (then
            // its reads fell through to the files).
            await Task.WhenAny(ycsb.Process.Exited, Task.Delay(TimeSpan.FromSeconds(YcsbSeconds * 3)));
            Log($"ycsb: {ycsb.Process.Tail()}");
            Assert.True(ycsb.Process.ExitCode == 0, $"YCSB on FasterKV ended with {ycsb.Process.ExitCode?.ToString(System.Globalization.CultureInfo.InvariantCulture) ?? "nothing (still running)"}");
            Assert.False(producer.HasExited, "the producer was killed");
            Assert.Equal(0, producerHost.OomKills);
            Assert.All(lenders, l => Assert.False(l.HasExited, $"a server on srv1 was killed: {l.Tail()}"));
            // Moved, or reported lost and replaced: either way no cache is on srv1, and the manager places nothing there
            // while the producer holds the memory.
            Assert.DoesNotContain(cache.Info.Servers, x => x.ServerId.StartsWith("srv1.", StringComparison.Ordinal));
            Assert.DoesNotContain(await ServersAsync(manager), s => s.ServerId.StartsWith("srv1.", StringComparison.Ordinal) && s.State == ServerState.Ready);
            // The caches left in time: srv1's servers stay what they were (no new incarnation), taking no cache until the host has memory.
            foreach (var kept in (await ServersAsync(manager)).Where(s => srv1Ids.Contains(s.ServerId)))
                Assert.True(kept.State is ServerState.Reclaiming or ServerState.Draining, $"{kept.ServerId} is {kept.State}");
            Assert.All(lenders, l => Assert.False(l.Printed("joined again"), "a server on srv1 joined again: " + l.LastLine("joined again")));
            // What the manager says srv1's servers lend is what they say: nothing, once the host took its memory back.
            const string gaveBack = "Gave the host its memory back";
            var given = lenders.Select(l => l.Lines("").LastOrDefault(line => line.Contains(gaveBack, StringComparison.Ordinal))).OfType<string>().ToList();
            Assert.NotEmpty(given);
            Assert.All(given, line => Assert.Matches(@"\(lending 0 of \d+ bytes\)", line));
            var lentAfter = await EventuallyAsync(async () => (await ServersAsync(manager)).Where(s => srv1Ids.Contains(s.ServerId)).ToList(),
                                                  list => list.Count == srv1Ids.Length && list.All(s => s.MemoryLent == 0),
                                                  list => $"{Describe(list)}; the servers said: " +
                                                          string.Join("\n---\n", lenders.Select(l => l.Tail(8))));
            Log("after: " + Describe(lentAfter));
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
        }
    }

    // Long enough for the producer's five steps and the moves they cause.
    private const int YcsbSeconds = 30;

    private sealed record Ycsb(BedProcess Process, string Server);

    /// <summary>
    /// Starts the main job's YCSB tool (FasterKV, the tiered device: a RemoteCache over tcp, files under it) on a client
    /// host, its cache created through <paramref name="manager"/> by capacity; returns once its run phase has begun, with
    /// the server its cache went to.
    /// </summary>
    private static async Task<Ycsb> StartYcsbAsync(ClusterBed bed, BedManager manager)
    {
        // The tool's own output (benchmarks/Ycsb/bin/CONFIGURATION/net10.0), built with the solution: it targets the newest
        // framework only, so the .NET 8 run of these tests uses the same build.
        var output = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar));
        string root = output.Parent!.Parent!.Parent!.Parent!.Parent!.FullName;
        string tool = Path.Combine(root, "benchmarks", "Ycsb", "bin", output.Parent.Name, "net10.0", "RemoteCache.Benchmarks.Ycsb.dll");
        if (!File.Exists(tool))
        {
            // A run of the .NET 8 suite alone: build it (it targets net10.0 only, so the net8.0 build of the tests does not).
            using var build = Process.Start(new ProcessStartInfo("dotnet", new[] { "build", Path.Combine(root, "benchmarks", "Ycsb"), "-c", output.Parent.Name, "-v", "q" }))!;
            await build.WaitForExitAsync();
            Assert.True(build.ExitCode == 0 && File.Exists(tool), $"the YCSB tool did not build at {tool} (exit {build.ExitCode})");
        }
        string keyFile = Path.Combine(bed.Bed.Directory, "ycsb.key");
        File.WriteAllText(keyFile, BobKey + "\n");
        File.SetUnixFileMode(keyFile, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        string dir = Path.Combine(bed.Bed.Directory, "ycsb");
        var host = await bed.Bed.AddHostAsync("ycsb", 2L << 30);
        var process = host.Start("ycsb", "dotnet", new[]
        {
            tool, "--manager", manager.Origin, "--api-key-file", keyFile, "--transport", "tcp", "--devices", "remotecache", "--workload", "readonly",
            "--distributions", "uniform", "--threads", "1", "--records", "200000", "--rounds", "1", "--warmup", "0",
            "--duration", YcsbSeconds.ToString(System.Globalization.CultureInfo.InvariantCulture), "--no-fio", "--out", dir, "--data-dir", Path.Combine(dir, "data"),
        }, new Dictionary<string, string> { ["DOTNET_NOLOGO"] = "1" });
        await process.WaitForOutputAsync("remotecache device: cache ", TimeSpan.FromSeconds(120));
        await process.WaitForOutputAsync("remotecache: readonly uniform, 1 thread", TimeSpan.FromSeconds(120));
        // Where the cache went, from the manager (the tool's console wraps its lines wherever the cache id's length puts them).
        var caches = (await manager.Tenant(BobKey).ListCachesAsync(new ListCachesRequest(), deadline: DateTime.UtcNow.AddSeconds(10))).Caches;
        Assert.True(caches.Count == 1, $"YCSB's tenant holds {caches.Count} caches, not 1: {process.Tail()}");
        return new Ycsb(process, caches.Single().Servers.Single().ServerId);
    }

    private static string Describe(IEnumerable<Server> servers) =>
        string.Join(", ", servers.Select(s => $"{s.ServerId} {s.State} lent {s.MemoryLent} bytes")) is { Length: > 0 } listed ? listed : "no such server";

    private static async Task<IReadOnlyList<Server>> ServersAsync(BedManager manager) =>
        (await manager.Operator().ListServersAsync(new ListServersRequest(), deadline: DateTime.UtcNow.AddSeconds(10))).Servers;

    // The refusal says what was last read (CI keeps only a failed test's message): describe renders it.
    private static async Task<T> EventuallyAsync<T>(Func<Task<T>> read, Func<T, bool> done, Func<T, string> describe)
    {
        var deadline = DateTime.UtcNow + Settle;
        while (true)
        {
            var value = await read();
            if (done(value) || DateTime.UtcNow > deadline)
                return done(value) ? value : throw new TimeoutException($"not so after {Settle.TotalSeconds} s: {describe(value)}");
            await Task.Delay(100);
        }
    }
}
