using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Tests;
using Xunit;
using Xunit.Abstractions;

namespace RemoteCache.Garnet.Tests;

/// <summary>A .NET program of this build (the tool, a sample) run as a process, its output gathered and logged at the end.</summary>
internal sealed class ToolProcess : IDisposable
{
    private static readonly TimeSpan Patience = TimeSpan.FromSeconds(60);
    private readonly Process _process;
    private readonly string _readyLine;
    private readonly StringBuilder _output = new();
    private readonly TaskCompletionSource _ready = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly ITestOutputHelper _log;

    private ToolProcess(Process process, string readyLine, ITestOutputHelper log)
    {
        _process = process;
        _readyLine = readyLine;
        _log = log;
    }

    /// <summary>Starts <c>dotnet DLL ARGS</c>; it is ready once it prints a line containing <paramref name="readyLine"/>.</summary>
    public static ToolProcess Start(ITestOutputHelper log, string dll, string readyLine, IEnumerable<string> args)
    {
        var info = new ProcessStartInfo("dotnet") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        info.ArgumentList.Add(dll);
        foreach (string arg in args)
            info.ArgumentList.Add(arg);
        info.Environment["DOTNET_NOLOGO"] = "1";
        var tool = new ToolProcess(new Process { StartInfo = info }, readyLine, log);
        tool._process.OutputDataReceived += (_, e) => tool.Line(e.Data);
        tool._process.ErrorDataReceived += (_, e) => tool.Line(e.Data);
        tool._process.Start();
        tool._process.BeginOutputReadLine();
        tool._process.BeginErrorReadLine();
        return tool;
    }

    /// <summary>remotecache-garnet of this build, ready once it says so.</summary>
    public static ToolProcess Garnet(ITestOutputHelper log, IEnumerable<string> args) =>
        Start(log, System.IO.Path.Combine(AppContext.BaseDirectory, "RemoteCache.Garnet.Host.dll"), "ready: Garnet on", args);

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
        var first = await Task.WhenAny(_ready.Task, _process.WaitForExitAsync(), Task.Delay(Patience));
        Assert.True(first == _ready.Task, $"{_process.StartInfo.ArgumentList[0]} did not get ready ({(_process.HasExited ? $"exited {_process.ExitCode}" : "still starting")}):\n{Output}");
    }

    public async Task<int> ExitAsync()
    {
        using var timeout = new CancellationTokenSource(Patience);
        await _process.WaitForExitAsync(timeout.Token);
        return _process.ExitCode;
    }

    /// <summary>SIGTERM, as a service manager stops it; then its exit code.</summary>
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
        if (line.Contains(_readyLine, StringComparison.Ordinal))
            _ready.TrySetResult();
    }
}
