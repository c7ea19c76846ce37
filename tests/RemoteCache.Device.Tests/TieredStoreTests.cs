using System;
using System.Collections.Generic;
using System.Linq;
using System.Numerics;
using System.Reflection;
using System.Threading.Tasks;
using FASTER.core;
using RemoteCache.Tests;
using Xunit;
using Xunit.Abstractions;
using Xunit.Sdk;

namespace RemoteCache.Device.Tests;

/// <summary>
/// A real FasterKV on <see cref="TieredDevice"/>(RemoteCacheDevice over a remotecache-server process, SSD files),
/// with FASTER's log memory about 1/8 of the data so most reads go to the device.
/// </summary>
public abstract class TieredStoreTests<TValue> where TValue : unmanaged
{
    private readonly ValueKind<TValue> _kind;
    private readonly LogShape _shape;
    private readonly ITestOutputHelper _out;

    protected TieredStoreTests(ValueKind<TValue> kind, LogShape shape, ITestOutputHelper output)
    {
        _kind = kind;
        _shape = shape;
        _out = output;
    }

    private long LogBytes => _shape.Records * _kind.RecordBytes;

    /// <summary>A cache large enough for the whole log, rounded up to whole segments (regions are 1 MiB).</summary>
    private int CacheRegions(double fraction = 1.5)
    {
        long segment = 1L << _shape.SegmentBits;
        long bytes = ((long)(LogBytes * fraction) + segment - 1) / segment * segment;
        return (int)Math.Max(bytes >> 20, segment >> 20);
    }

    /// <summary>An encrypted cache whose device holds the whole log: a power of two of client bytes, with the trailers.</summary>
    private int EncryptedCacheRegions()
    {
        long bytes = (long)BitOperations.RoundUpToPowerOf2((ulong)Math.Max(LogBytes * 3 / 2, 1L << _shape.SegmentBits));
        return (int)((TestTiers.Encrypted().ServerBytesFor(bytes) + (1 << 20) - 1) >> 20);
    }

    private sealed class Rig : IDisposable
    {
        public required ServerProcess Server;
        public required RemoteCacheClient Cache;
        public required RemoteCacheDevice CacheDevice;
        public required TieredDevice Tiered;
        public required StoreRig<long, TValue> Store;

        public void Dispose()
        {
            Store.Dispose();  // disposes the tiered device, which disposes its tiers and the cache
            Server.Dispose();
        }
    }

    private Rig Open(ScratchDir dir, int regions, string? checkpointDir = null, bool recover = false, string transport = "shm",
                     bool encrypted = false)
    {
        var server = ServerProcess.Start(transport, memoryLimit: "1G");
        try
        {
            var ssd = Devices.CreateLogDevice(dir.File("hlog.log"), recoverDevice: recover);
            var tiered = TestTiers.OverCache(server.Endpoint, regions, ssd, $"device test ({_kind.Name})", encrypted);
            var cacheDevice = tiered.CacheTier();
            var cache = cacheDevice.Cache;
            var store = new StoreRig<long, TValue>(_kind, _shape, tiered, key => key,
                                                   checkpointDir is null ? null : new CheckpointSettings { CheckpointDir = checkpointDir });
            return new Rig { Server = server, Cache = cache, CacheDevice = cacheDevice, Tiered = tiered, Store = store };
        }
        catch
        {
            server.Dispose();
            throw;
        }
    }

    // A store loaded, updated once and checkpointed into `checkpoints`, then closed: what a restarted process recovers.
    private Guid Checkpointed(ScratchDir dir, string checkpoints)
    {
        using var rig = Open(dir, CacheRegions(), checkpoints);
        rig.Store.Load();
        rig.Store.UpdateAll(from: 0);
        return rig.Store.Checkpoint();
    }

    private void Report(string phase, TieredDevice tiered, long pending)
    {
        _out.WriteLine($"{_kind.Name} {phase}: {pending} of {_shape.Records} reads went to the device; " +
                       $"served by cache {tiered.ReadsServedBy(0)}, by SSD {tiered.ReadsServedBy(1)}, fall-throughs {tiered.FallThroughs}, " +
                       $"tier failures {tiered.TierFailures}");
    }

    private void AssertMostReadsHitTheDevice(long pending, StoreRig<long, TValue> store)
    {
        Assert.True(store.BytesOnDeviceOnly > 4 * (1L << _shape.MemoryBits),
                    $"the log ({store.BytesOnDeviceOnly} B on the device only) should outgrow FASTER's memory (2^{_shape.MemoryBits} B) several times");
        Assert.True(pending > _shape.Records * 6 / 10, $"only {pending} of {_shape.Records} reads went to the device");
    }

    [Fact]
    public Task LoadAndReadBack() => Hang.Guard(nameof(LoadAndReadBack), () =>
    {
        using var dir = new ScratchDir("load");
        using var rig = Open(dir, CacheRegions());
        rig.Store.Load();
        long pending = rig.Store.ReadBackAll(version: 0);
        Report("read-back", rig.Tiered, pending);
        AssertMostReadsHitTheDevice(pending, rig.Store);
        Assert.True(rig.Tiered.ReadsServedBy(0) > pending * 9 / 10,
                    $"the cache holds the whole log, yet served only {rig.Tiered.ReadsServedBy(0)} of {pending} device reads");
        Assert.Empty(rig.Tiered.FailedTiers);
        rig.Server.AssertRunning();
    });

    [Fact]
    public Task AnEncryptedCacheUnderTheDeviceServesTheLogAndEveryReadIsRight() =>
        Hang.Guard(nameof(AnEncryptedCacheUnderTheDeviceServesTheLogAndEveryReadIsRight), () =>
    {
        using var dir = new ScratchDir("encrypted");
        using var rig = Open(dir, EncryptedCacheRegions(), encrypted: true);
        Assert.Equal(512, rig.Cache.EncryptionBlockSize);
        Assert.True(rig.CacheDevice.Capacity >= LogBytes && BitOperations.IsPow2(rig.CacheDevice.Capacity),
                    $"the device uses {rig.CacheDevice.Capacity} of the cache's {rig.Cache.Capacity} bytes");
        rig.Store.Load();
        rig.Store.UpdateAll(from: 0);
        long pending = rig.Store.ReadBackAll(version: 1);
        Report("encrypted cache, read-back", rig.Tiered, pending);
        AssertMostReadsHitTheDevice(pending, rig.Store);
        Assert.True(rig.Tiered.ReadsServedBy(0) > pending * 9 / 10,
                    $"the encrypted cache holds the whole log, yet served only {rig.Tiered.ReadsServedBy(0)} of {pending} device reads");
        Assert.Empty(rig.Tiered.FailedTiers);
        rig.Server.AssertRunning();
    });

    [Fact]
    public Task UpsertsAndRmwsThroughTheDevice() => Hang.Guard(nameof(UpsertsAndRmwsThroughTheDevice), () =>
    {
        using var dir = new ScratchDir("update");
        using var rig = Open(dir, CacheRegions(3));
        rig.Store.Load();
        rig.Store.UpdateAll(from: 0);   // most RMWs read their old value from the device
        long pending = rig.Store.ReadBackAll(version: 1);
        rig.Store.UpdateAll(from: 1);
        pending += rig.Store.ReadBackAll(version: 2);
        Report("after updates", rig.Tiered, pending);
        Assert.True(rig.Tiered.ReadsServedBy(0) > 0, "no read was served by the cache");
        Assert.Empty(rig.Tiered.FailedTiers);
    });

    [Fact]
    public Task LogLargerThanTheCacheEvictsOldSegmentsToSsd() => Hang.Guard(nameof(LogLargerThanTheCacheEvictsOldSegmentsToSsd), () =>
    {
        using var dir = new ScratchDir("evict");
        using var rig = Open(dir, CacheRegions(0.35));
        rig.Store.Load();
        long pending = rig.Store.ReadBackAll(version: 0);
        Report("read-back, cache ~1/3 of the log", rig.Tiered, pending);
        AssertMostReadsHitTheDevice(pending, rig.Store);
        Assert.True(rig.CacheDevice.StartSegment > 0, "the cache never evicted a segment");
        Assert.True(rig.Tiered.ReadsServedBy(0) > 0 && rig.Tiered.ReadsServedBy(1) > 0,
                    "reads should be split between the cache (recent segments) and the SSD (evicted ones)");
        Assert.Empty(rig.Tiered.FailedTiers);
    });

    [Fact]
    public Task CheckpointAndRecover() => Hang.Guard(nameof(CheckpointAndRecover), () =>
    {
        using var dir = new ScratchDir("recover");
        string checkpoints = dir.File("checkpoints");
        var token = Checkpointed(dir, checkpoints);
        // A new process would get a new (empty) cache: the log comes back from the SSD through the tiered device.
        using (var rig = Open(dir, CacheRegions(), checkpoints, recover: true))
        {
            rig.Store.Recover(token);
            long pending = rig.Store.ReadBackAll(version: 1);
            Report("after recovery", rig.Tiered, pending);
            Assert.True(pending > 0, "nothing was read from the device after recovery");
            // New writes after recovery go through both tiers again.
            rig.Store.UpdateAll(from: 1);
            rig.Store.ReadBackAll(version: 2);
            Assert.Empty(rig.Tiered.FailedTiers);
        }
    });

    [Fact]
    public Task CacheServerKilledDuringReadsEveryReadStillRight() => Hang.Guard(nameof(CacheServerKilledDuringReadsEveryReadStillRight), () =>
    {
        using var dir = new ScratchDir("kill");
        using var rig = Open(dir, CacheRegions());
        rig.Store.Load();
        bool killed = false;
        long pending = rig.Store.ReadBackAll(version: 0, onProgress: done =>
        {
            if (!killed && done >= _shape.Records / 3)
            {
                rig.Server.KillHard();
                killed = true;
            }
        });
        Report("read-back, server killed at 1/3", rig.Tiered, pending);
        Assert.True(killed);
        Assert.Equal(new[] { 0 }, rig.Tiered.FailedTiers);
        Assert.True(rig.Tiered.TierFailures >= 1);
        Assert.True(rig.Tiered.ReadsServedBy(0) > 0, "the cache served nothing before it was killed");
        Assert.True(rig.Tiered.ReadsServedBy(1) > pending / 3, "the SSD did not take over the reads");
        // Writes keep working without the cache, and so do reads of them.
        rig.Store.UpdateAll(from: 0);
        rig.Store.ReadBackAll(version: 1);
    });

    [Fact]
    public Task ACacheServerKilledAndReplacedTheTierComesBackWarmedAndEveryReadIsRight() =>
        Hang.Guard(nameof(ACacheServerKilledAndReplacedTheTierComesBackWarmedAndEveryReadIsRight), async () =>
    {
        using var dir = new ScratchDir("replace");
        using var rig = Open(dir, CacheRegions());
        using var spare = ServerProcess.Start("shm", memoryLimit: "1G");
        rig.Store.Load();
        bool killed = false;
        rig.Store.ReadBackAll(version: 0, onProgress: done =>
        {
            if (!killed && done >= _shape.Records / 3)
            {
                rig.Server.KillHard();
                killed = true;
            }
        });
        Assert.Equal(new[] { 0 }, rig.Tiered.FailedTiers);
        rig.Store.UpdateAll(from: 0);  // written while the tier is out: the SSD alone has these

        // What the managed client does after a failure: a replacement server takes every region, without content.
        var cache = rig.Cache;
        int holder = await new RemoteCacheMover(cache).AddHolderAsync(spare.Endpoint, null, new RemoteCacheMover(cache).RegionCount);
        for (int region = 0; region < new RemoteCacheMover(cache).RegionCount; region++)
        {
            await new RemoteCacheMover(cache).BeginMigrationAsync(region, TimeSpan.FromSeconds(10));
            var size = new RemoteCacheMover(cache).GetRegion(region).Size;
            new RemoteCacheMover(cache).ReportContentLost(region * size, size, "its server was killed");
            new RemoteCacheMover(cache).CommitMigration(region, holder, region);
        }
        Assert.Empty(rig.Tiered.FailedTiers);  // taken back
        await rig.Tiered.Warming.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.True(rig.Tiered.BytesWarmed > 0, "nothing was warmed");

        long servedBefore = rig.Tiered.ReadsServedBy(0);
        long pending = rig.Store.ReadBackAll(version: 1);  // every read right: the SSD's, never the lost cache's
        Report("after the replacement and the warm", rig.Tiered, pending);
        long served = rig.Tiered.ReadsServedBy(0) - servedBefore;
        Assert.True(served > pending / 2, $"the tier came back, yet served only {served} of {pending} device reads " +
                                          $"(failed tiers now: [{string.Join(",", rig.Tiered.FailedTiers)}], warmed {rig.Tiered.BytesWarmed} B)");
        Assert.Empty(rig.Tiered.FailedTiers);
        rig.Store.UpdateAll(from: 1);
        rig.Store.ReadBackAll(version: 2);
        spare.AssertRunning();
    });

    [Fact]
    public Task AfterRecoveryTheEmptyCacheTierIsWarmedFromTheSsdBesideFaster() => Hang.Guard(nameof(AfterRecoveryTheEmptyCacheTierIsWarmedFromTheSsdBesideFaster), async () =>
    {
        using var dir = new ScratchDir("warm");
        string checkpoints = dir.File("checkpoints");
        var token = Checkpointed(dir, checkpoints);
        using (var rig = Open(dir, CacheRegions(), checkpoints, recover: true))
        {
            rig.Store.Recover(token);
            // FASTER reads while the warm copy runs; every read is right either way.
            var warming = rig.Tiered.WarmAsync();
            long pending = rig.Store.ReadBackAll(version: 1);
            long warmed = await warming.WaitAsync(TimeSpan.FromSeconds(30));
            Assert.True(warmed > 0, "nothing was warmed");
            long servedBefore = rig.Tiered.ReadsServedBy(0);
            pending = rig.Store.ReadBackAll(version: 1);
            Report("after recovery and the warm", rig.Tiered, pending);
            // All but the reads of the tail segment, which FASTER was still writing and is not warmed.
            long served = rig.Tiered.ReadsServedBy(0) - servedBefore;
            Assert.True(served > pending * 3 / 4, $"the warmed cache served only {served} of {pending} device reads");
            rig.Store.UpdateAll(from: 1);
            rig.Store.ReadBackAll(version: 2);
            Assert.Empty(rig.Tiered.FailedTiers);
        }
    });

    [Fact]
    public Task FastersOwnTieredStorageDeviceThroughReflection() => Hang.Guard(nameof(FastersOwnTieredStorageDeviceThroughReflection), () =>
    {
        // For users whose FASTER build exposes TieredStorageDevice: RemoteCacheDevice works unchanged as its
        // first tier. The class is internal to Microsoft.FASTER.Core 2.6.5, so the test builds it by reflection.
        var type = typeof(IDevice).Assembly.GetType("FASTER.core.TieredStorageDevice")
                   ?? throw new XunitException("FASTER.core.TieredStorageDevice is not in this FASTER build");
        var ctor = type.GetConstructor(BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic, null,
                                       new[] { typeof(int), typeof(IList<IDevice>) }, null)
                   ?? throw new XunitException("TieredStorageDevice(int, IList<IDevice>) not found");
        using var dir = new ScratchDir("faster-tiered");
        using var server = ServerProcess.Start("shm", memoryLimit: "1G");
        var cache = RemoteCacheClient.Open(new[] { server.Endpoint }, new RemoteCacheOptions { RegionsPerServer = CacheRegions(), Exclusive = true });
        var cacheDevice = new RemoteCacheDevice(cache, ownsCache: true);
        var ssd = Devices.CreateLogDevice(dir.File("hlog.log"));
        var tiered = (IDevice)ctor.Invoke(new object[] { 1, new List<IDevice> { cacheDevice, ssd } });
        using var store = new StoreRig<long, TValue>(_kind, _shape, tiered, key => key);
        store.Load();
        long pending = store.ReadBackAll(version: 0);
        _out.WriteLine($"{_kind.Name} via FASTER's TieredStorageDevice: {pending} of {_shape.Records} reads went to the device");
        AssertMostReadsHitTheDevice(pending, store);
        Assert.True(cacheDevice.StartSegment == 0 && cacheDevice.Holds(0), "the cache should hold the whole log");
        server.AssertRunning();
    });
}

public sealed class TieredStoreTests8B : TieredStoreTests<long>
{
    // 120 000 records x 24 B = 2.9 MB of log; FASTER keeps 256 KiB (about 1/11) in memory; 1 MiB segments.
    public TieredStoreTests8B(ITestOutputHelper output) : base(new LongKind(), new LogShape(12, 18, 20, 120_000), output)
    {
    }
}

public sealed class TieredStoreTests1KiB : TieredStoreTests<KiloValue>
{
    // 12 000 records x 1040 B = 12.5 MB of log; FASTER keeps 1 MiB (about 1/12) in memory; 1 MiB segments.
    public TieredStoreTests1KiB(ITestOutputHelper output) : base(new KiloKind(), new LogShape(14, 20, 20, 12_000), output)
    {
    }
}
