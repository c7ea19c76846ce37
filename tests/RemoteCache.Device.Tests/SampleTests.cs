using System;
using System.Diagnostics;
using System.IO;
using RemoteCache.Tests;
using Xunit;
using Xunit.Abstractions;

namespace RemoteCache.Device.Tests;

/// <summary>The README's FASTER example (samples/FasterTiered) as a user runs it: against a stand-alone server.</summary>
public sealed class SampleTests
{
    private readonly ITestOutputHelper _out;

    public SampleTests(ITestOutputHelper output) => _out = output;

    [Fact]
    public void FasterTieredSampleWorksAgainstAStandAloneServerAtDefaultFlags()
    {
        // Default flags but the endpoint (a free port): 1 GiB regions, 4 GiB in all, as the README says.
        using var server = ServerProcess.Start("tcp", memoryLimit: null, regionSize: null, threads: null);
        var (exit, output) = RunSample(server.Endpoint);
        _out.WriteLine(output);
        Assert.True(exit == 0, $"FasterTiered exited with {exit}:\n{output}\nserver:\n{server.Output}");
        Assert.Contains("200000 records, 0 wrong; cache 1024 MiB (" + CacheConfig.OneSided + ")", output);
        server.AssertRunning();
    }

    [Fact]
    public void FasterTieredSampleNamesTheEndpointItCouldNotReach()
    {
        using var server = ServerProcess.Start("tcp");
        string endpoint = server.Endpoint;
        server.Dispose();
        var (exit, output) = RunSample(endpoint);
        Assert.Equal(2, exit);
        Assert.Contains($"is remotecache-server running at {endpoint}?", output);
    }

    private static (int Exit, string Output) RunSample(string endpoint)
    {
        // tests/RemoteCache.Device.Tests/bin/<Configuration>/<tfm>/ → samples/FasterTiered/bin/<Configuration>/<tfm>/
        var output = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar));
        string tfm = output.Name, configuration = output.Parent!.Name;
        string root = output.Parent!.Parent!.Parent!.Parent!.Parent!.FullName;
        string dll = Path.Combine(root, "samples", "FasterTiered", "bin", configuration, tfm, "FasterTiered.dll");
        Assert.True(File.Exists(dll), $"the sample is not built: {dll}");
        var info = new ProcessStartInfo(Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") ?? "dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        info.ArgumentList.Add(dll);
        info.ArgumentList.Add(endpoint);
        using var process = Process.Start(info)!;
        var stderr = process.StandardError.ReadToEndAsync();
        string stdout = process.StandardOutput.ReadToEnd();
        if (!process.WaitForExit(TimeSpan.FromSeconds(120)))
        {
            process.Kill(entireProcessTree: true);
            throw new TimeoutException($"FasterTiered did not finish within 120 s:\n{stdout}");
        }
        return (process.ExitCode, stdout + stderr.Result);
    }
}
