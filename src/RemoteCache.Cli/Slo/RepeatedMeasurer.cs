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
/// Measures each configuration <see cref="Repeats"/> times and keeps the median of each figure (mean latency,
/// throughput, p50, p99) on its own.
/// One short run on a small shared machine is off by 20–30 % from the next (spinning client, server and application
/// threads share two cores), so a single run is not a figure a model should be fitted to or judged against.
/// </summary>
internal sealed class RepeatedMeasurer : IPointMeasurer
{
    private readonly IPointMeasurer _inner;
    private readonly Dictionary<CacheConfig, RunSpread> _spreads = new();

    public RepeatedMeasurer(IPointMeasurer inner, int repeats)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(repeats, 1);
        _inner = inner;
        Repeats = repeats;
    }

    public int Repeats { get; }

    /// <summary>The spread of the runs of every configuration measured so far.</summary>
    public IReadOnlyDictionary<CacheConfig, RunSpread> Spreads => _spreads;

    public async Task<ModelPoint> MeasureAsync(SloOperation operation, CacheConfig config, CancellationToken cancellationToken)
    {
        var runs = new List<ModelPoint>(Repeats);
        for (int i = 0; i < Repeats; i++)
            runs.Add(await _inner.MeasureAsync(operation, config, cancellationToken).ConfigureAwait(false));
        double latency = Median(runs.Select(r => r.MeanUs)), throughput = Median(runs.Select(r => r.OpsPerSecond));
        _spreads[config] = new RunSpread(Median(runs.Select(r => Math.Abs(r.MeanUs - latency) / latency)),
                                         Median(runs.Select(r => Math.Abs(r.OpsPerSecond - throughput) / throughput)));
        return new ModelPoint(config.ClientThreads, config.ServerThreads, config.BatchSize, config.QueueDepth, latency, throughput)
        {
            P50Us = runs.All(r => r.P50Us is not null) ? Median(runs.Select(r => r.P50Us!.Value)) : null,
            P99Us = runs.All(r => r.P99Us is not null) ? Median(runs.Select(r => r.P99Us!.Value)) : null,
        };
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
