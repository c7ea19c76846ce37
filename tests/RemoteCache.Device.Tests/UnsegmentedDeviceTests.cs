using System;
using System.Linq;
using System.Runtime.InteropServices;
using System.Threading.Tasks;
using FASTER.core;
using RemoteCache.Tests;
using Xunit;
using Xunit.Abstractions;

namespace RemoteCache.Device.Tests;

/// <summary>
/// FASTER's unsegmented devices on TieredDevice(RemoteCacheDevice, local file): the object log of a FasterKV with
/// class keys and values, and the DeltaLog of incremental snapshots, each larger than its cache.
/// </summary>
public sealed unsafe class UnsegmentedDeviceTests
{
    // 20 000 records with about 200 B of objects each (key and value): 4 MB of object log against a 1 MiB cache.
    // The main log (24 B a record) is in 64 KiB segments, 32 KiB of it in FASTER's memory.
    private static readonly LogShape s_objectStore = new(PageBits: 12, MemoryBits: 15, SegmentBits: 16, Records: 20_000);

    // 16 000 records of 24 B: the whole log stays in the mutable part of FASTER's 1 MiB of memory, so that every
    // snapshot after the first is incremental; each one adds about 400 KB of DeltaLog, against a 1 MiB cache.
    private static readonly LogShape s_deltaStore = new(PageBits: 12, MemoryBits: 20, SegmentBits: 16, Records: 16_000);

    private readonly ITestOutputHelper _out;

    public UnsegmentedDeviceTests(ITestOutputHelper output) => _out = output;

    private void Report(string what, TieredDevice tiered)
    {
        var cacheTier = tiered.CacheTier();
        _out.WriteLine($"{what}: {cacheTier.Ring?.Head ?? 0} B written through a cache of {cacheTier.Capacity} B; reads served by " +
                       $"cache {tiered.ReadsServedBy(0)}, by file {tiered.ReadsServedBy(1)}, fall-throughs {tiered.FallThroughs}");
    }

    [Fact]
    public Task TieredDeviceServesTheWindowFromTheCacheAndOlderBytesFromTheFile() => Hang.Guard(nameof(TieredDeviceServesTheWindowFromTheCacheAndOlderBytesFromTheFile), () =>
    {
        using var dir = new ScratchDir("flat");
        using var server = ServerProcess.Start("shm", memoryLimit: "64M");
        using var tiered = TestTiers.OverCache(server.Endpoint, 1, Devices.CreateLogDevice(dir.File("flat.log")), "flat log");
        tiered.Initialize(-1);
        const int Block = 64 << 10, Blocks = 48;  // 3 MiB through a 1 MiB cache
        var buffer = (byte*)NativeMemory.AlignedAlloc(Block, 4096);
        try
        {
            for (int b = 0; b < Blocks; b++)
            {
                new Span<byte>(buffer, Block).Fill((byte)(b + 1));
                Assert.Equal(0u, Waits.ForDevice(cb => tiered.WriteAsync((IntPtr)buffer, 0, (ulong)b * Block, Block, cb, null!)).Error);
            }
            for (int b = 0; b < Blocks; b++)
            {
                new Span<byte>(buffer, 4096).Clear();
                Assert.Equal((0u, 4096u), Waits.ForDevice(cb => tiered.ReadAsync(0, (ulong)b * Block + 8192, (IntPtr)buffer, 4096, cb, null!)));
                Assert.True(new Span<byte>(buffer, 4096).IndexOfAnyExcept((byte)(b + 1)) < 0, $"block {b} read back wrong");
            }
        }
        finally
        {
            NativeMemory.AlignedFree(buffer);
        }
        Report("flat log", tiered);
        Assert.Equal(16, tiered.ReadsServedBy(0));
        Assert.Equal(32, tiered.ReadsServedBy(1));
        Assert.Equal(32, tiered.FallThroughs);
        Assert.Empty(tiered.FailedTiers);
    });

    // ---- the object log ---------------------------------------------------------------------------

    private sealed class ObjectStore : IDisposable
    {
        public required ServerProcess Server;
        public required StoreRig<string, Payload> Store;
        public required TieredDevice Log, Objects;

        public void Dispose()
        {
            Store.Dispose();  // disposes both tiered devices, their tiers and caches
            Server.Dispose();
        }
    }

    // A new process: a new server (an empty cache), the files of the one before.
    private static ObjectStore OpenObjectStore(ScratchDir dir, bool recover)
    {
        var server = ServerProcess.Start("shm", memoryLimit: "64M");
        try
        {
            var log = TestTiers.OverCache(server.Endpoint, 1, Devices.CreateLogDevice(dir.File("hlog.log"), recoverDevice: recover), "main log");
            var objects = TestTiers.OverCache(server.Endpoint, 1, Devices.CreateLogDevice(dir.File("hlog.obj.log"), recoverDevice: recover), "object log");
            var store = new StoreRig<string, Payload>(
                new PayloadKind(), s_objectStore, log, n => $"key {n}",
                new CheckpointSettings { CheckpointDir = dir.File("checkpoints") }, objects,
                new SerializerSettings<string, Payload> { valueSerializer = () => new PayloadSerializer() });
            return new ObjectStore { Server = server, Store = store, Log = log, Objects = objects };
        }
        catch
        {
            server.Dispose();
            throw;
        }
    }

    [Fact]
    public Task ObjectLogOfClassKeysAndValuesIsReadFromTheCacheAndTheFileAndRecovers() => Hang.Guard(nameof(ObjectLogOfClassKeysAndValuesIsReadFromTheCacheAndTheFileAndRecovers), () =>
    {
        using var dir = new ScratchDir("objects");
        Guid token;
        using (var rig = OpenObjectStore(dir, recover: false))
        {
            rig.Store.Load();
            long pending = rig.Store.ReadBackAll(version: 0);
            Report("object log, read-back", rig.Objects);
            Assert.True(pending > s_objectStore.Records * 6 / 10, $"only {pending} of {s_objectStore.Records} reads went to the devices");
            var objectCache = rig.Objects.CacheTier();
            Assert.True(objectCache.IsUnsegmented);
            Assert.True(objectCache.Ring!.Head > 2 * objectCache.Capacity, "the object log should outgrow its cache");
            Assert.True(rig.Objects.ReadsServedBy(0) > 0, "no object was read from the cache");
            Assert.True(rig.Objects.FallThroughs > 0 && rig.Objects.ReadsServedBy(1) > 0, "no evicted object was read from the file");

            rig.Store.UpdateAll(from: 0);
            rig.Store.ReadBackAll(version: 1);
            Report("object log, after updates", rig.Objects);
            token = rig.Store.Checkpoint();
            Assert.Empty(rig.Objects.FailedTiers);
            Assert.Empty(rig.Log.FailedTiers);
        }
        using (var rig = OpenObjectStore(dir, recover: true))
        {
            rig.Store.Recover(token);
            long pending = rig.Store.ReadBackAll(version: 1);
            Report("object log, after recovery", rig.Objects);
            Assert.True(pending > 0, "nothing was read from the devices after recovery");
            Assert.True(rig.Objects.ReadsServedBy(1) > 0, "the recovered objects should come from the file");
            long fromCache = rig.Objects.ReadsServedBy(0);

            rig.Store.UpdateAll(from: 1);
            rig.Store.ReadBackAll(version: 2);
            Report("object log, updates after recovery", rig.Objects);
            Assert.True(rig.Objects.ReadsServedBy(0) > fromCache, "objects written after recovery were not read from the cache");
            Assert.Empty(rig.Objects.FailedTiers);
            Assert.Empty(rig.Log.FailedTiers);
        }
    });

    // ---- DeltaLog -----------------------------------------------------------------------------------

    private sealed class DeltaStore : IDisposable
    {
        public required ServerProcess Server;
        public required StoreRig<long, long> Store;
        public required TieredDeltaLogFactory DeltaLogs;
        public required DeviceLogCommitCheckpointManager Checkpoints;

        public void Dispose()
        {
            Store.Dispose();  // FASTER disposes the DeltaLog devices it was given
            Checkpoints.Dispose();
            Server.Dispose();
        }
    }

    private static DeltaStore OpenDeltaStore(ScratchDir dir, bool recover)
    {
        var server = ServerProcess.Start("shm", memoryLimit: "64M");
        try
        {
            var deltaLogs = new TieredDeltaLogFactory(server.Endpoint, regions: 1);
            var checkpoints = new DeviceLogCommitCheckpointManager(deltaLogs, new DefaultCheckpointNamingScheme(dir.File("checkpoints")), removeOutdated: false);
            var log = TestTiers.OverCache(server.Endpoint, 1, Devices.CreateLogDevice(dir.File("hlog.log"), recoverDevice: recover), "main log");
            var store = new StoreRig<long, long>(new LongKind(), s_deltaStore, log, n => n, new CheckpointSettings { CheckpointManager = checkpoints });
            return new DeltaStore { Server = server, Store = store, DeltaLogs = deltaLogs, Checkpoints = checkpoints };
        }
        catch
        {
            server.Dispose();
            throw;
        }
    }

    [Fact]
    public Task DeltaLogOfIncrementalSnapshotsOnTheTieredDeviceRecovers() => Hang.Guard(nameof(DeltaLogOfIncrementalSnapshotsOnTheTieredDeviceRecovers), () =>
    {
        using var dir = new ScratchDir("delta");
        const int Increments = 4;
        using (var rig = OpenDeltaStore(dir, recover: false))
        {
            rig.Store.Load();
            rig.Store.SnapshotCheckpoint(tryIncremental: true);  // there is no snapshot yet: a full one
            Assert.Equal(0, rig.Store.Kv.IncrementalSnapshotTailAddress);
            for (int version = 1; version <= Increments; version++)
            {
                long deltaTail = rig.Store.Kv.IncrementalSnapshotTailAddress;
                rig.Store.UpdateAll(from: version - 1);
                rig.Store.SnapshotCheckpoint(tryIncremental: true);
                Assert.True(rig.Store.Kv.IncrementalSnapshotTailAddress > deltaTail, $"snapshot {version} was not incremental");
            }
            rig.Store.ReadBackAll(version: Increments);
            var deltaLog = Assert.Single(rig.DeltaLogs.DeltaLogs);
            Report("delta log, written", deltaLog);
            Assert.True(deltaLog.CacheTier().IsUnsegmented);
            Assert.True(deltaLog.CacheTier().Ring!.Head > deltaLog.CacheTier().Capacity, "the delta log should outgrow its cache");
            Assert.Empty(deltaLog.FailedTiers);
        }
        using (var rig = OpenDeltaStore(dir, recover: true))
        {
            rig.Store.RecoverLatest();
            rig.Store.ReadBackAll(version: Increments);
            foreach (var deltaLog in rig.DeltaLogs.DeltaLogs)
                Report("delta log, recovery", deltaLog);
            // A new process's cache holds nothing of the delta log: recovery reads it from the file through the tiers.
            Assert.True(rig.DeltaLogs.DeltaLogs.Sum(d => d.ReadsServedBy(1)) > 0, "recovery did not read the delta log through the tiered device");
            rig.Store.UpdateAll(from: Increments);
            rig.Store.ReadBackAll(version: Increments + 1);
        }
    });

    [Fact]
    public Task DeltaLogScannedInProcessReadsRecentPagesFromTheCache() => Hang.Guard(nameof(DeltaLogScannedInProcessReadsRecentPagesFromTheCache), () =>
    {
        // FASTER itself scans a DeltaLog only when it recovers (in a new process, with an empty cache); a scan on the
        // device that wrote it shows the cache serving the pages still in it, and the file the rest.
        using var dir = new ScratchDir("deltalog");
        using var server = ServerProcess.Start("shm", memoryLimit: "64M");
        using var tiered = TestTiers.OverCache(server.Endpoint, 1, Devices.CreateLogDevice(dir.File("delta.log")), "delta log");
        tiered.Initialize(-1);
        const int PageBits = 14, Entries = 6000;  // about 3.5 MB of entries, in 16 KiB pages
        static int LengthOf(int entry) => 100 + entry * 37 % 900;
        static byte ByteOf(int entry, int i) => (byte)(entry * 7 + i);

        long tail;
        using (var writer = new DeltaLog(tiered, PageBits, 0))
        {
            writer.InitializeForWrites(new SectorAlignedBufferPool(1, (int)tiered.SectorSize));
            for (int entry = 0; entry < Entries; entry++)
            {
                int length = LengthOf(entry);
                writer.Allocate(out int room, out long at);
                if (room < length)
                {
                    writer.Seal(0);  // the rest of the page is too small: on to the next
                    writer.Allocate(out room, out at);
                }
                var bytes = new Span<byte>((void*)at, length);
                for (int i = 0; i < length; i++)
                    bytes[i] = ByteOf(entry, i);
                writer.Seal(length);
            }
            writer.FlushAsync().GetAwaiter().GetResult();
            tail = writer.TailAddress;
        }

        using var reader = new DeltaLog(tiered, PageBits, tail);
        reader.InitializeForReads();
        int read = 0;
        while (reader.GetNext(out long at, out int length, out _))
        {
            Assert.Equal(LengthOf(read), length);
            var bytes = new ReadOnlySpan<byte>((void*)at, length);
            for (int i = 0; i < length; i++)
                Assert.True(bytes[i] == ByteOf(read, i), $"entry {read}: byte {i} is wrong");
            read++;
        }
        Assert.Equal(Entries, read);
        Report("delta log, scanned", tiered);
        // Whether the ring itself turned depends on how many page writes were in flight at once (a write that would
        // land on bytes still being written is not kept); that the log outgrew the cache does not.
        Assert.True(tail > 2 * tiered.CacheTier().Capacity, $"the delta log ({tail} B) should outgrow its cache");
        Assert.True(tiered.ReadsServedBy(0) > 0, "no page was read from the cache");
        Assert.True(tiered.FallThroughs > 0 && tiered.ReadsServedBy(1) > 0, "no evicted page was read from the file");
        Assert.Empty(tiered.FailedTiers);
    });
}
