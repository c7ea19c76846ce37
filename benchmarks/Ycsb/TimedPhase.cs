using System;
using System.Diagnostics;
using System.Threading;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>A worker thread's body: signal <c>started</c>, run until <c>stop</c> is 1, measure while <c>measuring</c> is 1.</summary>
public delegate void PhaseWorker(CountdownEvent started, ref int stop, ref int measuring);

/// <summary>What a timed phase measured: operations in the window, its length, and what the process spent in it.</summary>
public readonly record struct PhaseWindow(long Operations, double Seconds, double AllocatedPerOp, double CpuUsPerOp);

/// <summary>
/// The timed phase both stores' runners run: one thread per worker, a warm-up, then the measured window (the
/// operations the workers count in it, the managed bytes allocated and the process CPU per operation).
/// </summary>
public static class TimedPhase
{
    public static PhaseWindow Run(YcsbOptions o, IProgressSink progress, string label, string threadName, PhaseWorker[] workers, Func<long> operations)
    {
        var stop = 0;
        var measuring = 0;
        using var started = new CountdownEvent(workers.Length);
        var threads = new Thread[workers.Length];
        for (int t = 0; t < workers.Length; t++)
        {
            var worker = workers[t];
            threads[t] = new Thread(() => worker(started, ref stop, ref measuring)) { IsBackground = true, Name = $"{threadName} {t}" };
            threads[t].Start();
        }
        started.Wait();
        double total = o.Warmup.TotalSeconds + o.Duration.TotalSeconds;
        progress.Phase(label, total);
        var clock = Stopwatch.StartNew();
        Tick(progress, clock, o.Warmup.TotalSeconds);
        long opsBefore = operations();
        long allocatedBefore = GC.GetTotalAllocatedBytes(precise: false);
        var cpuBefore = Process.GetCurrentProcess().TotalProcessorTime;
        var measured = Stopwatch.StartNew();
        Volatile.Write(ref measuring, 1);
        Tick(progress, clock, total);
        Volatile.Write(ref measuring, 0);
        long ops = operations() - opsBefore;
        double seconds = measured.Elapsed.TotalSeconds;
        var cpu = Process.GetCurrentProcess().TotalProcessorTime - cpuBefore;
        double allocatedPerOp = (double)(GC.GetTotalAllocatedBytes(precise: false) - allocatedBefore) / Math.Max(1, ops);
        Volatile.Write(ref stop, 1);
        foreach (var thread in threads)
            thread.Join();
        return new PhaseWindow(ops, seconds, allocatedPerOp, cpu.TotalMicroseconds / Math.Max(1, ops));
    }

    private static void Tick(IProgressSink progress, Stopwatch clock, double until)
    {
        while (clock.Elapsed.TotalSeconds < until)
        {
            Thread.Sleep(200);
            progress.Advance(Math.Min(until, clock.Elapsed.TotalSeconds));
        }
    }
}
