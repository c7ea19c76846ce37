using System;
using System.Collections.Generic;
using System.CommandLine;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using System.Text;
using System.Text.Json;
using RemoteCache.Slo;
using static RemoteCache.Cli.Slo.SloSearchCommand;

namespace RemoteCache.Cli.Slo;

/// <summary>
/// <c>remotecache slo bench</c>: times the search on a synthetic model of Redy's size (<see cref="SyntheticRedyModel"/>):
/// the precomputation, then random SLOs one by one (p50 and p99 per query), in Redy's order and by price.
/// </summary>
internal static class SloBenchCommand
{
    private const string CommandName = "remotecache slo bench";

    /// <summary>Prices of the price order timed: a server thread costs twice a client thread.</summary>
    internal static readonly SloCost PriceOrder = new(2, 1);

    public static Command Create()
    {
        var json = new Option<bool>("--json") { Description = "Print the figures as JSON" };
        var queries = new Option<int>("--queries")
        {
            Description = "Random SLOs timed per row (SLO distribution × cost order), after 1 s of untimed ones",
            DefaultValueFactory = _ => 10_000,
        };
        var threads = new Option<int>("--threads")
        {
            Description = "The model's largest client and server thread counts (Redy: 30)",
            DefaultValueFactory = _ => 30,
        };
        var seed = new Option<int>("--seed") { Description = "Seed of the model's noise and of the SLOs", DefaultValueFactory = _ => 1 };
        var parallelism = new Option<int>("--parallelism")
        {
            Description = "Threads of the precomputation (-1: every core)",
            DefaultValueFactory = _ => -1,
        };
        var figure10 = new Option<int>("--figure10")
        {
            Description = "Also run Redy's Fig. 10 walk on the first N SLOs: its time per query, and how often it misses or returns a dearer configuration",
            DefaultValueFactory = _ => 0,
        };
        var earlyTermination = new Option<bool>("--early-termination")
        {
            Description = "Drop the grid points Redy's early termination would not measure (fewer configurations predicted); default: every grid point, the larger model",
        };
        var command = new Command("bench",
            "Time the SLO search on a synthetic model of Redy's size (c, s ≤ 30, 8 B records: b ≤ 512, q ≤ 16): the precomputation and p50/p99 per query")
        {
            json, queries, threads, seed, parallelism, figure10, earlyTermination,
        };
        command.Action = new SloCommandAction(CommandName, (parse, output) => Run(
            parse.GetValue(queries), parse.GetValue(threads), parse.GetValue(seed), parse.GetValue(parallelism),
            parse.GetValue(figure10), parse.GetValue(earlyTermination), parse.GetValue(json), output));
        return command;
    }

    private static int Run(int queries, int threads, int seed, int parallelism, int figure10, bool earlyTermination, bool json, TextWriter output)
    {
        if (queries < 1)
            throw new UsageException($"--queries {queries}: must be at least 1");
        if (threads < 1 || threads > CacheConfig.MaxClientThreads)
            throw new UsageException($"--threads {threads}: must be 1..{CacheConfig.MaxClientThreads} (the data path's client threads)");
        if (parallelism == 0 || parallelism < -1)
            throw new UsageException($"--parallelism {parallelism}: must be positive or -1");
        if (figure10 < 0 || figure10 > queries)
            throw new UsageException($"--figure10 {figure10}: must be 0..--queries");

        var model = SyntheticRedyModel.Create(threads, seed, earlyTermination);
        var predictor = new SloPredictor(model, SloOperation.Read);
        var space = model.Space;
        long spaceSize = SloReferenceSearch.Configurations(space).LongCount();

        long heapBefore = GC.GetTotalMemory(forceFullCollection: true);
        long start = Stopwatch.GetTimestamp();
        var search = new SloSearch(predictor, parallelism);
        double precomputeSeconds = Stopwatch.GetElapsedTime(start).TotalSeconds;
        long retained = GC.GetTotalMemory(forceFullCollection: true) - heapBefore;

        var slos = SyntheticRedyModel.RandomSlos(model, queries, seed, logUniform: false);
        var logSlos = SyntheticRedyModel.RandomSlos(model, queries, seed + 1, logUniform: true);
        var gridSlos = SyntheticRedyModel.GridSlos(model, 100);
        WarmUp(search, slos, logSlos);
        var times = new List<QueryTimes>();
        int met = 0, logMet = 0;
        times.Add(Time(search, slos, SloCost.Redy, "uniform", out met));
        times.Add(Time(search, slos, PriceOrder, "uniform", out _));
        times.Add(Time(search, logSlos, SloCost.Redy, "log-uniform", out logMet));
        times.Add(Time(search, logSlos, PriceOrder, "log-uniform", out _));
        times.Add(Time(search, gridSlos, SloCost.Redy, "log-grid", out int gridMet));
        times.Add(Time(search, gridSlos, PriceOrder, "log-grid", out _));

        Figure10Figures? fig10 = figure10 > 0 ? RunFigure10(search, slos.Take(figure10).ToList()) : null;

        var figures = new BenchFigures(
            threads, earlyTermination, space, spaceSize, predictor.MeasuredPoints, GridPoints(space), search.ConfigurationCount,
            search.LevelCount, search.FrontierSize, search.LevelFrontierSteps,
            precomputeSeconds, parallelism == -1 ? Environment.ProcessorCount : parallelism, retained,
            queries, met, logMet, gridSlos.Count, gridMet, times, fig10);
        output.Write(json ? Json(figures) : Text(figures));
        return SloExitCodes.Success;
    }

    /// <summary>
    /// Searches for a second, untimed: long enough for the runtime to replace the first, unoptimized code of the search
    /// with its optimized code (tiered compilation starts counting calls 100 ms after the last method compiled), as in a
    /// long-running manager. Without it the first tens of milliseconds of queries run several times slower.
    /// </summary>
    private static void WarmUp(SloSearch search, List<ServiceLevelObjective> slos, List<ServiceLevelObjective> logSlos)
    {
        var watch = Stopwatch.StartNew();
        for (int i = 0; watch.Elapsed.TotalSeconds < 1; i++)
        {
            search.Search(slos[i % slos.Count]);
            search.Search(logSlos[i % logSlos.Count], PriceOrder);
        }
    }

    private static QueryTimes Time(SloSearch search, List<ServiceLevelObjective> slos, SloCost cost, string distribution, out int met)
    {
        var micros = new double[slos.Count];
        met = 0;
        for (int i = 0; i < slos.Count; i++)
        {
            long t0 = Stopwatch.GetTimestamp();
            var result = search.Search(slos[i], cost);
            micros[i] = Micros(t0);
            if (result.Found)
                met++;
        }
        return QueryTimes.Of(cost, distribution, micros);
    }

    /// <summary>µs since <paramref name="start"/>, at the timestamp's resolution (a TimeSpan would round to 0.1 µs).</summary>
    private static double Micros(long start) => (Stopwatch.GetTimestamp() - start) * 1e6 / Stopwatch.Frequency;

    private static Figure10Figures RunFigure10(SloSearch search, List<ServiceLevelObjective> slos)
    {
        var micros = new double[slos.Count];
        int found = 0, missed = 0, dearer = 0, same = 0;
        long leaves = 0;
        for (int i = 0; i < slos.Count; i++)
        {
            var exact = search.Search(slos[i]);
            long t0 = Stopwatch.GetTimestamp();
            var walk = SloReferenceSearch.Figure10(search.Predictor, slos[i], out long visited);
            micros[i] = Micros(t0);
            leaves += visited;
            if (exact.Cheapest is not { } cheapest)
                continue;
            found++;
            if (walk is not { } w)
                missed++;
            else if (w.Config == cheapest.Config)
                same++;
            else
                dearer++;
        }
        return new Figure10Figures(slos.Count, found, same, missed, dearer, (double)leaves / slos.Count, QueryTimes.Of(SloCost.Redy, "uniform", micros));
    }

    private static int GridPoints(ConfigurationSpace space)
    {
        int Count(int min, int max) => ConfigurationSpace.GridValues(min, max).Length;
        int c = Count(0, space.MaxClientThreads), s = Count(space.MinServerThreads, space.MaxServerThreads);
        int b = Count(1, space.MaxBatch), q = Count(1, space.MaxQueueDepth);
        return (space.MinServerThreads == 0 ? c * q : 0) + c * (s - (space.MinServerThreads == 0 ? 1 : 0)) * b * q;
    }

    private static string Text(BenchFigures f)
    {
        var t = new StringBuilder();
        var sp = f.Space;
        t.AppendLine(Invariant($"model: synthetic, Redy's size: c 0..{sp.MaxClientThreads}, s {sp.MinServerThreads}..{sp.MaxServerThreads}, b 1..{sp.MaxBatch} (8 B records), q 1..{sp.MaxQueueDepth}; {f.SpaceConfigurations:N0} configurations in the space"));
        t.AppendLine(Invariant($"       {f.MeasuredPoints:N0} points measured (of {f.GridPoints:N0} on the grid{(f.EarlyTermination ? "; the rest dropped by early termination" : "")}), {f.PredictedConfigurations:N0} configurations predicted"));
        t.AppendLine(Invariant($"precompute: {f.PrecomputeSeconds:F3} s on {f.PrecomputeThreads} thread(s); {f.Levels:N0} (s, c) levels, {f.LevelFrontierSteps:N0} level frontier steps, {f.GlobalFrontierSteps:N0} global; {f.RetainedBytes / 1048576.0:F1} MiB retained"));
        t.AppendLine(Invariant($"queries: {f.Queries:N0} random SLOs per row (after 1 s of untimed ones), latency and throughput between the model's lowest and highest:"));
        t.AppendLine(Invariant($"  uniform (Redy's §7.3; {100.0 * f.Met / f.Queries:F1} % met) and log-uniform ({100.0 * f.LogMet / f.Queries:F1} % met);"));
        t.AppendLine(Invariant($"  and the {f.GridQueries:N0} SLOs of a 100 × 100 grid, log-spaced over the same ranges ({100.0 * f.GridMet / f.GridQueries:F1} % met). Time per query:"));
        foreach (var q in f.Times)
            t.AppendLine(Invariant($"  {q.Distribution,-12} {q.Order,-18} p50 {q.P50Us,7:F3} µs   p99 {q.P99Us,7:F3} µs   mean {q.MeanUs,7:F3} µs   max {q.MaxUs,8:F1} µs"));
        if (f.Figure10 is { } g)
        {
            t.AppendLine(Invariant($"Fig. 10 walk on the first {g.Queries:N0} SLOs: p50 {g.Times.P50Us / 1000:F2} ms, p99 {g.Times.P99Us / 1000:F2} ms, mean {g.Times.MeanUs / 1000:F2} ms, {g.MeanLeaves:N0} leaves a query"));
            t.AppendLine(Invariant($"  of {g.Met:N0} SLOs some configuration meets: same as the exact search {g.Same:N0}, missed {g.Missed:N0}, dearer {g.Dearer:N0}"));
        }
        t.AppendLine(Invariant($"machine: {Environment.ProcessorCount} cores, {RuntimeInformation.OSDescription}, .NET {Environment.Version}, {DateTime.UtcNow:yyyy-MM-dd}"));
        return t.ToString();
    }

    private static string Json(BenchFigures f)
    {
        using var stream = new MemoryStream();
        using (var w = new Utf8JsonWriter(stream, new JsonWriterOptions { Indented = true }))
        {
            w.WriteStartObject();
            w.WriteString("date", DateTime.UtcNow.ToString("yyyy-MM-dd", System.Globalization.CultureInfo.InvariantCulture));
            w.WriteStartObject("machine");
            w.WriteNumber("cores", Environment.ProcessorCount);
            w.WriteString("os", RuntimeInformation.OSDescription);
            w.WriteString("runtime", Environment.Version.ToString());
            w.WriteEndObject();
            w.WriteStartObject("model");
            w.WriteString("kind", "synthetic");
            w.WriteNumber("maxClientThreads", f.Space.MaxClientThreads);
            w.WriteNumber("maxServerThreads", f.Space.MaxServerThreads);
            w.WriteNumber("maxBatch", f.Space.MaxBatch);
            w.WriteNumber("maxQueueDepth", f.Space.MaxQueueDepth);
            w.WriteNumber("spaceConfigurations", f.SpaceConfigurations);
            w.WriteNumber("gridPoints", f.GridPoints);
            w.WriteBoolean("earlyTermination", f.EarlyTermination);
            w.WriteNumber("measuredPoints", f.MeasuredPoints);
            w.WriteNumber("predictedConfigurations", f.PredictedConfigurations);
            w.WriteEndObject();
            w.WriteStartObject("precompute");
            w.WriteNumber("seconds", f.PrecomputeSeconds);
            w.WriteNumber("threads", f.PrecomputeThreads);
            w.WriteNumber("levels", f.Levels);
            w.WriteNumber("levelFrontierSteps", f.LevelFrontierSteps);
            w.WriteNumber("globalFrontierSteps", f.GlobalFrontierSteps);
            w.WriteNumber("retainedBytes", f.RetainedBytes);
            w.WriteEndObject();
            w.WriteNumber("queries", f.Queries);
            w.WriteNumber("metUniform", f.Met);
            w.WriteNumber("metLogUniform", f.LogMet);
            w.WriteNumber("gridQueries", f.GridQueries);
            w.WriteNumber("metGrid", f.GridMet);
            w.WriteStartArray("times");
            foreach (var q in f.Times)
                Times(w, q);
            w.WriteEndArray();
            if (f.Figure10 is { } g)
            {
                w.WriteStartObject("figure10");
                w.WriteNumber("queries", g.Queries);
                w.WriteNumber("met", g.Met);
                w.WriteNumber("same", g.Same);
                w.WriteNumber("missed", g.Missed);
                w.WriteNumber("dearer", g.Dearer);
                w.WriteNumber("meanLeaves", g.MeanLeaves);
                w.WritePropertyName("times");
                Times(w, g.Times);
                w.WriteEndObject();
            }
            w.WriteEndObject();
        }
        return Encoding.UTF8.GetString(stream.ToArray()) + Environment.NewLine;
    }

    private static void Times(Utf8JsonWriter w, QueryTimes q)
    {
        w.WriteStartObject();
        w.WriteString("distribution", q.Distribution);
        w.WriteString("order", q.Order);
        w.WriteNumber("p50Us", q.P50Us);
        w.WriteNumber("p99Us", q.P99Us);
        w.WriteNumber("meanUs", q.MeanUs);
        w.WriteNumber("maxUs", q.MaxUs);
        w.WriteEndObject();
    }

    private sealed record BenchFigures(
        int Threads, bool EarlyTermination, ConfigurationSpace Space, long SpaceConfigurations, int MeasuredPoints, int GridPoints, long PredictedConfigurations,
        int Levels, int GlobalFrontierSteps, int LevelFrontierSteps,
        double PrecomputeSeconds, int PrecomputeThreads, long RetainedBytes,
        int Queries, int Met, int LogMet, int GridQueries, int GridMet, List<QueryTimes> Times, Figure10Figures? Figure10);

    private sealed record Figure10Figures(int Queries, int Met, int Same, int Missed, int Dearer, double MeanLeaves, QueryTimes Times);

    private sealed record QueryTimes(string Distribution, string Order, double P50Us, double P99Us, double MeanUs, double MaxUs)
    {
        public static QueryTimes Of(SloCost cost, string distribution, double[] micros)
        {
            var sorted = (double[])micros.Clone();
            Array.Sort(sorted);
            string order = cost.ServerThreadPrice == 0 && cost.ClientThreadPrice == 0 ? "redy" : Invariant($"price s {cost.ServerThreadPrice}, c {cost.ClientThreadPrice}");
            return new QueryTimes(distribution, order, Percentile(sorted, 0.50), Percentile(sorted, 0.99), sorted.Average(), sorted[^1]);
        }

        // Nearest rank.
        private static double Percentile(double[] sorted, double p) => sorted[Math.Max(0, (int)Math.Ceiling(p * sorted.Length) - 1)];
    }
}
