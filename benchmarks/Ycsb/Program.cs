using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Text;
using System.Text.Json;
using RemoteCache.Benchmarks.Ycsb.Baselines;
using Spectre.Console;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>
/// YCSB on FASTER, one run comparing devices under the same data and memory budget: everything in memory (upper
/// bound), TieredDevice(RemoteCache over SSD), SSD only (O_DIRECT), and a Samba file server. The main job.
/// </summary>
public static class Program
{
    public static int Main(string[] args)
    {
        if (args.Length > 0 && args[0] == SmbWorker.Flag)
            return SmbWorker.Serve(args);
        YcsbOptions o;
        try
        {
            o = YcsbOptions.Parse(args);
        }
        catch (YcsbOptions.HelpRequested)
        {
            Console.WriteLine(YcsbOptions.Usage);
            return 0;
        }
        catch (Exception e) when (e is ArgumentException or FormatException)
        {
            Console.Error.WriteLine($"ycsb: {e.Message}\n{YcsbOptions.Usage}");
            return 2;
        }
        if (o.OnGarnet)
            return Run(o, GarnetRunner.Shape(o, everythingInMemory: false), GarnetRunner.RecordBytes(o),
                       (env, sink, results, failed, _) => RunRounds(new GarnetRunner(o, env, sink), o, results, failed, _ => { }));
        return o.ValueBytes == 8 ? RunFaster<long, LongValues>(o) : RunFaster<KiloValue, KiloValues>(o);
    }

    private static int RunFaster<TValue, TValues>(YcsbOptions o) where TValue : unmanaged where TValues : IValues<TValue>
    {
        IReadOnlyList<DynamicsRun>? dynamics = null;
        int exit = Run(o, Runner<TValue, TValues>.Shape(o, everythingInMemory: false), Runner<TValue, TValues>.RecordBytes,
                       (env, sink, results, failed, controlPlane) =>
                       {
                           var runner = new Runner<TValue, TValues>(o, env, sink);
                           RunRounds(runner, o, results, failed, stores => dynamics = RunDynamics(runner, stores, controlPlane(), o));
                       });
        if (dynamics is not null)
        {
            foreach (var run in dynamics)
                AnsiConsole.MarkupLine(Markup.Escape(Dynamics.Summary(run)));
            Dynamics.Write(Path.GetFullPath(o.Output), dynamics, $"YCSB {o.Workload.Name} on FASTER over RemoteCache: a reclaim, then a killed cache server ({o.Transport})");
            AnsiConsole.MarkupLine($"dynamics: {Markup.Escape(Path.Combine(Path.GetFullPath(o.Output), Dynamics.JsonFile))}, {Dynamics.ChartFile}");
        }
        return exit != 0 || dynamics?.Any(d => d.Errors > 0) == true ? 1 : 0;
    }

    /// <summary>The rounds of one store's runner, given the environment, the live display, the results and failed devices to fill, and the control plane (once started).</summary>
    private delegate void Rounds(RunEnvironment env, IProgressSink sink, List<RunResult> results, List<string> failedDevices, Func<ControlPlane?> controlPlane);

    private static int Run(YcsbOptions o, LogShape shape, long recordBytes, Rounds rounds)
    {
        if (Console.IsOutputRedirected)
            AnsiConsole.Profile.Width = 160;  // logs and CI: keep the table's rows on one line
        string output = Path.GetFullPath(o.Output);
        string data = Path.GetFullPath(o.DataDir ?? Path.Combine(output, "data"));
        // The in-process manager's state (its SQLite database and admission key) is scratch on the local disk, not under
        // --data-dir, which may be a file share: SQLite wants local locks, and a key there shows the share's file mode.
        string managerState = Path.Combine(output, "manager");
        Directory.CreateDirectory(output);
        Directory.CreateDirectory(data);
        var results = new List<RunResult>();
        var failedDevices = new List<string>();
        SsdCheck.Result? ssd = null;
        ControlPlane? controlPlane = null;
        SambaServer? samba = null;
        try
        {
            var env = new RunEnvironment
            {
                DataDir = data,
                OpenCache = (bytes, encrypted) =>
                {
                    controlPlane ??= o.Managers is null ? ControlPlane.StartAsync(managerState, bytes, o).GetAwaiter().GetResult() : ControlPlane.Connect(o);
                    var cache = controlPlane.CreateCache(bytes, encrypted);
                    var client = cache.Client;
                    var info = cache.Info;
                    AnsiConsole.MarkupLine(Markup.Escape(Invariant(
                        $"{(encrypted ? RunEnvironment.EncryptedDevice : "remotecache")} device: cache {info.CacheId} created through the manager in {controlPlane.CreateTime.TotalMilliseconds:0} ms for {controlPlane.RequestedSlo?.ToString() ?? "its capacity"} → config {info.Config} (predicted {info.PredictedLatency.TotalMicroseconds:0.0} µs, {info.PredictedThroughput:0} ops/s), {info.Servers.Count} server(s) {string.Join(",", info.Servers.Select(s => s.ServerId))}, {info.Capacity >> 20} MiB over {info.Transport}")));
                    return client;
                },
                Samba = () => samba ??= SambaServer.Start(Path.Combine(data, "samba")),
            };
            Header(o, shape, recordBytes);
            // Garnet's ssd device is its own (RandomAccess, buffered): the O_DIRECT reference is FASTER's.
            if (o.Fio && o.Devices.Contains("ssd") && !o.OnGarnet)
            {
                ssd = SsdCheck.Run(Path.Combine(data, "ssdcheck"), m => AnsiConsole.MarkupLine($"[yellow]{Markup.Escape(m)}[/]"));
                if (ssd is not null)
                    AnsiConsole.MarkupLine(Invariant($"SSD device, random 512 B reads at depth 1: p50 {ssd.DeviceP50Us:0.0} µs (mean {ssd.DeviceMeanUs:0.0}); fio --direct=1 on the same file: p50 {ssd.FioP50Us:0.0} µs (mean {ssd.FioMeanUs:0.0}) → {ssd.Ratio:0.00}x"));
            }
            WithProgress(sink => rounds(env, sink, results, failedDevices, () => controlPlane));
        }
        finally
        {
            samba?.Dispose();
            controlPlane?.DisposeAsync().AsTask().GetAwaiter().GetResult();
            if (Directory.Exists(data) && o.DataDir is null)
                Directory.Delete(data, recursive: true);
            if (Directory.Exists(managerState))
                Directory.Delete(managerState, recursive: true);
        }

        PrintTable(results);
        bool targetsMet = PrintRatios(o, results);
        WriteFiles(output, o, results, ssd);
        AnsiConsole.MarkupLine($"results: {Markup.Escape(Path.Combine(output, "results.csv"))}, results.json, {string.Join(", ", Chart.Files)}");
        if (failedDevices.Count > 0)
            AnsiConsole.MarkupLine($"[red]devices that failed or hung: {string.Join(", ", failedDevices)}[/]");
        // Missed performance targets are reported above, not failures; wrong reads and broken devices are.
        _ = targetsMet;
        return results.Any(r => r.Errors > 0) || failedDevices.Count > 0 ? 1 : 0;
    }

    /// <summary>
    /// Region size and count for a cache of at least <paramref name="bytes"/>: a server lends at most
    /// <see cref="RemoteCacheOptions.MaxRegionsPerServer"/> regions to a cache, so regions grow with the log, in powers of
    /// two (the cache stays a whole number of FASTER segments); aiming at 4/5 of the maximum leaves room for the rounding.
    /// </summary>
    internal static (long RegionSize, int Regions) CacheRegions(long bytes)
    {
        const long target = RemoteCacheOptions.MaxRegionsPerServer * 4 / 5;
        long regionSize = Math.Max(1L << 20, (long)System.Numerics.BitOperations.RoundUpToPowerOf2((ulong)((bytes + target - 1) / target)));
        return (regionSize, (int)((bytes + regionSize - 1) / regionSize));
    }

    /// <summary>
    /// Loads every device's store, then runs the rounds: in each, every (distribution, threads) phase runs on every
    /// device back to back, so that the phases a ratio compares are seconds apart and a slow stretch of this noisy
    /// machine hits them alike. A device that fails or hangs (its I/O can leave FASTER waiting forever for a flush)
    /// is reported and left out from then on; one broken baseline does not take the whole run with it.
    /// </summary>
    private static void RunRounds<TStore>(IStoreRunner<TStore> runner, YcsbOptions o, List<RunResult> results, List<string> failedDevices,
                                          Action<IReadOnlyList<TStore>> after)
        where TStore : class, IBenchStore
    {
        var stores = new List<TStore>();
        try
        {
            var loadLimit = TimeSpan.FromSeconds(180 + o.Records / 10_000.0);
            foreach (var device in o.Devices)
            {
                if (Guarded(device, "load", loadLimit, () => runner.Open(device)) is { } store)
                    stores.Add(store);
                else
                    failedDevices.Add(device);
            }
            var phaseLimit = TimeSpan.FromSeconds(90 + o.Warmup.TotalSeconds + o.Duration.TotalSeconds);
            for (int round = 1; round <= o.Rounds; round++)
            {
                foreach (var distribution in o.Distributions)
                {
                    foreach (int threads in o.Threads)
                    {
                        foreach (var store in stores.ToList())
                        {
                            int r = round;
                            var what = $"{distribution.ToString().ToLowerInvariant()}, {threads} thread(s), round {round}";
                            if (Guarded(store.Device, what, phaseLimit, () => runner.RunPhase(store, distribution, threads, r)) is { } row)
                            {
                                results.Add(row);
                            }
                            else
                            {
                                failedDevices.Add(store.Device);
                                stores.Remove(store);  // not disposed: a hung store may still be in use by its stuck threads
                            }
                        }
                    }
                }
            }
            after(stores);
        }
        finally
        {
            foreach (var store in stores)
                store.Dispose();
        }
    }

    // The extended mode's timelines, on the remotecache store (null when not asked for, or when that device failed).
    private static IReadOnlyList<DynamicsRun>? RunDynamics<TValue, TValues>(Runner<TValue, TValues> runner, IReadOnlyList<Runner<TValue, TValues>.Store> stores,
                                                                          ControlPlane? controlPlane, YcsbOptions o)
        where TValue : unmanaged where TValues : IValues<TValue>
    {
        if (!o.Dynamics)
            return null;
        var store = stores.FirstOrDefault(s => s.Device == "remotecache");
        if (store is null || controlPlane is null)
        {
            AnsiConsole.MarkupLine("[red]dynamics: the remotecache device did not run; no timelines[/]");
            return null;
        }
        var limit = TimeSpan.FromSeconds(120) + 3 * o.DynamicsDuration;
        return Guarded("remotecache", "dynamics", limit, () => Dynamics.Run(runner, store, controlPlane, o));
    }

    /// <summary>Runs <paramref name="body"/> on a background thread; null (reported) if it throws or outlives <paramref name="limit"/>.</summary>
    private static T? Guarded<T>(string device, string what, TimeSpan limit, Func<T> body) where T : class
    {
        T? result = null;
        Exception? error = null;
        var thread = new System.Threading.Thread(() =>
        {
            try
            {
                result = body();
            }
            catch (Exception e)
            {
                error = e;
            }
        }) { IsBackground = true, Name = $"ycsb device {device}" };
        thread.Start();
        if (!thread.Join(limit))
        {
            AnsiConsole.MarkupLine($"[red]{device}: {what}: no result within {limit.TotalSeconds:0} s (a device I/O failed or hung; see the messages above); skipped[/]");
            return null;
        }
        if (error is not null)
        {
            AnsiConsole.MarkupLine($"[red]{device}: {what}: {Markup.Escape(error.GetType().Name)}: {Markup.Escape(error.Message)}[/]");
            return null;
        }
        return result;
    }

    private static void Header(YcsbOptions o, LogShape shape, long recordBytes)
    {
        // InvariantGlobalization (csproj): every number below formats the invariant way.
        AnsiConsole.MarkupLine(
            $"[bold]YCSB {o.Workload.Name}[/] ({Markup.Escape(o.Workload.Description)}): {o.Records:N0} records of {recordBytes} B = {shape.LogBytes / 1e6:0.#} MB of log; " +
            $"{StoreName(o)} memory {shape.MemoryBytes / 1e6:0.##} MB = {(double)shape.LogBytes / shape.MemoryBytes:0.#}x smaller; pages 2^{shape.PageBits}, segments 2^{shape.SegmentBits}; " +
            $"threads {string.Join(",", o.Threads)}, {o.Depth} {(o.OnGarnet ? "GETs pipelined" : "pending")} per thread, {o.Warmup.TotalSeconds:0.#} s warm-up + {o.Duration.TotalSeconds:0.#} s per phase, {o.Rounds} round{(o.Rounds > 1 ? "s" : "")}; " +
            $"devices {string.Join(", ", o.Devices)}; cache over {o.Transport}");
    }

    private static string StoreName(YcsbOptions o) => o.OnGarnet ? "Garnet" : "FASTER";

    private static void WithProgress(Action<IProgressSink> body)
    {
        if (Console.IsOutputRedirected || !AnsiConsole.Profile.Capabilities.Interactive)
        {
            body(new LineProgress());
            return;
        }
        AnsiConsole.Progress()
            .AutoClear(false)
            .Columns(new TaskDescriptionColumn(), new ProgressBarColumn(), new PercentageColumn(), new ElapsedTimeColumn())
            .Start(ctx => body(new SpectreProgress(ctx)));
    }

    private static void PrintTable(List<RunResult> results)
    {
        // One row per (device, distribution, threads): its median round, and every round's throughput beside it; Garnet's
        // runs show the process's CPU per GET where FASTER's show the bytes its pending reads allocate.
        bool cpu = results.Any(r => r.CpuUsPerOp > 0);
        var table = new Table().Border(TableBorder.Rounded)
            .AddColumns("device", "distribution", "threads", "ops/s (median)", "per round, M ops/s", "mean µs", "p50 µs", "p99 µs",
                        cpu ? "CPU µs/op" : "B/op", "errors", "note");
        var devices = results.Select(r => r.Device).Distinct().ToList();
        foreach (var r in Summary.Medians(results).OrderBy(r => devices.IndexOf(r.Device)))  // stable: phase order within a device
        {
            var all = results.Where(x => x.Device == r.Device && x.Distribution == r.Distribution && x.Threads == r.Threads)
                             .OrderBy(x => x.Round).ToList();
            var rounds = all.Select(x => Invariant($"{x.OpsPerSecond / 1e6:0.000}"));
            long errors = all.Sum(x => x.Errors);
            table.AddRow(r.Device, r.Distribution, r.Threads.ToString(CultureInfo.InvariantCulture), Invariant($"{r.OpsPerSecond:N0}"),
                         string.Join(" ", rounds), Invariant($"{r.MeanUs:0.00}"), Invariant($"{r.P50Us:0.00}"), Invariant($"{r.P99Us:0.00}"),
                         cpu ? Invariant($"{r.CpuUsPerOp:0.0}") : Invariant($"{r.AllocatedPerOp:0}"), errors.ToString(CultureInfo.InvariantCulture), r.Note);
        }
        AnsiConsole.Write(table);
    }

    /// <summary>
    /// The targets, on the median of the rounds' ratios. FASTER: RemoteCache ≥ 8x SSD and SMB, ≥ 0.3x memory (Redy:
    /// 0.28x), ≥ 0.9x FASTER's floor (ram-inline: what FASTER's pending reads cost with a device that costs a copy).
    /// Garnet: ≥ 3x its own SSD tier, and 0.6x all in memory as a stretch.
    /// </summary>
    private static Dictionary<string, double> Targets(YcsbOptions o) => o.OnGarnet
        ? new() { ["ssd"] = 3.0, ["memory"] = 0.6 }
        : new() { ["ssd"] = 8.0, ["smb"] = 8.0, ["memory"] = 0.3, ["ram-inline"] = 0.9 };

    /// <summary>An encrypted tier against the plain one: ≥ 0.8x (issue 44).</summary>
    private static readonly Dictionary<string, double> EncryptedTargets = new() { ["remotecache"] = 0.8 };

    private static bool PrintRatios(YcsbOptions o, List<RunResult> results) =>
        PrintRatios(results, "remotecache", Targets(o)) & PrintRatios(results, RunEnvironment.EncryptedDevice, EncryptedTargets);

    private static bool PrintRatios(List<RunResult> results, string device, Dictionary<string, double> targets)
    {
        bool all = true;
        foreach (var group in Summary.Ratios(results, device, targets.Keys).GroupBy(x => (x.Distribution, x.Threads)))
        {
            var parts = new List<string>();
            foreach (var ratio in group)
            {
                double target = targets[ratio.Other];
                bool ok = ratio.Median >= target;
                all &= ok || group.Key.Distribution != "uniform";
                string rounds = ratio.PerRound.Length > 1
                    ? Invariant($" [[{ratio.Min:0.00}–{ratio.Max:0.00}; rounds {string.Join(", ", ratio.PerRound.Select(v => Invariant($"{v:0.00}")))}]]") +
                      (ratio.Disagree ? Invariant($" [yellow]rounds disagree by {ratio.Spread:0.00}x (> {Summary.DisagreementLimit}x)[/]") : "")
                    : "";
                parts.Add(Invariant($"{ratio.Median:0.00}x {ratio.Other}{rounds} (target ≥ {target}x: {(ok ? "[green]met[/]" : "[red]missed[/]")})"));
            }
            AnsiConsole.MarkupLine($"{device}, {group.Key.Distribution}, {group.Key.Threads} thread(s): {string.Join(", ", parts)}");
        }
        return all;
    }

    private static void WriteFiles(string output, YcsbOptions o, List<RunResult> results, SsdCheck.Result? ssd)
    {
        var csv = new StringBuilder("device,workload,distribution,threads,value_bytes,records,operations,seconds,ops_per_s,mean_us,p50_us,p99_us,errors,note,round,allocated_per_op\n");
        foreach (var r in results)
            csv.AppendLine(Invariant($"{r.Device},{r.Workload},{r.Distribution},{r.Threads},{r.ValueBytes},{r.Records},{r.Operations},{r.Seconds:0.###},{r.OpsPerSecond:0},{r.MeanUs:0.###},{r.P50Us:0.###},{r.P99Us:0.###},{r.Errors},{r.Note},{r.Round},{r.AllocatedPerOp:0.#}"));
        var medians = Summary.Medians(results);
        File.WriteAllText(Path.Combine(output, "results.csv"), csv.ToString());
        var json = new
        {
            store = o.Store,
            workload = o.Workload.Name,
            records = o.Records,
            value_bytes = o.ValueBytes,
            memory_fraction = o.MemoryFraction,
            depth = o.Depth,
            theta = o.Theta,
            rounds = o.Rounds,
            ssd_check = ssd,
            medians = medians.Select(Row),
            ratios = RatioRows(results, "remotecache", Targets(o)).Concat(RatioRows(results, RunEnvironment.EncryptedDevice, EncryptedTargets)),
            results = results.Select(Row),
        };
        File.WriteAllText(Path.Combine(output, "results.json"), JsonSerializer.Serialize(json, new JsonSerializerOptions { WriteIndented = true }));
        if (medians.Count > 0)
            Chart.WriteAll(output, results, $"YCSB {o.Workload.Name}, {StoreName(o)}, {o.ValueBytes} B values, memory = log/{o.MemoryFraction:0}");
    }

    private static IEnumerable<object> RatioRows(List<RunResult> results, string device, Dictionary<string, double> targets) =>
        Summary.Ratios(results, device, targets.Keys).Select(x => new
        {
            device, x.Distribution, x.Threads, x.Other, median = x.Median, min = x.Min, max = x.Max, spread = x.Spread,
            rounds_disagree = x.Disagree, per_round = x.PerRound,
        });

    private static object Row(RunResult r) => new
    {
        r.Device, r.Distribution, r.Threads, r.Round, ops_per_s = r.OpsPerSecond, mean_us = r.MeanUs, p50_us = r.P50Us, p99_us = r.P99Us,
        allocated_per_op = r.AllocatedPerOp, cpu_us_per_op = r.CpuUsPerOp, r.Errors, r.Note,
    };

    private static string Invariant(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);

    private sealed class LineProgress : IProgressSink
    {
        private DateTime _last;
        private string _phase = "";
        private double _total;

        public void Phase(string description, double total)
        {
            _phase = description;
            _total = total;
            _last = DateTime.UtcNow;
            Console.WriteLine($"… {description}");
        }

        public void Advance(double done)
        {
            if ((DateTime.UtcNow - _last).TotalSeconds < 5)
                return;
            _last = DateTime.UtcNow;
            Console.WriteLine(Invariant($"  {_phase}: {100 * done / Math.Max(1, _total):0}%"));
        }
    }

    private sealed class SpectreProgress : IProgressSink
    {
        private readonly ProgressContext _ctx;
        private ProgressTask? _task;

        public SpectreProgress(ProgressContext ctx) => _ctx = ctx;

        public void Phase(string description, double total)
        {
            if (_task is not null)
                _task.Value = _task.MaxValue;
            _task = _ctx.AddTask(Markup.Escape(description), maxValue: Math.Max(1, total));
        }

        public void Advance(double done)
        {
            if (_task is not null)
                _task.Value = done;
        }
    }
}
