using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Diagnostics.Metrics;
using System.Runtime.CompilerServices;

namespace RemoteCache;

/// <summary>
/// The names of RemoteCache's <see cref="System.Diagnostics.Metrics"/> instruments. Every client records on the meter
/// <see cref="MeterName"/> (from <see cref="RemoteCacheOptions.MeterFactory"/> when given, a process-wide one
/// otherwise), tagged with <see cref="CacheTag"/> and <see cref="OperationTag"/>; recording allocates nothing.
/// </summary>
public static class RemoteCacheMetrics
{
    /// <summary>The meter's name: give it to <c>AddMeter</c> (OpenTelemetry) or a <see cref="MeterListener"/>.</summary>
    public const string MeterName = "RemoteCache";

    /// <summary>Counter of finished operations ({operation}), failed ones included.</summary>
    public const string Operations = "remotecache.client.operations";

    /// <summary>Counter of bytes moved by operations that succeeded (By).</summary>
    public const string Bytes = "remotecache.client.bytes";

    /// <summary>Counter of failed operations ({operation}), also tagged with <see cref="StatusTag"/>.</summary>
    public const string Errors = "remotecache.client.errors";

    /// <summary>Histogram of operation durations from start to completion (s).</summary>
    public const string Duration = "remotecache.client.operation.duration";

    /// <summary>Up-down counter of operations started and not finished yet ({operation}), per cache.</summary>
    public const string InFlight = "remotecache.client.operations.in_flight";

    /// <summary>Tag: the cache's name (<see cref="RemoteCacheOptions.Name"/>).</summary>
    public const string CacheTag = "remotecache.cache";

    /// <summary>Tag: "read" or "write".</summary>
    public const string OperationTag = "remotecache.operation";

    /// <summary>Tag of <see cref="Errors"/>: the <see cref="RemoteCacheStatus"/> name.</summary>
    public const string StatusTag = "remotecache.status";
}

/// <summary>The instruments of one meter, shared by the clients that record on it.</summary>
internal sealed class Instruments
{
    private static readonly string? s_version = typeof(Instruments).Assembly.GetName().Version?.ToString();
    private static readonly Lazy<Instruments> s_shared = new(() => new Instruments(new Meter(RemoteCacheMetrics.MeterName, s_version)));
    private static readonly ConditionalWeakTable<Meter, Instruments> s_byMeter = new();

    // From a microsecond (a one-sided shm read) to ten seconds (the default operation timeout), about three per decade:
    // the SDKs' default buckets are for milliseconds and would put every operation in the first.
    private static readonly double[] s_durationBuckets =
    {
        1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    };

    private readonly ConcurrentDictionary<RemoteCacheClient, KeyValuePair<string, object?>> _clients = new();

    private Instruments(Meter meter)
    {
        Operations = meter.CreateCounter<long>(RemoteCacheMetrics.Operations, "{operation}", "Operations finished, failed ones included");
        Bytes = meter.CreateCounter<long>(RemoteCacheMetrics.Bytes, "By", "Bytes read or written by operations that succeeded");
        Errors = meter.CreateCounter<long>(RemoteCacheMetrics.Errors, "{operation}", "Operations that failed, by status");
        Duration = meter.CreateHistogram<double>(RemoteCacheMetrics.Duration, "s", "Time from an operation's start to its completion",
                                                 tags: null, advice: new InstrumentAdvice<double> { HistogramBucketBoundaries = s_durationBuckets });
        meter.CreateObservableUpDownCounter(RemoteCacheMetrics.InFlight, ObserveInFlight, "{operation}",
                                            "Operations started and not finished yet");
    }

    public Counter<long> Operations { get; }
    public Counter<long> Bytes { get; }
    public Counter<long> Errors { get; }
    public Histogram<double> Duration { get; }

    /// <summary>The instruments of <paramref name="factory"/>'s RemoteCache meter, or the process-wide ones.</summary>
    public static Instruments For(IMeterFactory? factory)
    {
        if (factory is null)
            return s_shared.Value;
        // A factory hands out one meter per name and version, so the clients of one factory share these instruments.
        var meter = factory.Create(new MeterOptions(RemoteCacheMetrics.MeterName) { Version = s_version });
        return s_byMeter.GetValue(meter, static m => new Instruments(m));
    }

    public void Register(RemoteCacheClient client, KeyValuePair<string, object?> cacheTag) => _clients[client] = cacheTag;

    public void Unregister(RemoteCacheClient client) => _clients.TryRemove(client, out _);

    private IEnumerable<Measurement<long>> ObserveInFlight()
    {
        foreach (var (client, tag) in _clients)
            yield return new Measurement<long>(client.Outstanding, tag);
    }
}

/// <summary>What one client records: its tags made once, so that recording allocates nothing.</summary>
internal sealed class ClientMetrics
{
    private static readonly KeyValuePair<string, object?> s_read = new(RemoteCacheMetrics.OperationTag, "read");
    private static readonly KeyValuePair<string, object?> s_write = new(RemoteCacheMetrics.OperationTag, "write");
    private static readonly Dictionary<RemoteCacheStatus, KeyValuePair<string, object?>> s_statuses = MakeStatusTags();

    private readonly Instruments _instruments;
    private readonly KeyValuePair<string, object?> _cache;

    public ClientMetrics(Instruments instruments, string cacheName)
    {
        _instruments = instruments;
        _cache = new KeyValuePair<string, object?>(RemoteCacheMetrics.CacheTag, cacheName);
    }

    public KeyValuePair<string, object?> CacheTag => _cache;

    /// <summary>Whether anyone listens to any instrument (checked once per batch of completions).</summary>
    public bool Enabled =>
        _instruments.Operations.Enabled || _instruments.Bytes.Enabled || _instruments.Errors.Enabled || MeasuresDuration;

    /// <summary>Whether operations need a start time.</summary>
    public bool MeasuresDuration => _instruments.Duration.Enabled;

    public void Completed(bool write, long length, long started, RemoteCacheStatus status)
    {
        var operation = write ? s_write : s_read;
        _instruments.Operations.Add(1, _cache, operation);
        if (status == RemoteCacheStatus.Ok)
            _instruments.Bytes.Add(length, _cache, operation);
        else
            _instruments.Errors.Add(1, _cache, operation, StatusTag(status));
        if (started != 0)
            _instruments.Duration.Record(Stopwatch.GetElapsedTime(started).TotalSeconds, _cache, operation);
    }

    private static KeyValuePair<string, object?> StatusTag(RemoteCacheStatus status) =>
        s_statuses.TryGetValue(status, out var tag) ? tag : new(RemoteCacheMetrics.StatusTag, status.ToString());

    private static Dictionary<RemoteCacheStatus, KeyValuePair<string, object?>> MakeStatusTags()
    {
        var tags = new Dictionary<RemoteCacheStatus, KeyValuePair<string, object?>>();
        foreach (var status in Enum.GetValues<RemoteCacheStatus>())
            tags[status] = new(RemoteCacheMetrics.StatusTag, status.ToString());
        return tags;
    }
}
