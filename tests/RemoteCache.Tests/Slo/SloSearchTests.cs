using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using RemoteCache.Slo;
using Xunit;
using Xunit.Abstractions;

namespace RemoteCache.Tests.Slo;

public sealed class SloSearchTests
{
    /// <summary>Random SLOs per model kind (6 kinds: 12 000 in all), each searched in Redy's order and in a random price order.</summary>
    public const int SlosPerModel = 2000;

    private readonly ITestOutputHelper _output;

    public SloSearchTests(ITestOutputHelper output) => _output = output;

    public static IEnumerable<object[]> Kinds => SloTestModels.Kinds.Select(k => new object[] { k });

    /// <summary>
    /// The production search against the exhaustive scan, on monotone and non-monotone models: it finds a configuration
    /// exactly when the scan does, the same one (so never a dearer one), in both cost orders; what it returns meets the
    /// SLO under the model; its alternatives are the scan's. Fig. 10's walk is counted against it.
    /// </summary>
    [Theory]
    [MemberData(nameof(Kinds))]
    public void SearchIsExactOnRandomSlos(string kind)
    {
        var model = SloTestModels.Create(kind, seed: Array.IndexOf(SloTestModels.Kinds, kind) + 1);
        var predictor = new SloPredictor(model, SloOperation.Read);
        var search = new SloSearch(predictor);
        var predicted = SloReferenceSearch.Configurations(model.Space)
            .Select(c => predictor.TryPredict(c, out var p) ? new SloCandidate(c, p) : (SloCandidate?)null)
            .Where(c => c is not null).Select(c => c!.Value).ToList();
        Assert.Equal(predicted.Count, search.ConfigurationCount);
        var random = new Random(42);
        double[] prices = { 0, 0.5, 1, 2, 3.25 };
        int met = 0, figure10Same = 0, figure10Missed = 0, figure10Dearer = 0;
        var watch = Stopwatch.StartNew();
        for (int i = 0; i < SlosPerModel; i++)
        {
            var slo = RandomSlo(random, predicted, model.RecordSize);
            var priced = new SloCost(prices[random.Next(prices.Length)], prices[random.Next(prices.Length)]);
            foreach (var cost in new[] { SloCost.Redy, priced })
            {
                var result = search.Search(slo, cost);
                var exhaustive = SloReferenceSearch.Exhaustive(predictor, slo, cost);
                Assert.Equal(exhaustive.Found, result.Found);
                Assert.Equal(exhaustive.Cheapest, result.Cheapest);
                Assert.Equal(exhaustive.LowestLatencyReachingThroughput, result.LowestLatencyReachingThroughput);
                Assert.Equal(exhaustive.HighestThroughputWithinLatency, result.HighestThroughputWithinLatency);
                if (result.Cheapest is { } found)
                {
                    Assert.True(slo.IsMetBy(found.Predicted), $"{found} does not meet {slo}");
                    Assert.True(predictor.TryPredict(found.Config, out var again));
                    Assert.Equal(again, found.Predicted);
                }
                else
                {
                    Assert.True(result.HighestThroughputWithinLatency is not { } h || h.Predicted.OpsPerSecond < slo.MinOpsPerSecond);
                }
            }

            var exact = search.Search(slo);
            var walk = SloReferenceSearch.Figure10(predictor, slo);
            if (walk is { } w)
            {
                Assert.True(slo.IsMetBy(w.Predicted));
                Assert.True(exact.Found);
                Assert.True(SloCost.Redy.Compare(w.Config, exact.Cheapest!.Value.Config) >= 0, "Fig. 10 cannot beat the exact search");
            }
            if (exact.Found)
            {
                met++;
                if (walk is null)
                    figure10Missed++;
                else if (walk.Value == exact.Cheapest)
                    figure10Same++;
                else
                    figure10Dearer++;
            }
        }
        _output.WriteLine($"{kind}: {model.Points(SloOperation.Read).Count} points, {search.ConfigurationCount} configurations predicted; " +
            $"{SlosPerModel} SLOs, {met} met; Fig. 10: same {figure10Same}, missed {figure10Missed}, dearer {figure10Dearer}; {watch.Elapsed.TotalSeconds:F1} s");
        Assert.True(met > SlosPerModel / 10 && met < SlosPerModel * 9 / 10, $"the SLOs should be mixed: {met} met");
        if (kind == "monotone")
            Assert.Equal(met, figure10Same);  // Fig. 10's pruning is safe when latency never falls
        if (kind == "latency-falls-with-b")
            Assert.True(figure10Missed + figure10Dearer > 0, "Fig. 10 should miss some on this model");
    }

    /// <summary>
    /// SLOs of three kinds: Redy's (uniform between the lowest and highest latency and throughput, widened by 20 %),
    /// the same log-uniform, and on the boundary (exactly a configuration's latency and throughput, or one ulp short).
    /// </summary>
    private static ServiceLevelObjective RandomSlo(Random random, List<SloCandidate> predicted, int recordSize)
    {
        double minLat = predicted.Min(p => p.Predicted.MeanUs), maxLat = predicted.Max(p => p.Predicted.MeanUs);
        double minTp = predicted.Min(p => p.Predicted.OpsPerSecond), maxTp = predicted.Max(p => p.Predicted.OpsPerSecond);
        double u = random.NextDouble();
        double lat, tp;
        if (u < 0.4)
        {
            lat = 0.8 * minLat + random.NextDouble() * (1.2 * maxLat - 0.8 * minLat);
            tp = 0.8 * minTp + random.NextDouble() * (1.2 * maxTp - 0.8 * minTp);
        }
        else if (u < 0.8)
        {
            lat = Math.Exp(Math.Log(0.8 * minLat) + random.NextDouble() * Math.Log(1.5 * maxLat / minLat));
            tp = Math.Exp(Math.Log(0.8 * minTp) + random.NextDouble() * Math.Log(1.5 * maxTp / minTp));
        }
        else
        {
            var p = predicted[random.Next(predicted.Count)].Predicted;
            lat = p.MeanUs;
            tp = p.OpsPerSecond;
            double v = random.NextDouble();
            if (v < 0.25)
                lat = Math.BitDecrement(lat);
            else if (v < 0.5)
                tp = Math.BitIncrement(tp);
        }
        return new ServiceLevelObjective(SloOperation.Read, lat, tp, recordSize);
    }

    /// <summary>
    /// Where Fig. 10 misses: batching lowers the latency (b = 4 is faster than b = 2), so the walk prunes b ≥ 3 as soon
    /// as b = 2 exceeds the bound, and never sees b = 4, which meets the SLO.
    /// </summary>
    [Fact]
    public void Figure10MissesWhenLatencyFallsAsTheBatchGrows()
    {
        var model = new PerformanceModel
        {
            Transport = "test",
            Distance = "same-host",
            RecordSize = 8,
            Machine = new MachineDescription("test", 2, 1L << 30, "Linux"),
            Measured = new MeasurementInfo("2026-11-23", "by hand", "test", 1, 0),
            Space = new ConfigurationSpace(1, 1, 1, 4, 1),
            Operations = new Dictionary<SloOperation, List<ModelPoint>>
            {
                [SloOperation.Read] = new()
                {
                    new(0, 1, 1, 1, 5, 1e5), new(0, 1, 2, 1, 12, 2e5), new(0, 1, 4, 1, 8, 5e5),
                    new(1, 1, 1, 1, 6, 1.5e5), new(1, 1, 2, 1, 13, 3e5), new(1, 1, 4, 1, 9, 8e5),
                },
            },
        };
        var predictor = new SloPredictor(model, SloOperation.Read);
        var slo = new ServiceLevelObjective(SloOperation.Read, 10, 4e5, 8);

        Assert.Null(SloReferenceSearch.Figure10(predictor, slo, out long leaves));
        Assert.Equal(4, leaves);  // (0,1,1,1) continue, (0,1,2,1) invalid: prune; (1,1,1,1) continue, (1,1,2,1) invalid: prune

        var found = new SloSearch(predictor).Search(slo);
        Assert.True(found.Found);
        Assert.Equal(new CacheConfig(0, 1, 4, 1), found.Cheapest!.Value.Config);
        Assert.Equal(new Prediction(8, 5e5), found.Cheapest.Value.Predicted);
        Assert.Equal(found.Cheapest, SloReferenceSearch.Exhaustive(predictor, slo).Cheapest);
        // b = 3 (between 2 and 4): 10 µs, 3.5e5 ops/s, within the latency but short of the throughput.
        Assert.True(predictor.TryPredict(new CacheConfig(0, 1, 3, 1), out var b3));
        Assert.Equal(new Prediction(10, 3.5e5), b3);
    }

    [Fact]
    public void WhenNoneMeetsItTheNearestAlternativesAreGiven()
    {
        var predictor = new SloPredictor(PerformanceModelTests.Small(), SloOperation.Read);
        var search = new SloSearch(predictor);
        // Points: (0,0,1,1) 0.5 µs 2e6; (0,1,1,1) 3 µs 3e5; (0,1,2,1) 3.5 µs 5e5. Nothing exceeds 2e6 ops/s.
        var result = search.Search(new ServiceLevelObjective(SloOperation.Read, 0.4, 3e6, 8));
        Assert.False(result.Found);
        Assert.Null(result.LowestLatencyReachingThroughput);   // nothing reaches 3e6
        Assert.Null(result.HighestThroughputWithinLatency);    // nothing within 0.4 µs

        result = search.Search(new ServiceLevelObjective(SloOperation.Read, 0.4, 4e5, 8));
        Assert.False(result.Found);
        Assert.Equal(new CacheConfig(0, 0, 1, 1), result.LowestLatencyReachingThroughput!.Value.Config);
        Assert.Null(result.HighestThroughputWithinLatency);

        result = search.Search(new ServiceLevelObjective(SloOperation.Read, 3.2, 2.5e6, 8));
        Assert.False(result.Found);
        Assert.Null(result.LowestLatencyReachingThroughput);
        Assert.Equal(new CacheConfig(0, 0, 1, 1), result.HighestThroughputWithinLatency!.Value.Config);

        // Met: s = 0 is cheapest in Redy's order; with server threads free and client threads priced, still c = 0.
        result = search.Search(new ServiceLevelObjective(SloOperation.Read, 1, 1e6, 8));
        Assert.Equal(new CacheConfig(0, 0, 1, 1), result.Cheapest!.Value.Config);
    }

    [Fact]
    public void PricesChooseBetweenServerAndClientThreads()
    {
        // Two ways to 1e6 ops/s within 10 µs: one server thread and 4 client threads, or 4 server threads and none.
        var points = new List<ModelPoint>();
        foreach (int s in new[] { 1, 2, 4 })
        {
            foreach (int c in new[] { 0, 1, 2, 4 })
            {
                bool fast = (s == 1 && c == 4) || (s == 4 && c == 0);
                points.Add(new ModelPoint(c, s, 1, 1, 5, fast ? 1e6 : 1e5));
            }
        }
        var model = SloTestModels.Reads(new ConfigurationSpace(4, 1, 4, 1, 1), points);
        var search = new SloSearch(model, SloOperation.Read);
        var slo = new ServiceLevelObjective(SloOperation.Read, 10, 1e6, 8);
        Assert.Equal(new CacheConfig(4, 1, 1, 1), search.Search(slo).Cheapest!.Value.Config);
        Assert.Equal(new CacheConfig(4, 1, 1, 1), search.Search(slo, new SloCost(10, 1)).Cheapest!.Value.Config);   // 14 < 40
        Assert.Equal(new CacheConfig(0, 4, 1, 1), search.Search(slo, new SloCost(1, 10)).Cheapest!.Value.Config);   // 4 < 41
        Assert.Equal(new CacheConfig(4, 1, 1, 1), search.Search(slo, new SloCost(1, 0.75)).Cheapest!.Value.Config); // 4 = 4: Redy's order
    }

    [Fact]
    public void TheSearchRefusesAnSloOfAnotherOperationOrRecordSize()
    {
        var search = new SloSearch(PerformanceModelTests.Small(), SloOperation.Read);
        var e = Assert.Throws<ArgumentException>(() => search.Search(new ServiceLevelObjective(SloOperation.Write, 1, 1, 8)));
        Assert.Contains("writes", e.Message);
        Assert.Contains("reads", e.Message);
        e = Assert.Throws<ArgumentException>(() => search.Search(new ServiceLevelObjective(SloOperation.Read, 1, 1, 64)));
        Assert.Contains("64 B", e.Message);
        Assert.Contains("8 B", e.Message);
        e = Assert.Throws<ArgumentException>(() => new SloPredictor(PerformanceModelTests.Small(), SloOperation.Write));
        Assert.Contains("no measured points for writes", e.Message);
    }

    [Theory]
    [InlineData(0, 1, 8, "maxMeanLatencyUs")]
    [InlineData(-1, 1, 8, "maxMeanLatencyUs")]
    [InlineData(double.NaN, 1, 8, "maxMeanLatencyUs")]
    [InlineData(1, -1, 8, "minOpsPerSecond")]
    [InlineData(1, double.NaN, 8, "minOpsPerSecond")]
    [InlineData(1, double.PositiveInfinity, 8, "minOpsPerSecond")]
    [InlineData(1, 1, 0, "recordSize")]
    public void AnSloIsChecked(double latency, double throughput, int recordSize, string parameter)
    {
        var e = Assert.ThrowsAny<ArgumentException>(() => new ServiceLevelObjective(SloOperation.Read, latency, throughput, recordSize));
        Assert.Equal(parameter, e.ParamName);
        Assert.Equal("operation", Assert.ThrowsAny<ArgumentException>(() => new ServiceLevelObjective((SloOperation)7, 1, 1, 8)).ParamName);
        // No bound: infinite latency, zero throughput.
        var any = new ServiceLevelObjective(SloOperation.Read, double.PositiveInfinity, 0, 8);
        Assert.True(any.IsMetBy(new Prediction(1e9, 1)));
        Assert.True(new ServiceLevelObjective(SloOperation.Read, 5, 100, 8).IsMetBy(new Prediction(5, 100)));  // bounds are inclusive
    }

    [Fact]
    public void CostsAreCheckedAndTotallyOrdered()
    {
        Assert.Equal("serverThreadPrice", Assert.ThrowsAny<ArgumentException>(() => new SloCost(-1, 1)).ParamName);
        Assert.Equal("clientThreadPrice", Assert.ThrowsAny<ArgumentException>(() => new SloCost(1, double.NaN)).ParamName);
        Assert.Equal("clientThreadPrice", Assert.ThrowsAny<ArgumentException>(() => new SloCost(1, double.PositiveInfinity)).ParamName);
        var redy = SloCost.Redy;
        Assert.True(redy.Compare(new CacheConfig(30, 1, 512, 16), new CacheConfig(0, 2, 1, 1)) < 0);  // fewer s first
        Assert.True(redy.Compare(new CacheConfig(1, 2, 512, 16), new CacheConfig(2, 2, 1, 1)) < 0);   // then fewer c
        Assert.True(redy.Compare(new CacheConfig(2, 2, 4, 16), new CacheConfig(2, 2, 8, 1)) < 0);     // then smaller b
        Assert.True(redy.Compare(new CacheConfig(2, 2, 8, 1), new CacheConfig(2, 2, 8, 2)) < 0);      // then smaller q
        var priced = new SloCost(3, 1);
        Assert.True(priced.Compare(new CacheConfig(2, 1, 8, 8), new CacheConfig(0, 2, 1, 1)) < 0);  // 5 < 6
        Assert.True(priced.Compare(new CacheConfig(3, 1, 8, 8), new CacheConfig(0, 2, 1, 1)) < 0);  // 6 = 6: fewer s
        Assert.Equal(6, priced.Price(new CacheConfig(0, 2, 1, 1)));
    }
}
