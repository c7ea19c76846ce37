using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using FASTER.core;
using RemoteCache.Tests;
using Xunit;
using Xunit.Abstractions;
using Xunit.Sdk;

namespace RemoteCache.Device.Tests;

/// <summary>
/// Several FASTER sessions at once on <see cref="TieredDevice"/>(RemoteCacheDevice, SSD) with FASTER's read cache
/// on: every value read (and every RMW's result) is checked against what its key must hold, whatever the
/// interleaving (see <see cref="ConcurrentWorkload{TValue}"/>).
/// </summary>
public sealed class ConcurrentStoreTests
{
    private const int GuardSeconds = 180;

    private readonly ITestOutputHelper _out;

    public ConcurrentStoreTests(ITestOutputHelper output) => _out = output;

    private sealed class Rig<TValue> : IDisposable where TValue : unmanaged
    {
        public required ServerProcess Server;
        public required RemoteCacheDevice CacheDevice;
        public required TieredDevice Tiered;
        public required StoreRig<long, TValue> Store;

        public void Dispose()
        {
            Store.Dispose();  // disposes the tiered device, its tiers and the cache
            Server.Dispose();
        }
    }

    private static Rig<TValue> Open<TValue>(ScratchDir dir, ValueKind<TValue> kind, LogShape shape, IndexShape index, int regions)
        where TValue : unmanaged
    {
        var server = ServerProcess.Start("shm", memoryLimit: "1G");
        try
        {
            var cache = RemoteCacheClient.Open(new[] { server.Endpoint }, new RemoteCacheOptions
            {
                RegionsPerServer = regions,
                Name = $"concurrent store ({kind.Name})",
                Exclusive = true,
                SessionCapacity = 4096,  // every thread's batch can be in flight at once
            });
            var cacheDevice = new RemoteCacheDevice(cache, ownsCache: true);
            var tiered = new TieredDevice(cacheDevice, Devices.CreateLogDevice(dir.File("hlog.log")));
            var store = new StoreRig<long, TValue>(kind, shape, tiered, key => key, index: index);
            return new Rig<TValue> { Server = server, CacheDevice = cacheDevice, Tiered = tiered, Store = store };
        }
        catch
        {
            server.Dispose();
            throw;
        }
    }

    private void Report<TValue>(string what, Rig<TValue> rig, ConcurrentWorkload<TValue> workload, TimeSpan total)
        where TValue : unmanaged
    {
        _out.WriteLine($"{what}: {workload.Summary()}");
        _out.WriteLine($"  log {rig.Store.Kv.Log.TailAddress >> 10} KiB ({rig.Store.BytesOnDeviceOnly >> 10} KiB on the device only), " +
                       $"read cache {rig.Store.Kv.ReadCache?.TailAddress >> 10} KiB written; cache start segment {rig.CacheDevice.StartSegment}; " +
                       $"served by cache {rig.Tiered.ReadsServedBy(0)}, by SSD {rig.Tiered.ReadsServedBy(1)}, " +
                       $"fall-throughs {rig.Tiered.FallThroughs}, tier failures {rig.Tiered.TierFailures}; {total.TotalSeconds:F1} s since the test began");
    }

    /// <summary>
    /// A hash table of 64 buckets with every key's hash folded onto 100 codes (as FASTER's read-cache stress
    /// tests do): each hash chain runs through a hundredth of the keys and every version of them, so a read of a
    /// cold key walks dozens of records on the device, one read per hop, each issued from the previous read's
    /// completion; the read cache splices its copies into the same chains while other threads append to them.
    /// </summary>
    [Theory]
    [InlineData(4)]
    [InlineData(8)]  // more threads than this machine's cores: sessions preempted in the middle of a chain
    public Task LongHashChainsWithTheReadCache(int threads) => Hang.Guard($"{nameof(LongHashChainsWithTheReadCache)}({threads})", () =>
    {
        // 4 000 keys x 24 B: FASTER keeps 32 KiB of the log (about 1/3 of the first load) and 16 KiB of read
        // cache (small pages, so that it evicts, unlinking its records from chains, many times over). The cache
        // holds the whole log.
        RunChains(new LongKind(), new LogShape(PageBits: 12, MemoryBits: 15, SegmentBits: 20, Records: 4_000),
                  new IndexShape(Buckets: 64, HashModulo: 100, ReadCachePageBits: 10, ReadCacheMemoryBits: 14),
                  regions: 4, threads, operations: 24_000, sharedKeys: 32,
                  rig => Assert.Equal(0, rig.CacheDevice.StartSegment));
    }, GuardSeconds);

    /// <summary>
    /// Long chains (as above) through a log of 1 KiB records five times the cache (one 1 MiB region, a ring of
    /// four 256 KiB segments): a walk hops between records the cache still holds and records only the SSD has,
    /// each hop issued from the completion of the previous one, on whichever tier's thread that was.
    /// </summary>
    [Fact]
    public Task LongHashChainsAcrossBothTiers() => Hang.Guard(nameof(LongHashChainsAcrossBothTiers), () =>
    {
        RunChains(new KiloKind(), new LogShape(PageBits: 14, MemoryBits: 17, SegmentBits: 18, Records: 2_000),
                  new IndexShape(Buckets: 64, HashModulo: 100, ReadCachePageBits: 12, ReadCacheMemoryBits: 15),
                  regions: 1, threads: 4, operations: 6_000, sharedKeys: 16, rig =>
                  {
                      Assert.True(rig.CacheDevice.StartSegment > 4, $"the cache's start segment is {rig.CacheDevice.StartSegment}: the ring should have turned");
                      Assert.True(rig.Tiered.ReadsServedBy(0) > 0 && rig.Tiered.ReadsServedBy(1) > 0,
                                  $"hops served by cache {rig.Tiered.ReadsServedBy(0)}, by SSD {rig.Tiered.ReadsServedBy(1)}: both tiers should serve some");
                  });
    }, GuardSeconds);

    // Loads, runs the workload with 60 % reads and 15 % upserts, checks it, the chains' length and then the
    // caller's own assertions.
    private void RunChains<TValue>(ValueKind<TValue> kind, LogShape shape, IndexShape index, int regions, int threads,
                                   int operations, long sharedKeys, Action<Rig<TValue>> check, [CallerMemberName] string test = "")
        where TValue : unmanaged
    {
        var clock = Stopwatch.StartNew();
        using var dir = new ScratchDir("chains");
        using var rig = Open(dir, kind, shape, index, regions);
        rig.Store.Load();
        var workload = new ConcurrentWorkload<TValue>(kind, rig.Store, threads, sharedKeys)
        {
            OpsPerThread = operations / threads,
            ReadPercent = 60,
            UpsertPercent = 15,
        };
        workload.Run();
        long hops = rig.Tiered.ReadsServedBy(0) + rig.Tiered.ReadsServedBy(1);
        Report($"{test}, {threads} threads", rig, workload, clock.Elapsed);
        _out.WriteLine($"  {hops} device reads for {workload.PendingOperations} pending operations");
        workload.AssertClean();
        workload.VerifyAll();
        Assert.True(rig.Store.BytesOnDeviceOnly > rig.Store.Kv.Log.TailAddress / 2, "most of the log should be on the device only");
        Assert.True(workload.PendingReads > workload.Reads / 8, $"only {workload.PendingReads} of {workload.Reads} reads went to the device");
        Assert.True(hops > 10 * workload.PendingOperations, $"{hops} device reads for {workload.PendingOperations} pending operations: the chains are short");
        Assert.True(workload.ReadCacheCopies > 0, "no read was copied to the read cache");
        Assert.Empty(rig.Tiered.FailedTiers);
        check(rig);
        rig.Server.AssertRunning();
    }

    /// <summary>
    /// A cache of 4 MiB (4 segments of 1 MiB) under a log that grows past 8 times that while threads read,
    /// upsert and RMW: the ring switches segments 27 times or more with reads of both tiers in flight, until a read of
    /// a segment was in flight when a newer segment took its slot.
    /// </summary>
    [Theory]
    [InlineData(4)]
    [InlineData(8)]
    public Task EvictionUnderConcurrency(int threads) => Hang.Guard($"{nameof(EvictionUnderConcurrency)}({threads})", () =>
    {
        var clock = Stopwatch.StartNew();
        var kind = new KiloKind();
        const int Regions = 4;
        const long CacheBytes = Regions << 20;
        // 5 000 keys x 1 040 B: the first load is 5 MiB; FASTER keeps 1 MiB of the log in memory and 256 KiB of read cache.
        var shape = new LogShape(PageBits: 14, MemoryBits: 20, SegmentBits: 20, Records: 5_000);
        var index = new IndexShape(Buckets: 1 << 13, ReadCachePageBits: 14, ReadCacheMemoryBits: 18);
        using var dir = new ScratchDir("evict-mt");
        using var rig = Open(dir, kind, shape, index, Regions);
        rig.Store.Load();
        int startBefore = rig.CacheDevice.StartSegment;
        long cacheBefore = rig.Tiered.ReadsServedBy(0), ssdBefore = rig.Tiered.ReadsServedBy(1);
        long heldBefore = rig.CacheDevice.ReadsThatHeldASwitch;
        // Reads of the oldest segment are few, so one in flight as its slot changes hands is rare (0-3 in 27
        // switches, and in about half the runs none in the first 28; then one in ~80 switches on average, 230 seen):
        // the threads go on until it has happened, within a budget of operations that covers ~1 000 switches.
        var workload = new ConcurrentWorkload<KiloValue>(kind, rig.Store, threads, sharedKeys: 16)
        {
            OpsPerThread = 2_400_000 / threads,  // a cap: the threads stop once the log is 8 times the cache and a read held a switch
            ReadPercent = 40,
            UpsertPercent = 35,
            StopWhen = () => rig.Store.Kv.Log.TailAddress >= 8 * CacheBytes && rig.CacheDevice.ReadsThatHeldASwitch > heldBefore,
        };
        workload.Run();
        int startAfter = rig.CacheDevice.StartSegment;
        long held = rig.CacheDevice.ReadsThatHeldASwitch - heldBefore;
        long cacheReads = rig.Tiered.ReadsServedBy(0) - cacheBefore, ssdReads = rig.Tiered.ReadsServedBy(1) - ssdBefore;
        Report($"eviction, {threads} threads", rig, workload, clock.Elapsed);
        _out.WriteLine($"  during the run: start segment {startBefore} -> {startAfter} ({held} reads in flight when their segment was evicted), " +
                       $"device reads served by cache {cacheReads}, by SSD {ssdReads}");
        workload.AssertClean();
        workload.VerifyAll();
        Assert.True(rig.Store.Kv.Log.TailAddress >= 8 * CacheBytes,
                    $"the log reached only {rig.Store.Kv.Log.TailAddress >> 20} MiB in {workload.Operations} operations");
        Assert.True(held > 0, $"no read was in flight when its segment was evicted, in {startAfter - startBefore} switches");
        Assert.True(startAfter - startBefore >= 16, $"the cache's start segment moved only from {startBefore} to {startAfter} while the threads ran");
        Assert.True(cacheReads > 0 && ssdReads > 0, $"reads during the run: cache {cacheReads}, SSD {ssdReads}; both tiers should serve some");
        Assert.True(workload.ReadCacheCopies > 0, "no read was copied to the read cache");
        Assert.Empty(rig.Tiered.FailedTiers);
        rig.Server.AssertRunning();
    }, GuardSeconds);
}

/// <summary>
/// Threads each with a FASTER session doing reads, upserts and RMWs in batches (issue, then
/// CompletePendingWithOutputs), every result checked:
/// <list type="bullet">
/// <item>keys 0 .. Records - sharedKeys - 1 are owned: thread t alone updates the keys k with k % threads == t and
/// knows their exact version (a batch touches a key at most once, and every batch is completed before the next);</item>
/// <item>the last <c>sharedKeys</c> keys are shared: every thread RMWs (+1) and reads them. A read must see at least
/// the RMWs completed before it was issued (and what this thread saw before), at most those issued before it
/// completed; an RMW's result likewise, plus its own increment.</item>
/// </list>
/// A value that is not a whole value of its key (torn, another key's record, garbage) is wrong whatever its version.
/// </summary>
internal sealed class ConcurrentWorkload<TValue> where TValue : unmanaged
{
    private const int MaxErrorsKept = 10;

    private readonly ValueKind<TValue> _kind;
    private readonly StoreRig<long, TValue> _store;
    private readonly int _threads;
    private readonly long _owned;
    private readonly long _shared;
    private readonly long[] _issued;     // RMWs issued per shared key
    private readonly long[] _completed;  // RMWs known complete per shared key
    private readonly long[] _expected;   // versions of owned keys (each written by its owner only, read after the threads end)
    private readonly ConcurrentQueue<string> _errors = new();
    private long _wrong, _notFound, _reads, _pendingReads, _rmws, _pendingRmws, _upserts, _readCacheCopies;
    private TimeSpan _elapsed;

    public ConcurrentWorkload(ValueKind<TValue> kind, StoreRig<long, TValue> store, int threads, long sharedKeys)
    {
        _kind = kind;
        _store = store;
        _threads = threads;
        _shared = sharedKeys;
        _owned = store.Records - sharedKeys;
        _issued = new long[sharedKeys];
        _completed = new long[sharedKeys];
        _expected = new long[_owned];
    }

    public int OpsPerThread { get; init; } = 1000;
    public int Batch { get; init; } = 32;
    public int ReadPercent { get; init; } = 50;
    public int UpsertPercent { get; init; } = 20;  // of owned keys; the rest of the operations are RMWs
    public Func<bool>? StopWhen { get; init; }

    public long Reads => Interlocked.Read(ref _reads);
    public long PendingReads => Interlocked.Read(ref _pendingReads);
    public long ReadCacheCopies => Interlocked.Read(ref _readCacheCopies);
    public long PendingOperations => Interlocked.Read(ref _pendingReads) + Interlocked.Read(ref _pendingRmws);
    public long Operations => Interlocked.Read(ref _reads) + Interlocked.Read(ref _rmws) + Interlocked.Read(ref _upserts);

    /// <summary>Runs the threads to the end.</summary>
    public void Run()
    {
        var failures = new ConcurrentQueue<Exception>();
        var start = new Barrier(_threads + 1);
        var workers = new Thread[_threads];
        for (int t = 0; t < _threads; t++)
        {
            int id = t;
            workers[t] = new Thread(() =>
            {
                try
                {
                    start.SignalAndWait();
                    Work(id);
                }
                catch (Exception e)
                {
                    failures.Enqueue(e);
                }
            }) { IsBackground = true, Name = $"session {t}" };
            workers[t].Start();
        }
        start.SignalAndWait();
        var clock = Stopwatch.StartNew();
        foreach (var worker in workers)
            worker.Join();
        _elapsed = clock.Elapsed;
        if (!failures.IsEmpty)
            throw new AggregateException("a session thread failed", failures);
    }

    private enum OpKind { Read, Upsert, Rmw }

    private record struct Op(OpKind Kind, long Low);

    private void Work(int thread)
    {
        using var session = _store.NewSession();
        var rng = new Random(1000 + thread);
        var lastSeen = new long[_shared];  // the highest version of each shared key this thread has seen
        var batch = new Dictionary<long, Op>(Batch);
        long ownedByMe = (_owned - thread + _threads - 1) / _threads;
        var increment = _kind.Make(0, 1);
        for (int done = 0; done < OpsPerThread && !(StopWhen?.Invoke() ?? false);)
        {
            batch.Clear();
            for (; batch.Count < Batch && done < OpsPerThread; done++)
            {
                bool shared = _shared > 0 && rng.Next(4) == 0;
                long key = shared ? _owned + rng.NextInt64(_shared) : rng.NextInt64(ownedByMe) * _threads + thread;
                if (batch.ContainsKey(key))
                    continue;
                int dice = rng.Next(100);
                var kind = dice < ReadPercent ? OpKind.Read : !shared && dice < ReadPercent + UpsertPercent ? OpKind.Upsert : OpKind.Rmw;
                TValue output = default;
                Status status;
                Op op;
                switch (kind)
                {
                    case OpKind.Read:
                        op = new(kind, shared ? Math.Max(Volatile.Read(ref _completed[key - _owned]), lastSeen[key - _owned]) : _expected[key]);
                        status = session.Read(ref key, ref output);
                        Interlocked.Increment(ref _reads);
                        if (status.IsPending)
                            Interlocked.Increment(ref _pendingReads);
                        break;
                    case OpKind.Upsert:
                        op = new(kind, ++_expected[key]);
                        var value = _kind.Make(key, op.Low);
                        status = session.Upsert(ref key, ref value);
                        Interlocked.Increment(ref _upserts);
                        break;
                    default:
                        if (shared)
                        {
                            op = new(kind, Math.Max(Volatile.Read(ref _completed[key - _owned]), lastSeen[key - _owned]) + 1);
                            Interlocked.Increment(ref _issued[key - _owned]);
                        }
                        else
                        {
                            op = new(kind, ++_expected[key]);
                        }
                        status = session.RMW(ref key, ref increment, ref output);
                        Interlocked.Increment(ref _rmws);
                        if (status.IsPending)
                            Interlocked.Increment(ref _pendingRmws);
                        break;
                }
                batch.Add(key, op);
                if (!status.IsPending)
                    Finish(key, op, status, output, lastSeen);
            }
            session.CompletePendingWithOutputs(out var outputs, wait: true);
            using (outputs)
            {
                while (outputs.Next())
                {
                    ref var completed = ref outputs.Current;
                    long key = completed.Key;
                    Finish(key, batch[key], completed.Status, completed.Output, lastSeen);
                }
            }
        }
    }

    private void Finish(long key, Op op, Status status, TValue output, long[] lastSeen)
    {
        bool shared = key >= _owned;
        if (status.IsFaulted || status.IsCanceled || (op.Kind != OpKind.Upsert && !status.Found))
        {
            Interlocked.Increment(ref _notFound);
            Error($"{op.Kind} of key {key}: status {status}");
            if (shared && op.Kind == OpKind.Rmw)
                Interlocked.Increment(ref _completed[key - _owned]);
            return;
        }
        if (status.Record.CopiedToReadCache)
            Interlocked.Increment(ref _readCacheCopies);
        if (op.Kind == OpKind.Upsert)
            return;
        long? version = _kind.VersionOf(output, key);
        if (!shared)
        {
            if (version != op.Low)
                Wrong(key, op, _kind.Check(output, key, op.Low) ?? "?");
            return;
        }
        int s = (int)(key - _owned);
        long high = Volatile.Read(ref _issued[s]);
        if (version is not { } v || v < op.Low || v > high)
            Wrong(key, op, $"version {(version is null ? "(not a value of this key)" : version)}, expected {op.Low}..{high}");
        else if (v > lastSeen[s])
            lastSeen[s] = v;
        if (op.Kind == OpKind.Rmw)
            Interlocked.Increment(ref _completed[s]);
    }

    private void Wrong(long key, Op op, string what)
    {
        Interlocked.Increment(ref _wrong);
        Error($"{op.Kind} of {(key >= _owned ? "shared" : "owned")} key {key}: {what}");
    }

    private void Error(string message)
    {
        if (_errors.Count < MaxErrorsKept)
            _errors.Enqueue(message);
    }

    /// <summary>With the threads done: every key holds exactly its owner's last version, or every RMW of it.</summary>
    public void VerifyAll() => _store.ReadBackAll(key => key < _owned ? _expected[key] : _issued[key - _owned]);

    public void AssertClean()
    {
        if (_wrong > 0 || _notFound > 0)
            throw new XunitException($"{_wrong} wrong results and {_notFound} failed operations of {Operations}; first: {string.Join("; ", _errors)}");
    }

    public string Summary()
    {
        double seconds = Math.Max(_elapsed.TotalSeconds, 1e-9);
        return $"{_threads} threads, {Operations} operations in {_elapsed.TotalSeconds:F1} s ({Operations / seconds:F0}/s): " +
               $"{_reads} reads ({_pendingReads} to the device, {_readCacheCopies} copied to the read cache), " +
               $"{_rmws} RMWs ({_pendingRmws} pending), {_upserts} upserts; {_wrong} wrong, {_notFound} failed";
    }
}
