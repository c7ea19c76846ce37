using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using FASTER.core;
using RemoteCache.Benchmarks.Ycsb.Baselines;
using RemoteCache.Device;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>One measured run phase.</summary>
public sealed record RunResult(string Device, string Workload, string Distribution, int Threads, int ValueBytes,
                               long Records, long Operations, double Seconds, double MeanUs, double P50Us, double P99Us,
                               long Errors, string Note)
{
    public double OpsPerSecond => Operations / Seconds;

    /// <summary>Which round of the run measured it (1-based); every device runs each phase once per round.</summary>
    public int Round { get; init; } = 1;

    /// <summary>Managed bytes the process allocated per operation during the phase (FASTER's pending reads allocate).</summary>
    public double AllocatedPerOp { get; init; }

    /// <summary>This process's CPU time per operation during the phase (Garnet's runs: its server and its clients; 0: not measured).</summary>
    public double CpuUsPerOp { get; init; }

    /// <summary>The phase's operation latencies (for the latency CDFs); not serialized with the row.</summary>
    [System.Text.Json.Serialization.JsonIgnore]
    public Histogram? Latency { get; init; }
}

/// <summary>A device's loaded store in a run (FASTER's or Garnet's): phases run on it round after round, until it is disposed.</summary>
public interface IBenchStore : IDisposable
{
    string Device { get; }
}

/// <summary>What the rounds (<see cref="Program"/>) need of a store's runner: load a device's store, run a timed phase on it.</summary>
public interface IStoreRunner<TStore> where TStore : IBenchStore
{
    TStore Open(string device);

    RunResult RunPhase(TStore store, Distribution distribution, int threads, int round);
}

/// <summary>Shared pieces the device configurations use: the cache server, the Samba server, the data folder.</summary>
public sealed class RunEnvironment
{
    /// <summary>The remotecache device over an encrypted cache (AES-256-GCM blocks of a FASTER sector, a key made for the run).</summary>
    public const string EncryptedDevice = "remotecache-encrypted";

    public required string DataDir;
    public required Func<long, bool, RemoteCacheClient> OpenCache;  // a cache of at least that many bytes; encrypted?
    public required Func<SambaServer> Samba;
}

/// <summary>What the runner reports while it works (the live display).</summary>
public interface IProgressSink
{
    void Phase(string description, double total);
    void Advance(double done);
}

/// <summary>
/// Loads one FasterKV per device with the same records and memory budget, then runs the workload phases on it:
/// warm-up (not measured) and a timed run per (distribution, thread count). Each thread has its own session and
/// keeps up to <see cref="YcsbOptions.Depth"/> operations pending on the device, as FASTER's own benchmark does.
/// </summary>
public sealed class Runner<TValue, TValues> : IStoreRunner<Runner<TValue, TValues>.Store> where TValue : unmanaged where TValues : IValues<TValue>
{
    private readonly YcsbOptions _o;
    private readonly RunEnvironment _env;
    private readonly IProgressSink _progress;

    public Runner(YcsbOptions options, RunEnvironment env, IProgressSink progress)
    {
        _o = options;
        _env = env;
        _progress = progress;
    }

    public static long RecordBytes => 8 + 8 + ((TValues.Bytes + 7) & ~7);

    public static LogShape Shape(YcsbOptions o, bool everythingInMemory) => LogShape.For(o.Records * RecordBytes, everythingInMemory ? null : o.MemoryFraction);

    /// <summary>A device's loaded store: phases run on it round after round, until it is disposed.</summary>
    public sealed class Store : IBenchStore
    {
        internal Store(string device, FasterKV<long, TValue> kv, IDevice log, TieredDevice? tiered, string dir, string note, long records)
        {
            Inserted = new InsertCounter(records);
            Device = device;
            Kv = kv;
            Log = log;
            Tiered = tiered;
            Dir = dir;
            Note = note;
        }

        public string Device { get; }
        internal FasterKV<long, TValue> Kv { get; }
        internal IDevice Log { get; }
        internal TieredDevice? Tiered { get; }
        internal string Dir { get; }
        internal string Note { get; set; }
        internal int FailedTiersReported { get; set; }

        /// <summary>Keys inserted into this store: they stay from one phase and round to the next, as in one YCSB run.</summary>
        internal InsertCounter Inserted { get; }

        public void Dispose()
        {
            Kv.Dispose();
            Log.Dispose();
            if (Directory.Exists(Dir))
                Directory.Delete(Dir, recursive: true);
        }
    }

    /// <summary>Creates the device's store and loads every record into it.</summary>
    public Store Open(string device)
    {
        bool inMemory = device == "memory";
        var shape = Shape(_o, inMemory);
        string dir = Path.Combine(_env.DataDir, device);
        if (Directory.Exists(dir))
            Directory.Delete(dir, recursive: true);
        Directory.CreateDirectory(dir);
        TieredDevice? tiered = null;
        IDevice log = device switch
        {
            "memory" => new RamDevice(device),
            "remotecache" or RunEnvironment.EncryptedDevice =>
                // Whole segments of the cache: an encrypted one holds a little more than asked (its blocks after the key check).
                tiered = new TieredDevice(new RemoteCacheDevice(_env.OpenCache(shape.CacheBytes, device == RunEnvironment.EncryptedDevice), ownsCache: true,
                                                                capacity: shape.CacheBytes),
                                          new DirectFileDevice(Path.Combine(dir, "hlog"))),
            "ssd" => new DirectFileDevice(Path.Combine(dir, "hlog")),
            "smb" => new SmbFileDevice($"{_env.Samba().ShareUrl}/{device}-{System.Environment.ProcessId}", SambaServer.User, _env.Samba().Password),
            "faster-local" => Devices.CreateLogDevice(Path.Combine(dir, "hlog.log"), deleteOnClose: true),
            "ram-inline" => new RamDevice(device, inline: true),
            _ => throw new ArgumentException($"unknown device '{device}'"),
        };
        var kv = new FasterKV<long, TValue>(
            (long)System.Numerics.BitOperations.RoundUpToPowerOf2((ulong)Math.Max(1024, _o.Records / 2)),
            new LogSettings
            {
                LogDevice = log,
                PageSizeBits = shape.PageBits,
                MemorySizeBits = shape.MemoryBits,
                SegmentSizeBits = shape.SegmentBits,
            });
        var store = new Store(device, kv, log, tiered, dir, "", _o.Records);
        try
        {
            Load(kv, device);
        }
        catch
        {
            store.Dispose();
            throw;
        }
        store.Note = inMemory ? (_o.Workload.Insert > 0 ? "loaded log in memory, inserts spill to RAM" : "log in memory") : $"{(double)(kv.Log.TailAddress - kv.Log.BeginAddress) / (1L << shape.MemoryBits):0.#}x memory";
        return store;
    }

    /// <summary>Runs one measured phase (after its warm-up) on a loaded store.</summary>
    public RunResult RunPhase(Store store, Distribution distribution, int threads, int round)
    {
        var result = RunPhase(store.Kv, store.Device, store.Inserted, distribution, threads, store.Note, round);
        if (store.Tiered is { } tiered && tiered.FailedTiers.Count > store.FailedTiersReported)
        {
            store.FailedTiersReported = tiered.FailedTiers.Count;
            Console.Error.WriteLine($"{store.Device}: tier(s) {string.Join(",", tiered.FailedTiers)} failed during the run");
        }
        return result;
    }

    private void Load(FasterKV<long, TValue> kv, string device)
    {
        _progress.Phase($"{device}: load {_o.Records:N0} records", _o.Records);
        using var session = kv.For(new YcsbFunctions<TValue, TValues>()).NewSession<YcsbFunctions<TValue, TValues>>();
        for (long key = 0; key < _o.Records; key++)
        {
            session.Upsert(key, TValues.Make(key, 0));
            if ((key & 0xffff) == 0xffff)
                _progress.Advance(key + 1);
        }
        session.CompletePending(wait: true);
        _progress.Advance(_o.Records);
    }

    private RunResult RunPhase(FasterKV<long, TValue> kv, string device, InsertCounter inserted, Distribution distribution, int threads,
                               string note, int round)
    {
        var workers = new Worker[threads];
        for (int t = 0; t < threads; t++)
            workers[t] = new Worker(this, kv, KeyChoosers.For(distribution, _o, inserted), inserted, seed: 1000 * t + (int)distribution);
        string label = $"{device}: {_o.Workload.Name} {distribution.ToString().ToLowerInvariant()}, {threads} thread{(threads > 1 ? "s" : "")}" +
                       (_o.Rounds > 1 ? $", round {round}/{_o.Rounds}" : "");
        var window = TimedPhase.Run(_o, _progress, label, "ycsb", workers.Select(w => (PhaseWorker)w.Run).ToArray(), () => Sum(workers));
        var latency = new Histogram();
        long errors = 0;
        foreach (var w in workers)
        {
            latency.Add(w.Functions.Latency);
            errors += w.Functions.Errors + w.Errors;
        }
        return new RunResult(device, _o.Workload.Name, distribution.ToString().ToLowerInvariant(), threads, TValues.Bytes, _o.Records,
                             window.Operations, window.Seconds, latency.MeanNs / 1000, latency.Quantile(0.5) / 1000.0, latency.Quantile(0.99) / 1000.0,
                             errors, note) { Round = round, AllocatedPerOp = window.AllocatedPerOp, Latency = latency };
    }

    /// <summary>
    /// Runs <paramref name="threads"/> workers on a loaded store for <paramref name="duration"/> and samples the
    /// throughput every <paramref name="period"/> (the dynamics timelines); <paramref name="atSample"/> is called after
    /// each sample with the time since the start (it may set events off). Errors are wrong reads.
    /// </summary>
    public (IReadOnlyList<(double Seconds, double OpsPerSecond)> Samples, long Errors) RunTimeline(
        Store store, Distribution distribution, int threads, TimeSpan duration, TimeSpan period, Action<TimeSpan> atSample)
    {
        var workers = new Worker[threads];
        var stop = 0;
        var measuring = 0;
        using var started = new CountdownEvent(threads);
        var threadList = new Thread[threads];
        for (int t = 0; t < threads; t++)
        {
            var w = workers[t] = new Worker(this, store.Kv, KeyChoosers.For(distribution, _o, store.Inserted), store.Inserted, seed: 7000 * t + (int)distribution);
            threadList[t] = new Thread(() => w.Run(started, ref stop, ref measuring)) { IsBackground = true, Name = $"ycsb timeline {t}" };
            threadList[t].Start();
        }
        started.Wait();
        var samples = new List<(double, double)>();
        var clock = Stopwatch.StartNew();
        long last = Sum(workers);
        var lastAt = TimeSpan.Zero;
        try
        {
            for (var next = period; next <= duration; next += period)
            {
                var wait = next - clock.Elapsed;
                if (wait > TimeSpan.Zero)
                    Thread.Sleep(wait);
                var now = clock.Elapsed;
                if (now - lastAt < period / 2)
                    continue;  // a late sample's successors would span almost nothing
                long ops = Sum(workers);
                samples.Add((now.TotalSeconds, (ops - last) / (now - lastAt).TotalSeconds));
                (last, lastAt) = (ops, now);
                atSample(now);
            }
        }
        finally
        {
            Volatile.Write(ref stop, 1);
            foreach (var t in threadList)
                t.Join();
        }
        long errors = workers.Sum(w => w.Functions.Errors + w.Errors);
        return (samples, errors);
    }

    private static long Sum(Worker[] workers)
    {
        long n = 0;
        foreach (var w in workers)
            n += Volatile.Read(ref w.Completed);
        return n;
    }

    private sealed class Worker
    {
        private readonly Runner<TValue, TValues> _runner;
        private readonly FasterKV<long, TValue> _kv;
        private readonly IKeyChooser _chooser;
        private readonly InsertCounter _inserted;
        private readonly Random _rng;
        public readonly YcsbFunctions<TValue, TValues> Functions = new();
        public long Completed;
        public long Errors;

        public Worker(Runner<TValue, TValues> runner, FasterKV<long, TValue> kv, IKeyChooser chooser, InsertCounter inserted, int seed)
        {
            _runner = runner;
            _kv = kv;
            _chooser = chooser;
            _inserted = inserted;
            _rng = new Random(seed);
        }

        public void Run(CountdownEvent started, ref int stop, ref int measuring)
        {
            var o = _runner._o;
            var f = Functions;
            using var session = _kv.For(f).NewSession<YcsbFunctions<TValue, TValues>>();
            var workload = o.Workload;
            var delta = TValues.Make(0, 1);
            started.Signal();
            while (Volatile.Read(ref stop) == 0)
            {
                f.Recording = Volatile.Read(ref measuring) != 0;
                // Completed counts issued operations; those still pending are bounded by Depth and drained below.
                for (int i = 0; i < 64; i++)
                {
                    long start = Stopwatch.GetTimestamp();
                    switch (workload.Choose(_rng.NextDouble()))
                    {
                        case Workload.Op.Read:
                        {
                            long key = NextKey();
                            TValue input = default, output = default;
                            var status = session.Read(ref key, ref input, ref output, start);
                            if (status.IsPending)
                                f.Outstanding++;
                            else
                                Done(status.Found && TValues.Stamp(output) / 1000 == key, start);
                            break;
                        }
                        case Workload.Op.Update:
                        {
                            long key = NextKey();
                            session.Upsert(key, TValues.Make(key, 1));
                            Done(true, start);
                            break;
                        }
                        case Workload.Op.Insert:
                        {
                            long key = _inserted.Take();
                            session.Upsert(key, TValues.Make(key, 0));  // in FASTER's mutable memory: done when it returns
                            _inserted.Acknowledge(key);
                            Done(true, start);
                            break;
                        }
                        case Workload.Op.ReadModifyWrite:
                        {
                            long key = NextKey();
                            TValue input = delta, output = default;
                            var status = session.RMW(ref key, ref input, ref output, start);
                            if (status.IsPending)
                                f.Outstanding++;
                            else
                                Done(true, start);
                            break;
                        }
                        case Workload.Op.Scan:
                        {
                            // A hash index has no key order: a scan reads consecutive keys one by one, as a whole.
                            long first = NextKey();
                            int length = 1 + _rng.Next(Workload.MaxScanLength);
                            bool recording = f.Recording;
                            f.Recording = false;
                            for (long key = first; key < first + length && key <= _inserted.Last; key++)
                            {
                                TValue input = default, output = default;
                                long k = key;
                                if (session.Read(ref k, ref input, ref output, start).IsPending)
                                    f.Outstanding++;
                            }
                            session.CompletePending(wait: true);
                            f.Recording = recording;
                            Done(true, start);
                            break;
                        }
                    }
                    Completed++;
                    while (f.Outstanding >= o.Depth)
                        session.CompletePending(wait: false);
                }
                session.CompletePending(wait: false);
            }
            session.CompletePending(wait: true);

            long NextKey() => _inserted.Draw(_chooser, _rng);

            void Done(bool right, long start)
            {
                if (!right)
                    Errors++;
                if (f.Recording)
                    f.Latency.Record(YcsbFunctions<TValue, TValues>.Elapsed(start));
            }
        }
    }
}

/// <summary>The FASTER log geometry of a run: page, memory and segment sizes as bit counts.</summary>
/// <summary>A log's size and the store's memory, page and segment sizes for it (FASTER's and Garnet's runs size theirs alike).</summary>
public sealed record LogShape(int PageBits, int MemoryBits, int SegmentBits, long LogBytes)
{
    /// <summary>The store's log memory: 2^MemoryBits (FASTER's must be a power of two), or set closer (Garnet's need not).</summary>
    public long MemoryBytes { get; init; } = 1L << MemoryBits;

    /// <summary>Memory at least <paramref name="memoryFraction"/> times smaller than the log, or (null) holding all of it.</summary>
    public static LogShape For(long logBytes, double? memoryFraction)
    {
        int memoryBits = memoryFraction is { } fraction
            ? Math.Max(16, (int)Math.Floor(Math.Log2(logBytes / fraction)))
            : Math.Max(20, (int)Math.Ceiling(Math.Log2(logBytes * 1.5)));
        int pageBits = Math.Clamp(memoryBits - 6, 12, 22);
        int segmentBits = Math.Clamp(memoryBits + 1, 20, 28);
        return new LogShape(pageBits, memoryBits, segmentBits, logBytes);
    }

    /// <summary>The cache holds the whole log (as Redy's remote tier holds the working set), in whole segments.</summary>
    public long CacheBytes
    {
        get
        {
            long segment = 1L << SegmentBits;
            return (LogBytes * 5 / 4 + segment - 1) / segment * segment + segment;
        }
    }
}
