using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// A program running inside a bed host (<c>ip netns exec NS PROGRAM …</c>, which execs the program: the process id is the
/// program's own, so a signal reaches the program, not a wrapper). Its stdout and stderr go to <see cref="LogFile"/>,
/// read when a scenario fails.
/// </summary>
public sealed class BedProcess : IAsyncDisposable
{
    private readonly Process _process;
    private readonly StreamWriter _log;
    private readonly object _logLock = new();
    private readonly List<string> _lines = new();
    private readonly TaskCompletionSource _exited = new(TaskCreationOptions.RunContinuationsAsynchronously);

    private BedProcess(BedHost host, string name, Process process, string logFile)
    {
        Host = host;
        Name = name;
        _process = process;
        LogFile = logFile;
        _log = new StreamWriter(logFile, append: true) { AutoFlush = true };
    }

    public BedHost Host { get; }

    /// <summary>What the bed calls it (also its log file's name).</summary>
    public string Name { get; }

    public string LogFile { get; }

    public int Pid => _process.Id;

    public bool HasExited => _exited.Task.IsCompleted;

    /// <summary>Its exit status once it has exited (128 + the signal when killed by one, as the shell reports it).</summary>
    public int? ExitCode { get; private set; }

    /// <summary>Completes when the process has ended (killed or on its own).</summary>
    public Task Exited => _exited.Task;

    internal static BedProcess Start(BedHost host, string name, string program, IEnumerable<string> args, string logFile,
                                     IReadOnlyDictionary<string, string>? environment)
    {
        // stdin redirected too: a child gets a pipe of its own rather than sharing the test host's stdin.
        var start = new ProcessStartInfo(Ip.Binary)
        {
            RedirectStandardOutput = true, RedirectStandardError = true, RedirectStandardInput = true, UseShellExecute = false,
        };
        // In a host with a memory cgroup, a shell puts itself there before the program replaces it (cgroup v1 does not move
        // what a process has charged, so it must be in before it allocates), having mounted the memory controller again:
        // `ip netns exec` gives the process a sysfs of its own, without the cgroup file systems a host has.
        var command = host.MemoryCgroup is null
            ? new[] { program }
            : new[]
            {
                "sh", "-c",
                $"mount -t tmpfs cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/memory && mount -t cgroup -o memory memory /sys/fs/cgroup/memory && echo $$ > {host.MemoryCgroup}/cgroup.procs && exec \"$0\" \"$@\"",
                program,
            };
        foreach (string a in new[] { "netns", "exec", host.Namespace }.Concat(command).Concat(args))
            start.ArgumentList.Add(a);
        foreach (var (key, value) in environment ?? new Dictionary<string, string>())
            start.Environment[key] = value;
        var process = new Process { StartInfo = start, EnableRaisingEvents = true };
        File.AppendAllText(logFile, $"---- {DateTime.UtcNow:HH:mm:ss.fff} start: {program} {string.Join(' ', args)}\n");
        var bed = new BedProcess(host, name, process, logFile);
        process.OutputDataReceived += (_, e) => bed.Append(e.Data);
        process.ErrorDataReceived += (_, e) => bed.Append(e.Data);
        process.Exited += (_, _) => bed.OnExited();
        process.Start();
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        return bed;
    }

    private void Append(string? line)
    {
        if (line is null)
            return;
        lock (_logLock)
        {
            _lines.Add(line);
            try
            {
                _log.WriteLine(line);
            }
            catch (ObjectDisposedException)
            {
                // Output after the bed closed the log: nobody reads it any more.
            }
        }
    }

    private void OnExited()
    {
        // The exit code is read once the output is drained (WaitForExit), so that the log ends with the whole output.
        _ = Task.Run(() =>
        {
            _process.WaitForExit();
            ExitCode = _process.ExitCode;
            Append($"---- {DateTime.UtcNow:HH:mm:ss.fff} exited with {_process.ExitCode}");
            _exited.TrySetResult();
        });
    }

    /// <summary>Whether a line of its output so far contains <paramref name="text"/>.</summary>
    public bool Printed(string text)
    {
        lock (_logLock)
            return _lines.Any(l => l.Contains(text, StringComparison.Ordinal));
    }

    /// <summary>Waits until a line of its output contains <paramref name="text"/>; throws with the output if it exits first or the time runs out.</summary>
    public async Task WaitForOutputAsync(string text, TimeSpan timeout)
    {
        var deadline = Stopwatch.StartNew();
        while (!Printed(text))
        {
            if (HasExited)
                throw new InvalidOperationException($"{Name} on {Host.Name} exited before printing '{text}':\n{Tail()}");
            if (deadline.Elapsed > timeout)
                throw new TimeoutException($"{Name} on {Host.Name} did not print '{text}' within {timeout.TotalSeconds} s:\n{Tail()}");
            await Task.Delay(50).ConfigureAwait(false);
        }
    }

    /// <summary>The last line of its output that starts with <paramref name="prefix"/>, without it; null if none did.</summary>
    public string? LastLine(string prefix)
    {
        lock (_logLock)
            return _lines.LastOrDefault(l => l.StartsWith(prefix, StringComparison.Ordinal))?[prefix.Length..];
    }

    /// <summary>Every line of its output so far that starts with <paramref name="prefix"/>, without it.</summary>
    public IReadOnlyList<string> Lines(string prefix)
    {
        lock (_logLock)
            return _lines.Where(l => l.StartsWith(prefix, StringComparison.Ordinal)).Select(l => l[prefix.Length..]).ToList();
    }

    /// <summary>Closes its stdin (a program that reads it to the end takes that as the signal to finish).</summary>
    public void CloseInput()
    {
        if (!HasExited)
            _process.StandardInput.Close();
    }

    /// <summary>The last lines of its output, for a failure message.</summary>
    public string Tail(int lines = 40)
    {
        lock (_logLock)
            return string.Join('\n', _lines.Skip(Math.Max(0, _lines.Count - lines)));
    }

    /// <summary>kill -9, and waits until it is gone.</summary>
    public Task KillAsync() => SignalAndWaitAsync("KILL");

    /// <summary>SIGTERM (a graceful stop), and waits until it is gone; kill -9 after <paramref name="grace"/>.</summary>
    public async Task StopAsync(TimeSpan? grace = null)
    {
        if (HasExited)
            return;
        await Ip.SignalAsync("TERM", new[] { Pid }).ConfigureAwait(false);
        if (await Task.WhenAny(Exited, Task.Delay(grace ?? TimeSpan.FromSeconds(10))).ConfigureAwait(false) != Exited)
            await KillAsync().ConfigureAwait(false);
    }

    /// <summary>SIGSTOP: frozen, its sockets open (peers see silence, not a closed connection).</summary>
    public Task PauseAsync() => Ip.SignalAsync("STOP", new[] { Pid });

    /// <summary>SIGCONT after <see cref="PauseAsync"/>.</summary>
    public Task ResumeAsync() => Ip.SignalAsync("CONT", new[] { Pid });

    private async Task SignalAndWaitAsync(string signal)
    {
        if (HasExited)
            return;
        await Ip.SignalAsync(signal, new[] { Pid }).ConfigureAwait(false);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(10));
        await Exited.WaitAsync(timeout.Token).ConfigureAwait(false);
    }

    public async ValueTask DisposeAsync()
    {
        if (!HasExited)
        {
            try
            {
                _process.Kill();
            }
            catch (InvalidOperationException)
            {
                // Gone in the meantime.
            }
            await Task.WhenAny(Exited, Task.Delay(TimeSpan.FromSeconds(10))).ConfigureAwait(false);
        }
        lock (_logLock)
            _log.Dispose();
        _process.Dispose();
    }
}
