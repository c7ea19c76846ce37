using System;
using System.Diagnostics;
using System.Globalization;
using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache.Benchmarks.Micro;

/// <summary>
/// <c>--alloc-probe [--transports shm,tcp] [--sizes 8,4096] [--methods ReadAsync,...] [--seconds T]</c>: exact managed allocations per operation of every <see cref="DataPath"/> case.
/// BenchmarkDotNet's Allocated column is rounded to whole bytes per operation, so 100 B per invocation of 256
/// operations would show as 0 B; this counts <see cref="GC.GetTotalAllocatedBytes(bool)"/> (all threads, so
/// the client's poller too) over many invocations and prints one JSON line per case. It also counts the
/// ValueTask invocations that did not finish synchronously (their awaits suspended, so the client's poller
/// ran the continuation).
/// </summary>
internal static class AllocationProbe
{
    // Bounded by time as well: a 4 KiB operation can take tens of microseconds here.
    private const int MaxWarmupInvocations = 2_000;
    private static readonly TimeSpan WarmupTime = TimeSpan.FromSeconds(0.5);
    private const int MinInvocations = 20;
    private static int s_maxInvocations = 4_000;
    private static TimeSpan s_measureTime = TimeSpan.FromSeconds(1);

    public static readonly string[] Methods =
    {
        nameof(DataPath.ReadAsync), nameof(DataPath.WriteAsync), nameof(DataPath.ReadAsyncSpinWait),
        nameof(DataPath.WriteAsyncSpinWait), nameof(DataPath.ReadCallback), nameof(DataPath.WriteCallback),
        nameof(DataPath.ReadSession), nameof(DataPath.WriteSession),
    };

    public static int Run(string[] args)
    {
        var transports = new[] { "shm", "tcp" };
        var sizes = new[] { 8, 4096 };
        var methods = Methods;
        for (int i = 0; i + 1 < args.Length; i++)
        {
            switch (args[i])
            {
                case "--transports": transports = args[++i].Split(','); break;
                case "--sizes": sizes = Array.ConvertAll(args[++i].Split(','), s => int.Parse(s, CultureInfo.InvariantCulture)); break;
                case "--methods": methods = args[++i].Split(','); break;
                case "--seconds":  // run each case this long, whatever the invocation count (for perf record)
                    s_measureTime = TimeSpan.FromSeconds(double.Parse(args[++i], CultureInfo.InvariantCulture));
                    s_maxInvocations = int.MaxValue;
                    break;
            }
        }
        int failures = 0;
        foreach (var transport in transports)
        {
            foreach (var size in sizes)
            {
                foreach (var method in methods)
                {
                    try
                    {
                        Probe(transport, size, method);
                    }
                    catch (Exception e)
                    {
                        failures++;
                        Console.WriteLine($"{{\"probe\":\"alloc\",\"transport\":\"{transport}\",\"size\":{size},\"method\":\"{method}\",\"error\":\"{Escape(e.ToString())}\"}}");
                    }
                }
            }
        }
        return failures == 0 ? 0 : 1;
    }

    private static void Probe(string transport, int size, string method)
    {
        var bench = new DataPath { Transport = transport, Size = size };
        bench.Setup();
        try
        {
            Func<ValueTask> invoke = method switch
            {
                "ReadAsync" => bench.ReadAsync,
                "WriteAsync" => bench.WriteAsync,
                "ReadAsyncSpinWait" => () => { bench.ReadAsyncSpinWait(); return default; },
                "WriteAsyncSpinWait" => () => { bench.WriteAsyncSpinWait(); return default; },
                "ReadSession" => () => { bench.ReadSession(); return default; },
                "WriteSession" => () => { bench.WriteSession(); return default; },
                "ReadCallback" => () => { bench.ReadCallback(); return default; },
                "WriteCallback" => () => { bench.WriteCallback(); return default; },
                _ => throw new ArgumentException(method),
            };
            var warm = Stopwatch.StartNew();
            for (int i = 0; i < MaxWarmupInvocations && warm.Elapsed < WarmupTime; i++)
                Wait(invoke());
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            int gen0 = GC.CollectionCount(0);
            int suspended = 0;
            long before = GC.GetTotalAllocatedBytes(precise: true);
            var watch = Stopwatch.StartNew();
            int invocations = 0;
            while (invocations < s_maxInvocations && (invocations < MinInvocations || watch.Elapsed < s_measureTime))
            {
                suspended += Wait(invoke());
                invocations++;
            }
            watch.Stop();
            long allocated = GC.GetTotalAllocatedBytes(precise: true) - before;
            long ops = (long)invocations * (method.EndsWith("Session", StringComparison.Ordinal) || method.EndsWith("Callback", StringComparison.Ordinal) ? DataPath.Stream : DataPath.Window);
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"{{\"probe\":\"alloc\",\"transport\":\"{transport}\",\"size\":{size},\"method\":\"{method}\",\"invocations\":{invocations},\"ops\":{ops},\"bytes\":{allocated},\"bytes_per_op\":{(double)allocated / ops:0.####},\"gen0\":{GC.CollectionCount(0) - gen0},\"suspended_invocations\":{suspended},\"ns_per_op\":{watch.Elapsed.TotalNanoseconds / ops:0.#}}}"));
        }
        finally
        {
            bench.Cleanup();
        }
    }

    // Waits without allocating (no AsTask): 1 if the invocation did not complete synchronously.
    private static int Wait(ValueTask task)
    {
        if (task.IsCompletedSuccessfully)
        {
            task.GetAwaiter().GetResult();
            return 0;
        }
        var spin = new SpinWait();
        while (!task.IsCompleted)
            spin.SpinOnce(sleep1Threshold: -1);
        task.GetAwaiter().GetResult();
        return 1;
    }

    private static string Escape(string s) =>
        s.Replace("\\", "\\\\", StringComparison.Ordinal).Replace("\"", "\\\"", StringComparison.Ordinal)
         .Replace("\n", "\\n", StringComparison.Ordinal).Replace("\r", "", StringComparison.Ordinal);
}
