using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Tests.Slo;

public sealed class SloPlannerTests
{
    // A model of reads and writes: the kind's read points, and another seed's points of the same kind as writes.
    internal static PerformanceModel ReadsAndWrites(string kind, int seed, string transport = "test")
    {
        var reads = SloTestModels.Create(kind, seed);
        var writes = SloTestModels.Create(kind, seed + 1000);
        return new PerformanceModel
        {
            Transport = transport,
            Distance = reads.Distance,
            RecordSize = reads.RecordSize,
            Machine = reads.Machine,
            Measured = reads.Measured,
            Space = reads.Space,
            Operations = new Dictionary<SloOperation, List<ModelPoint>>
            {
                [SloOperation.Read] = reads.Operations[SloOperation.Read],
                [SloOperation.Write] = writes.Operations[SloOperation.Read],
            },
        };
    }

    // Every configuration predicted for both operations, the cheapest meeting both bounds.
    private static CacheConfig? Exhaustive(PerformanceModel model, RemoteCacheSlo slo, SloCost cost)
    {
        var read = new SloPredictor(model, SloOperation.Read);
        var write = new SloPredictor(model, SloOperation.Write);
        var objectives = slo.Objectives();
        CacheConfig? best = null;
        foreach (var config in SloReferenceSearch.Configurations(model.Space))
        {
            bool meets = objectives.All(o => (o.Operation == SloOperation.Read ? read : write).TryPredict(config, out var p) && o.IsMetBy(p));
            if (meets && (best is not { } b || cost.Compare(config, b) < 0))
                best = config;
        }
        return best;
    }

    [Fact]
    public void ReadAndWriteBoundsTogetherAreTheExhaustiveScansCheapest()
    {
        var random = new Random(5);
        int found = 0, both = 0;
        foreach (var kind in SloTestModels.Kinds)
        {
            var model = ReadsAndWrites(kind, seed: 11);
            var planner = new SloPlanner(model);
            var all = model.Operations.Values.SelectMany(p => p).ToList();
            double minLat = all.Min(p => p.MeanUs), maxLat = all.Max(p => p.MeanUs);
            double minTp = all.Min(p => p.OpsPerSecond), maxTp = all.Max(p => p.OpsPerSecond);
            for (int i = 0; i < 400; i++)
            {
                var slo = new RemoteCacheSlo
                {
                    ReadLatency = TimeSpan.FromMicroseconds(minLat + (maxLat - minLat) * random.NextDouble()),
                    WriteLatency = random.Next(4) == 0 ? null : TimeSpan.FromMicroseconds(minLat + (maxLat - minLat) * random.NextDouble()),
                    Throughput = minTp + (maxTp - minTp) * random.NextDouble() * 0.5,
                    RecordSize = model.RecordSize,
                };
                foreach (var cost in new[] { SloCost.Redy, new SloCost(2, 1) })
                {
                    var plan = planner.Plan(slo, cost);
                    var expected = Exhaustive(model, slo, cost);
                    Assert.True(expected == plan.Config, $"{kind}, {slo}, {cost}: planned {plan.Config}, exhaustive {expected}");
                    if (plan.Config is { } config)
                    {
                        found++;
                        if (slo.WriteLatency is not null)
                            both++;
                        foreach (var o in slo.Objectives())
                        {
                            Assert.True(new SloPredictor(model, o.Operation).TryPredict(config, out var p) && o.IsMetBy(p));
                            Assert.Equal(p, plan.Predicted[o.Operation]);
                        }
                    }
                    else
                    {
                        Assert.False(plan.Found);
                        Assert.Contains("no configuration", plan.Describe());
                    }
                }
            }
        }
        Assert.True(found > 500 && both > 300, $"{found} SLOs met, {both} with both bounds: the test would not show much");
    }

    [Fact]
    public void RefusesAnSloTheModelCannotAnswer()
    {
        var readsOnly = SloTestModels.Create("monotone", 1);
        var planner = new SloPlanner(readsOnly);
        var write = new RemoteCacheSlo { WriteLatency = TimeSpan.FromMicroseconds(10), RecordSize = 8 };
        Assert.Contains("no measured points for writes", Assert.Throws<ArgumentException>(() => planner.Plan(write)).Message);
        var otherSize = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(10), RecordSize = 64 };
        Assert.Contains("64 B records but the model was measured with 8 B", Assert.Throws<ArgumentException>(() => planner.Plan(otherSize)).Message);
        Assert.Contains("bounds nothing", Assert.Throws<ArgumentException>(() => planner.Plan(new RemoteCacheSlo())).Message);
        Assert.Contains("ReadLatency", new RemoteCacheSlo { ReadLatency = TimeSpan.Zero }.Problem());
    }

    [Fact]
    public void AnSloReadsAsWritten()
    {
        var slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(10), Throughput = 2e6, RecordSize = 512 };
        Assert.Equal("reads ≤ 10 µs, ≥ 2,000,000 ops/s (512 B records)", slo.ToString());
        Assert.Equal("writes ≤ 2.5 µs, ≥ 1,500.5 ops/s (8 B records)",
                     new RemoteCacheSlo { WriteLatency = TimeSpan.FromMicroseconds(2.5), Throughput = 1500.5, RecordSize = 8 }.ToString());
    }
}
