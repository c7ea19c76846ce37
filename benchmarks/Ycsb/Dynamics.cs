using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Charts;
using RemoteCache.Device;
using ScottPlot;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>One timeline of the dynamics: throughput per sample and what happened when (seconds from its start).</summary>
public sealed record DynamicsRun(string Kind, IReadOnlyList<DynamicsSample> Samples, IReadOnlyList<DynamicsEvent> Events, long Errors,
                                 double BeforeOpsPerSecond, double AfterOpsPerSecond)
{
    /// <summary>Throughput at the end against before the event (the cache level).</summary>
    public double Recovered => AfterOpsPerSecond / BeforeOpsPerSecond;

    public double? At(string what) => Events.FirstOrDefault(e => e.What == what)?.Seconds;
}

/// <summary>A sample: operations per second over the last period, and the share of the device's reads the cache tier served.</summary>
public sealed record DynamicsSample(double Seconds, double OpsPerSecond, double CacheShare);

public sealed record DynamicsEvent(string What, double Seconds);

/// <summary>
/// The main job's extended mode (<c>--dynamics</c>): YCSB on the remotecache device, throughput every 100 ms, across a
/// reclaim notice (the managed client moves the cache to a replacement) and across a killed cache server (the managed
/// client replaces it, the tiered device takes the tier back and warms it). Writes dynamics.json and dynamics.png.
/// </summary>
internal static class Dynamics
{
    public const string ChartFile = "dynamics.png";
    public const string JsonFile = "dynamics.json";

    private static readonly TimeSpan Period = TimeSpan.FromMilliseconds(100);

    // The event that starts each timeline comes after a quarter of it: the "before" level.
    private const double EventShare = 0.25;

    // How long past the timeline the manager's replacement is still waited for: on a loaded machine it can come after
    // the sampling stopped, and is then reported at the time it came rather than as missing.
    private static readonly TimeSpan LateReplacementLimit = TimeSpan.FromSeconds(30);

    // Names of the events (also in dynamics.json).
    public const string Notice = "reclaim notice", Killed = "server killed", FirstTierError = "first tier error",
        Failed = "failure reported", Replaced = "replacement in place", TierBack = "tier back", Serving = "cache tier serving again",
        FirstMove = "first region moved", LastMove = "last region moved", Announced = "reclaim announced", NoticeDelivered = "notice delivered";

    public static IReadOnlyList<DynamicsRun> Run<TValue, TValues>(Runner<TValue, TValues> runner, Runner<TValue, TValues>.Store store, ControlPlane controlPlane,
                                                                    YcsbOptions o)
        where TValue : unmanaged where TValues : IValues<TValue>
    {
        var tiered = store.Tiered ?? throw new InvalidOperationException("the dynamics run on the remotecache device");
        var cache = controlPlane.Cache ?? throw new InvalidOperationException("no managed cache");
        var distribution = o.Distributions[0];
        int threads = o.Threads.Max();
        var runs = new List<DynamicsRun>();
        foreach (string kind in new[] { "reclaim", "kill" })
        {
            var events = new ConcurrentQueue<DynamicsEvent>();
            var clock = Stopwatch.StartNew();
            var started = DateTimeOffset.UtcNow;
            double Now() => clock.Elapsed.TotalSeconds;
            using var stop = new CancellationTokenSource();
            var watch = Task.Run(() => WatchEventsAsync(cache, started, clock, events, stop.Token));
            // A thread of its own: the poll sleeps a millisecond at a time for the whole timeline, and on a pool thread it
            // would starve the managed client's flows and the manager of the threads they need.
            var poll = new Thread(() => PollTier(tiered, clock, events, stop.Token)) { IsBackground = true, Name = "dynamics poll" };
            poll.Start();
            Task? trigger = null;
            long cacheBefore = tiered.ReadsServedBy(0), ssdBefore = tiered.ReadsServedBy(1);
            var shares = new List<double>();
            var (samples, errors) = runner.RunTimeline(store, distribution, threads, o.DynamicsDuration, Period, at =>
            {
                long byCache = tiered.ReadsServedBy(0), bySsd = tiered.ReadsServedBy(1);
                long deviceReads = byCache - cacheBefore + bySsd - ssdBefore;
                shares.Add(deviceReads == 0 ? 0 : (double)(byCache - cacheBefore) / deviceReads);
                (cacheBefore, ssdBefore) = (byCache, bySsd);
                if (trigger is not null || at < o.DynamicsDuration * EventShare)
                    return;
                // Not on the sampling thread: a slow manager call must not stall the samples.
                events.Enqueue(new DynamicsEvent(kind == "reclaim" ? Notice : Killed, Now()));
                trigger = kind == "reclaim"
                    ? Task.Run(async () =>
                    {
                        await controlPlane.ReclaimAsync(o.DynamicsDuration).ConfigureAwait(false);
                        events.Enqueue(new DynamicsEvent(Announced, Now()));
                    })
                    : Task.Run(controlPlane.KillServer);
            });
            var late = Stopwatch.StartNew();
            while (trigger is not null && !events.Any(e => e.What == Replaced) && late.Elapsed < LateReplacementLimit && !watch.IsCompleted)
                Thread.Sleep(50);
            stop.Cancel();
            poll.Join();
            watch.ContinueWith(_ => { }).Wait();
            trigger?.GetAwaiter().GetResult();
            double eventAt = events.FirstOrDefault(e => e.What is Notice or Killed)?.Seconds ?? double.NaN;
            double before = samples.Where(s => s.Seconds <= eventAt).Select(s => s.OpsPerSecond).DefaultIfEmpty(double.NaN).Average();
            double after = samples.Skip(samples.Count * 3 / 4).Select(s => s.OpsPerSecond).DefaultIfEmpty(double.NaN).Average();
            var rows = samples.Select((s, i) => new DynamicsSample(s.Seconds, s.OpsPerSecond, i < shares.Count ? shares[i] : 0)).ToList();
            runs.Add(new DynamicsRun(kind, rows, events.OrderBy(e => e.Seconds).ToList(), errors, before, after));
        }
        return runs;
    }

    // The managed cache's events during this timeline, at the time they arrived here.
    private static async Task WatchEventsAsync(ManagedCache cache, DateTimeOffset started, Stopwatch clock, ConcurrentQueue<DynamicsEvent> events, CancellationToken stop)
    {
        bool moved = false;
        try
        {
            await foreach (var e in cache.Events.WithCancellation(stop).ConfigureAwait(false))
            {
                if (e.Time < started)
                    continue;  // replayed from before this timeline
                string? what = e switch
                {
                    ReclaimNoticeEvent => NoticeDelivered,
                    RegionMovedEvent when !moved => FirstMove,
                    ServerFailedEvent => Failed,
                    ServerReplacedEvent => Replaced,
                    _ => null,
                };
                moved |= e is RegionMovedEvent;
                if (what is not null)
                    events.Enqueue(new DynamicsEvent(what, clock.Elapsed.TotalSeconds));
                if (e is RegionMovedEvent m && m.Done == m.Total)
                    events.Enqueue(new DynamicsEvent(LastMove, clock.Elapsed.TotalSeconds));
            }
        }
        catch (OperationCanceledException)
        {
        }
    }

    // The tiered device seen from FASTER's side, every millisecond: its first failure, the tier back, reads served again.
    private static void PollTier(TieredDevice tiered, Stopwatch clock, ConcurrentQueue<DynamicsEvent> events, CancellationToken stop)
    {
        long failures = tiered.TierFailures;
        bool failed = false, back = false;
        long servedAtBack = 0;
        while (!stop.IsCancellationRequested)
        {
            if (!failed && tiered.TierFailures > failures)
            {
                failed = true;
                events.Enqueue(new DynamicsEvent(FirstTierError, clock.Elapsed.TotalSeconds));
            }
            if (failed && !back && tiered.FailedTiers.Count == 0)
            {
                back = true;
                servedAtBack = tiered.ReadsServedBy(0);
                events.Enqueue(new DynamicsEvent(TierBack, clock.Elapsed.TotalSeconds));
            }
            if (back && servedAtBack >= 0 && tiered.ReadsServedBy(0) > servedAtBack + 1000)
            {
                servedAtBack = -1;
                events.Enqueue(new DynamicsEvent(Serving, clock.Elapsed.TotalSeconds));
            }
            Thread.Sleep(1);
        }
    }

    public static string Summary(DynamicsRun run)
    {
        double origin = run.At(run.Kind == "reclaim" ? Notice : Killed) ?? double.NaN;
        string Time(string what) => run.At(what) is { } t ? string.Create(CultureInfo.InvariantCulture, $"{what} +{(t - origin) * 1000:0} ms") : $"{what}: none";
        var wanted = run.Kind == "reclaim" ? new[] { Announced, NoticeDelivered, FirstMove, LastMove, Replaced } : new[] { FirstTierError, Failed, Replaced, TierBack, Serving };
        return string.Create(CultureInfo.InvariantCulture,
            $"{run.Kind}: {run.BeforeOpsPerSecond / 1e3:0} K ops/s before, {run.AfterOpsPerSecond / 1e3:0} K at the end ({run.Recovered:0.00}x); {string.Join(", ", wanted.Select(Time))}; wrong reads {run.Errors}");
    }

    public static void Write(string directory, IReadOnlyList<DynamicsRun> runs, string title)
    {
        File.WriteAllText(Path.Combine(directory, JsonFile), JsonSerializer.Serialize(new { title, runs }, new JsonSerializerOptions { WriteIndented = true, NumberHandling = System.Text.Json.Serialization.JsonNumberHandling.AllowNamedFloatingPointLiterals }));
        ChartKit.UseSansSerif();
        var plot = new Plot();
        var colors = new Dictionary<string, Color> { ["reclaim"] = Colors.SteelBlue, ["kill"] = Colors.OrangeRed };
        foreach (var run in runs)
        {
            var line = plot.Add.ScatterLine(run.Samples.Select(s => s.Seconds).ToArray(), run.Samples.Select(s => s.OpsPerSecond / 1e3).ToArray(), colors[run.Kind]);
            line.LineWidth = 2;
            line.LegendText = run.Kind == "reclaim" ? "reclaim notice: regions moved to a replacement" : "cache server killed: replaced, tier taken back and warmed";
            foreach (var e in run.Events.Where(e => e.What is Notice or Killed or Replaced or TierBack))
            {
                var marker = plot.Add.VerticalLine(e.Seconds, 1.5f, colors[run.Kind]);
                marker.LinePattern = e.What switch { Notice or Killed => LinePattern.Solid, Replaced => LinePattern.Dashed, _ => LinePattern.Dotted };
                marker.LegendText = $"{run.Kind}: {e.What}";
            }
        }
        plot.Title(title);
        plot.Axes.Bottom.Label.Text = "seconds";
        plot.Axes.Left.Label.Text = "K ops/s per 100 ms";
        double top = runs.SelectMany(r => r.Samples).Select(x => x.OpsPerSecond / 1e3).DefaultIfEmpty(1).Max();
        plot.Axes.SetLimitsY(0, top * 1.15);
        plot.ShowLegend(Edge.Right);
        plot.SavePng(Path.Combine(directory, ChartFile), 1400, 520);
    }
}
