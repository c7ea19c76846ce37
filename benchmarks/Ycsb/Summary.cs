using System;
using System.Collections.Generic;
using System.Linq;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>
/// Turns the rounds of a run into what it reports: per (device, distribution, threads) the round with the median
/// throughput, and per comparison the median of the per-round ratios (each ratio taken between phases of the same
/// round, which ran minutes apart at most, so a slow stretch of the machine mostly cancels out).
/// </summary>
public static class Summary
{
    /// <summary>Rounds whose ratios differ by more than this factor (largest over smallest) disagree: the run says so.</summary>
    public const double DisagreementLimit = 1.5;

    /// <summary>A comparison of RemoteCache against another device in one (distribution, threads) group.</summary>
    public sealed record Ratio(string Distribution, int Threads, string Other, double Median, double[] PerRound)
    {
        /// <summary>The lowest round's ratio.</summary>
        public double Min => PerRound.Min();

        /// <summary>The highest round's ratio.</summary>
        public double Max => PerRound.Max();

        /// <summary>The highest round's ratio over the lowest's (1 with one round).</summary>
        public double Spread => Min > 0 ? Max / Min : double.PositiveInfinity;

        /// <summary>Whether the rounds disagree by more than <see cref="DisagreementLimit"/>.</summary>
        public bool Disagree => Spread > DisagreementLimit;
    }

    /// <summary>The median round of each (device, distribution, threads), in the order the results came.</summary>
    public static List<RunResult> Medians(IEnumerable<RunResult> results) =>
        results.GroupBy(r => (r.Device, r.Distribution, r.Threads))
               .Select(g => MedianBy(g.ToList(), r => r.OpsPerSecond))
               .ToList();

    /// <summary>Per-round throughput of <paramref name="device"/> over each other device, rounds where both ran.</summary>
    public static List<Ratio> Ratios(IEnumerable<RunResult> results, string device, IEnumerable<string> others)
    {
        var list = results.ToList();
        var ratios = new List<Ratio>();
        foreach (var group in list.Where(r => r.Device == device).GroupBy(r => (r.Distribution, r.Threads)))
        {
            foreach (var other in others)
            {
                var perRound = group
                    .Select(r => (r, x: list.FirstOrDefault(x => x.Device == other && x.Distribution == r.Distribution &&
                                                                  x.Threads == r.Threads && x.Round == r.Round)))
                    .Where(p => p.x is not null)
                    .OrderBy(p => p.r.Round)
                    .Select(p => p.r.OpsPerSecond / p.x!.OpsPerSecond)
                    .ToArray();
                if (perRound.Length > 0)
                    ratios.Add(new Ratio(group.Key.Distribution, group.Key.Threads, other, Median(perRound), perRound));
            }
        }
        return ratios;
    }

    /// <summary>The median (the lower middle one of an even count, so that it is a value that was measured).</summary>
    public static double Median(IReadOnlyCollection<double> values) => MedianBy(values.ToList(), v => v);

    private static T MedianBy<T>(List<T> items, Func<T, double> key)
    {
        if (items.Count == 0)
            throw new ArgumentException("no values", nameof(items));
        var sorted = items.OrderBy(key).ToList();
        return sorted[(sorted.Count - 1) / 2];
    }
}
