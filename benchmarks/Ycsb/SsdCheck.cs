using System;
using System.Diagnostics;
using System.IO;
using System.Runtime.InteropServices;
using System.Text.Json;
using System.Threading;
using FASTER.core;
using RemoteCache.Benchmarks.Ycsb.Baselines;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>
/// Shows that the SSD baseline reads the disk, not the page cache: random 512 B reads at queue depth 1 through
/// <see cref="DirectFileDevice"/> against `fio --direct=1` on the same file, in the same run.
/// </summary>
public static class SsdCheck
{
    public sealed record Result(double DeviceP50Us, double DeviceMeanUs, double FioP50Us, double FioMeanUs)
    {
        public double Ratio => DeviceP50Us / FioP50Us;
    }

    public static unsafe Result? Run(string dir, Action<string> log)
    {
        string? fio = FindFio();
        if (fio is null)
        {
            log("ssd check skipped: fio is not installed (scripts/run.sh installs it)");
            return null;
        }
        const long FileBytes = 256L << 20;
        const int Block = 512, Reads = 3000;
        Directory.CreateDirectory(dir);
        string path = Path.Combine(dir, "ssdcheck");
        var device = new DirectFileDevice(path, workers: 1);
        var hist = new Histogram();
        try
        {
            device.Initialize(-1, new LightEpoch());
            var chunk = (byte*)NativeMemory.AlignedAlloc(1 << 20, 4096);
            try
            {
                new Span<byte>(chunk, 1 << 20).Fill(0x5a);
                for (long at = 0; at < FileBytes; at += 1 << 20)
                    Sync(cb => device.WriteAsync((IntPtr)chunk, (ulong)at, 1 << 20, cb, null!));
                var rng = new Random(7);
                for (int i = 0; i < Reads; i++)
                {
                    ulong address = (ulong)rng.NextInt64(FileBytes / Block) * Block;
                    long start = Stopwatch.GetTimestamp();
                    Sync(cb => device.ReadAsync(address, (IntPtr)chunk, Block, cb, null!));
                    hist.Record((long)((Stopwatch.GetTimestamp() - start) * (1e9 / Stopwatch.Frequency)));
                }
            }
            finally
            {
                NativeMemory.AlignedFree(chunk);
            }
        }
        finally
        {
            device.Dispose();
        }

        var info = new ProcessStartInfo(fio) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var a in new[] { "--name=ssdcheck", $"--filename={path}.0", "--direct=1", "--rw=randread", $"--bs={Block}",
                                  "--iodepth=1", "--ioengine=psync", "--runtime=3", "--time_based", $"--size={FileBytes}",
                                  "--output-format=json" })
            info.ArgumentList.Add(a);
        using var p = Process.Start(info)!;
        string json = p.StandardOutput.ReadToEnd();
        string err = p.StandardError.ReadToEnd();
        p.WaitForExit();
        File.Delete(path + ".0");
        if (p.ExitCode != 0)
        {
            log($"ssd check: fio failed ({p.ExitCode}): {err.Trim()}");
            return null;
        }
        using var doc = JsonDocument.Parse(json[json.IndexOf('{')..]);
        var clat = doc.RootElement.GetProperty("jobs")[0].GetProperty("read").GetProperty("clat_ns");
        double fioP50 = clat.GetProperty("percentile").GetProperty("50.000000").GetDouble() / 1000;
        double fioMean = clat.GetProperty("mean").GetDouble() / 1000;
        return new Result(hist.Quantile(0.5) / 1000.0, hist.MeanNs / 1000, fioP50, fioMean);
    }

    private static void Sync(Action<DeviceIOCompletionCallback> start)
    {
        using var done = new ManualResetEventSlim();
        uint error = 0;
        start((e, _, _) =>
        {
            error = e;
            done.Set();
        });
        done.Wait();
        if (error != 0)
            throw new IOException($"ssd check I/O failed: {error}");
    }

    private static string? FindFio()
    {
        foreach (var dir in (System.Environment.GetEnvironmentVariable("PATH") ?? "/usr/bin").Split(':'))
        {
            var path = Path.Combine(dir, "fio");
            if (File.Exists(path))
                return path;
        }
        return null;
    }
}
