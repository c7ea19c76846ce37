using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Manager.Tests;
using RemoteCache.Tests;
using StackExchange.Redis;
using Xunit;
using Xunit.Abstractions;

namespace RemoteCache.Garnet.Tests;

/// <summary>remotecache-garnet as a user runs it: a process, Garnet's options and --rc-* ones, a RESP client.</summary>
public sealed class HostTests : IDisposable
{
    private readonly string _directory = Directory.CreateTempSubdirectory("rc-garnet-host-").FullName;
    private readonly ITestOutputHelper _output;

    public HostTests(ITestOutputHelper output) => _output = output;

    public void Dispose() => Directory.Delete(_directory, recursive: true);

    [Fact]
    public async Task ServesGarnetWithItsLogsOnCachesOpenedOnTheServersGiven()
    {
        using var server = ServerProcess.Start("shm", memoryLimit: "256M");
        int port = Workload.FreePort();
        using var host = ToolProcess.Garnet(_output, Workload.GarnetArgs(_directory, port).Concat(new[] { "--rc-servers", server.Endpoint, "--rc-cache-size", "8m" }));
        await host.ReadyAsync();
        Assert.Contains("Log on remote memory: tiered:remotecache:garnet-hlog;", host.Output);
        Assert.Contains("Log on remote memory: tiered:remotecache:garnet-hlog_objs;", host.Output);
        await RoundTripAsync(port);
        Assert.Equal(0, await host.StopAsync());
        Assert.Contains("Closed garnet-hlog", host.Output);
    }

    [Fact]
    public async Task WithoutObjectsOnlyTheMainLogGetsACacheAndItsSizeNeedNotFitTheObjectLog()
    {
        using var server = ServerProcess.Start("shm", memoryLimit: "256M");
        int port = Workload.FreePort();
        // 6 MiB: whole main-log segments (1 MiB), not whole object-log ones (4 MiB); with --no-obj there is no object log.
        using var host = ToolProcess.Garnet(_output, Workload.GarnetArgs(_directory, port).Concat(new[] { "--no-obj", "--rc-servers", server.Endpoint, "--rc-cache-size", "6m" }));
        await host.ReadyAsync();
        Assert.Contains("Log on remote memory: tiered:remotecache:garnet-hlog;", host.Output);
        Assert.DoesNotContain("garnet-hlog_objs", host.Output);
        await using var redis = await Workload.ConnectAsync(port);
        var db = redis.GetDatabase();
        Assert.True(await db.StringSetAsync("k", "v"));
        Assert.Equal("v", (string?)await db.StringGetAsync("k"));
        Assert.Equal(0, await host.StopAsync());
    }

    [Fact]
    public async Task CreatesItsCachesThroughTheManagerAndDeletesThemWhenItStops()
    {
        await using var manager = new TestManager();
        string keyFile = await StartAsAliceAsync(manager);
        int port = Workload.FreePort();
        using var host = ToolProcess.Garnet(_output, Workload.GarnetArgs(_directory, port).Concat(new[]
        {
            "--rc-manager", manager.Address!.ToString(), "--rc-api-key-file", keyFile, "--rc-cache-size", "64m", "--rc-transport", "shm",
        }));
        await host.ReadyAsync();
        await using var alice = manager.ManagedClient();
        var caches = await alice.ListAsync();
        Assert.Equal(new[] { "garnet-hlog", "garnet-hlog_objs" }, caches.Select(c => c.Name).OrderBy(n => n, StringComparer.Ordinal));
        await RoundTripAsync(port);
        Assert.Equal(0, await host.StopAsync());
        Assert.Empty(await alice.ListAsync());
    }

    [Fact]
    public async Task ACacheTheManagerRefusesKeepsGarnetFromStartingAndSaysWhy()
    {
        await using var manager = new TestManager();
        string keyFile = await StartAsAliceAsync(manager);
        // Alice's quota is 2 GiB.
        using var host = ToolProcess.Garnet(_output, Workload.GarnetArgs(_directory, Workload.FreePort()).Concat(new[]
        {
            "--rc-manager", manager.Address!.ToString(), "--rc-api-key-file", keyFile, "--rc-cache-size", "4g",
        }));
        Assert.Equal(1, await host.ExitAsync());
        Assert.Contains("Garnet did not start: its log's cache was refused:", host.Output);
        Assert.Contains("quota", host.Output, StringComparison.OrdinalIgnoreCase);
    }

    [Theory]
    [InlineData("--recover --rc-cache-only --rc-cache-size 8m", "--recover refused with --rc-cache-only")]
    [InlineData("--max-databases 4 --rc-cache-size 8m", "--max-databases 4 refused")]
    [InlineData("--rc-cache-size 1536k", "--rc-cache-size 1572864 refused: the main log's cache holds whole segments of 1048576 bytes")]
    [InlineData("--rc-cache-size 8m --rc-object-cache-size 2m", "--rc-object-cache-size 2097152 refused: the object log's cache holds whole segments of 4194304 bytes")]
    [InlineData("--rc-cache-size lots", "--rc-cache-size 'lots' is not a size")]
    [InlineData("--rc-cache-size 8m --rc-cache-size 16m", "--rc-cache-size")]
    [InlineData("--rc-cache-size 8m --rc-read-us -3", "--rc-read-us must be in (0, 1e6]")]
    [InlineData("--rc-cache-size 8m --no-such-garnet-option 1", "Garnet refused its options")]
    public async Task RefusesWhatItCannotRunWithAndSaysWhy(string extra, string expected)
    {
        var args = Workload.GarnetArgs(_directory, Workload.FreePort()).Concat(new[] { "--rc-servers", "tcp:127.0.0.1:1" }).Concat(extra.Split(' ')).ToList();
        using var host = ToolProcess.Garnet(_output, args);
        Assert.Equal(2, await host.ExitAsync());
        Assert.Contains(expected, host.Output);
    }

    [Fact]
    public async Task NeedsAManagerOrServers()
    {
        using var host = ToolProcess.Garnet(_output, Workload.GarnetArgs(_directory, Workload.FreePort()).Concat(new[] { "--rc-cache-size", "8m" }));
        Assert.Equal(2, await host.ExitAsync());
        Assert.Contains("give the caches' managers (--rc-manager URL) or their servers (--rc-servers ENDPOINT,…)", host.Output);
    }

    // The manager started, and alice's API key in a file for the tool.
    private async Task<string> StartAsAliceAsync(TestManager manager)
    {
        await manager.StartAsync();
        string keyFile = Path.Combine(_directory, "key");
        File.WriteAllText(keyFile, TestManager.AliceKey + "\n");
        return keyFile;
    }

    private static async Task RoundTripAsync(int port)
    {
        await using var redis = await Workload.ConnectAsync(port);
        var db = redis.GetDatabase();
        await Workload.LoadAsync(db);
        await Workload.VerifyAsync(db);
    }

}
