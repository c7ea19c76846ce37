using System;
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

    private static (int Exit, string Output) RunSample(string endpoint) => Samples.Run("FasterTiered", endpoint);
}
