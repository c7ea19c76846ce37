using System;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using System.Threading;
using BenchmarkDotNet.Attributes;
using FASTER.core;
using RemoteCache.Device;

namespace RemoteCache.Benchmarks.Micro;

/// <summary>
/// Random reads through FASTER's device interface (IDevice.ReadAsync + TryComplete, as FASTER's log issues them):
/// RemoteCacheDevice over an embedded cache server (shm and tcp) against FASTER's local-storage device
/// (Devices.CreateLogDevice, file buffering disabled as FASTER defaults) on this machine's disk, in one run; and the
/// same device built for Tsavorite (RemoteCache.Garnet's, Garnet's store) through Tsavorite's interface over shm,
/// completed by its caller's TryComplete as the others (remotecache-shm-garnet) and, as Tsavorite leaves them, by the
/// client's poller while the caller waits (remotecache-shm-garnet-poller).
/// </summary>
/// <remarks>
/// Each invocation issues <see cref="Window"/> reads at random sector-aligned addresses of a 128 MiB log and
/// waits for all of them; the mean time per operation is the reciprocal of the throughput at that queue depth.
/// Setup prints whether the local device's file is really open with O_DIRECT (the page cache out of the way).
/// </remarks>
public class DeviceReads
{
    public const int Window = 32;
    private const int SegmentBits = 25;                 // 32 MiB segments
    private const long LogBytes = 128L << 20;           // 4 segments, all of them held by the cache
    private static readonly long HangTicks = Stopwatch.Frequency * 30;

    [Params("remotecache-shm", "remotecache-tcp", "local-storage", "remotecache-shm-garnet", "remotecache-shm-garnet-poller")]
    public string Device { get; set; } = "remotecache-shm";

    [Params(512, 4096)]
    public int Size { get; set; } = 512;

    private RemoteCacheServer? _server;
    private IDevice? _device;
    private Tsavorite.core.IDevice? _garnetDevice;  // the Tsavorite build of the device, for remotecache-shm-garnet*
    private bool _callerHarvests = true;            // false: the client's poller completes the reads (Tsavorite's way)
    private string? _dir;
    private IntPtr _buffers;
    private ulong _rng = 0x9E3779B97F4A7C15ul;
    private static int s_completed;
    private static int s_failed;
    private static readonly DeviceIOCompletionCallback s_onDone = (error, _, _) => Done(error);
    private static readonly Tsavorite.core.DeviceIOCompletionCallback s_onGarnetDone = (error, _, _, _) => Done(error);

    private static void Done(uint error)
    {
        if (error != 0)
            Interlocked.Increment(ref s_failed);
        Interlocked.Increment(ref s_completed);
    }

    [GlobalSetup]
    public unsafe void Setup()
    {
        _dir = Path.Combine(AppContext.BaseDirectory, "device-bench", $"{Environment.ProcessId}-{Device}-{Size}");
        Directory.CreateDirectory(_dir);
        if (Device.StartsWith("remotecache-", StringComparison.Ordinal))
        {
            // The socket beside the log would pass the 100 characters a socket path may have under a deep checkout.
            string listen = Device != "remotecache-tcp" ? "shm:" + Path.Combine(Path.GetTempPath(), $"rc-device-reads-{Environment.ProcessId}-{Size}.sock") : "tcp:127.0.0.1:0";
            _server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = new[] { listen }, RegionSize = 1L << SegmentBits, MemoryLimit = 2L << 30, MaxThreads = 1 });
            var cache = RemoteCacheClient.Open(_server.Endpoints, new RemoteCacheOptions
            {
                RegionsPerServer = (int)(LogBytes >> SegmentBits),
                Name = $"device bench {Device}",
                Exclusive = true,       // RemoteCacheDevice requires it: the cache is one log's
                SessionCapacity = 4096, // as measured before the C# default became the header's 1024: up to 4 x Window reads in flight
            });
            _callerHarvests = Device != "remotecache-shm-garnet-poller";
            if (Device.StartsWith("remotecache-shm-garnet", StringComparison.Ordinal))
                _garnetDevice = new RemoteCache.Garnet.RemoteCacheDevice(cache, throttleLimit: 4 * Window, ownsCache: true);
            else
                _device = new RemoteCacheDevice(cache, throttleLimit: 4 * Window, ownsCache: true);
        }
        else if (Device == "local-storage")
        {
            _device = Devices.CreateLogDevice(Path.Combine(_dir, "hlog.log"), preallocateFile: false, deleteOnClose: true);
        }
        else
        {
            throw new ArgumentException($"unknown device '{Device}'");
        }
        _device?.Initialize(1L << SegmentBits, new LightEpoch());
        _garnetDevice?.Initialize(1L << SegmentBits, new Tsavorite.core.LightEpoch());
        _buffers = (IntPtr)NativeMemory.AlignedAlloc((nuint)(Window * Size), 4096);
        Fill();
        if (Device == "local-storage")
        {
            RandomReads();  // opens the read handles
            Console.WriteLine($"// local-storage device file opened with O_DIRECT: {DirectIoState(_dir)}");
        }
    }

    // Writes the whole log once, 1 MiB at a time, so every read finds data.
    private unsafe void Fill()
    {
        const int Chunk = 1 << 20;
        var chunk = (byte*)NativeMemory.AlignedAlloc(Chunk, 4096);
        try
        {
            for (long at = 0; at < LogBytes; at += Chunk)
            {
                new Span<byte>(chunk, Chunk).Fill((byte)(at >> 20));
                s_completed = 0;
                if (_garnetDevice is { } garnet)
                    garnet.WriteAsync((IntPtr)chunk, (ulong)at, Chunk, s_onGarnetDone, null!);
                else
                    _device!.WriteAsync((IntPtr)chunk, (ulong)at, Chunk, s_onDone, null!);
                Wait(1);
            }
        }
        finally
        {
            NativeMemory.AlignedFree(chunk);
        }
        if (s_failed != 0)
            throw new InvalidOperationException($"{s_failed} writes failed while filling the {Device} device");
    }

    [GlobalCleanup]
    public unsafe void Cleanup()
    {
        _device?.Dispose();
        _device = null;
        _garnetDevice?.Dispose();
        _garnetDevice = null;
        _server?.Dispose();
        _server = null;
        if (_buffers != IntPtr.Zero)
            NativeMemory.AlignedFree((void*)_buffers);
        _buffers = IntPtr.Zero;
        if (_dir is not null && Directory.Exists(_dir))
            Directory.Delete(_dir, recursive: true);
    }

    [Benchmark(OperationsPerInvoke = Window)]
    public void RandomReads()
    {
        var device = _device;
        var garnet = _garnetDevice;
        Volatile.Write(ref s_completed, 0);
        long sectors = LogBytes / Size;
        for (int i = 0; i < Window; i++)
        {
            ulong s = _rng;
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            _rng = s;
            ulong address = (s * 0x2545F4914F6CDD1Dul) % (ulong)sectors * (ulong)Size;
            if (device is not null)
                device.ReadAsync(address, _buffers + i * Size, (uint)Size, s_onDone, null!);
            else
                garnet!.ReadAsync(address, _buffers + i * Size, (uint)Size, s_onGarnetDone, null!);
        }
        Wait(Window);
        if (Volatile.Read(ref s_failed) != 0)
            throw new InvalidOperationException($"{s_failed} reads failed on {Device}");
    }

    private void Wait(int count)
    {
        long start = Stopwatch.GetTimestamp();
        var spin = new SpinWait();
        while (Volatile.Read(ref s_completed) < count)
        {
            if (_callerHarvests && (_device?.TryComplete() ?? _garnetDevice!.TryComplete()))
                continue;
            spin.SpinOnce(sleep1Threshold: -1);
            if (Stopwatch.GetTimestamp() - start > HangTicks)
                throw new TimeoutException($"{Device}: {s_completed} of {count} completions after 30 s");
        }
    }

    // The flags of the open log files in /proc/self/fdinfo: O_DIRECT is 040000 (octal) on x86-64 Linux.
    private static string DirectIoState(string dir)
    {
        try
        {
            var flags = Directory.GetFiles("/proc/self/fd")
                .Where(fd => new FileInfo(fd).LinkTarget is { } target && target.StartsWith(dir, StringComparison.Ordinal)
                             && target.Contains("hlog.log", StringComparison.Ordinal))
                .Select(fd => File.ReadLines($"/proc/self/fdinfo/{Path.GetFileName(fd)}")
                                  .First(l => l.StartsWith("flags:", StringComparison.Ordinal))["flags:".Length..].Trim())
                .ToList();
            if (flags.Count == 0)
                return "unknown (no open log file found)";
            int direct = flags.Count(f => (Convert.ToInt64(f, 8) & 0x4000) != 0);
            return $"{direct} of {flags.Count} handles (flags {string.Join(", ", flags.Distinct())})";
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException)
        {
            return $"unknown ({e.Message})";
        }
    }
}
