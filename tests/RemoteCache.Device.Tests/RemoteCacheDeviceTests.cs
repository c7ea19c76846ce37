using System;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using FASTER.core;
using RemoteCache.Tests;
using Xunit;

namespace RemoteCache.Device.Tests;

/// <summary>RemoteCacheDevice on its own: the segment ring, eviction, throttling and errors, through FASTER's IDevice calls.</summary>
public sealed unsafe class RemoteCacheDeviceTests : IDisposable
{
    private const int SegmentBits = 20;
    private const long Segment = 1L << SegmentBits;
    private const int Sector = 512;
    private const int Block = 64 << 10;

    private readonly ServerProcess _server = ServerProcess.Start("shm");
    private readonly byte* _buffer = (byte*)NativeMemory.AlignedAlloc(Block, Sector);

    public void Dispose()
    {
        NativeMemory.AlignedFree(_buffer);
        _server.Dispose();
    }

    private RemoteCacheDevice NewDevice(int regions, int throttleLimit = 256, long segmentSize = Segment)
    {
        var cache = RemoteCacheClient.Open(new[] { _server.Endpoint }, new RemoteCacheOptions { RegionsPerServer = regions, Name = "device unit", Exclusive = true });
        var device = new RemoteCacheDevice(cache, throttleLimit, ownsCache: true);
        device.Initialize(segmentSize, new LightEpoch());
        return device;
    }

    // FASTER initializes its object-log and DeltaLog devices with segment size -1.
    private RemoteCacheDevice NewUnsegmentedDevice(int regions) => NewDevice(regions, segmentSize: -1);

    private static (uint Error, uint Bytes) Wait(Action<DeviceIOCompletionCallback> start) => Waits.ForDevice(start);

    private (uint, uint) Write(RemoteCacheDevice d, int segment, ulong offset, byte fill)
    {
        new Span<byte>(_buffer, Sector).Fill(fill);
        return Wait(cb => d.WriteAsync((IntPtr)_buffer, segment, offset, Sector, cb, null!));
    }

    private (uint, uint, byte) Read(RemoteCacheDevice d, int segment, ulong offset, uint length = Sector)
    {
        new Span<byte>(_buffer, (int)length).Clear();
        var (e, n) = Wait(cb => d.ReadAsync(segment, offset, (IntPtr)_buffer, length, cb, null!));
        return (e, n, _buffer[0]);
    }

    [Fact]
    public void SegmentsMapOntoARingAndOldOnesAreEvicted()
    {
        using var d = NewDevice(regions: 3);  // 3 MiB = a ring of 3 segments
        Assert.Equal(3, d.RingSegments);
        for (int s = 0; s < 3; s++)
            Assert.Equal((0u, (uint)Sector), Write(d, s, 4096, (byte)(s + 1)));
        for (int s = 0; s < 3; s++)
            Assert.Equal((0u, (uint)Sector, (byte)(s + 1)), Read(d, s, 4096));
        Assert.Equal(0, d.StartSegment);

        // Segment 3 takes segment 0's slot: 0 is evicted and reads of it say so instead of returning 3's bytes.
        Assert.Equal((0u, (uint)Sector), Write(d, 3, 4096, 4));
        Assert.Equal(1, d.StartSegment);
        Assert.False(d.Holds(0));
        Assert.Equal(RemoteCacheDevice.NotResident, Read(d, 0, 4096).Item1);
        Assert.Equal((0u, (uint)Sector, (byte)4), Read(d, 3, 4096));
        Assert.Equal((0u, (uint)Sector, (byte)2), Read(d, 1, 4096));

        // A late write to the evicted segment is not kept and does not disturb its slot's new owner.
        Assert.Equal(0u, Write(d, 0, 4096, 9).Item1);
        Assert.Equal((0u, (uint)Sector, (byte)4), Read(d, 3, 4096));
    }

    [Fact]
    public Task ANewSegmentWaitsForAReadOfTheSegmentItEvicts() => Hang.Guard(nameof(ANewSegmentWaitsForAReadOfTheSegmentItEvicts), () =>
    {
        // Over tcp the server serves reads, so pausing it holds a read of segment 0 in flight while segment 3
        // takes segment 0's slot: 3's write must wait for the read, which returns 0's bytes.
        using var server = ServerProcess.Start("tcp");
        var cache = RemoteCacheClient.Open(new[] { server.Endpoint }, new RemoteCacheOptions { RegionsPerServer = 3, Name = "device switch", Exclusive = true });
        using var d = new RemoteCacheDevice(cache, throttleLimit: 256, ownsCache: true);
        d.Initialize(Segment, new LightEpoch());
        for (int s = 0; s < 3; s++)
            Assert.Equal(0u, Write(d, s, 4096, (byte)(s + 1)).Item1);
        byte* source = (byte*)NativeMemory.AlignedAlloc(Sector, Sector);
        try
        {
            new Span<byte>(_buffer, Sector).Clear();
            new Span<byte>(source, Sector).Fill(4);
            using var readDone = new ManualResetEventSlim();
            using var writeDone = new ManualResetEventSlim();
            uint readError = uint.MaxValue, writeError = uint.MaxValue;
            server.Pause();
            try
            {
                d.ReadAsync(0, 4096, (IntPtr)_buffer, Sector, (e, _, _) => { readError = e; readDone.Set(); }, null!);
                d.WriteAsync((IntPtr)source, 3, 4096, Sector, (e, _, _) => { writeError = e; writeDone.Set(); }, null!);
                Assert.Equal(1, d.StartSegment);  // segment 0 is evicted at once ...
                Assert.Equal(1, d.InFlight);      // ... but 3's write is not sent while 0's read is out
                Assert.Equal(RemoteCacheDevice.NotResident, Wait(cb => d.ReadAsync(0, 4096, (IntPtr)source, Sector, cb, null!)).Error);
            }
            finally
            {
                server.Resume();
            }
            Assert.True(readDone.Wait(TimeSpan.FromSeconds(10)), "the held read did not complete 10 s after the server resumed");
            Assert.True(writeDone.Wait(TimeSpan.FromSeconds(10)), "the held write did not complete 10 s after the read");
            Assert.Equal((0u, (byte)1), (readError, _buffer[0]));
            Assert.Equal(0u, writeError);
            Assert.Equal(1L, d.ReadsThatHeldASwitch);
            Assert.Equal((0u, (uint)Sector, (byte)4), Read(d, 3, 4096));
            Assert.Equal((0u, (uint)Sector, (byte)2), Read(d, 1, 4096));
        }
        finally
        {
            NativeMemory.AlignedFree(source);
        }
    });

    [Fact]
    public void ReadsPastTheSegmentEndReturnWhatTheSegmentHas()
    {
        using var d = NewDevice(regions: 2);
        Write(d, 0, (ulong)(Segment - Sector), 7);
        Write(d, 1, 0, 8);
        var (error, bytes, first) = Read(d, 0, (ulong)(Segment - Sector), 2 * Sector);
        Assert.Equal(0u, error);
        Assert.Equal((uint)Sector, bytes);
        Assert.Equal(7, first);
        Assert.Equal(0, _buffer[Sector]);  // segment 1's bytes were not read into the tail
    }

    [Fact]
    public void RemovedSegmentsAreNotResident()
    {
        using var d = NewDevice(regions: 2);
        Write(d, 0, 0, 1);
        Wait(cb => d.RemoveSegmentAsync(0, _ => cb(0, 0, null!), null!));
        Assert.False(d.Holds(0));
        Assert.Equal(RemoteCacheDevice.NotResident, Read(d, 0, 0).Item1);
    }

    // ---- unsegmented logs -------------------------------------------------------------------------

    [Fact]
    public void UnsegmentedWritesReadBackBySegmentAndOffset()
    {
        using var d = NewUnsegmentedDevice(regions: 1);
        Assert.True(d.IsUnsegmented);
        Assert.Equal(0, d.RingSegments);
        const ulong Far = 1UL << 40;  // an unsegmented log's offsets are not bounded by a segment size
        Assert.Equal((0u, (uint)Sector), Write(d, 0, 0, 1));
        Assert.Equal((0u, (uint)Sector), Write(d, 1, 0, 2));  // the object log: every segment's objects start at 0
        Assert.Equal((0u, (uint)Sector), Write(d, 0, Far, 3));
        Assert.Equal((0u, (uint)Sector), Write(d, 0, Far + Sector, 4));
        Assert.Equal((0u, (uint)Sector, (byte)1), Read(d, 0, 0));
        Assert.Equal((0u, (uint)Sector, (byte)2), Read(d, 1, 0));
        Assert.Equal((0u, 2u * Sector, (byte)3), Read(d, 0, Far, 2 * Sector));  // one read of two writes
        Assert.Equal(4, _buffer[Sector]);
        Assert.Equal(RemoteCacheDevice.NotResident, Read(d, 0, Sector).Item1);  // never written
        Assert.Equal(RemoteCacheDevice.NotResident, Read(d, 2, 0).Item1);

        Assert.Equal((0u, (uint)Sector), Write(d, 1, 0, 5));
        Assert.Equal((0u, (uint)Sector, (byte)5), Read(d, 1, 0));
        Wait(cb => d.RemoveSegmentAsync(1, _ => cb(0, 0, null!), null!));
        Assert.Equal(RemoteCacheDevice.NotResident, Read(d, 1, 0).Item1);
    }

    [Fact]
    public void UnsegmentedReadsOutsideTheResidentWindowAreNotResident()
    {
        using var d = NewUnsegmentedDevice(regions: 1);
        const int Blocks = 48;  // 3 MiB written into a 1 MiB cache: the last 16 blocks stay
        for (int b = 0; b < Blocks; b++)
        {
            new Span<byte>(_buffer, Block).Fill((byte)b);
            Assert.Equal((0u, (uint)Block), Wait(cb => d.WriteAsync((IntPtr)_buffer, 0, (ulong)b * Block, Block, cb, null!)));
        }
        for (int b = 0; b < Blocks; b++)
        {
            var (error, _, first) = Read(d, 0, (ulong)b * Block + 4096);
            if (b < Blocks - 16)
                Assert.Equal(RemoteCacheDevice.NotResident, error);
            else
                Assert.Equal((0u, (byte)b), (error, first));
        }
    }

    [Fact]
    public Task UnsegmentedReadOvertakenByTheRingIsNeverServed() => Hang.Guard(nameof(UnsegmentedReadOvertakenByTheRingIsNeverServed), () =>
    {
        // Appends go round a 1 MiB ring while this thread reads the oldest blocks still in it, the ones the next
        // writes replace. Every read must return exactly the block asked for, or say NotResident. The writer goes
        // round at least four times and on until the reader has met both outcomes, so a reader the scheduler starves
        // (two cores, a loaded CI machine) still gets its reads in; the lap cap keeps a broken device from spinning.
        using var d = NewUnsegmentedDevice(regions: 1);
        const int BlockBytes = 4096, MinLaps = 4, MaxLaps = 256, EnoughOfEach = 16;
        long ringBlocks = d.Capacity / BlockBytes;
        long completed = 0;
        int readerSatisfied = 0;
        var writer = Task.Run(() =>
        {
            var block = (long*)NativeMemory.AlignedAlloc(BlockBytes, Sector);
            try
            {
                for (long b = 0; b < MaxLaps * ringBlocks && (b < MinLaps * ringBlocks || Volatile.Read(ref readerSatisfied) == 0); b++)
                {
                    new Span<long>(block, BlockBytes / 8).Fill(b);
                    Assert.Equal(0u, Wait(cb => d.WriteAsync((IntPtr)block, 0, (ulong)(b * BlockBytes), BlockBytes, cb, null!)).Error);
                    Volatile.Write(ref completed, b + 1);
                }
            }
            finally
            {
                NativeMemory.AlignedFree(block);
            }
        });
        var words = new Span<long>(_buffer, BlockBytes / 8);
        long served = 0, notResident = 0, wrong = 0, round = 0;
        while (!writer.IsCompleted)
        {
            if (served >= EnoughOfEach && notResident >= EnoughOfEach)
                Volatile.Write(ref readerSatisfied, 1);
            long b = Volatile.Read(ref completed) - ringBlocks + round++ % 3;
            if (b < 0)
            {
                Thread.Yield();  // the first lap: nothing is evicted yet
                continue;
            }
            words.Clear();
            var (error, _) = Wait(cb => d.ReadAsync(0, (ulong)(b * BlockBytes), (IntPtr)_buffer, BlockBytes, cb, null!));
            if (error == RemoteCacheDevice.NotResident)
            {
                notResident++;
                continue;
            }
            Assert.Equal(0u, error);
            served++;
            foreach (long word in words)
                if (word != b)
                {
                    wrong++;
                    break;
                }
        }
        writer.GetAwaiter().GetResult();
        Assert.True(wrong == 0, $"{wrong} of {served} reads served returned another block's bytes");
        Assert.True(served > 0 && notResident > 0, $"served {served}, not resident {notResident}: the reads never met the ring's end");
    }, seconds: 30);

    [Fact]
    public void NonPositiveSegmentSizeOtherThanMinusOneIsRefused()
    {
        var cache = RemoteCacheClient.Open(new[] { _server.Endpoint }, new RemoteCacheOptions { RegionsPerServer = 1, Exclusive = true });
        using var d = new RemoteCacheDevice(cache, ownsCache: true);
        Assert.Throws<FasterException>(() => d.Initialize(0, new LightEpoch()));
    }

    [Fact]
    public void SegmentThatDoesNotDivideTheCacheIsRefusedClearly()
    {
        var cache = RemoteCacheClient.Open(new[] { _server.Endpoint }, new RemoteCacheOptions { RegionsPerServer = 3, Exclusive = true });
        using var d = new RemoteCacheDevice(cache, ownsCache: true);
        var e = Assert.Throws<FasterException>(() => d.Initialize(2 * Segment, new LightEpoch()));
        Assert.Contains("SegmentSizeBits", e.Message);
    }

    [Fact]
    public void NonExclusiveClientIsRefused()
    {
        var options = new RemoteCacheOptions { RegionsPerServer = 1, Name = "shared cache", Token = "shared" };
        using var cache = RemoteCacheClient.Open(new[] { _server.Endpoint }, options);
        Assert.False(cache.IsExclusive);
        var e = Assert.Throws<ArgumentException>(() => new RemoteCacheDevice(cache));
        Assert.Contains("RemoteCacheOptions.Exclusive = true", e.Message, StringComparison.Ordinal);
        Assert.Contains("shared cache", e.Message, StringComparison.Ordinal);
        // Not owned: the caller's client is left as it was.
        using var done = new ManualResetEventSlim();
        var status = RemoteCacheStatus.Internal;
        cache.StartWrite(0, (IntPtr)_buffer, Sector, (s, _) => { status = s; done.Set(); }, null);
        Assert.True(done.Wait(TimeSpan.FromSeconds(10)), "write did not complete within 10 s");
        Assert.Equal(RemoteCacheStatus.Ok, status);
    }

    [Fact]
    public void RefusedDeviceDisposesTheCacheItWasToOwn()
    {
        // The server's memory lent shows whether the cache was closed: an embedded server reports it.
        using var server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = new[] { "tcp:127.0.0.1:0" }, RegionSize = Segment, MemoryLimit = 16 * Segment, MaxThreads = 1 });
        var cache = RemoteCacheClient.Open(server.Endpoints, new RemoteCacheOptions { RegionsPerServer = 2, Name = "owned, shared" });
        Assert.Equal(2 * Segment, server.MemoryInUse);
        Assert.Throws<ArgumentException>(() => new RemoteCacheDevice(cache, ownsCache: true));
        Assert.Throws<ObjectDisposedException>(() => cache.WriteAsync(0, new byte[] { 1 }));
        Waits.ForNoMemoryInUse(server);

        // The same when FASTER's Initialize refuses the segment size (FASTER never disposes a device it failed to set up).
        cache = RemoteCacheClient.Open(server.Endpoints, new RemoteCacheOptions { RegionsPerServer = 3, Exclusive = true });
        Assert.Equal(3 * Segment, server.MemoryInUse);
        var device = new RemoteCacheDevice(cache, ownsCache: true);
        Assert.Throws<FasterException>(() => device.Initialize(2 * Segment, new LightEpoch()));
        Assert.Throws<ObjectDisposedException>(() => cache.WriteAsync(0, new byte[] { 1 }));
        Waits.ForNoMemoryInUse(server);
        device.Dispose();  // harmless
    }

    [Fact]
    public void SecondDeviceOnTheSameCacheIdAndTokenIsRefused()
    {
        var options = new RemoteCacheOptions { RegionsPerServer = 2, Token = "one-store", Exclusive = true, Name = "first store" };
        using var first = new RemoteCacheDevice(RemoteCacheClient.Open(new[] { _server.Endpoint }, options), ownsCache: true);
        first.Initialize(Segment, new LightEpoch());
        Assert.Equal((0u, (uint)Sector), Write(first, 0, 0, 5));

        // A second store given the same cache id and token: its open fails, it never gets to write into the first's log.
        var second = new RemoteCacheOptions { CacheId = options.CacheId, RegionsPerServer = 2, Token = "one-store", Exclusive = true, Name = "second store" };
        var e = Assert.Throws<RemoteCacheException>(() => new RemoteCacheDevice(RemoteCacheClient.Open(new[] { _server.Endpoint }, second), ownsCache: true));
        Assert.Equal(RemoteCacheStatus.InUse, e.Status);
        Assert.Contains($"cache {options.CacheId}", e.Message, StringComparison.Ordinal);

        Assert.Equal((0u, (uint)Sector, (byte)5), Read(first, 0, 0));
    }

    [Fact]
    public void ThrottleReportsOperationsAboveTheLimitAndTryCompleteHarvests()
    {
        using var d = NewDevice(regions: 1, throttleLimit: 4);
        int completed = 0;
        var buffer = (IntPtr)_buffer;
        for (int i = 0; i < 32; i++)
            d.ReadAsync(0, 0, buffer, Sector, (_, _, _) => Interlocked.Increment(ref completed), null!);
        // Reads of a segment never written complete at once (not resident): nothing is in flight.
        Assert.Equal(32, Volatile.Read(ref completed));
        Write(d, 0, 0, 1);
        completed = 0;
        bool throttled = false;
        for (int i = 0; i < 64; i++)
        {
            d.ReadAsync(0, 0, buffer, Sector, (e, _, _) => { Assert.Equal(0u, e); Interlocked.Increment(ref completed); }, null!);
            throttled |= d.Throttle();
        }
        var deadline = DateTime.UtcNow.AddSeconds(10);
        while (Volatile.Read(ref completed) < 64 && DateTime.UtcNow < deadline)
            d.TryComplete();
        Assert.Equal(64, Volatile.Read(ref completed));
        Assert.False(d.Throttle());
        Assert.True(throttled, "64 reads submitted back to back never exceeded a throttle limit of 4");
    }

    [Fact]
    public void DeadServerCompletesWithAnErrorCodeNamingTheStatus()
    {
        using var d = NewDevice(regions: 1);
        Write(d, 0, 0, 1);
        _server.KillHard();
        uint error = 0;
        for (int i = 0; i < 100 && error == 0; i++)
        {
            error = Read(d, 0, 0).Item1;
            Thread.Sleep(10);
        }
        Assert.NotEqual(0u, error);
        var status = RemoteCacheDevice.StatusOf(error);
        Assert.True(status is RemoteCacheStatus.Disconnected or RemoteCacheStatus.Timeout, $"status {status} for error 0x{error:x}");
    }
}
