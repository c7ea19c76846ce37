using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Threading.Tasks;
using Grpc.Core;
using Grpc.Core.Interceptors;
using Grpc.Net.Client;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>The remotecache-server processes (and their start's setsid and shell stages) that a state directory started, found by argv.</summary>
internal static class ServerProcesses
{
    /// <summary>Pid and server id of every live process whose argv names <paramref name="admissionKeyFile"/> and a local server id.</summary>
    public static List<(int Pid, string ServerId)> Of(string admissionKeyFile)
    {
        var found = new List<(int, string)>();
        foreach (string dir in Directory.GetDirectories("/proc"))
        {
            if (!int.TryParse(Path.GetFileName(dir), out int pid))
                continue;
            try
            {
                var argv = File.ReadAllText(Path.Combine(dir, "cmdline")).Split('\0');
                int key = Array.IndexOf(argv, "--admission-key"), id = Array.IndexOf(argv, "--server-id");
                if (key >= 0 && id >= 0 && key + 1 < argv.Length && id + 1 < argv.Length && argv[key + 1] == admissionKeyFile)
                    found.Add((pid, argv[id + 1]));
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
            }
        }
        return found;
    }

    public static void Signal(int pid, string signal)
    {
        using var kill = Process.Start(new ProcessStartInfo("kill") { ArgumentList = { "-" + signal, pid.ToString(System.Globalization.CultureInfo.InvariantCulture) }, RedirectStandardError = true });
        kill?.WaitForExit(5000);
    }

    /// <summary>Kills whatever the test left (a failed test must not leave servers behind).</summary>
    public static void KillAll(string admissionKeyFile)
    {
        foreach (var (pid, _) in Of(admissionKeyFile))
            Signal(pid, "KILL");
    }
}

/// <summary>
/// The real <c>remotecache-manager</c> process killed (SIGKILL) with Allocates in flight, and restarted on the same state
/// directory: nothing it started is left running unrecorded, and an Allocate retried with its request id gets the
/// cache its first attempt placed, or a new one, never two.
/// </summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class CrashConsistencyTests
{
    private const int AllocatesPerRound = 3;

    private sealed class ManagerProcess : IDisposable
    {
        private readonly TestManager _files;
        private readonly string[] _flags;
        private Process? _process;

        public ManagerProcess(TestManager files, int port, params string[] flags)
        {
            _files = files;
            _flags = flags;
            Address = new Uri($"http://127.0.0.1:{port}");
        }

        public Uri Address { get; }

        public void Start()
        {
            var start = new ProcessStartInfo("dotnet") { RedirectStandardOutput = true, RedirectStandardError = true };
            foreach (string a in new[]
                     {
                         "exec", Path.Combine(AppContext.BaseDirectory, "RemoteCache.Manager.dll"), "--listen", Address.ToString(),
                         "--state-dir", _files.StateDirectory, "--catalogue", _files.Options.Catalogue!, "--models", _files.Options.Models!,
                         "--keys", _files.Options.Keys!, "--warm", "0", "--probe-period", "0.5",
                     }.Concat(_flags))
                start.ArgumentList.Add(a);
            _process = Process.Start(start)!;
            // Drained so that a full pipe never blocks the manager; kept for the checks of what it logs.
            _process.OutputDataReceived += (_, e) => Keep(e.Data);
            _process.ErrorDataReceived += (_, e) => Keep(e.Data);
            _process.BeginOutputReadLine();
            _process.BeginErrorReadLine();
        }

        private readonly System.Collections.Concurrent.ConcurrentQueue<string> _lines = new();

        private void Keep(string? line)
        {
            if (line is not null)
                _lines.Enqueue(line);
        }

        /// <summary>What every run of the manager printed so far.</summary>
        public IReadOnlyCollection<string> Lines => _lines;

        /// <summary>kill -9: no shutdown of any kind.</summary>
        public void Kill()
        {
            _process!.Kill(entireProcessTree: false);
            _process.WaitForExit();
            _process.Dispose();
            _process = null;
        }

        /// <summary>SIGTERM: the manager's orderly shutdown.</summary>
        public void Stop()
        {
            ServerProcesses.Signal(_process!.Id, "TERM");
            Assert.True(_process.WaitForExit(30_000), "the manager did not stop on SIGTERM");
            _process.Dispose();
            _process = null;
        }

        public void Dispose()
        {
            if (_process is not null && !_process.HasExited)
                _process.Kill();
            _process?.Dispose();
        }
    }

    private static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }

    private static CallInvoker Keyed(GrpcChannel channel, string key) =>
        channel.CreateCallInvoker().Intercept(m =>
        {
            m.Add("authorization", "Bearer " + key);
            return m;
        });

    private static async Task<List<Server>> WhenServingAsync(ServerPool.ServerPoolClient pool)
    {
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(60);
        while (true)
        {
            try
            {
                return (await pool.ListServersAsync(new ListServersRequest(), deadline: DateTime.UtcNow.AddSeconds(5))).Servers.ToList();
            }
            catch (RpcException e) when (e.StatusCode is StatusCode.Unavailable or StatusCode.DeadlineExceeded && DateTime.UtcNow < deadline)
            {
                await Task.Delay(100);
            }
        }
    }

    private static AllocateRequest Allocate(string requestId) => new() { Capacity = (ulong)(64 * MiB), Transport = "tcp", Name = "crash", RequestId = requestId };

    [Fact]
    public async Task AManagerKilledWithAllocatesInFlightLeavesNoServerUnrecordedAndRetriesGetOneCacheEach()
    {
        await using var files = new TestManager(warm: 0);
        string admissionKey = Path.Combine(files.StateDirectory, "admission.key");
        string logs = Path.Combine(files.StateDirectory, "local");
        using var manager = new ManagerProcess(files, FreePort());
        using var channel = GrpcChannel.ForAddress(manager.Address);
        var tenant = new CacheManager.CacheManagerClient(Keyed(channel, AliceKey));
        var pool = new ServerPool.ServerPoolClient(Keyed(channel, OpsKey));
        try
        {
            manager.Start();
            await WhenServingAsync(pool);
            // Each round kills the manager at another point of its Allocates: as the k-th server of the round starts
            // (its log appears while the manager waits for it to be ready), a moment after, or before any started.
            var kills = new (int Started, int DelayMs)[] { (1, 0), (2, 0), (1, 40), (3, 15), (0, 0) };
            foreach (var (started, delayMs) in kills)
            {
                var before = Directory.Exists(logs) ? Directory.GetFiles(logs, "*.log").ToHashSet() : new HashSet<string>();
                var ids = Enumerable.Range(0, AllocatesPerRound).Select(_ => Guid.NewGuid().ToString("N")).ToList();
                var calls = ids.Select(id => tenant.AllocateAsync(Allocate(id), deadline: DateTime.UtcNow.AddSeconds(30)).ResponseAsync).ToList();
                var waited = Stopwatch.StartNew();
                while (started > 0 && waited.Elapsed < TimeSpan.FromSeconds(20) && !calls.All(c => c.IsCompleted) &&
                       (Directory.Exists(logs) ? Directory.GetFiles(logs, "*.log").Count(f => !before.Contains(f)) : 0) < started)
                    await Task.Delay(2);
                if (delayMs > 0)
                    await Task.Delay(delayMs);
                manager.Kill();
                var first = new Dictionary<string, ulong>();
                foreach (var (id, call) in ids.Zip(calls))
                {
                    try
                    {
                        first[id] = (await call).Cache.CacheId;
                    }
                    catch (RpcException e) when (e.StatusCode is StatusCode.Unavailable or StatusCode.Internal or StatusCode.Cancelled)
                    {
                        // Cut by the kill: placed or not, the retry below says.
                    }
                }

                manager.Start();
                var servers = await WhenServingAsync(pool);
                var known = servers.Select(s => s.ServerId).ToHashSet();
                var leaked = ServerProcesses.Of(admissionKey).Where(p => !known.Contains(p.ServerId)).ToList();
                Assert.True(leaked.Count == 0, $"round ({started}, {delayMs} ms): processes of this state directory the restarted manager does not know: " +
                                               string.Join(", ", leaked.Select(p => $"{p.ServerId} (pid {p.Pid})")));
                Assert.All(ServerProcesses.Of(admissionKey), p => Assert.Contains(p.ServerId, known));
                var strayLogs = Directory.GetFiles(logs, "*.log").Select(Path.GetFileName)
                                         .Where(f => !f!.EndsWith(".ended.log", StringComparison.Ordinal) && !known.Contains(f[..^".log".Length])).ToList();
                Assert.True(strayLogs.Count == 0, $"logs of servers the manager does not know: {string.Join(", ", strayLogs)}");

                // Every Allocate retried with its request id: the cache its first attempt placed, or a new one; one cache per id.
                foreach (string id in ids)
                {
                    var retried = await tenant.AllocateAsync(Allocate(id), deadline: DateTime.UtcNow.AddSeconds(30));
                    if (first.TryGetValue(id, out ulong cacheId))
                        Assert.Equal(cacheId, retried.Cache.CacheId);
                }
                var caches = (await tenant.ListCachesAsync(new ListCachesRequest())).Caches;
                Assert.Equal(AllocatesPerRound, caches.Count);
                foreach (var cache in caches)
                    await tenant.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
                // --warm 0: a freed server is stopped at once.
                Assert.Empty(ServerProcesses.Of(admissionKey));
            }

            manager.Stop();
            Assert.Empty(ServerProcesses.Of(admissionKey));
            // The manager logs what it did, not each request: ASP.NET Core's and gRPC's request lines are below its defaults.
            Assert.Contains(manager.Lines, l => l.Contains("Allocated cache", StringComparison.Ordinal));
            Assert.DoesNotContain(manager.Lines, l => l.Contains("Microsoft.AspNetCore", StringComparison.Ordinal) || l.Contains("Grpc.AspNetCore", StringComparison.Ordinal));
        }
        finally
        {
            manager.Dispose();
            ServerProcesses.KillAll(admissionKey);
        }
    }

    /// <summary>
    /// Servers that join while the manager is killed -9 (a join answered and not yet registered, answered and lost, or
    /// not yet answered) and one whose host died between its Join and its first heartbeat: after the restart nothing is
    /// half-made — the half-joined record is forgotten after the TTL, every server that joins (again, as a supervisor
    /// restarts a failed `serve`) is registered once under an id of its own, and the token still admits joins.
    /// </summary>
    [Fact]
    public async Task AManagerKilledWithJoinsInFlightLeavesNoServerHalfJoinedAndEachJoinsOnce()
    {
        await using var files = new TestManager(warm: 0);
        using var manager = new ManagerProcess(files, FreePort(), "--allocator", "static", "--heartbeat-interval", "0.25", "--heartbeat-ttl", "1");
        using var channel = GrpcChannel.ForAddress(manager.Address);
        var pool = new ServerPool.ServerPoolClient(Keyed(channel, OpsKey));
        var joined = new List<JoinedServer>();
        try
        {
            manager.Start();
            await WhenServingAsync(pool);
            string token = (await pool.IssueJoinTokenAsync(new IssueJoinTokenRequest { Description = "crash" })).Secret;
            var members = new ServerMembership.ServerMembershipClient(Keyed(channel, token));
            var half = await members.JoinAsync(new JoinRequest { Name = "half", Cores = 1, Memory = (ulong)(256 * MiB), RegionBytes = (ulong)(64 * MiB) });
            JoinedServerOptions Options(int i) => new()
            {
                Managers = { manager.Address }, JoinToken = token, Name = $"host{i}", Listen = { "tcp:127.0.0.1:0" }, RegionSize = 64 * MiB,
                MemoryLimit = 256 * MiB, MaxThreads = 1, CallTimeout = TimeSpan.FromSeconds(5),
            };
            // Killed a few milliseconds into four joins, at another point of each on every run of the test.
            var joins = Enumerable.Range(0, 4).Select(i => JoinedServer.JoinAsync(Options(i))).ToList();
            await Task.Delay(Random.Shared.Next(0, 30));
            manager.Kill();
            manager.Start();
            await WhenServingAsync(pool);
            for (int i = 0; i < joins.Count; i++)
            {
                try
                {
                    joined.Add(await joins[i]);
                }
                catch (RemoteCacheManagerException)
                {
                    joined.Add(await JoinedServer.JoinAsync(Options(i)));  // a supervisor restarting a serve that failed to join
                }
            }

            // Past the TTL: every live server Ready once, under its own id; the half-joined record gone; nothing else left.
            await Task.Delay(TimeSpan.FromSeconds(3));
            var servers = (await pool.ListServersAsync(new ListServersRequest())).Servers.ToList();
            Assert.DoesNotContain(servers, s => s.ServerId == half.ServerId);
            Assert.DoesNotContain(servers, s => s.State == ServerState.Joining);
            var ready = servers.Where(s => s.State == ServerState.Ready).Select(s => s.ServerId).OrderBy(id => id).ToList();
            Assert.Equal(joined.Select(j => j.ServerId).OrderBy(id => id), ready);
            Assert.Equal(ready.Count, servers.Where(s => s.State == ServerState.Ready).Select(s => s.Endpoints["tcp"]).Distinct().Count());
            // A server that joined before the kill and was registered either kept its id (heartbeats resumed with the new
            // process) or was failed and forgotten; none is left Failed holding nothing.
            Assert.DoesNotContain(servers, s => s.State == ServerState.Failed && s.CacheId == 0);

            // The token admits joins still, and the servers are allocatable.
            joined.Add(await JoinedServer.JoinAsync(Options(joins.Count)));
            ready.Add(joined[^1].ServerId);
            await using var tenant = new RemoteCacheManagerClient(new RemoteCacheManagerOptions { Address = manager.Address, ApiKey = AliceKey });
            await using var cache = await tenant.CreateAsync(new ManagedCacheRequest { Capacity = 64 * MiB, Transport = "tcp" });
            Assert.Contains(cache.Info.Servers.Single().ServerId, ready);
            await cache.DeleteAsync();
        }
        finally
        {
            foreach (var j in joined)
                await j.DisposeAsync();
        }
    }
}
