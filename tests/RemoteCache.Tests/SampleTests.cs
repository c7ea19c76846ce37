using System;
using Xunit;
using Xunit.Abstractions;

namespace RemoteCache.Tests;

/// <summary>The README's quickstart and the telemetry sample, run as their users run them.</summary>
public sealed class SampleTests
{
    private readonly ITestOutputHelper _out;

    public SampleTests(ITestOutputHelper output) => _out = output;

    [Fact]
    public void QuickstartRuns()
    {
        var (exit, output) = Samples.Run("Quickstart");
        _out.WriteLine(output);
        Assert.True(exit == 0, $"Quickstart exited with {exit}:\n{output}");
        Assert.Contains("hello, remote memory (128 MiB cache, " + CacheConfig.HighThroughput + ")", output, StringComparison.Ordinal);
        Assert.Contains("refused: ", output, StringComparison.Ordinal);
    }

    [Fact]
    public void TelemetrySampleExportsTheMeterThroughOpenTelemetryAndLogsThroughILogger()
    {
        var (exit, output) = Samples.Run("Telemetry");
        _out.WriteLine(output);
        Assert.True(exit == 0, $"Telemetry exited with {exit}:\n{output}");
        Assert.Contains("20000 operations on telemetry-sample", output, StringComparison.Ordinal);
        Assert.Contains("Opened telemetry-sample", output, StringComparison.Ordinal);   // ILogger, configured by appsettings.json
        Assert.Contains("Closed telemetry-sample", output, StringComparison.Ordinal);
        foreach (var instrument in new[] { RemoteCacheMetrics.Operations, RemoteCacheMetrics.Bytes, RemoteCacheMetrics.Duration })
            Assert.Contains($"Metric Name: {instrument},", output, StringComparison.Ordinal);
        Assert.Contains("remotecache.cache: telemetry-sample remotecache.operation: read", output, StringComparison.Ordinal);
        Assert.Contains("Value: 10000", output, StringComparison.Ordinal);
        Assert.Contains("Value: 2560000", output, StringComparison.Ordinal);  // 10 000 × 256 B each way
    }
}
