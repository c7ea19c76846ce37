using System;
using System.Collections.Generic;
using System.Linq;
using RemoteCache.Slo;

namespace RemoteCache.Cli.Slo;

/// <summary>
/// A synthetic performance model of Redy's size, for timing the search (<c>remotecache slo bench</c> and the
/// BenchmarkDotNet <c>SloSearchBenchmarks</c>): not a measurement. 8 B records, so b ≤ ⌈4 KiB / 8⌉ = 512; q ≤ 16 (the
/// queue depth of Redy's NICs); c ≤ 30 and s ≤ 30 by default (Redy: 30 of a VM's 60 cores for the cache; RemoteCache's
/// space does not require s ≤ c). Points on the grid (0, the powers of two and each maximum) follow a formula with uniform ±3 % noise;
/// optionally, Redy's early termination then drops the points past a step that did not raise throughput.
/// </summary>
/// <remarks>
/// The formula (µs, operations per µs): n = max(c, 1) client threads (c = 0: the application thread, at 0.6 of a
/// thread's rate) keep W = n·b·q operations in flight. Unloaded latency L₀ = 2 µs (network) + 0.25 µs + 0.02 µs·b on
/// the client, + 0.4 µs + 0.015 µs·b on a server thread (s ≥ 1), or + 0.3 µs for a one-sided access (s = 0). Capacity:
/// the least of n clients at b / (0.25 + 0.02·b) each, min(s, n) server threads at b / (0.4 + 0.015·b) each (a
/// connection is served by one thread; s = 0: one-sided accesses at 3.3 per µs and client thread, at most 40 per µs), and
/// the NIC's 200 per µs. Throughput X = min(W / L₀, capacity), latency = W / X · (1 + 0.01·n) + 0.05 µs per idle server
/// thread. So latency rises with b and q, and throughput saturates, as in Redy's Fig. 7–8 — but neither is monotone in
/// every parameter (more server threads can lower the latency), and the noise makes neither monotone anywhere.
/// </remarks>
internal static class SyntheticRedyModel
{
    public const int RecordSize = 8;
    public const int MaxQueueDepth = 16;

    public static PerformanceModel Create(int maxThreads = 30, int seed = 1, bool earlyTermination = false)
    {
        if (maxThreads < 1 || maxThreads > CacheConfig.MaxClientThreads)
            throw new ArgumentOutOfRangeException(nameof(maxThreads), maxThreads, $"must be 1..{CacheConfig.MaxClientThreads}");
        var space = new ConfigurationSpace(maxThreads, 0, maxThreads, ConfigurationSpace.BatchLimit(RecordSize), MaxQueueDepth);
        int[] cs = Grid(0, maxThreads), ss = Grid(0, maxThreads), bs = Grid(1, space.MaxBatch), qs = Grid(1, MaxQueueDepth);
        var random = new Random(seed);
        // The "measured" value at every grid point (noise drawn in a fixed order, so a seed always gives the same model).
        var values = new Dictionary<CacheConfig, (double Lat, double Tp)>();
        foreach (int s in ss)
        {
            foreach (int c in cs)
            {
                foreach (int b in s == 0 ? new[] { 1 } : bs)
                {
                    foreach (int q in qs)
                    {
                        var (lat, tp) = Formula(c, s, b, q);
                        values[new CacheConfig(c, s, b, q)] = (lat * Noise(random), tp * Noise(random));
                    }
                }
            }
        }
        var points = new List<ModelPoint>();
        foreach (var (config, (lat, tp)) in values)
        {
            if (earlyTermination && Terminated(config, values, cs, ss, bs, qs))
                continue;
            points.Add(new ModelPoint(config.ClientThreads, config.ServerThreads, config.BatchSize, config.QueueDepth, lat, tp * 1e6));
        }
        return new PerformanceModel
        {
            Transport = "synthetic",
            Distance = "same-rack",
            RecordSize = RecordSize,
            Machine = new MachineDescription("synthetic", 0, 0, "none")
            {
                Note = "synthetic points: remotecache slo bench's formula with ±3 % noise, not a measurement",
            },
            Measured = new MeasurementInfo(DateTime.UtcNow.ToString("yyyy-MM-dd", System.Globalization.CultureInfo.InvariantCulture),
                $"remotecache slo bench --threads {maxThreads} --seed {seed}{(earlyTermination ? " --early-termination" : "")}", "SyntheticRedyModel", 0, 0),
            Space = space,
            Operations = new Dictionary<SloOperation, List<ModelPoint>> { [SloOperation.Read] = points },
        };
    }

    /// <summary>
    /// SLOs drawn as Redy's §7.3: latency and throughput independently uniform between the model's lowest and highest
    /// (or log-uniform: as many SLOs in each factor of ten, so more tight ones).
    /// </summary>
    public static List<ServiceLevelObjective> RandomSlos(PerformanceModel model, int count, int seed, bool logUniform)
    {
        var points = model.Points(SloOperation.Read);
        double minLat = points.Min(p => p.MeanUs), maxLat = points.Max(p => p.MeanUs);
        double minTp = points.Min(p => p.OpsPerSecond), maxTp = points.Max(p => p.OpsPerSecond);
        var random = new Random(seed + 1);
        var slos = new List<ServiceLevelObjective>(count);
        for (int i = 0; i < count; i++)
        {
            double lat = logUniform
                ? minLat * Math.Pow(maxLat / minLat, random.NextDouble())
                : minLat + random.NextDouble() * (maxLat - minLat);
            double tp = logUniform
                ? minTp * Math.Pow(maxTp / minTp, random.NextDouble())
                : minTp + random.NextDouble() * (maxTp - minTp);
            slos.Add(new ServiceLevelObjective(SloOperation.Read, lat, tp, model.RecordSize));
        }
        return slos;
    }

    /// <summary>
    /// <paramref name="side"/>² SLOs on a grid log-spaced between the model's lowest and highest latency and
    /// throughput: every combination, tight ones included, once (the search's slow cases are among them).
    /// </summary>
    public static List<ServiceLevelObjective> GridSlos(PerformanceModel model, int side)
    {
        var points = model.Points(SloOperation.Read);
        double minLat = points.Min(p => p.MeanUs), maxLat = points.Max(p => p.MeanUs);
        double minTp = points.Min(p => p.OpsPerSecond), maxTp = points.Max(p => p.OpsPerSecond);
        var slos = new List<ServiceLevelObjective>(side * side);
        for (int i = 0; i < side; i++)
        {
            for (int j = 0; j < side; j++)
            {
                slos.Add(new ServiceLevelObjective(SloOperation.Read,
                    minLat * Math.Pow(maxLat / minLat, i / (side - 1.0)),
                    minTp * Math.Pow(maxTp / minTp, j / (side - 1.0)),
                    model.RecordSize));
            }
        }
        return slos;
    }

    /// <summary>Mean latency (µs) and throughput (operations per µs) of a configuration, before noise.</summary>
    internal static (double LatUs, double OpsPerUs) Formula(int c, int s, int b, int q)
    {
        int n = Math.Max(c, 1);
        double window = (double)n * b * q;
        double clientRate = b / (0.25 + 0.02 * b) * (c == 0 ? 0.6 : 1.0);
        double unloaded = 2.0 + 0.25 + 0.02 * b;
        double capacity;
        if (s == 0)
        {
            unloaded += 0.3;
            capacity = Math.Min(n * Math.Min(clientRate, 3.3), 40);
        }
        else
        {
            unloaded += 0.4 + 0.015 * b;
            capacity = Math.Min(n * clientRate, Math.Min(s, n) * (b / (0.4 + 0.015 * b)));
        }
        capacity = Math.Min(capacity, 200);
        double throughput = Math.Min(window / unloaded, capacity);
        double latency = window / throughput * (1 + 0.01 * n) + 0.05 * Math.Max(0, s - n);
        return (latency, throughput);
    }

    /// <summary>
    /// Redy's early termination: along each parameter (the others fixed), measuring stops after the first step that
    /// did not raise throughput. A point is dropped when, along some parameter, a step before it did not.
    /// One-sided access (s = 0) is its own family: the walk along s starts at 1.
    /// </summary>
    private static bool Terminated(CacheConfig p, Dictionary<CacheConfig, (double Lat, double Tp)> values, int[] cs, int[] ss, int[] bs, int[] qs)
    {
        return Stopped(cs, p.ClientThreads, v => p with { ClientThreads = v })
            || (p.ServerThreads > 0 && Stopped(Array.FindAll(ss, s => s > 0), p.ServerThreads, v => p with { ServerThreads = v }))
            || Stopped(bs, p.BatchSize, v => p with { BatchSize = v })
            || Stopped(qs, p.QueueDepth, v => p with { QueueDepth = v });

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

    private static double Noise(Random random) => 1 + 0.03 * (2 * random.NextDouble() - 1);

    private static int[] Grid(int min, int max) => ConfigurationSpace.GridValues(min, max);
}
