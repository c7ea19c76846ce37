using System;
using System.Runtime.InteropServices;
using System.Threading;
using FASTER.core;
using RemoteCache.Interop;
using RemoteCache.Tests;
using Xunit;

namespace RemoteCache.Device.Tests;

/// <summary>RemoteCacheDevice on its own: the segment ring, eviction, throttling and errors, through FASTER's IDevice calls.</summary>
public sealed unsafe class RemoteCacheDeviceTests : IDisposable
{
    private const int SegmentBits = 20;
    private const long Segment = 1L << SegmentBits;
    private const int Sector = 512;

    private readonly ServerProcess _server = ServerProcess.Start("shm");
    private readonly byte* _buffer = (byte*)NativeMemory.AlignedAlloc(4 * Sector, Sector);

    public void Dispose()
    {
        NativeMemory.AlignedFree(_buffer);
        _server.Dispose();
    }

    private RemoteCacheDevice NewDevice(uint regions, int throttleLimit = 256)
    {
        var cache = RemoteCacheClient.Open(new[] { _server.Endpoint }, new RemoteCacheOptions { RegionsPerServer = regions, Name = "device unit", Exclusive = true });
        var device = new RemoteCacheDevice(cache, throttleLimit, ownsCache: true);
        device.Initialize(Segment, new LightEpoch());
        return device;
    }

    private static (uint Error, uint Bytes) Wait(Action<DeviceIOCompletionCallback> start)
    {
        using var done = new ManualResetEventSlim();
        uint error = uint.MaxValue, bytes = 0;
        start((e, n, _) =>
        {
            error = e;
            bytes = n;
            done.Set();
        });
        Assert.True(done.Wait(TimeSpan.FromSeconds(10)), "device operation did not complete within 10 s");
        return (error, bytes);
    }

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
        var status = RcStatus.Internal;
        cache.Write(0, (IntPtr)_buffer, Sector, (s, _) => { status = s; done.Set(); }, null);
        Assert.True(done.Wait(TimeSpan.FromSeconds(10)), "write did not complete within 10 s");
        Assert.Equal(RcStatus.Ok, status);
    }

    [Fact]
    public void RefusedDeviceDisposesTheCacheItWasToOwn()
    {
        // The server's memory lent shows whether the cache was closed: an embedded server reports it.
        using var server = RemoteCacheServer.Start(new[] { "tcp:127.0.0.1:0" }, regionSize: Segment, memoryLimit: 16 * Segment, threads: 1);
        var cache = RemoteCacheClient.Open(server.Endpoints, new RemoteCacheOptions { RegionsPerServer = 2, Name = "owned, shared" });
        Assert.Equal(2 * Segment, server.MemoryInUse);
        Assert.Throws<ArgumentException>(() => new RemoteCacheDevice(cache, ownsCache: true));
        Assert.Throws<ObjectDisposedException>(() => cache.WriteAsync(0, new byte[] { 1 }));
        WaitForNoMemoryInUse(server);

        // The same when FASTER's Initialize refuses the segment size (FASTER never disposes a device it failed to set up).
        cache = RemoteCacheClient.Open(server.Endpoints, new RemoteCacheOptions { RegionsPerServer = 3, Exclusive = true });
        Assert.Equal(3 * Segment, server.MemoryInUse);
        var device = new RemoteCacheDevice(cache, ownsCache: true);
        Assert.Throws<FasterException>(() => device.Initialize(2 * Segment, new LightEpoch()));
        Assert.Throws<ObjectDisposedException>(() => cache.WriteAsync(0, new byte[] { 1 }));
        WaitForNoMemoryInUse(server);
        device.Dispose();  // harmless
    }

    private static void WaitForNoMemoryInUse(RemoteCacheServer server)
    {
        var deadline = DateTime.UtcNow.AddSeconds(10);
        while (server.MemoryInUse != 0 && DateTime.UtcNow < deadline)
            Thread.Sleep(10);
        Assert.Equal(0L, server.MemoryInUse);
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
        Assert.Equal(RcStatus.InUse, e.Status);
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
        Assert.True(status is RcStatus.Disconnected or RcStatus.Timeout, $"status {status} for error 0x{error:x}");
    }
}
