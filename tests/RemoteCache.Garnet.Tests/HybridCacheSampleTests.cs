using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Net.Http;
using System.Net.Http.Json;
using System.Threading.Tasks;
using RemoteCache.Tests;
using StackExchange.Redis;
using Xunit;
using Xunit.Abstractions;

namespace RemoteCache.Garnet.Tests;

/// <summary>samples/GarnetHybridCache, a .NET service's HybridCache over the Redis distributed cache, pointed at remotecache-garnet.</summary>
public sealed class HybridCacheSampleTests : IDisposable
{
    private const int Products = 300;
    private readonly string _directory = Directory.CreateTempSubdirectory("rc-garnet-sample-").FullName;
    private readonly ITestOutputHelper _output;

    public HybridCacheSampleTests(ITestOutputHelper output) => _output = output;

    public void Dispose() => Directory.Delete(_directory, recursive: true);

    [Fact]
    public async Task AServiceRestartedFindsWhatItCachedInGarnetOnRemoteMemory()
    {
        using var server = ServerProcess.Start("shm", memoryLimit: "256M");
        int garnetPort = Workload.FreePort();
        using var garnet = ToolProcess.Garnet(_output, Workload.GarnetArgs(_directory, garnetPort).Concat(new[] { "--rc-servers", server.Endpoint, "--rc-cache-size", "8m" }));
        await garnet.ReadyAsync();

        // First run: every product loaded once from the catalog, then served by the cache.
        var first = await ReadAllTwiceAsync(garnetPort);
        Assert.Equal(Products, first.Loads);
        // A new process has an empty local cache: what it serves comes from Garnet, whose log is mostly in the remote cache.
        var second = await ReadAllTwiceAsync(garnetPort);
        Assert.Equal(0, second.Loads);
        Assert.Equal(first.Bodies, second.Bodies);
        await using var redis = await Workload.ConnectAsync(garnetPort);
        Assert.True(await redis.GetDatabase().KeyExistsAsync("products:product:7"), "the sample's entries are not in Garnet");
        Assert.Equal(0, await garnet.StopAsync());
    }

    // Runs the sample, reads every product twice, stops it: the bodies read and how many the sample loaded from its catalog.
    private async Task<(long Loads, List<string> Bodies)> ReadAllTwiceAsync(int garnetPort)
    {
        int port = Workload.FreePort();
        string url = $"http://127.0.0.1:{port}";
        using var sample = ToolProcess.Start(_output, SampleDll, "Now listening on", new[] { "--Garnet", $"127.0.0.1:{garnetPort}", "--urls", url });
        await sample.ReadyAsync();
        using var http = new HttpClient { BaseAddress = new Uri(url), Timeout = TimeSpan.FromSeconds(30) };
        var bodies = new List<string>();
        for (int pass = 0; pass < 2; pass++)
        {
            foreach (int id in Enumerable.Range(1, Products))
            {
                string body = await http.GetStringAsync($"/products/{id}");
                Assert.Contains($"\"id\":{id},", body);
                if (pass == 0)
                    bodies.Add(body);
                else
                    Assert.Equal(bodies[id - 1], body);
            }
        }
        var stats = await http.GetFromJsonAsync<Stats>("/stats");
        Assert.Equal(0, await sample.StopAsync());
        return (stats!.Loads, bodies);
    }

    private sealed record Stats(long Loads);

    // tests/RemoteCache.Garnet.Tests/bin/<Configuration>/<tfm>/ → samples/GarnetHybridCache/bin/<Configuration>/<tfm>/
    private static string SampleDll
    {
        get
        {
            var output = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar));
            string root = output.Parent!.Parent!.Parent!.Parent!.Parent!.FullName;
            string dll = Path.Combine(root, "samples", "GarnetHybridCache", "bin", output.Parent.Name, output.Name, "GarnetHybridCache.dll");
            Assert.True(File.Exists(dll), $"the sample is not built: {dll}");
            return dll;
        }
    }
}
