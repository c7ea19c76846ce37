using System;
using System.Diagnostics.Metrics;
using System.Threading;

namespace RemoteCache.Benchmarks.Micro;

/// <summary>
/// With <c>RC_BENCH_METRICS=1</c> the benchmarks run with every instrument of the <see cref="RemoteCacheMetrics.MeterName"/>
/// meter enabled and listened to, the way an exporter (OpenTelemetry) listens: each measurement is aggregated (sums and
/// counts), so the figures include what recording costs and the Allocated column shows whether it allocates.
/// </summary>
internal static class MetricsListener
{
    public const string EnvironmentVariable = "RC_BENCH_METRICS";

    private static MeterListener? s_listener;
    private static long s_longs, s_doubles;
    private static double s_sum;

    public static bool Enabled => Environment.GetEnvironmentVariable(EnvironmentVariable) == "1";

    /// <summary>Starts listening if <see cref="EnvironmentVariable"/> asks for it; returns whether it does.</summary>
    public static bool StartIfAsked()
    {
        if (!Enabled || s_listener is not null)
            return s_listener is not null;
        var listener = new MeterListener
        {
            InstrumentPublished = (instrument, l) =>
            {
                if (instrument.Meter.Name == RemoteCacheMetrics.MeterName)
                    l.EnableMeasurementEvents(instrument);
            },
        };
        listener.SetMeasurementEventCallback<long>((_, value, _, _) => Interlocked.Add(ref s_longs, value));
        listener.SetMeasurementEventCallback<double>((_, value, _, _) =>
        {
            Interlocked.Increment(ref s_doubles);
            s_sum += value;  // racy on purpose: an aggregate's cost, not its exactness, is what is measured
        });
        listener.Start();
        s_listener = listener;
        return true;
    }

    /// <summary>What was aggregated (a check that measurements arrived).</summary>
    public static string Summary => $"metrics listener: {s_longs} counted, {s_doubles} durations ({s_sum:F3} s in all)";
}
