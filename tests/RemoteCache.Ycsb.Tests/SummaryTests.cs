using System.Linq;
using RemoteCache;
using RemoteCache.Benchmarks.Ycsb;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

public sealed class SummaryTests
{
    private static RunResult Row(string device, int round, double opsPerSecond, int threads = 2) =>
        new(device, "readonly", "uniform", threads, 8, 1000, (long)opsPerSecond, 1, 1, 1, 2, 0, "") { Round = round };

    [Fact]
    public void MedianRowIsTheMiddleRoundOfEachGroup()
    {
        var rows = new[] { Row("memory", 1, 300), Row("memory", 2, 100), Row("memory", 3, 200), Row("memory", 1, 50, threads: 1) };
        var medians = Summary.Medians(rows);
        Assert.Equal(2, medians.Count);
        Assert.Equal(3, medians.Single(r => r.Threads == 2).Round);
        Assert.Equal(50, medians.Single(r => r.Threads == 1).OpsPerSecond);
    }

    [Fact]
    public void RatiosPairPhasesOfTheSameRoundAndReportTheirMedian()
    {
        // Round 2 was a slow stretch for both devices: its ratio is as good as the others'.
        var rows = new[]
        {
            Row("memory", 1, 1000), Row("remotecache", 1, 300),
            Row("memory", 2, 500), Row("remotecache", 2, 160),
            Row("memory", 3, 1000), Row("remotecache", 3, 280),
            Row("ssd", 1, 30),  // only round 1 for this one
        };
        var ratios = Summary.Ratios(rows, "remotecache", new[] { "memory", "ssd", "smb" });
        var memory = ratios.Single(r => r.Other == "memory");
        Assert.Equal(new[] { 0.3, 0.32, 0.28 }, memory.PerRound.Select(v => System.Math.Round(v, 2)));
        Assert.Equal(0.3, memory.Median, 6);
        Assert.Equal(10.0, ratios.Single(r => r.Other == "ssd").Median, 6);
        Assert.DoesNotContain(ratios, r => r.Other == "smb");
    }

    [Fact]
    public void RatiosCarryTheirSpreadAndSayWhenRoundsDisagree()
    {
        var rows = new[]
        {
            Row("memory", 1, 1000), Row("remotecache", 1, 700),
            Row("memory", 2, 1000), Row("remotecache", 2, 400),
            Row("memory", 3, 1000), Row("remotecache", 3, 600),
            Row("ssd", 1, 50), Row("ssd", 2, 30), Row("ssd", 3, 40),
        };
        var ratios = Summary.Ratios(rows, "remotecache", new[] { "memory", "ssd" });
        var memory = ratios.Single(r => r.Other == "memory");
        Assert.Equal(0.4, memory.Min, 6);
        Assert.Equal(0.7, memory.Max, 6);
        Assert.Equal(1.75, memory.Spread, 6);
        Assert.True(memory.Disagree);  // 0.7 / 0.4 > 1.5
        var ssd = ratios.Single(r => r.Other == "ssd");
        Assert.Equal(15.0 / (400.0 / 30), ssd.Spread, 6);
        Assert.False(ssd.Disagree);
    }

    [Fact]
    public void MedianOfAnEvenCountIsAMeasuredValue()
    {
        Assert.Equal(2.0, Summary.Median(new[] { 4.0, 1.0, 2.0, 3.0 }));
    }
}

public sealed class CacheRegionsTests
{
    [Theory]
    [InlineData(84L << 20)]             // the 8 B main job: 1 MiB regions
    [InlineData(33L * (32L << 20))]     // 1 KiB values, 250,000 records: more than 250 MiB
    [InlineData(5L << 30)]
    public void CacheFitsTheServersRegionLimitAndHoldsWholeSegments(long bytes)
    {
        var (regionSize, regions) = Program.CacheRegions(bytes);
        Assert.InRange(regions, 1, RemoteCacheOptions.MaxRegionsPerServer);
        Assert.True(regionSize * regions >= bytes);
        Assert.Equal(0, regionSize & (regionSize - 1));  // a power of two: divides or is a multiple of any segment
        Assert.True(regionSize >= 1L << 20);
    }
}
