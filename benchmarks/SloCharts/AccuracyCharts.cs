using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Text.Json;
using RemoteCache.Charts;
using ScottPlot;

namespace RemoteCache.Benchmarks.SloCharts;

/// <summary>
/// Redy's Fig. 13 and 14 for an accuracy run: per metric, the CDFs of the SLOs' bounds, the predictions and what the
/// data path achieved, over the feasible SLOs.
/// </summary>
internal static class AccuracyCharts
{
    public const string LatencyFile = "accuracy-latency.png";
    public const string ThroughputFile = "accuracy-throughput.png";

    private static readonly (string Name, Color Color, LinePattern Pattern)[] Series =
    {
        ("SLO", Colors.Gray, LinePattern.Dashed),
        ("predicted", new Color(31, 119, 180), LinePattern.Solid),
        ("real", new Color(214, 39, 40), LinePattern.Solid),
    };

    static AccuracyCharts() => ChartKit.UseSansSerif();

    /// <summary>The bound, prediction and measurement of each feasible SLO of a run, per metric.</summary>
    internal sealed record Points(double[] SloUs, double[] PredictedUs, double[] RealUs, double[] SloOps, double[] PredictedOps, double[] RealOps);

    /// <summary>
    /// Reads <paramref name="accuracyJson"/> (written by <c>remotecache slo accuracy</c>): the chart's title and the points
    /// of its feasible SLOs (those with a measurement).
    /// </summary>
    /// <exception cref="InvalidDataException">The file is not an accuracy run's.</exception>
    public static (string Title, Points Points) Read(string accuracyJson)
    {
        using var document = JsonDocument.Parse(File.ReadAllText(accuracyJson));
        var root = document.RootElement;
        if (!root.TryGetProperty("rows", out var rows) || rows.ValueKind != JsonValueKind.Array || !root.TryGetProperty("transport", out var transport))
            throw new InvalidDataException($"{accuracyJson} is not the accuracy.json of remotecache slo accuracy (no transport or rows)");
        var feasible = rows.EnumerateArray().Where(r => r.TryGetProperty("realUs", out var real) && real.ValueKind == JsonValueKind.Number).ToList();
        double[] Of(string name) => feasible.Select(r => r.GetProperty(name).GetDouble()).ToArray();
        var points = new Points(Of("latencyUs"), Of("predictedUs"), Of("realUs"), Of("opsPerSecond"), Of("predictedOpsPerSecond"), Of("realOpsPerSecond"));
        string title = $"{transport.GetString()}, {root.GetProperty("recordSize").GetInt32()} B {root.GetProperty("operation").GetString()}s, {feasible.Count} feasible SLOs";
        if (root.TryGetProperty("samePhase", out var phase) && phase.ValueKind == JsonValueKind.True)
            title += ", real in the model's phase";
        return (title, points);
    }

    /// <summary>Writes both charts into <paramref name="directory"/>; returns their paths.</summary>
    public static IReadOnlyList<string> Write(string directory, Points points, string title)
    {
        Directory.CreateDirectory(directory);
        string latency = Path.Combine(directory, LatencyFile), throughput = Path.Combine(directory, ThroughputFile);
        Cdf(latency, $"{title}: mean latency", "mean latency (log scale)", ChartKit.Duration, points.SloUs, points.PredictedUs, points.RealUs);
        Cdf(throughput, $"{title}: throughput", "operations per second (log scale)", ChartKit.Si, points.SloOps, points.PredictedOps, points.RealOps);
        return new[] { latency, throughput };
    }

    private static void Cdf(string path, string title, string xLabel, Func<double, string> format, params IEnumerable<double>[] series)
    {
        var plot = new Plot();
        plot.Title(title, 16);
        plot.XLabel(xLabel, 14);
        plot.YLabel("fraction of feasible SLOs ≤ value", 14);
        var all = series.SelectMany(s => s).Where(v => v > 0).ToList();
        if (all.Count == 0)
        {
            plot.Add.Annotation("no feasible SLO: nothing was measured");
            plot.SavePng(path, 900, 520);
            return;
        }
        var (lo, hi) = ChartKit.LogRange(all);
        for (int i = 0; i < series.Length; i++)
        {
            var values = series[i].Where(v => v > 0).OrderBy(v => v).ToArray();
            var xs = new List<double>();
            var ys = new List<double>();
            for (int k = 0; k < values.Length; k++)
            {
                // A step per value: the fraction jumps at it.
                xs.Add(Math.Log10(values[k]));
                ys.Add((double)k / values.Length);
                xs.Add(Math.Log10(values[k]));
                ys.Add((double)(k + 1) / values.Length);
            }
            var line = plot.Add.ScatterLine(xs.ToArray(), ys.ToArray());
            line.LegendText = Series[i].Name;
            line.Color = Series[i].Color;
            line.LinePattern = Series[i].Pattern;
            line.LineWidth = 2;
        }
        plot.Axes.SetLimits(lo, hi, 0, 1.02);
        plot.Axes.Bottom.TickGenerator = ChartKit.LogTicks(lo, hi, format);
        plot.ShowLegend(Alignment.LowerRight);
        plot.Grid.MajorLineColor = Colors.Black.WithOpacity(0.15);
        plot.SavePng(path, 900, 520);
    }
}
