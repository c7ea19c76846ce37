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
        using var host = Host.Start(GarnetArgs(port).Concat(new[] { "--rc-servers", server.Endpoint, "--rc-cache-size", "8m" }), _output);
        await host.ReadyAsync();
        Assert.Contains("Log on remote memory: tiered:remotecache:garnet-hlog;", host.Output);
        Assert.Contains("Log on remote memory: tiered:remotecache:garnet-hlog_objs;", host.Output);
        await RoundTripAsync(port);
        Assert.Equal(0, await host.StopAsync());
        Assert.Contains("Closed garnet-hlog", host.Output);
    }

    [Fact]
    public async Task CreatesItsCachesThroughTheManagerAndDeletesThemWhenItStops()
    {
        await using var manager = new TestManager();
        string keyFile = await StartAsAliceAsync(manager);
        int port = Workload.FreePort();
        using var host = Host.Start(GarnetArgs(port).Concat(new[]
        {
            "--rc-manager", manager.Address!.ToString(), "--rc-api-key-file", keyFile, "--rc-cache-size", "64m", "--rc-transport", "shm",
        }), _output);
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
        using var host = Host.Start(GarnetArgs(Workload.FreePort()).Concat(new[]
        {
            "--rc-manager", manager.Address!.ToString(), "--rc-api-key-file", keyFile, "--rc-cache-size", "4g",
        }), _output);
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
        var args = GarnetArgs(Workload.FreePort()).Concat(new[] { "--rc-servers", "tcp:127.0.0.1:1" }).Concat(extra.Split(' ')).ToList();
        using var host = Host.Start(args, _output);
        Assert.Equal(2, await host.ExitAsync());
        Assert.Contains(expected, host.Output);
    }

    [Fact]
    public async Task NeedsAManagerOrServers()
    {
        using var host = Host.Start(GarnetArgs(Workload.FreePort()).Concat(new[] { "--rc-cache-size", "8m" }), _output);
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

    // A small Garnet: 256 KiB of log in memory, segments of 1 MiB (4 MiB for objects), files under the test's directory.
    private IEnumerable<string> GarnetArgs(int port) => new[]
    {
        "--port", port.ToString(System.Globalization.CultureInfo.InvariantCulture), "--bind", "127.0.0.1",
        "--logdir", Path.Combine(_directory, "log"), "--checkpointdir", Path.Combine(_directory, "checkpoints"),
        "--memory", "256k", "--page", "64k", "--segment", "1m", "--object-log-segment", "4m", "--index", "1m",
    };

    /// <summary>The tool's process (the build next to the tests), its output gathered.</summary>
    private sealed class Host : IDisposable
    {
        private static readonly TimeSpan Patience = TimeSpan.FromSeconds(60);
        private readonly Process _process;
        private readonly StringBuilder _output = new();
        private readonly TaskCompletionSource _ready = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private readonly ITestOutputHelper _log;

        private Host(Process process, ITestOutputHelper log)
        {
            _process = process;
            _log = log;
        }

        public static Host Start(IEnumerable<string> args, ITestOutputHelper log)
        {
            var info = new ProcessStartInfo("dotnet") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
            info.ArgumentList.Add(Path.Combine(AppContext.BaseDirectory, "RemoteCache.Garnet.Host.dll"));
            foreach (string arg in args)
                info.ArgumentList.Add(arg);
            info.Environment["DOTNET_NOLOGO"] = "1";
            var host = new Host(new Process { StartInfo = info }, log);
            host._process.OutputDataReceived += (_, e) => host.Line(e.Data);
            host._process.ErrorDataReceived += (_, e) => host.Line(e.Data);
            host._process.Start();
            host._process.BeginOutputReadLine();
            host._process.BeginErrorReadLine();
            return host;
        }

        public string Output
        {
            get
            {
                lock (_output)
                    return _output.ToString();
            }
        }

        public async Task ReadyAsync()
        {
            var exited = _process.WaitForExitAsync();
            var first = await Task.WhenAny(_ready.Task, exited, Task.Delay(Patience));
            Assert.True(first == _ready.Task, $"remotecache-garnet did not get ready ({(_process.HasExited ? $"exited {_process.ExitCode}" : "still starting")}):\n{Output}");
        }

        public async Task<int> ExitAsync()
        {
            using var timeout = new CancellationTokenSource(Patience);
            await _process.WaitForExitAsync(timeout.Token);
            return _process.ExitCode;
        }

        public Task<int> StopAsync()
        {
            Posix.Kill(_process.Id, Posix.SIGTERM);
            return ExitAsync();
        }

        public void Dispose()
        {
            if (!_process.HasExited)
                _process.Kill(entireProcessTree: true);
            _process.Dispose();
            _log.WriteLine(Output);
        }

        private void Line(string? line)
        {
            if (line is null)
                return;
            lock (_output)
                _output.AppendLine(line);
            if (line.Contains("ready: Garnet on", StringComparison.Ordinal))
                _ready.TrySetResult();
        }
    }
}
