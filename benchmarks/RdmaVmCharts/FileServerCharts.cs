using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Text.Json;
using RemoteCache.Charts;
using ScottPlot;
using ScottPlot.TickGenerators;

namespace RemoteCache.Benchmarks.RdmaVmCharts;

/// <summary>
/// The file servers over RDMA against RemoteCache over verbs, from one boot of the RDMA VM harness: fio random reads
/// on the SMB Direct and the NFS-over-RDMA mounts beside remotecache-bench reads (<see cref="ReadsFile"/>), and FASTER
/// YCSB with its log on each mount beside the tiered device over verbs (<see cref="YcsbFile"/>, Redy's Fig. 18).
/// A figure the run did not measure is left out of its group, never drawn as zero.
/// </summary>
internal static class FileServerCharts
{
    public const string ReadsFile = "file-servers.png";
    public const string YcsbFile = "ycsb.png";

    /// <summary>The series, in the order of each group's bars; the colours are the YCSB tool's for its smb and remotecache devices.</summary>
    internal static readonly (string Name, Color Color)[] Series =
    {
        ("SMB Direct", new Color(255, 127, 14)),
        ("NFS over RDMA", new Color(31, 119, 180)),
        ("RemoteCache (verbs)", new Color(214, 39, 40)),
    };

    /// <summary>One group of bars: a value per <see cref="Series"/> entry, null where it was not measured.</summary>
    internal sealed record Group(string Label, double?[] Values);

    internal sealed record Comparison(IReadOnlyList<Group> Reads, IReadOnlyList<Group> Ycsb, string Title);

    static FileServerCharts() => ChartKit.UseSansSerif();

    /// <summary>Reads the groups out of the harness's summary.json.</summary>
    /// <exception cref="InvalidDataException">The file is not the harness's summary (no file_servers rows).</exception>
    public static Comparison Read(string summaryJson)
    {
        using var document = JsonDocument.Parse(File.ReadAllText(summaryJson));
        var root = document.RootElement;
        if (!root.TryGetProperty("file_servers", out var servers) || !servers.TryGetProperty("rows", out var rows)
            || rows.ValueKind != JsonValueKind.Array)
            throw new InvalidDataException("not the summary.json of tests/rdma-vm/run.sh (no file_servers.rows)");
        var reads = rows.EnumerateArray().Select(r => new Group(
            $"{Int(r, "size")} B, depth {Int(r, "depth")}",
            new[] { Number(r, "smb", "iops"), Number(r, "nfs", "iops"), Number(r, "remotecache", "ops_per_sec") })).ToList();
        var ycsb = new List<Group>();
        if (root.TryGetProperty("ycsb", out var y) && y.ValueKind == JsonValueKind.Object && y.TryGetProperty("rows", out var yrows)
            && yrows.ValueKind == JsonValueKind.Array)
        {
            ycsb.AddRange(yrows.EnumerateArray().Select(r => new Group(
                r.TryGetProperty("distribution", out var d) && d.ValueKind == JsonValueKind.String ? d.GetString()! : "?",
                new[] { Number(r, "smb", "ops_per_s"), Number(r, "nfs", "ops_per_s"), Number(r, "remotecache", "ops_per_s") })));
        }
        return new Comparison(reads, ycsb, "Soft-RoCE under qemu TCG, one boot (emulated: compare within the chart only)");
    }

    /// <summary>Writes both charts into <paramref name="directory"/>; returns their paths.</summary>
    public static IReadOnlyList<string> Write(string directory, Comparison comparison)
    {
        Directory.CreateDirectory(directory);
        string reads = Path.Combine(directory, ReadsFile), ycsb = Path.Combine(directory, YcsbFile);
        Bars(reads, "Random reads: fio --direct=1 on the mounts, remotecache-bench on a cache (IOPS, higher is better)",
             "size, requests in flight", "IOPS (log scale)", comparison.Reads, comparison.Title);
        Bars(ycsb, "FASTER YCSB readonly: its log on the mounts, the tiered device over verbs (ops/s, higher is better)",
             "key distribution", "throughput (ops/s, log scale)", comparison.Ycsb, comparison.Title);
        return new[] { reads, ycsb };
    }

    private static void Bars(string path, string title, string xLabel, string yLabel, IReadOnlyList<Group> groups, string subtitle)
    {
        var plot = new Plot();
        plot.Title($"{title}\n{subtitle}", 14);
        plot.XLabel(xLabel, 14);
        plot.YLabel(yLabel, 14);
        var values = groups.SelectMany(g => g.Values).Where(v => v is > 0).Select(v => v!.Value).ToList();
        if (values.Count == 0)
        {
            plot.Add.Annotation("nothing was measured in this boot");
            plot.SavePng(path, 900, 520);
            return;
        }
        // ScottPlot 5 has no log axis: the bars are log10 of the values, from a power of ten below the lowest.
        var (lo, hi) = ChartKit.LogRange(values);
        lo = Math.Floor(lo);
        hi += 0.2;  // room for the labels
        var ticks = new NumericManual();
        for (int g = 0; g < groups.Count; g++)
        {
            double x0 = g * (Series.Length + 1);
            ticks.AddMajor(x0 + (Series.Length - 1) / 2.0, groups[g].Label);
            for (int s = 0; s < Series.Length; s++)
            {
                if (groups[g].Values[s] is not { } v || v <= 0)
                    continue;
                var bars = plot.Add.Bar(ChartKit.LogBar(x0 + s, v, lo, Series[s].Color));
                bars.ValueLabelStyle.FontSize = 12;
            }
        }
        plot.Axes.Bottom.TickGenerator = ticks;
        plot.Axes.Bottom.TickLabelStyle.FontSize = 13;
        plot.Axes.Left.TickGenerator = ChartKit.LogTicks(lo, hi, ChartKit.Si);
        plot.Grid.XAxisStyle.IsVisible = false;
        plot.Axes.SetLimits(-0.7, groups.Count * (Series.Length + 1) - 1.3, lo, hi);
        // Below the panel, clear of the bars; a series with no bar is named as not measured, with no colour.
        plot.Legend.ManualItems.AddRange(Series.Select((s, i) => groups.Any(g => g.Values[i] is > 0)
            ? new LegendItem { LabelText = s.Name, FillColor = s.Color }
            : new LegendItem { LabelText = $"{s.Name}: not measured", FillColor = Colors.Transparent }));
        plot.Legend.Orientation = Orientation.Horizontal;
        plot.Legend.FontSize = 13;
        plot.ShowLegend(Edge.Bottom);
        plot.SavePng(path, 900, 520);
    }

    private static int Int(JsonElement row, string name) =>
        row.TryGetProperty(name, out var v) && v.TryGetInt32(out int i) ? i : 0;

    /// <summary>row[section][key] when the section ran and measured it (a bench that saw errors does not count).</summary>
    private static double? Number(JsonElement row, string section, string key)
    {
        if (!row.TryGetProperty(section, out var s) || s.ValueKind != JsonValueKind.Object)
            return null;
        if (s.TryGetProperty("errors", out var errors) && errors.TryGetInt64(out long e) && e != 0)
            return null;
        return s.TryGetProperty(key, out var v) && v.TryGetDouble(out double d) && double.IsFinite(d) && d > 0 ? d : null;
    }
}
