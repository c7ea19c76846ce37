using System;
using System.Collections.Generic;
using System.CommandLine;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using Grpc.Core.Interceptors;
using Grpc.Net.Client;
using RemoteCache.Manager.V1;
using static RemoteCache.Benchmarks.Manager.Program;

namespace RemoteCache.Benchmarks.Manager;

/// <summary>
/// Servers that join by themselves, timed against a manager in process (static pool, SQLite): join to allocatable (the
/// Join, the server's start and its first heartbeat with the admin check of its endpoints) beside AddServer of a
/// running server (the operator's path, the same check) in the same run; and a host lost (its heartbeats stop) to
/// ServerFailed at its cache's watcher, against the heartbeat TTL.
/// </summary>
internal static class MembershipBench
{
    public static Command Command()
    {
        var rounds = new Option<int>("--rounds") { Description = "Servers joined (and lost) one after another", DefaultValueFactory = _ => 30 };
        var ttl = new Option<double>("--heartbeat-ttl") { Description = "The manager's --heartbeat-ttl, seconds (heartbeats every quarter of it)", DefaultValueFactory = _ => 2 };
        var json = new Option<string?>("--json") { Description = "Where the figures go (JSON) [default: artifacts/manager-membership.json]" };
        var command = new Command("membership", "Join to allocatable (beside AddServer) and a host lost to ServerFailed at its cache's watcher (against the heartbeat TTL), with a manager in process")
        {
            rounds, ttl, json,
        };
        command.SetAction(async (parse, ct) =>
        {
            string dir = Directory.CreateTempSubdirectory("membership-").FullName;
            try
            {
                var result = await RunAsync(dir, parse.GetValue(rounds), TimeSpan.FromSeconds(parse.GetValue(ttl)), ct);
                string path = parse.GetValue(json) ?? Path.Combine("artifacts", "manager-membership.json");
                Directory.CreateDirectory(Path.GetDirectoryName(Path.GetFullPath(path))!);
                await File.WriteAllTextAsync(path, JsonSerializer.Serialize(result, new JsonSerializerOptions { WriteIndented = true }), ct);
                Console.WriteLine($"figures: {path}");
                return 0;
            }
            finally
            {
                Directory.Delete(dir, recursive: true);
            }
        });
        return command;
    }

    private sealed record Result(string Date, int Rounds, double TtlSeconds, double JoinP50Ms, double JoinP99Ms, double AddServerP50Ms, double AddServerP99Ms,
                                 double LostP50Ms, double LostP99Ms, double LostMaxMs, bool JoinTargetMet, bool LostTargetMet);

    private static async Task<Result> RunAsync(string dir, int rounds, TimeSpan ttl, CancellationToken ct)
    {
        await using var manager = await Program.Manager.StartAsync(dir, HalfGiBCatalogue, warm: 0, configure: o =>
        {
            o.Allocator = "static";
            o.HeartbeatTtl = ttl;
            o.HeartbeatInterval = ttl / 4;
        });
        var ops = manager.Operator;
        string token = (await ops.IssueJoinTokenAsync(new IssueJoinTokenRequest { Description = "bench" }, cancellationToken: ct)).Secret;
        await using var managed = manager.ManagedClient();
        var joins = new List<double>();
        var adds = new List<double>();
        var lost = new List<double>();
        for (int round = -3; round < rounds; round++)  // three to warm up
        {
            // The operator's path: a running server added (the same admin check), then removed.
            var key = File.ReadAllBytes(Path.Combine(dir, "state", "admission.key"));
            using (var server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = { "tcp:127.0.0.1:0" }, RegionSize = 64L << 20, MemoryLimit = 512L << 20, MaxThreads = 1, AdmissionKey = key }))
            {
                var add = new AddServerRequest { VmType = "half" };
                add.Endpoints.Add("tcp", server.Endpoints[0]);
                var t = Stopwatch.StartNew();
                await ops.AddServerAsync(add, cancellationToken: ct);
                if (round >= 0)
                    adds.Add(t.Elapsed.TotalMilliseconds);
                await ops.RemoveServerAsync(new RemoveServerRequest { ServerId = server.ServerId }, cancellationToken: ct);
            }

            var clock = Stopwatch.StartNew();
            var joined = await JoinedServer.JoinAsync(new JoinedServerOptions
            {
                Managers = { manager.Address }, JoinToken = token, Name = "bench", Listen = { "tcp:127.0.0.1:0" }, RegionSize = 64L << 20,
                MemoryLimit = 512L << 20, MaxThreads = 1,
            }, ct);
            double joinMs = clock.Elapsed.TotalMilliseconds;
            await using var cache = await managed.CreateAsync(new ManagedCacheRequest { Capacity = 256L << 20 }, ct);
            if (cache.Info.Servers.Single().ServerId != joined.ServerId)
                throw new InvalidOperationException($"the cache went to {cache.Info.Servers.Single().ServerId}, not the server that joined ({joined.ServerId})");
            var failed = new TaskCompletionSource<double>(TaskCreationOptions.RunContinuationsAsynchronously);
            using var watching = CancellationTokenSource.CreateLinkedTokenSource(ct);
            var watch = Task.Run(async () =>
            {
                try
                {
                    await foreach (var e in managed.WatchAsync(cache.CacheId, 1, watching.Token))
                        if (e is ServerFailedEvent)
                            failed.TrySetResult(clock.Elapsed.TotalMilliseconds);
                }
                catch (OperationCanceledException)
                {
                }
            });
            await Task.Delay(ttl / 2, ct);  // a few heartbeats in
            clock.Restart();
            await joined.DisposeAsync();  // the host is gone: its heartbeats stop with it
            double lostMs = await failed.Task.WaitAsync(ttl * 4, ct);
            watching.Cancel();
            await watch;
            if (round < 0)
                continue;
            joins.Add(joinMs);
            lost.Add(lostMs);
            Console.WriteLine(Invariant($"round {round + 1}/{rounds}: joined and allocatable in {joinMs:0.0} ms (AddServer {adds[^1]:0.0} ms); lost → ServerFailed in {lostMs:0} ms"));
        }
        var result = new Result(DateTime.UtcNow.ToString("yyyy-MM-dd", System.Globalization.CultureInfo.InvariantCulture), rounds, ttl.TotalSeconds,
                                Quantile(joins, 0.5), Quantile(joins, 0.99), Quantile(adds, 0.5), Quantile(adds, 0.99), Quantile(lost, 0.5), Quantile(lost, 0.99), lost.Max(),
                                Quantile(joins, 0.99) <= 1000, lost.Max() <= (ttl + TimeSpan.FromSeconds(1)).TotalMilliseconds);
        Console.WriteLine(Invariant($"join to allocatable: p50 {result.JoinP50Ms:0.0} ms, p99 {result.JoinP99Ms:0.0} ms (target p99 ≤ 1 s: {(result.JoinTargetMet ? "met" : "MISSED")}); AddServer of a running server in the same run: p50 {result.AddServerP50Ms:0.0} ms, p99 {result.AddServerP99Ms:0.0} ms → {result.JoinP50Ms / result.AddServerP50Ms:0.0}× at the median"));
        Console.WriteLine(Invariant($"host lost to ServerFailed at the watcher: p50 {result.LostP50Ms:0} ms, p99 {result.LostP99Ms:0} ms, max {result.LostMaxMs:0} ms; TTL {ttl.TotalMilliseconds:0} ms (target ≤ TTL + 1 s: {(result.LostTargetMet ? "met" : "MISSED")})"));
        return result;
    }
}
