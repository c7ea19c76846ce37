using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
#if NET10_0_OR_GREATER
using RemoteCache.Benchmarks.SloCharts;
#endif
using RemoteCache.Cli.Slo;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Cli.Tests;

public sealed class SloAccuracyTests
{
    // Reads over a small space: latency grows with b and q, throughput with b·q.
    private static PerformanceModel Model(string transport = "shm")
    {
        var points = new List<ModelPoint>();
        foreach (int s in new[] { 0, 1, 2 })
            foreach (int c in new[] { 0, 1 })
                foreach (int b in s == 0 ? new[] { 1 } : new[] { 1, 2, 4, 8 })
                    foreach (int q in new[] { 1, 2, 4, 8 })
                        points.Add(new ModelPoint(c, s, b, q, 1 + 0.5 * s + 0.3 * b * q, 1e5 * b * q * (1 + s)));
        return new PerformanceModel
        {
            Transport = transport,
            Distance = "same-host",
            RecordSize = 8,
            Machine = new MachineDescription("test", 2, 1L << 30, "Linux"),
            Measured = new MeasurementInfo("2026-11-23", "synthetic", "test", 1, 0),
            Space = new ConfigurationSpace(1, 0, 2, 8, 8),
            Operations = new Dictionary<SloOperation, List<ModelPoint>> { [SloOperation.Read] = points },
        };
    }

    // Reality: the prediction times a factor per configuration.
    private sealed class FakeMeasurer(SloPredictor truth, Func<CacheConfig, double> latencyFactor) : IPointMeasurer
    {
        public int Runs;

        public Task<ModelPoint> MeasureAsync(SloOperation operation, CacheConfig config, CancellationToken cancellationToken)
        {
            Runs++;
            Assert.True(truth.TryPredict(config, out var p));
            return Task.FromResult(new ModelPoint(config.ClientThreads, config.ServerThreads, config.BatchSize, config.QueueDepth,
                                                  p.MeanUs * latencyFactor(config), p.OpsPerSecond));
        }
    }

    [Fact]
    public async Task AnExactModelMeetsEveryFeasibleSloAndAWrongOneIsCaught()
    {
        var model = Model();
        var search = new SloSearch(model, SloOperation.Read);
        var slos = SloAccuracy.DrawSlos(model, SloOperation.Read, 200, seed: 3);
        var points = model.Points(SloOperation.Read);
        Assert.All(slos, s => Assert.InRange(s.MaxMeanLatencyUs, points.Min(p => p.MeanUs), points.Max(p => p.MeanUs)));
        Assert.All(slos, s => Assert.InRange(s.MinOpsPerSecond, points.Min(p => p.OpsPerSecond), points.Max(p => p.OpsPerSecond)));

        var exact = new FakeMeasurer(search.Predictor, _ => 1);
        var once = new RepeatedMeasurer(exact, 1);
        var rows = await SloAccuracy.RunAsync(search, slos, once, 0.1, null, CancellationToken.None);
        var summary = SloAccuracy.Summarize(rows, 0.1, once);
        Assert.Null(summary.LatencyNoise);
        Assert.True(summary.Feasible > 40, $"{summary.Feasible} feasible");
        Assert.Equal(summary.Feasible, summary.Met);
        Assert.Equal(0, summary.LatencyErrorMedian, 9);
        Assert.True(exact.Runs <= summary.Feasible);  // a configuration chosen twice is measured once

        // Really 30 % slower wherever b·q > 4: those SLOs are missed and the errors show it.
        var slow = new RepeatedMeasurer(new FakeMeasurer(search.Predictor, c => c.BatchSize * c.QueueDepth > 4 ? 1.3 : 1), 3);
        rows = await SloAccuracy.RunAsync(search, slos, slow, 0.1, null, CancellationToken.None);
        summary = SloAccuracy.Summarize(rows, 0.1, slow);
        Assert.Equal(0, summary.LatencyNoise!.Value, 9);  // the fake repeats itself exactly
        Assert.InRange(summary.Met, 1, summary.Feasible - 1);
        Assert.All(rows.Where(r => r.Config is { } c && c.BatchSize * c.QueueDepth > 4 && r.Predicted!.Value.MeanUs > r.Objective.MaxMeanLatencyUs / 1.3 * 1.1),
                   r => Assert.False(r.Met));
        Assert.InRange(summary.LatencyErrorP95, 0.2, 0.24);  // |1 − 1.3| / 1.3

#if NET10_0_OR_GREATER
        // benchmarks/SloCharts is a program of the newest framework only (Directory.Build.props).
        string dir = Directory.CreateTempSubdirectory("accuracy-").FullName;
        try
        {
            // accuracy.json as the command writes it, read back and drawn by benchmarks/SloCharts.
            File.WriteAllText(Path.Combine(dir, "accuracy.json"),
                              SloAccuracyCommand.Json("test-model.json", model, SloOperation.Read, summary, rows.ToList(), slow, DateTime.UtcNow));
            var (title, drawn) = AccuracyCharts.Read(Path.Combine(dir, "accuracy.json"));
            Assert.Equal(summary.Feasible, drawn.RealUs.Length);
            Assert.Contains($"{summary.Feasible} feasible SLOs", title, StringComparison.Ordinal);
            var charts = AccuracyCharts.Write(dir, drawn, title);
            foreach (var chart in charts)
            {
                var bytes = File.ReadAllBytes(chart);
                Assert.Equal(new byte[] { 0x89, 0x50, 0x4E, 0x47 }, bytes[..4]);
                Assert.True(bytes.Length > 5000, $"{chart}: {bytes.Length} bytes");
            }
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
#endif
    }

    // Reality as the model says, but in phases: each two runs in a row share a speed of 1, 1/1.6 or 1/0.7 of the model's.
    private sealed class PhasedMeasurer(SloPredictor truth) : IPointMeasurer
    {
        private static readonly double[] s_slowdown = { 1, 1.6, 0.7 };
        private int _runs;

        public Task<ModelPoint> MeasureAsync(SloOperation operation, CacheConfig config, CancellationToken cancellationToken)
        {
            double f = s_slowdown[_runs++ / 2 % s_slowdown.Length];
            Assert.True(truth.TryPredict(config, out var p));
            return Task.FromResult(new ModelPoint(config.ClientThreads, config.ServerThreads, config.BatchSize, config.QueueDepth,
                                                  p.MeanUs * f, p.OpsPerSecond / f));
        }
    }

    [Fact]
    public async Task ASamePhaseReferenceTakesTheMachinesSpeedOutOfTheJudgement()
    {
        var model = Model();
        var search = new SloSearch(model, SloOperation.Read);
        var slos = SloAccuracy.DrawSlos(model, SloOperation.Read, 200, seed: 3);

        var absolute = new RepeatedMeasurer(new PhasedMeasurer(search.Predictor), 1);
        var summary = SloAccuracy.Summarize(await SloAccuracy.RunAsync(search, slos, absolute, 0.1, null, CancellationToken.None), 0.1, absolute);
        Assert.True(summary.Met < summary.Feasible * 0.9, $"{summary.Met} of {summary.Feasible} met although two phases in three are off by 30-60 %");
        Assert.Empty(absolute.Phases);

        var samePhase = new RepeatedMeasurer(new PhasedMeasurer(search.Predictor), 1, model);
        var rows = await SloAccuracy.RunAsync(search, slos, samePhase, 0.1, null, CancellationToken.None);
        summary = SloAccuracy.Summarize(rows, 0.1, samePhase);
        Assert.Equal(summary.Feasible, summary.Met);
        Assert.Equal(0, summary.LatencyErrorMedian, 9);
        Assert.Equal(0, summary.ThroughputErrorP95, 9);
        Assert.Contains(samePhase.Phases.Values, p => p.LatencyDrift > 1.5);  // the slow phase was seen, and taken out
        foreach (var (config, phase) in samePhase.Phases)
        {
            Assert.NotEqual(config, phase.Reference);
            Assert.True(search.Predictor.TryPredict(config, out var predicted));
            Assert.Equal(phase.LatencyDrift, phase.Raw.MeanUs / predicted.MeanUs, 9);
        }
    }

    [Fact]
    public void TheReferenceIsTheNearestOtherMeasuredPointWithTheSameServerThreads()
    {
        var points = Model().Points(SloOperation.Read);
        Assert.Equal(new CacheConfig(0, 1, 2, 4), RepeatedMeasurer.ReferenceFor(points, new CacheConfig(0, 1, 2, 3)).Config);  // interpolated: its nearer grid neighbour
        Assert.Equal(new CacheConfig(0, 1, 1, 2), RepeatedMeasurer.ReferenceFor(points, new CacheConfig(0, 1, 2, 2)).Config);  // measured: the nearest other
        Assert.Equal(0, RepeatedMeasurer.ReferenceFor(points, new CacheConfig(1, 0, 1, 1)).S);
    }

    [Fact]
    public void QuantilesAreNearestRank()
    {
        var values = Enumerable.Range(1, 100).Select(i => (double)i).ToList();
        Assert.Equal(50, SloAccuracy.Quantile(values, 0.5));
        Assert.Equal(95, SloAccuracy.Quantile(values, 0.95));
        Assert.True(double.IsNaN(SloAccuracy.Quantile(Array.Empty<double>(), 0.5)));
    }

    // Runs that disagree: latency 10, 14, 11, 30, 9 µs and throughput 100, 90, 95, 40, 110 ops/s.
    private sealed class NoisyMeasurer : IPointMeasurer
    {
        private static readonly (double Us, double Ops)[] s_runs = { (10, 100), (14, 90), (11, 95), (30, 40), (9, 110) };
        private int _next;

        public Task<ModelPoint> MeasureAsync(SloOperation operation, CacheConfig config, CancellationToken cancellationToken)
        {
            var (us, ops) = s_runs[_next++ % s_runs.Length];
            return Task.FromResult(new ModelPoint(config.ClientThreads, config.ServerThreads, config.BatchSize, config.QueueDepth, us, ops));
        }
    }

    [Fact]
    public async Task RepeatsKeepTheMedianOfEachMetricAndTheirSpread()
    {
        var measurer = new RepeatedMeasurer(new NoisyMeasurer(), 5);
        var config = new CacheConfig(0, 1, 4, 2);
        var point = await measurer.MeasureAsync(SloOperation.Read, config, CancellationToken.None);
        Assert.Equal(config, point.Config);
        Assert.Equal(11, point.MeanUs);            // one slow run of 30 µs does not move it
        Assert.Equal(95, point.OpsPerSecond);
        // |run − median| / median: latency 1/11, 3/11, 0, 19/11, 2/11 → median 2/11; throughput 5/95, 5/95, 0, 55/95, 15/95 → 5/95.
        Assert.Equal(2.0 / 11, measurer.Spreads[config].Latency, 9);
        Assert.Equal(5.0 / 95, measurer.Spreads[config].Throughput, 9);
        Assert.Equal(2.5, RepeatedMeasurer.Median(new double[] { 4, 1, 3, 2 }));
        Assert.Throws<ArgumentOutOfRangeException>(() => new RepeatedMeasurer(new NoisyMeasurer(), 0));
    }

    [Theory]
    [InlineData("verbs", "", "is a verbs model: a verbs model needs --verbs-address")]
    [InlineData("shm", "--verbs-address 10.0.2.15", "is a shm model: --verbs-address is only for a verbs model")]
    [InlineData("verbs", "--verbs-address rxe0", "--verbs-address rxe0 is not an IPv4 address")]
    public void AVerbsModelIsMeasuredThroughTheAddressOfAnRdmaDevice(string transport, string flags, string message)
    {
        string dir = Directory.CreateTempSubdirectory("rc-slo-accuracy-").FullName;
        try
        {
            string file = Path.Combine(dir, "m.json");
            string bench = Path.Combine(dir, "bench");
            File.WriteAllText(bench, "");
            Model(transport).Save(file);
            var (exit, _, error) = ModelCommandTests.Run(Program.BuildRoot(), new[] { "slo", "accuracy", "--model", file, "--bench", bench, "--out", dir }
                                                                              .Concat(flags.Split(' ', StringSplitOptions.RemoveEmptyEntries)).ToArray());
            Assert.NotEqual(0, exit);
            Assert.Contains(message, error);
            Assert.False(File.Exists(Path.Combine(dir, "accuracy.json")));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }
}
