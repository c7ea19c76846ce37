using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using RemoteCache.Benchmarks.Ycsb;
using SkiaSharp;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

public sealed class ChartTests
{
    private static readonly byte[] PngSignature = { 0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A };

    // The devices' colours in the charts (Chart.KnownColors): none is a grey, which anti-aliased text has plenty of.
    private static readonly (string Device, double Ops, double LatencyUs, SKColor Color)[] Devices =
    {
        ("memory", 4e6, 0.3, new SKColor(148, 103, 189)),
        ("remotecache", 1e6, 8, new SKColor(214, 39, 40)),
        ("ssd", 2e4, 90, new SKColor(31, 119, 180)),
        ("smb", 5e4, 40, new SKColor(255, 127, 14)),
    };

    /// <summary>Every round of a run: 4 devices, 2 distributions, 1 and 2 threads, 5 rounds, with latencies.</summary>
    private static List<RunResult> Run(int rounds = 5)
    {
        var rng = new Random(7);
        var results = new List<RunResult>();
        for (int round = 1; round <= rounds; round++)
            foreach (int threads in new[] { 1, 2 })
                foreach (var distribution in new[] { "uniform", "zipfian" })
                    foreach (var (device, ops, latencyUs, _) in Devices)
                    {
                        var latency = new Histogram();
                        for (int i = 0; i < 5000; i++)  // log-normal around the device's latency
                        {
                            double z = Math.Sqrt(-2 * Math.Log(1 - rng.NextDouble())) * Math.Cos(2 * Math.PI * rng.NextDouble());
                            latency.Record((long)(latencyUs * 1000 * Math.Exp(0.5 * z)));
                        }
                        double perSecond = ops * threads * (distribution == "zipfian" ? 1.3 : 1) * (0.8 + 0.4 * rng.NextDouble());
                        results.Add(new RunResult(device, "readonly", distribution, threads, 8, 1000, (long)(perSecond * 10), 10,
                                                  latency.MeanNs / 1000, latency.Quantile(0.5) / 1000.0, latency.Quantile(0.99) / 1000.0, 0, "")
                        { Round = round, Latency = latency });
                    }
        return results;
    }

    private static string TempDirectory()
    {
        var dir = Path.Combine(Path.GetTempPath(), $"ycsb-charts-{Guid.NewGuid():N}");
        Directory.CreateDirectory(dir);
        return dir;
    }

    /// <summary>Width and height from the PNG's IHDR chunk (the first chunk, right after the signature).</summary>
    private static (int Width, int Height) PngSize(byte[] png)
    {
        Assert.True(png.Length > 33, "too short for a PNG");
        Assert.Equal(PngSignature, png[..8]);
        Assert.Equal("IHDR", System.Text.Encoding.ASCII.GetString(png, 12, 4));
        static int BigEndian(byte[] b, int at) => b[at] << 24 | b[at + 1] << 16 | b[at + 2] << 8 | b[at + 3];
        return (BigEndian(png, 16), BigEndian(png, 20));
    }

    /// <summary>How many pixels are (nearly) this colour: a device drawn in a chart leaves some.</summary>
    internal static int PixelsOf(SKBitmap image, SKColor color)
    {
        int count = 0;
        for (int y = 0; y < image.Height; y++)
            for (int x = 0; x < image.Width; x++)
            {
                var p = image.GetPixel(x, y);
                if (Math.Abs(p.Red - color.Red) <= 8 && Math.Abs(p.Green - color.Green) <= 8 && Math.Abs(p.Blue - color.Blue) <= 8)
                    count++;
            }
        return count;
    }

    // The help names every chart the run writes, and says what matches YCSB and what cannot.
    [Fact]
    public void HelpNamesEveryChartAndWhatMatchesYcsb()
    {
        Assert.All(Chart.Files, file => Assert.Contains(file, YcsbOptions.Usage));
        Assert.Contains("Matches YCSB", YcsbOptions.Usage);
        Assert.Contains("E's scans", YcsbOptions.Usage);
    }

    [Fact]
    public void ChartWriterWritesEachPngWithEveryDeviceDrawn()
    {
        var dir = TempDirectory();
        try
        {
            var paths = Chart.WriteAll(dir, Run(), "YCSB readonly, FASTER, 8 B values, memory = log/8");
            Assert.Equal(new[] { "chart.png", "rounds.png", "latency-cdf.png" }, paths.Select(Path.GetFileName));
            foreach (var path in paths)
            {
                Assert.True(File.Exists(path), $"{path} missing");
                var bytes = File.ReadAllBytes(path);
                var (width, height) = PngSize(bytes);
                Assert.InRange(width, 800, 1600);
                Assert.InRange(height, 450, 1600);

                using var image = SKBitmap.Decode(bytes);
                Assert.NotNull(image);
                Assert.Equal((width, height), (image.Width, image.Height));
                // Every device's colour is on every chart (bars, lines, and the legend), more than the legend's swatch
                // alone: a chart without its data fails here.
                foreach (var (device, _, _, color) in Devices)
                    Assert.True(PixelsOf(image, color) > 400, $"{Path.GetFileName(path)}: {device} ({color}) not drawn: {PixelsOf(image, color)} pixels");
                // Text (titles, ticks, labels) is there: dark pixels.
                Assert.True(PixelsOf(image, SKColors.Black) > 1000, $"{Path.GetFileName(path)}: no text");
            }
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public void ChartOfMediansAloneIsAPng()
    {
        var dir = TempDirectory();
        try
        {
            var path = Path.Combine(dir, "chart.png");
            Chart.Write(path, Summary.Medians(Run(rounds: 1)), "test");
            var (width, height) = PngSize(File.ReadAllBytes(path));
            Assert.InRange(width, 800, 1600);
            Assert.InRange(height, 450, 1600);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public void ChartLatencyWithoutHistogramsStillDrawsThePanels()
    {
        var dir = TempDirectory();
        try
        {
            var path = Path.Combine(dir, "latency-cdf.png");
            Chart.WriteLatencyCdf(path, Run(rounds: 1).Select(r => r with { Latency = null }).ToList(), "test");
            var (width, _) = PngSize(File.ReadAllBytes(path));
            Assert.InRange(width, 800, 1600);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public void ChartsOfARunWithoutThroughputSaySoInsteadOfFailing()
    {
        var dir = TempDirectory();
        try
        {
            // Every phase failed (no operations): nothing for a log scale, but the run still gets its files.
            var failed = Run(rounds: 1).Select(r => r with { Operations = 0 }).ToList();
            foreach (var path in Chart.WriteAll(dir, failed, "test"))
            {
                var (width, height) = PngSize(File.ReadAllBytes(path));
                Assert.Equal((900, 520), (width, height));
            }
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }
}
