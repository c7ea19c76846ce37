using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Diagnostics.Metrics;

namespace RemoteCache.Manager.Core;

/// <summary>
/// The manager's instruments (meter <see cref="MeterName"/>): allocations and refusals, Allocate and SLO-search time,
/// and, observed from its state, caches, watchers, the memory each server lends (by server and VM type) and whether it leads.
/// </summary>
public sealed class ManagerMetrics
{
    /// <summary>The meter's name (for OpenTelemetry's AddMeter).</summary>
    public const string MeterName = "RemoteCache.Manager";

    private readonly Counter<long> _allocations;
    private readonly Histogram<double> _allocateDuration;
    private readonly Histogram<double> _searchDuration;

    public ManagerMetrics(IMeterFactory meters)
    {
        var meter = meters.Create(MeterName);
        _allocations = meter.CreateCounter<long>("remotecache.manager.allocations", "{allocation}",
            "Allocate calls by result (ok, or the refusal's gRPC status)");
        _allocateDuration = meter.CreateHistogram<double>("remotecache.manager.allocate.duration", "s", "Time to serve an Allocate");
        _searchDuration = meter.CreateHistogram<double>("remotecache.manager.search.duration", "s", "Time of the SLO search and placement of an Allocate");
        Meter = meter;
    }

    /// <summary>The meter, for the observable instruments the state registers.</summary>
    public Meter Meter { get; }

    public void Allocated(string result, TimeSpan elapsed)
    {
        _allocations.Add(1, new KeyValuePair<string, object?>("result", result));
        _allocateDuration.Record(elapsed.TotalSeconds, new KeyValuePair<string, object?>("result", result));
    }

    public void Searched(TimeSpan elapsed) => _searchDuration.Record(elapsed.TotalSeconds);

    /// <summary>Registers the gauges read from the manager's state.</summary>
    public void Observe(Func<int> caches, Func<int> watchers, Func<IEnumerable<Measurement<long>>> serverMemory, Func<int> leading)
    {
        Meter.CreateObservableGauge("remotecache.manager.leader", leading, "{manager}",
            "1 while this manager leads its replicas (always, for a manager on SQLite), 0 while it follows or no leader is known");
        Meter.CreateObservableGauge("remotecache.manager.caches", caches, "{cache}", "Caches allocated");
        Meter.CreateObservableGauge("remotecache.manager.watchers", watchers, "{watcher}", "WatchEvents streams open");
        Meter.CreateObservableGauge("remotecache.manager.server.memory.lent", serverMemory, "By",
            "Bytes each server lends, as its last probe reported (tags: server, vm_type, state)");
    }

    /// <summary>Times a block: <c>using var t = ManagerMetrics.Time(); … t.Elapsed</c>.</summary>
    public static Stopwatch Time() => Stopwatch.StartNew();
}
