using System;
using System.Collections.Generic;
using System.CommandLine;
using System.IO;
using System.Text.Json;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Cli.Tests;

public sealed class SloSearchCommandTests : IDisposable
{
    private readonly string _dir = Path.Combine(Path.GetTempPath(), $"rc-slo-cli-{Guid.NewGuid():N}");
    private readonly string _model;

    public SloSearchCommandTests()
    {
        Directory.CreateDirectory(_dir);
        _model = Path.Combine(_dir, "model.json");
        Model().Save(_model);
    }

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    /// <summary>c 0..2, s 1..2, b 1..4, q 1..2; latency and throughput grow with every parameter.</summary>
    internal static PerformanceModel Model()
    {
        var points = new List<ModelPoint>();
        foreach (int c in new[] { 0, 1, 2 })
        {
            foreach (int s in new[] { 1, 2 })
            {
                foreach (int b in new[] { 1, 2, 4 })
                {
                    foreach (int q in new[] { 1, 2 })
                        points.Add(new ModelPoint(c, s, b, q, 2 + c + s + b * q, 1e5 * (1 + c) * s * b * q));
                }
            }
        }
        return new PerformanceModel
        {
            Transport = "shm",
            Distance = "same-host",
            RecordSize = 8,
            Machine = new MachineDescription("test cpu", 2, 1L << 30, "Linux") { Note = "synthetic" },
            Measured = new MeasurementInfo("2026-11-23", "by hand", "test", 1, 0),
            Space = new ConfigurationSpace(2, 1, 2, 4, 2),
            Operations = new Dictionary<SloOperation, List<ModelPoint>> { [SloOperation.Read] = points },
        };
    }

    internal static (int Exit, string Output, string Error) Run(params string[] args)
    {
        var output = new StringWriter();
        var error = new StringWriter();
        int exit = Program.BuildRoot().Parse(args).Invoke(new InvocationConfiguration { Output = output, Error = error });
        return (exit, output.ToString(), error.ToString());
    }

    private static CacheConfig Expected(double latency, double throughput, SloCost cost = default) =>
        new SloSearch(Model(), SloOperation.Read).Search(new ServiceLevelObjective(SloOperation.Read, latency, throughput, 8), cost)
            .Cheapest!.Value.Config;

    [Fact]
    public void PrintsTheCheapestConfiguration()
    {
        var (exit, output, error) = Run("slo", "search", "--model", _model, "--latency-us", "12", "--throughput", "1e6");
        Assert.Equal(0, exit);
        Assert.Equal("", error);
        var expected = Expected(12, 1e6);
        // s = 1 and c = 0 reach 8e5 ops/s at most; c = 1: 2e5·b·q ops/s at 4 + b·q µs, so b·q = 6 (b = 3, between the
        // measured 2 and 4, q = 2): 1.2e6 ops/s at 10 µs.
        Assert.Equal(new CacheConfig(1, 1, 3, 2), expected);
        Assert.Contains($"cheapest configuration meeting it: {expected} (predicted mean latency 10 µs, throughput 1,200,000 ops/s)", output);
        Assert.Contains("Redy's order", output);
    }

    [Fact]
    public void PricesChangeTheChoice()
    {
        var (exit, output, _) = Run("slo", "search", "--model", _model, "--latency-us", "12", "--throughput", "1e6",
            "--server-thread-price", "1", "--client-thread-price", "5");
        Assert.Equal(0, exit);
        var expected = Expected(12, 1e6, new SloCost(1, 5));
        Assert.NotEqual(Expected(12, 1e6), expected);
        Assert.Contains($"cheapest configuration meeting it: {expected}", output);
        Assert.Contains("price s·1 + c·5", output);
    }

    [Fact]
    public void PrintsJson()
    {
        var (exit, output, _) = Run("slo", "search", "--model", _model, "--latency-us", "12", "--throughput", "1e6", "--json");
        Assert.Equal(0, exit);
        using var json = JsonDocument.Parse(output);
        var root = json.RootElement;
        Assert.True(root.GetProperty("found").GetBoolean());
        Assert.Equal(0, root.GetProperty("exitCode").GetInt32());
        var config = root.GetProperty("configuration");
        Assert.Equal(1, config.GetProperty("clientThreads").GetInt32());
        Assert.Equal(1, config.GetProperty("serverThreads").GetInt32());
        Assert.Equal(3, config.GetProperty("batchSize").GetInt32());
        Assert.Equal(2, config.GetProperty("queueDepth").GetInt32());
        Assert.Equal(10, config.GetProperty("predictedMeanUs").GetDouble());
        Assert.Equal(1.2e6, config.GetProperty("predictedOpsPerSecond").GetDouble());
        Assert.Equal("redy", root.GetProperty("cost").GetProperty("order").GetString());
        Assert.Equal("read", root.GetProperty("objective").GetProperty("operation").GetString());
    }

    [Fact]
    public void WhenNoneMeetsItSaysSoWithTheNearestAlternatives()
    {
        // 4e6 ops/s: only c = 2, s = 2, b = 4, q = 2 (4.8e6 ops/s at 14 µs). Within 8 µs: 1.2e6 ops/s at most, first
        // reached in Redy's order by c = 1, s = 2, b = 3 (interpolated), q = 1.
        var (exit, output, _) = Run("slo", "search", "--model", _model, "--latency-us", "8", "--throughput", "4e6");
        Assert.Equal(3, exit);
        Assert.Contains("none meets it", output);
        Assert.Contains("lowest mean latency at ≥ 4,000,000 ops/s: c=2 s=2 b=4 q=2 (predicted mean latency 14 µs, throughput 4,800,000 ops/s)", output);
        Assert.Contains("highest throughput within 8 µs: c=1 s=2 b=3 q=1 (predicted mean latency 8 µs, throughput 1,200,000 ops/s)", output);

        (exit, output, _) = Run("slo", "search", "--model", _model, "--latency-us", "3", "--throughput", "1e8", "--json");
        Assert.Equal(3, exit);
        using var json = JsonDocument.Parse(output);
        Assert.False(json.RootElement.GetProperty("found").GetBoolean());
        Assert.Equal(3, json.RootElement.GetProperty("exitCode").GetInt32());
        Assert.Equal(JsonValueKind.Null, json.RootElement.GetProperty("configuration").ValueKind);
        Assert.Equal(JsonValueKind.Null, json.RootElement.GetProperty("lowestLatencyReachingThroughput").ValueKind);
        Assert.Equal(JsonValueKind.Null, json.RootElement.GetProperty("highestThroughputWithinLatency").ValueKind);
    }

    [Theory]
    [InlineData("--record-size 64", "--record-size 64 is not the model's record size 8")]
    [InlineData("--latency-us abc", "abc")]
    [InlineData("--latency-us -1", "--latency-us -1: the mean latency bound (µs) must be positive")]
    [InlineData("--throughput -5", "--throughput -5: the throughput bound (ops/s) must be finite and 0 or more")]
    [InlineData("--server-thread-price 2", "--server-thread-price and --client-thread-price go together")]
    [InlineData("--server-thread-price -2 --client-thread-price 1", "--server-thread-price -2: a server thread's price must be finite and 0 or more")]
    [InlineData("--operation write", "has no measured points for writes")]
    [InlineData("--operation delete", "delete")]
    [InlineData("--bogus", "--bogus")]
    public void RefusesBadArgumentsWithExitCode2(string extra, string message)
    {
        var options = new Dictionary<string, string> { ["--model"] = _model, ["--latency-us"] = "10", ["--throughput"] = "1e6" };
        var args = new List<string> { "slo", "search" };
        var words = extra.Split(' ');
        for (int i = 0; i < words.Length; i++)
        {
            if (i + 1 < words.Length && !words[i + 1].StartsWith("--", StringComparison.Ordinal))
                options[words[i]] = words[++i];
            else
                args.Add(words[i]);
        }
        foreach (var (name, value) in options)
            args.AddRange(new[] { name, value });
        var (exit, output, error) = Run(args.ToArray());
        Assert.Equal(2, exit);
        Assert.Equal("", output);
        Assert.Contains(message, error);
        Assert.StartsWith("remotecache slo search: ", error);
    }

    [Fact]
    public void RefusesAMissingOption()
    {
        var (exit, _, error) = Run("slo", "search", "--model", _model, "--latency-us", "10");
        Assert.Equal(2, exit);
        Assert.Contains("--throughput", error);
    }

    [Fact]
    public void RefusesAModelFileThatIsMissingOrNotAModel()
    {
        var (exit, _, error) = Run("slo", "search", "--model", Path.Combine(_dir, "none.json"), "--latency-us", "10", "--throughput", "1");
        Assert.Equal(2, exit);
        Assert.Contains("cannot read the model", error);

        string bad = Path.Combine(_dir, "bad.json");
        File.WriteAllText(bad, Model().ToJson().Replace("\"version\": 1", "\"version\": 9"));
        (exit, _, error) = Run("slo", "search", "--model", bad, "--latency-us", "10", "--throughput", "1");
        Assert.Equal(2, exit);
        Assert.Contains("the model file is not valid", error);
        Assert.Contains("version 9 is not supported", error);
        Assert.Contains(bad, error);
    }

    [Fact]
    public void HelpDescribesTheExitCodes()
    {
        var (exit, output, _) = Run("slo", "search", "--help");
        Assert.Equal(0, exit);
        Assert.Contains("--latency-us", output);
        Assert.Contains("3: no configuration meets it", output);
    }
}
