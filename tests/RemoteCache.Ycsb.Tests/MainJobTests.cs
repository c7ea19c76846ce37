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
                "--records", "100000", "--duration", "1", "--warmup", "0.5", "--threads", "1",
                "--out", output, "--no-fio",
            });
            Assert.Equal(0, exit);  // non-zero: a wrong read, or a device failed or hung
            var rows = File.ReadAllLines(Path.Combine(output, "results.csv")).Skip(1).ToArray();
            Assert.Equal(8, rows.Length);  // 4 devices x 2 distributions
            foreach (var device in new[] { "memory", "remotecache", "ssd", "smb" })
                Assert.Equal(2, rows.Count(r => r.StartsWith(device + ",", StringComparison.Ordinal)));
            Assert.All(rows, r => Assert.True(double.Parse(r.Split(',')[8], System.Globalization.CultureInfo.InvariantCulture) > 0, r));
            Assert.True(new FileInfo(Path.Combine(output, "chart.png")).Length > 1000);
            Assert.Contains("\"results\"", File.ReadAllText(Path.Combine(output, "results.json")));
        }
        finally
        {
            if (Directory.Exists(output))
                Directory.Delete(output, recursive: true);
        }
    }
}
