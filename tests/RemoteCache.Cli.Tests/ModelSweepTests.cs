using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Cli.Slo;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Cli.Tests;

/// <summary>Measures nothing: the throughput of a configuration is a function of it; records what it was asked.</summary>
internal sealed class FakeMeasurer : IPointMeasurer
{
    private readonly Func<CacheConfig, double> _throughput;

    public FakeMeasurer(Func<CacheConfig, double> throughput) => _throughput = throughput;

    public List<(SloOperation Operation, CacheConfig Config)> Calls { get; } = new();

    /// <summary>Throws a <see cref="MeasurementException"/> instead of measuring the point after this many.</summary>
    public int? FailAfter { get; init; }

    public Task<ModelPoint> MeasureAsync(SloOperation operation, CacheConfig config, CancellationToken cancellationToken)
    {
        if (Calls.Count == FailAfter)
            throw new MeasurementException($"fake failure at {operation.ToString().ToLowerInvariant()} {config}");
        Calls.Add((operation, config));
        double ops = _throughput(config);
        // Little's law: b·q operations in flight.
        double meanUs = config.BatchSize * config.QueueDepth / ops * 1e6;
        return Task.FromResult(new ModelPoint(config.ClientThreads, config.ServerThreads, config.BatchSize, config.QueueDepth, meanUs, ops)
        {
            P50Us = meanUs,
            P99Us = 2 * meanUs,
        });
    }
}

internal sealed class RecordingObserver : ISweepObserver
{
    public List<(ModelPoint Point, bool Resumed)> Points { get; } = new();

    public List<SweepCut> Cuts { get; } = new();

    public void OnPoint(SloOperation operation, ModelPoint point, bool resumed) => Points.Add((point, resumed));

    public void OnCut(SweepCut cut) => Cuts.Add(cut);
}

public sealed class ModelSweepTests
{
    private static readonly IReadOnlyDictionary<CacheConfig, ModelPoint> s_none = new Dictionary<CacheConfig, ModelPoint>();

    private static async Task<(FakeMeasurer Measurer, RecordingObserver Observer)> Sweep(
        ConfigurationSpace space, Func<CacheConfig, double> throughput, IReadOnlyDictionary<CacheConfig, ModelPoint>? known = null)
    {
        var measurer = new FakeMeasurer(throughput);
        var observer = new RecordingObserver();
        await new ModelSweep(new ModelGrid(space), SweepRule.Default, measurer).RunAsync(SloOperation.Read, known ?? s_none, observer, CancellationToken.None);
        return (measurer, observer);
    }

    private static List<CacheConfig> Configs(FakeMeasurer m) => m.Calls.Select(c => c.Config).ToList();

    /// <summary>Grows by half or more with every parameter: no early termination.</summary>
    private static double AlwaysBetter(CacheConfig c) =>
        1000.0 * (c.ClientThreads + 1) * (c.ServerThreads + 1) * Math.Pow(1.5, Math.Log2(c.BatchSize)) * Math.Pow(1.5, Math.Log2(c.QueueDepth));

    [Fact]
    public void GridValuesAreZeroWhereAllowedThenPowersOfTwoAndTheMaximum()
    {
        Assert.Equal(new[] { 0, 1, 2 }, ModelGrid.Values(0, 2));
        Assert.Equal(new[] { 1, 2, 4, 8, 16, 32, 64 }, ModelGrid.Values(1, 64));
        Assert.Equal(new[] { 1, 2, 4, 6 }, ModelGrid.Values(1, 6));  // the maximum too: 5 and 6 are predicted
        Assert.Equal(new[] { 0 }, ModelGrid.Values(0, 0));
        Assert.Equal(new[] { 1, 2, 4, 8, 16, 32, 64, 128, 256 }, ModelGrid.Values(1, Math.Min(ConfigurationSpace.BatchLimit(8), 256)));
    }

    [Fact]
    public async Task WalksCheapestFirstBAndQBeforeCAndS()
    {
        var space = new ConfigurationSpace(MaxClientThreads: 1, MinServerThreads: 0, MaxServerThreads: 2, MaxBatch: 2, MaxQueueDepth: 2);
        var (measurer, observer) = await Sweep(space, AlwaysBetter);
        CacheConfig C(int c, int s, int b, int q) => new(c, s, b, q);
        var expected = new[]
        {
            // s = 0: one-sided, b = 1 only
            C(0, 0, 1, 1), C(0, 0, 1, 2),
            C(1, 0, 1, 1), C(1, 0, 1, 2),
            // s = 1
            C(0, 1, 1, 1), C(0, 1, 1, 2), C(0, 1, 2, 1), C(0, 1, 2, 2),
            C(1, 1, 1, 1), C(1, 1, 1, 2), C(1, 1, 2, 1), C(1, 1, 2, 2),
            // s = 2
            C(0, 2, 1, 1), C(0, 2, 1, 2), C(0, 2, 2, 1), C(0, 2, 2, 2),
            C(1, 2, 1, 1), C(1, 2, 1, 2), C(1, 2, 2, 1), C(1, 2, 2, 2),
        };
        Assert.Equal(expected, Configs(measurer));
        Assert.Equal(expected, new ModelGrid(space).All());
        Assert.Equal(expected.Length, new ModelGrid(space).Count);
        Assert.Empty(observer.Cuts);
        Assert.All(observer.Points, p => Assert.False(p.Resumed));
    }

    [Fact]
    public async Task WithoutAOneSidedPathThereIsNoZeroServerThreads()
    {
        var space = new ConfigurationSpace(MaxClientThreads: 0, MinServerThreads: 1, MaxServerThreads: 2, MaxBatch: 4, MaxQueueDepth: 1);
        var (measurer, _) = await Sweep(space, AlwaysBetter);
        Assert.Equal(new[] { new CacheConfig(0, 1, 1, 1), new(0, 1, 2, 1), new(0, 1, 4, 1), new(0, 2, 1, 1), new(0, 2, 2, 1), new(0, 2, 4, 1) },
                     Configs(measurer));
    }

    [Fact]
    public async Task QueueDepthStopsAfterTwoStepsWithoutGain()
    {
        var space = new ConfigurationSpace(0, 1, 1, 1, 64);
        var (measurer, observer) = await Sweep(space, c => 1000.0 * Math.Min(c.QueueDepth, 4));
        Assert.Equal(new[] { 1, 2, 4, 8, 16 }, Configs(measurer).Select(c => c.QueueDepth));
        var cut = Assert.Single(observer.Cuts);
        Assert.Equal("q", cut.Parameter);
        Assert.Equal("c=0 s=1 b=1", cut.Fixed);
        Assert.Equal(new[] { 8, 16 }, cut.Misses);
        Assert.Equal(new[] { 32, 64 }, cut.Skipped);
        Assert.Equal(2, cut.SkippedPoints);
        Assert.Contains("q stops at 16", cut.ToString());
    }

    [Fact]
    public async Task AGainUnderThreePercentIsAMiss()
    {
        // +2 % per step: q = 2 and q = 4 both miss.
        var space = new ConfigurationSpace(0, 1, 1, 1, 64);
        var (measurer, _) = await Sweep(space, c => 1000.0 * Math.Pow(1.02, Math.Log2(c.QueueDepth)));
        Assert.Equal(new[] { 1, 2, 4 }, Configs(measurer).Select(c => c.QueueDepth));
    }

    [Fact]
    public async Task OneNoisyStepDoesNotEndTheSweep()
    {
        var byQ = new Dictionary<int, double> { [1] = 100, [2] = 200, [4] = 150, [8] = 400, [16] = 405, [32] = 300, [64] = 1000 };
        var space = new ConfigurationSpace(0, 1, 1, 1, 64);
        var (measurer, observer) = await Sweep(space, c => byQ[c.QueueDepth]);
        // 4 misses, 8 gains over the best (200), 16 and 32 miss: 64 is not measured.
        Assert.Equal(new[] { 1, 2, 4, 8, 16, 32 }, Configs(measurer).Select(c => c.QueueDepth));
        Assert.Equal(new[] { 64 }, Assert.Single(observer.Cuts).Skipped);
    }

    [Fact]
    public async Task BatchSweepComparesTheBestOverQueueDepths()
    {
        // The best over q of b = 1, 2, 4, 8 is 200, 400, 400, 400: b stops at 8.
        var space = new ConfigurationSpace(0, 1, 1, 64, 2);
        var (measurer, observer) = await Sweep(space, c => Math.Min(c.BatchSize, 2) * 100.0 * c.QueueDepth);
        Assert.Equal(new[] { (1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2), (8, 1), (8, 2) },
                     Configs(measurer).Select(c => (c.BatchSize, c.QueueDepth)));
        var cut = Assert.Single(observer.Cuts);
        Assert.Equal("b", cut.Parameter);
        Assert.Equal("c=0 s=1", cut.Fixed);
        Assert.Equal(new[] { 16, 32, 64 }, cut.Skipped);
        Assert.Equal(6, cut.SkippedPoints);
    }

    [Fact]
    public async Task ClientAndServerThreadsStopAtTheirLevels()
    {
        // Better with c up to 1, flat past it, the same for every s: c stops at 4 under each s, s stops at 4.
        var space = new ConfigurationSpace(MaxClientThreads: 8, MinServerThreads: 1, MaxServerThreads: 8, MaxBatch: 1, MaxQueueDepth: 1);
        var (measurer, observer) = await Sweep(space, c => 100.0 * (1 + Math.Min(c.ClientThreads, 1)));
        var expected = new[] { 1, 2, 4 }.SelectMany(s => new[] { 0, 1, 2, 4 }.Select(c => (c, s))).ToArray();
        Assert.Equal(expected, Configs(measurer).Select(c => (c.ClientThreads, c.ServerThreads)));
        Assert.Equal(new[] { "c", "c", "c", "s" }, observer.Cuts.Select(c => c.Parameter));
        Assert.All(observer.Cuts.Take(3), c => Assert.Equal(new[] { 8 }, c.Skipped));
        var s = observer.Cuts[3];
        Assert.Equal("", s.Fixed);
        Assert.Equal(new[] { 8 }, s.Skipped);
        Assert.Equal(5, s.SkippedPoints);  // c = 0, 1, 2, 4, 8 under s = 8
    }

    [Fact]
    public async Task KnownPointsAreNotMeasuredAndTheSweepTakesTheSamePath()
    {
        var space = new ConfigurationSpace(MaxClientThreads: 2, MinServerThreads: 0, MaxServerThreads: 2, MaxBatch: 64, MaxQueueDepth: 64);
        static double Throughput(CacheConfig c) =>
            1e5 * (1 + c.ServerThreads) * Math.Min(c.BatchSize, 8) * Math.Min(c.QueueDepth, 2 + c.BatchSize % 3) / (1 + c.ClientThreads % 2);
        var (full, fullObserver) = await Sweep(space, Throughput);
        Assert.NotEmpty(fullObserver.Cuts);
        int first = full.Calls.Count / 2;
        var known = fullObserver.Points.Take(first).ToDictionary(p => p.Point.Config, p => p.Point);

        var (resumed, resumedObserver) = await Sweep(space, Throughput, known);
        Assert.Equal(Configs(full).Skip(first), Configs(resumed));
        Assert.Equal(fullObserver.Points.Select(p => p.Point), resumedObserver.Points.Select(p => p.Point));
        Assert.Equal(Enumerable.Repeat(true, first).Concat(Enumerable.Repeat(false, full.Calls.Count - first)),
                     resumedObserver.Points.Select(p => p.Resumed));
        Assert.Equal(fullObserver.Cuts, resumedObserver.Cuts, (a, b) => a.ToString() == b.ToString());
    }
}
