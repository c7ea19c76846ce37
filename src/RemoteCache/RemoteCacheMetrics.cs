using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Diagnostics.Metrics;
using System.Runtime.CompilerServices;
using System.Threading;

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

    /// <summary>Counter (observable: the client's totals, read when collected) of finished operations ({operation}), failed ones included.</summary>
    public const string Operations = "remotecache.client.operations";

    /// <summary>Counter (observable, like <see cref="Operations"/>) of bytes moved by operations that succeeded (By).</summary>
    public const string Bytes = "remotecache.client.bytes";

    /// <summary>Counter of failed operations ({operation}), also tagged with <see cref="StatusTag"/>.</summary>
    public const string Errors = "remotecache.client.errors";

    /// <summary>
    /// Histogram of operation durations from start to completion (s), of a sample: one operation in 16 on each lane
    /// (timing every one would cost more than an 8-byte shared-memory read itself).
    /// </summary>
    public const string Duration = "remotecache.client.operation.duration";

    /// <summary>Up-down counter of operations started and not finished yet ({operation}), per cache.</summary>
    public const string InFlight = "remotecache.client.operations.in_flight";

    /// <summary>
    /// Gauge of a cache opened for an SLO: 1 while its last judged window met the SLO, 0 while not (no measurement before
    /// the first judged window, or without an SLO).
    /// </summary>
    public const string SloConformance = "remotecache.client.slo.conformance";

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
    private readonly Dictionary<KeyValuePair<string, object?>, OperationTotals> _retired = new();

    private Instruments(Meter meter)
    {
        // Operations and bytes are the lanes' own totals, observed when a reader collects: counting costs an
        // addition per operation, where a synchronous counter would cost a listener call per operation and measurement.
        meter.CreateObservableCounter(RemoteCacheMetrics.Operations, () => Observe(static t => (t.ReadOps, t.WriteOps)),
                                      "{operation}", "Operations finished, failed ones included");
        meter.CreateObservableCounter(RemoteCacheMetrics.Bytes, () => Observe(static t => (t.ReadBytes, t.WriteBytes)),
                                      "By", "Bytes read or written by operations that succeeded");
        Errors = meter.CreateCounter<long>(RemoteCacheMetrics.Errors, "{operation}", "Operations that failed, by status");
        Duration = meter.CreateHistogram<double>(
            RemoteCacheMetrics.Duration, "s",
            $"Time from an operation's start to its completion, of one operation in {ClientMetrics.DurationSampling} per lane",
            tags: null, advice: new InstrumentAdvice<double> { HistogramBucketBoundaries = s_durationBuckets });
        meter.CreateObservableUpDownCounter(RemoteCacheMetrics.InFlight, ObserveInFlight, "{operation}",
                                            "Operations started and not finished yet");
        meter.CreateObservableGauge(RemoteCacheMetrics.SloConformance, ObserveSloConformance, "1",
                                    "1 while the cache's last judged window met its SLO, 0 while not");
    }

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

    /// <summary>
    /// Takes a closing client out; its totals stay in the counters (a counter does not go back when a client closes,
    /// and an exporter's last collection after the clients closed still sees them).
    /// </summary>
    public void Unregister(RemoteCacheClient client)
    {
        if (!_clients.TryRemove(client, out var tag))
            return;
        var totals = client.Totals();
        lock (_retired)
            _retired[tag] = _retired.TryGetValue(tag, out var earlier) ? earlier + totals : totals;
    }

    private IEnumerable<Measurement<long>> Observe(Func<OperationTotals, (long Read, long Write)> pick)
    {
        // One measurement per cache name and operation: clients of the same name, open or closed, add up.
        Dictionary<KeyValuePair<string, object?>, OperationTotals> byCache;
        lock (_retired)
            byCache = new(_retired);
        foreach (var (client, tag) in _clients)
            byCache[tag] = byCache.TryGetValue(tag, out var other) ? other + client.Totals() : client.Totals();
        foreach (var (tag, totals) in byCache)
        {
            var (read, write) = pick(totals);
            yield return new Measurement<long>(read, tag, ClientMetrics.ReadTag);
            yield return new Measurement<long>(write, tag, ClientMetrics.WriteTag);
        }
    }

    private IEnumerable<Measurement<int>> ObserveSloConformance()
    {
        foreach (var (client, tag) in _clients)
            if (client.SloConformance is { } conformance)
                yield return new Measurement<int>(conformance, tag);
    }

    private IEnumerable<Measurement<long>> ObserveInFlight()
    {
        foreach (var (client, tag) in _clients)
            yield return new Measurement<long>(client.Outstanding, tag);
    }
}

/// <summary>Operations finished and bytes moved by a client's lanes since it opened.</summary>
internal record struct OperationTotals(long ReadOps, long WriteOps, long ReadBytes, long WriteBytes)
{
    public static OperationTotals operator +(OperationTotals a, OperationTotals b) =>
        new(a.ReadOps + b.ReadOps, a.WriteOps + b.WriteOps, a.ReadBytes + b.ReadBytes, a.WriteBytes + b.WriteBytes);
}

/// <summary>Sums of sampled operation durations (Stopwatch ticks) and their counts, per operation; added to from any thread.</summary>
internal sealed class LatencySamples
{
    private long _readTicks, _readCount, _writeTicks, _writeCount;

    public void Add(bool write, long ticks)
    {
        if (write)
        {
            Interlocked.Add(ref _writeTicks, ticks);
            Interlocked.Increment(ref _writeCount);
        }
        else
        {
            Interlocked.Add(ref _readTicks, ticks);
            Interlocked.Increment(ref _readCount);
        }
    }

    /// <summary>The sums so far (each pair read racily: a window's mean may be off by one sample).</summary>
    public (long ReadTicks, long ReadCount, long WriteTicks, long WriteCount) Read() =>
        (Interlocked.Read(ref _readTicks), Interlocked.Read(ref _readCount), Interlocked.Read(ref _writeTicks), Interlocked.Read(ref _writeCount));
}

/// <summary>What one client records synchronously: its tags made once, so that recording allocates nothing.</summary>
internal sealed class ClientMetrics
{
    /// <summary>One operation in this many, per lane, is timed for the duration histogram (a power of two).</summary>
    public const int DurationSampling = 16;

    public static readonly KeyValuePair<string, object?> ReadTag = new(RemoteCacheMetrics.OperationTag, "read");
    public static readonly KeyValuePair<string, object?> WriteTag = new(RemoteCacheMetrics.OperationTag, "write");
    private static readonly Dictionary<RemoteCacheStatus, KeyValuePair<string, object?>> s_statuses = MakeStatusTags();

    private readonly Instruments _instruments;
    private readonly KeyValuePair<string, object?> _cache;

    public ClientMetrics(Instruments instruments, string cacheName)
    {
        _instruments = instruments;
        _cache = new KeyValuePair<string, object?>(RemoteCacheMetrics.CacheTag, cacheName);
    }

    public KeyValuePair<string, object?> CacheTag => _cache;

    /// <summary>The sampled latencies an SLO monitor reads, when the client has an SLO.</summary>
    public LatencySamples? Samples { get; set; }

    /// <summary>Whether sampled operations need a start time.</summary>
    public bool MeasuresDuration => _instruments.Duration.Enabled || Samples is not null;

    public void Timed(bool write, long started)
    {
        long elapsed = Stopwatch.GetTimestamp() - started;
        if (_instruments.Duration.Enabled)
            _instruments.Duration.Record((double)elapsed / Stopwatch.Frequency, _cache, write ? WriteTag : ReadTag);
        Samples?.Add(write, elapsed);
    }

    public void Failed(bool write, RemoteCacheStatus status) =>
        _instruments.Errors.Add(1, _cache, write ? WriteTag : ReadTag, StatusTag(status));

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
