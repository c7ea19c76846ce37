using System;
using System.Collections.Generic;
using RemoteCache.Slo;

namespace RemoteCache.Tests.Slo;

/// <summary>
/// Small models for the search's property tests: one monotone (latency and throughput never fall when a parameter
/// rises, the assumption of Redy's Fig. 10) and several that are not.
/// </summary>
internal static class SloTestModels
{
    /// <summary>The kinds <see cref="Create"/> knows.</summary>
    public static readonly string[] Kinds =
    {
        "monotone",             // smooth, every grid point
        "noisy",                // the same ±30 % noise on each point: neither latency nor throughput monotone
        "early-termination",    // noisy, then Redy's early termination and 10 % of the points dropped at random: holes
        "latency-falls-with-b", // batching lowers the latency up to b = 8 (fewer, fuller messages), then raises it
        "random",               // latency and throughput drawn independently per point
        "odd-space",            // s from 1, maxima that are not powers of two (measured at the tops too), noisy
    };

    public static PerformanceModel Create(string kind, int seed)
    {
        var random = new Random(seed);
        var space = kind == "odd-space"
            ? new ConfigurationSpace(5, 1, 6, 12, 6)
            : new ConfigurationSpace(6, 0, 5, 16, 8);
        var values = new Dictionary<CacheConfig, (double Lat, double Tp)>();
        foreach (int s in Grid(space.MinServerThreads, space.MaxServerThreads))
        {
            foreach (int c in Grid(0, space.MaxClientThreads))
            {
                foreach (int b in s == 0 ? new[] { 1 } : Grid(1, space.MaxBatch))
                {
                    foreach (int q in Grid(1, space.MaxQueueDepth))
                    {
                        double lat = 2 + 0.2 * c + 0.4 * s + 0.1 * b + 0.05 * b * q;
                        double tp = 1e5 * Math.Sqrt(1 + c) * Math.Pow(1 + s, 0.3) * Math.Log2(1 + b) * Math.Sqrt(q);
                        switch (kind)
                        {
                            case "monotone":
                                break;
                            case "latency-falls-with-b":
                                lat = 2 + 0.2 * c + 0.4 * s + 12.0 / b + 0.4 * b + 0.05 * b * q;
                                lat *= 1 + 0.02 * (2 * random.NextDouble() - 1);
                                break;
                            case "random":
                                lat = 1 + 99 * random.NextDouble();
                                tp = 1e4 + 1e7 * random.NextDouble();
                                break;
                            default:
                                lat *= 1 + 0.3 * (2 * random.NextDouble() - 1);
                                tp *= 1 + 0.3 * (2 * random.NextDouble() - 1);
                                break;
                        }
                        values[new CacheConfig(c, s, b, q)] = (lat, tp);
                    }
                }
            }
        }
        var points = new List<ModelPoint>();
        foreach (var (p, (lat, tp)) in values)
        {
            if (kind == "early-termination" && (random.NextDouble() < 0.1 || Terminated(p, values, space)))
                continue;
            points.Add(new ModelPoint(p.ClientThreads, p.ServerThreads, p.BatchSize, p.QueueDepth, lat, tp));
        }
        return Reads(space, points, how: $"SloTestModels.Create(\"{kind}\", {seed})", note: $"synthetic: {kind}");
    }

    /// <summary>A model of these read points, measured (so to speak) on a 2-core test machine.</summary>
    public static PerformanceModel Reads(ConfigurationSpace space, List<ModelPoint> reads, string transport = "test", string how = "by hand",
                                         string? note = null) => new()
    {
        Transport = transport,
        Distance = "same-host",
        RecordSize = 8,
        Machine = new MachineDescription("test", 2, 1L << 30, "Linux") { Note = note },
        Measured = new MeasurementInfo("2026-11-23", how, "test", 1, 0),
        Space = space,
        Operations = new Dictionary<SloOperation, List<ModelPoint>> { [SloOperation.Read] = reads },
    };

    /// <summary>Redy's early termination: along each parameter, nothing past the first step that did not raise throughput.</summary>
    private static bool Terminated(CacheConfig p, Dictionary<CacheConfig, (double Lat, double Tp)> values, ConfigurationSpace space)
    {
        return Stopped(Grid(0, space.MaxClientThreads), p.ClientThreads, v => p with { ClientThreads = v })
            || (p.ServerThreads > 0 && Stopped(Grid(1, space.MaxServerThreads), p.ServerThreads, v => p with { ServerThreads = v }))
            || Stopped(Grid(1, space.MaxBatch), p.BatchSize, v => p with { BatchSize = v })
            || Stopped(Grid(1, space.MaxQueueDepth), p.QueueDepth, v => p with { QueueDepth = v });

        bool Stopped(int[] grid, int value, Func<int, CacheConfig> at)
        {
            int index = Array.IndexOf(grid, value);
            for (int j = 1; j < index; j++)
            {
                if (values[at(grid[j])].Tp <= values[at(grid[j - 1])].Tp)
                    return true;
            }
            return false;
        }
    }

    public static int[] Grid(int min, int max) => ConfigurationSpace.GridValues(min, max);
}
