using System;
using System.Diagnostics;
using System.IO;
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

/// <summary>A native library from another build is refused by name, before any call that depends on its layouts.</summary>
public sealed class NativeVersionTests
{
    [Theory]
    [InlineData("unsigned rc_api_version(void) { return 2; }", "has API version 2; this RemoteCache assembly needs version")]
    [InlineData("int rc_something_else(void) { return 0; }", "has no rc_api_version")]
    public void AMismatchedNativeLibraryIsRefusedWithItsPathAndVersion(string stub, string expected)
    {
        // The quickstart, copied with a stand-in libremotecache.so in its runtime layout.
        var built = Path.GetDirectoryName(typeof(NativeVersionTests).Assembly.Location)!;
        var sample = Path.Combine(built, "..", "..", "..", "..", "..", "samples", "Quickstart", "bin",
                                  new DirectoryInfo(built).Parent!.Name, new DirectoryInfo(built).Name);
        var copy = Directory.CreateTempSubdirectory("rc-version-");
        try
        {
            foreach (var file in Directory.GetFiles(sample, "*", SearchOption.AllDirectories))
            {
                var target = Path.Combine(copy.FullName, Path.GetRelativePath(sample, file));
                Directory.CreateDirectory(Path.GetDirectoryName(target)!);
                File.Copy(file, target);
            }
            var library = Path.Combine(copy.FullName, "runtimes", "linux-x64", "native", "libremotecache.so");
            var source = Path.Combine(copy.FullName, "stub.c");
            File.WriteAllText(source, stub + "\n");
            var cc = Process.Start(new ProcessStartInfo("cc", $"-shared -fPIC -o {library} {source}") { RedirectStandardError = true })!;
            string ccErrors = cc.StandardError.ReadToEnd();
            cc.WaitForExit();
            Assert.True(cc.ExitCode == 0, $"cc failed: {ccErrors}");

            var info = new ProcessStartInfo(Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") ?? "dotnet")
            {
                RedirectStandardOutput = true,
                RedirectStandardError = true,
            };
            info.ArgumentList.Add(Path.Combine(copy.FullName, "Quickstart.dll"));
            using var process = Process.Start(info)!;
            var stdout = process.StandardOutput.ReadToEndAsync();
            string stderr = process.StandardError.ReadToEnd();
            Assert.True(process.WaitForExit(60_000), "the quickstart did not exit");
            Assert.NotEqual(0, process.ExitCode);
            Assert.Contains("InvalidOperationException", stderr, StringComparison.Ordinal);
            Assert.Contains(expected, stderr, StringComparison.Ordinal);
            Assert.Contains(library, stderr, StringComparison.Ordinal);
        }
        finally
        {
            copy.Delete(recursive: true);
        }
    }
}
