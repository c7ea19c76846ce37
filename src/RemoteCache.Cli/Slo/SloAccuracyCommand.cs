using System;
using System.CommandLine;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Text.Json;
using System.Threading;
using RemoteCache.Slo;

namespace RemoteCache.Cli.Slo;

/// <summary>
/// <c>remotecache slo accuracy</c>: Redy §7.3's accuracy experiment on this host. Random SLOs between the model's
/// lowest and highest latency and throughput are searched, each chosen configuration is run on the real data path
/// (remotecache-bench, as the model was measured), and the SLO, the prediction and the reality are compared.
/// </summary>
internal static class SloAccuracyCommand
{
    private const string CommandName = "remotecache slo accuracy";

    /// <summary>The targets the issue states: feasible SLOs met within the tolerance, and the median prediction error.</summary>
    public const double MetTarget = 0.90, ErrorTarget = 0.10;

    public static Command Create()
    {
        var model = new Option<FileInfo>("--model") { Description = "The performance model (a remotecache-slo-model JSON file)", Required = true };
        var operation = new Option<string>("--operation") { Description = "The operation the SLOs are for", DefaultValueFactory = _ => "read" };
        operation.AcceptOnlyFromAmong("read", "write");
        var slos = new Option<int>("--slos") { Description = "Random SLOs to draw", DefaultValueFactory = _ => 100 };
        var seed = new Option<int>("--seed") { Description = "Seed of the SLOs", DefaultValueFactory = _ => 1 };
        var seconds = new Option<double?>("--seconds") { Description = "Measured seconds per configuration (default: the model's, so that reality is measured as the model was)" };
        var warmup = new Option<double?>("--warmup") { Description = "Unmeasured seconds before each (default: the model's)" };
        var repeats = new Option<int>("--repeats")
        {
            Description = "Runs per configuration; the real figures are their medians (one short run is off by 20–30 % from the next on a small shared machine)",
            DefaultValueFactory = _ => 5,
        };
        var tolerance = new Option<double>("--tolerance")
        {
            Description = "How far past a bound still counts as meeting it (0.1 = 10 %)", DefaultValueFactory = _ => 0.1,
        };
        var output = new Option<DirectoryInfo?>("--out") { Description = "Where accuracy.json goes (default artifacts/slo-accuracy/MODEL); benchmarks/SloCharts draws its CDF charts" };
        var bench = new Option<string?>("--bench") { Description = "The remotecache-bench to measure with (default: the one next to remotecache-server)" };
        var verbsAddress = VerbsAddressOption.Create();
        var json = new Option<bool>("--json") { Description = "Print the summary as JSON" };
        var samePhase = new Option<bool>("--same-phase")
        {
            Description = "Run each configuration alternately with the model's nearest other measured point and divide its figures by " +
                          "that reference's drift from the model (judges the model in the phase it was measured in, on a machine whose speed swings)",
        };
        var command = new Command("accuracy",
            "Redy's accuracy experiment on this host: random SLOs searched in the model, each chosen configuration measured with " +
            "remotecache-bench; prints the share of feasible SLOs met and the prediction errors, writes accuracy.json (its CDF charts: benchmarks/SloCharts)")
        {
            model, operation, slos, seed, seconds, warmup, repeats, tolerance, output, bench, verbsAddress, json, samePhase,
        };
        command.Action = new SloCommandAction(CommandName, (parse, stdout) =>
        {
            var file = parse.GetValue(model)!;
            var loaded = Load(file);
            var op = parse.GetValue(operation) == "write" ? SloOperation.Write : SloOperation.Read;
            int count = parse.GetValue(slos);
            double measureSeconds = parse.GetValue(seconds) ?? loaded.Measured.SecondsPerPoint;
            double warm = parse.GetValue(warmup) ?? loaded.Measured.WarmupSeconds, tol = parse.GetValue(tolerance);
            int runs = parse.GetValue(repeats);
            if (count < 1 || !(measureSeconds > 0) || !(warm >= 0) || !(tol >= 0) || runs is < 1 or > 100)
                throw new UsageException("--slos must be at least 1, --seconds positive, --warmup and --tolerance 0 or more, --repeats between 1 and 100");
            string benchPath = parse.GetValue(bench) ?? BenchMeasurer.DefaultPath;
            if (!File.Exists(benchPath))
                throw new UsageException($"remotecache-bench not found at {benchPath} (build src/RemoteCache, or pass --bench PATH)");
            string directory = parse.GetValue(output)?.FullName
                ?? Path.Combine("artifacts", "slo-accuracy", Path.GetFileNameWithoutExtension(file.Name));

            string? address = parse.GetValue(verbsAddress);
            if (VerbsAddressOption.Mismatch(loaded.Transport == "verbs", address, "a verbs model") is { } mismatch)
                throw new UsageException($"{file.FullName} is a {loaded.Transport} model: {mismatch}");
            SloSearch search;
            try
            {
                search = new SloSearch(loaded, op);
            }
            catch (ArgumentException e)
            {
                throw new UsageException($"{file.FullName}: {e.Message}", e);
            }
            var objectives = SloAccuracy.DrawSlos(loaded, op, count, parse.GetValue(seed));
            bool phase = parse.GetValue(samePhase);
            var measurer = new RepeatedMeasurer(new BenchMeasurer(benchPath, loaded.Transport, address, loaded.RecordSize, measureSeconds, warm), runs,
                                                phase ? loaded : null);
            var started = DateTime.UtcNow;
            var rows = SloAccuracy.RunAsync(search, objectives, measurer, tol, (n, row) =>
            {
                if (row.Real is { } real)
                    stdout.WriteLine(Invariant($"[{n}/{count}] {row.Objective.MaxMeanLatencyUs,9:G4} µs {row.Objective.MinOpsPerSecond,10:G4} ops/s -> {row.Config}: predicted {row.Predicted!.Value.MeanUs:G4} µs {row.Predicted.Value.OpsPerSecond:G4}/s, real {real.MeanUs:G4} µs {real.OpsPerSecond:G4}/s {(row.Met ? "met" : "MISSED")}{Drift(measurer, row.Config!.Value)}"));
                else
                    stdout.WriteLine(Invariant($"[{n}/{count}] {row.Objective.MaxMeanLatencyUs,9:G4} µs {row.Objective.MinOpsPerSecond,10:G4} ops/s -> infeasible in the model"));
            }, CancellationToken.None).GetAwaiter().GetResult();
            var summary = SloAccuracy.Summarize(rows, tol, measurer);
            Directory.CreateDirectory(directory);
            File.WriteAllText(Path.Combine(directory, "accuracy.json"), Json(file.FullName, loaded, op, summary, rows, measurer, started));
            if (parse.GetValue(json))
            {
                stdout.WriteLine(JsonSerializer.Serialize(summary, new JsonSerializerOptions { WriteIndented = true, PropertyNamingPolicy = JsonNamingPolicy.CamelCase }));
            }
            else
            {
                stdout.WriteLine(Invariant($"model {file.FullName}: {summary.Slos} SLOs, {summary.Feasible} feasible in the model"));
                if (phase)
                    stdout.WriteLine("real = measured alternately with the model's nearest other point and divided by that reference's drift from the model (--same-phase)");
                stdout.WriteLine(Invariant($"met within {tol:P0}: {summary.Met} of {summary.Feasible} ({summary.MetShare:P1}; target ≥ {MetTarget:P0}: {(summary.MetShare >= MetTarget ? "met" : "missed")})"));
                bool errorMet = Math.Max(summary.LatencyErrorMedian, summary.ThroughputErrorMedian) <= ErrorTarget;
                stdout.WriteLine(Invariant($"|predicted − real| / real, median / p95: latency {summary.LatencyErrorMedian:P1} / {summary.LatencyErrorP95:P1}, throughput {summary.ThroughputErrorMedian:P1} / {summary.ThroughputErrorP95:P1} (target median ≤ {ErrorTarget:P0}: {(errorMet ? "met" : "missed")})"));
                if (summary.Repeats > 1)
                    stdout.WriteLine(Invariant($"real = median of {summary.Repeats} runs per configuration; run-to-run noise (median |run − median| / median): latency {summary.LatencyNoise:P1}, throughput {summary.ThroughputNoise:P1}"));
                stdout.WriteLine($"wrote {Path.Combine(directory, "accuracy.json")}; its charts: dotnet run --project benchmarks/SloCharts -- {directory}");
            }
            return SloExitCodes.Success;
        });
        return command;
    }

    private static PerformanceModel Load(FileInfo file)
    {
        try
        {
            return PerformanceModel.Load(file.FullName);
        }
        catch (FormatException e)
        {
            throw new UsageException(e.Message, e);
        }
    }

    private static string Drift(RepeatedMeasurer measurer, CacheConfig config) =>
        measurer.Phases.TryGetValue(config, out var p)
            ? Invariant($" (raw {p.Raw.MeanUs:G4} µs {p.Raw.OpsPerSecond:G4}/s; reference {p.Reference} drift ×{p.LatencyDrift:G3} / ×{p.ThroughputDrift:G3})")
            : "";

    // accuracy.json: the run's summary and every SLO's bound, prediction and measurement (benchmarks/SloCharts reads it).
    internal static string Json(string path, PerformanceModel model, SloOperation op, AccuracySummary summary, System.Collections.Generic.List<AccuracyRow> rows,
                               RepeatedMeasurer measurer, DateTime started)
    {
        var document = new
        {
            model = path,
            transport = model.Transport,
            recordSize = model.RecordSize,
            operation = op.ToString().ToLowerInvariant(),
            date = started.ToString("yyyy-MM-dd", CultureInfo.InvariantCulture),
            command = "remotecache " + string.Join(" ", Environment.GetCommandLineArgs().Skip(1)),
            samePhase = measurer.Phases.Count > 0,
            summary,
            rows = rows.Select(r => new
            {
                latencyUs = r.Objective.MaxMeanLatencyUs,
                opsPerSecond = r.Objective.MinOpsPerSecond,
                config = r.Config?.ToString(),
                predictedUs = r.Predicted?.MeanUs,
                predictedOpsPerSecond = r.Predicted?.OpsPerSecond,
                realUs = r.Real?.MeanUs,
                realOpsPerSecond = r.Real?.OpsPerSecond,
                phase = r.Config is { } c && measurer.Phases.TryGetValue(c, out var p)
                    ? new { reference = p.Reference.ToString(), rawUs = p.Raw.MeanUs, rawOpsPerSecond = p.Raw.OpsPerSecond, p.LatencyDrift, p.ThroughputDrift }
                    : null,
                r.Met,
            }),
        };
        return JsonSerializer.Serialize(document, new JsonSerializerOptions { WriteIndented = true, PropertyNamingPolicy = JsonNamingPolicy.CamelCase });
    }

    private static string Invariant(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);
}
