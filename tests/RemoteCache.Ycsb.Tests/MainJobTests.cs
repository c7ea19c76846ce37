using System;
using System.IO;
using System.Linq;
using RemoteCache.Benchmarks.Ycsb;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

/// <summary>The main job end to end, small: every device (a real smbd included), both distributions, checked reads.</summary>
public sealed class MainJobTests
{
    [Fact]
    public void SmallComparisonRunsEveryDeviceAndWritesItsResults()
    {
        string output = Path.Combine(Path.GetTempPath(), $"ycsb-smoke-{Guid.NewGuid():N}");
        try
        {
            int exit = Program.Main(new[]
            {
                "--records", "100000", "--duration", "1", "--warmup", "0.5", "--threads", "1", "--rounds", "2",
                "--out", output, "--no-fio",
            });
            Assert.Equal(0, exit);  // non-zero: a wrong read, or a device failed or hung
            var rows = File.ReadAllLines(Path.Combine(output, "results.csv")).Skip(1).ToArray();
            Assert.Equal(16, rows.Length);  // 4 devices x 2 distributions x 2 rounds
            foreach (var device in new[] { "memory", "remotecache", "ssd", "smb" })
            {
                Assert.Equal(4, rows.Count(r => r.StartsWith(device + ",", StringComparison.Ordinal)));
                Assert.Equal(2, rows.Count(r => r.StartsWith(device + ",", StringComparison.Ordinal) && r.Split(',')[14] == "2"));
            }
            Assert.All(rows, r => Assert.True(double.Parse(r.Split(',')[8], System.Globalization.CultureInfo.InvariantCulture) > 0, r));
            foreach (var chart in Chart.Files)
                Assert.True(new FileInfo(Path.Combine(output, chart)).Length > 1000, chart);
            string json = File.ReadAllText(Path.Combine(output, "results.json"));
            Assert.Contains("\"results\"", json);
            Assert.Contains("\"medians\"", json);
            Assert.Contains("\"ratios\"", json);
        }
        finally
        {
            if (Directory.Exists(output))
                Directory.Delete(output, recursive: true);
        }
    }
}
