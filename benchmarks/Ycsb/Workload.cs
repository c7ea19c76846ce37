using System;
using System.Collections.Generic;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>Key distributions of the run phase.</summary>
public enum Distribution
{
    Uniform,
    Zipfian,      // scrambled, as YCSB's requestdistribution=zipfian
    ZipfianRaw,   // unscrambled: the popular keys are the first ones loaded
    Latest,
}

/// <summary>
/// One of YCSB's core workloads (core 0.17.0's workloads/workloada–f): operation mix and request distribution;
/// "readonly" is Redy §8.3's, run under both uniform and Zipfian keys.
/// </summary>
public sealed record Workload(string Name, double Read, double Update, double Insert, double Scan, double ReadModifyWrite,
                              Distribution[] Distributions, string Description)
{
    /// <summary>YCSB's scans read up to this many consecutive records (uniform length, workload E's maxscanlength).</summary>
    public const int MaxScanLength = 100;

    private static readonly Distribution[] Zipfian = { Distribution.Zipfian };

    public static readonly IReadOnlyDictionary<string, Workload> All = new Dictionary<string, Workload>(StringComparer.OrdinalIgnoreCase)
    {
        ["A"] = new("A", 0.5, 0.5, 0, 0, 0, Zipfian, "update heavy: 50 % reads, 50 % updates"),
        ["B"] = new("B", 0.95, 0.05, 0, 0, 0, Zipfian, "read mostly: 95 % reads, 5 % updates"),
        ["C"] = new("C", 1, 0, 0, 0, 0, Zipfian, "read only"),
        ["D"] = new("D", 0.95, 0, 0.05, 0, 0, new[] { Distribution.Latest }, "read latest: 95 % reads, 5 % inserts"),
        ["E"] = new("E", 0, 0, 0.05, 0.95, 0, Zipfian, "short ranges: 95 % scans (of consecutive keys), 5 % inserts"),
        ["F"] = new("F", 0.5, 0, 0, 0, 0.5, Zipfian, "read-modify-write: 50 % reads, 50 % RMW"),
        ["readonly"] = new("readonly", 1, 0, 0, 0, 0, new[] { Distribution.Uniform, Distribution.Zipfian }, "100 % reads (Redy §8.3)"),
    };

    public static Workload Parse(string name) =>
        All.TryGetValue(name, out var w) ? w : throw new ArgumentException($"unknown workload '{name}' (A-F or readonly)");

    public enum Op { Read, Update, Insert, Scan, ReadModifyWrite }

    public Op Choose(double u)
    {
        if ((u -= Read) < 0) return Op.Read;
        if ((u -= Update) < 0) return Op.Update;
        if ((u -= Insert) < 0) return Op.Insert;
        if ((u -= Scan) < 0) return Op.Scan;
        return Op.ReadModifyWrite;
    }
}
