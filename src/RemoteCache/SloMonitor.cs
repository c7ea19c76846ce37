using System;
using System.Diagnostics;
using System.Threading;
using Microsoft.Extensions.Logging;
using RemoteCache.Slo;

namespace RemoteCache;

/// <summary>
/// A client's SLO watch: every <see cref="RemoteCacheSlo.Window"/> it turns the client's operation totals and sampled
/// latencies into an <see cref="SloWindow"/>, has the <see cref="SloTuner"/> judge it, reconfigures the cache when the
/// tuner retunes, and reports (event, conformance gauge, logs).
/// </summary>
internal sealed class SloMonitor : IDisposable
{
    private readonly RemoteCacheClient _client;
    private readonly SloTuner _tuner;
    private readonly LatencySamples _samples;
    private readonly ILogger _logger;
    private readonly Timer _timer;
    private readonly object _gate = new();
    private (OperationTotals Totals, (long ReadTicks, long ReadCount, long WriteTicks, long WriteCount) Samples, long At) _last;
    private bool? _conformant;
    private bool _disposed;

    public SloMonitor(RemoteCacheClient client, SloTuner tuner, LatencySamples samples, TimeSpan window, ILogger logger)
    {
        _client = client;
        _tuner = tuner;
        _samples = samples;
        _logger = logger;
        _last = (client.Totals(), samples.Read(), Stopwatch.GetTimestamp());
        _timer = new Timer(static m => ((SloMonitor)m!).Tick(), this, window, window);
    }

    /// <summary>The last window judged, or null before the first.</summary>
    public SloObservation? Last { get; private set; }

    /// <summary>1 while conformant, 0 while not, null before a window could be judged.</summary>
    public int? Conformance => _conformant is { } c ? (c ? 1 : 0) : null;

    private void Tick()
    {
        SloObservation observation;
        lock (_gate)
        {
            if (_disposed)
                return;
            var now = (Totals: _client.Totals(), Samples: _samples.Read(), At: Stopwatch.GetTimestamp());
            double seconds = (double)(now.At - _last.At) / Stopwatch.Frequency;
            var window = new SloWindow(
                TimeSpan.FromSeconds(seconds),
                (now.Totals.ReadOps - _last.Totals.ReadOps) / seconds,
                (now.Totals.WriteOps - _last.Totals.WriteOps) / seconds,
                MeanUs(now.Samples.ReadTicks - _last.Samples.ReadTicks, now.Samples.ReadCount - _last.Samples.ReadCount),
                MeanUs(now.Samples.WriteTicks - _last.Samples.WriteTicks, now.Samples.WriteCount - _last.Samples.WriteCount));
            _last = now;
            observation = _tuner.Observe(window);
            Last = observation;
            if (observation.Judged && observation.Conformant != _conformant)
            {
                _conformant = observation.Conformant;
                Log.SloConformance(_logger, _client.Name, observation.Conformant ? "meets" : "misses", observation.Config, Describe(window));
            }
            if (observation.RetunedTo is { } next)
            {
                try
                {
                    _client.Reconfigure(next);
                    Log.SloRetuned(_logger, _client.Name, observation.Config, next, observation.MissingFor.TotalSeconds, Describe(window));
                }
                catch (Exception e) when (e is RemoteCacheException or ObjectDisposedException or ArgumentException)
                {
                    Log.SloRetuneFailed(_logger, _client.Name, next, e);
                }
            }
            else if (observation.Note is { } note)
            {
                Log.SloNotRetuned(_logger, _client.Name, note);
            }
        }
        _client.RaiseSloObserved(observation);
    }

    // A window's mean needs a few samples (one operation in 16 is timed): fewer say nothing.
    private const int MinSamples = 8;

    private static double? MeanUs(long ticks, long count) =>
        count < MinSamples ? null : ticks * 1e6 / Stopwatch.Frequency / count;

    private static string Describe(SloWindow w) => string.Create(System.Globalization.CultureInfo.InvariantCulture,
        $"reads {w.ReadOpsPerSecond:G4}/s mean {(w.ReadMeanUs is { } r ? $"{r:G4} µs" : "n/a")}, writes {w.WriteOpsPerSecond:G4}/s mean {(w.WriteMeanUs is { } x ? $"{x:G4} µs" : "n/a")}");

    public void Dispose()
    {
        lock (_gate)
            _disposed = true;
        _timer.Dispose();
    }
}
