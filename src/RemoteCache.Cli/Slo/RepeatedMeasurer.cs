using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Slo;

namespace RemoteCache.Cli.Slo;

/// <summary>How much the runs of one configuration disagreed: the median of |run − median| / median, per metric.</summary>
/// <param name="Latency">Of the mean latency.</param>
/// <param name="Throughput">Of the throughput.</param>
internal readonly record struct RunSpread(double Latency, double Throughput);

/// <summary>
/// A configuration measured in the same phase as a reference point of the model: <see cref="Raw"/> is what it reached,
/// <see cref="Measured"/> what the reference reached run for run beside it, and the drifts are the reference's real
/// figure over the model's (latency and throughput). The configuration's figures divided by the drifts are what it
/// would have reached in the phase the model was measured in.
/// </summary>
internal sealed record PhaseReading(CacheConfig Reference, ModelPoint Raw, ModelPoint Measured, double LatencyDrift, double ThroughputDrift);

/// <summary>
/// Measures each configuration <see cref="Repeats"/> times and keeps the median of each figure (mean latency,
/// throughput, p50, p99) on its own.
/// One short run on a small shared machine is off by 20–30 % from the next (spinning client, server and application
/// threads share two cores), so a single run is not a figure a model should be fitted to or judged against.
/// </summary>
/// <remarks>
/// With a reference model, each run of a configuration follows a run of the model's nearest other measured point (its
/// reference), and the configuration's medians are divided by the reference's drift from the model: the development VM
/// runs the same configuration about 1.6× faster or slower in phases of tens of seconds, which a model measured in one
/// phase cannot predict in another; a reference measured alternately with the configuration shares its phase.
/// </remarks>
internal sealed class RepeatedMeasurer : IPointMeasurer
{
    private readonly IPointMeasurer _inner;
    private readonly PerformanceModel? _referenceModel;
    private readonly Dictionary<CacheConfig, RunSpread> _spreads = new();
    private readonly Dictionary<CacheConfig, PhaseReading> _phases = new();

    public RepeatedMeasurer(IPointMeasurer inner, int repeats, PerformanceModel? referenceModel = null)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(repeats, 1);
        _inner = inner;
        _referenceModel = referenceModel;
        Repeats = repeats;
    }

    public int Repeats { get; }

    /// <summary>The spread of the runs of every configuration measured so far.</summary>
    public IReadOnlyDictionary<CacheConfig, RunSpread> Spreads => _spreads;

    /// <summary>With a reference model: each configuration's reference and drift.</summary>
    public IReadOnlyDictionary<CacheConfig, PhaseReading> Phases => _phases;

    public async Task<ModelPoint> MeasureAsync(SloOperation operation, CacheConfig config, CancellationToken cancellationToken)
    {
        var reference = _referenceModel is null ? null : ReferenceFor(_referenceModel.Points(operation), config);
        var runs = new List<ModelPoint>(Repeats);
        var referenceRuns = new List<ModelPoint>(Repeats);
        for (int i = 0; i < Repeats; i++)
        {
            if (reference is not null)
                referenceRuns.Add(await _inner.MeasureAsync(operation, reference.Config, cancellationToken).ConfigureAwait(false));
            runs.Add(await _inner.MeasureAsync(operation, config, cancellationToken).ConfigureAwait(false));
        }
        var (point, spread) = Combine(config, runs);
        _spreads[config] = spread;
        if (reference is null)
            return point;
        var (measured, _) = Combine(reference.Config, referenceRuns);
        double latencyDrift = measured.MeanUs / reference.MeanUs, throughputDrift = measured.OpsPerSecond / reference.OpsPerSecond;
        _phases[config] = new PhaseReading(reference.Config, point, measured, latencyDrift, throughputDrift);
        return point with
        {
            MeanUs = point.MeanUs / latencyDrift,
            OpsPerSecond = point.OpsPerSecond / throughputDrift,
            P50Us = point.P50Us / latencyDrift,
            P99Us = point.P99Us / latencyDrift,
        };
    }

    /// <summary>
    /// The measured point nearest to <paramref name="config"/> other than itself (distance: the sum of the parameters'
    /// log2 steps), the same number of server threads first (one-sided and server-driven paths drift apart).
    /// </summary>
    internal static ModelPoint ReferenceFor(IReadOnlyList<ModelPoint> points, CacheConfig config)
    {
        static double Steps(int a, int b) => Math.Abs(Math.Log2(a) - Math.Log2(b));
        double Distance(ModelPoint p) =>
            Steps(p.C + 1, config.ClientThreads + 1) + Steps(p.S + 1, config.ServerThreads + 1) +  // c and s start at 0
            Steps(p.B, config.BatchSize) + Steps(p.Q, config.QueueDepth);
        return points.Where(p => p.Config != config)
                     .OrderBy(p => p.S == config.ServerThreads ? 0 : 1)
                     .ThenBy(Distance)
                     .ThenBy(p => (p.S, p.C, p.B, p.Q))
                     .FirstOrDefault()
               ?? throw new ArgumentException($"the model has no measured point other than {config} to use as a reference");
    }

    private static (ModelPoint Point, RunSpread Spread) Combine(CacheConfig config, List<ModelPoint> runs)
    {
        double latency = Median(runs.Select(r => r.MeanUs)), throughput = Median(runs.Select(r => r.OpsPerSecond));
        var spread = new RunSpread(Median(runs.Select(r => Math.Abs(r.MeanUs - latency) / latency)),
                                   Median(runs.Select(r => Math.Abs(r.OpsPerSecond - throughput) / throughput)));
        var point = new ModelPoint(config.ClientThreads, config.ServerThreads, config.BatchSize, config.QueueDepth, latency, throughput)
        {
            P50Us = runs.All(r => r.P50Us is not null) ? Median(runs.Select(r => r.P50Us!.Value)) : null,
            P99Us = runs.All(r => r.P99Us is not null) ? Median(runs.Select(r => r.P99Us!.Value)) : null,
        };
        return (point, spread);
    }

    /// <summary>The middle value (the mean of the two middle ones of an even count).</summary>
    internal static double Median(IEnumerable<double> values)
    {
        var sorted = values.OrderBy(v => v).ToArray();
        if (sorted.Length == 0)
            throw new ArgumentException("no values", nameof(values));
        int middle = sorted.Length / 2;
        return sorted.Length % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
    }
}
