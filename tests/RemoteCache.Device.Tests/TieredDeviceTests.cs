using System;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using FASTER.core;
using Xunit;

namespace RemoteCache.Device.Tests;

/// <summary>
/// TieredDevice owns its tiers: when it cannot be made or initialized, their caches go back to the server. A read that
/// its cache tier's replacement served after the content there was lost is never handed to FASTER.
/// </summary>
public sealed class TieredDeviceTests : IDisposable
{
    private const long Region = 1L << 20;

    // The server's memory lent shows whether every cache was closed: an embedded server reports it.
    private readonly RemoteCacheServer _server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = new[] { "tcp:127.0.0.1:0" }, RegionSize = Region, MemoryLimit = 16 * Region, MaxThreads = 1 });

    public void Dispose() => _server.Dispose();

    private RemoteCacheDevice CacheDevice(int regions) =>
        new(RemoteCacheClient.Open(_server.Endpoints, new RemoteCacheOptions { RegionsPerServer = regions, Exclusive = true }), ownsCache: true);

    [Fact]
    public void TierThatRefusesInitializeGetsEveryTierDisposed()
    {
        // The first tier refuses 2 MiB segments (its 3 MiB do not divide into them); the second, never initialized,
        // is released too: FASTER drops a device whose Initialize threw, and nobody else would dispose them.
        var tiered = new TieredDevice(CacheDevice(3), CacheDevice(4));
        Assert.Equal(7 * Region, _server.MemoryInUse);
        Assert.Throws<FasterException>(() => tiered.Initialize(2 * Region, new LightEpoch()));
        Waits.ForNoMemoryInUse(_server);
        tiered.Dispose();  // harmless
    }

    [Fact]
    public void ConstructorThatRefusesTheCommitPointDisposesTheTiers()
    {
        var tiers = new IDevice[] { CacheDevice(1), CacheDevice(2) };
        Assert.Equal(3 * Region, _server.MemoryInUse);
        Assert.Throws<ArgumentOutOfRangeException>(() => new TieredDevice(2, tiers));
        Waits.ForNoMemoryInUse(_server);
    }

    [Fact]
    public void ConstructorGivenANullTierDisposesTheOthers()
    {
        var tiers = new IDevice[] { CacheDevice(1), null! };
        Assert.Throws<ArgumentException>(() => new TieredDevice(tiers));
        Waits.ForNoMemoryInUse(_server);
    }

    /// <summary>
    /// A server replaced without its content (what the managed client does after a failure, for several regions at once):
    /// a device read routed to the cache tier before the loss was reported, and held in its session behind a write to a
    /// moving region, is served by the empty replacement after the commit. The tier was taken back in between, so the
    /// read is routed again and returns what the next tier holds, not the replacement's zeros.
    /// </summary>
    [Fact]
    public async Task AReadTheReplacementServedAfterALossIsRoutedAgain()
    {
        const int Regions = 4;
        const int Sector = 4096;
        using var spare = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = new[] { "tcp:127.0.0.1:0" }, RegionSize = Region, MemoryLimit = 8 * Region, MaxThreads = 1 });
        string path = System.IO.Path.Combine(System.IO.Path.GetTempPath(), $"rc-tiered-{Environment.ProcessId}-{Guid.NewGuid():N}.log");
        var cacheDevice = CacheDevice(Regions);
        using var tiered = new TieredDevice(cacheDevice, Devices.CreateLogDevice(path, deleteOnClose: true));
        tiered.Initialize(Region, new LightEpoch());
        var cache = cacheDevice.Cache;
        using var written = new SectorBuffer(Sector, 0xA1);
        using var later = new SectorBuffer(Sector, 0xB2);
        using var back = new SectorBuffer(Sector, 0);
        Assert.Equal((0u, (uint)Sector), Waits.ForDevice(cb => tiered.WriteAsync(written.Address, 0, 0, Sector, cb, null!)));
        int holder = await new RemoteCacheMover(cache).AddHolderAsync(spare.Endpoints[0], null, Regions);
        await new RemoteCacheMover(cache).BeginMigrationAsync(0, Regions, TimeSpan.FromSeconds(10));

        // On one thread's session: a write to the moving region waits, and so does the read after it.
        using var wrote = new ManualResetEventSlim();
        using var read = new ManualResetEventSlim();
        uint writeError = uint.MaxValue, readError = uint.MaxValue;
        var issue = new Thread(() =>
        {
            tiered.WriteAsync(later.Address, 0, 2 * Sector, Sector, (e, _, _) => { writeError = e; wrote.Set(); }, null!);
            tiered.ReadAsync(0, 0, back.Address, Sector, (e, _, _) => { readError = e; read.Set(); }, null!);
        });
        issue.Start();
        issue.Join();
        Assert.False(read.Wait(50), "the read went ahead of the write it follows");

        new RemoteCacheMover(cache).ReportContentLost(0, Regions * Region, "the test's server was replaced");
        for (int region = 0; region < Regions; region++)
            new RemoteCacheMover(cache).CommitMigration(region, holder, region);
        Assert.True(wrote.Wait(TimeSpan.FromSeconds(10)) && read.Wait(TimeSpan.FromSeconds(10)), "the held operations did not complete");
        Assert.Equal((0u, 0u), (writeError, readError));
        Assert.True(back.AllAre(0xA1), $"the read returned {back.First:x2}.. where a1 was written: the replacement's bytes, not the log's");
    }

    // An aligned native buffer for the device's direct I/O.
    private sealed unsafe class SectorBuffer : IDisposable
    {
        private readonly int _length;

        public SectorBuffer(int length, byte fill)
        {
            _length = length;
            Address = (IntPtr)NativeMemory.AlignedAlloc((nuint)length, (nuint)length);
            new Span<byte>((void*)Address, length).Fill(fill);
        }

        public IntPtr Address { get; }

        public byte First => *(byte*)Address;

        public bool AllAre(byte value) => new Span<byte>((void*)Address, _length).IndexOfAnyExcept(value) < 0;

        public void Dispose() => NativeMemory.AlignedFree((void*)Address);
    }
}
