using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Runtime.InteropServices;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Xunit.Sdk;

// The cases start server processes and spin client threads; on a small machine they are more
// predictable one at a time (xunit.runner.json also says so).
[assembly: Xunit.CollectionBehavior(DisableTestParallelization = true)]

namespace RemoteCache.Tests;

/// <summary>The POSIX calls the tests need.</summary>
internal static partial class Posix
{
    public const int SIGKILL = 9;
    public const int SIGTERM = 15;
    public const int SIGCONT = 18;  // x86-64 Linux
    public const int SIGSTOP = 19;

    [LibraryImport("libc", EntryPoint = "kill", SetLastError = true)]
    private static partial int KillNative(int pid, int signal);

    public static void Kill(int pid, int signal)
    {
        if (KillNative(pid, signal) != 0)
            throw new InvalidOperationException($"kill({pid}, {signal}) failed: errno {Marshal.GetLastPInvokeError()}");
    }
}

/// <summary>
/// A <c>remotecache-server</c> process listening on one endpoint of the given transport ("shm" or
/// "tcp"); started and waited for ("ready") by <see cref="Start"/>, stopped with SIGTERM by
/// <see cref="Dispose"/>.
/// </summary>
public sealed class ServerProcess : IDisposable
{
    private static int s_counter;

    // Servers still running. If the test host dies (an unhandled exception on a library thread kills
    // it), they are killed too instead of being left behind as orphans.
    private static readonly ConcurrentDictionary<int, ServerProcess> s_live = new();

    static ServerProcess()
    {
        AppDomain.CurrentDomain.UnhandledException += (_, _) => KillAllLive();
        AppDomain.CurrentDomain.ProcessExit += (_, _) => KillAllLive();
    }

    private static void KillAllLive()
    {
        foreach (var server in s_live.Values)
        {
            try
            {
                Posix.Kill(server.Pid, Posix.SIGKILL);
                if (server._socketPath is not null)
                    File.Delete(server._socketPath);
            }
            catch (Exception)
            {
                // Best effort while the process goes down.
            }
        }
    }

    private readonly Process _process;
    private readonly StringBuilder _output = new();
    private readonly List<string> _endpoints = new();
    private readonly TaskCompletionSource _ready = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly string? _socketPath;
    private bool _killedByTest;
    private int _disposed;

    private ServerProcess(Process process, string? socketPath)
    {
        _process = process;
        _socketPath = socketPath;
    }

    /// <summary>The server executable shipped next to the native library.</summary>
    public static string Executable => RemoteCacheServer.ExecutablePath;

    /// <summary>A fresh endpoint of <paramref name="transport"/> to listen on.</summary>
    public static string NewListenEndpoint(string transport) => transport switch
    {
        "tcp" => "tcp:127.0.0.1:0",
        "shm" => $"shm:{NewSocketPath()}",
        _ => throw new ArgumentException($"unknown transport {transport}", nameof(transport)),
    };

    /// <summary>A fresh, unused Unix socket path for an shm endpoint.</summary>
    public static string NewSocketPath() =>
        $"/tmp/rc-cs-{Environment.ProcessId}-{Interlocked.Increment(ref s_counter)}.sock";

    /// <summary>The endpoint as bound (port 0 resolved).</summary>
    public string Endpoint => _endpoints[0];

    /// <summary>The process id.</summary>
    public int Pid => _process.Id;

    /// <summary>What the server printed so far (stdout and stderr), for failure messages.</summary>
    public string Output
    {
        get
        {
            lock (_output)
                return _output.ToString();
        }
    }

    /// <summary>The id capabilities for this server must name, as it printed it ("server id ...").</summary>
    public string ServerId { get; private set; } = "";

    /// <summary>Starts the server and waits (up to 15 s) until it prints "ready".</summary>
    /// <param name="transport">"shm" or "tcp".</param>
    /// <param name="memoryLimit">--memory-limit; null: the server's default.</param>
    /// <param name="regionSize">--region-size; null: the server's default.</param>
    /// <param name="threads">--threads; null: the server's default.</param>
    /// <param name="extraArgs">More arguments, e.g. --admission-key FILE --server-id ID.</param>
    /// <param name="listen">Where to listen (a server restarted where another was: its <see cref="Endpoint"/>); null: a fresh endpoint.</param>
    public static ServerProcess Start(string transport, string? memoryLimit = "256M", string? regionSize = "1M", int? threads = 2,
                                      IEnumerable<string>? extraArgs = null, string? listen = null)
    {
        listen ??= NewListenEndpoint(transport);
        var info = new ProcessStartInfo(Executable)
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = false,
        };
        var flags = new List<string> { "--listen", listen };
        if (regionSize is not null)
            flags.AddRange(new[] { "--region-size", regionSize });
        if (memoryLimit is not null)
            flags.AddRange(new[] { "--memory-limit", memoryLimit });
        if (threads is { } n)
            flags.AddRange(new[] { "--threads", n.ToString(System.Globalization.CultureInfo.InvariantCulture) });
        foreach (var a in flags)
            info.ArgumentList.Add(a);
        foreach (var a in extraArgs ?? Array.Empty<string>())
            info.ArgumentList.Add(a);
        if (!File.Exists(info.FileName))
            throw new FileNotFoundException("remotecache-server is not in the output folder", info.FileName);

        var process = new Process { StartInfo = info, EnableRaisingEvents = true };
        var server = new ServerProcess(process, transport == "shm" ? listen["shm:".Length..] : null);
        process.OutputDataReceived += (_, e) => server.OnStdout(e.Data);
        process.ErrorDataReceived += (_, e) => server.OnStderr(e.Data);
        if (!process.Start())
            throw new InvalidOperationException("could not start remotecache-server");
        s_live[process.Id] = server;
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        try
        {
            if (!server._ready.Task.Wait(TimeSpan.FromSeconds(15)))
                throw new XunitException($"remotecache-server ({listen}) did not print 'ready' within 15 s. Output:\n{server.Output}");
            if (server._endpoints.Count == 0)
                throw new XunitException($"remotecache-server ({listen}) printed no 'listening' line. Output:\n{server.Output}");
            if (server.ServerId.Length == 0)
                throw new XunitException($"remotecache-server ({listen}) printed no 'server id' line before 'ready'. Output:\n{server.Output}");
            if (transport == "tcp" && server.Endpoint.EndsWith(":0", StringComparison.Ordinal))
                throw new XunitException($"remotecache-server did not resolve port 0: {server.Endpoint}");
        }
        catch
        {
            server.Dispose();
            throw;
        }
        return server;
    }

    private void OnStdout(string? line)
    {
        if (line is null)
        {
            _ready.TrySetException(new XunitException($"remotecache-server closed stdout before 'ready'. Output:\n{Output}"));
            return;
        }
        lock (_output)
            _output.Append(line).Append('\n');
        if (line.StartsWith("listening ", StringComparison.Ordinal))
        {
            lock (_endpoints)
                _endpoints.Add(line["listening ".Length..].Trim());
        }
        else if (line.StartsWith("server id ", StringComparison.Ordinal))
        {
            ServerId = line["server id ".Length..].Trim();
        }
        else if (line == "ready")
        {
            _ready.TrySetResult();
        }
    }

    private void OnStderr(string? line)
    {
        if (line is null)
            return;
        lock (_output)
            _output.Append("[stderr] ").Append(line).Append('\n');
    }

    /// <summary>Fails the test if the server is no longer running (it crashed).</summary>
    public void AssertRunning()
    {
        if (_process.HasExited)
            throw new XunitException($"remotecache-server exited unexpectedly with code {_process.ExitCode}. Output:\n{Output}");
    }

    /// <summary>
    /// SIGSTOP: the server keeps its connections but answers nothing until <see cref="Resume"/>. Returns once every
    /// thread of the server is stopped: kill() returns before the stop takes effect, and a request sent in between
    /// would still be answered.
    /// </summary>
    public void Pause()
    {
        Posix.Kill(_process.Id, Posix.SIGSTOP);
        var waited = Stopwatch.StartNew();
        while (!AllThreadsStopped())
        {
            if (waited.Elapsed > TimeSpan.FromSeconds(10))
                throw new XunitException("remotecache-server was not stopped 10 s after SIGSTOP");
            Thread.Sleep(1);
        }
    }

    // Every task in /proc/PID/task in state T (stopped) or t (traced).
    private bool AllThreadsStopped()
    {
        foreach (var task in Directory.GetDirectories($"/proc/{_process.Id}/task"))
        {
            string stat;
            try
            {
                stat = File.ReadAllText(Path.Combine(task, "stat"));
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                continue;  // the thread has gone
            }
            char state = stat[stat.LastIndexOf(')') + 2];  // after "pid (comm) "
            if (state is not ('T' or 't'))
                return false;
        }
        return true;
    }

    /// <summary>SIGCONT after <see cref="Pause"/>.</summary>
    public void Resume() => Posix.Kill(_process.Id, Posix.SIGCONT);

    /// <summary>SIGKILL, then waits until the process is gone (so its connections are dead).</summary>
    public void KillHard()
    {
        _killedByTest = true;
        Posix.Kill(_process.Id, Posix.SIGKILL);
        if (!_process.WaitForExit(10_000))
            throw new XunitException("remotecache-server survived SIGKILL for 10 s");
    }

    /// <summary>SIGTERM; SIGKILL if it does not stop within 10 s. Later calls do nothing.</summary>
    public void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return;
        try
        {
            if (!_process.HasExited)
            {
                try
                {
                    Posix.Kill(_process.Id, Posix.SIGTERM);
                }
                catch (InvalidOperationException)
                {
                    // Already gone.
                }
                if (!_process.WaitForExit(10_000))
                {
                    _process.Kill(entireProcessTree: true);
                    _process.WaitForExit(5_000);
                }
            }
            else if (!_killedByTest)
            {
                // Crashed during the test: the test has its own assertions; keep the output visible.
                Console.Error.WriteLine($"remotecache-server had exited with {_process.ExitCode}:\n{Output}");
            }
        }
        finally
        {
            s_live.TryRemove(_process.Id, out _);
            _process.Dispose();
            if (_socketPath is not null)
            {
                try
                {
                    File.Delete(_socketPath);
                }
                catch (IOException)
                {
                }
                catch (UnauthorizedAccessException)
                {
                }
            }
        }
    }
}
