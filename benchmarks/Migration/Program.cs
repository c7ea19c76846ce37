using System;
using System.Collections.Generic;
using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache;
using RemoteCache.Admin;
using RemoteCache.Charts;
using ScottPlot;

namespace RemoteCache.Benchmarks.Migration;

/// <summary>
/// Region migration under load, after Redy §7.4 (Fig. 15/16). A cache of <c>--regions</c> regions lives on one
/// embedded server; threads run 8 B reads (one run) or writes (another) at random addresses; at 1, 2 and 3 phases
/// 1, 2 and 4 regions move to a second server, which pulls each through its admin interface. "optimized" is Redy's
/// design: the regions move one at a time, only writes to the moving region wait, reads go on to the source.
/// "paused" is the design without those two optimizations: all regions of a step stop (reads too) until the whole step
/// has moved. Throughput is sampled every 100 ms for the charts; each step's ratio counts the operations completed in
/// the second before it and between its first fence and its last commit. Rounds of the four runs interleave the modes,
/// and the figures are medians over them. The generator keeps a window per region, as independent clients of each
/// region would: an operation that waits for a move holds back its region only.
/// </summary>
internal static class Program
{
    private static readonly TimeSpan SampleEvery = TimeSpan.FromMilliseconds(100);
    /// <summary>Regions moved at phases 1, 2 and 3 (Redy moves 1, 2 and 4 regions).</summary>
    public static readonly int[][] Steps = { new[] { 0 }, new[] { 1, 2 }, new[] { 3, 4, 5, 6 } };

    public static Task<int> Main(string[] args)
    {
        var transport = new Option<string>("--transport") { Description = "shm or tcp: the servers' endpoints (the clients' and the pull's)", DefaultValueFactory = _ => "shm" };
        var regionMiB = new Option<int>("--region-mib") { Description = "Region size in MiB (Redy: 1024)", DefaultValueFactory = _ => 1024 };
        var regions = new Option<int>("--regions") { Description = "Regions of the cache (Redy: 7; the steps move regions 0, 1-2, 3-6)", DefaultValueFactory = _ => 7 };
        var phase = new Option<double>("--phase-seconds") { Description = "Seconds between steps (Redy: 60); a run lasts 4 phases", DefaultValueFactory = _ => 10 };
        var threads = new Option<int>("--threads") { Description = "Threads issuing operations, one session each (1: on 2 cores the other core does the copy, as Redy's NIC does)", DefaultValueFactory = _ => 1 };
        var window = new Option<int>("--window") { Description = "Operations outstanding per thread (spread over the regions)", DefaultValueFactory = _ => 448 };
        var pace = new Option<int?>("--pull-mib-per-s") { Description = "Pace each region's pull to this many MiB/s (default: as fast as the transport goes)" };
        var config = new Option<string?>("--config") { Description = "The cache's (c,s,b,q): one-sided (0,0,16,8: shm's default, no server thread) or high-throughput (0,1,64,4: tcp's default)" };
        var noMapAhead = new Option<bool>("--no-map-ahead") { Description = "The client does not map the target's regions while they are copied (new RemoteCacheMover(RemoteCacheClient).MapRegionsAheadAsync): its operations fault the pages in after the commit" };
        var rounds = new Option<int>("--rounds") { Description = "Rounds of the four runs (reads and writes, optimized and paused), interleaved; figures are medians over them", DefaultValueFactory = _ => 3 };
        var output = new Option<string>("--out") { Description = "Folder for migration.json and the PNGs", DefaultValueFactory = _ => "benchmarks/Migration/results" };
        var root = new RootCommand("Region migration under 8 B reads and writes (Redy Fig. 15/16): throughput per 100 ms with and without unpaused reads and pause-on-migration writes; move time against the transport's bulk copy")
        {
            transport, regionMiB, regions, phase, threads, window, config, pace, noMapAhead, rounds, output,
        };
        root.SetAction(async (parse, ct) =>
        {
            string t = parse.GetValue(transport)!;
            var cacheConfig = (parse.GetValue(config) ?? (t == "shm" ? "one-sided" : "high-throughput")) switch
            {
                "one-sided" => CacheConfig.OneSided,
                "high-throughput" => CacheConfig.HighThroughput,
                var other => throw new ArgumentException($"--config: one-sided or high-throughput, not '{other}'"),
            };
            var setup = new Setup(t, (long)parse.GetValue(regionMiB) << 20, parse.GetValue(regions), TimeSpan.FromSeconds(parse.GetValue(phase)),
                                  parse.GetValue(threads), parse.GetValue(window), cacheConfig, parse.GetValue(pace), parse.GetValue(rounds),
                                  MapAhead: !parse.GetValue(noMapAhead));
            if (setup.Rounds < 1)
                throw new ArgumentException($"--rounds: 1 or more, not {setup.Rounds}");
            if (setup.Phase < Bench.StepReferences)
                throw new ArgumentException($"--phase-seconds: at least {Bench.StepReferences.TotalSeconds} (a step's reference before it and its 'after'), not {setup.Phase.TotalSeconds}");
            if (setup.Regions < Steps.SelectMany(s => s).Max() + 1)
                throw new ArgumentException($"--regions: the steps move regions 0..6, so the cache needs 7 or more, not {setup.Regions}");
            var report = await Bench.RunAllAsync(setup, ct);
            string dir = parse.GetValue(output)!;
            Directory.CreateDirectory(dir);
            string json = Path.Combine(dir, $"migration-{setup.Transport}.json");
            await File.WriteAllTextAsync(json, JsonSerializer.Serialize(report, new JsonSerializerOptions { WriteIndented = true, NumberHandling = System.Text.Json.Serialization.JsonNumberHandling.AllowNamedFloatingPointLiterals }), ct);
            foreach (var op in new[] { "read", "write" })
                Charts.Timeline(Path.Combine(dir, $"migration-{setup.Transport}-{op}s.png"), report, op);
            Console.WriteLine(report.Summary());
            Console.WriteLine($"wrote {json} and its charts");
            return 0;
        });
        return root.Parse(args).InvokeAsync();
    }
}

internal sealed record Setup(string Transport, long RegionSize, int Regions, TimeSpan Phase, int Threads, int Window, CacheConfig Config,
                             int? PullMibPerSecond, int Rounds, bool MapAhead);

internal sealed record Sample(double Seconds, double OpsPerSecond);

/// <summary>Operations completed by <see cref="Seconds"/> into a run.</summary>
internal readonly record struct OpCount(long Ops, double Seconds)
{
    public double RateTo(OpCount later) => (later.Ops - Ops) / (later.Seconds - Seconds);
}

/// <summary>
/// One step: regions moved, from its start to its end (seconds into the run), each region's move, and the throughput
/// (operations counted at those instants, not sampled) over the second before the step, during it, and over the two
/// seconds after it (where a client faults in the moved regions' pages anew).
/// </summary>
internal sealed record Step(int[] Regions, double Start, double End, List<RegionMove> Moves, double Before, double During, double After)
{
    public double DuringRatio => During / Before;
    public double AfterRatio => After / Before;
}

/// <summary>A region's move: the fence (begin), the target's pull, and the whole, in seconds.</summary>
internal sealed record RegionMove(int Region, double Begin, double Pull, double Total, bool OneSided);

internal sealed record RunResult(string Op, string Mode, List<Sample> Samples, List<Step> Steps, long Errors);

/// <summary>
/// One round: the bulk copy (1 GiB from the source into as much local memory, the reference), the same read into a
/// reused 16 MiB ring (the source side alone), a move without load, then the four runs (reads and writes, optimized
/// and paused).
/// </summary>
internal sealed record Round(double BulkCopySeconds, double BulkReadSeconds, RegionMove IdleMove, List<RunResult> Runs)
{
    public double IdleMoveRatio => IdleMove.Total / BulkCopySeconds;
}

internal sealed record Report(string Transport, string Config, int? PullMibPerSecond, bool MapAhead, long RegionBytes, int Regions, double PhaseSeconds, int Threads, int Window,
                              RegionMove IdleMoveOntoFreshMemory, List<Round> Rounds)
{
    /// <summary>The figures the targets are judged on: medians over the rounds, each a ratio within its own round.</summary>
    public string Summary()
    {
        var first = Rounds[0];
        var lines = new List<string>
        {
            $"{Transport} {Config}: {Regions} regions of {RegionBytes >> 20} MiB, {Threads} thread(s), window {Window}, pull {(PullMibPerSecond is { } p ? $"paced to {p} MiB/s" : "unpaced")}, {(MapAhead ? "" : "no ")}map-ahead, {Rounds.Count} round(s)",
            $"  one region moved without load: {Median(Rounds.Select(r => r.IdleMoveRatio)):0.00}x the bulk copy (median; rounds: " +
            string.Join(", ", Rounds.Select(r => $"{r.IdleMove.Total:0.000} s / {r.BulkCopySeconds:0.000} s = {r.IdleMoveRatio:0.00}x")) + ")" +
            $"; the source read alone (into a 16 MiB ring): {Median(Rounds.Select(r => r.BulkReadSeconds)):0.000} s",
            $"  onto fresh memory (a target that does not commit memory ahead): {IdleMoveOntoFreshMemory.Total:0.000} s = {IdleMoveOntoFreshMemory.Total / first.BulkCopySeconds:0.00}x",
        };
        foreach (var (op, mode) in first.Runs.Select(r => (r.Op, r.Mode)))
        {
            var runs = Rounds.Select(r => r.Runs.Single(x => x.Op == op && x.Mode == mode)).ToList();
            string steps = string.Join("; ", Enumerable.Range(0, first.Runs[0].Steps.Count).Select(i =>
                $"{runs[0].Steps[i].Regions.Length} region(s) {Median(runs.Select(r => r.Steps[i].DuringRatio)):P0} during " +
                $"[{string.Join(" ", runs.Select(r => r.Steps[i].DuringRatio.ToString("P0", CultureInfo.InvariantCulture)))}], " +
                $"{Median(runs.Select(r => r.Steps[i].AfterRatio)):P0} after"));
            lines.Add($"  {op}s {mode}: {steps}; errors {runs.Sum(r => r.Errors)}");
        }
        var moves = Rounds.SelectMany(r => r.Runs.Where(x => x.Mode == "optimized").SelectMany(x => x.Steps).SelectMany(s => s.Moves)
                                            .Select(m => m.Total / r.BulkCopySeconds)).ToList();
        if (moves.Count > 0)
            lines.Add($"  a region's move under load (optimized, median of {moves.Count}): {Median(moves):0.00}x its round's bulk copy");
        return string.Join(Environment.NewLine, lines);
    }

    public static double Median(IEnumerable<double> values)
    {
        var sorted = values.Order().ToList();
        return sorted.Count == 0 ? double.NaN : sorted.Count % 2 == 1 ? sorted[sorted.Count / 2] : (sorted[sorted.Count / 2 - 1] + sorted[sorted.Count / 2]) / 2;
    }
}

internal static class Bench
{
    public static async Task<Report> RunAllAsync(Setup setup, CancellationToken ct)
    {
        using var servers = Servers.Start(setup);
        RegionMove idleFresh;
        using (var fresh = servers.StartTarget("fresh-target", commitMemory: false, regions: 1))
            idleFresh = await IdleMoveAsync(servers, fresh, ct);
        Console.WriteLine($"one {setup.RegionSize >> 20} MiB region over {setup.Transport} moved onto fresh memory in {idleFresh.Total:0.000} s");
        // Rounds interleave the runs of both modes, so that a slow stretch of the machine does not fall on one mode.
        var rounds = new List<Round>();
        for (int round = 1; round <= setup.Rounds; round++)
        {
            double bulk = await BulkCopySecondsAsync(setup, servers, intoRegionSizedMemory: true, ct);
            double read = await BulkCopySecondsAsync(setup, servers, intoRegionSizedMemory: false, ct);
            var idle = await IdleMoveAsync(servers, servers.Target, ct);
            Console.WriteLine($"round {round}: bulk copy {bulk:0.000} s (read alone {read:0.000} s), moved without load in {idle.Total:0.000} s (pull {idle.Pull:0.000} s) = {idle.Total / bulk:0.00}x");
            var runs = new List<RunResult>();
            foreach (var op in new[] { "read", "write" })
                foreach (var mode in new[] { "optimized", "paused" })
                {
                    var run = await RunAsync(setup, servers, op, mode, ct);
                    Console.WriteLine($"round {round}, {op}s {mode}: " + string.Join(", ", run.Steps.Select(s => $"{s.Regions.Length} region(s) {s.DuringRatio:P0} during, {s.AfterRatio:P0} after")) +
                                      $"; {run.Errors} errors");
                    runs.Add(run);
                }
            rounds.Add(new Round(bulk, read, idle, runs));
        }
        return new Report(setup.Transport, setup.Config.ToString(), setup.PullMibPerSecond, setup.MapAhead, setup.RegionSize, setup.Regions, setup.Phase.TotalSeconds, setup.Threads,
                          setup.Window, idleFresh, rounds);
    }

    // A region's whole move (fence, pull, commit) with nothing else running: what the bulk copy is the reference for.
    private static async Task<RegionMove> IdleMoveAsync(Servers servers, RemoteCacheServer target, CancellationToken ct)
    {
        await using var client = await servers.OpenCacheAsync(1, ct);
        await Fill(client, ct);
        int holder = await new RemoteCacheMover(client).AddHolderAsync(target.Endpoints[0], servers.TargetCapability(target, client.CacheId, 1), 1, ct);
        var moves = await MoveOneByOneAsync(client, servers, target, holder, new[] { 0 }, targetRegionOf: _ => 0, pace: null, ct);
        return moves[0];
    }

    // The transport's bulk copy in this run: one session reads a whole region from the source, 16 reads of 1 MiB in flight,
    // into a region's worth of local memory mapped beforehand (as a target that commits memory ahead has it: a move writes
    // every byte it reads), or with intoRegionSizedMemory false into a reused 16 MiB ring (what reading the source costs).
    private static async Task<double> BulkCopySecondsAsync(Setup setup, Servers servers, bool intoRegionSizedMemory, CancellationToken ct)
    {
        await using var client = await servers.OpenCacheAsync(1, ct);
        await Fill(client, ct);
        const int chunk = 1 << 20, depth = 16;
        long slots = intoRegionSizedMemory ? setup.RegionSize / chunk : depth;
        unsafe
        {
            byte* buffer = (byte*)NativeMemory.AlignedAlloc((nuint)(slots * chunk), 4096);
            try
            {
                for (long page = 0; page < slots * chunk; page += 4096)
                    buffer[page] = 1;
                using var session = client.OpenSession();
                Span<RemoteCacheCompletion> done = stackalloc RemoteCacheCompletion[depth];
                var watch = Stopwatch.StartNew();
                long next = 0, finished = 0, total = setup.RegionSize / chunk;
                int outstanding = 0;
                while (finished < total)
                {
                    while (outstanding < depth && next < total)
                    {
                        var st = session.StartRead(next * chunk, buffer + next % slots * chunk, chunk, (ulong)next);
                        if (st == RemoteCacheStatus.Busy)
                            break;
                        if (st != RemoteCacheStatus.Ok)
                            throw new RemoteCacheException(st, "bulk copy", next * chunk, chunk, $"bulk read: {st}");
                        next++;
                        outstanding++;
                    }
                    int n = session.Poll(done);
                    for (int i = 0; i < n; i++)
                        if (done[i].Status != RemoteCacheStatus.Ok)
                            throw new InvalidOperationException($"bulk read failed: {done[i].Status}");
                    finished += n;
                    outstanding -= n;
                }
                return watch.Elapsed.TotalSeconds;
            }
            finally
            {
                NativeMemory.AlignedFree(buffer);
            }
        }
    }

    private static async Task Fill(RemoteCacheClient client, CancellationToken ct)
    {
        var data = new byte[FillChunk];
        RandomNumberGenerator.Fill(data);
        for (long at = 0; at < client.Capacity; at += data.Length)
            await client.WriteAsync(at, data.AsMemory(0, (int)Math.Min(data.Length, client.Capacity - at)), ct);
    }

    private const int FillChunk = 4 << 20;

    private static async Task<RunResult> RunAsync(Setup setup, Servers servers, string op, string mode, CancellationToken ct)
    {
        await using var client = await servers.OpenCacheAsync(setup.Regions, ct);
        await Fill(client, ct);
        int holder = await new RemoteCacheMover(client).AddHolderAsync(servers.Target.Endpoints[0], servers.TargetCapability(servers.Target, client.CacheId, setup.Regions),
                                                 setup.Regions, ct);
        using var load = new Load(client, setup, write: op == "write");
        var clock = Stopwatch.StartNew();
        var sampler = Task.Run(() => load.Sample(clock, setup.Phase * 4), ct);
        var steps = new List<Step>();
        for (int s = 0; s < Program.Steps.Length; s++)
        {
            await DelayUntil(clock, setup.Phase * (s + 1) - ReferenceBefore, ct);
            var before = load.Count(clock);
            // A whole reference second even when the run is behind its schedule (a busy machine).
            await DelayUntil(clock, Max(setup.Phase * (s + 1), TimeSpan.FromSeconds(before.Seconds) + ReferenceBefore), ct);
            var start = load.Count(clock);
            var moves = mode == "optimized"
                ? await MoveOneByOneAsync(client, servers, servers.Target, holder, Program.Steps[s], targetRegionOf: r => r, setup.PullMibPerSecond, ct)
                : await MoveAllPausedAsync(client, servers, holder, Program.Steps[s], setup.PullMibPerSecond, ct);
            var end = load.Count(clock);
            await DelayUntil(clock, clock.Elapsed + ReferenceAfter, ct);
            var after = load.Count(clock);
            steps.Add(new Step(Program.Steps[s], start.Seconds, end.Seconds, moves, before.RateTo(start), start.RateTo(end), end.RateTo(after)));
        }
        var samples = await sampler;
        return new RunResult(op, mode, samples, steps, load.Errors);
    }

    /// <summary>The step's reference: the throughput over this long right before it (no move under way since the last step's "after").</summary>
    private static readonly TimeSpan ReferenceBefore = TimeSpan.FromSeconds(1);
    /// <summary>How long after a step its "after" throughput is taken (the client faults the moved regions' pages in anew).</summary>
    private static readonly TimeSpan ReferenceAfter = TimeSpan.FromSeconds(2);

    /// <summary>The shortest phase: a step's "after" ends before the next step's "before" begins.</summary>
    public static TimeSpan StepReferences => ReferenceBefore + ReferenceAfter;

    private static TimeSpan Max(TimeSpan a, TimeSpan b) => a > b ? a : b;

    private static async Task DelayUntil(Stopwatch clock, TimeSpan at, CancellationToken ct)
    {
        var wait = at - clock.Elapsed;
        if (wait > TimeSpan.Zero)
            await Task.Delay(wait, ct);
    }

    // Redy's design: one region at a time; its writes wait, its reads go to the source until the commit.
    private static async Task<List<RegionMove>> MoveOneByOneAsync(RemoteCacheClient client, Servers servers, RemoteCacheServer target, int holder,
                                                                  int[] regions, Func<int, int> targetRegionOf, int? pace, CancellationToken ct)
    {
        var moves = new List<RegionMove>();
        Task? mapping = null;  // the client maps the target's region while it is copied, never waited for, as the managed client does
        foreach (int region in regions)
        {
            var watch = Stopwatch.StartNew();
            await new RemoteCacheMover(client).BeginMigrationAsync(region, TimeSpan.FromSeconds(10), pauseReads: false, ct);
            double begun = watch.Elapsed.TotalSeconds;
            if (servers.MapAhead && (mapping is null || mapping.IsCompleted))
            {
                if (mapping is not null)
                    await mapping;
                mapping = new RemoteCacheMover(client).MapRegionsAheadAsync(holder, targetRegionOf(region), 1, ct);
            }
            var pulled = await servers.PullAsync(target, client, region, targetRegionOf(region), pace, ct);
            new RemoteCacheMover(client).CommitMigration(region, holder, targetRegionOf(region));
            moves.Add(new RegionMove(region, begun, pulled.Elapsed.TotalSeconds, watch.Elapsed.TotalSeconds, pulled.OneSided));
        }
        if (mapping is not null)
            await mapping;
        return moves;
    }

    // Without the optimizations: every region of the step stops, reads too, until all of them have moved.
    private static async Task<List<RegionMove>> MoveAllPausedAsync(RemoteCacheClient client, Servers servers, int holder, int[] regions,
                                                                   int? pace, CancellationToken ct)
    {
        var watch = Stopwatch.StartNew();
        foreach (int region in regions)
            await new RemoteCacheMover(client).BeginMigrationAsync(region, TimeSpan.FromSeconds(10), pauseReads: true, ct);
        double begun = watch.Elapsed.TotalSeconds;
        var pulls = new List<RegionPullResult>();
        var mapping = servers.MapAhead ? new RemoteCacheMover(client).MapRegionsAheadAsync(holder, regions[0], regions.Length, ct) : Task.CompletedTask;  // consecutive regions
        foreach (int region in regions)
            pulls.Add(await servers.PullAsync(servers.Target, client, region, region, pace, ct));
        foreach (int region in regions)
            new RemoteCacheMover(client).CommitMigration(region, holder, region);
        await mapping;
        double total = watch.Elapsed.TotalSeconds;
        return regions.Select((r, i) => new RegionMove(r, begun, pulls[i].Elapsed.TotalSeconds, total, pulls[i].OneSided)).ToList();
    }
}

/// <summary>
/// The source and target servers (embedded, keyed; the target commits its memory ahead, as the manager's servers do with
/// --commit-memory) and admin connections to targets.
/// </summary>
internal sealed class Servers : IDisposable
{
    private readonly Setup _setup;
    private readonly byte[] _sourceKey = RandomNumberGenerator.GetBytes(32), _targetKey = RandomNumberGenerator.GetBytes(32);
    private readonly Dictionary<RemoteCacheServer, CacheServerAdmin> _admins = new();

    private Servers(Setup setup) => _setup = setup;

    public RemoteCacheServer Source { get; private set; } = null!;
    public RemoteCacheServer Target { get; private set; } = null!;

    /// <summary>Whether the client maps the target's regions while they are copied (<c>--no-map-ahead</c> turns it off).</summary>
    public bool MapAhead => _setup.MapAhead;

    public static Servers Start(Setup setup)
    {
        var servers = new Servers(setup);
        servers.Source = servers.StartOne("source", servers._sourceKey, commitMemory: false, setup.Regions + 1);
        servers.Target = servers.StartTarget("target", commitMemory: true, setup.Regions);
        return servers;
    }

    /// <summary>A target server of <paramref name="regions"/> regions, admitting the benchmark's target capabilities.</summary>
    public RemoteCacheServer StartTarget(string id, bool commitMemory, int regions) => StartOne(id, _targetKey, commitMemory, regions);

    private RemoteCacheServer StartOne(string id, byte[] key, bool commitMemory, int regions)
    {
        string listen = _setup.Transport switch
        {
            "shm" => $"shm:/tmp/rc-migration-bench-{Environment.ProcessId}-{id}.sock",
            "tcp" => "tcp:127.0.0.1:0",
            _ => throw new ArgumentException($"--transport: shm or tcp, not '{_setup.Transport}'"),
        };
        return RemoteCacheServer.Start(new RemoteCacheServerOptions
        {
            Listen = { listen },
            RegionSize = _setup.RegionSize,
            MemoryLimit = regions * _setup.RegionSize,
            MaxThreads = 1,
            AdmissionKey = key,
            ServerId = id,
            CommitMemory = commitMemory,
        });
    }

    public string TargetCapability(RemoteCacheServer target, ulong cacheId, int regions) =>
        RemoteCacheCapability.Mint(_targetKey, cacheId, target.ServerId, regions, DateTimeOffset.UtcNow.AddHours(1));

    public async Task<RemoteCacheClient> OpenCacheAsync(int regions, CancellationToken ct)
    {
        // A cache admitted by a capability keeps its memory for its lease, whoever is connected: the previous one is
        // deallocated, as the manager would, before its memory can come back.
        if (_previousCache is { } previous)
            await DeallocateAsync(previous, ct);
        // The memory of the previous cache comes back once its connections have closed, and the target commits its
        // share again (its spares are what a move lands in).
        var deadline = Stopwatch.StartNew();
        while (Source.MemoryInUse != 0 || Target.MemoryInUse != 0 || Target.MemoryCommitted < _setup.Regions * _setup.RegionSize)
        {
            if (deadline.Elapsed > TimeSpan.FromMinutes(2))
                throw new TimeoutException($"the servers did not free and commit their memory in 2 minutes: source lends {Source.MemoryInUse} B, " +
                                           $"target lends {Target.MemoryInUse} B and has {Target.MemoryCommitted} B committed");
            await Task.Delay(20, ct);
        }
        var options = new RemoteCacheOptions
        {
            RegionsPerServer = regions,
            Config = _setup.Config,
            OperationTimeout = TimeSpan.FromSeconds(30),
            Name = "migration-bench",
        };
        options.Capabilities = new[] { RemoteCacheCapability.Mint(_sourceKey, options.CacheId, Source.ServerId, regions, DateTimeOffset.UtcNow.AddHours(1)) };
        _previousCache = options.CacheId;
        return await RemoteCacheClient.OpenAsync(new[] { Source.Endpoints[0] }, options, cancellationToken: ct);
    }

    private ulong? _previousCache;

    // The manager's Deallocate: the cache is dropped on every server that may hold it.
    private async Task DeallocateAsync(ulong cacheId, CancellationToken ct)
    {
        foreach (var (server, key) in new[] { (Source, _sourceKey), (Target, _targetKey) })
        {
            await using var admin = await CacheServerAdmin.ConnectAsync(server.Endpoints[0], key, TimeSpan.FromSeconds(30), ct);
            await admin.DropCacheAsync(cacheId, ct);
        }
    }

    public async Task<RegionPullResult> PullAsync(RemoteCacheServer target, RemoteCacheClient client, int region, int targetRegion, int? mibPerSecond,
                                                  CancellationToken ct)
    {
        if (!_admins.TryGetValue(target, out var admin))
            _admins[target] = admin = await CacheServerAdmin.ConnectAsync(target.Endpoints[0], _targetKey, TimeSpan.FromSeconds(30), ct);
        var placed = new RemoteCacheMover(client).GetRegion(region);
        return await admin.PullRegionAsync(new RegionPull
        {
            CacheId = client.CacheId,
            SourceRegion = placed.HolderRegion,
            SourceEndpoint = Source.Endpoints[0],
            SourceCapability = RemoteCacheCapability.MintMigration(_sourceKey, client.CacheId, Source.ServerId, DateTimeOffset.UtcNow.AddMinutes(5)),
            TargetRegion = targetRegion,
            MaxMibPerSecond = mibPerSecond,
        }, ct);
    }

    public void Dispose()
    {
        foreach (var admin in _admins.Values)
            admin.Dispose();
        Source?.Dispose();
        Target?.Dispose();
    }
}

/// <summary>
/// Threads that each keep a window of 8 B operations outstanding on one session, spread over the regions (a region's
/// share of the window waits alone when the region's operations do), counting completions.
/// </summary>
internal sealed unsafe class Load : IDisposable
{
    private readonly RemoteCacheClient _client;
    private readonly Setup _setup;
    private readonly bool _write;
    private readonly Thread[] _threads;
    private readonly long[] _completed;  // per thread, padded apart
    private const int Pad = 16;
    private long _errors;
    private volatile bool _stop;

    public Load(RemoteCacheClient client, Setup setup, bool write)
    {
        _client = client;
        _setup = setup;
        _write = write;
        _completed = new long[setup.Threads * Pad];
        _threads = Enumerable.Range(0, setup.Threads).Select(t => new Thread(() => Run(t)) { IsBackground = true, Name = $"load {t}" }).ToArray();
        foreach (var thread in _threads)
            thread.Start();
    }

    public long Errors => Interlocked.Read(ref _errors);

    /// <summary>Operations completed so far, and when.</summary>
    public OpCount Count(Stopwatch clock) => new(Total(), clock.Elapsed.TotalSeconds);

    public List<Sample> Sample(Stopwatch clock, TimeSpan until)
    {
        var samples = new List<Sample>();
        long last = Total();
        double lastAt = clock.Elapsed.TotalSeconds;
        for (int i = 1; clock.Elapsed < until; i++)
        {
            var wait = SampleEveryTick(i) - clock.Elapsed;
            if (wait > TimeSpan.Zero)
                Thread.Sleep(wait);
            long now = Total();
            double at = clock.Elapsed.TotalSeconds;
            samples.Add(new Sample(Math.Round(at, 3), (now - last) / (at - lastAt)));
            (last, lastAt) = (now, at);
        }
        return samples;
    }

    private static TimeSpan SampleEveryTick(int i) => TimeSpan.FromMilliseconds(100 * i);

    private long Total()
    {
        long sum = 0;
        for (int t = 0; t < _setup.Threads; t++)
            sum += Volatile.Read(ref _completed[t * Pad]);
        return sum;
    }

    private void Run(int thread)
    {
        int regions = _setup.Regions, perRegion = Math.Max(1, _setup.Window / regions), window = perRegion * regions;
        long recordsPerRegion = _setup.RegionSize / 8;
        var inRegion = new int[regions];
        var regionOf = new int[window];
        var free = new Stack<int>(Enumerable.Range(0, window));
        byte* buffers = (byte*)NativeMemory.AlignedAlloc((nuint)(window * 8), 64);
        var rng = new Random(thread * 7919 + 1);
        Span<RemoteCacheCompletion> done = stackalloc RemoteCacheCompletion[64];
        try
        {
            using var session = _client.OpenSession();
            while (!_stop)
            {
                for (int tries = 0; tries < 2 * regions && free.Count > 0; tries++)
                {
                    int region = rng.Next(regions);
                    if (inRegion[region] >= perRegion)
                        continue;
                    int slot = free.Peek();
                    long address = region * _setup.RegionSize + rng.NextInt64(recordsPerRegion) * 8;
                    var st = _write ? session.StartWrite(address, buffers + slot * 8, 8, (ulong)slot)
                                    : session.StartRead(address, buffers + slot * 8, 8, (ulong)slot);
                    if (st == RemoteCacheStatus.Busy)
                        break;
                    if (st != RemoteCacheStatus.Ok)
                    {
                        Interlocked.Increment(ref _errors);
                        continue;
                    }
                    free.Pop();
                    regionOf[slot] = region;
                    inRegion[region]++;
                }
                int n = session.Poll(done);
                for (int i = 0; i < n; i++)
                {
                    int slot = (int)done[i].Tag;
                    if (done[i].Status != RemoteCacheStatus.Ok)
                        Interlocked.Increment(ref _errors);
                    inRegion[regionOf[slot]]--;
                    free.Push(slot);
                }
                if (n > 0)
                    Volatile.Write(ref _completed[thread * Pad], _completed[thread * Pad] + n);
            }
            // Everything outstanding finishes before the session closes (its buffers are ours).
            while (session.Outstanding > 0)
                session.Wait(done, TimeSpan.FromMilliseconds(100));
        }
        finally
        {
            NativeMemory.AlignedFree(buffers);
        }
    }

    public void Dispose()
    {
        _stop = true;
        foreach (var thread in _threads)
            thread.Join();
    }
}

internal static class Charts
{
    static Charts() => ChartKit.UseSansSerif();

    /// <summary>Throughput per 100 ms of one operation in the first round, optimized and paused, the optimized run's moves shaded.</summary>
    public static void Timeline(string path, Report report, string op)
    {
        var plot = new Plot();
        var colors = new Dictionary<string, Color> { ["optimized"] = Colors.SteelBlue, ["paused"] = Colors.OrangeRed };
        foreach (var run in report.Rounds[0].Runs.Where(r => r.Op == op))
        {
            foreach (var step in run.Steps.Where(_ => run.Mode == "optimized"))
            {
                var span = plot.Add.HorizontalSpan(step.Start, step.End);
                span.FillStyle.Color = Colors.SteelBlue.WithAlpha(0.15);
                span.LineStyle.Width = 0;
            }
            var line = plot.Add.ScatterLine(run.Samples.Select(s => s.Seconds).ToArray(), run.Samples.Select(s => s.OpsPerSecond / 1e6).ToArray(), colors[run.Mode]);
            line.LineWidth = 2;
            line.LegendText = run.Mode == "optimized"
                ? (op == "read" ? "unpaused reads" : "pause-on-migration writes")
                : "paused (all operations of the step's regions, until the step ends)";
        }
        plot.Title($"8 B {op}s while 1, 2 and 4 of {report.Regions} regions of {report.RegionBytes >> 20} MiB move ({report.Transport}, round 1 of {report.Rounds.Count})");
        plot.Axes.Bottom.Label.Text = "seconds (shaded: the optimized run's moves)";
        plot.Axes.Left.Label.Text = "M ops/s per 100 ms";
        plot.Axes.Left.Min = 0;
        plot.ShowLegend(Alignment.LowerLeft);
        plot.SavePng(path, 1100, 500);
    }
}
