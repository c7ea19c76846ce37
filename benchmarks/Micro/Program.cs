using System;
using BenchmarkDotNet.Running;

namespace RemoteCache.Benchmarks.Micro;

/// <summary>
/// Entry point: the standard BenchmarkDotNet command line (--filter, --exporters json, --artifacts, --list flat, ...)
/// over <see cref="MicroConfig"/>.
/// </summary>
/// <example>
/// dotnet benchmarks/Micro/bin/Release/net10.0/RemoteCache.Benchmarks.Micro.dll --filter '*' --exporters json
/// dotnet ... --filter '*DataPath.ReadCallback*' '*Size: 8, Transport: shm*'   (parameters in the name are matched too)
/// dotnet ... --alloc-probe [--transports shm] [--sizes 8] [--methods ReadCallback]   exact allocated bytes per operation of every case (not BenchmarkDotNet)
/// RC_BENCH_METRICS=1 dotnet ...   the same with the RemoteCache meter listened to (MetricsListener)
/// </example>
public static class Program
{
    public static int Main(string[] args)
    {
        if (MetricsListener.StartIfAsked())
            Console.Error.WriteLine($"{MetricsListener.EnvironmentVariable}=1: the RemoteCache meter's instruments are listened to");
        // Not a BenchmarkDotNet option: exact allocations per operation (see AllocationProbe).
        if (args.Length > 0 && args[0] == "--alloc-probe")
        {
            int probed = AllocationProbe.Run(args);
            if (MetricsListener.Enabled)
                Console.Error.WriteLine(MetricsListener.Summary);
            return probed;
        }
        var summaries = BenchmarkSwitcher.FromAssembly(typeof(Program).Assembly).Run(args, MicroConfig.Create());
        foreach (var summary in summaries)
        {
            if (summary.HasCriticalValidationErrors)
                return 2;
            foreach (var report in summary.Reports)
            {
                if (!report.Success)
                    return 1;
            }
        }
        return 0;
    }
}
