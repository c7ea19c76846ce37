using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Threading;
using RemoteCache.Benchmarks.Ycsb;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

/// <summary>
/// The port against YCSB's own definitions (site.ycsb core 0.17.0): expected figures are computed here from those
/// definitions (a Zipf law over YCSB's 10^10 + 1 ranks, folded onto the keys by FNV-1a; the workload files), not from
/// the port's generators.
/// </summary>
public sealed class YcsbDefinitionTests(Xunit.Abstractions.ITestOutputHelper output)
{
    // YCSB 0.17.0, ScrambledZipfianGenerator: ZETAN, USED_ZIPFIAN_CONSTANT, ITEM_COUNT.
    private const double YcsbZetan = 26.46902820178302;
    private const double YcsbTheta = 0.99;
    private const long YcsbItemCount = 10_000_000_000L;

    private const long Keys = 1_000_000;
    private const int Draws = 10_000_000;

    // YCSB's Utils.fnvhash64, written out again here so that the expectation does not use the port's.
    private static long YcsbFnv(long value)
    {
        const long offsetBasis = unchecked((long)0xCBF29CE484222325L);
        const long prime = 1099511628211L;
        long hash = offsetBasis;
        for (int i = 0; i < 8; i++)
        {
            long octet = value & 0xff;
            value >>= 8;
            hash ^= octet;
            hash = unchecked(hash * prime);
        }
        return hash == long.MinValue ? hash : Math.Abs(hash);
    }

    /// <summary>
    /// Each key's probability under YCSB's scrambled Zipfian: the Zipf law over 10^10 + 1 ranks (ζ = ZETAN), ranks
    /// below 2^23 folded exactly onto <paramref name="keys"/> keys by the hash, the rest (a third of the mass, spread
    /// over thousands of ranks per key) as an even share per key.
    /// </summary>
    private static double[] ExpectedScrambled(long keys)
    {
        const int head = 1 << 23;
        var p = new double[keys];
        double headMass = 0;
        for (long rank = 0; rank < head; rank++)
        {
            double q = 1.0 / Math.Pow(rank + 1, YcsbTheta) / YcsbZetan;
            p[YcsbFnv(rank) % keys] += q;
            headMass += q;
        }
        double tailShare = (1 - headMass) / keys;
        for (long k = 0; k < keys; k++)
            p[k] += tailShare;
        return p;
    }

    private static long[] Draw(IKeyChooser chooser, long keys, int draws, int seed)
    {
        var rng = new Random(seed);
        var counts = new long[keys];
        for (int i = 0; i < draws; i++)
            counts[chooser.Next(rng)]++;
        return counts;
    }

    [Fact]
    public void ZetaOverYcsbsRankSpaceIsItsPrecomputedConstant()
    {
        // The closed-form tail past 2^22 terms against YCSB's ζ(10^10, 0.99), which YCSB summed term by term.
        Assert.Equal(YcsbZetan, ZipfianChooser.Zeta(YcsbItemCount, YcsbTheta), 1e-8);
        // And against a plain sum just past where the closed form takes over.
        long n = (1L << 22) + 100_000;
        double plain = 0;
        for (long i = 1; i <= n; i++)
            plain += 1.0 / Math.Pow(i, 0.7);
        Assert.Equal(plain, ZipfianChooser.Zeta(n, 0.7), 1e-9 * plain);
        // The incremental form (YCSB's, when inserts grow the key space) agrees with the whole sum.
        double from = ZipfianChooser.Zeta(1000, 0.99);
        Assert.Equal(ZipfianChooser.Zeta(5000, 0.99), ZipfianChooser.Zeta(1000, 5000, 0.99, from), 1e-12);
    }

    [Fact]
    public void ScrambledZipfianIsYcsbsZipfOverTenBillionRanksFoldedByTheHash()
    {
        var expected = ExpectedScrambled(Keys);
        var counts = Draw(new ScrambledZipfianChooser(Keys), Keys, Draws, seed: 7);

        // The two hottest keys hold ranks 0 and 1, which Gray's method draws exactly: within 5 σ of the law.
        var hottest = Enumerable.Range(0, (int)Keys).OrderByDescending(k => expected[k]).Take(2).ToArray();
        Assert.Equal(YcsbFnv(0) % Keys, hottest[0]);
        foreach (int k in hottest)
        {
            double mean = expected[k] * Draws, sigma = Math.Sqrt(mean);
            Assert.InRange(counts[k], mean - 5 * sigma, mean + 5 * sigma);
        }

        // The 1 % hottest keys by the law: about two fifths of all draws (the old port's gave them two thirds).
        var top = Enumerable.Range(0, (int)Keys).OrderByDescending(k => expected[k]).Take((int)(Keys / 100)).ToArray();
        double expectedTopShare = top.Sum(k => expected[k]);
        double drawnTopShare = top.Sum(k => (double)counts[k]) / Draws;
        double expectedNever = expected.Sum(p => Math.Exp(Draws * Math.Log(1 - p))) / Keys;
        double drawnNever = counts.Count(c => c == 0) / (double)Keys;
        output.WriteLine($"top 1 % of keys: {expectedTopShare:P2} by the law, {drawnTopShare:P2} drawn; never drawn: {expectedNever:P2} by the law, " +
                         $"{drawnNever:P2} drawn; hottest key {expected[hottest[0]]:P3}");
        Assert.InRange(expectedTopShare, 0.35, 0.45);
        Assert.InRange(drawnTopShare, expectedTopShare - 0.01, expectedTopShare + 0.01);

        // Every key can be drawn: the keys never drawn in 10 M draws are as many as the law predicts (the old port
        // could never draw about 40 % of them).
        Assert.InRange(drawnNever, expectedNever - 0.01, expectedNever + 0.01);

        // Markedly less hot than the unscrambled Zipfian's item 0 over the same keys.
        double rawHottest = 1.0 / ZipfianChooser.Zeta(Keys, YcsbTheta);
        Assert.True(expected[hottest[0]] < 0.7 * rawHottest, $"scrambled hottest {expected[hottest[0]]:0.0000}, raw {rawHottest:0.0000}");
    }

    // workloads/workloada–f of YCSB 0.17.0: read, update, insert, scan, read-modify-write proportions and requestdistribution.
    [Theory]
    [InlineData("A", 0.5, 0.5, 0, 0, 0, "zipfian")]
    [InlineData("B", 0.95, 0.05, 0, 0, 0, "zipfian")]
    [InlineData("C", 1, 0, 0, 0, 0, "zipfian")]
    [InlineData("D", 0.95, 0, 0.05, 0, 0, "latest")]
    [InlineData("E", 0, 0, 0.05, 0.95, 0, "zipfian")]
    [InlineData("F", 0.5, 0, 0, 0, 0.5, "zipfian")]
    public void WorkloadsAreYcsbsFiles(string name, double read, double update, double insert, double scan, double rmw, string distribution)
    {
        var w = Workload.Parse(name);
        Assert.Equal((read, update, insert, scan, rmw), (w.Read, w.Update, w.Insert, w.Scan, w.ReadModifyWrite));
        var options = YcsbOptions.Parse(new[] { "--workload", name });
        Assert.Equal(new[] { distribution }, options.Distributions.Select(d => d.ToString().ToLowerInvariant()));
        // An explicit --distributions still overrides the file's.
        Assert.Equal(new[] { Distribution.Uniform }, YcsbOptions.Parse(new[] { "--workload", name, "--distributions", "uniform" }).Distributions);
    }

    [Fact]
    public void ZipfianKeySpaceReachesPastTheRecordsByTheExpectedInserts()
    {
        // CoreWorkload: expectednewkeys = (int)(operationcount * insertproportion * 2.0).
        var e = YcsbOptions.Parse(new[] { "--workload", "E", "--records", "100000", "--operation-count", "40000" });
        Assert.Equal(4000, e.ExpectedNewKeys);
        Assert.Equal(10000, YcsbOptions.Parse(new[] { "--workload", "D", "--records", "100000" }).ExpectedNewKeys);
        Assert.Equal(0, YcsbOptions.Parse(new[] { "--workload", "C", "--records", "100000" }).ExpectedNewKeys);
    }

    [Fact]
    public void WorkloadEsScansStartAtInsertedKeysOnceTheyAreAcknowledged()
    {
        // E draws each scan's first key from the scrambled Zipfian over records + expected inserts, drawing again any
        // key not inserted yet: before an insert no draw passes the loaded records; after some, draws reach the new
        // keys, about in proportion to the share of the drawable key space they are, and never past the last one.
        var e = YcsbOptions.Parse(new[] { "--workload", "E", "--records", "10000", "--operation-count", "100000" });
        Assert.Equal(new[] { Distribution.Zipfian }, e.Distributions);
        Assert.Equal(10_000, e.ExpectedNewKeys);
        var inserted = new InsertCounter(e.Records);
        var chooser = KeyChoosers.For(Distribution.Zipfian, e, inserted);
        var rng = new Random(5);
        for (int i = 0; i < 100_000; i++)
            Assert.InRange(inserted.Draw(chooser, rng), 0, e.Records - 1);

        for (int k = 0; k < 5_000; k++)
            inserted.Acknowledge(inserted.Take());
        Assert.Equal(14_999, inserted.Last);
        const int draws = 300_000;
        long atNewKeys = 0;
        for (int i = 0; i < draws; i++)
        {
            long key = inserted.Draw(chooser, rng);
            Assert.InRange(key, 0, inserted.Last);
            if (key >= e.Records)
                atNewKeys++;
        }
        // The new keys are a third of the 15 000 drawable ones; the hash spreads the Zipf ranks over them.
        Assert.InRange(atNewKeys / (double)draws, 0.2, 0.45);
    }

    [Fact]
    public void LatestFollowsYcsbsZetaAsTheKeySpaceGrows()
    {
        // SkewedLatestGenerator draws last − zipf(last) with ζ(last): after the inserts, the newest key's share is
        // 1 / ζ(new last), not 1 / ζ(initial last).
        const long loaded = 1000;
        var inserted = new InsertCounter(loaded);
        var latest = new LatestChooser(inserted);
        for (long k = 0; k < 9000; k++)
            inserted.Acknowledge(inserted.Take());
        long last = inserted.Last;
        Assert.Equal(9999, last);
        var rng = new Random(3);
        const int draws = 2_000_000;
        long newest = 0;
        for (int i = 0; i < draws; i++)
            if (latest.Next(rng) == last)
                newest++;
        double expected = draws / ZipfianChooser.Zeta(last, YcsbTheta);
        Assert.InRange(newest, expected - 5 * Math.Sqrt(expected), expected + 5 * Math.Sqrt(expected));
    }

    [Fact]
    public void LatestNeverPicksAKeyWhoseInsertIsNotDoneWithFourThreads()
    {
        // Workload D's mix on a table of written flags: an insert takes a key, takes a while, writes it, acknowledges it;
        // a read must always find its key written.
        const long loaded = 10_000;
        const int threads = 4, opsPerThread = 300_000;
        var written = new int[loaded + threads * opsPerThread];
        for (long k = 0; k < loaded; k++)
            written[k] = 1;
        var inserted = new InsertCounter(loaded);
        long unwrittenReads = 0, inserts = 0;
        using var start = new Barrier(threads);
        var workers = Enumerable.Range(0, threads).Select(t => new Thread(() =>
        {
            var rng = new Random(100 + t);
            var latest = new LatestChooser(inserted);
            start.SignalAndWait();
            for (int i = 0; i < opsPerThread; i++)
            {
                if (rng.NextDouble() < 0.05)
                {
                    long key = inserted.Take();
                    Thread.SpinWait(rng.Next(200));  // the insert's own work, of varying length
                    Volatile.Write(ref written[key], 1);
                    inserted.Acknowledge(key);
                    Interlocked.Increment(ref inserts);
                }
                else if (Volatile.Read(ref written[latest.Next(rng)]) == 0)
                {
                    Interlocked.Increment(ref unwrittenReads);
                }
            }
        })).ToList();
        workers.ForEach(w => w.Start());
        workers.ForEach(w => w.Join());
        Assert.Equal(0, unwrittenReads);
        Assert.True(inserts > threads * opsPerThread / 40);
        // Every insert acknowledged, so the newest key is the last one handed out.
        Assert.Equal(inserted.Issued - 1, inserted.Last);
    }

    [Theory]
    [InlineData("D")]
    [InlineData("E")]
    public void InsertWorkloadsRunWithFourThreadsWithoutWrongReads(string workload)
    {
        string dir = Path.Combine(Path.GetTempPath(), $"ycsb-{workload}-{Guid.NewGuid():N}");
        try
        {
            int exit = Program.Main(new[]
            {
                "--workload", workload, "--records", "20000", "--duration", "1", "--warmup", "0.2", "--threads", "4",
                "--rounds", "2", "--devices", "memory,remotecache", "--out", dir, "--no-fio",
            });
            Assert.Equal(0, exit);  // non-zero: a read found a wrong or missing value
            var rows = File.ReadAllLines(Path.Combine(dir, "results.csv")).Skip(1).Select(r => r.Split(',')).ToArray();
            Assert.Equal(4, rows.Length);  // 2 devices x the workload's one distribution x 2 rounds
            Assert.All(rows, r => Assert.Equal(workload == "D" ? "latest" : "zipfian", r[2]));
            Assert.All(rows, r => Assert.Equal("0", r[12]));
        }
        finally
        {
            if (Directory.Exists(dir))
                Directory.Delete(dir, recursive: true);
        }
    }
}
