using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Slo;

namespace RemoteCache.Cli.Slo;

/// <summary>One SLO of an accuracy run: what the search chose and predicted, and what the data path then achieved.</summary>
/// <param name="Objective">The SLO.</param>
/// <param name="Config">The configuration chosen; null when the model predicts none meets the SLO (infeasible).</param>
/// <param name="Predicted">The model's prediction at <paramref name="Config"/>.</param>
/// <param name="Real">What a real cache configured so achieved.</param>
/// <param name="Met">Whether <paramref name="Real"/> met the SLO within the run's tolerance.</param>
internal sealed record AccuracyRow(ServiceLevelObjective Objective, CacheConfig? Config, Prediction? Predicted, ModelPoint? Real, bool Met);

/// <summary>An accuracy run in figures (Redy Fig. 13/14's).</summary>
/// <param name="Slos">SLOs drawn.</param>
/// <param name="Feasible">SLOs the model predicts some configuration meets.</param>
/// <param name="Met">Feasible SLOs whose configuration met them for real, within the tolerance.</param>
/// <param name="Tolerance">How far past a bound still counted as meeting it (0.1 = 10 %).</param>
/// <param name="LatencyErrorMedian">Median of |predicted − real| / real mean latency over the feasible SLOs.</param>
/// <param name="LatencyErrorP95">Its 95th percentile.</param>
/// <param name="ThroughputErrorMedian">Median of |predicted − real| / real throughput.</param>
/// <param name="ThroughputErrorP95">Its 95th percentile.</param>
/// <param name="Repeats">Runs per configuration; real figures are their medians.</param>
/// <param name="LatencyNoise">
/// The run-to-run noise floor: over the configurations measured, the median of each one's median |run − median| / median
/// latency (null with one run). A prediction cannot be expected to come closer to one run than this.
/// </param>
/// <param name="ThroughputNoise">The same for throughput.</param>
internal sealed record AccuracySummary(int Slos, int Feasible, int Met, double Tolerance, double LatencyErrorMedian, double LatencyErrorP95,
                                       double ThroughputErrorMedian, double ThroughputErrorP95, int Repeats, double? LatencyNoise, double? ThroughputNoise)
{
    /// <summary>Share of the feasible SLOs met.</summary>
    public double MetShare => Feasible == 0 ? 0 : (double)Met / Feasible;
}

/// <summary>
/// Redy §7.3's accuracy experiment: random SLOs drawn uniformly between a model's lowest and highest measured mean
/// latency and throughput, each searched, the chosen configuration run on the real data path, and the three compared:
/// the SLO, the prediction, the reality.
/// </summary>
internal static class SloAccuracy
{
    /// <summary><paramref name="count"/> SLOs uniform between the lowest and highest latency and throughput the model measured.</summary>
    public static List<ServiceLevelObjective> DrawSlos(PerformanceModel model, SloOperation operation, int count, int seed)
    {
        var points = model.Points(operation);
        if (points.Count == 0)
            throw new UsageException($"the model has no {operation.ToString().ToLowerInvariant()} points");
        double minLat = points.Min(p => p.MeanUs), maxLat = points.Max(p => p.MeanUs);
        double minTp = points.Min(p => p.OpsPerSecond), maxTp = points.Max(p => p.OpsPerSecond);
        var random = new Random(seed);
        return Enumerable.Range(0, count)
            .Select(_ => new ServiceLevelObjective(operation, minLat + (maxLat - minLat) * random.NextDouble(),
                                                   minTp + (maxTp - minTp) * random.NextDouble(), model.RecordSize))
            .ToList();
    }

    /// <summary>Searches each SLO and measures the feasible ones' configurations with <paramref name="measurer"/>.</summary>
    public static async Task<List<AccuracyRow>> RunAsync(SloSearch search, IReadOnlyList<ServiceLevelObjective> slos, IPointMeasurer measurer,
                                                         double tolerance, Action<int, AccuracyRow>? progress, CancellationToken cancellationToken)
    {
        var rows = new List<AccuracyRow>(slos.Count);
        // One measurement per configuration: SLOs that choose the same one share it (as one cache serving them would).
        var measured = new Dictionary<CacheConfig, ModelPoint>();
        foreach (var slo in slos)
        {
            cancellationToken.ThrowIfCancellationRequested();
            var result = search.Search(slo);
            AccuracyRow row;
            if (result.Cheapest is not { } chosen)
            {
                row = new AccuracyRow(slo, null, null, null, false);
            }
            else
            {
                if (!measured.TryGetValue(chosen.Config, out var real))
                    measured[chosen.Config] = real = await measurer.MeasureAsync(slo.Operation, chosen.Config, cancellationToken).ConfigureAwait(false);
                row = new AccuracyRow(slo, chosen.Config, chosen.Predicted, real, Meets(slo, real, tolerance));
            }
            rows.Add(row);
            progress?.Invoke(rows.Count, row);
        }
        return rows;
    }

    /// <summary>Whether <paramref name="real"/> meets <paramref name="slo"/> with <paramref name="tolerance"/> to spare on each bound.</summary>
    public static bool Meets(ServiceLevelObjective slo, ModelPoint real, double tolerance) =>
        real.MeanUs <= slo.MaxMeanLatencyUs * (1 + tolerance) && real.OpsPerSecond * (1 + tolerance) >= slo.MinOpsPerSecond;

    public static AccuracySummary Summarize(IReadOnlyList<AccuracyRow> rows, double tolerance, RepeatedMeasurer measurer)
    {
        var feasible = rows.Where(r => r.Real is not null).ToList();
        var latency = feasible.Select(r => Math.Abs(r.Predicted!.Value.MeanUs - r.Real!.MeanUs) / r.Real.MeanUs).ToList();
        var throughput = feasible.Select(r => Math.Abs(r.Predicted!.Value.OpsPerSecond - r.Real!.OpsPerSecond) / r.Real.OpsPerSecond).ToList();
        return new AccuracySummary(rows.Count, feasible.Count, feasible.Count(r => r.Met), tolerance,
                                   Quantile(latency, 0.5), Quantile(latency, 0.95), Quantile(throughput, 0.5), Quantile(throughput, 0.95),
                                   measurer.Repeats, measurer.Repeats == 1 ? null : Quantile(measurer.Spreads.Values.Select(v => v.Latency).ToList(), 0.5),
                                   measurer.Repeats == 1 ? null : Quantile(measurer.Spreads.Values.Select(v => v.Throughput).ToList(), 0.5));
    }

    /// <summary>The value at quantile <paramref name="q"/> (nearest rank); NaN of nothing.</summary>
    public static double Quantile(IReadOnlyCollection<double> values, double q)
    {
        if (values.Count == 0)
            return double.NaN;
        var sorted = values.OrderBy(v => v).ToList();
        int rank = Math.Clamp((int)Math.Ceiling(q * sorted.Count) - 1, 0, sorted.Count - 1);
        return sorted[rank];
    }
}
