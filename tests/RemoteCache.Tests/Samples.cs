using System;
using System.Diagnostics;
using System.IO;
using Xunit;

namespace RemoteCache.Tests;

/// <summary>Runs a sample of samples/ as a user does: its built program, in a process of its own.</summary>
public static class Samples
{
    /// <summary>
    /// Only a hang guard: long enough for a sample on a machine whose cores the other test assemblies keep busy. The
    /// FASTER sample takes 6 s alone and 12 s beside two busy processes on two cores; before the polling loops
    /// kept their spins short once preempted it took 163 s there, and a CI run hit the old 120 s guard
    /// (docs/performance.md, "Under CPU contention").
    /// </summary>
    private static readonly TimeSpan HangGuard = TimeSpan.FromMinutes(6);

    public static (int Exit, string Output) Run(string name, params string[] args)
    {
        // tests/<project>/bin/<Configuration>/<tfm>/ → samples/<name>/bin/<Configuration>/<tfm>/
        var output = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar));
        string tfm = output.Name, configuration = output.Parent!.Name;
        string root = output.Parent!.Parent!.Parent!.Parent!.Parent!.FullName;
        string dll = Path.Combine(root, "samples", name, "bin", configuration, tfm, name + ".dll");
        Assert.True(File.Exists(dll), $"the sample is not built: {dll}");
        var info = new ProcessStartInfo(Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") ?? "dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        info.ArgumentList.Add(dll);
        foreach (var arg in args)
            info.ArgumentList.Add(arg);
        using var process = Process.Start(info)!;
        var stderr = process.StandardError.ReadToEndAsync();
        var stdout = process.StandardOutput.ReadToEndAsync();
        if (!process.WaitForExit(HangGuard))
        {
            process.Kill(entireProcessTree: true);
            throw new TimeoutException($"{name} did not finish within {HangGuard.TotalSeconds} s:\n{stdout.Result}{stderr.Result}");
        }
        return (process.ExitCode, stdout.Result + stderr.Result);
    }
}
