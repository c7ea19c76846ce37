using System;
using System.Collections.Generic;
using System.Linq;
using RemoteCache.Benchmarks.Ycsb;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

public sealed class GeneratorTests
{
    private const int Items = 10_000;
    private const int Draws = 2_000_000;

    private static long[] Counts(IKeyChooser chooser, int items, int draws = Draws, int seed = 42)
    {
        var rng = new Random(seed);
        var counts = new long[items];
        for (int i = 0; i < draws; i++)
        {
            long k = chooser.Next(rng);
            Assert.InRange(k, 0, items - 1);
            counts[k]++;
        }
        return counts;
    }

    [Theory]
    [InlineData(0.99)]
    [InlineData(0.8)]
    [InlineData(0.5)]
    public void ZipfianTopKeysFollowTheFormula(double theta)
    {
        var zipf = new ZipfianChooser(Items, theta);
        var counts = Counts(zipf, Items);
        // Ranks 0 and 1 are exact in Gray's method; later ranks come from a continuous approximation, so they are
        // compared in bands (ranks 2-9, 10-99, 100-999) where the approximation's error averages out.
        for (int rank = 0; rank < 2; rank++)
        {
            double expected = zipf.Probability(rank) * Draws;
            Assert.InRange(counts[rank], expected * 0.97, expected * 1.03);
        }
        foreach (var (from, to) in new[] { (2, 10), (10, 100), (100, 1000) })
        {
            double expected = Enumerable.Range(from, to - from).Sum(r => zipf.Probability(r)) * Draws;
            double actual = counts.Skip(from).Take(to - from).Sum();
            Assert.InRange(actual, expected * 0.85, expected * 1.15);
        }
        // And the ordering: popularity falls with rank.
        Assert.True(counts[0] > counts[1] && counts[1] > counts[5] && counts[5] > counts[50]);
    }

    [Fact]
    public void ZipfIsSkewedMuchMoreAtHigherTheta()
    {
        var hot99 = Counts(new ZipfianChooser(Items, 0.99), Items).Take(10).Sum();
        var hot50 = Counts(new ZipfianChooser(Items, 0.5), Items).Take(10).Sum();
        Assert.True(hot99 > 3 * hot50, $"top-10 share at θ 0.99 {hot99}, at θ 0.5 {hot50}");
    }

    [Fact]
    public void ScrambledZipfianSpreadsTheHotKeys()
    {
        var scrambled = Counts(new ScrambledZipfianChooser(Items), Items);
        // The hot keys are not the first keys, and they are spread over the key space; the hottest holds rank 0.
        var hotKeys = Enumerable.Range(0, Items).OrderByDescending(k => scrambled[k]).Take(10).ToArray();
        Assert.DoesNotContain(0, hotKeys);
        Assert.True(hotKeys.Max() - hotKeys.Min() > Items / 4, $"hot keys {string.Join(",", hotKeys)}");
        Assert.Equal(ScrambledZipfianChooser.Scramble(0, Items), hotKeys[0]);
    }

    [Fact]
    public void FnvHashIsYcsbs()
    {
        // Values of YCSB's Utils.fnvhash64 (FNV-1a over 8 bytes, low byte first, Math.abs), computed independently.
        Assert.Equal(0x573807CDD7E5C63BL, ScrambledZipfianChooser.Fnv64(0));
        Assert.Equal(0x7632CED6E2D5105CL, ScrambledZipfianChooser.Fnv64(1));
        Assert.Equal(6852, ScrambledZipfianChooser.Scramble(12345, 10_000));
    }

    [Fact]
    public void UniformIsFlat()
    {
        var counts = Counts(new UniformChooser(100), 100, draws: 1_000_000);
        double expected = 1_000_000 / 100.0;
        double chi2 = counts.Sum(c => (c - expected) * (c - expected) / expected);
        Assert.True(chi2 < 150, $"χ² {chi2:0.0} over 99 degrees of freedom");  // p ≈ 0.0006
    }

    [Fact]
    public void LatestFavoursTheNewestAcknowledgedKeys()
    {
        var inserted = new InsertCounter(Items);
        var latest = new LatestChooser(inserted);
        var counts = Counts(latest, Items + 100, draws: 200_000);
        Assert.Equal(Items - 1, Array.IndexOf(counts, counts.Max()));
        var taken = Enumerable.Range(0, 100).Select(_ => inserted.Take()).ToList();
        // Taken but not acknowledged yet: not drawn.
        counts = Counts(latest, Items + 100, draws: 200_000);
        Assert.Equal(0, counts.Skip(Items).Sum());
        taken.ForEach(inserted.Acknowledge);
        counts = Counts(latest, Items + 100, draws: 200_000);
        Assert.Equal(Items + 99, Array.IndexOf(counts, counts.Max()));
    }

    [Theory]
    [InlineData("A", 0.5, 0.5, 0, 0, 0)]
    [InlineData("B", 0.95, 0.05, 0, 0, 0)]
    [InlineData("C", 1, 0, 0, 0, 0)]
    [InlineData("D", 0.95, 0, 0.05, 0, 0)]
    [InlineData("E", 0, 0, 0.05, 0.95, 0)]
    [InlineData("F", 0.5, 0, 0, 0, 0.5)]
    [InlineData("readonly", 1, 0, 0, 0, 0)]
    public void WorkloadMixes(string name, double read, double update, double insert, double scan, double rmw)
    {
        var w = Workload.Parse(name);
        var rng = new Random(1);
        var counts = new Dictionary<Workload.Op, int>();
        const int N = 200_000;
        for (int i = 0; i < N; i++)
        {
            var op = w.Choose(rng.NextDouble());
            counts[op] = counts.GetValueOrDefault(op) + 1;
        }
        foreach (var (op, share) in new[] { (Workload.Op.Read, read), (Workload.Op.Update, update), (Workload.Op.Insert, insert),
                                            (Workload.Op.Scan, scan), (Workload.Op.ReadModifyWrite, rmw) })
            Assert.InRange(counts.GetValueOrDefault(op) / (double)N, share - 0.01, share + 0.01);
    }

    [Fact]
    public void HistogramQuantilesAreWithinABucket()
    {
        var h = new Histogram();
        for (int i = 1; i <= 100_000; i++)
            h.Record(i * 10L);
        Assert.InRange(h.Quantile(0.5), 500_000 * 0.97, 500_000 * 1.04);
        Assert.InRange(h.Quantile(0.99), 990_000 * 0.97, 990_000 * 1.04);
        Assert.Equal(1_000_000, h.MaxNs);
        Assert.InRange(h.MeanNs, 500_004, 500_006);
    }

    [Fact]
    public void HistogramCdfRisesToOneOverTheNonEmptyBuckets()
    {
        var h = new Histogram();
        Assert.Empty(h.Cdf());
        for (int i = 1; i <= 10_000; i++)
            h.Record(i * 100L);
        var cdf = h.Cdf().ToList();
        Assert.True(cdf.Count > 50);
        Assert.All(cdf.Zip(cdf.Skip(1)), p =>
        {
            Assert.True(p.Second.UpperNs > p.First.UpperNs);
            Assert.True(p.Second.Fraction > p.First.Fraction);
        });
        Assert.Equal(1.0, cdf[^1].Fraction);
        Assert.Equal(h.MaxNs, cdf[^1].UpperNs);
        // The point at the median agrees with Quantile.
        var median = cdf.First(p => p.Fraction >= 0.5);
        Assert.Equal(h.Quantile(0.5), median.UpperNs);
        Assert.InRange(median.Fraction, 0.5, 0.53);
    }
}
