using System;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Text.Json;
using System.Threading.Tasks;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

/// <summary>
/// The Fig. 15/16 benchmark (benchmarks/Migration) end to end, small: every step moves its regions in both modes under
/// reads and under writes, with no failed operation, and the results and charts are written.
/// </summary>
[Collection(BenchmarkRuns.Name)]
public sealed class MigrationBenchmarkTests
{
    [Fact]
    public async Task SmallRunMovesEveryStepInBothModesAndWritesItsResults()
    {
        string output = Path.Combine(Path.GetTempPath(), $"migration-smoke-{Guid.NewGuid():N}");
        try
        {
            // The benchmark's Program is internal to it: its entry point is what a user runs.
            var main = Assembly.Load("RemoteCache.Benchmarks.Migration").EntryPoint!;
            string[] args = { "--region-mib", "8", "--phase-seconds", "3", "--rounds", "1", "--out", output };
            var errors = new StringWriter();
            var before = Console.Error;
            Console.SetError(errors);  // where the command line reports an exception
            int exit;
            try
            {
                exit = await Task.Run(() => (int)main.Invoke(null, new object[] { args })!);
            }
            finally
            {
                Console.SetError(before);
            }
            Assert.True(exit == 0, $"exit {exit}: {errors}");

            using var report = JsonDocument.Parse(File.ReadAllText(Path.Combine(output, "migration-shm.json")));
            var root = report.RootElement;
            Assert.True(root.GetProperty("IdleMoveOntoFreshMemory").GetProperty("Total").GetDouble() > 0);
            var round = root.GetProperty("Rounds").EnumerateArray().Single();
            Assert.True(round.GetProperty("IdleMove").GetProperty("Total").GetDouble() > 0);
            var runs = round.GetProperty("Runs").EnumerateArray().ToList();
            Assert.Equal(new[] { "read optimized", "read paused", "write optimized", "write paused" },
                         runs.Select(r => $"{r.GetProperty("Op").GetString()} {r.GetProperty("Mode").GetString()}"));
            foreach (var r in runs)
            {
                Assert.Equal(0, r.GetProperty("Errors").GetInt64());
                var steps = r.GetProperty("Steps").EnumerateArray().ToList();
                Assert.Equal(new[] { 1, 2, 4 }, steps.Select(s => s.GetProperty("Regions").GetArrayLength()));
                Assert.All(steps, s =>
                {
                    Assert.Equal(s.GetProperty("Regions").GetArrayLength(), s.GetProperty("Moves").GetArrayLength());
                    foreach (string rate in new[] { "Before", "During", "After" })
                        Assert.True(s.GetProperty(rate).ValueKind == JsonValueKind.Number && s.GetProperty(rate).GetDouble() > 0, $"{rate} throughput of a step: {s}");
                });
            }
            foreach (string chart in new[] { "migration-shm-reads.png", "migration-shm-writes.png" })
                Assert.True(new FileInfo(Path.Combine(output, chart)).Length > 1000, chart);
        }
        finally
        {
            if (Directory.Exists(output))
                Directory.Delete(output, recursive: true);
        }
    }
}

/// <summary>Whole benchmark runs, one at a time: on two cores each needs the machine to keep to its schedule.</summary>
[CollectionDefinition(Name)]
public sealed class BenchmarkRuns
{
    public const string Name = "benchmark runs";
}
