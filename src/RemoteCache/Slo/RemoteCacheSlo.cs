using System;
using System.Collections.Generic;
using System.Globalization;

namespace RemoteCache.Slo;

/// <summary>
/// What a cache must deliver (Redy's Create: "a maximum average latency and minimum average throughput of reads and of
/// writes"): a bound on the mean read latency and/or the mean write latency, and a throughput every bounded operation
/// must reach, for records of one size. Settable from configuration (<c>Slo</c> section of the client's options).
/// </summary>
public sealed class RemoteCacheSlo
{
    /// <summary>The largest acceptable mean read latency; null = reads are not bounded.</summary>
    public TimeSpan? ReadLatency { get; set; }

    /// <summary>The largest acceptable mean write latency; null = writes are not bounded.</summary>
    public TimeSpan? WriteLatency { get; set; }

    /// <summary>Operations per second the bounded operations must each reach (0 = no bound).</summary>
    public double Throughput { get; set; }

    /// <summary>Bytes per operation (the model must be of this record size).</summary>
    public int RecordSize { get; set; } = 8;

    /// <summary>How long a window the client judges its achieved latency and throughput over. Default: 2 s.</summary>
    public TimeSpan Window { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>How long the SLO may be missed under a load within it before the client retunes. Default: 6 s.</summary>
    public TimeSpan Patience { get; set; } = TimeSpan.FromSeconds(6);

    /// <summary>How far past a bound still counts as meeting it (0.1 = 10 %), for judging windows. Default: 0.1.</summary>
    public double Tolerance { get; set; } = 0.1;

    /// <summary>Whether the client corrects its model and reconfigures when it keeps missing the SLO (otherwise it only reports). Default: true.</summary>
    public bool Retune { get; set; } = true;

    /// <summary>What is wrong with the SLO, or null.</summary>
    public string? Problem() =>
        ReadLatency is { } r && r <= TimeSpan.Zero ? $"has ReadLatency {r}; it must be positive"
        : WriteLatency is { } w && w <= TimeSpan.Zero ? $"has WriteLatency {w}; it must be positive"
        : !(Throughput >= 0) || double.IsInfinity(Throughput) ? $"has Throughput {Throughput}; it must be finite and 0 or more"
        : RecordSize < 1 ? $"has RecordSize {RecordSize}; it must be at least 1"
        : Window < TimeSpan.FromMilliseconds(100) ? $"has Window {Window}; it must be at least 100 ms"
        : Patience < TimeSpan.Zero ? $"has Patience {Patience}; it must not be negative"
        : !(Tolerance >= 0 && Tolerance <= 10) ? $"has Tolerance {Tolerance}; it must be 0..10"
        : ReadLatency is null && WriteLatency is null && Throughput == 0 ? "bounds nothing: give ReadLatency, WriteLatency or Throughput"
        : null;

    /// <summary>
    /// The per-operation objectives a configuration must meet: one per bounded latency, each with the throughput; with
    /// no latency bound, the throughput for reads and for writes.
    /// </summary>
    /// <exception cref="ArgumentException">The SLO is not valid (<see cref="Problem"/>).</exception>
    public IReadOnlyList<ServiceLevelObjective> Objectives()
    {
        if (Problem() is { } problem)
            throw new ArgumentException($"the SLO {problem}");
        var list = new List<ServiceLevelObjective>(2);
        if (ReadLatency is { } read)
            list.Add(new ServiceLevelObjective(SloOperation.Read, read.TotalMicroseconds, Throughput, RecordSize));
        if (WriteLatency is { } write)
            list.Add(new ServiceLevelObjective(SloOperation.Write, write.TotalMicroseconds, Throughput, RecordSize));
        if (list.Count == 0)
        {
            list.Add(new ServiceLevelObjective(SloOperation.Read, double.PositiveInfinity, Throughput, RecordSize));
            list.Add(new ServiceLevelObjective(SloOperation.Write, double.PositiveInfinity, Throughput, RecordSize));
        }
        return list;
    }

    /// <inheritdoc/>
    public override string ToString()
    {
        var parts = new List<string>(3);
        if (ReadLatency is { } r)
            parts.Add(string.Create(CultureInfo.InvariantCulture, $"reads ≤ {r.TotalMicroseconds:G6} µs"));
        if (WriteLatency is { } w)
            parts.Add(string.Create(CultureInfo.InvariantCulture, $"writes ≤ {w.TotalMicroseconds:G6} µs"));
        if (Throughput > 0)
            parts.Add(string.Create(CultureInfo.InvariantCulture, $"≥ {Throughput:#,0.###} ops/s"));  // 2,000,000, not 2E+06
        return $"{string.Join(", ", parts)} ({RecordSize} B records)";
    }
}
