using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Linq;
using RemoteCache.Charts;
using ScottPlot;
using ScottPlot.TickGenerators;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>
/// The PNG charts of a run, drawn with ScottPlot: <c>chart.png</c> (after Redy's Fig. 18: throughput per device,
/// grouped by key distribution, median rounds), <c>rounds.png</c> (every round's throughput, so that a noisy round
/// shows) and <c>latency-cdf.png</c> (the latency distribution of each device's median round). Each figure is a
/// header (title, subtitle, one legend of the devices) above one or more panels; a device has the same colour in
/// all. ScottPlot 5 has no logarithmic axis: the log-scaled axes plot log10 of the values, with ticks labelled with
/// the values (<see cref="ChartKit.LogTicks"/>). Phases without a throughput (a failed device's) are left out.
/// </summary>
public static class Chart
{
    /// <summary>The files <see cref="WriteAll"/> writes, in that order.</summary>
    public static readonly IReadOnlyList<string> Files = new[] { "chart.png", "rounds.png", "latency-cdf.png" };

    private const int Width = 900;
    private const int Height = 520;
    private const int HeaderHeight = 100;
    private const float PanelTitleSize = 15;
    private const float AxisLabelSize = 14;

    /// <summary>The same colour for a device in every chart (the devices that scripts/run.sh runs first).</summary>
    private static readonly Dictionary<string, Color> KnownColors = new()
    {
        ["memory"] = new Color(148, 103, 189, 255),
        ["ram-inline"] = new Color(127, 127, 127, 255),
        ["remotecache"] = new Color(214, 39, 40, 255),
        ["remotecache-encrypted"] = new Color(140, 86, 75, 255),
        ["ssd"] = new Color(31, 119, 180, 255),
        ["smb"] = new Color(255, 127, 14, 255),
        ["faster-local"] = new Color(44, 160, 44, 255),
    };

    private static readonly Color[] OtherColors =
    {
        new(140, 86, 75, 255), new(227, 119, 194, 255), new(23, 190, 207, 255), new(188, 189, 34, 255),
    };

    private static readonly MarkerShape[] Shapes =
    {
        MarkerShape.FilledCircle, MarkerShape.FilledSquare, MarkerShape.FilledDiamond, MarkerShape.FilledTriangleUp,
        MarkerShape.FilledTriangleDown, MarkerShape.OpenCircle,
    };

    static Chart() => ChartKit.UseSansSerif();

    /// <summary>
    /// Writes the three charts of a run (<see cref="Files"/>) into <paramref name="directory"/> from every round's
    /// results; returns their paths.
    /// </summary>
    public static IReadOnlyList<string> WriteAll(string directory, IReadOnlyList<RunResult> results, string title)
    {
        var paths = Files.Select(f => Path.Combine(directory, f)).ToArray();
        Write(paths[0], Summary.Medians(results), title);
        WriteRounds(paths[1], results, title);
        WriteLatencyCdf(paths[2], results, title);
        return paths;
    }

    /// <summary>
    /// Redy's Fig. 18: throughput (ops/s, log scale) per device, grouped by key distribution, at the largest thread
    /// count, one bar per row of <paramref name="medians"/> (each device's median round).
    /// </summary>
    public static void Write(string path, IReadOnlyList<RunResult> medians, string title)
    {
        const string Subtitle = "Throughput at {0}, each device's median round (higher is better)";
        var rows = Measured(medians);
        if (rows.Count == 0)
        {
            SaveNothing(path, title, string.Format(CultureInfo.InvariantCulture, Subtitle, "the largest thread count"));
            return;
        }
        int threads = rows.Max(r => r.Threads);
        rows = rows.Where(r => r.Threads == threads).ToList();
        var devices = Devices(rows);
        var groups = rows.Select(r => r.Distribution).Distinct().ToList();

        var plot = Panel(null, "key distribution", "throughput (ops/s, log scale)");
        // Bars start at a power of ten at least 0.3 decades below the lowest (so that every bar shows); room above
        // the tallest for its label.
        var logs = rows.Select(r => Math.Log10(r.OpsPerSecond)).ToList();
        double lo = Math.Floor(logs.Min() - 0.3), top = logs.Max() + 0.3;
        var ticks = new NumericManual();
        for (int g = 0; g < groups.Count; g++)
        {
            double x0 = g * (devices.Count + 1);  // one empty slot between groups
            ticks.AddMajor(x0 + (devices.Count - 1) / 2.0, groups[g]);
            for (int d = 0; d < devices.Count; d++)
            {
                var r = rows.FirstOrDefault(x => x.Distribution == groups[g] && x.Device == devices[d]);
                if (r is null)
                    continue;
                var bars = plot.Add.Bar(ChartKit.LogBar(x0 + d, r.OpsPerSecond, lo, ColorOf(devices[d])));
                bars.ValueLabelStyle.FontSize = 12;
            }
        }
        plot.Axes.Bottom.TickGenerator = ticks;
        plot.Axes.Bottom.TickLabelStyle.FontSize = 14;
        plot.Axes.Left.TickGenerator = ChartKit.LogTicks(lo, top, ChartKit.Si);
        plot.Grid.XAxisStyle.IsVisible = false;
        plot.Axes.SetLimits(-0.7, groups.Count * (devices.Count + 1) - 1.3, lo, top);

        Save(path, Width, Height, title, string.Format(CultureInfo.InvariantCulture, Subtitle, Threads(threads)),
             LegendItems(devices, lines: false), new[] { plot }, columns: 1);
    }

    /// <summary>
    /// Every round's throughput: a panel per (distribution, threads), rows by thread count and columns by
    /// distribution; in each, a line per device over rounds 1..N (log scale, the same in every panel).
    /// </summary>
    public static void WriteRounds(string path, IReadOnlyList<RunResult> results, string title)
    {
        var rows = Measured(results);
        if (rows.Count == 0)
        {
            SaveNothing(path, title, "Throughput in each round");
            return;
        }
        var devices = Devices(rows);
        var distributions = rows.Select(r => r.Distribution).Distinct().ToList();
        var threadCounts = rows.Select(r => r.Threads).Distinct().OrderBy(t => t).ToList();
        int rounds = rows.Max(r => r.Round);
        var (lo, hi) = ChartKit.LogRange(rows.Select(r => r.OpsPerSecond));

        var panels = new List<Plot>();
        foreach (int threads in threadCounts)
        {
            foreach (var distribution in distributions)
            {
                var plot = Panel($"{distribution}, {Threads(threads)}", "round", "ops/s (log scale)");
                for (int d = 0; d < devices.Count; d++)
                {
                    var points = rows.Where(r => r.Device == devices[d] && r.Distribution == distribution && r.Threads == threads)
                                     .OrderBy(r => r.Round).ToList();
                    if (points.Count == 0)
                        continue;
                    var line = plot.Add.ScatterLine(points.Select(r => (double)r.Round).ToArray(),
                                                    points.Select(r => Math.Log10(r.OpsPerSecond)).ToArray(), ColorOf(devices[d]));
                    line.LineWidth = 2;
                    line.MarkerShape = Shapes[d % Shapes.Length];
                    line.MarkerSize = 8;
                }
                var ticks = new NumericManual();
                for (int round = 1; round <= rounds; round++)
                    ticks.AddMajor(round, round.ToString(CultureInfo.InvariantCulture));
                plot.Axes.Bottom.TickGenerator = ticks;
                plot.Axes.Left.TickGenerator = ChartKit.LogTicks(lo, hi, ChartKit.Si);
                plot.Axes.SetLimits(0.7, rounds + 0.3, lo, hi);
                panels.Add(plot);
            }
        }
        int height = Math.Max(Height, HeaderHeight + 250 * threadCounts.Count);
        Save(path, Width, height, title, $"Throughput in each round, {rounds} round{(rounds == 1 ? "" : "s")} (higher is better)",
             LegendItems(devices, lines: true), panels, columns: distributions.Count);
    }

    /// <summary>
    /// Latency CDFs at the largest thread count, a panel per distribution: for each device, the fraction of
    /// operations completed within a latency (log scale), from the histogram of its median round by throughput.
    /// </summary>
    public static void WriteLatencyCdf(string path, IReadOnlyList<RunResult> results, string title)
    {
        const string Subtitle = "Latency CDF at {0}, each device's median round by throughput (further left is better)";
        var rows = Measured(results);
        if (rows.Count == 0)
        {
            SaveNothing(path, title, string.Format(CultureInfo.InvariantCulture, Subtitle, "the largest thread count"));
            return;
        }
        int threads = rows.Max(r => r.Threads);
        var devices = Devices(rows);
        var medians = Summary.Medians(rows.Where(r => r.Threads == threads));
        var distributions = medians.Select(r => r.Distribution).Distinct().ToList();

        // One latency range for every panel.
        var latencies = medians.Where(r => r.Latency is { Count: > 0 })
                               .SelectMany(r => r.Latency!.Cdf().Select(p => Us(p.UpperNs))).ToList();
        var (lo, hi) = latencies.Count > 0 ? ChartKit.LogRange(latencies) : (0.0, 3.0);

        var panels = new List<Plot>();
        foreach (var distribution in distributions)
        {
            var plot = Panel(distribution, "latency (log scale)", "fraction of operations ≤ latency");
            bool any = false;
            for (int d = 0; d < devices.Count; d++)
            {
                var h = medians.FirstOrDefault(r => r.Device == devices[d] && r.Distribution == distribution)?.Latency;
                if (h is null || h.Count == 0)
                    continue;
                var cdf = h.Cdf().ToList();
                var xs = new List<double> { Math.Log10(Us(cdf[0].UpperNs)) };
                var ys = new List<double> { 0 };
                foreach (var (upperNs, fraction) in cdf)
                {
                    xs.Add(Math.Log10(Us(upperNs)));
                    ys.Add(fraction);
                }
                var line = plot.Add.ScatterLine(xs.ToArray(), ys.ToArray(), ColorOf(devices[d]));
                line.LineWidth = 2.5f;
                line.MarkerSize = 0;
                any = true;
            }
            foreach (var (q, label) in new[] { (0.5, "p50"), (0.99, "p99") })
            {
                plot.Add.HorizontalLine(q, 1, Colors.Black.WithOpacity(0.4), LinePattern.Dashed);
                var text = plot.Add.Text(label, lo, q);
                text.LabelFontSize = 11;
                text.LabelFontColor = Colors.Black.WithOpacity(0.6);
                text.LabelAlignment = Alignment.LowerLeft;
                text.LabelOffsetX = 3;
            }
            if (!any)
            {
                var text = plot.Add.Text("no latency histogram", (lo + hi) / 2, 0.5);
                text.LabelFontSize = 14;
                text.LabelAlignment = Alignment.MiddleCenter;
            }
            plot.Axes.Bottom.TickGenerator = ChartKit.LogTicks(lo, hi, ChartKit.Duration);
            plot.Axes.SetLimits(lo, hi, 0, 1.03);
            panels.Add(plot);
        }
        Save(path, Width, Height, title, string.Format(CultureInfo.InvariantCulture, Subtitle, Threads(threads)),
             LegendItems(devices, lines: true), panels, columns: distributions.Count);
    }

    /// <summary>Rows with a positive, finite throughput (a failed phase has none to draw on a log scale).</summary>
    private static List<RunResult> Measured(IEnumerable<RunResult> results) =>
        results.Where(r => r.OpsPerSecond > 0 && double.IsFinite(r.OpsPerSecond)).ToList();

    /// <summary>The figure of a run in which no phase measured a throughput: it says so.</summary>
    private static void SaveNothing(string path, string title, string subtitle)
    {
        var plot = new Plot();
        plot.HideAxesAndGrid();
        plot.Add.Annotation("no phase measured a throughput", Alignment.MiddleCenter).LabelFontSize = 16;
        Save(path, Width, Height, title, subtitle, new List<LegendItem>(), new[] { plot }, columns: 1);
    }

    private static List<string> Devices(IEnumerable<RunResult> rows) => rows.Select(r => r.Device).Distinct().ToList();

    private static Color ColorOf(string device) =>
        KnownColors.TryGetValue(device, out var c) ? c : OtherColors[(uint)StableHash(device) % OtherColors.Length];

    private static int StableHash(string s)
    {
        int h = 17;
        foreach (char c in s)
            h = h * 31 + c;
        return h;
    }

    private static double Us(long ns) => Math.Max(ns, 1) / 1000.0;

    private static string Threads(int threads) => $"{threads} thread{(threads == 1 ? "" : "s")}";

    /// <summary>A panel: white, a light grid, axis labels; the header carries the title and legend.</summary>
    private static Plot Panel(string? title, string xLabel, string yLabel)
    {
        var plot = new Plot();
        if (title is not null)
            plot.Title(title, PanelTitleSize);
        plot.XLabel(xLabel, AxisLabelSize);
        plot.YLabel(yLabel, AxisLabelSize);
        plot.Axes.Bottom.TickLabelStyle.FontSize = 12;
        plot.Axes.Left.TickLabelStyle.FontSize = 12;
        plot.Grid.MajorLineColor = Colors.Black.WithOpacity(0.15);
        plot.Grid.MinorLineColor = Colors.Black.WithOpacity(0.05);
        plot.Grid.MinorLineWidth = 1;
        return plot;
    }

    private static List<LegendItem> LegendItems(List<string> devices, bool lines) =>
        devices.Select((device, d) => lines
            ? new LegendItem
            {
                LabelText = device,
                LineColor = ColorOf(device),
                LineWidth = 2,
                MarkerShape = Shapes[d % Shapes.Length],
                MarkerSize = 8,
                MarkerFillColor = ColorOf(device),
                MarkerLineColor = ColorOf(device),
            }
            : new LegendItem { LabelText = device, FillColor = ColorOf(device) })
        .ToList();

    /// <summary>
    /// Writes a figure: a header (title, subtitle, legend) across the top, the panels below in a grid of
    /// <paramref name="columns"/> columns.
    /// </summary>
    private static void Save(string path, int width, int height, string title, string subtitle, List<LegendItem> legend,
                             IReadOnlyList<Plot> panels, int columns)
    {
        var header = new Plot();
        header.HideAxesAndGrid();
        header.Title($"{title}\n{subtitle}", 16);
        header.Axes.Title.Label.Bold = true;
        header.Axes.SetLimits(0, 1, 0, 1);
        header.ShowLegend(legend, Alignment.LowerCenter);
        header.Legend.Orientation = Orientation.Horizontal;
        header.Legend.TightHorizontalWrapping = true;
        header.Legend.FontSize = 14;
        header.Legend.OutlineWidth = 0;
        header.Legend.BackgroundColor = Colors.Transparent;
        header.Legend.ShadowColor = Colors.Transparent;

        var figure = new Multiplot(header);
        foreach (var panel in panels)
            figure.AddPlot(panel);
        figure.Layout = new HeaderAndGrid(HeaderHeight, columns);
        Directory.CreateDirectory(Path.GetDirectoryName(Path.GetFullPath(path))!);
        figure.SavePng(path, width, height);
    }

    /// <summary>The first subplot across the top (<c>headerHeight</c> pixels), the others in a grid below.</summary>
    private sealed class HeaderAndGrid(int headerHeight, int columns) : IMultiplotLayout
    {
        public PixelRect[] GetSubplotRectangles(SubplotCollection subplots, PixelRect figureRect)
        {
            int n = subplots.Count - 1;
            int cols = Math.Max(1, Math.Min(columns, n));
            int rows = Math.Max(1, (n + cols - 1) / cols);
            float top = figureRect.Top + headerHeight;
            float w = figureRect.Width / cols, h = (figureRect.Bottom - top) / rows;
            var rects = new PixelRect[subplots.Count];
            rects[0] = new PixelRect(figureRect.Left, figureRect.Right, top, figureRect.Top);
            for (int i = 0; i < n; i++)
            {
                float left = figureRect.Left + i % cols * w, y = top + i / cols * h;
                rects[i + 1] = new PixelRect(left, left + w, y + h, y);
            }
            return rects;
        }
    }
}
