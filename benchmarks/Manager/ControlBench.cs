using System;
using System.Collections.Generic;
using System.CommandLine;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Text.Json;
using System.Threading;
using System.Threading.RateLimiting;
using System.Threading.Tasks;
using dotnet_etcd;
using Etcdserverpb;
using Google.Protobuf;
using Grpc.Core;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.V1;
using RemoteCache.Slo;
using static RemoteCache.Benchmarks.Manager.Program;

namespace RemoteCache.Benchmarks.Manager;

/// <summary>
/// The control plane on etcd against SQLite, with real manager processes (<see cref="ControlPlane"/>): Allocate latency
/// and Allocate + Deallocate throughput per store in one run (<c>control</c>), and the time the control plane is
/// unavailable when the leader is killed or stopped (<c>failover</c>).
/// </summary>
internal static class ControlBench
{
    // A cache of one region: one whole bench server (the static pool rents whole servers).
    private static AllocateRequest CacheRequest() => Request(ControlPlane.RegionBytes);

    public static Command ControlCommand()
    {
        var stores = new Option<string[]>("--store") { Description = "Stores to measure, in this order (sqlite: one manager; etcd: 3 members and --replicas managers)", DefaultValueFactory = _ => new[] { "sqlite", "etcd" }, AllowMultipleArgumentsPerToken = true };
        var replicas = new Option<int>("--replicas") { Description = "Manager replicas on etcd", DefaultValueFactory = _ => 3 };
        var iterations = new Option<int>("--iterations") { Description = "Allocate/Deallocate pairs timed for latency, one caller", DefaultValueFactory = _ => 300 };
        var seconds = new Option<double>("--seconds") { Description = "Seconds of each throughput round", DefaultValueFactory = _ => 5 };
        var rounds = new Option<int>("--rounds") { Description = "Throughput rounds per store, the stores taking turns (medians are reported)", DefaultValueFactory = _ => 3 };
        var clients = new Option<int>("--clients") { Description = "Concurrent callers in the throughput run", DefaultValueFactory = _ => 8 };
        var json = new Option<string>("--json") { Description = "Where the figures go (JSON)", DefaultValueFactory = _ => Path.Combine("artifacts", "manager-control.json") };
        var command = new Command("control", "Allocate latency and Allocate + Deallocate throughput against the leader, SQLite vs etcd (3 loopback members), static pool of real servers, real manager processes")
        {
            stores, replicas, iterations, seconds, rounds, clients, json,
        };
        command.SetAction(async (parse, ct) =>
        {
            int n = parse.GetValue(clients);
            var planes = new List<(string Store, ControlPlane Plane, int Leader, string Dir)>();
            try
            {
                // Every store's plane runs from the start, so that their throughput rounds can take turns: the box's
                // drift over a run lands on both alike.
                foreach (string store in parse.GetValue(stores)!)
                {
                    string dir = Directory.CreateTempSubdirectory($"control-{store}-").FullName;
                    var plane = await ControlPlane.StartAsync(dir, store, store == "etcd" ? parse.GetValue(replicas) : 1, servers: n + 2);
                    planes.Add((store, plane, await plane.SettledAsync(TimeSpan.FromSeconds(30)), dir));
                }
                EtcdReference? reference = null;
                if (planes.FirstOrDefault(p => p.Plane.EtcdEndpoints is not null) is { Plane.EtcdEndpoints: { } endpoints })
                    reference = await EtcdReferenceAsync(endpoints, parse.GetValue(iterations), n, TimeSpan.FromSeconds(parse.GetValue(seconds)));
                var latencies = new List<(int Count, double P50, double P99, double DeallocateP50, double DeallocateP99)>();
                foreach (var p in planes)
                    latencies.Add(await LatencyAsync(p.Plane.Managers[p.Leader].Tenant, parse.GetValue(iterations)));
                var measured = planes.Select(_ => new List<(double Rate, CpuPerPair Cpu)>()).ToList();
                for (int round = 0; round < parse.GetValue(rounds); round++)
                    for (int i = 0; i < planes.Count; i++)
                        measured[i].Add(await ThroughputAsync(planes[i].Plane, planes[i].Leader, n, TimeSpan.FromSeconds(parse.GetValue(seconds)), warmUp: round == 0));
                // Then every store at once, each held to one rate (well under the slowest store's alone, so that the box
                // carries them all): the leaders' CPU per pair at equal load and in equal company. Alone, the SQLite
                // manager has the box to itself while the etcd leader shares it with three busy etcd members, and every
                // part of the etcd leader then costs more per call (the whole profile, not its etcd client: perf, session
                // 15); together, both share it with the same members.
                double pace = PacedShare * measured.Min(m => Quantile(m.Select(r => r.Rate).ToList(), 0.5));
                var pacedRounds = new List<(double PerSecond, CpuPerPair Cpu)[]>();
                for (int round = 0; round < parse.GetValue(rounds); round++)
                    pacedRounds.Add(await Task.WhenAll(planes.Select(p => ThroughputAsync(p.Plane, p.Leader, n, TimeSpan.FromSeconds(parse.GetValue(seconds)), warmUp: false, pace))));
                var paced = planes.Select((_, i) => (PerSecond: Quantile(pacedRounds.Select(r => r[i].PerSecond).ToList(), 0.5), Cpu: CpuPerPair.Median(pacedRounds.Select(r => r[i].Cpu)))).ToList();
                // Measured warm (after the rounds), each plane alone: what its parts use with no calls.
                var idle = new List<CpuRates>();
                foreach (var p in planes)
                    idle.Add(await IdleAsync(p.Plane, p.Leader));

                var results = new List<StoreFigures>();
                for (int i = 0; i < planes.Count; i++)
                {
                    var (store, plane, _, _) = planes[i];
                    var latency = latencies[i];
                    var perRound = measured[i];
                    double rate = Quantile(perRound.Select(r => r.Rate).ToList(), 0.5);
                    var cpu = CpuPerPair.Median(perRound.Select(r => r.Cpu));
                    var figures = new StoreFigures(store, plane.Managers.Count, latency.Count, latency.P50, latency.P99, latency.DeallocateP50, latency.DeallocateP99, n, rate, cpu,
                                                   idle[i], cpu.LeaderMs - idle[i].Leader * 1000 / rate, perRound.Select(r => new Round(r.Rate, r.Cpu)).ToList(),
                                                   new Round(paced[i].PerSecond, paced[i].Cpu));
                    results.Add(figures);
                    Console.WriteLine(Invariant($"{store} ({figures.Managers} manager{(figures.Managers > 1 ? "s" : "")}): Allocate p50 {figures.AllocateP50Ms:0.00} ms, p99 {figures.AllocateP99Ms:0.00} ms; Deallocate p50 {figures.DeallocateP50Ms:0.00} ms, p99 {figures.DeallocateP99Ms:0.00} ms ({figures.Calls} calls); Allocate+Deallocate from {n} callers: {rate:0} per s (median of {perRound.Count} rounds: {string.Join(", ", perRound.Select(r => r.Rate.ToString("0", System.Globalization.CultureInfo.InvariantCulture)))})"));
                    Console.WriteLine(Invariant($"  at {paced[i].PerSecond:0} per s (all stores at once, each held to one rate; medians of {pacedRounds.Count} rounds): CPU per Allocate+Deallocate: leader {paced[i].Cpu.LeaderMs:0.000} ms, other managers {paced[i].Cpu.FollowersMs:0.000} ms, etcd members {paced[i].Cpu.EtcdMs:0.000} ms, cache servers {paced[i].Cpu.ServersMs:0.000} ms"));
                    Console.WriteLine(Invariant($"  CPU per Allocate+Deallocate (medians): leader {cpu.LeaderMs:0.000} ms ({figures.LeaderBeyondIdleMs:0.000} beyond its idle {idle[i].Leader * 100:0.0} % of a core), other managers {cpu.FollowersMs:0.000} ms, etcd members {cpu.EtcdMs:0.000} ms, cache servers {cpu.ServersMs:0.000} ms, callers {cpu.CallersMs:0.000} ms; {cpu.BusyCores:0.00} of {Environment.ProcessorCount} cores busy"));
                }
                var sqlite = results.FirstOrDefault(r => r.Store == "sqlite");
                var etcd = results.FirstOrDefault(r => r.Store == "etcd");
                Comparison? comparison = null;
                if (sqlite is not null && etcd is not null)
                {
                    comparison = new Comparison(etcd.AllocateP99Ms / sqlite.AllocateP99Ms, etcd.AllocateP50Ms / sqlite.AllocateP50Ms, etcd.PerSecond / sqlite.PerSecond,
                                                etcd.LeaderBeyondIdleMs / sqlite.LeaderBeyondIdleMs, etcd.Cpu.LeaderMs / sqlite.Cpu.LeaderMs,
                                                etcd.Paced.Cpu.LeaderMs / sqlite.Paced.Cpu.LeaderMs, etcd.PacedOneCore / sqlite.PacedOneCore);
                    if (reference is not null)
                        Console.WriteLine(Invariant($"etcd Allocate p99 / etcd's own transaction p99 in this run: {etcd.AllocateP99Ms / reference.P99Ms:0.00}×; etcd Allocate+Deallocate per s / etcd's own transactions per s with {reference.Callers} callers: {etcd.PerSecond / reference.PerSecond:0.000}"));
                    Console.WriteLine(Invariant($"etcd / sqlite at one rate, at once ({etcd.Paced.PerSecond:0} and {sqlite.Paced.PerSecond:0} per s): the leader's CPU per Allocate+Deallocate {comparison.PacedLeaderCpuRatio:0.00}×; pairs per s one core of the leader carries (what its idle use leaves of the core over its CPU per pair beyond that: {etcd.PacedOneCore:0} and {sqlite.PacedOneCore:0}) {comparison.PacedOneCoreRatio:0.00}× (the throughput target with the leader on cores of its own, ≥ 1: {Met(comparison.PacedOneCoreRatio >= 1)})"));
                    Console.WriteLine(Invariant($"etcd / sqlite, each alone: the leader's CPU per pair {comparison.LeaderCpuRatio:0.00}×, beyond idle {comparison.LeaderBeyondIdleRatio:0.00}×; all managers' {(etcd.Cpu.LeaderMs + etcd.Cpu.FollowersMs) / sqlite.Cpu.LeaderMs:0.00}×; all CPU per pair {etcd.Cpu.TotalMs / sqlite.Cpu.TotalMs:0.00}×"));
                    Console.WriteLine(Invariant($"etcd / sqlite: Allocate p99 {comparison.AllocateP99Ratio:0.00}× (target ≤ 2×: {Met(comparison.AllocateP99Ratio <= 2)}; etcd p99 ≤ 20 ms: {Met(etcd.AllocateP99Ms <= 20)}), p50 {comparison.AllocateP50Ratio:0.00}×; throughput on these {Environment.ProcessorCount} shared cores {comparison.ThroughputRatio:0.00}× (the issue's target ≥ 1: {Met(comparison.ThroughputRatio >= 1)}; see docs/benchmarks.md)"));
                }
                await WriteJsonAsync(parse.GetValue(json)!, new { date = Today(), setup = "loopback, distinct ports; static pool; raw gRPC against the leader; throughput rounds alternate between the stores", loadAverageAtEnd = LoadAverage(), stores = results, etcdReference = reference, comparison }, ct);
                return 0;
            }
            finally
            {
                foreach (var p in planes)
                {
                    await p.Plane.DisposeAsync();
                    Directory.Delete(p.Dir, recursive: true);
                }
            }
        });
        return command;
    }

    private sealed record Round(double PerSecond, CpuPerPair Cpu);

    private sealed record StoreFigures(string Store, int Managers, int Calls, double AllocateP50Ms, double AllocateP99Ms, double DeallocateP50Ms, double DeallocateP99Ms,
                                       int Callers, double PerSecond, CpuPerPair Cpu, CpuRates Idle, double LeaderBeyondIdleMs, IReadOnlyList<Round> Rounds,
                                       Round Paced)
    {
        /// <summary>
        /// Pairs per second one core would carry for the leader at the at-once round's cost: what its idle use leaves of
        /// the core over its CPU per pair beyond that use.
        /// </summary>
        public double PacedOneCore => (1 - Idle.Leader) * 1000 / (Paced.Cpu.LeaderMs - Idle.Leader * 1000 / Paced.PerSecond);
    }

    /// <summary>
    /// CPU time per Allocate + Deallocate in the throughput run, by part (ms): on a machine whose cores all of them share,
    /// what the rate is bounded by.
    /// </summary>
    private sealed record CpuPerPair(double LeaderMs, double FollowersMs, double EtcdMs, double ServersMs, double CallersMs, double BusyCores)
    {
        public double TotalMs => LeaderMs + FollowersMs + EtcdMs + ServersMs + CallersMs;

        public static CpuPerPair Median(IEnumerable<CpuPerPair> rounds)
        {
            var list = rounds.ToList();
            double Of(Func<CpuPerPair, double> part) => Quantile(list.Select(part).ToList(), 0.5);
            return new CpuPerPair(Of(c => c.LeaderMs), Of(c => c.FollowersMs), Of(c => c.EtcdMs), Of(c => c.ServersMs), Of(c => c.CallersMs), Of(c => c.BusyCores));
        }
    }

    /// <summary>CPU used per second with no calls, by part (cores): keep-alives, polls, probes; what a rate's CPU per call is beyond.</summary>
    private sealed record CpuRates(double Leader, double Followers, double Etcd, double Servers);

    private static readonly TimeSpan IdleWindow = TimeSpan.FromSeconds(3);

    // The rate of the round that runs every store at once, as a share of the slowest store's alone.
    private const double PacedShare = 0.4;

    private static async Task<CpuRates> IdleAsync(ControlPlane plane, int leaderIndex)
    {
        var before = plane.CpuTime(leaderIndex);
        var clock = Stopwatch.StartNew();
        await Task.Delay(IdleWindow);
        var after = plane.CpuTime(leaderIndex);
        double Rate(TimeSpan t) => t / clock.Elapsed;
        return new CpuRates(Rate(after.Leader - before.Leader), Rate(after.Followers - before.Followers), Rate(after.Etcd - before.Etcd), Rate(after.Servers - before.Servers));
    }

    /// <summary>etcd's own transactions on the same members, shaped as an Allocate's (a compare and six puts of the same sizes).</summary>
    private sealed record EtcdReference(int Calls, double P50Ms, double P99Ms, int Callers, double PerSecond);

    // The floor under any manager on these members: what one etcd transaction of an Allocate's shape costs from one caller
    // (latency) and from `callers` at once, each on its own keys (throughput), by the same client library the manager uses.
    private static async Task<EtcdReference> EtcdReferenceAsync(string endpoints, int iterations, int callers, TimeSpan duration)
    {
        using var client = new EtcdClient(endpoints);
        byte[] cache = new byte[1200], server = new byte[400], small = new byte[120];
        async Task<double> TxnAsync(string prefix, long[] revision)
        {
            var key = ByteString.CopyFromUtf8(prefix + "seq");
            var txn = new TxnRequest();
            txn.Compare.Add(revision[0] == 0
                ? new Compare { Key = key, Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Equal, CreateRevision = 0 }
                : new Compare { Key = key, Target = Compare.Types.CompareTarget.Mod, Result = Compare.Types.CompareResult.Equal, ModRevision = revision[0] });
            foreach (var (name, value) in new[] { ("cache", cache), ("server", server), ("event", small), ("log", small), ("change", small), ("seq", small) })
                txn.Success.Add(new RequestOp { RequestPut = new PutRequest { Key = ByteString.CopyFromUtf8(prefix + name), Value = ByteString.CopyFrom(value) } });
            var t = Stopwatch.StartNew();
            var response = await client.TransactionAsync(txn, null, DateTime.UtcNow.AddSeconds(10));
            double ms = t.Elapsed.TotalMilliseconds;
            if (!response.Succeeded)
                throw new InvalidOperationException("the reference transaction's comparison failed: something else wrote its keys");
            revision[0] = response.Header.Revision;
            return ms;
        }
        var one = new long[1];
        var latencies = new List<double>();
        for (int i = -20; i < iterations; i++)
        {
            double ms = await TxnAsync("/bench/ref/one/", one);
            if (i >= 0)
                latencies.Add(ms);
        }
        long done = 0;
        var clock = Stopwatch.StartNew();
        await Task.WhenAll(Enumerable.Range(0, callers).Select(async c =>
        {
            var revision = new long[1];
            while (clock.Elapsed < duration)
            {
                await TxnAsync($"/bench/ref/c{c}/", revision);
                Interlocked.Increment(ref done);
            }
        }));
        var reference = new EtcdReference(iterations, Quantile(latencies, 0.5), Quantile(latencies, 0.99), callers, done / clock.Elapsed.TotalSeconds);
        Console.WriteLine(Invariant($"etcd reference (a transaction of an Allocate's shape, same members): p50 {reference.P50Ms:0.00} ms, p99 {reference.P99Ms:0.00} ms ({iterations} from one caller); {reference.PerSecond:0} per s from {callers} callers"));
        return reference;
    }

    private sealed record Comparison(double AllocateP99Ratio, double AllocateP50Ratio, double ThroughputRatio, double LeaderBeyondIdleRatio, double LeaderCpuRatio,
                                     double PacedLeaderCpuRatio, double PacedOneCoreRatio);

    private static async Task<(int Count, double P50, double P99, double DeallocateP50, double DeallocateP99)> LatencyAsync(CacheManager.CacheManagerClient leader, int iterations)
    {
        var allocate = new List<double>();
        var deallocate = new List<double>();
        for (int i = -20; i < iterations; i++)  // the first 20 warm up
        {
            var t = Stopwatch.StartNew();
            var cache = (await leader.AllocateAsync(CacheRequest(), deadline: DateTime.UtcNow.AddSeconds(10))).Cache;
            double a = t.Elapsed.TotalMilliseconds;
            t.Restart();
            await leader.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId }, deadline: DateTime.UtcNow.AddSeconds(10));
            double d = t.Elapsed.TotalMilliseconds;
            if (i < 0)
                continue;
            allocate.Add(a);
            deallocate.Add(d);
        }
        return (iterations, Quantile(allocate, 0.5), Quantile(allocate, 0.99), Quantile(deallocate, 0.5), Quantile(deallocate, 0.99));
    }

    // Unmeasured load before the throughput run: the managers' code is compiled to its final tier (a manager's JIT work is
    // a start-up cost, not a per-call one) and every connection is open.
    private static readonly TimeSpan WarmUp = TimeSpan.FromSeconds(8);

    // `pace`: pairs per second the callers are held to together (null: as fast as they go).
    private static async Task<(double PerSecond, CpuPerPair Cpu)> ThroughputAsync(ControlPlane plane, int leaderIndex, int clients, TimeSpan duration, bool warmUp,
                                                                                double? pace = null)
    {
        // Ten permits a period of ten pairs' time, none saved up beyond: pairs start at the pace in small bursts.
        const int PerPeriod = 10;
        using var limiter = pace is { } perSecond
            ? new TokenBucketRateLimiter(new TokenBucketRateLimiterOptions
            {
                TokenLimit = PerPeriod, TokensPerPeriod = PerPeriod, ReplenishmentPeriod = TimeSpan.FromSeconds(PerPeriod / perSecond),
                QueueLimit = clients, QueueProcessingOrder = QueueProcessingOrder.OldestFirst, AutoReplenishment = true,
            })
            : null;
        var leader = plane.Managers[leaderIndex].Tenant;
        long pairs = 0;
        int measuring = 0;
        ((TimeSpan Leader, TimeSpan Followers, TimeSpan Etcd, TimeSpan Servers) Parts, TimeSpan Callers) before = default;
        var clock = Stopwatch.StartNew();
        var measured = new Stopwatch();
        var warm = Task.Delay(warmUp ? WarmUp : TimeSpan.Zero).ContinueWith(_ =>
        {
            before = (plane.CpuTime(leaderIndex), Process.GetCurrentProcess().TotalProcessorTime);
            Interlocked.Exchange(ref pairs, 0);
            measured.Start();
            Volatile.Write(ref measuring, 1);
        }, TaskScheduler.Default);
        await Task.WhenAll(Enumerable.Range(0, clients).Select(async _ =>
        {
            while (Volatile.Read(ref measuring) == 0 || measured.Elapsed < duration)
            {
                if (limiter is not null)
                    using (await limiter.AcquireAsync())
                    {
                    }
                var cache = (await leader.AllocateAsync(CacheRequest(), deadline: DateTime.UtcNow.AddSeconds(10))).Cache;
                await leader.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId }, deadline: DateTime.UtcNow.AddSeconds(10));
                Interlocked.Increment(ref pairs);
            }
        }));
        await warm;
        var elapsed = measured.Elapsed;
        var after = plane.CpuTime(leaderIndex);
        var callers = Process.GetCurrentProcess().TotalProcessorTime - before.Callers;
        double PerPair(TimeSpan t) => t.TotalMilliseconds / Math.Max(1, pairs);
        var parts = new[] { after.Leader - before.Parts.Leader, after.Followers - before.Parts.Followers, after.Etcd - before.Parts.Etcd, after.Servers - before.Parts.Servers, callers };
        var cpu = new CpuPerPair(PerPair(parts[0]), PerPair(parts[1]), PerPair(parts[2]), PerPair(parts[3]), PerPair(parts[4]), ControlPlane.Sum(parts) / elapsed);
        return (pairs / elapsed.TotalSeconds, cpu);
    }

    public static Command FailoverCommand()
    {
        var signal = new Option<string>("--signal") { Description = "kill: kill -9 of the leader; term: SIGTERM (a graceful stop)", DefaultValueFactory = _ => "kill" };
        signal.AcceptOnlyFromAmong("kill", "term");
        var trials = new Option<int>("--trials") { Description = "Leaders stopped, one after another (each restarted before the next)", DefaultValueFactory = _ => 20 };
        var lease = new Option<double>("--leader-lease") { Description = "The managers' --leader-lease, seconds", DefaultValueFactory = _ => 2 };
        var json = new Option<string?>("--json") { Description = "Where the figures go (JSON) [default: artifacts/manager-failover-SIGNAL.json]" };
        var clientLog = new Option<bool>("--client-log") { Description = "Print the managed client's log (its retries, with times): where a failover's time goes on the client's side" };
        var keep = new Option<bool>("--keep") { Description = "Keep the run's directory (the managers' logs) and say where it is" };
        var command = new Command("failover", "Time from stopping the leader (kill -9 or SIGTERM) to the first Allocate that succeeds through the managed client's failover: 3 etcd members, 3 manager processes, static pool, on loopback")
        {
            signal, trials, lease, json, clientLog, keep,
        };
        command.SetAction(async (parse, ct) =>
        {
            string how = parse.GetValue(signal)!;
            string dir = Directory.CreateTempSubdirectory("failover-").FullName;
            try
            {
                var result = await FailoverAsync(dir, how, parse.GetValue(trials), parse.GetValue(lease), parse.GetValue(clientLog), ct);
                await WriteJsonAsync(parse.GetValue(json) ?? Path.Combine("artifacts", $"manager-failover-{how}.json"), result, ct);
                return 0;
            }
            finally
            {
                if (parse.GetValue(keep))
                    Console.WriteLine($"the run's files (managers' logs mgrN.log) are in {dir}");
                else
                    Directory.Delete(dir, recursive: true);
            }
        });
        return command;
    }

    /// <summary>
    /// One leader stopped: when each step came after the signal (ms), null where it was not seen. FirstCallMs is how long
    /// the first successful CreateAsync took from its start (its failover waits included if it started before the
    /// signal; otherwise mostly the new leader's first Allocate).
    /// </summary>
    private sealed record Trial(int Index, string Stopped, double UnavailableMs, double? LeaderKeyGoneMs, double? ElectedMs, double? ServingMs,
                                double FirstCallMs, bool FirstCallStartedBefore, int FailedCalls, double RestartedAndSettledMs);

    private sealed record Distribution(int Count, double P50Ms, double P90Ms, double P99Ms, double MaxMs);

    private sealed record FailoverResult(string Date, string Signal, double LeaderLeaseSeconds, string Setup, string LoadAverageAtEnd, Distribution Unavailable,
                                         Distribution? LeaderKeyGone, Distribution? Elected, Distribution? Serving, double TargetMs, bool Met,
                                         IReadOnlyList<Trial> Trials);

    private static async Task<FailoverResult> FailoverAsync(string dir, string how, int trials, double leaderLease, bool clientLog, CancellationToken ct)
    {
        using var logging = LoggerFactory.Create(b =>
        {
            if (clientLog)
                b.AddSimpleConsole(o => (o.TimestampFormat, o.SingleLine) = ("HH:mm:ss.fff ", true)).SetMinimumLevel(LogLevel.Warning)
                 .AddFilter("RemoteCache.RemoteCacheManagerClient", LogLevel.Information);
        });
        await using var plane = await ControlPlane.StartAsync(dir, "etcd", replicas: 3, servers: 3, leaderLease);
        await using var client = new RemoteCacheManagerClient(new RemoteCacheManagerOptions
        {
            Addresses = plane.Addresses.ToList(), ApiKey = ControlPlane.TenantKey, CallTimeout = TimeSpan.FromSeconds(20), ReplaceServers = false,
            Cache = new RemoteCacheOptions { LoggerFactory = logging },
        });
        using var stop = CancellationTokenSource.CreateLinkedTokenSource(ct);
        var loop = new AllocateLoop(client);
        var running = loop.RunAsync(stop.Token);
        var watch = new LeaderKeyWatch(plane.EtcdEndpoints!);
        var watching = watch.RunAsync(stop.Token);
        var results = new List<Trial>();
        try
        {
            for (int i = 0; i < trials; i++)
            {
                int leader = await plane.SettledAsync(TimeSpan.FromSeconds(30));
                // A few Allocates through the settled cluster first; then the signal lands at a random point of the
                // leader's keep-alive period (the lease ends TTL after the last keep-alive etcd answered).
                await loop.WaitSuccessesAsync(3, TimeSpan.FromSeconds(20));
                await Task.Delay(TimeSpan.FromMilliseconds(100 + Random.Shared.Next(400)), ct);
                var victim = plane.Managers[leader];
                long before = watch.CreateRevision;
                int failedBefore = loop.Failures;
                long t0 = victim.Signal(how == "kill" ? 9 : 15);
                if (clientLog)
                    Console.WriteLine($"{DateTime.Now:HH:mm:ss.fff} signalled {victim.Name} ({victim.Address})");
                var (firstStart, first) = await loop.FirstSuccessAfterAsync(t0, victim.Address, TimeSpan.FromSeconds(30));
                var others = plane.Managers.Where(m => m != victim).ToList();
                double? Since(long? at) => at is { } a ? Stopwatch.GetElapsedTime(t0, a).TotalMilliseconds : null;
                double? MinOver(Func<ManagerProcess, long?> at) => others.Select(at).Where(x => x is not null).Min() is { } m ? Since(m) : null;
                var trial = new Trial(i + 1, victim.Name, Stopwatch.GetElapsedTime(t0, first).TotalMilliseconds, Since(watch.ChangedAfter(t0, before)),
                                      MinOver(m => m.LineAfter(t0, "Elected leader")), MinOver(m => m.LineAfter(t0, "Leading the managers")),
                                      Stopwatch.GetElapsedTime(firstStart, first).TotalMilliseconds, firstStart < t0, loop.Failures - failedBefore, 0);
                var restart = Stopwatch.StartNew();
                await victim.WaitExitAsync(TimeSpan.FromSeconds(10));
                victim.Start();
                await plane.SettledAsync(TimeSpan.FromSeconds(60));
                trial = trial with { RestartedAndSettledMs = restart.Elapsed.TotalMilliseconds };
                results.Add(trial);
                Console.WriteLine(Invariant($"trial {trial.Index,2}: {how} {trial.Stopped}: unavailable {trial.UnavailableMs,6:0} ms (leader key gone {trial.LeaderKeyGoneMs,6:0}, elected {trial.ElectedMs,6:0}, serving {trial.ServingMs,6:0}; that CreateAsync took {trial.FirstCallMs,5:0}{(trial.FirstCallStartedBefore ? " from before the signal" : "")}; {trial.FailedCalls} calls failed); back and settled in {trial.RestartedAndSettledMs:0} ms"));
            }
        }
        finally
        {
            stop.Cancel();
            await Task.WhenAll(running, watching);
        }
        double target = how == "kill" ? 3000 : 500;
        var unavailable = Distribute(results.Select(t => t.UnavailableMs));
        var result = new FailoverResult(Today(), how, leaderLease, "loopback, distinct ports: 3 etcd 3.4 members (--pre-vote), 3 remotecache-manager processes (--store etcd, --allocator static), 3 servers; RemoteCacheManagerClient with the 3 addresses",
                                        LoadAverage(),
                                        unavailable, Distribute(results.Select(t => t.LeaderKeyGoneMs)), Distribute(results.Select(t => t.ElectedMs)),
                                        Distribute(results.Select(t => t.ServingMs)), target, unavailable.P99Ms <= target, results);
        Console.WriteLine($"load average at the end: {result.LoadAverageAtEnd}");
        Console.WriteLine(Invariant($"control plane unavailable after {(how == "kill" ? "kill -9" : "SIGTERM")} of the leader ({unavailable.Count} trials, lease {leaderLease:0.#} s): p50 {unavailable.P50Ms:0} ms, p90 {unavailable.P90Ms:0} ms, p99 {unavailable.P99Ms:0} ms, max {unavailable.MaxMs:0} ms (target p99 ≤ {target:0} ms: {Met(result.Met)})"));
        foreach (var (name, d) in new[] { ("leader key gone", result.LeaderKeyGone), ("new leader elected", result.Elected), ("new leader serving", result.Serving) })
            if (d is not null)
                Console.WriteLine(Invariant($"  {name} after the signal: p50 {d.P50Ms:0} ms, p90 {d.P90Ms:0} ms, max {d.MaxMs:0} ms"));
        return result;
    }

    private static Distribution? Distribute(IEnumerable<double?> values) =>
        values.OfType<double>().ToList() is { Count: > 0 } list ? Distribute(list) : null;

    private static Distribution Distribute(IEnumerable<double> values)
    {
        var list = values.ToList();
        return new Distribution(list.Count, Quantile(list, 0.5), Quantile(list, 0.9), Quantile(list, 0.99), list.Max());
    }

    // The box is shared: the load when a run ended says how much its figures were contended.
    internal static string LoadAverage() => File.Exists("/proc/loadavg") ? File.ReadAllText("/proc/loadavg").Trim() : "";

    private static string Met(bool met) => met ? "met" : "MISSED";

    private static string Today() => DateTime.UtcNow.ToString("yyyy-MM-dd", System.Globalization.CultureInfo.InvariantCulture);

    private static async Task WriteJsonAsync(string path, object figures, CancellationToken ct)
    {
        if (Path.GetDirectoryName(path) is { Length: > 0 } parent)
            Directory.CreateDirectory(parent);
        await File.WriteAllTextAsync(path, JsonSerializer.Serialize(figures, new JsonSerializerOptions { WriteIndented = true }), ct);
        Console.WriteLine($"figures written to {path}");
    }

    /// <summary>
    /// One caller creating and deleting caches through the managed client without pause; each success is kept with when
    /// it started and ended and the replica that answered (the client's preferred address right after it).
    /// </summary>
    private sealed class AllocateLoop
    {
        private readonly RemoteCacheManagerClient _client;
        private readonly object _gate = new();
        private readonly List<(long Start, long End, Uri ServedBy)> _successes = new();
        private int _failures;

        public AllocateLoop(RemoteCacheManagerClient client) => _client = client;

        public int Failures => Volatile.Read(ref _failures);

        public async Task RunAsync(CancellationToken stop)
        {
            var request = new ManagedCacheRequest
            {
                Capacity = ControlPlane.RegionBytes, Transport = "tcp", Slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(100) },
            };
            while (!stop.IsCancellationRequested)
            {
                try
                {
                    long start = Stopwatch.GetTimestamp();
                    var cache = await _client.CreateAsync(request, stop);
                    long end = Stopwatch.GetTimestamp();
                    var servedBy = _client.Address;
                    lock (_gate)
                        _successes.Add((start, end, servedBy));
                    // Closed, then deallocated by id: ManagedCache.DeleteAsync also waits up to 1 s for the deletion to
                    // come back on the cache's event stream, and right after a failover that stream is still down, so
                    // the wait would be timed as the control plane's (it is the client's: see docs/benchmarks.md).
                    ulong id = cache.CacheId;
                    await cache.DisposeAsync();
                    await _client.DeleteAsync(id, stop);
                }
                catch (OperationCanceledException) when (stop.IsCancellationRequested)
                {
                    return;
                }
                catch (Exception e) when (e is RemoteCacheManagerException or RemoteCacheException or RpcException)
                {
                    // A call that outlived its CallTimeout, or a delete that lost its cache: counted, and the loop goes on.
                    Interlocked.Increment(ref _failures);
                    await Task.Delay(10, CancellationToken.None);
                }
            }
        }

        public async Task WaitSuccessesAsync(int count, TimeSpan timeout)
        {
            long since = Stopwatch.GetTimestamp();
            while (true)
            {
                lock (_gate)
                    if (_successes.Count(s => s.Start >= since) >= count)
                        return;
                if (Stopwatch.GetElapsedTime(since) > timeout)
                    throw new TimeoutException($"no {count} Allocates through the client within {timeout.TotalSeconds} s ({Failures} failed so far)");
                await Task.Delay(5);
            }
        }

        /// <summary>
        /// When the first Allocate that ended after <paramref name="t0"/> and was answered by another replica than
        /// <paramref name="stopped"/> ended (one the stopped leader answered just before its end does not count).
        /// </summary>
        public async Task<(long Start, long End)> FirstSuccessAfterAsync(long t0, Uri stopped, TimeSpan timeout)
        {
            while (true)
            {
                lock (_gate)
                    foreach (var s in _successes)
                        if (s.End >= t0 && s.ServedBy != stopped)
                            return (s.Start, s.End);
                if (Stopwatch.GetElapsedTime(t0) > timeout)
                    throw new TimeoutException($"no Allocate succeeded within {timeout.TotalSeconds} s of stopping the leader ({Failures} failed so far)");
                await Task.Delay(5);
            }
        }
    }

    /// <summary>
    /// Polls the managers' leader key every 10 ms (a watch would tell the same, with more code): when the stopped
    /// leader's key went away (its lease ended, or it resigned) or another's replaced it.
    /// </summary>
    private sealed class LeaderKeyWatch
    {
        private readonly string _endpoints;
        private readonly object _gate = new();
        private readonly List<(long At, long CreateRevision)> _samples = new();

        public LeaderKeyWatch(string endpoints) => _endpoints = endpoints;

        /// <summary>The leader key's create revision as last seen (0: absent).</summary>
        public long CreateRevision
        {
            get
            {
                lock (_gate)
                    return _samples.Count == 0 ? 0 : _samples[^1].CreateRevision;
            }
        }

        public long? ChangedAfter(long t0, long revision)
        {
            lock (_gate)
                return _samples.Where(s => s.At >= t0 && s.CreateRevision != revision).Select(s => (long?)s.At).FirstOrDefault();
        }

        public async Task RunAsync(CancellationToken stop)
        {
            using var client = new EtcdClient(_endpoints);
            var key = ByteString.CopyFromUtf8(ControlPlane.LeaderKey);
            using var timer = new PeriodicTimer(TimeSpan.FromMilliseconds(10));
            try
            {
                do
                {
                    try
                    {
                        var response = await client.GetAsync(new RangeRequest { Key = key }, null, DateTime.UtcNow.AddSeconds(1), stop);
                        long at = Stopwatch.GetTimestamp();
                        lock (_gate)
                            _samples.Add((at, response.Kvs.Count == 0 ? 0 : response.Kvs[0].CreateRevision));
                    }
                    catch (RpcException) when (!stop.IsCancellationRequested)
                    {
                        // A missed sample; the next one tells.
                    }
                }
                while (await timer.WaitForNextTickAsync(stop));
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
            }
        }
    }
}
