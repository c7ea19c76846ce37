// The packaging test's consumer (tests/packaging/run.sh): a quickstart against the packed RemoteCache and
// RemoteCache.Device packages, with nothing from the repository. It starts the remotecache-server program the
// RemoteCache package ships (RemoteCacheServer.ExecutablePath) as a separate process, opens a cache on it, writes
// and reads bytes, and writes and reads a sector through a RemoteCacheDevice (FASTER's IDevice) over a second,
// exclusive cache. Any failure (a native asset missing from the package, not executable, not loadable) exits
// non-zero.
using System;
using System.Diagnostics;
using System.IO;
using System.Runtime.InteropServices;
using System.Text;
using System.Runtime.Versioning;
using System.Threading;
using System.Threading.Tasks;
using FASTER.core;
using RemoteCache;
using RemoteCache.Device;

[assembly: SupportedOSPlatform("linux")]

internal static class Program
{
    private static async Task<int> Main()
    {
        try
        {
            return await RunAsync();
        }
        catch (Exception e)
        {
            // DllNotFoundException when libremotecache.so is missing, Win32Exception when the server cannot start...
            return Fail(e.ToString());
        }
    }

    private static async Task<int> RunAsync()
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(90));
        var ct = timeout.Token;
        // run.sh checks that the net8.0 build ran on .NET 8.
        Console.WriteLine($"runtime: {RuntimeInformation.FrameworkDescription}");

        string serverPath = RemoteCacheServer.ExecutablePath;
        Console.WriteLine($"RemoteCacheServer.ExecutablePath = {serverPath}");
        if (!File.Exists(serverPath))
            return Fail($"{serverPath} does not exist: the package did not bring remotecache-server");
        var mode = File.GetUnixFileMode(serverPath);
        Console.WriteLine($"  mode {Convert.ToString((int)mode, 8)}");
        if ((mode & UnixFileMode.UserExecute) == 0)
            return Fail($"{serverPath} is not executable (mode {Convert.ToString((int)mode, 8)})");
        foreach (var sibling in new[] { "libremotecache.so", "remotecache-capability" })
        {
            string path = Path.Combine(Path.GetDirectoryName(serverPath)!, sibling);
            if (!File.Exists(path))
                return Fail($"{path} does not exist: the package did not bring {sibling}");
        }

        // The shipped SLO models came along as content files, and one plans a cache for an SLO.
        string model = RemoteCache.Slo.RemoteCacheSloModels.PathFor("tcp", 512);
        var plan = new RemoteCache.Slo.SloPlanner(RemoteCache.Slo.PerformanceModel.Load(model))
            .Plan(new RemoteCache.Slo.RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(100), RecordSize = 512 });
        Console.WriteLine($"shipped models: {string.Join(", ", RemoteCache.Slo.RemoteCacheSloModels.Files)}; tcp-512 plans {plan.Config}");
        if (plan.Config is null)
            return Fail($"the shipped model {model} meets no 100 µs read SLO");

        using var server = ServerProcess.Start(serverPath, "--listen", "tcp:127.0.0.1:0", "--region-size", "16M",
                                               "--memory-limit", "64M");
        string endpoint = await server.WaitReadyAsync(ct);
        Console.WriteLine($"remotecache-server (pid {server.Pid}) ready on {endpoint}");

        // The quickstart: a cache of one region on that server, bytes written and read back.
        await using (var cache = await RemoteCacheClient.OpenAsync(new[] { endpoint }, new RemoteCacheOptions { RegionsPerServer = 1 }, ct))
        {
            var greeting = Encoding.UTF8.GetBytes("hello, remote memory, from the packed packages");
            await cache.WriteAsync(4096, greeting, ct);
            var back = new byte[greeting.Length];
            await cache.ReadAsync(4096, back, ct);
            if (!back.AsSpan().SequenceEqual(greeting))
                return Fail($"read back '{Encoding.UTF8.GetString(back)}' instead of '{Encoding.UTF8.GetString(greeting)}'");
            Console.WriteLine($"cache '{cache.Name}' ({cache.Capacity >> 20} MiB): wrote and read back \"{Encoding.UTF8.GetString(back)}\"");
        }

        // RemoteCache.Device: a FASTER device over an exclusive cache; one sector through IDevice's calls.
        var deviceCache = await RemoteCacheClient.OpenAsync(new[] { endpoint },
            new RemoteCacheOptions { RegionsPerServer = 1, Exclusive = true }, ct);
        using (var device = new RemoteCacheDevice(deviceCache, ownsCache: true))
        {
            device.Initialize(1L << 20, new LightEpoch());
            if (DeviceRoundTrip(device) is { } why)
                return Fail(why);
            Console.WriteLine($"RemoteCacheDevice '{device.FileName}': {device.RingSegments} segments of 1 MiB; " +
                              "wrote and read back a sector of segment 3");
        }

        int exit = await server.StopAsync(ct);
        if (exit != 0)
            return Fail($"remotecache-server exited with {exit}:\n{server.Output}");
        Console.WriteLine("remotecache-server stopped; packaging consumer passed");
        return 0;
    }

    // One sector written to and read back from segment 3 through FASTER's IDevice calls; null when it worked.
    private static unsafe string? DeviceRoundTrip(RemoteCacheDevice device)
    {
        const int Sector = 512;
        byte* buffer = (byte*)NativeMemory.AlignedAlloc(Sector, Sector);
        try
        {
            new Span<byte>(buffer, Sector).Fill(0x5a);
            var (error, bytes) = Io(cb => device.WriteAsync((IntPtr)buffer, 3, 8192, Sector, cb, null!));
            if (error != 0 || bytes != Sector)
                return $"RemoteCacheDevice write: error 0x{error:x}, {bytes} bytes";
            new Span<byte>(buffer, Sector).Clear();
            (error, bytes) = Io(cb => device.ReadAsync(3, 8192, (IntPtr)buffer, Sector, cb, null!));
            if (error != 0 || bytes != Sector)
                return $"RemoteCacheDevice read: error 0x{error:x}, {bytes} bytes";
            if (new Span<byte>(buffer, Sector).IndexOfAnyExcept((byte)0x5a) >= 0)
                return "RemoteCacheDevice read back other bytes than it wrote";
            return null;
        }
        finally
        {
            NativeMemory.AlignedFree(buffer);
        }
    }

    private static (uint Error, uint Bytes) Io(Action<DeviceIOCompletionCallback> start)
    {
        var done = new TaskCompletionSource<(uint, uint)>(TaskCreationOptions.RunContinuationsAsynchronously);
        start((error, bytes, _) => done.TrySetResult((error, bytes)));
        if (!done.Task.Wait(TimeSpan.FromSeconds(30)))
            throw new TimeoutException("a RemoteCacheDevice operation did not complete in 30 s");
        return done.Task.Result;
    }

    private static int Fail(string why)
    {
        Console.Error.WriteLine($"packaging consumer FAILED: {why}");
        return 1;
    }
}

/// <summary>A remotecache-server process: started, waited for ("listening ENDPOINT" then "ready"), stopped with SIGTERM.</summary>
internal sealed class ServerProcess : IDisposable
{
    private readonly Process _process;
    private readonly StringBuilder _output = new();
    private readonly TaskCompletionSource<string> _ready = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private string? _endpoint;

    private ServerProcess(Process process) => _process = process;

    public int Pid => _process.Id;

    public string Output
    {
        get
        {
            lock (_output)
                return _output.ToString();
        }
    }

    public static ServerProcess Start(string path, params string[] args)
    {
        var info = new ProcessStartInfo(path) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var arg in args)
            info.ArgumentList.Add(arg);
        var process = new Process { StartInfo = info };
        var server = new ServerProcess(process);
        process.OutputDataReceived += (_, e) => server.OnLine(e.Data, stdout: true);
        process.ErrorDataReceived += (_, e) => server.OnLine(e.Data, stdout: false);
        process.Exited += (_, _) => server._ready.TrySetException(
            new InvalidOperationException($"remotecache-server exited before it was ready:\n{server.Output}"));
        process.EnableRaisingEvents = true;
        process.Start();  // throws Win32Exception when the file is not executable
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        return server;
    }

    private void OnLine(string? line, bool stdout)
    {
        if (line is null)
            return;
        lock (_output)
            _output.Append(line).Append('\n');
        if (!stdout)
            return;
        if (line.StartsWith("listening ", StringComparison.Ordinal))
            _endpoint ??= line.Substring("listening ".Length).Trim();
        else if (line == "ready")
        {
            if (_endpoint is null)
                _ready.TrySetException(new InvalidOperationException($"remotecache-server said ready before listening:\n{Output}"));
            else
                _ready.TrySetResult(_endpoint);
        }
    }

    public Task<string> WaitReadyAsync(CancellationToken ct) => _ready.Task.WaitAsync(ct);

    public async Task<int> StopAsync(CancellationToken ct)
    {
        if (!_process.HasExited)
            _ = Kill(_process.Id, SIGTERM);
        await _process.WaitForExitAsync(ct);
        return _process.ExitCode;
    }

    public void Dispose()
    {
        if (!_process.HasExited)
            _process.Kill();
        _process.Dispose();
    }

    private const int SIGTERM = 15;

    [DllImport("libc", EntryPoint = "kill", SetLastError = true)]
    private static extern int Kill(int pid, int signal);
}
