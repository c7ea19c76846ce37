using System.Collections.Generic;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Tests.Slo;

public sealed class SloPredictorTests
{
    private static PerformanceModel Grid(ConfigurationSpace space, List<ModelPoint> points) => new()
    {
        Transport = "test",
        Distance = "same-host",
        RecordSize = 8,
        Machine = new MachineDescription("test", 2, 1L << 30, "Linux"),
        Measured = new MeasurementInfo("2026-11-23", "by hand", "test", 1, 0),
        Space = space,
        Operations = new Dictionary<SloOperation, List<ModelPoint>> { [SloOperation.Read] = points },
    };

    [Fact]
    public void MeasuredPointsArePredictedAsMeasured()
    {
        var model = PerformanceModelTests.Small();
        var predictor = new SloPredictor(model, SloOperation.Read);
        foreach (var p in model.Points(SloOperation.Read))
        {
            Assert.True(predictor.TryPredict(p.Config, out var prediction));
            Assert.Equal(new Prediction(p.MeanUs, p.OpsPerSecond), prediction);
        }
    }

    [Fact]
    public void RedysExampleIsTheMeanOfItsNeighbours()
    {
        // f(1, 1, 1, 3) = the mean of f(1, 1, 1, 2) and f(1, 1, 1, 4) (Redy §5.2).
        var predictor = new SloPredictor(Grid(new ConfigurationSpace(1, 1, 1, 1, 4), new()
        {
            new(1, 1, 1, 2, 10, 1000), new(1, 1, 1, 4, 20, 3000),
        }), SloOperation.Read);
        Assert.True(predictor.TryPredict(new CacheConfig(1, 1, 1, 3), out var p));
        Assert.Equal(new Prediction(15, 2000), p);
        Assert.False(predictor.TryPredict(new CacheConfig(1, 1, 1, 1), out _));  // q = 1 was not measured
        Assert.False(predictor.TryPredict(new CacheConfig(0, 1, 1, 2), out _));  // nor c = 0
    }

    [Fact]
    public void InterpolationIsMultilinearInTheParametersValues()
    {
        // c in [4, 8] and b in [8, 16]: f = 1 + c + 10·b at the corners, which is linear, so exact in between.
        var points = new List<ModelPoint>();
        foreach (int c in new[] { 4, 8 })
        {
            foreach (int b in new[] { 8, 16 })
                points.Add(new ModelPoint(c, 2, b, 1, 1 + c + 10 * b, 1000 * c * b));
        }
        var predictor = new SloPredictor(Grid(new ConfigurationSpace(8, 1, 2, 16, 1), points), SloOperation.Read);
        Assert.True(predictor.TryPredict(new CacheConfig(5, 2, 12, 1), out var p));
        Assert.Equal(1 + 5 + 10 * 12, p.MeanUs, 12);
        // The throughput c·b is bilinear: at (5, 12) the interpolation of 1000·c·b from the corners is exactly 60 000.
        Assert.Equal(60_000, p.OpsPerSecond, 9);
        Assert.True(predictor.TryPredict(new CacheConfig(6, 2, 8, 1), out p));  // b on the grid: linear in c only
        Assert.Equal(1 + 6 + 80, p.MeanUs, 12);
    }

    [Fact]
    public void HolesTopsAndOutsideAreNotPredicted()
    {
        var points = new List<ModelPoint>();
        foreach (int b in new[] { 1, 2, 4, 8 })
            points.Add(new ModelPoint(0, 1, b, 1, b, 100 * b));
        points.RemoveAll(p => p.B == 4);  // a hole (early termination)
        var predictor = new SloPredictor(Grid(new ConfigurationSpace(0, 0, 1, 12, 1), points), SloOperation.Read);
        Assert.True(predictor.TryPredict(new CacheConfig(0, 1, 2, 1), out _));
        Assert.False(predictor.TryPredict(new CacheConfig(0, 1, 3, 1), out _));   // needs b = 4
        Assert.False(predictor.TryPredict(new CacheConfig(0, 1, 4, 1), out _));
        Assert.False(predictor.TryPredict(new CacheConfig(0, 1, 6, 1), out _));   // needs b = 4 too
        Assert.True(predictor.TryPredict(new CacheConfig(0, 1, 8, 1), out _));
        Assert.False(predictor.TryPredict(new CacheConfig(0, 1, 9, 1), out _));   // above 8, the largest grid value ≤ 12
        Assert.False(predictor.TryPredict(new CacheConfig(0, 1, 13, 1), out _));  // outside the space
        Assert.False(predictor.TryPredict(new CacheConfig(0, 0, 2, 1), out _));   // s = 0 is not batched
        Assert.False(predictor.TryPredict(new CacheConfig(0, 0, 1, 1), out _));   // s = 0 was not measured
    }
}
