using System;
using System.IO;
using System.Linq;
using System.Threading.Tasks;
using RemoteCache.Benchmarks.Ycsb;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

/// <summary>The main job end to end, small: every device (a real smbd included), both distributions, checked reads.</summary>
[Collection(BenchmarkRuns.Name)]
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
            Assert.Equal(20, rows.Length);  // 5 devices x 2 distributions x 2 rounds
            foreach (var device in new[] { "memory", "ram-inline", "remotecache", "ssd", "smb" })
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
            using var parsed = System.Text.Json.JsonDocument.Parse(json);
            var others = parsed.RootElement.GetProperty("ratios").EnumerateArray().Select(r => r.GetProperty("Other").GetString()).Distinct().ToList();
            Assert.Equal(new[] { "ssd", "smb", "memory", "ram-inline" }, others);
            Assert.All(parsed.RootElement.GetProperty("ratios").EnumerateArray(),
                       r => Assert.True(r.GetProperty("min").GetDouble() <= r.GetProperty("median").GetDouble() && r.GetProperty("median").GetDouble() <= r.GetProperty("max").GetDouble()));
        }
        finally
        {
            if (Directory.Exists(output))
                Directory.Delete(output, recursive: true);
        }
    }

    [Fact]
    public async Task TheExtendedModeKeepsEveryReadRightAcrossAReclaimAndAKilledCacheServer()
    {
        string output = Path.Combine(Path.GetTempPath(), $"ycsb-dynamics-{Guid.NewGuid():N}");
        try
        {
            // On a thread of its own, as from the command line: the job blocks its caller, and a blocked pool thread here
            // would leave the managed client's flows and the manager short of pool threads on two cores.
            int exit = await OnOwnThread(() => Program.Main(new[]
            {
                "--records", "200000", "--devices", "remotecache", "--distributions", "uniform", "--threads", "2", "--rounds", "1",
                "--duration", "0.5", "--warmup", "0.2", "--dynamics", "--dynamics-seconds", "8", "--out", output, "--no-fio",
            }));
            Assert.Equal(0, exit);  // non-zero: a wrong read (FASTER got a lost cache's bytes), or the device failed
            using var json = System.Text.Json.JsonDocument.Parse(File.ReadAllText(Path.Combine(output, "dynamics.json")));
            var runs = json.RootElement.GetProperty("runs").EnumerateArray().ToList();
            Assert.Equal(new[] { "reclaim", "kill" }, runs.Select(r => r.GetProperty("Kind").GetString()));
            foreach (var run in runs)
            {
                string kind = run.GetProperty("Kind").GetString()!;
                var events = run.GetProperty("Events").EnumerateArray().Select(e => e.GetProperty("What").GetString()).ToList();
                Assert.Contains(Dynamics.Replaced, events);
                Assert.Equal(0, run.GetProperty("Errors").GetInt64());
                // The cache level again: the cache tier serves the device's reads at the end, and throughput came back.
                var samples = run.GetProperty("Samples").EnumerateArray().ToList();
                double share = samples.Skip(samples.Count * 3 / 4).Average(x => x.GetProperty("CacheShare").GetDouble());
                Assert.True(share > 0.9, $"{kind}: the cache tier served {share:P0} of the device's reads at the end");
                // Loose (this machine's speed swings by 1.6x): the SSD level would be ~0.03x.
                Assert.True(run.GetProperty("Recovered").GetDouble() > 0.4, $"{kind}: throughput at the end {run.GetProperty("Recovered").GetDouble():0.00}x of before");
            }
            Assert.Contains(Dynamics.TierBack, runs[1].GetProperty("Events").EnumerateArray().Select(e => e.GetProperty("What").GetString()));
            Assert.True(new FileInfo(Path.Combine(output, Dynamics.ChartFile)).Length > 1000);
        }
        finally
        {
            if (Directory.Exists(output))
                Directory.Delete(output, recursive: true);
        }
    }

    private static Task<int> OnOwnThread(Func<int> body)
    {
        var done = new TaskCompletionSource<int>(TaskCreationOptions.RunContinuationsAsynchronously);
        new System.Threading.Thread(() =>
        {
            try
            {
                done.SetResult(body());
            }
            catch (Exception e)
            {
                done.SetException(e);
            }
        }) { IsBackground = true, Name = "main job" }.Start();
        return done.Task;
    }
}
