using System;
using System.IO;
using System.Linq;
using RemoteCache.Benchmarks.Ycsb;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

/// <summary>The Garnet run of the YCSB tool (issue 43's benchmark), small: every device, both distributions, every GET checked.</summary>
[Collection(BenchmarkRuns.Name)]
public sealed class GarnetRunTests
{
    [Fact]
    public void SmallGarnetRunComparesItsThreeDevicesAndWritesItsResults()
    {
        string output = Path.Combine(Path.GetTempPath(), $"ycsb-garnet-{Guid.NewGuid():N}");
        try
        {
            int exit = Program.Main(new[]
            {
                "--store", "garnet", "--records", "40000", "--duration", "1", "--warmup", "0.3", "--threads", "1,2", "--rounds", "1", "--out", output,
            });
            Assert.Equal(0, exit);  // non-zero: a wrong or missing value, or a Garnet that failed or hung
            var rows = File.ReadAllLines(Path.Combine(output, "results.csv")).Skip(1).Select(r => r.Split(',')).ToArray();
            Assert.Equal(12, rows.Length);  // 3 devices x 2 distributions x 2 thread counts
            foreach (var device in GarnetRunner.DeviceNames)
                Assert.Equal(4, rows.Count(r => r[0] == device));
            Assert.All(rows, r => Assert.True(double.Parse(r[8], System.Globalization.CultureInfo.InvariantCulture) > 0, string.Join(",", r)));
            Assert.All(rows, r => Assert.Equal("64", r[4]));  // Garnet's default value size
            foreach (var chart in Chart.Files)
                Assert.True(new FileInfo(Path.Combine(output, chart)).Length > 1000, chart);
            using var json = System.Text.Json.JsonDocument.Parse(File.ReadAllText(Path.Combine(output, "results.json")));
            Assert.Equal("garnet", json.RootElement.GetProperty("store").GetString());
            var others = json.RootElement.GetProperty("ratios").EnumerateArray().Select(r => r.GetProperty("Other").GetString()).Distinct().ToList();
            Assert.Equal(new[] { "ssd", "memory" }, others);
            // Garnet's rows carry the process's CPU per GET (server and clients: one process).
            Assert.All(json.RootElement.GetProperty("results").EnumerateArray(), r => Assert.True(r.GetProperty("cpu_us_per_op").GetDouble() > 0));
        }
        finally
        {
            if (Directory.Exists(output))
                Directory.Delete(output, recursive: true);
        }
    }

    [Theory]
    [InlineData("--store garnet --devices memory,smb", "--store garnet compares memory, remotecache, ssd: not 'smb'")]
    [InlineData("--store garnet --value-size 5000", "--store garnet: --value-size must be 8 to 4096")]
    [InlineData("--store garnet --workload a", "--store garnet runs the readonly workload (GETs) only, not A")]
    [InlineData("--store garnet --dynamics", "--dynamics runs on FASTER's store: not with --store garnet")]
    [InlineData("--store redis", "--store is faster or garnet, not 'redis'")]
    [InlineData("--value-size 64", "--value-size must be 8 or 1024")]
    public void GarnetRunsRefuseWhatTheyCannotMeasure(string args, string refusal)
    {
        var e = Assert.Throws<ArgumentException>(() => YcsbOptions.Parse(args.Split(' ')));
        Assert.Contains(refusal, e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void GarnetRunsDefaultToTheirDevicesAndValueSize()
    {
        var o = YcsbOptions.Parse(new[] { "--store", "garnet" });
        Assert.Equal(GarnetRunner.DeviceNames, o.Devices);
        Assert.Equal(YcsbOptions.GarnetValueBytes, o.ValueBytes);
        // Records of 96 B (8 B header, key 10 + 4 and value 64 + 4 rounded to 8); memory 1/8 of the log, in whole pages.
        var shape = GarnetRunner.Shape(o, everythingInMemory: false);
        Assert.Equal(96, GarnetRunner.RecordBytes(o));
        Assert.InRange((double)shape.LogBytes / shape.MemoryBytes, 8, 8.1);
        Assert.Equal(0, shape.MemoryBytes % (1L << shape.PageBits));
    }
}
